"""Which embedded-default budget resolves the headline? (run by hand; not a test)

For each budget in ``--grid`` (rows/epochs/lr/seeds/sequence length), this trains the
verified and recipe arms from the pair files a ``dvc repro`` already built (``artifacts/``
of ``--root``), scores them and the base on every declared evaluation, and prints the
recipe − verified gap on each set with its 95% nested-bootstrap interval, the DiD against
the real set, and the wall time. Work happens in a scratch copy (``--work``); the project's
own outputs are not touched.

    python benchmarks/bench_budget.py --grid 120x2,240x2 --seeds 2
    python benchmarks/bench_budget.py --grid 240x2@3e-4 --seeds 2 --max-seq-length 96

A grid item is ``ROWSxEPOCHS`` with an optional ``@LR``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys
import time
from pathlib import Path


def _params(root: Path, *, rows: int, epochs: int, lr: float | None, seeds: int, seq: int | None, arms):
    from recipematch.config import load_yaml

    raw = load_yaml(root / "params.yaml")
    raw = copy.deepcopy(raw)
    raw["arms"] = list(arms)
    # keep the declared contrasts whose arms this run trains
    from recipematch.rules import BASELINES, parse_contrast

    raw["contrasts"] = [c for c in raw["contrasts"] if all(x in arms or x in BASELINES for x in parse_contrast(c))]
    raw["budget"]["rows"] = rows
    raw["train"]["epochs"] = epochs
    raw["train"]["n_seeds"] = seeds
    if lr is not None:
        raw["train"]["lr"] = lr
    if seq is not None:
        raw["train"]["max_seq_length"] = seq
        raw["evaluate"]["max_seq_length"] = seq
    raw["mlflow"]["tracking_uri"] = "sqlite:///mlflow-bench.db"
    return raw


def _run(module, raw, lay, *args, **kw):
    from recipematch.config import parse_params

    return module.run(parse_params(raw).view(module.PARAMS), lay, *args, **kw)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path("."), help="project root with a finished dvc repro")
    ap.add_argument("--work", type=Path, default=Path("cache/bench_budget"), help="scratch folder")
    ap.add_argument("--grid", default="120x2,240x2", help="comma-separated ROWSxEPOCHS[@LR]")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--max-seq-length", type=int, default=None)
    ap.add_argument("--arms", default="verified,recipe")
    args = ap.parse_args(argv)

    from recipematch.pipeline import cells, evaluate, evaluate_base, evaluate_bm25, specs, stats, train, validate
    from recipematch.pipeline.door import Layout, offline_env

    offline_env()
    root = args.root.resolve()
    arms = args.arms.split(",")
    print("| rows | epochs | lr | seeds | seq | set | verified R@1 | recipe R@1 | recipe − verified [95%] | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for item in args.grid.split(","):
        size, _, lr = item.partition("@")
        rows, epochs = (int(x) for x in size.split("x"))
        work = (args.work / item.replace("@", "_lr")).resolve()
        if work.exists():
            shutil.rmtree(work)
        (work / "data").mkdir(parents=True)
        for part in ("artifacts/corpus", "artifacts/evalsets", "artifacts/gates", "artifacts/pairs"):
            shutil.copytree(root / part, work / part)
        os.symlink(root / "data" / "peer_release", work / "data" / "peer_release")
        (work / "cache").mkdir()
        if (root / "cache" / "embeddings").exists():
            shutil.copytree(root / "cache" / "embeddings", work / "cache" / "embeddings")
        raw = _params(root, rows=rows, epochs=epochs, lr=float(lr) if lr else None, seeds=args.seeds,
                      seq=args.max_seq_length, arms=arms)
        lay = Layout(work)
        t0 = time.perf_counter()
        _run(specs, raw, lay)
        for a in arms:
            _run(cells, raw, lay, a)
            _run(validate, raw, lay, a)
            _run(train, raw, lay, a, progress=False)
            _run(evaluate, raw, lay, a, progress=False)
        if (root / "artifacts" / "eval" / "base").exists() and args.max_seq_length is None:
            shutil.copytree(root / "artifacts" / "eval" / "base", work / "artifacts" / "eval" / "base")
        else:
            _run(evaluate_base, raw, lay, progress=False)
        if (root / "artifacts" / "eval" / "bm25").exists():
            shutil.copytree(root / "artifacts" / "eval" / "bm25", work / "artifacts" / "eval" / "bm25")
        else:
            _run(evaluate_bm25, raw, lay)
        raw_stats = {**raw, "arms": arms}
        out = _run(stats, raw_stats, lay)
        wall = time.perf_counter() - t0
        for name in raw["evaluations"]:
            g = out["gaps"].get(f"recipe-verified.{name}.R@1")
            if not g:
                continue
            v = out["arms"]["verified"][f"{name}.R@1"]["mean"]
            r = out["arms"]["recipe"][f"{name}.R@1"]["mean"]
            print(f"| {rows} | {epochs} | {raw['train']['lr']:g} | {args.seeds} | {raw['train']['max_seq_length']} | "
                  f"{name} | {v:.2f} | {r:.2f} | {g['estimate']:+.2f} [{g['low']:+.2f}, {g['high']:+.2f}] | {wall:.0f} |")
        for key, d in out["did"].items():
            dd = d["did"]
            print(f"|  |  |  |  |  | DiD {key} |  |  | {dd['estimate']:+.2f} [{dd['low']:+.2f}, {dd['high']:+.2f}] |  |")
        sys.stdout.flush()
        (work / "result.json").write_text(json.dumps({"item": item, "wall_s": wall, "gaps": out["gaps"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
