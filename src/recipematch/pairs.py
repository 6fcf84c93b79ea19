"""The training-pair row (the paper, Section 3 and Appendix A) and its canonical on-disk form.

A row is ``(anchor, positive, negatives[])`` with provenance::

    {"source_id": str, "anchor": str, "positive": str,
     "positive_provenance": {"generator": str, "prompt_sha256": str | None, "model_id": str,
                             "judge": dict | None, ...family-specific keys...},
     "negatives": [{"text": str, "generator": str, "prompt_sha256": str | None,
                    "model_id": str, "judge": dict | None, "edit": str | None,
                    "counterexample": dict | None}]}

``generator`` names what wrote the text: ``"cas"`` for the computer-algebra generator
(no prompt: ``prompt_sha256`` is ``None`` and ``model_id`` names the generator version), or
a prompt name such as ``"d1_recipe"`` (then ``prompt_sha256`` is the 64-hex template hash).
A row with k ≥ 1 negatives yields k training examples ``(anchor, positive, negative_i)``;
a row with none yields one ``(anchor, positive)``; rows weigh ``max(k, 1)`` (Appendix A).

Pair files are JSON lines in canonical form (sorted keys), sorted by ``source_id`` then
positive text, so the same inputs give byte-identical files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from recipematch.io import FormatError, iter_jsonl_strict

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def n_examples(row: Mapping[str, Any]) -> int:
    """Training examples a row yields: ``max(len(negatives), 1)`` (Appendix A)."""
    return max(len(row.get("negatives") or []), 1)


def provenance_problems(row: Mapping[str, Any]) -> list[str]:
    """Reasons a row's provenance is incomplete (empty list when it is complete).

    Every text needs a generator and a model id; LLM-written texts also need the 64-hex
    SHA-256 of their prompt template (Section 3, Appendix F: "every prompt hash and model id
    present").
    """
    out: list[str] = []
    items = [("positive", row.get("positive_provenance") or {})]
    items += [(f"negative[{i}]", n) for i, n in enumerate(row.get("negatives") or [])]
    for name, prov in items:
        gen = prov.get("generator")
        if not gen:
            out.append(f"{name}: no generator")
            continue
        if not prov.get("model_id"):
            out.append(f"{name}: no model_id")
        if gen != "cas" and not HEX64.match(str(prov.get("prompt_sha256") or "")):
            out.append(f"{name}: generator {gen} without a prompt SHA-256")
    return out


def sort_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows in canonical order: by ``source_id``, then positive text, then negatives."""
    return sorted((dict(r) for r in rows),
                  key=lambda r: (r["source_id"], r["positive"], [n["text"] for n in r.get("negatives") or []]))


def cas_rows_to_pairs(outcome: Mapping[str, Any], anchor: str, *, model_id: str) -> list[dict[str, Any]]:
    """Convert one computer-algebra generator outcome (``recipematch.cas``) to pair rows.

    Args:
        outcome: one line of the generator's output (``source_id``, ``generator_version``,
            ``rows`` with ``positive_text``, ``transform_family``, ``positive_transforms``,
            ``verification`` and ``negatives`` carrying ``edit`` and ``counterexample``).
        anchor: the corpus text of the source problem.
        model_id: what produced them, e.g. ``"sympy==1.14.0;recipematch-cas=3"``.
    """
    rows = []
    for r in outcome.get("rows") or []:
        rows.append({
            "source_id": outcome["source_id"],
            "anchor": anchor,
            "positive": r["positive_text"],
            "positive_provenance": {
                "generator": "cas", "prompt_sha256": None, "model_id": model_id, "judge": None,
                "transform_family": r.get("transform_family"),
                "positive_transforms": list(r.get("positive_transforms") or []),
                "verification": r.get("verification"),
                "generator_version": outcome.get("generator_version"),
            },
            "negatives": [{"text": n["text"], "generator": "cas", "prompt_sha256": None, "model_id": model_id,
                           "judge": None, "edit": n.get("edit"), "counterexample": n.get("counterexample")}
                          for n in r.get("negatives") or []],
        })
    return rows


#: ``split`` values a cell file's rows may carry (the budget draw's train/dev split).
SPLITS = ("train", "dev")


def _type_name(v: Any) -> str:
    return "null" if v is None else {dict: "object", list: "array", str: "string"}.get(type(v), type(v).__name__)


def pair_row_problem(row: Any) -> str | None:
    """Why ``row`` is not a usable pair row, naming the field; ``None`` when it is.

    Checked: the row is an object; ``source_id`` is a non-empty string; ``anchor`` and
    ``positive`` are strings; ``negatives`` is an array of objects, each with a string
    ``text``; ``positive_provenance``, when present and not null, is an object; ``split``,
    when present (cell files), is ``"train"`` or ``"dev"``.
    """
    if not isinstance(row, dict):
        return f"expected a JSON object, got {_type_name(row)}"
    if "source_id" not in row:
        return "missing field 'source_id'"
    sid = row["source_id"]
    if not isinstance(sid, str) or not sid:
        got = "an empty string" if isinstance(sid, str) else _type_name(sid)
        return f"field 'source_id' must be a non-empty string, got {got}"
    for key in ("anchor", "positive"):
        if key not in row:
            return f"missing field {key!r}"
        if not isinstance(row[key], str):
            return f"field {key!r} must be a string, got {_type_name(row[key])}"
    if "negatives" not in row:
        return "missing field 'negatives' (an array, empty when the row has none)"
    negs = row["negatives"]
    if not isinstance(negs, list):
        return f"field 'negatives' must be an array, got {_type_name(negs)}"
    for i, n in enumerate(negs):
        if not isinstance(n, dict):
            return f"field 'negatives[{i}]' must be an object, got {_type_name(n)}"
        if not isinstance(n.get("text"), str):
            return (f"field 'negatives[{i}].text' must be a string, got "
                    f"{'nothing' if 'text' not in n else _type_name(n['text'])}")
    prov = row.get("positive_provenance")
    if prov is not None and not isinstance(prov, dict):
        return f"field 'positive_provenance' must be an object, got {_type_name(prov)}"
    if "split" in row and row["split"] not in SPLITS:
        return f"field 'split' must be one of {list(SPLITS)}, got {row['split']!r}"
    return None


def read_pair_file(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a pair file (or a cell file: pair rows with ``split``), checking every row.

    Read with the project's one JSONL reader (:func:`recipematch.io.iter_jsonl_strict`), then
    each row checked by :func:`pair_row_problem`, so a malformed file stops with the file,
    line and field named instead of a ``KeyError`` deep in the cells or train stage.

    Returns:
        The rows in file order.

    Raises:
        recipematch.io.FormatError: ``"<path>:<line>: <field problem>"`` for the first bad
            line (a :class:`recipematch.errors.RecipematchError`).
        FileNotFoundError: ``path`` does not exist.
    """
    rows = []
    for line_no, row in iter_jsonl_strict(path):
        problem = pair_row_problem(row)
        if problem is not None:
            raise FormatError(f"{path}:{line_no}: not a pair row: {problem}")
        rows.append(row)
    return rows
