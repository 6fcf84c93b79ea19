"""Wall time of the train stage of one tiny arm (2 seeds) with the seeds run one after
another in the stage's process and as Ray tasks with 1 and 2 workers (each unit on one
torch thread). Builds the tiny project of tests/test_pipeline_e2e.py in a temporary folder.

    OMP_NUM_THREADS=1 python benchmarks/bench_fanout.py

Prints one line per engine: Ray start-up seconds, train-stage seconds (worker start-up and
imports included: a fresh Ray per engine) and the speed-up over 1 Ray worker.
"""

from __future__ import annotations

import copy
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_pipeline_e2e import PARAMS, _build_pairs, _root, stages  # noqa: E402

from recipematch import engine as engine_mod  # noqa: E402
from recipematch.config import EngineConfig, parse_params  # noqa: E402
from recipematch.pipeline import train  # noqa: E402

ARM = "recipe"


def main() -> None:
    import ray
    import torch

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="bench-fanout-"))
    params = copy.deepcopy(PARAMS)
    params["arms"] = [ARM]
    lay = _root(work / "base")
    _build_pairs(params, lay)
    stages.run_validate(params, lay, ARM)
    view = parse_params(params).view(train.PARAMS)
    rows = []
    for name, eng in [("local (sequential)", None), ("ray, 1 worker", EngineConfig(kind="ray", workers=1)),
                      ("ray, 2 workers", EngineConfig(kind="ray", workers=2))]:
        dest = work / name.replace(" ", "_").replace(",", "").replace("(", "").replace(")", "")
        shutil.copytree(lay.root, dest)
        startup = 0.0
        if eng is not None:
            t0 = time.perf_counter()
            ray.init(num_cpus=eng.workers, include_dashboard=False, logging_level=logging.WARNING,
                     runtime_env=engine_mod.same_code_env())
            startup = time.perf_counter() - t0
        t0 = time.perf_counter()
        train.run(view, stages.Layout(dest), ARM, progress=False, engine=eng)
        secs = time.perf_counter() - t0
        if eng is not None:
            ray.shutdown()
        rows.append((name, startup, secs))
    one = next(s for n, _, s in rows if n == "ray, 1 worker")
    print(f"{'engine':<20} {'ray start s':>11} {'train s':>8} {'speed-up vs 1 worker':>21}")
    for name, startup, secs in rows:
        print(f"{name:<20} {startup:>11.1f} {secs:>8.1f} {one / secs:>21.2f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
