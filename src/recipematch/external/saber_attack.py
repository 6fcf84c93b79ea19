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
The document channel (rows built on SABER-Math's document template) is not in the release.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError, short_repr
from recipematch.external import check_rows_file, iter_row_objects
from recipematch.external.meld import is_text

__all__ = ["saber_prompt_sha256", "read_summary_rows"]


def saber_prompt_sha256() -> str:
    """SHA-256 (64 hex) of the shipped core-idea prompt's bytes (``saber_core_idea.txt``).

    Raises:
        RecipematchError: the prompt file is not shipped.
    """
    from importlib import resources

    from recipematch.rules import SABER_ATTACK_PROMPT

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
    from recipematch.pairs import sort_rows
    from recipematch.rules import SABER_ATTACK_CHANNEL, SABER_ATTACK_MODEL, SABER_ATTACK_PROMPT, SABER_ATTACKS

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
