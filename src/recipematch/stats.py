"""The one bootstrap module: every interval of the paper (paper Appendix A,
"Statistical reporting", "The cluster bootstrap governs ...", and the three-scale paragraph
"The difference-in-differences holds on all three scales").

Conventions
-----------
- Inputs are per-query scores of shape ``(n_seeds, n_queries)``: 0/1 hits (R@k) or any
  per-query metric. Results are in the inputs' units: 0/1 hits give a *fraction*; multiply by
  100 for points. Row ``s`` of an arm is training seed ``s``; columns are the same queries in
  every array of one test.
- **Nested bootstrap** (Appendix A, B = 5,000): each replicate redraws the queries with
  replacement, one draw shared by both arms (paired over queries), and redraws each arm's
  seeds with replacement, independently per arm by default or with the same indices for both
  arms (``paired_seeds=True``, as the peer's headline recipe − verified contrast did). The
  replicate statistic is the mean over drawn seeds and drawn queries of arm a minus the same
  for arm b.
- **Cluster bootstrap** (Appendix A, duplicate sets): draw clusters with replacement (as many
  as there are), then redraw queries with replacement *within* each drawn cluster (as many as
  it has); nested inside the seed draw. The replicate mean divides by the number of queries
  drawn in that replicate.
- **Paired query bootstrap** for single runs (Appendix A): the nested scheme with one seed.
- **Difference-in-differences** (Appendix A): benchmark gap minus real-duplicate gap computed
  inside each replicate; the seed draws are shared by both tests (seed s of an arm is the
  same trained model on both), the query/cluster draws are independent per test.
- **Three scales** (Appendix A, B = 10,000): per-seed R@1 on points, log-odds and error
  reduction, seed-paired, bootstrap over seeds only.
- **Interval**: percentile interval of the replicates at ``level`` (numpy's default linear
  interpolation between order statistics).
- Mean ± sample standard deviation (ddof = 1) across seeds: :func:`mean_sd`.

Coverage (seeded simulations, ``tests/test_stats.py``): with eight seeds and a seed effect
of the order of the query-sampling error, the 95% nested interval covers a known gap about
96–97% of the time. The scheme counts per-run noise twice (once through the query draw, once
through the seed draw), so it is conservative when seeds barely matter (coverage 1.00), and
the seed draw of a few seeds understates the seed variance (by ``(S - 1) / S``), so with three
seeds and a large seed effect it undercovers (0.89). Read three-seed intervals with that in
mind.

Randomness and speed
--------------------
Everything is seeded. Replicates come in chunks of 500 (:data:`_CHUNK`); chunk ``c``
(replicates ``500c .. 500c+499``) takes child ``c`` of ``np.random.SeedSequence(seed)`` and
spawns from it ``2 + 2 * n_tests`` generators: 0 draws arm a's seeds, 1 arm b's seeds, and
for test ``t`` (0 = the benchmark, 1 = the real-duplicate set of a DiD) ``2 + 2t`` draws
queries (or clusters) and ``3 + 2t`` the binomial split below (or the members within drawn
clusters). Every draw is :mod:`recipematch.resample`'s (a uniform index in ``[0, n)`` is
``floor(u * n)``, ``u`` a 53-bit uniform double), the project's one resampler. Inside a
chunk each stream is consumed in replicate order, so the numbers do not depend on how many
replicates are vectorised at once nor on how many threads run the chunks, and a plain loop
over replicates reading the same streams gives the same numbers (tested).

Resampling uses integer count matrices: a block of replicates' query draws becomes a
``(block, n_queries)`` matrix of counts (``np.bincount``), and the per-seed sums are one
matrix product ``counts @ scores.T``; seed draws are ``(block, n_seeds)`` count matrices too.
No Python loop runs over queries, seeds or clusters. When at least a quarter of the queries
score one constant in every run of both arms (typical of the hard tier), those queries
cannot move a gap, so each replicate draws how many of its ``n_queries`` draws land on the
other queries, ``N ~ Binomial(n_queries, n_other / n_queries)``, and then draws only those
``N``: the multinomial of the plain scheme, grouped, hence the same distribution. Integer
scores whose sums stay below ``2**24`` are summed in float32 (exact); others in float64.
BLAS is pinned to one thread during the bootstrap (its products are tiny); ``n_threads``
runs chunks on a thread pool, with identical numbers.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np

from recipematch.resample import draw_counts, percentile_interval, row_counts, uniform_index

__all__ = [
    "BootstrapInterval",
    "DidResult",
    "mean_sd",
    "nested_bootstrap_gap",
    "paired_query_bootstrap",
    "did_bootstrap",
    "did_three_scales",
]

_CHUNK = 500  # replicates per independent random stream set (fixed: part of the method)
_DRAWS_PER_BLOCK = 1 << 17  # query draws vectorised at once; results do not depend on it


@dataclass(frozen=True)
class BootstrapInterval:
    """A point estimate with its bootstrap interval.

    Attributes:
        estimate: the statistic on the observed data (in the inputs' units).
        low, high: percentile interval bounds at ``level``.
        n_boot: replicates.
        seed: the seed of ``np.random.SeedSequence``.
        scheme: ``"query"`` (queries resampled), ``"cluster"`` (clusters, then queries in
            them) or ``"seed"`` (seeds only).
        seeds: ``"independent"``, ``"paired"`` or ``"single_run"``.
        level: interval coverage, e.g. 0.95.
        n_seeds_a, n_seeds_b, n_queries, n_clusters: the shape of the data.
    """

    estimate: float
    low: float
    high: float
    n_boot: int
    seed: int
    scheme: str
    seeds: str
    level: float = 0.95
    n_seeds_a: int = 0
    n_seeds_b: int = 0
    n_queries: int = 0
    n_clusters: int | None = None

    def to_dict(self) -> dict:
        """A JSON-serialisable dict (plain floats and ints)."""
        return asdict(self)


@dataclass(frozen=True)
class DidResult:
    """Benchmark gap, real-duplicate gap and their difference, from one set of replicates."""

    gap_bench: BootstrapInterval
    gap_real: BootstrapInterval
    did: BootstrapInterval

    def to_dict(self) -> dict:
        return {"gap_bench": self.gap_bench.to_dict(), "gap_real": self.gap_real.to_dict(),
                "did": self.did.to_dict()}


def mean_sd(values) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1) across seeds (Appendix A).

    Returns ``(mean, sd)``; ``sd`` is NaN for a single value. Raises ``ValueError`` when
    ``values`` is empty or not finite.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        raise ValueError("mean_sd of no values")
    if not np.all(np.isfinite(v)):
        raise ValueError("mean_sd: values must be finite")
    sd = float(np.std(v, ddof=1)) if v.size > 1 else float("nan")
    return float(v.mean()), sd


# --------------------------------------------------------------------------- draws


GROUPING_MIN_CONSTANT = 0.25  # group constant queries when at least this share is constant


def _use_grouping(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """Indices of the non-constant queries when grouping pays, else None (plain draws).

    A query is constant when every run of both arms gives it the same score. Grouping costs
    a little per draw, so it is used only when at least :data:`GROUPING_MIN_CONSTANT` of the
    queries are constant; the rule depends on the data alone, so results stay deterministic.
    """
    constant = np.all(a == a[:1], axis=0) & np.all(b == a[:1], axis=0)  # (Q,)
    if constant.mean() < GROUPING_MIN_CONSTANT:
        return None
    return np.flatnonzero(~constant)


class _QueryDraws:
    """Per-seed sums over the queries drawn by blocks of replicates, for one test.

    Query scheme, plain: each replicate draws ``n_queries`` uniform indices (stream
    ``rng_q``, ``n_queries`` doubles per replicate). Query scheme, grouped (when
    :func:`_use_grouping` says so): queries whose score is one constant in every run of
    both arms add ``c * (1 - 1) = 0`` to every replicate gap, so each replicate draws how
    many of its ``n_queries`` draws land on the other k queries, ``N ~ Binomial(n_queries,
    k / n_queries)`` (stream ``rng_b``), then ``N`` uniform indices among those k (stream
    ``rng_q``): the same multinomial, grouped. Cluster scheme: ``rng_q`` draws the clusters
    (as many as there are), ``rng_b`` the members within each drawn cluster (as many as it
    has). The draws of a block become a ``(block, n_cols)`` count matrix ``W`` (bincount)
    and the per-seed sums are ``W @ [a; b].T``.
    """

    def __init__(self, a: np.ndarray, b: np.ndarray, clusters, rng_q, rng_b) -> None:
        self.n = a.shape[1]
        self.sa = a.shape[0]
        self.rng_q = rng_q
        self.rng_b = rng_b
        self.clusters = None
        self.grouped = None
        if clusters is not None:
            labels = np.asarray(clusters)
            if labels.shape != (self.n,):
                raise ValueError(f"clusters must have shape ({self.n},), got {labels.shape}")
            if labels.dtype.kind == "f" and np.isnan(labels).any():
                raise ValueError("clusters contain NaN labels; give every query a cluster")
            if labels.dtype == object and any(x is None or (isinstance(x, float) and x != x) for x in labels):
                raise ValueError("clusters contain missing (None/NaN) labels; give every query a cluster")
            _, codes = np.unique(labels, return_inverse=True)
            codes = codes.astype(np.int64).ravel()
            self.order = np.argsort(codes, kind="stable")  # members grouped by cluster
            self.sizes = np.bincount(codes)  # (C,)
            self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
            self.clusters = codes
            cols = np.arange(self.n)
        else:
            self.grouped = _use_grouping(a, b)
            cols = np.arange(self.n) if self.grouped is None else self.grouped
        # integer-valued scores whose sums stay below 2**24 are summed exactly in float32
        max_draws = self.n if clusters is None else int(self.sizes.size * self.sizes.max())
        exact32 = (np.all(a == np.round(a)) and np.all(b == np.round(b))
                   and max(np.abs(a).max(), np.abs(b).max()) * max_draws < 2 ** 24)
        self.dtype = np.float32 if exact32 else np.float64
        self.k = cols.size
        self.scores_t = np.ascontiguousarray(np.vstack([a, b])[:, cols].T,
                                             dtype=self.dtype)  # (k, Sa + Sb)

    @property
    def n_clusters(self) -> int | None:
        return None if self.clusters is None else int(self.sizes.size)

    def _flat_draws(self, n_rep: int) -> tuple[np.ndarray, np.ndarray]:
        """Flat indices ``rep * k + col`` of every draw of the block, and the totals."""
        k = self.k
        if self.clusters is not None:
            c = self.sizes.size
            drawn = uniform_index(self.rng_q, c, (n_rep, c))  # (n_rep, C) cluster draws
            sz = self.sizes[drawn]  # (n_rep, C): members to draw in each drawn cluster
            flat_sz = sz.ravel()
            cl = np.repeat(drawn.ravel(), flat_sz)
            member = self.starts[cl] + uniform_index(self.rng_b, self.sizes[cl], cl.size)  # within each cluster
            idx = self.order[member]
            per_rep = sz.sum(axis=1)
            flat = np.repeat(np.arange(n_rep, dtype=np.int64) * k, per_rep)
            flat += idx
            return flat, per_rep.astype(np.float64)
        totals = np.full(n_rep, float(self.n))
        if self.grouped is None:
            idx = uniform_index(self.rng_q, k, (n_rep, k))  # (n_rep, Q)
            idx += (np.arange(n_rep, dtype=np.int64) * k)[:, None]
            return idx.ravel(), totals
        n_inf = (np.full(n_rep, self.n, dtype=np.int64) if k == self.n
                 else self.rng_b.binomial(self.n, k / self.n, size=n_rep))
        flat = np.repeat(np.arange(n_rep, dtype=np.int64) * k, n_inf)
        flat += uniform_index(self.rng_q, k, int(n_inf.sum()))
        return flat, totals

    def sums(self, n_rep: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(va (n_rep, Sa), vb (n_rep, Sb), totals (n_rep,))``, float64: per-seed sums over
        each replicate's drawn queries, and the number of queries drawn."""
        if self.k == 0:
            totals = np.full(n_rep, float(self.n))
            return np.zeros((n_rep, self.sa)), np.zeros(
                (n_rep, self.scores_t.shape[1] - self.sa)), totals
        flat, totals = self._flat_draws(n_rep)
        w = np.bincount(flat, minlength=n_rep * self.k).reshape(n_rep, self.k)
        v = (w.astype(self.dtype) @ self.scores_t).astype(np.float64)  # (n_rep, Sa + Sb)
        return v[:, :self.sa], v[:, self.sa:], totals


def _blas_single_thread():
    """Pin BLAS to one thread during the bootstrap: its products are tiny, and a
    multi-threaded BLAS on a busy machine slows them down by orders of magnitude."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        from contextlib import nullcontext

        return nullcontext()
    return threadpool_limits(1, user_api="blas")


def _seed_counts(rng, n_seeds: int, n_rep: int) -> np.ndarray:
    """(n_rep, n_seeds) float64 counts of seed indices drawn with replacement."""
    return draw_counts(rng, n_seeds, n_rep).astype(
        np.float64)


def _check_pair(a, b, name_a: str, name_b: str, paired_seeds: bool):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    for arr, name in ((a, name_a), (b, name_b)):
        if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
            raise ValueError(f"{name} must have shape (n_seeds, n_queries), got {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} contains NaN or infinite values")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"{name_a} and {name_b} must score the same queries: "
                         f"{a.shape[1]} vs {b.shape[1]} columns")
    if paired_seeds and a.shape[0] != b.shape[0]:
        raise ValueError("paired_seeds needs the same number of seeds in both arms")
    return a, b


def _chunk_streams(seed: int, n_boot: int, n_tests: int) -> list[list[np.random.Generator]]:
    """Per chunk of :data:`_CHUNK` replicates, the generators of the module docstring."""
    n_chunks = -(-n_boot // _CHUNK)
    return [[np.random.default_rng(s) for s in chunk.spawn(2 + 2 * n_tests)]
            for chunk in np.random.SeedSequence(seed).spawn(n_chunks)]


def _run(tests, *, n_boot: int, seed: int, paired_seeds: bool, n_seeds_a: int,
         n_seeds_b: int, n_threads: int = 1) -> list[np.ndarray]:
    """Replicate gaps for each test; tests = [(a, b, clusters), ...] sharing seed draws."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    out = [np.empty(n_boot) for _ in tests]
    chunks = _chunk_streams(seed, n_boot, len(tests))

    def run_chunk(c: int) -> None:
        streams = chunks[c]
        draws = [_QueryDraws(a, b, cl, streams[2 + 2 * t], streams[3 + 2 * t])
                 for t, (a, b, cl) in enumerate(tests)]
        stop_c = min(n_boot, (c + 1) * _CHUNK)
        block = max(1, _DRAWS_PER_BLOCK // max(a.shape[1] for a, _b, _c in tests))
        for start in range(c * _CHUNK, stop_c, block):
            m = min(block, stop_c - start)
            ua = _seed_counts(streams[0], n_seeds_a, m)  # (m, Sa)
            ub = ua if paired_seeds else _seed_counts(streams[1], n_seeds_b, m)  # (m, Sb)
            for t in range(len(tests)):
                va, vb, total = draws[t].sums(m)
                mean_a = np.einsum("rs,rs->r", ua, va) / (n_seeds_a * total)
                mean_b = np.einsum("rs,rs->r", ub, vb) / (n_seeds_b * total)
                out[t][start:start + m] = mean_a - mean_b

    workers = max(1, min(n_threads, len(chunks)))
    with _blas_single_thread():
        if workers == 1:
            for c in range(len(chunks)):
                run_chunk(c)
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                list(pool.map(run_chunk, range(len(chunks))))
    return out


def _interval(estimate, reps, *, n_boot, seed, scheme, seeds, level, a, b, n_clusters):
    low, high = percentile_interval(reps, level)
    return BootstrapInterval(
        estimate=float(estimate), low=low, high=high, n_boot=int(n_boot), seed=int(seed),
        scheme=scheme, seeds=seeds, level=float(level), n_seeds_a=int(a.shape[0]),
        n_seeds_b=int(b.shape[0]), n_queries=int(a.shape[1]), n_clusters=n_clusters)


def nested_bootstrap_gap(
    hits_a,
    hits_b,
    *,
    n_boot: int = 5000,
    seed: int = 0,
    clusters=None,
    paired_seeds: bool = False,
    level: float = 0.95,
    return_replicates: bool = False,
    n_threads: int = 1,
):
    """Gap between two arms with a nested bootstrap interval (Appendix A).

    Args:
        hits_a, hits_b: ``(n_seeds, n_queries)`` per-query scores of arm a and arm b on the
            same queries (0/1 hits or any per-query metric); the seed counts may differ
            unless ``paired_seeds``.
        n_boot: replicates (the paper: 5,000).
        seed: seeds ``np.random.SeedSequence`` (see the module docstring for the streams).
        clusters: ``(n_queries,)`` cluster labels: switches to the cluster scheme (draw
            clusters, then queries within each drawn cluster).
        paired_seeds: draw the same seed indices for both arms (the peer's headline
            recipe − verified contrast); default independent draws per arm.
        level: interval coverage.
        return_replicates: also return the ``(n_boot,)`` replicate gaps.
        n_threads: threads running the chunks of replicates; the numbers do not depend on it.

    Returns:
        :class:`BootstrapInterval` whose ``estimate`` is mean(a) − mean(b) over all seeds and
        queries, in the arrays' units; with ``return_replicates`` a tuple
        ``(interval, replicates)``.

    Raises:
        ValueError: bad shapes, non-finite values, ``n_boot < 1``, or ``paired_seeds`` with
            unequal seed counts.

    Example:
        >>> a = np.array([[1, 1, 0, 1]]); b = np.array([[0, 1, 0, 0]])
        >>> nested_bootstrap_gap(a, b, n_boot=200).estimate
        0.5
    """
    a, b = _check_pair(hits_a, hits_b, "hits_a", "hits_b", paired_seeds)
    (reps,) = _run([(a, b, clusters)], n_boot=n_boot, seed=seed, paired_seeds=paired_seeds,
                   n_seeds_a=a.shape[0], n_seeds_b=b.shape[0], n_threads=n_threads)
    single = a.shape[0] == 1 and b.shape[0] == 1
    res = _interval(a.mean() - b.mean(), reps, n_boot=n_boot, seed=seed,
                    scheme="query" if clusters is None else "cluster",
                    seeds="single_run" if single else (
                        "paired" if paired_seeds else "independent"),
                    level=level, a=a, b=b,
                    n_clusters=None if clusters is None else int(np.unique(clusters).size))
    return (res, reps) if return_replicates else res


def paired_query_bootstrap(scores_a, scores_b, *, n_boot: int = 5000, seed: int = 0,
                           clusters=None, level: float = 0.95) -> BootstrapInterval:
    """Single runs (Appendix A): paired bootstrap over queries of mean(a) − mean(b).

    ``scores_a`` and ``scores_b`` are ``(n_queries,)`` per-query scores of two models on the
    same queries; ``clusters`` switches to the cluster scheme.
    """
    a = np.asarray(scores_a, dtype=np.float64)
    b = np.asarray(scores_b, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError("paired_query_bootstrap takes 1-D per-query scores")
    return nested_bootstrap_gap(a[None, :], b[None, :], n_boot=n_boot, seed=seed,
                                clusters=clusters, paired_seeds=True, level=level)


def did_bootstrap(
    bench_a,
    bench_b,
    real_a,
    real_b,
    *,
    n_boot: int = 5000,
    seed: int = 0,
    real_clusters=None,
    bench_clusters=None,
    paired_seeds: bool = False,
    level: float = 0.95,
    return_replicates: bool = False,
    n_threads: int = 1,
):
    """Difference-in-differences, benchmark gap − real-duplicate gap (Appendix A).

    Args:
        bench_a, bench_b: ``(n_seeds, n_bench_queries)`` per-query scores of the two arms on
            the benchmark.
        real_a, real_b: ``(n_seeds, n_real_queries)`` the same arms (same seeds, same row
            order) on the real-duplicate set.
        real_clusters: ``(n_real_queries,)`` cluster labels: the real set is resampled by
            clusters, then queries within them (the paper's cross-language intervals).
        bench_clusters: likewise for the benchmark (default: queries).
        paired_seeds, n_boot, seed, level, n_threads: as in :func:`nested_bootstrap_gap`.

    Every replicate draws each arm's seeds once, shared by both tests, and draws the two
    tests' queries independently; the DiD is computed inside the replicate. With the same
    ``seed``, ``gap_bench`` equals ``nested_bootstrap_gap(bench_a, bench_b, ...)``.

    Returns:
        :class:`DidResult` ``(gap_bench, gap_real, did)``, in the arrays' units; with
        ``return_replicates`` a tuple ``(result, (n_boot, 3) replicates)``.
    """
    ba, bb = _check_pair(bench_a, bench_b, "bench_a", "bench_b", paired_seeds)
    ra, rb = _check_pair(real_a, real_b, "real_a", "real_b", paired_seeds)
    if ba.shape[0] != ra.shape[0] or bb.shape[0] != rb.shape[0]:
        raise ValueError("each arm needs the same seeds (rows) on both tests")
    rep_bench, rep_real = _run([(ba, bb, bench_clusters), (ra, rb, real_clusters)],
                               n_boot=n_boot, seed=seed, paired_seeds=paired_seeds,
                               n_seeds_a=ba.shape[0], n_seeds_b=bb.shape[0],
                               n_threads=n_threads)
    seeds = "paired" if paired_seeds else "independent"
    if ba.shape[0] == 1 and bb.shape[0] == 1:
        seeds = "single_run"

    def nclu(c):
        return None if c is None else int(np.unique(c).size)

    g_b = _interval(ba.mean() - bb.mean(), rep_bench, n_boot=n_boot, seed=seed,
                    scheme="query" if bench_clusters is None else "cluster", seeds=seeds,
                    level=level, a=ba, b=bb, n_clusters=nclu(bench_clusters))
    g_r = _interval(ra.mean() - rb.mean(), rep_real, n_boot=n_boot, seed=seed,
                    scheme="query" if real_clusters is None else "cluster", seeds=seeds,
                    level=level, a=ra, b=rb, n_clusters=nclu(real_clusters))
    did_reps = rep_bench - rep_real
    d = _interval(g_b.estimate - g_r.estimate, did_reps, n_boot=n_boot, seed=seed,
                  scheme=f"{g_b.scheme}-{g_r.scheme}", seeds=seeds, level=level, a=ba, b=bb,
                  n_clusters=nclu(real_clusters))
    res = DidResult(g_b, g_r, d)
    if return_replicates:
        return res, np.stack([rep_bench, rep_real, did_reps], axis=1)
    return res


# --------------------------------------------------------------------------- three scales


def _to_fraction(x, name: str) -> np.ndarray:
    v = np.asarray(x, dtype=np.float64)
    if v.ndim != 1 or v.size < 1:
        raise ValueError(f"{name} must be a 1-D array of per-seed values")
    if np.any((v <= 0) | (v >= 100)):
        raise ValueError(f"{name}: every value must lie strictly between 0 and 100 percent "
                         "(log-odds and error reduction are undefined at 0 or 100)")
    return v / 100.0


def _logit(p):
    return np.log(p / (1.0 - p))


_SCALES = {
    # per-seed gap of arm a over arm b on one scale (fractions in, scale units out)
    "points": lambda a, b: 100.0 * (a - b),
    "log_odds": lambda a, b: _logit(a) - _logit(b),
    "error_reduction": lambda a, b: (a - b) / (1.0 - b),
}


def _share_block(did_mean: float, gap_mean: float, rep_share: np.ndarray, block) -> dict:
    """DiD / bench gap with its interval, or nulls with the reason where it is undefined: a
    benchmark gap of 0 in the estimate (no share of nothing) or in a drawn replicate (the
    interval would read an infinite replicate). Never a NaN or an infinity in the JSON."""
    if gap_mean == 0:
        return {"estimate": None, "low": None, "high": None, "undefined": "the benchmark gap is 0"}
    if not np.isfinite(rep_share).all():
        return {"estimate": float(did_mean / gap_mean), "low": None, "high": None,
                "undefined": "the benchmark gap is 0 in a drawn replicate"}
    return block(did_mean / gap_mean, rep_share)


def did_three_scales(bench_a, bench_b, real_a, real_b, *, n_boot: int = 10_000,
                     seed: int = 0, level: float = 0.95) -> dict[str, dict]:
    """The DiD on three scales, seed-paired, bootstrap over seeds (Appendix A).

    Args:
        bench_a, bench_b, real_a, real_b: ``(n_seeds,)`` per-seed R@1 in **percent**
            (strictly between 0 and 100); entry s of every array is seed s (paired).
        n_boot: replicates (the paper: 10,000); each draws seed indices with replacement,
            one draw shared by all four arrays.

    Scales, per seed s (a over b): **points** ``100·(a − b)``; **log-odds**
    ``logit(a) − logit(b)``; **error reduction** ``(a − b) / (1 − b)``, the fraction of b's
    remaining errors that a removes (a, b as fractions). Per scale the per-seed DiD is
    bench gap − real gap; the estimate is its mean over seeds, the interval the percentile
    interval of the mean over drawn seeds. ``share`` is DiD / bench gap (the part of the
    benchmark gap that does not reach real data), also computed per replicate.

    Returns:
        ``{scale: {"did": {estimate, low, high}, "bench_gap": {...}, "real_gap": {...},
        "share": {...}, "n_seeds_did_positive": int, "n_seeds": int}, "n_boot": ..,
        "seed": .., "level": ..}``.
    """
    ba, bb = _to_fraction(bench_a, "bench_a"), _to_fraction(bench_b, "bench_b")
    ra, rb = _to_fraction(real_a, "real_a"), _to_fraction(real_b, "real_b")
    n = ba.size
    if not (bb.size == ra.size == rb.size == n):
        raise ValueError("all four arrays need one value per seed, same seeds")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    counts = draw_counts(rng, n, n_boot).astype(np.float64) / n
    out: dict[str, dict] = {}
    for name, fn in _SCALES.items():
        g = fn(ba, bb)  # (n,) per-seed benchmark gap
        h = fn(ra, rb)  # (n,) per-seed real gap
        did = g - h
        rep_g, rep_h = counts @ g, counts @ h  # (n_boot,) means over drawn seeds
        rep_did = rep_g - rep_h
        with np.errstate(divide="ignore", invalid="ignore"):
            rep_share = rep_did / rep_g

        def block(est, reps):
            low, high = percentile_interval(reps, level)
            return {"estimate": float(est), "low": low, "high": high}

        out[name] = {
            "did": block(did.mean(), rep_did),
            "bench_gap": block(g.mean(), rep_g),
            "real_gap": block(h.mean(), rep_h),
            "share": _share_block(did.mean(), g.mean(), rep_share, block),
            "n_seeds_did_positive": int((did > 0).sum()),
            "n_seeds": int(n),
        }
    out["n_boot"] = int(n_boot)
    out["seed"] = int(seed)
    out["level"] = float(level)
    return out

