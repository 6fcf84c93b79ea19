"""Stage ``report``: the Markdown report with the Table-1-shaped table, the Figure-1-style
scatter, the prompt ladder and the factorial grid (paper Table 1, Figure 1, Tables 9, 11-12),
Tables 16, 17 and 23, and the hit accounting of Section 7 (``metrics/hits.json``)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError, short_repr
from recipematch.io import building_dir, read_json
from recipematch.pipeline.door import StagePaths, stage
from recipematch.report import write_report
from recipematch.report_common import ROLE_ORDER, with_report_rows

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

@dataclass(frozen=True)
class Shape:
    """What a JSON value the report reads must be: of type ``kind`` (never a bool where a
    number is meant), an object holding each of ``keys`` (each of its shape), each value (of an
    object) or item (of a list) of shape ``each``, and passing ``test`` (``what`` says how)."""

    kind: type | tuple[type, ...]
    keys: Mapping[str, Shape] = field(default_factory=dict)
    each: Shape | None = None
    test: Callable[[Any], bool] | None = None
    what: str = ""


_TEXT, _OBJ = Shape(str), Shape(Mapping)
_NUM = Shape((int, float), test=lambda v: isinstance(v, float) or -_MOST <= v <= _MOST,
             what="a number of at most 10^12")  # a float is finite: read_json(finite=True)
_COUNT = Shape(int, test=lambda n: 0 <= n <= _MOST, what="a count from 0 to 10^12")
_NAME = Shape(str, test=lambda v: bool(re.fullmatch(r"[\w.@+-]{1,200}", v)),
              what="a name of letters, digits and . @ + - _ (as the cells stage writes it)")
_MOST = 10 ** 12  # more than any corpus, query set or cut-off this report shows

#: what the report reads from each file its stages write (stats, style, hits, each arm's
#: ``cell.json``); a file of another shape is refused, never shown as an empty or garbled section
SHAPES: dict[str, Shape] = {
    "stats": Shape(Mapping, keys={
        "evaluations": Shape(Mapping, test=bool, what="at least one set", each=Shape(Mapping, keys={
            "role": Shape(str, test=ROLE_ORDER.__contains__, what="one of " + ", ".join(ROLE_ORDER))})),
        "arms": Shape(Mapping, each=Shape(Mapping, each=_OBJ)), "gaps": Shape(Mapping, each=_OBJ),
        "did": Shape(Mapping, each=_OBJ), "contrasts": Shape(list, each=_TEXT), "n_boot": _COUNT, "seed_scheme": _TEXT}),
    "style": Shape(Mapping, keys={
        "probe": Shape(Mapping, keys={"train_prompt": _NAME}),
        "tracking": Shape(Mapping, each=Shape(Mapping, keys={"rho_mean": _NUM, "top_k_percentile_mean": _NUM}))}),
    "hits": Shape(Mapping, keys={
        "k": Shape(int, test=lambda k: 1 <= k <= _MOST, what="a rank cut-off from 1 to 10^12"), "seed": _COUNT,
        "sets": Shape(Mapping, each=Shape(Mapping, each=Shape(Mapping, keys={
            "counts": Shape(Mapping, keys=dict.fromkeys(("a_alone", "b_alone", "both", "neither"), _COUNT)),
            "n_queries": _COUNT, "missing_gold_text": _COUNT,
            "features": Shape(Mapping, each=Shape(Mapping, keys={"auc": Shape((int, float, type(None)))}))}))),
        "skipped": Shape(list, each=Shape(Mapping, keys={"pair": _TEXT, "reason": _TEXT}))}),
    "cell": Shape(Mapping, keys={"name": _NAME, "spec": Shape(Mapping, keys=dict.fromkeys(
        ("positives", "negatives", "volume"), _TEXT))}),
}


def _problem(obj: Any, shape: Shape, at: tuple = ()) -> str | None:
    """The first way ``obj`` (found at key path ``at``) misses ``shape``, or None."""
    where = f"in {'.'.join(map(str, at[:-1]))}: " if len(at) > 1 else ""
    name = repr(at[-1]) if at else "its top level"
    kinds = shape.kind if isinstance(shape.kind, tuple) else (shape.kind,)
    if not isinstance(obj, kinds) or isinstance(obj, bool):
        kind = type(obj).__name__
        return f"{where}{name} is {'null' if obj is None else ('an ' if kind[0] in 'aeiou' else 'a ') + kind}"
    if shape.test is not None and not shape.test(obj):
        return f"{where}{name} is {short_repr(obj, 40)}, not {shape.what}"
    for k, sub in shape.keys.items():
        if k not in obj:
            return f"{'in ' + '.'.join(map(str, at)) + ': ' if at else ''}{k!r} is missing"
        if bad := _problem(obj[k], sub, (*at, k)):
            return bad
    if shape.each is not None:
        for k, v in obj.items() if isinstance(obj, Mapping) else enumerate(obj):
            if bad := _problem(v, shape.each, (*at, k)):
                return bad
    return None


def _shaped(obj: Any, shape: str, path: Path) -> Any:
    """``obj`` (read from ``path``) if it has the shape :data:`SHAPES` ``[shape]``.

    Raises:
        RecipematchError: naming the file and the first key missing, of another type or value.
    """
    if bad := _problem(obj, SHAPES[shape]):
        raise RecipematchError(f"{path}: not the file its stage writes ({bad}; expected "
                               f"{', '.join(SHAPES[shape].keys)}); rerun it (dvc repro)")
    return obj


def run(p, lay: StagePaths) -> Path:
    """Markdown report: Table 1's shape, the Figure-1-style scatter (PNG), Tables 9 and 11-12
    from the arms that ran (each arm's cell read from its ``cell.json``)."""
    arms = list(p.arms)
    m = lay.metrics_dir
    read = {name: _shaped(read_json(m / f"{name}.json", finite=True), name, m / f"{name}.json") for name in READS_FILES}
    stats = with_report_rows(read["stats"], p.report)
    if unused := sorted(set(p.report) - set(stats["evaluations"])):
        log.warning("report: rows for sets no evaluation declares, not shown: %s", ", ".join(unused))
    cells = {}
    for a in arms:
        path = lay.cells_root / a / "cell.json"
        c = _shaped(read_json(path, finite=True), "cell", path)
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
    try:
        with building_dir(lay.out) as tmp:  # a failed run keeps the previous report whole
            path = write_report(stats, cells, counts, tmp, params=_report_params(p), style=read["style"],
                                hits=read["hits"])
    except (KeyError, TypeError, AttributeError, ValueError, IndexError, StopIteration, ArithmeticError) as e:
        # what SHAPES does not spell out; --debug shows where
        raise RecipematchError(f"{m}: a metrics file does not have the shape its stage writes ({type(e).__name__}: "
                               f"{short_repr(str(e), 120)}, while writing the report); rerun them (dvc repro)") from e
    return lay.out / path.name


def _report_params(p) -> dict:
    return {"seed": p.seed, "train.seed": p.train.seed, "n_seeds": p.train.n_seeds, "positives": p.positives,
            "negatives": p.negatives, "negatives_volume": p.negatives_volume, "budget": asdict(p.budget)}


def _main(p, lay: StagePaths) -> str:
    """Stage 12: the Markdown report (Table 1's shape, Figure 1, Tables 5, 9, 11-13, 16-17, 19-20,
    23-24 where their arms ran) and its figures, from the statistics and the counts."""
    return str(run(p, lay))


main = stage("report", PARAMS, reads=("metrics_dir", "cells_root"), writes=("out",))(_main)
