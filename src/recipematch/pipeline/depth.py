"""Paraphrase depth of a pair file (paper Appendix A)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def paraphrase_depth(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean character-3-gram Jaccard between anchor and positive (paper Appendix A:
    CAS 0.865, D1 0.463, D4 0.421), rounded to 4 places; ``None`` without rows."""
    from recipematch.depth import mean_char3_jaccard

    if not rows:
        return None
    return round(float(mean_char3_jaccard((r["anchor"], r["positive"]) for r in rows)), 4)


