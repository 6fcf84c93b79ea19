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
    SCORING_RULES,
    rule_qrels,
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
    qrels = {"q1": {"a": 1, "b": 1, "c": 0}, "q2": {"d": 1}, "q3": {"e": 1}, "q4": {"a": 1}}
    qlang = {"q1": "nl", "q2": "de", "q3": "en", "q4": "en"}
    tags = {"q1": {"a": "en", "b": "nl", "c": "fr"}, "q2": {"d": "unknown"},
            "q3": {"e": "en"}, "q4": {"a": "fr"}}
    assert strict_crosslingual_qrels(qrels, qlang, tags) == {
        "q1": {"a": 1},  # same-language b and score-0 c dropped
        "q2": {"d": 1},  # a gold tagged "unknown" counts as another language
        "q3": {},  # only a same-language gold: a miss
        "q4": {"a": 1},  # q4 tags a "fr" though q1 tags it "en": each query's own tag decides
    }


def test_strict_rule_refuses_untagged_input():
    with pytest.raises(ValueError, match="'q1': no language tag"):
        strict_crosslingual_qrels({"q1": {"a": 1}}, {}, {"q1": {"a": "en"}})
    with pytest.raises(ValueError, match="gold 'b' has no tag"):
        strict_crosslingual_qrels({"q1": {"b": 1}}, {"q1": "de"}, {"q1": {"a": "en"}})


def test_rule_qrels_is_data():
    qrels = {"q1": {"a": 1, "b": 0}}
    assert set(SCORING_RULES) == {"plain", "crosslingual_strict", "samelang"}
    assert rule_qrels("plain", qrels) == rule_qrels("samelang", qrels) == {"q1": {"a": 1}}
    assert rule_qrels("crosslingual_strict", qrels, query_lang={"q1": "en"},
                      gold_tags={"q1": {"a": "en", "b": "fr"}}) == {"q1": {}}
    with pytest.raises(ValueError, match="needs query_lang"):
        rule_qrels("crosslingual_strict", qrels)
    with pytest.raises(ValueError, match="unknown scoring rule"):
        rule_qrels("lenient", qrels)
