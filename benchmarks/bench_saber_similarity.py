"""SABER-Math's candidate signals: how long the vectorised topic and summary similarities take,
against the per-pair reference loop on a slice.

Workload: a random tree of ``--nodes`` nodes (depth up to 5, as SABER-Math's ontology),
``--docs`` problems with 1-4 random topics each and a random 12-word summary from a
``--vocab``-word vocabulary; ``--queries`` query rows against the whole corpus. The reference
loop (recipematch.saber.topic_similarity / jaccard per pair) is timed on ``--ref-docs``
documents and scaled. The last line printed is one JSON object with the seconds.
Run by hand: ``.venv/bin/python benchmarks/bench_saber_similarity.py [--docs 100000 --queries 100]``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--docs", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--vocab", type=int, default=3000)
    ap.add_argument("--ref-docs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    from recipematch.saber import (
        Ontology, SimilarityIndex, information_content, jaccard, summary_tokens, topic_similarity)

    rng = np.random.default_rng(a.seed)
    parents: dict[str, str | None] = {"n0": None}
    depth = {"n0": 0}
    for i in range(1, a.nodes):
        cands = [n for n in list(parents)[-200:] if depth[n] < 5] or ["n0"]
        par = cands[int(rng.integers(len(cands)))]
        parents[f"n{i}"] = par
        depth[f"n{i}"] = depth[par] + 1
    ont = Ontology.from_parents(parents)
    nodes = list(parents)[1:]
    ids = [f"d{i}" for i in range(a.docs)]
    topics = {d: rng.choice(nodes, size=int(rng.integers(1, 5))).tolist() for d in ids}
    words = [f"w{i}" for i in range(a.vocab)]
    toks = {d: summary_tokens(" ".join(rng.choice(words, size=12))) for d in ids}
    ic = information_content(ont, topics)

    t0 = time.perf_counter()
    index = SimilarityIndex(ont, ic, ids, topics, toks)
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    for q in ids[: a.queries]:
        index.topic_row_of(q)
        index.summary_row(q)
    t_rows = time.perf_counter() - t0

    sub = ids[: a.ref_docs]
    t0 = time.perf_counter()
    for q in ids[: min(a.queries, 5)]:
        for d in sub:
            topic_similarity(ont, ic, topics[q], topics[d])
            jaccard(toks[q], toks[d])
    t_ref = (time.perf_counter() - t0) / min(a.queries, 5) / len(sub) * a.docs * a.queries
    print(json.dumps({"docs": a.docs, "nodes": a.nodes, "queries": a.queries, "build_s": round(t_build, 3),
                      "vectorised_rows_s": round(t_rows, 3), "reference_loop_s_scaled": round(t_ref, 1)}))


if __name__ == "__main__":
    main()
