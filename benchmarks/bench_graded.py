"""Graded measures: how long a run (top-``depth`` per query) and ir_measures' nDCG/AP/R take.

Workload: ``--queries`` random unit queries against ``--docs`` x ``--dim`` random unit
documents, float32, three graded golds per query (grades 1, 2, 2), depth 100, measures
nDCG@10, nDCG@10 with exponential gain, AP@100 and R@100 (recipematch.graded). The dense run
uses recipematch.retrieval.search_topk; the measures are ir_measures' pytrec_eval. The last
line printed is one JSON object with the seconds of each part and per 1,000 queries.
Run by hand: ``.venv/bin/python benchmarks/bench_graded.py [--queries 2000 --docs 50000]``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def unit_vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """``(n, dim)`` float32 random unit rows (shared by the benchmark scripts)."""
    x = rng.standard_normal((n, dim), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--docs", type=int, default=50_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    from recipematch.graded import Run, measure_run, parse_measures
    from recipematch.retrieval.dense import search_topk

    rng = np.random.default_rng(a.seed)
    q, d = unit_vectors(rng, a.queries, a.dim), unit_vectors(rng, a.docs, a.dim)
    qids = [f"q{i}" for i in range(a.queries)]
    dids = [f"d{i}" for i in range(a.docs)]
    golds = rng.integers(0, a.docs, size=(a.queries, 3))
    qrels = {qid: {dids[g[0]]: 1, dids[g[1]]: 2, dids[g[2]]: 2} for qid, g in zip(qids, golds)}
    t0 = time.perf_counter()
    idx, scores = search_topk(q, d, a.depth, query_ids=qids, doc_ids=dids, self_mask=False)
    t_search = time.perf_counter() - t0
    run = Run(qids, np.asarray(dids + [None], dtype=object)[idx], scores, "random")
    measures = parse_measures(["nDCG@10", "AP@100", "R@100"], grades=[0, 1, 2]) + \
        parse_measures(["nDCG@10"], gain="exponential", grades=[0, 1, 2])
    t0 = time.perf_counter()
    values, _ = measure_run(qrels, run, measures)
    t_measure = time.perf_counter() - t0
    print(json.dumps({"queries": a.queries, "docs": a.docs, "dim": a.dim, "depth": a.depth,
                      "search_s": round(t_search, 3), "measures_s": round(t_measure, 3),
                      "measures_s_per_1000_queries": round(1000 * t_measure / a.queries, 3),
                      "values": {k: round(v, 5) for k, v in values.items()}}))


if __name__ == "__main__":
    main()
