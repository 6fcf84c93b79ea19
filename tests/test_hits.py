"""Hit accounting (paper Section 7): sole-win classes, the query–gold features and how they
separate the wins, on hand-worked examples."""

from __future__ import annotations


import numpy as np
import pytest

from recipematch.errors import RecipematchError
from recipematch.hits import classify, hit_accounting, latex_jaccard, math_spans, separation, word_jaccard


def test_classes_at_k1_and_k5():
    a = [0, 2, -1, 0, 1]  # 0-based ranks as the evaluate stage writes them (0 = first, -1 = no gold)
    b = [1, 0, -1, 0, 6]
    assert classify(a, b, 1).tolist() == [0, 1, 3, 2, 3]
    assert classify(a, b, 5).tolist() == [2, 2, 3, 2, 0]


def test_a_gold_ranked_first_is_a_hit_as_r_at_1_counts_it():
    """The evaluate stage's rank 0 is the top result: classify agrees with R@1's hit rule."""
    from recipematch.metrics import hits_at_k

    ranks = np.array([0, 1, -1, 0, 9])
    for k in (1, 2, 10):
        assert ((classify(ranks, np.full(5, -1), k) == 0) == hits_at_k(ranks, k)).all()
    assert classify([0], [1], 1).tolist() == [0] and classify([1], [0], 1).tolist() == [1]


def test_classify_refuses_bad_shapes_and_k():
    with pytest.raises(RecipematchError, match="one length"):
        classify([1, 2], [1], 1)
    with pytest.raises(RecipematchError, match="k must be"):
        classify([1], [1], 0)


def test_word_and_latex_overlap_by_hand():
    # words {let, x, be, 2} and {let, y, be, 2}: 3 shared of 5
    assert word_jaccard("Let $x$ be 2.", "let $y$ be 2") == pytest.approx(3 / 5)
    assert word_jaccard("", "...") == 0.0
    assert math_spans("Find $x + 1$ and $$ y^2 $$, \\(z\\) and \\[ w \\]") == {"x+1", "y^2", "z", "w"}
    assert math_spans("costs $5 and no close") == frozenset()  # an unclosed $ opens no span
    assert latex_jaccard("Solve $x+1=2$ for $x$.", "Solve $x + 1 = 2$; here $y$") == pytest.approx(1 / 3)
    assert latex_jaccard("no math", "none either") == 0.0


def test_separation_by_hand():
    s = separation([1.0, 2.0, 3.0, 4.0], [False, False, True, True])
    assert s.auc == 1.0 and s.mean_wins == 3.5 and s.mean_rest == 1.5
    assert s.top_share == 1.0 and s.below_median_share == 0.0
    # wins 1 and 4 against rest 3 and 2: pairs (1,3) (1,2) lost, (4,3) (4,2) won
    s = separation([1.0, 3.0, 2.0, 4.0], [True, False, False, True])
    assert s.auc == 0.5 and s.top_share == 0.5 and s.below_median_share == 0.5
    assert 0.0 < s.p_mannwhitney <= 1.0
    s = separation([1.0, np.nan, 2.0], [True, True, False])  # NaN: left out
    assert (s.n_wins, s.n_rest) == (1, 1) and s.auc == 0.0
    none = separation([1.0, 2.0], [False, False])
    assert none.auc is None and none.reason == "no sole wins"
    assert none.to_dict()["reason"] == "no sole wins"


def test_hit_accounting_counts_features_and_probe():
    queries = {"q1": "find x such that x plus one is two", "q2": "prove that two is prime",
               "q3": "count the ways", "q4": "sum of squares"}
    corpus = {"g1": "find x such that x plus one is two", "g2a": "show 2 is a prime number",
              "g2b": "prove that two is prime indeed", "g3": "", "g4": "squares summed"}
    golds = {"q1": ["g1"], "q2": ["g2a", "g2b"], "q3": ["g3"], "q4": ["g4"]}
    out = hit_accounting(["q1", "q2", "q3", "q4"], [0, 0, 3, -1], [4, 0, 0, 1], queries=queries, golds=golds,
                         corpus_text=corpus, k=1, style_percentile={"g1": 90.0, "g2a": 10.0, "g2b": 30.0},
                         probe_hits_a={"q1": True, "p9": False, "p8": True})
    assert out["counts"] == {"a_alone": 1, "b_alone": 1, "both": 1, "neither": 1}
    assert out["missing_gold_text"] == 1  # q3's gold has no text: its features are NaN, counted
    wj = out["features"]["word_jaccard"]
    assert (wj["n_wins"], wj["n_rest"]) == (1, 2)
    assert wj["mean_wins"] == 1.0  # q1's gold is its own wording
    # q2 takes its closer gold (g2b: 5 of 6 words); q4: {sum, of, squares} vs {squares, summed} = 1/4
    assert wj["mean_rest"] == pytest.approx(round((5 / 6 + 1 / 4) / 2, 4))
    assert out["features"]["style_percentile"]["mean_wins"] == 90.0
    assert out["features"]["style_percentile"]["n_rest"] == 1  # q4's gold has no style score
    assert out["probe"] == {"n_probe_queries_in_set": 1, "n_wins_on_probe": 1, "probe_R@1_on_wins": 100.0,
                            "probe_R@1_on_rest": 50.0, "n_rest": 2}
    out = hit_accounting(["q1"], [0], [0], queries=queries, golds=golds, corpus_text=corpus)
    assert "style_percentile" not in out["features"] and out["probe"] is None
    assert out["features"]["length_ratio"]["reason"] == "no sole wins"


def test_hit_accounting_refuses_unknown_or_empty_queries():
    with pytest.raises(RecipematchError, match="has no text"):
        hit_accounting(["qx"], [1], [2], queries={}, golds={}, corpus_text={})
    with pytest.raises(RecipematchError, match="non-empty query"):
        hit_accounting(["q"], [1], [2], queries={"q": "  "}, golds={"q": ["g"]}, corpus_text={"g": "text"})
    with pytest.raises(RecipematchError, match="query ids"):
        hit_accounting(["q", "r"], [1], [2], queries={"q": "a"}, golds={}, corpus_text={})


@pytest.mark.parametrize("contrasts, message", [
    (["recipe - nosuch"], r"hits.contrasts\[0\] 'recipe - nosuch' names \['nosuch'\]"),
    (["recipe - verified", "recipe - verified"], r"hits.contrasts\[1\] 'recipe - verified' is declared twice"),
    (["recipe@soup0.5 - recipe"], r"names \['recipe@soup0.5'\]: not a named arm"),
])
def test_hit_contrasts_are_checked_as_contrasts_are(contrasts, message):
    """Breaker round: a typo in hits.contrasts was skipped by the hits stage as 'not run'."""
    from conftest import REPO

    from recipematch.config import load_yaml, parse_params

    raw = load_yaml(REPO / "params.yaml")
    raw["hits"] = {**raw["hits"], "contrasts": contrasts}
    with pytest.raises(RecipematchError, match=message):
        parse_params(raw)
    raw["hits"]["contrasts"] = ["recipe@soup0.3 - recipe"]  # a declared remedy row is a row the hits stage reads
    parse_params(raw)
