"""The one resampler (recipematch.resample): its draw rule by hand, block independence, and no
second resampler anywhere in the package."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from recipematch.resample import draw_counts, percentile_interval, row_counts, uniform_index

SRC = Path(__file__).resolve().parents[1] / "src" / "recipematch"


def test_uniform_index_is_floor_u_times_n_in_stream_order():
    got = uniform_index(np.random.default_rng(5), 7, (3, 4))
    u = np.random.default_rng(5).random((3, 4))
    assert got.dtype == np.int64 and got.shape == (3, 4)
    assert np.array_equal(got, np.floor(u * 7).astype(np.int64))
    assert got.min() >= 0 and got.max() < 7
    sizes = np.array([1, 2, 3, 50])  # each index its own range
    per = uniform_index(np.random.default_rng(9), sizes, 4)
    assert np.all(per < sizes) and np.all(per >= 0)
    assert np.array_equal(per, np.floor(np.random.default_rng(9).random(4) * sizes).astype(np.int64))
    for n in (0, -3, 2.5, np.array([1, 0])):  # breaker: zeros, negatives or INT64_MIN came back
        with pytest.raises(ValueError, match="n must be integers >= 1"):
            uniform_index(np.random.default_rng(0), n, 2)


def test_draw_counts_rows_are_draws_with_replacement_and_blocks_do_not_matter():
    whole = draw_counts(np.random.default_rng(3), 6, 10)
    assert whole.shape == (10, 6) and np.all(whole.sum(axis=1) == 6)
    rng = np.random.default_rng(3)
    blocks = np.vstack([draw_counts(rng, 6, 4), draw_counts(rng, 6, 6)])
    assert np.array_equal(whole, blocks)
    idx = np.array([[0, 0, 2], [1, 2, 2]])
    assert row_counts(idx, 3).tolist() == [[2, 0, 1], [0, 1, 2]]


def test_percentile_interval_bounds_and_errors():
    assert percentile_interval(np.arange(101.0), 0.9) == pytest.approx((5.0, 95.0))
    with pytest.raises(ValueError, match="level"):
        percentile_interval([1.0], 0.0)
    with pytest.raises(ValueError, match="no replicates"):
        percentile_interval([])


def test_no_other_module_draws_or_bounds_a_bootstrap_of_its_own():
    """A second resampler (an ``integers``/``choice(replace=True)`` draw feeding a bootstrap, or
    its own percentile bounds) fails here: every bootstrap draws through recipematch.resample."""
    own = re.compile(r"np\.(quantile|percentile)\(|\.choice\([^)]*replace=True|integers\(0, n_")
    found = [f"{p.relative_to(SRC)}:{i}" for p in sorted(SRC.rglob("*.py")) if p.name != "resample.py"
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if own.search(line)]
    assert found == []
