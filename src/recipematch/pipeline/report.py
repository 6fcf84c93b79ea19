"""Stage ``report``: the Markdown report with the Table-1-shaped table, the Figure-1-style
scatter, the prompt ladder and the factorial grid (paper Table 1, Figure 1, Tables 9, 11-12),
Tables 16, 17 and 23, and the hit accounting of Section 7 (``metrics/hits.json``)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from recipematch.io import read_json
from recipematch.pipeline.door import StagePaths, stage
from recipematch.report import write_report
from recipematch.report_common import with_report_rows

PARAMS = ("arms", "seed", "train.seed", "train.n_seeds", "positives", "negatives", "negatives_volume", "budget", "report",
          "llm.prompts")

#: what the report reads under its ``--metrics-dir``, each a dep of the report stage in
#: ``dvc.yaml`` (tested): the stats, style and hit files, the counts files, and the folders of
#: per-prompt LLM counts (one ``<prompt>.json`` per ``llm.prompts`` entry) and of per-arm cell
#: and training counts
READS_FILES = ("stats", "style", "hits")
COUNTS_FILES = ("corpus", "evalsets", "gates", "verified", "recordings")
READS_FOLDERS = ("llm", "cells", "train")

log = logging.getLogger("recipematch")

def run(p, lay: StagePaths) -> Path:
    """Markdown report: Table 1's shape, the Figure-1-style scatter (PNG), Tables 9 and 11-12
    from the arms that ran (each arm's cell read from its ``cell.json``)."""
    arms = list(p.arms)
    m = lay.metrics_dir
    read = {name: read_json(m / f"{name}.json") for name in READS_FILES}
    stats = with_report_rows(read["stats"], p.report)
    if unused := sorted(set(p.report) - set(stats["evaluations"])):
        log.warning("report: rows for sets no evaluation declares, not shown: %s", ", ".join(unused))
    cells = {}
    for a in arms:
        c = read_json(lay.cells_root / a / "cell.json")
        cells[a] = {"name": c["name"], "positives": c["spec"]["positives"], "negatives": c["spec"]["negatives"],
                    "volume": c["spec"]["volume"]}
    counts = {name: read_json(m / f"{name}.json") for name in COUNTS_FILES}
    counts.update({f"llm_{prompt}": read_json(m / "llm" / f"{prompt}.json") for prompt in p.llm.prompts
                   if (m / "llm" / f"{prompt}.json").exists()})
    if unrun := [prompt for prompt in p.llm.prompts if f"llm_{prompt}" not in counts]:
        log.warning("report: no LLM counts yet for %s (its llm@ stage has not run): not shown", ", ".join(unrun))
    if stray := sorted(f.name for f in (m / "llm").glob("*.json") if f.stem not in p.llm.prompts):
        log.warning("report: files in %s that no llm.prompts entry writes, not shown: %s", m / "llm", ", ".join(stray))
    for a in arms:
        counts[f"cells.{a}"] = read_json(m / "cells" / f"{a}.json")
        counts[f"train.{a}"] = read_json(m / "train" / f"{a}.json")
    return write_report(stats, cells, counts, lay.out, params=_report_params(p),
                        style=read["style"], hits=read["hits"])


def _report_params(p) -> dict:
    return {"seed": p.seed, "train.seed": p.train.seed, "n_seeds": p.train.n_seeds, "positives": p.positives,
            "negatives": p.negatives, "negatives_volume": p.negatives_volume, "budget": asdict(p.budget)}


def _main(p, lay: StagePaths) -> str:
    """Stage 12: the Markdown report (Table 1's shape, Figure 1, Tables 5, 9, 11-13, 16-17, 19-20,
    23-24 where their arms ran) and its figures, from the statistics and the counts."""
    return str(run(p, lay))


main = stage("report", PARAMS, reads=("metrics_dir", "cells_root"), writes=("out",))(_main)
