"""The MELD attack's generation, rebuilt (the paper, Section 6 and Appendix D): pairs of
equivalent statements in two subfields' dialects written by an LLM under the reconstructed
MELD procedure, screened by MELD's three-question check, and turned into the attack's rows.

The procedure, per domain pair (a row of the domain table: ``domain``, ``field_1``,
``field_2`` and a ``connection`` description):

1. **Generation** (Appendix F, "the reconstructed generation prompt"): the system prompt
   (``meld_generate``, or ``meld_altprompt`` for the rewritten-prompt control) asks for
   ``n_pairs`` pairs (MELD: 30 per call); round 1 sends the first user turn, every later round
   the later user turn with the topics already written for that domain pair, so later rounds
   extend rather than repeat. The paper's meld9 arm ran round 1 greedy (temperature 0).
2. **Parsing**: the answer is one JSON object ``{"pairs": [{"topic", "entry_1": {"framing",
   "statement"}, "entry_2": {...}}]}``. Statements are LaTeX, and a LaTeX command's backslash
   inside a JSON string (``\\mathbb``) is not a JSON escape, or is a wrong one (``\\frac``
   reads as a form feed): :func:`repair_latex_escapes` doubles every backslash that starts a
   LaTeX command or is no JSON escape before the answer is parsed. A pair outside the schema,
   with a framing other than the one asked for, or repeating a statement already written, is a
   counted record, never a row.
3. **Screen** (Appendix F, "the validity and equivalence screen"): each new pair goes to the
   ``meld_screen`` prompt; a pair is kept when both statements are valid and the two are
   equivalent; ``could_be_less_similar`` is recorded only (MELD used it to revise by hand).
4. **Rows**: each kept pair gives one row, the anchor one statement and the positive its
   partner (the direction drawn per pair, or both), with ``negatives`` same-framing statements
   drawn from the run's own kept pool (MELD does not say how its distractors were built;
   Appendix D), in the release's row schema so the ``attack@<key>`` stage reads them as it
   reads released rows.

Every random choice takes its seed from params; the same answers give byte-identical rows.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from recipematch.errors import RecipematchError, short_repr
from recipematch.external.meld import is_text
from recipematch.io import iter_jsonl_strict
from recipematch.llm.answer_json import load_answer_object

__all__ = ["DOMAIN_FIELDS", "read_domains", "repair_latex_escapes", "parse_generation", "parse_screen",
           "statement_key", "build_rows", "DIRECTIONS"]

#: the keys of one domain-table row (Appendix D: MELD's nine framing pairs, each with our connection text)
DOMAIN_FIELDS = ("domain", "field_1", "field_2", "connection")
#: how a kept pair becomes rows: one row in a direction drawn per pair, or a row each way
DIRECTIONS = ("random", "both")
_SCREEN_BOOLS = ("entry_1_valid", "entry_2_valid", "equivalent", "could_be_less_similar")
# a backslash that is not itself escaped and starts a LaTeX command (two or more letters, not a
# \uXXXX escape) or is followed by something that is no JSON escape at all
_BAD_ESCAPE = re.compile(r'(?<!\\)((?:\\\\)*)\\(?=(?!u[0-9a-fA-F]{4})[A-Za-z]{2,}|[bfnrt]\{|[^"\\/bfnrtu])')


def read_domains(path, where: str) -> list[dict[str, str]]:
    """The domain table: a JSONL file, one ``{"domain", "field_1", "field_2", "connection"}``
    object of non-empty strings per line, each (field_1, field_2) once.

    Raises:
        RecipematchError: a missing file, a line that is not JSON, a field missing or empty
            (naming file, line and field), a pair given twice, or no rows.
    """
    rows, seen, names = [], set(), set()
    try:
        for lineno, obj in iter_jsonl_strict(path):
            if not isinstance(obj, dict):
                raise RecipematchError(f"{where}: {path}:{lineno}: a row is a JSON object {list(DOMAIN_FIELDS)}")
            for k in DOMAIN_FIELDS:
                if not isinstance(obj.get(k), str) or not obj[k].strip():
                    raise RecipematchError(f"{where}: {path}:{lineno}: field {k!r} must be a non-empty string")
            pair = (obj["field_1"].strip(), obj["field_2"].strip())
            key = frozenset(statement_key(f) for f in pair)  # case, spacing and order do not make a new pair
            if key in seen or obj["domain"].strip() in names:
                raise RecipematchError(f"{where}: {path}:{lineno}: the pair {pair} or the domain "
                                       f"{obj['domain'].strip()!r} is given twice")
            seen.add(key)
            names.add(obj["domain"].strip())
            rows.append({k: obj[k].strip() for k in DOMAIN_FIELDS})
    except (ValueError, OSError) as e:
        if isinstance(e, RecipematchError):
            raise
        raise RecipematchError(f"{where}: {path}: {e}") from None
    if not rows:
        raise RecipematchError(f"{where}: {path} holds no domain pairs")
    return rows


def repair_latex_escapes(text: str) -> str:
    """``text`` with each backslash that starts a LaTeX command (``\\mathbb``, ``\\frac``, an accent
    such as ``\\t{oo}`` or ``\\r{a}``) or is no JSON escape (``\\{``, ``\\,``) doubled, so LaTeX
    inside JSON strings parses as written. ``\\"`` stays an escaped quote (so ``G\\"odel`` reads
    as ``G"odel``).
    A JSON escape followed by two letters (``\\nThe``) reads as a LaTeX command too: the
    statement keeps a backslash and the letters, never a silent newline or form feed."""
    return _BAD_ESCAPE.sub(lambda m: m.group(1) + "\\\\", text)


def _json_object(raw: str | None) -> tuple[Any, str]:
    return load_answer_object(raw, repair=repair_latex_escapes)


def statement_key(text: str) -> str:
    """The dedup key of a statement: NFKC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def parse_generation(raw: str | None, field_1: str, field_2: str) -> tuple[list[dict], list[str], str]:
    """The pairs of one generation answer.

    Returns:
        ``(pairs, rejects, reason)``: each pair ``{"topic", "statement_1", "statement_2"}``;
        ``rejects`` one reason per pair outside the schema (a missing or empty field, a framing
        other than ``field_1`` / ``field_2``); ``reason`` non-empty when the whole answer is
        unusable (no text, not JSON, no ``pairs`` list).
    """
    obj, why = _json_object(raw)
    if obj is None:
        return [], [], why
    if not isinstance(obj.get("pairs"), list):
        return [], [], 'schema: the answer must be {"pairs": [...]}'
    pairs, rejects = [], []
    for item in obj["pairs"]:
        if not isinstance(item, dict):
            rejects.append("schema: a pair must be a JSON object")
            continue
        if not is_text(item.get("topic")):
            rejects.append("schema: a pair needs a non-empty topic")
            continue
        got = []
        for k, field in (("entry_1", field_1), ("entry_2", field_2)):
            e = item.get(k)
            if not isinstance(e, dict) or not is_text(e.get("statement")):
                got = None
                rejects.append(f"schema: {k} needs a non-empty statement")
                break
            if not isinstance(e.get("framing"), str) or e["framing"].strip().casefold() != field.casefold():
                got = None
                rejects.append(f"framing: {k} is framed {short_repr(e.get('framing'), 40)}, not {field!r}")
                break
            got.append(e["statement"].strip())
        if got:
            pairs.append({"topic": item["topic"].strip(), "statement_1": got[0], "statement_2": got[1]})
    return pairs, rejects, ""


def parse_screen(raw: str | None) -> tuple[dict | None, str]:
    """One screen answer: the four booleans, ``confidence`` in [0, 1] and a ``reason`` string;
    ``(None, reason)`` outside that schema."""
    obj, why = _json_object(raw)
    if obj is None:
        return None, why
    for k in _SCREEN_BOOLS:
        if not isinstance(obj.get(k), bool):
            return None, f"schema: {k} must be true or false"
    c = obj.get("confidence")
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0.0 <= c <= 1.0:
        return None, "schema: confidence must be a number in [0, 1]"
    return {**{k: obj[k] for k in _SCREEN_BOOLS}, "confidence": float(c),
            "reason": obj["reason"] if isinstance(obj.get("reason"), str) else ""}, ""


def build_rows(kept: Sequence[Mapping[str, Any]], *, group: str, generator_model: str, negatives: int,
               direction: str, seed: int, generated_by: str = "meld_generate") -> tuple[list[dict], dict[str, int]]:
    """The attack's rows from the kept pairs, in the release's schema (Appendix D).

    Args:
        kept: pairs in generation order, each with ``source_id``, ``domain``, ``field_1``,
            ``field_2``, ``topic``, ``round``, ``statement_1``, ``statement_2``.
        group: the row set's group (``meld9``, ``heldout``, ...), written to ``meta.group``.
        generator_model: the model that wrote the pairs.
        negatives: same-framing statements per row (the paper: 3), drawn without replacement
            from the other kept pairs' statements in the positive's framing.
        direction: ``random`` (one row per pair, the anchor side drawn) or ``both``.
        seed: the row seed (directions and negatives).
        generated_by: written to ``meta.generated_by`` (the stage that wrote the rows), so the
            attack stage never records them as released rows.

    Returns:
        ``(rows, counts)``; a row whose framing has fewer than ``negatives`` other statements
        is left out and counted (``rows_short_of_negatives``).

    Raises:
        ValueError: ``direction`` not in :data:`DIRECTIONS` or ``negatives`` < 1.
    """
    if direction not in DIRECTIONS or negatives < 1:
        raise ValueError(f"direction must be one of {DIRECTIONS} and negatives >= 1")
    rng = np.random.default_rng(seed)
    pool: dict[str, list[tuple[str, str]]] = {}  # framing -> (source id, statement)
    for k in kept:
        pool.setdefault(k["field_1"], []).append((k["source_id"], k["statement_1"]))
        pool.setdefault(k["field_2"], []).append((k["source_id"], k["statement_2"]))
    rows, short = [], 0
    for k in kept:
        sides = [("entry_1->entry_2", 1, 2), ("entry_2->entry_1", 2, 1)]
        chosen = sides if direction == "both" else [sides[int(rng.integers(2))]]
        for name, a, b in chosen:
            framing = k[f"field_{b}"]
            others = [s for sid, s in pool[framing] if sid != k["source_id"]]
            if len(others) < negatives:
                short += 1
                continue
            pick = rng.choice(len(others), size=negatives, replace=False)
            rows.append({"source_id": k["source_id"], "anchor_text": k[f"statement_{a}"],
                         "positive_text": k[f"statement_{b}"], "negatives": [{"text": others[i]} for i in sorted(pick)],
                         "meta": {"group": group, "domain": k["domain"], "topic": k["topic"], "round": k["round"],
                                  "direction": name, "anchor_framing": k[f"field_{a}"], "positive_framing": framing,
                                  "generator_model": generator_model, "generated_by": generated_by}})
    return rows, {"rows": len(rows), "rows_short_of_negatives": short}
