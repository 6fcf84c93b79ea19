"""Metrics as pure functions: exact, hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from recipematch.metrics import (
    hits_at_k,
    near_miss_win_rate,
    recall_at_k,
    recall_by_group,
    recall_by_slices,
    strict_crosslingual_qrels,
)


@pytest.mark.parametrize("ranks, expected", [
    ([0], {"R@1": 100.0, "R@5": 100.0, "R@10": 100.0}),
    ([0, 1, 4, 5, 9, 10, -1, 0], {"R@1": 25.0, "R@5": 50.0, "R@10": 75.0}),
    ([-1, -1], {"R@1": 0.0, "R@5": 0.0, "R@10": 0.0}),
    ([3, 7, 200], {"R@1": 0.0, "R@5": 100 / 3, "R@10": 200 / 3}),
])
def test_recall_at_k_exact(ranks, expected):
    got = recall_at_k(np.asarray(ranks), (1, 5, 10))
    assert got.keys() == expected.keys()
    for k, v in expected.items():
        assert got[k] == pytest.approx(v, abs=1e-12)


def test_hits_at_k_no_gold_is_a_miss():
    assert hits_at_k(np.array([0, -1, 2]), 3).tolist() == [True, False, True]


@pytest.mark.parametrize("bad", [[[0, 1]], [0.5], [-2]])
def test_recall_rejects_bad_ranks(bad):
    with pytest.raises(ValueError):
        recall_at_k(np.asarray(bad))


def test_recall_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="zero queries"):
        recall_at_k(np.array([], dtype=np.int64))


def test_recall_by_group():
    out = recall_by_group(np.array([0, 3, 0, -1]), ["Alg", "Geo", "Geo", "Alg"], ks=(1, 5))
    assert out == {"Alg": {"R@1": 50.0, "R@5": 50.0, "n": 2},
                   "Geo": {"R@1": 50.0, "R@5": 100.0, "n": 2}}


def test_recall_by_slices_empty_slice_is_nan():
    out = recall_by_slices(np.array([0, 6]), {"all": [True, True], "none": [False, False]},
                           ks=(1, 10))
    assert out["all"] == {"R@1": 50.0, "R@10": 100.0, "n": 2}
    assert out["none"]["n"] == 0 and math.isnan(out["none"]["R@1"])


def test_near_miss_win_rate_leaves_out_queries_without_near_misses():
    out = near_miss_win_rate([1.0, 0.0, np.nan, 1.0, 0.0])
    assert out == {"gold_beats_all_near_misses": 50.0, "n_wins": 2, "n_scored": 4,
                   "n_without_near_misses": 1}


def test_strict_crosslingual_rule():
    qrels = {"q1": {"a": 1, "b": 1, "c": 0}, "q2": {"d": 1}, "q3": {"e": 1}}
    qlang = {"q1": "nl", "q2": "de", "q3": None}
    dlang = {"a": "en", "b": "nl", "c": "fr", "d": None, "e": "en"}
    assert strict_crosslingual_qrels(qrels, qlang, dlang) == {
        "q1": {"a": 1},  # same-language b and score-0 c dropped
        "q2": {},  # gold with unknown language never counts as different
        "q3": {},  # query with unknown language
    }
