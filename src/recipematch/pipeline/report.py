"""Stage ``report``: the Markdown report with the Table-1-shaped table, the Figure-1-style
scatter, the prompt ladder and the factorial grid (paper Table 1, Figure 1, Tables 9, 11-12),
Tables 16, 17 and 23, and the hit accounting of Section 7 (``metrics/hits.json``)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from recipematch.config import report_row
from recipematch.io import read_json
from recipematch.pipeline.door import StagePaths, stage
from recipematch.report import write_report
from recipematch.report_common import with_report_rows

PARAMS = ("arms", "seed", "train.seed", "train.n_seeds", "positives", "negatives", "negatives_volume", "budget", "report")

log = logging.getLogger("recipematch")

def run(p, lay: StagePaths) -> Path:
    """Markdown report: Table 1's shape, the Figure-1-style scatter (PNG), Tables 9 and 11-12
    from the arms that ran (each arm's cell read from its ``cell.json``)."""
    arms = list(p.arms)
    stats = read_json(lay.metrics_dir / "stats.json")
    stats = with_report_rows(stats, {n: asdict(report_row(p.report, n)) for n in stats["evaluations"]})
    if unused := sorted(set(p.report) - set(stats["evaluations"])):
        log.warning("report: rows for sets no evaluation declares, not shown: %s", ", ".join(unused))
    cells = {}
    for a in arms:
        c = read_json(lay.cells_root / a / "cell.json")
        cells[a] = {"name": c["name"], "positives": c["spec"]["positives"], "negatives": c["spec"]["negatives"],
                    "volume": c["spec"]["volume"]}
    counts = {}
    for name in ("corpus", "evalsets", "gates", "verified", "recordings"):
        path = lay.metrics_dir / f"{name}.json"
        if path.exists():
            counts[name] = read_json(path)
    for path in sorted(lay.metrics_dir.glob("llm_*.json")):
        counts[path.stem] = read_json(path)
    for a in arms:
        counts[f"cells.{a}"] = read_json(lay.metrics_dir / "cells" / f"{a}.json")
        counts[f"train.{a}"] = read_json(lay.metrics_dir / "train" / f"{a}.json")
    return write_report(stats, cells, counts, lay.out, params=_report_params(p),
                        style=read_json(lay.metrics_dir / "style.json"),
                        hits=read_json(lay.metrics_dir / "hits.json") if (lay.metrics_dir / "hits.json").exists() else None)


def _report_params(p) -> dict:
    return {"seed": p.seed, "train.seed": p.train.seed, "n_seeds": p.train.n_seeds, "positives": p.positives,
            "negatives": p.negatives, "negatives_volume": p.negatives_volume, "budget": asdict(p.budget)}


main = stage("report", PARAMS, reads=("metrics_dir", "cells_root"), writes=("out",))(lambda p, lay: str(run(p, lay)))
