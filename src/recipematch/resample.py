"""The one resampler: how every bootstrap in the project draws (paper Appendix A's nested
bootstrap over queries and seeds, Table 13's bootstrap over held-out sources).

A uniform index in ``[0, n)`` is ``floor(u * n)`` with ``u`` a 53-bit uniform double from
``Generator.random`` (deviation from exact uniformity below ``n * 2**-53``). A stream is
consumed in replicate order, so a block of replicates drawn at once gives the same numbers as
a plain loop over the replicates. A replicate's draw of ``n`` units with replacement is kept
as a row of counts (how often each unit was drawn), so a statistic over a block of replicates
is one matrix product with the per-unit values. The interval is the percentile interval.
"""

from __future__ import annotations

import numpy as np

__all__ = ["draw_counts", "percentile_interval", "row_counts", "uniform_index"]


def uniform_index(rng: np.random.Generator, n, shape) -> np.ndarray:
    """Uniform integers in ``[0, n)`` of ``shape`` (int64): ``floor(u * n)``, ``u`` a 53-bit
    double drawn from ``rng`` (module docstring). ``n``: an int >= 1, or an int array of
    ``shape`` giving each index its own range (members within drawn clusters).

    Raises:
        ValueError: ``n`` below 1 or not an integer (nothing to draw from).
    """
    arr = np.asarray(n)
    if arr.dtype.kind not in "iu" or (arr.size and int(arr.min()) < 1):
        raise ValueError(f"uniform_index: n must be integers >= 1, got {str(n)[:80]}")
    return (rng.random(shape) * n).astype(np.int64)


def row_counts(idx: np.ndarray, n: int) -> np.ndarray:
    """``(rows, n)`` int64 counts of each value of ``[0, n)`` in each row of ``idx`` ``(rows, m)``."""
    rows = idx.shape[0]
    flat = idx + (np.arange(rows, dtype=np.int64) * n)[:, None]
    return np.bincount(flat.ravel(), minlength=rows * n).reshape(rows, n)


def draw_counts(rng: np.random.Generator, n: int, n_rep: int) -> np.ndarray:
    """``(n_rep, n)`` int64 counts: each replicate draws ``n`` of ``n`` units uniformly with
    replacement (one row of ``n`` uniform indices per replicate, in replicate order)."""
    return row_counts(uniform_index(rng, n, (n_rep, n)), n)


def percentile_interval(replicates, level: float = 0.95) -> tuple[float, float]:
    """``(low, high)`` percentile bounds of ``replicates`` (any shape, floats; a NaN among them
    gives NaN bounds, so callers keep only finite replicates) at ``level`` in (0, 1)
    (``numpy.quantile``'s default linear interpolation).

    Raises:
        ValueError: ``level`` outside (0, 1) or no replicates.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    r = np.asarray(replicates, dtype=np.float64)
    if r.size == 0:
        raise ValueError("no replicates: an interval needs at least one")
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(r, [alpha, 1.0 - alpha])
    return float(low), float(high)
