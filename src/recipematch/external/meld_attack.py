"""The MELD attack's released rows as pair rows (the paper, Section 6 and Appendix D).

The peer's release keeps each attack arm's trainer rows (``data/meld_attack/pairs_<group>.jsonl``):
anchor = ``anchor_text``, positive = ``positive_text`` (the statement in the other field's
dialect), negatives = the row's same-framing statements, ``meta`` the domain, framings, round,
direction and generator model. :func:`read_attack_rows` checks each row and returns pair rows
(:mod:`recipematch.pairs`) whose provenance names the prompt they were generated under and its
hash (:func:`attack_prompt_sha256`, over the prompt files shipped in ``recipematch/prompts``).
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from typing import Any

from recipematch.errors import RecipematchError, short_repr
from recipematch.external import check_rows_file, iter_row_objects
from recipematch.external.meld import is_text
from recipematch.pairs import sort_rows
from recipematch.rules import MELD_ATTACK_SYSTEM

__all__ = ["attack_prompt_sha256", "read_attack_rows"]



def attack_prompt_sha256(system_name: str) -> str:
    """The identity of a MELD attack prompt (Appendix D): SHA-256 of the system prompt's bytes,
    a NUL byte, the first user turn's, a NUL byte, the later user turn's (the files shipped in
    ``recipematch/prompts``: ``<system_name>.system.txt``, ``meld_generate.user_first.txt``,
    ``meld_generate.user_later.txt``), as 64 hex characters.

    Raises:
        RecipematchError: a prompt file is missing.
    """
    from importlib import resources

    base = resources.files("recipematch").joinpath("prompts")
    parts = []
    for f in (f"{system_name}.system.txt", "meld_generate.user_first.txt", "meld_generate.user_later.txt"):
        path = base.joinpath(f)
        if not path.is_file():
            raise RecipematchError(f"MELD attack: prompt file {f} is not shipped")
        parts.append(path.read_bytes())
    return hashlib.sha256(b"\x00".join(parts)).hexdigest()


def read_attack_rows(path: str | os.PathLike, key: str, *, revision: str = "") -> tuple[list[dict], dict[str, Any]]:
    """The released rows of MELD attack row set ``key`` (:data:`recipematch.rules.MELD_ATTACKS`)
    as pair rows in canonical order (:mod:`recipematch.pairs`), checked.

    A released row is ``{"source_id", "anchor_text", "positive_text", "negatives": [{"text"}],
    "meta": {"group", "domain", "anchor_framing", "positive_framing", "generator_model", ...}}``.

    Returns:
        ``(rows, counts)``: counts hold ``rows_in``, ``rows_out``, ``negatives``, ``by_domain``,
        ``generator_models``, the prompt and its hash.

    Raises:
        RecipematchError: a missing file (naming it and where the release keeps it), a line that
            is not JSON, a field missing or of the wrong type (file, line and field), a row of
            another group than ``key``, a source id given twice in one ``meta.direction`` (the
            release writes some pairs in both directions: those stay, one source with two rows,
            so a budget of one row per source draws one and both land on the same split), or a
            file without rows.
    """
    if key not in MELD_ATTACK_SYSTEM:
        raise RecipematchError(f"MELD attack: unknown row set {key!r}; choose from {sorted(MELD_ATTACK_SYSTEM)}")
    path = check_rows_file(path, key, f"data/meld_attack/pairs_{key.removeprefix('meld_')}.jsonl")
    system = MELD_ATTACK_SYSTEM[key]
    sha = attack_prompt_sha256(system)
    group = key.removeprefix("meld_")
    rows, seen = [], set()
    domains: dict[str, int] = defaultdict(int)
    models: dict[str, int] = defaultdict(int)
    for where, obj in iter_row_objects(path, ("source_id", "anchor_text", "positive_text")):
        negs = obj.get("negatives")
        if (not isinstance(negs, list) or not negs
                or not all(isinstance(n, dict) and is_text(n.get("text")) for n in negs)):
            raise RecipematchError(f"{where}: field 'negatives' must be a non-empty list of objects with a non-empty "
                                   "'text' (the attack's rows carry same-framing negatives)")
        meta = obj.get("meta")
        if not isinstance(meta, dict) or not is_text(meta.get("generator_model")):
            raise RecipematchError(f"{where}: field 'meta.generator_model' must be a non-empty string")
        if meta.get("group") != group:
            raise RecipematchError(f"{where}: field 'meta.group' is {short_repr(meta.get('group'), 40)}, not this row "
                                   f"set's {group!r} (it decides the prompt the provenance names)")
        for k in ("domain", "topic", "anchor_framing", "positive_framing", "direction"):
            if k in meta and meta[k] is not None and not isinstance(meta[k], str):
                raise RecipematchError(f"{where}: field 'meta.{k}' must be a string, got {short_repr(meta[k], 40)}")
        if "round" in meta and (isinstance(meta["round"], bool) or not isinstance(meta["round"], (int, type(None)))):
            raise RecipematchError(f"{where}: field 'meta.round' must be an integer, got {short_repr(meta['round'], 40)}")
        sid = obj["source_id"]
        unit = (sid, meta.get("direction"))  # the release writes some pairs in both directions
        if unit in seen:
            raise RecipematchError(f"{where}: source_id {sid!r} is given twice in direction {meta.get('direction')!r}")
        seen.add(unit)
        model = meta["generator_model"]
        prov = {"generator": system, "prompt_sha256": sha, "model_id": model, "judge": None}
        extra = {k: meta.get(k) for k in ("domain", "topic", "anchor_framing", "positive_framing", "direction", "round")
                 if k in meta}
        # rows this project generated (meld_generate@<name>) are not the release's, whatever revision is set
        made = meta.get("generated_by") if isinstance(meta.get("generated_by"), str) else None
        released = {"generated_by": made} if made else {"released": revision or True}
        rows.append({"source_id": sid, "anchor": obj["anchor_text"], "positive": obj["positive_text"],
                     "positive_provenance": {**prov, **released, **extra},
                     "negatives": [{"text": n["text"], **prov, "edit": None, "counterexample": None} for n in negs]})
        domains[str(meta.get("domain"))] += 1
        models[model] += 1
    if not rows:
        raise RecipematchError(f"attacks.{key}.rows: {path} holds no rows")
    counts = {"rows_in": len(rows), "rows_out": len(rows), "sources": len({r["source_id"] for r in rows}),
              "negatives": sum(len(r["negatives"]) for r in rows),
              "by_domain": dict(sorted(domains.items())), "generator_models": dict(sorted(models.items())),
              "prompt": system, "prompt_sha256": sha, "input_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
              "revision": revision}
    return sort_rows(rows), counts
