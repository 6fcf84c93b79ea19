"""The training-pair row (SPEC §3) and its canonical on-disk form.

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
a row with none yields one ``(anchor, positive)``; rows weigh ``max(k, 1)`` (SPEC §3).

Pair files are JSON lines in canonical form (sorted keys), sorted by ``source_id`` then
positive text, so the same inputs give byte-identical files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def n_examples(row: Mapping[str, Any]) -> int:
    """Training examples a row yields: ``max(len(negatives), 1)`` (SPEC §3)."""
    return max(len(row.get("negatives") or []), 1)


def provenance_problems(row: Mapping[str, Any]) -> list[str]:
    """Reasons a row's provenance is incomplete (empty list when it is complete).

    Every text needs a generator and a model id; LLM-written texts also need the 64-hex
    SHA-256 of their prompt template (SPEC §3.2, §5: "every prompt hash and model id
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
