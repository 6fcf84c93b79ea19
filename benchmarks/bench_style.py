"""Speed of recipematch.style against straightforward loops, on synthetic data (seeded).

Two workloads:

- *bootstrap AUC* at the paper's Table 13 size: 1,282 held-out sources, each with one organic
  text and one rewrite, 2,000 replicates over source ids. Baseline: one Python iteration per
  replicate calling ``sklearn.metrics.roc_auc_score`` with the replicate's source counts as
  sample weights (timed on a few replicates and scaled linearly). Both give the same interval
  (checked here on the timed replicates).
- *style tracking*: ``--queries`` queries against ``--docs`` documents (dimension 64; the paper
  scores 2,000 queries against 117,088 documents). Baseline: one ``scipy.stats.spearmanr``
  call per query plus a full ``argsort`` for its top-10 (timed on a few queries, scaled).

The last line printed is one JSON object. Run by hand:
``OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/bench_style.py``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from recipematch.style import bootstrap_auc
from recipematch.style_tracking import style_percentiles, style_tracking


def bench_bootstrap(n_sources: int, n_boot: int, n_loop: int) -> dict:
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(n_sources), 2).astype(str)
    labels = np.tile([0, 1], n_sources)
    scores = rng.normal(size=2 * n_sources) + 1.6 * labels
    t0 = time.perf_counter()
    res = bootstrap_auc(scores, labels, groups, n_boot=n_boot, seed=1, level=0.95)
    fast = time.perf_counter() - t0
    gidx = np.unique(groups, return_inverse=True)[1]
    draws = np.random.default_rng(1).integers(0, n_sources, size=(n_loop, n_sources))
    t0 = time.perf_counter()
    for d in draws:
        roc_auc_score(labels, scores, sample_weight=np.bincount(d, minlength=n_sources)[gidx])
    loop = (time.perf_counter() - t0) / n_loop * n_boot
    return {"bootstrap.n_sources": n_sources, "bootstrap.n_boot": n_boot, "bootstrap.auc": res.auc,
            "bootstrap.seconds": round(fast, 3), "bootstrap.loop_seconds_scaled": round(loop, 2),
            "bootstrap.speedup": round(loop / fast, 1)}


def bench_tracking(n_queries: int, n_docs: int, n_loop: int) -> dict:
    rng = np.random.default_rng(2)
    q = rng.normal(size=(n_queries, 64))
    c = rng.normal(size=(n_docs, 64))
    style = rng.normal(size=n_docs)
    t0 = time.perf_counter()
    res = style_tracking(q, c, style, n_queries=n_queries, seed=0, top_k=10)
    fast = time.perf_counter() - t0
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    cn = c / np.linalg.norm(c, axis=1, keepdims=True)
    pct = style_percentiles(style)
    t0 = time.perf_counter()
    for i in range(n_loop):
        sims = cn @ qn[i]
        rho = spearmanr(sims, style).statistic
        top = pct[np.argsort(-sims, kind="stable")[:10]].mean()
        assert abs(rho - res.rho_per_query[i]) < 1e-9 and abs(top - res.top_k_percentile_per_query[i]) < 1e-9
    loop = (time.perf_counter() - t0) / n_loop * n_queries
    return {"tracking.n_queries": n_queries, "tracking.n_docs": n_docs, "tracking.seconds": round(fast, 2),
            "tracking.loop_seconds_scaled": round(loop, 2), "tracking.speedup": round(loop / fast, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sources", type=int, default=1282)
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--docs", type=int, default=20000)
    args = ap.parse_args(argv)
    out = {**bench_bootstrap(args.sources, args.n_boot, n_loop=50),
           **bench_tracking(args.queries, args.docs, n_loop=20)}
    for k, v in out.items():
        print(f"{k:32s} {v}")
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
