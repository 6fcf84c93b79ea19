"""Easy and hard LLM-built tiers (paper Section 3, Table 1) as BEIR folders, on hand-made rows;
ranks worked out by hand with a one-hot encoder."""

from __future__ import annotations

import numpy as np
import pytest

from recipematch.benchmarks_data import load_plain
from recipematch.errors import RecipematchError
from recipematch.evalsets import build_llm_tier, build_tier, choose_heldout, write_tiers
from recipematch.scoring import score

CORPUS = [{"doc_id": "p1", "title": "", "text": "A B"},
          {"doc_id": "p2", "title": "", "text": "C"},
          {"doc_id": "p3", "title": "", "text": "A"},
          {"doc_id": "p4", "title": "", "text": "E"}]
D1 = [{"source_id": "p1", "positive_text": "A B D", "negatives": [{"text": "A B"}, {"text": "B"}]},
      {"source_id": "p2", "positive_text": "C D", "negatives": []},
      {"source_id": "p4", "positive_text": "E", "negatives": [{"text": "F"}]}]


class OneHot:
    cache_key = "onehot"
    vocab = {t: i for i, t in enumerate("A B C D E F".split())}

    def encode(self, texts):
        out = np.zeros((len(texts), len(self.vocab)), dtype=np.float32)
        for i, t in enumerate(texts):
            for tok in t.split():
                out[i, self.vocab[tok]] += 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_easy_tier_has_golds_and_no_near_misses():
    docs, queries, qrels, meta = build_tier(CORPUS, D1, ["p2", "p1"], "easy")
    assert list(docs) == ["p1", "p2", "p3", "p4", "d1-pos-p1", "d1-pos-p2"]
    assert queries == {"p1": "A B", "p2": "C"}  # the held-out source's own text, sorted ids
    assert qrels == {"p1": {"d1-pos-p1": 1}, "p2": {"d1-pos-p2": 1}}
    assert meta == {"p1": {"tier": "easy"}, "p2": {"tier": "easy"}}


def test_hard_tier_adds_the_same_queries_near_misses():
    docs, queries, qrels, meta = build_tier(CORPUS, D1, ["p1", "p2"], "hard")
    assert list(docs) == ["p1", "p2", "p3", "p4", "d1-pos-p1", "d1-neg-p1-0", "d1-neg-p1-1",
                          "d1-pos-p2"]
    assert meta["p1"]["near_miss_ids"] == ["d1-neg-p1-0", "d1-neg-p1-1"]
    assert meta["p2"]["near_miss_ids"] == []
    assert build_llm_tier(CORPUS, D1, ["p1", "p2"]) == (docs, queries, qrels)


def test_write_tiers_then_score_by_hand(tmp_path):
    counts = write_tiers(tmp_path, CORPUS, D1, ["p1", "p2"])
    assert counts == {"n_queries": 2, "easy.n_docs": 6, "hard.n_docs": 8,
                      "hard.n_near_misses": 2, "hard.n_queries_without_near_misses": 1}
    write_tiers(tmp_path / "again", CORPUS, D1, ["p2", "p1"])
    for tier in ("easy", "hard"):
        for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
            assert (tmp_path / tier / f).read_bytes() == (tmp_path / "again" / tier / f).read_bytes()
    easy, hard = load_plain(tmp_path / "easy"), load_plain(tmp_path / "hard")
    assert easy.near_misses == {} and hard.near_misses == {"p1": ["d1-neg-p1-0", "d1-neg-p1-1"]}
    # easy: p1 "A B" (own entry masked): gold "A B D" .816, p3 "A" .707 below -> 0;
    #       p2 "C": gold "C D" .707, nothing else shares C -> 0
    s, pq = score(easy, OneHot(), ks=(1, 5))
    assert pq["rank"].tolist() == [0, 0] and s["R@1"] == 100.0
    # hard: p1's near-miss "A B" scores 1.0 above the gold .816 -> 1; p2 unchanged -> 0
    s, pq = score(hard, OneHot(), ks=(1, 5))
    assert pq["rank"].tolist() == [1, 0] and (s["R@1"], s["R@5"]) == (50.0, 100.0)
    assert s["near_miss"]["n_wins"] == 0 and s["near_miss"]["n_without_near_misses"] == 1


@pytest.mark.parametrize("heldout, tier, match", [
    (["p9"], "easy", "'p9' is not in the corpus"),
    (["p3"], "hard", "'p3' has no recorded D1 rewrite"),
    (["p1"], "medium", "tier must be one of"),
])
def test_tier_refuses_bad_input(heldout, tier, match):
    with pytest.raises(RecipematchError, match=match):
        build_tier(CORPUS, D1, heldout, tier)


def test_tier_refuses_a_release_row_without_source_id():
    with pytest.raises(RecipematchError, match=r"D1 release row 1 .*'source_id'"):
        build_tier(CORPUS, [D1[0], {"positive_text": "x"}], ["p1"], "easy")


def test_tier_refuses_a_document_id_clash():
    corpus = [*CORPUS, {"doc_id": "d1-pos-p1", "title": "", "text": "Z"}]
    with pytest.raises(RecipematchError, match="already a corpus id"):
        build_tier(corpus, D1, ["p1"], "easy")


def test_choose_heldout_is_seeded_and_bounded():
    assert choose_heldout(["c", "a", "b", "d"], 2, seed=3) == choose_heldout(["d", "b", "a", "c"], 2, seed=3)
    with pytest.raises(RecipematchError, match="n_heldout"):
        choose_heldout(["a", "b"], 3, seed=0)
