"""Table-1 statistics: recipematch.stats.did_bootstrap against a straightforward loop.

Workload (issue "Speed and memory"): two arms x 8 seeds x 15,000 benchmark queries
(per-query 0/1 hits at R@1), B = 5,000 nested replicates (queries resampled once for both
arms, each arm's seeds resampled independently), with the difference-in-differences against
a 393-query duplicate set in 370 clusters (cluster bootstrap nested in the seed draw). One
``did_bootstrap`` call gives the benchmark gap, the duplicate-set gap and the DiD, each with
its interval: one column of Table 1. Goals: <= 30 s on 2 cores, >= 50 x faster than a
straightforward Python-loop implementation, timed at a small B and scaled linearly.

Two loop baselines are timed, both drawing with numpy's Generator:

- *Python loop* (the issue's baseline, ``speedup_vs_loop``): one Python iteration per
  replicate, per drawn seed, per drawn query and per drawn cluster; the scores are Python
  lists (faster to index than arrays).
- *numpy-inner loop* (a stronger baseline, ``speedup_vs_numpy_loop``): one Python iteration
  per replicate, per drawn seed and per drawn cluster, with numpy fancy indexing over the
  queries inside.

Two synthetic data sets, both seeded:

- *calibrated*: hit probabilities from a per-query latent ability (logit scale, sd 3) plus a
  per-run perturbation (sd 1) and a seed shift (sd 0.1), with arm means set to Table 1's
  easy tier (17.05 / 62.38) and cross-language row (56.52 / 66.26). As on real rank dumps,
  many queries are hit by every run or by none; those cannot move a gap and are grouped
  (see recipematch.stats). The goal is read on this one.
- *unstructured*: independent hits with the same arm means and no query structure, the worst
  case for the grouping; reported for transparency.

The last line printed is one JSON object with ``seconds`` and ``speedup_vs_loop``.
Run by hand: ``.venv/bin/python benchmarks/bench_bootstrap.py``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from recipematch.stats import did_bootstrap

S, Q, Q_REAL, N_CLUSTERS = 8, 15_000, 393, 370


def _logit(p: float) -> float:
    return float(np.log(p / (1 - p)))


def _calibrated_hits(rng, n_queries: int, mean: float, z: np.ndarray) -> np.ndarray:
    """(S, n_queries) hits: logit p = shift + 3 z_q + 0.1 seed shift + N(0, 1) per run; the
    shift is found by bisection so the expected hit rate is ``mean``."""
    noise = rng.standard_normal((S, n_queries)) + rng.normal(0, 0.1, (S, 1))
    lo, hi = -15.0, 15.0
    for _ in range(60):
        mid = (lo + hi) / 2
        rate = np.mean(1 / (1 + np.exp(-(mid + 3 * z + noise))))
        lo, hi = (mid, hi) if rate < mean else (lo, mid)
    p = 1 / (1 + np.exp(-(lo + 3 * z + noise)))
    return (rng.random((S, n_queries)) < p).astype(np.float64)


def make_data(kind: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    clusters = np.concatenate([np.arange(N_CLUSTERS), rng.integers(0, N_CLUSTERS,
                                                                   Q_REAL - N_CLUSTERS)])
    rng.shuffle(clusters)
    if kind == "calibrated":
        z_b, z_r = rng.standard_normal(Q), rng.standard_normal(Q_REAL)
        mix = lambda z: 0.8 * z + 0.6 * rng.standard_normal(z.size)  # noqa: E731
        arrays = (_calibrated_hits(rng, Q, 0.6238, mix(z_b)),
                  _calibrated_hits(rng, Q, 0.1705, mix(z_b)),
                  _calibrated_hits(rng, Q_REAL, 0.6626, mix(z_r)),
                  _calibrated_hits(rng, Q_REAL, 0.5652, mix(z_r)))
    else:
        arrays = tuple((rng.random((S, n)) < p).astype(np.float64)
                       for n, p in ((Q, 0.6238), (Q, 0.1705), (Q_REAL, 0.6626),
                                    (Q_REAL, 0.5652)))
    return (*arrays, clusters)


def python_loop_did(bench_a, bench_b, real_a, real_b, clusters, n_boot: int, seed: int = 0):
    """The straightforward implementation: Python loops over replicates, seeds, queries and
    clusters."""
    rng = np.random.default_rng(seed)
    ba, bb, ra, rb = (x.tolist() for x in (bench_a, bench_b, real_a, real_b))
    members: dict = {}
    for j, c in enumerate(clusters.tolist()):
        members.setdefault(c, []).append(j)
    groups = list(members.values())
    n_seeds, n_q = len(ba), len(ba[0])

    def mean_over(rows, seeds, queries):
        total = 0.0
        for s in seeds:
            row = rows[s]
            for j in queries:
                total += row[j]
        return total / (len(seeds) * len(queries))

    out = []
    for _ in range(n_boot):
        sa = rng.integers(0, n_seeds, n_seeds).tolist()
        sb = rng.integers(0, n_seeds, n_seeds).tolist()
        q = rng.integers(0, n_q, n_q).tolist()
        gap_bench = mean_over(ba, sa, q) - mean_over(bb, sb, q)
        rq = []
        for c in rng.integers(0, len(groups), len(groups)).tolist():
            g = groups[c]
            for i in rng.integers(0, len(g), len(g)).tolist():
                rq.append(g[i])
        gap_real = mean_over(ra, sa, rq) - mean_over(rb, sb, rq)
        out.append((gap_bench, gap_real, gap_bench - gap_real))
    return out


def numpy_loop_did(bench_a, bench_b, real_a, real_b, clusters, n_boot: int, seed: int = 0):
    """A stronger loop: one Python iteration per replicate, per drawn seed and per drawn
    cluster; numpy over the queries."""
    rng = np.random.default_rng(seed)
    labels = np.unique(clusters)
    members = [np.flatnonzero(clusters == c) for c in labels]
    n_seeds, n_q = bench_a.shape
    out = []
    for _ in range(n_boot):
        sa = rng.integers(0, n_seeds, n_seeds)
        sb = rng.integers(0, n_seeds, n_seeds)
        q = rng.integers(0, n_q, n_q)
        gap_bench = (np.mean([bench_a[s, q].mean() for s in sa])
                     - np.mean([bench_b[s, q].mean() for s in sb]))
        drawn = rng.integers(0, len(members), len(members))
        rq = np.concatenate([rng.choice(members[c], len(members[c])) for c in drawn])
        gap_real = (np.mean([real_a[s, rq].mean() for s in sa])
                    - np.mean([real_b[s, rq].mean() for s in sb]))
        out.append((gap_bench, gap_real, gap_bench - gap_real))
    return np.array(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=5000)
    ap.add_argument("--loop-boot", type=int, default=5, help="B for the timed Python loop")
    ap.add_argument("--numpy-loop-boot", type=int, default=50,
                    help="B for the timed numpy-inner loop")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    rows, res_cal = {}, None
    loop_per_rep = numpy_loop_per_rep = None
    for kind in ("calibrated", "unstructured"):
        ba, bb, ra, rb, cl = make_data(kind)
        stack = np.vstack([ba, bb])
        constant = float(np.mean(np.all(stack == stack[0], axis=0)))
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            res = did_bootstrap(100 * ba, 100 * bb, 100 * ra, 100 * rb, n_boot=args.n_boot,
                                seed=0, real_clusters=cl)
            times.append(time.perf_counter() - t)
        if kind == "calibrated":
            res_cal = res
            t = time.perf_counter()
            python_loop_did(ba, bb, ra, rb, cl, args.loop_boot)
            loop_per_rep = (time.perf_counter() - t) / args.loop_boot
            t = time.perf_counter()
            numpy_loop_did(ba, bb, ra, rb, cl, args.numpy_loop_boot)
            numpy_loop_per_rep = (time.perf_counter() - t) / args.numpy_loop_boot
        rows[kind] = {"seconds": min(times), "constant_fraction": constant,
                      "did": res.did.to_dict()}
    loop_scaled = loop_per_rep * args.n_boot
    numpy_scaled = numpy_loop_per_rep * args.n_boot
    print(f"Table-1 statistics: 2 arms x {S} seeds x {Q} queries + DiD against {Q_REAL} "
          f"queries / {N_CLUSTERS} clusters, B = {args.n_boot}, best of {args.repeats}")
    print(f"{'implementation':<48}{'seconds':>10}{'vs loop':>10}{'vs numpy loop':>15}")
    print(f"{'Python loop (B=%d, scaled)' % args.loop_boot:<48}{loop_scaled:>10.2f}"
          f"{1.0:>10.1f}{numpy_scaled / loop_scaled:>15.2f}")
    print(f"{'numpy-inner loop (B=%d, scaled)' % args.numpy_loop_boot:<48}{numpy_scaled:>10.2f}"
          f"{loop_scaled / numpy_scaled:>10.1f}{1.0:>15.1f}")
    for kind, r in rows.items():
        label = f"did_bootstrap, {kind} ({100 * r['constant_fraction']:.0f}% constant)"
        print(f"{label:<48}{r['seconds']:>10.2f}{loop_scaled / r['seconds']:>10.1f}"
              f"{numpy_scaled / r['seconds']:>15.1f}")
    d = res_cal
    print("calibrated data: gap_bench %.2f [%.2f, %.2f], gap_real %.2f [%.2f, %.2f], "
          "DiD %.2f [%.2f, %.2f] (points)" % (
              d.gap_bench.estimate, d.gap_bench.low, d.gap_bench.high, d.gap_real.estimate,
              d.gap_real.low, d.gap_real.high, d.did.estimate, d.did.low, d.did.high))
    print(json.dumps({
        "seconds": round(rows["calibrated"]["seconds"], 3),
        "speedup_vs_loop": round(loop_scaled / rows["calibrated"]["seconds"], 1),
        "speedup_vs_numpy_loop": round(numpy_scaled / rows["calibrated"]["seconds"], 1),
        "seconds_unstructured": round(rows["unstructured"]["seconds"], 3),
        "speedup_vs_loop_unstructured": round(loop_scaled / rows["unstructured"]["seconds"], 1),
        "loop_seconds_scaled": round(loop_scaled, 2),
        "numpy_loop_seconds_scaled": round(numpy_scaled, 2),
        "loop_boot_measured": args.loop_boot,
        "numpy_loop_boot_measured": args.numpy_loop_boot,
        "n_boot": args.n_boot,
        "constant_fraction_calibrated": round(rows["calibrated"]["constant_fraction"], 4),
        "constant_fraction_unstructured": round(rows["unstructured"]["constant_fraction"], 4),
    }))


if __name__ == "__main__":
    main()
