"""SABER-Math's reranking path: how long a reranking run and its exponential-gain nDCG@10 take.

Workload: ``--queries`` random unit queries, each with ``--candidates`` candidates drawn from
``--docs`` x ``--dim`` random unit documents (SABER-Math: 1,000 x 150 out of 71,117), grades
uniform in [0, 5], float32. A stand-in encoder returns the precomputed vectors, so the time is
recipematch.graded.rerank_run's (the candidates' cosines, the ordering) and
measure_real_valued's, not a model's. The last line printed is one JSON object with the seconds.
Run by hand: ``.venv/bin/python benchmarks/bench_rerank.py [--queries 1000 --docs 71117]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from types import SimpleNamespace

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--candidates", type=int, default=150)
    ap.add_argument("--docs", type=int, default=71_117)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    from recipematch.graded import measure_real_valued, parse_measures, rerank_run

    from bench_graded import unit_vectors  # the sibling script (run from benchmarks/ or as a path)

    rng = np.random.default_rng(a.seed)
    vectors = {"q": unit_vectors(rng, a.queries, a.dim), "d": unit_vectors(rng, a.docs, a.dim)}

    class Stored:  # the encoder's work is not what is timed: texts are "q<i>" / "d<i>"
        cache_key = f"stored-{a.seed}"

        def encode(self, texts):
            return np.stack([vectors[t[0]][int(t[1:])] for t in texts])

    qids = [f"q{i}" for i in range(a.queries)]
    dids = [f"d{i}" for i in range(a.docs)]
    cand = {q: [dids[j] for j in rng.choice(a.docs, a.candidates, replace=False)] for q in qids}
    qrels = {q: {d: float(g) for d, g in zip(cand[q], rng.uniform(0, 5, a.candidates))} for q in qids}
    bset = SimpleNamespace(query_ids=qids, queries={q: q for q in qids}, corpus={d: {"text": d} for d in dids})
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run = rerank_run(bset, Stored(), cand, a.candidates, cache_dir=tmp)
        t_run = time.perf_counter() - t0
    t0 = time.perf_counter()
    values, _ = measure_real_valued(qrels, run, parse_measures(["nDCG@10"]), "exponential")
    t_measure = time.perf_counter() - t0
    print(json.dumps({"queries": a.queries, "candidates": a.candidates, "docs": a.docs, "dim": a.dim,
                      "rerank_s_with_encoding_cache": round(t_run, 3), "ndcg_s": round(t_measure, 3),
                      "values": {k: round(v, 5) for k, v in values.items()}}))


if __name__ == "__main__":
    main()
