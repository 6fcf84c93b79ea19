"""SABER-Math's labelling (issue 22, item 5; SABER-Math Sections 3.2-3.5, Appendix B): Lin
similarity and the best-match average worked by hand on a tiny ontology, summary Jaccard, the
three-category selection, Swiss pairing, the tournament recovering a known order, Bradley-Terry
through choix, and nDCG@10 with exponential gain on real-valued grades."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import kendalltau

from recipematch.errors import RecipematchError
from recipematch.saber import (
    JudgeFailure, Ontology, bradley_terry, information_content, jaccard, lin_similarity, ndcg_exponential, rescale,
    run_tournament, select_candidates, summary_tokens, swiss_pairings, topic_similarity)

TREE = {"math": None, "algebra": "math", "linear": "algebra", "quadratic": "algebra", "geometry": "math",
        "triangles": "geometry"}
TOPICS = {"p1": ["linear"], "p2": ["quadratic"], "p3": ["linear"], "p4": ["triangles"], "p5": []}


def test_information_content_lin_and_the_best_match_average_by_hand() -> None:
    ont = Ontology.from_parents(TREE)
    ic = information_content(ont, TOPICS)
    # N = 4 problems with a topic (p5 has none): c(math) 4, c(algebra) 3, c(linear) 2, c(quadratic) 1
    assert ic["math"] == 0.0 and ic["algebra"] == pytest.approx(math.log(4 / 3))
    assert ic["linear"] == pytest.approx(math.log(2)) and ic["quadratic"] == pytest.approx(math.log(4))
    assert ic["triangles"] == pytest.approx(math.log(4))
    assert ont.lca("linear", "quadratic") == "algebra" and ont.lca("linear", "triangles") == "math"
    lq = 2 * math.log(4 / 3) / (math.log(2) + math.log(4))          # 0.276692
    assert lin_similarity(ont, ic, "linear", "quadratic") == pytest.approx(lq) == pytest.approx(0.276692, abs=1e-6)
    assert lin_similarity(ont, ic, "linear", "triangles") == 0.0      # the root carries no information
    assert lin_similarity(ont, ic, "linear", "linear") == 1.0
    assert lin_similarity(ont, ic, "math", "math") == 1.0             # both ICs 0
    # BMA({linear}, {quadratic, linear}) = (1 + (lq + 1)) / 3
    assert topic_similarity(ont, ic, ["linear"], ["quadratic", "linear"]) == pytest.approx((2 + lq) / 3)
    assert topic_similarity(ont, ic, ["linear"], []) == 0.0


@pytest.mark.parametrize("tree, message", [
    ({"math": None, "a": "b", "b": "c", "c": "a"}, r"ontology: cycle through node '[abc]'"),
    ({"a": "b", "b": "a"}, r"ontology: cycle through node"),
    ({"math": None, "a": "nowhere"}, r"node 'a' names parent 'nowhere', which is not a node"),
    ({"math": None, "logic": None}, r"one root .* found 2: \['logic', 'math'\]"),
    ({}, r"no nodes"),
    ({"": None}, r"non-empty string"),
])
def test_a_bad_ontology_is_one_line_naming_the_node(tree, message) -> None:
    with pytest.raises(RecipematchError, match=message) as err:
        Ontology.from_parents(tree)
    assert "\n" not in str(err.value)


def test_topics_outside_the_ontology_and_a_corpus_without_topics_are_refused() -> None:
    ont = Ontology.from_parents(TREE)
    with pytest.raises(RecipematchError, match=r"problem 'p1': topics \['calculus'\] are not ontology nodes"):
        information_content(ont, {"p1": ["calculus"]})
    with pytest.raises(RecipematchError, match="at least one problem with a topic"):
        information_content(ont, {"p1": []})


def test_summary_jaccard_drops_stop_words() -> None:
    a = summary_tokens("Pigeonhole principle on the residues")
    b = summary_tokens("Apply the Pigeonhole principle to residues mod n")
    assert a == {"pigeonhole", "principle", "residues"}
    assert jaccard(a, b) == pytest.approx(3 / 6)  # b adds apply, mod, n
    assert jaccard(a, summary_tokens("Apply pigeonhole principle to residues mod n", ["apply", "mod", "n"])) == 1.0
    assert jaccard(frozenset(), frozenset()) == 0.0
    with pytest.raises(TypeError):
        summary_tokens(None)


def test_selection_draws_k_from_each_category_and_names_a_short_one() -> None:
    ids = [f"d{i}" for i in range(8)]
    topic = np.array([0.9, 0.9, 0.9, 0.1, 0.1, 0.9, 0.9, 0.858])  # 0.858 is not above tau_topic
    summ = np.array([0.5, 0.1, 0.1, 0.5, 0.5, 0.5, 0.1, 0.5])
    got = select_candidates(ids, topic, summ, tau_topic=0.858, tau_summ=0.211, k=2, rng=np.random.default_rng(3))
    assert got["both"] == ["d0", "d5"]
    assert set(got["topic_only"]) <= {"d1", "d2", "d6"} and len(got["topic_only"]) == 2
    assert set(got["summary_only"]) <= {"d3", "d4", "d7"} and len(got["summary_only"]) == 2  # d7: 0.858 is topic-irrelevant
    again = select_candidates(ids, topic, summ, tau_topic=0.858, tau_summ=0.211, k=2, rng=np.random.default_rng(3))
    assert again == got  # one seed, one draw
    with pytest.raises(RecipematchError, match=r"fewer than K=3 candidates in \['both'\].*'both': 2"):
        select_candidates(ids, topic, summ, tau_topic=0.858, tau_summ=0.211, k=3, rng=np.random.default_rng(3))


def test_swiss_pairing_meets_closest_win_counts_and_never_repeats_a_pair() -> None:
    rng = np.random.default_rng(0)
    pairs, unpaired = swiss_pairings(np.zeros(6, dtype=int), set(), rng)
    assert len(pairs) == 3 and not unpaired and sorted(x for p in pairs for x in p) == list(range(6))
    wins = np.array([0, 0, 2, 2, 5, 5])
    pairs, unpaired = swiss_pairings(wins, set(), rng)
    assert sorted(tuple(sorted(p)) for p in pairs) == [(0, 1), (2, 3), (4, 5)]
    met = {frozenset((0, 1)), frozenset((2, 3)), frozenset((4, 5))}
    pairs, unpaired = swiss_pairings(wins, met, rng)
    # greedy from the lowest: 0 and 1 take 2 and 3 (closest unmet), which leaves 4 and 5, who have met
    assert not any(frozenset(p) in met for p in pairs)
    assert sorted(tuple(sorted(p)) for p in pairs) in ([(0, 2), (1, 3)], [(0, 3), (1, 2)]) and sorted(unpaired) == [4, 5]
    # 0 has met everyone: it sits out, and of the five others one more does
    met = {frozenset((0, j)) for j in range(1, 6)}
    pairs, unpaired = swiss_pairings(np.zeros(6, dtype=int), met, rng)
    assert 0 in unpaired and len(unpaired) == 2 and len(pairs) == 2 and all(0 not in p for p in pairs)


def _judge_by(quality):
    return lambda a, b: "A" if quality[a] > quality[b] else "B"


def _items(n, seed=0):
    items = [f"d{i:03d}" for i in range(n)]
    return items, dict(zip(items, np.random.default_rng(seed).permutation(n).tolist()))


def test_the_tournament_recovers_a_known_order() -> None:
    items, quality = _items(12)
    t = run_tournament(items, _judge_by(quality), rounds=60, seed=5)
    assert len(t.judgments) == 12 * 11 // 2 and not t.failures  # stops once every pair has met
    scores = bradley_terry(len(items), t.comparisons(), alpha=0.01)
    assert [items[i] for i in np.argsort(-scores)] == sorted(items, key=lambda d: -quality[d])
    grades = rescale(scores)
    assert grades.min() == 0.0 and grades.max() == 5.0


def test_the_papers_tournament_nearly_recovers_150_candidates_in_20_rounds() -> None:
    items, quality = _items(150, seed=1)
    t = run_tournament(items, _judge_by(quality), rounds=20, seed=7)
    assert len(t.judgments) <= 20 * 75  # the paper: 1,500 judgments in place of 11,175
    scores = bradley_terry(len(items), t.comparisons(), alpha=0.001)
    true = np.array([quality[d] for d in items])
    tau = kendalltau(scores, true)[0]
    inversions = (1 - tau) / 2 * (150 * 149 / 2)
    assert tau > 0.95 and inversions < 700  # the paper reports about 700 inversions against exhaustive judging
    assert int(np.argmax(scores)) == int(np.argmax(true))
    again = run_tournament(items, _judge_by(quality), rounds=20, seed=7)
    assert again.judgments == t.judgments  # the seed fixes every pairing


def test_failed_and_inconsistent_judgments_are_counted_not_scored() -> None:
    items, quality = _items(6)
    t = run_tournament(items, lambda a, b: "A", rounds=3, seed=0, both_orders=True)  # always the first shown
    assert t.comparisons() == [] and t.failures == {"inconsistent: the two orders disagree": len(t.judgments)}
    t = run_tournament(items, lambda a, b: "C", rounds=1, seed=0)
    assert t.failures == {"answer outside A/B: 'C'": 3} and all(j.winner is None for j in t.judgments)

    def flaky(a, b):
        if "d000" in (a, b):
            raise JudgeFailure("timeout after 60 s")
        return _judge_by(quality)(a, b)

    t = run_tournament(items, flaky, rounds=5, seed=0, both_orders=True)
    with_d0 = sum("d000" in (j.first, j.second) for j in t.judgments)
    assert with_d0 > 0 and t.failures == {"judge failed: timeout after 60 s": with_d0}
    assert len(t.comparisons()) == len(t.judgments) - with_d0
    with pytest.raises(ValueError, match="distinct"):
        run_tournament(["a", "a"], flaky, rounds=1, seed=0)


def test_bradley_terry_and_rescale_edges() -> None:
    with pytest.raises(ValueError, match="alpha"):
        bradley_terry(3, [(0, 1)], alpha=0)
    with pytest.raises(ValueError, match="outside"):
        bradley_terry(2, [(0, 2)], alpha=0.1)
    assert bradley_terry(3, [], alpha=0.1).tolist() == [0.0, 0.0, 0.0]
    s = bradley_terry(3, [(0, 1), (1, 2), (0, 2)], alpha=0.1)
    assert s[0] > s[1] > s[2]
    assert rescale(np.array([1.0, 1.0])).tolist() == [0.0, 0.0]
    assert rescale(np.array([-1.0, 0.0, 3.0])).tolist() == [0.0, 1.25, 5.0]


def test_ndcg_with_exponential_gain_on_real_grades_by_hand() -> None:
    grades = {"a": 5.0, "b": 0.0, "c": 2.5}
    dcg = 0 + 31 / math.log2(3) + (2 ** 2.5 - 1) / 2
    idcg = 31 + (2 ** 2.5 - 1) / math.log2(3)
    assert ndcg_exponential(grades, ["b", "a", "c", "x"], k=10) == pytest.approx(dcg / idcg) == pytest.approx(0.644916,
                                                                                                              abs=1e-6)
    assert ndcg_exponential(grades, ["a", "c"], k=10) == pytest.approx(1.0)
    assert ndcg_exponential(grades, ["c", "a"], k=1) == pytest.approx((2 ** 2.5 - 1) / 31)
    assert ndcg_exponential({"a": 0.0}, ["a"], k=10) == 0.0
    with pytest.raises(ValueError, match="twice"):
        ndcg_exponential(grades, ["a", "a"])
    with pytest.raises(ValueError, match="finite"):
        ndcg_exponential({"a": -1.0}, ["a"])
