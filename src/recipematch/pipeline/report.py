"""Stage ``report``: the Markdown report with the Table-1-shaped table, the Figure-1-style
scatter, the prompt ladder and the factorial grid (paper Table 1, Figure 1, Tables 9, 11-12),
Tables 16, 17 and 23, and the hit accounting of Section 7 (``metrics/hits.json``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError
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

#: the keys (and their JSON types) the report reads from each file its stage writes; a file
#: without them is refused, never shown as an empty section
SHAPES: dict[str, dict[str, type | tuple[type, ...]]] = {
    "stats": {"evaluations": Mapping},
    "style": {"probe": Mapping, "tracking": Mapping},
    "hits": {"k": int, "seed": int, "sets": Mapping, "skipped": list},
    "cell": {"name": str, "spec": Mapping},
    "cell.spec": {"positives": str, "negatives": str, "volume": str},
}


def _shaped(obj: Any, shape: str, path: Path) -> Any:
    """``obj`` (read from ``path``) if it is a JSON object holding :data:`SHAPES` ``[shape]``.

    Raises:
        RecipematchError: naming the file and the first key missing or of another type.
    """
    want = SHAPES[shape]
    bad = ("its top level is a " + type(obj).__name__) if not isinstance(obj, Mapping) else next(
        (f"{k!r} is {'missing' if k not in obj else 'a ' + type(obj[k]).__name__}" for k, t in want.items()
         if k not in obj or not isinstance(obj[k], t) or isinstance(obj[k], bool)), None)
    if bad:
        raise RecipematchError(f"{path}: not the file its stage writes ({bad}; expected "
                               f"{', '.join(want)}); rerun it (dvc repro)")
    return obj


def run(p, lay: StagePaths) -> Path:
    """Markdown report: Table 1's shape, the Figure-1-style scatter (PNG), Tables 9 and 11-12
    from the arms that ran (each arm's cell read from its ``cell.json``)."""
    arms = list(p.arms)
    m = lay.metrics_dir
    read = {name: _shaped(read_json(m / f"{name}.json"), name, m / f"{name}.json") for name in READS_FILES}
    stats = with_report_rows(read["stats"], p.report)
    if unused := sorted(set(p.report) - set(stats["evaluations"])):
        log.warning("report: rows for sets no evaluation declares, not shown: %s", ", ".join(unused))
    cells = {}
    for a in arms:
        path = lay.cells_root / a / "cell.json"
        c = _shaped(read_json(path), "cell", path)
        _shaped(c["spec"], "cell.spec", path)
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
