"""The SABER-Math attack's summary channel as pair rows (the paper, Section 6 and Appendix D).

SABER-Math finds candidate pairs partly by the overlap of LLM-written summaries of each
problem's solution idea (its core-idea prompt, shipped byte for byte as
``recipematch/prompts/saber_core_idea.txt``). The paper's summary-channel arm trains on those
summaries themselves: anchor = a source problem, positive = the core-idea summary written for
it, negatives = summaries written for other problems. The peer's release keeps the rows as
``data/saber_attack/pairs_summary_channel.jsonl``, one ``{"source_id", "positive_text",
"negatives": [{"text"}], "channel": "saber_summary"}`` object a line, without the anchor: a
row's anchor is the corpus problem whose id is its ``source_id`` (as for every released pair
file). :func:`read_summary_rows` checks each row, fills the anchor from the corpus and returns
pair rows (:mod:`recipematch.pairs`) whose provenance names the prompt and its SHA-256.

The summaries were written by Qwen3-32B-AWQ in place of SABER-Math's GPT-OSS-120B (Appendix D:
the attack is cross-vendor); the rows do not name their model, so the provenance records
:data:`recipematch.rules.SABER_ATTACK_MODEL` unless a row carries ``generator_model``.
The document channel's rows are not in the release. :func:`build_document_rows` builds them
from the same summaries by SABER-Math's own relevance rule (its Section 3.4: summary word
Jaccard above 0.211, the threshold the paper's attack used unchanged): anchor = a source
problem, positive = another source problem whose summary is relevant to the anchor's, negatives
= source problems whose summaries are not. The documents are the corpus problems as they are
(SABER-Math's document template is not shipped, so no template is applied).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

from recipematch.errors import RecipematchError, short_repr
from recipematch.external import check_rows_file, iter_row_objects
from recipematch.external.meld import is_text
from recipematch.pairs import sort_rows
from recipematch.rules import SABER_ATTACK_CHANNEL, SABER_ATTACK_MODEL, SABER_ATTACK_PROMPT, SABER_ATTACKS
from recipematch.saber import jaccard, summary_tokens, TAU_SUMM

__all__ = ["saber_prompt_sha256", "read_summary_rows", "build_document_rows"]


def saber_prompt_sha256() -> str:
    """SHA-256 (64 hex) of the shipped core-idea prompt's bytes (``saber_core_idea.txt``).

    Raises:
        RecipematchError: the prompt file is not shipped.
    """
    from importlib import resources

    path = resources.files("recipematch").joinpath("prompts", f"{SABER_ATTACK_PROMPT}.txt")
    if not path.is_file():
        raise RecipematchError(f"SABER attack: prompt file {SABER_ATTACK_PROMPT}.txt is not shipped")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_summary_rows(path: str | os.PathLike, key: str, corpus: Mapping[str, str], *,
                      revision: str = "") -> tuple[list[dict], dict[str, Any]]:
    """The released summary-channel rows of attack ``key`` (:data:`recipematch.rules.SABER_ATTACKS`)
    as pair rows in canonical order, each anchored on its source problem.

    Args:
        path: the released rows (JSONL). key: the row set's name.
        corpus: ``doc id -> problem text`` (the corpus stage's rows).
        revision: the release revision, recorded in each row's provenance.

    Returns:
        ``(rows, counts)``: counts hold ``rows_in``, ``rows_out``, ``sources``, ``negatives``,
        ``generator_models``, the prompt, its hash and the input's SHA-256.

    Raises:
        RecipematchError: a missing file, a line that is not JSON, a field missing or of the
            wrong type (file, line and field), a ``channel`` other than ``saber_summary``, a
            ``source_id`` given twice or not in the corpus, or a file without rows.
    """
    if key not in SABER_ATTACKS:
        raise RecipematchError(f"SABER attack: unknown row set {key!r}; choose from {list(SABER_ATTACKS)}")
    path = check_rows_file(path, key, "data/saber_attack/pairs_summary_channel.jsonl")
    sha = saber_prompt_sha256()
    rows: list[dict] = []
    seen: set[str] = set()
    models: dict[str, int] = {}
    for where, obj in iter_row_objects(path, ("source_id", "positive_text")):
        if obj.get("channel") != SABER_ATTACK_CHANNEL:
            raise RecipematchError(f"{where}: field 'channel' is {short_repr(obj.get('channel'), 40)}, not "
                                   f"{SABER_ATTACK_CHANNEL!r} (this row set is the summary channel)")
        negs = obj.get("negatives")
        if not isinstance(negs, list) or not all(isinstance(n, dict) and is_text(n.get("text")) for n in negs):
            raise RecipematchError(f"{where}: field 'negatives' must be a list of objects with a non-empty 'text'")
        model = obj.get("generator_model", SABER_ATTACK_MODEL)
        if not is_text(model):
            raise RecipematchError(f"{where}: field 'generator_model' must be a non-empty string")
        sid = obj["source_id"]
        if sid in seen:
            raise RecipematchError(f"{where}: source_id {sid!r} is given twice")
        seen.add(sid)
        anchor = corpus.get(sid)
        if not is_text(anchor):
            raise RecipematchError(f"{where}: source_id {sid!r} is not a problem of the corpus (a row's anchor is the "
                                   "corpus problem with its id)")
        prov = {"generator": SABER_ATTACK_PROMPT, "prompt_sha256": sha, "model_id": model, "judge": None}
        rows.append({"source_id": sid, "anchor": anchor, "positive": obj["positive_text"],
                     "positive_provenance": {**prov, "released": revision or True, "channel": SABER_ATTACK_CHANNEL},
                     "negatives": [{"text": n["text"], **prov, "edit": None, "counterexample": None} for n in negs]})
        models[model] = models.get(model, 0) + 1
    if not rows:
        raise RecipematchError(f"attacks.{key}.rows: {path} holds no rows")
    counts = {"rows_in": len(rows), "rows_out": len(rows), "sources": len(seen),
              "negatives": sum(len(r["negatives"]) for r in rows), "generator_models": dict(sorted(models.items())),
              "prompt": SABER_ATTACK_PROMPT, "prompt_sha256": sha,
              "input_sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "revision": revision}
    return sort_rows(rows), counts


def build_document_rows(path: str | os.PathLike, key: str, corpus: Mapping[str, str], *, seed: int,
                        negatives: int = 2, revision: str = "") -> tuple[list[dict], dict[str, Any]]:
    """The document channel of attack ``key`` (``saber_document``): pair rows built from the
    released summary-channel rows by SABER-Math's summary rule (module docstring).

    Each unordered pair of source problems whose summaries' token Jaccard exceeds
    :data:`recipematch.saber.TAU_SUMM` (:func:`recipematch.saber.summary_tokens`,
    :func:`recipematch.saber.jaccard`) gives one row, its direction drawn with ``seed``: anchor =
    one problem, positive = the other (never both directions: the reverse row could land in the
    other split of the matched budget, which splits by anchor source, and score a dev row the
    model trained on). ``negatives`` problems are drawn with ``seed`` from the sources whose
    Jaccard with the anchor is at or below the threshold. A source related to many others
    anchors many rows (as the paper's document channel: 11,461 rows from 4,119 sources).

    Args:
        path: the released summary-channel rows. key: the row set's name.
        corpus: ``doc id -> problem text``.
        seed: the directions' and negatives' draw. negatives: per row, >= 1.
        revision: the release revision of the summaries, recorded in each row's provenance.

    Returns:
        ``(rows, counts)``: counts add ``relevant_pairs``, ``rows_short_of_negatives``,
        ``pairs_same_text`` (two sources whose problems are one text: no row),
        ``summaries_without_tokens`` (a summary with no token left, e.g. not in Latin script:
        it relates to nothing) and the threshold to :func:`read_summary_rows`'s.

    Raises:
        RecipematchError: what :func:`read_summary_rows` raises (naming ``attacks.<key>.rows``),
            ``negatives`` < 1, or no row.
    """
    import numpy as np

    if isinstance(negatives, bool) or not isinstance(negatives, int) or negatives < 1:
        raise RecipematchError(f"attacks.{key}: negatives must be an integer >= 1, got {negatives!r}")
    summary_rows, counts = read_summary_rows(path, key, corpus, revision=revision)
    src = sorted(summary_rows, key=lambda r: r["source_id"])
    toks = [summary_tokens(r["positive"]) for r in src]
    rng = np.random.default_rng(seed)
    rows, short, relevant, same = [], 0, 0, 0
    sims = [[jaccard(toks[i], t) if j != i else -1.0 for j, t in enumerate(toks)] for i in range(len(src))]
    for i in range(len(src)):
        for j in range(i + 1, len(src)):
            if sims[i][j] <= TAU_SUMM:
                continue
            relevant += 1
            if src[i]["anchor"] == src[j]["anchor"]:
                same += 1
                continue
            a, b = (i, j) if rng.integers(2) == 0 else (j, i)
            texts = {src[a]["anchor"], src[b]["anchor"]}
            others = [k for k, v in enumerate(sims[a]) if 0.0 <= v <= TAU_SUMM and src[k]["anchor"] not in texts]
            if len(others) < negatives:
                short += 1
                continue
            pick = sorted(rng.choice(len(others), size=negatives, replace=False).tolist())
            prov = {k: v for k, v in src[a]["positive_provenance"].items() if k != "released"}
            prov.update(channel=key, rule=f"summary Jaccard > {TAU_SUMM}",  # built here, from released summaries
                        summaries_released=src[a]["positive_provenance"]["released"])
            base = {x: prov[x] for x in ("generator", "prompt_sha256", "model_id", "judge")}
            rows.append({"source_id": src[a]["source_id"], "anchor": src[a]["anchor"], "positive": src[b]["anchor"],
                         "positive_provenance": {**prov, "partner": src[b]["source_id"], "text": "corpus problem",
                                                 "summary_jaccard": round(sims[a][b], 6)},
                         "negatives": [{"text": src[others[k]]["anchor"], **base, "edit": None, "counterexample": None,
                                        "partner": src[others[k]]["source_id"], "written_by": "corpus problem"}
                                       for k in pick]})
    if not rows:
        raise RecipematchError(f"attacks.{key}.rows: no pair of the {len(src)} sources' summaries has a Jaccard above "
                               f"{TAU_SUMM} with enough negatives left ({short} short, {same} of one text); the "
                               "document channel is empty")
    counts = {**counts, "rows_out": len(rows), "sources": len({r["source_id"] for r in rows}),
              "negatives": sum(len(r["negatives"]) for r in rows), "relevant_pairs": relevant,
              "rows_short_of_negatives": short, "pairs_same_text": same,
              "summaries_without_tokens": sum(1 for t in toks if not t), "tau_summ": TAU_SUMM, "channel": key}
    return sort_rows(rows), counts
