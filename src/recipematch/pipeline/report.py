"""Stage 10: the Markdown report."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipematch.io import read_json
from recipematch.pipeline.common import Layout

log = logging.getLogger("recipematch")

def run_report(params: Mapping[str, Any], lay: Layout, arms: list[str]) -> Path:
    """Markdown report with the Table-1-shaped table and the Figure-1-style scatter (PNG)."""
    from recipematch.report import write_report

    stats = read_json(lay.metrics / "stats.json")
    cells = {a: read_json(lay.cells(a) / "cell.json")["name"] for a in arms}
    counts = {}
    for name in ("corpus", "evalsets", "gates", "verified", "recordings"):
        p = lay.metrics / f"{name}.json"
        if p.exists():
            counts[name] = read_json(p)
    for p in sorted(lay.metrics.glob("llm_*.json")):
        counts[p.stem] = read_json(p)
    for a in arms:
        counts[f"cells.{a}"] = read_json(lay.metrics / "cells" / f"{a}.json")
        counts[f"train.{a}"] = read_json(lay.metrics / "train" / f"{a}.json")
    return write_report(stats, cells, counts, lay.reports, params={k: params[k] for k in ("seed", "n_seeds", "positives", "negatives", "negatives_volume", "budget") if k in params})
