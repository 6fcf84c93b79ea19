"""Write or check the expected scores of the committed default (as pyserini's ``2cr`` files).

    python scripts/expected_scores.py write   # after `dvc repro`: record metrics/stats.json's headline numbers
    python scripts/expected_scores.py check   # compare metrics/stats.json against the record

Table 1's cut-offs of each set come from ``params.yaml``'s ``report`` rows, as in the report.

The record (``tests/expected/default.yaml``) lists, for every model and every declared set,
the mean R@k the report shows (percent), and for every declared contrast the gap's estimate
and 95% interval on every set and every DiD (points), each with a tolerance. The test
``tests/test_expected_scores.py`` runs the check.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "expected" / "default.yaml"
STATS = ROOT / "metrics" / "stats.json"
PARAMS = ROOT / "params.yaml"
#: points; the pipeline is deterministic on one machine, this absorbs float differences elsewhere
TOL_SCORE = 0.01
TOL_GAP = 0.05


class BadStats(ValueError):
    """metrics/stats.json does not have the shape the stats stage writes."""


def _num(v, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BadStats(f"{where}: expected a finite number, got {str(v)[:40]!r}")
    return float(v)


def presented(stats: dict, params_path: Path = PARAMS) -> dict:
    """``stats`` with each set's report row (label, ``report_ks``) from params ``report``, joined
    as the report stage joins them: the record holds the cut-offs the report shows."""
    from recipematch.config import load_params
    from recipematch.report_common import with_report_rows

    rows = load_params(params_path).report
    try:
        return with_report_rows(stats, rows)
    except (KeyError, TypeError, AttributeError) as e:
        raise BadStats(f"metrics/stats.json lacks a part the stats stage writes ({type(e).__name__}: {e})") from None


def headline(stats: dict) -> list[dict]:
    """Every number of the report's Table 1: ``{"path": [...], "value": float, "tol": float}``.

    Raises:
        BadStats: a section, key or number the stats stage always writes is missing or not a
            finite number.
    """
    try:
        return _headline(stats)
    except (KeyError, TypeError, AttributeError) as e:
        raise BadStats(f"metrics/stats.json lacks a part the stats stage writes ({type(e).__name__}: {e})") from None


def _headline(stats: dict) -> list[dict]:
    rows = []
    evals = stats["evaluations"]
    for arm in sorted(stats["arms"]):
        for name in sorted(evals):
            for k in evals[name]["report_ks"]:
                v = stats["arms"][arm].get(f"{name}.R@{k}")
                if v is not None and v.get("mean") is not None:
                    where = f"arms/{arm}/{name}.R@{k}/mean"
                    rows.append({"path": ["arms", arm, f"{name}.R@{k}", "mean"], "value": round(_num(v["mean"], where), 4),
                                 "tol": TOL_SCORE})
    for key in sorted(stats["gaps"]):
        for f in ("estimate", "low", "high"):
            rows.append({"path": ["gaps", key, f], "value": round(_num(stats["gaps"][key][f], f"gaps/{key}/{f}"), 4),
                         "tol": TOL_GAP})
    for key in sorted(stats["did"]):
        for f in ("estimate", "low", "high"):
            rows.append({"path": ["did", key, "did", f],
                         "value": round(_num(stats["did"][key]["did"][f], f"did/{key}/did/{f}"), 4), "tol": TOL_GAP})
    return rows


def lookup(stats: dict, path: list[str]):
    cur = stats
    for p in path:
        if not isinstance(cur, dict) or p not in cur:
            raise KeyError("/".join(path))
        cur = cur[p]
    return cur


def check(stats: dict, record: dict) -> list[str]:
    """Mismatches between ``stats`` and the record, one line each (empty: all within tolerance).
    A number the record holds that the stats lack, or a headline number the record lacks,
    is a mismatch too."""
    bad, missing = [], set()
    have = {tuple(r["path"]) for r in record["scores"]}
    for r in record["scores"]:
        try:
            v = lookup(stats, r["path"])
        except KeyError:
            bad.append(f"{'/'.join(r['path'])}: missing from metrics")
            missing.add(tuple(r["path"]))
            continue
        try:
            ok = abs(_num(v, "metrics") - _num(r["value"], "record")) <= _num(r["tol"], "record tolerance")
        except BadStats:
            ok = False  # a NaN, a string or a missing tolerance never passes
        if not ok:
            bad.append(f"{'/'.join(r['path'])}: {v} vs expected {r['value']} ± {r['tol']}")
    try:
        shown = {tuple(r["path"]) for r in headline(stats)}
        bad += [f"{'/'.join(r['path'])}: not in the record" for r in headline(stats) if tuple(r["path"]) not in have]
        bad += [f"{'/'.join(p)}: in the record, but the report no longer shows it (params report ks)"
                for p in sorted(have - missing) if p[0] == "arms" and p not in shown]
    except BadStats as e:
        bad.append(str(e))
    return bad


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("write", "check"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        stats = json.loads(STATS.read_text())
        if not isinstance(stats, dict):
            raise BadStats(f"{STATS}: not a JSON object")
        stats = presented(stats)
        if argv[0] == "write":
            rows = headline(stats)
    except (OSError, ValueError) as e:  # a missing file, invalid JSON, BadStats
        print(f"error: {e}", file=sys.stderr)
        return 2
    if argv[0] == "write":
        RECORD.parent.mkdir(parents=True, exist_ok=True)
        head = ("# Expected scores of the committed default (params.yaml), as `dvc repro` produced them in\n"
                "# metrics/stats.json (R@k in percent, gaps and DiD in points with 95% nested-bootstrap\n"
                "# intervals). Written by `python scripts/expected_scores.py write`; checked by\n"
                "# tests/test_expected_scores.py. A change of code or params that moves a number must\n"
                "# rewrite this file in the same commit.\n")
        RECORD.write_text(head + yaml.safe_dump({"source": "metrics/stats.json", "scores": rows},
                                                sort_keys=False, width=200))
        print(f"wrote {len(rows)} numbers to {RECORD.relative_to(ROOT)}")
        return 0
    bad = check(stats, yaml.safe_load(RECORD.read_text()))
    print("\n".join(bad) if bad else "all expected scores within tolerance")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
