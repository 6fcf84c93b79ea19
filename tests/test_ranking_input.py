"""Bad arguments to the ranking kernel and its entry points stop with a clear error instead of
a silently wrong rank (paper Section 3 and Appendix A: the rank is counted over non-masked
documents, so a misread mask changes the number)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recipematch.retrieval.bm25 import bm25_ranks, bm25_topk
from recipematch.retrieval.dense import gold_beats_near_misses, rank_of_gold, search_topk
from recipematch.retrieval.ranking import gold_index, mask_index, ranks_from_blocks

QIDS = ["q0", "q1", "q2"]
DIDS = ["d0", "d1", "d2", "d3", "d4"]
QRELS = {"q0": {"d1": 1}, "q1": {"d2": 1}, "q2": {"d3": 1}}


def _emb(n: int, dim: int = 4, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_a_boolean_array_is_not_read_as_indices():
    q, d = _emb(3), _emb(5, seed=1)
    with pytest.raises(ValueError, match="integer array, got dtype bool"):
        rank_of_gold(q, d, QIDS, DIDS, QRELS, self_mask=np.array([False, False, False]))
    with pytest.raises(ValueError, match="integer array, got dtype float64"):
        mask_index(np.array([0.9, -1, -1]), QIDS, DIDS)
    # the same call with False masks nothing and gives the plain ranks
    plain = rank_of_gold(q, d, QIDS, DIDS, QRELS, self_mask=False)
    idx = rank_of_gold(q, d, QIDS, DIDS, QRELS, self_mask=np.array([-1, -1, -1]))
    assert np.array_equal(plain, idx)


@pytest.mark.parametrize("bad", [[4, -1, -1], "id_and_text", None, 1])
def test_a_mask_that_is_neither_bool_nor_array_is_refused(bad):
    with pytest.raises(TypeError, match="self_mask must be True, False or an integer index array"):
        mask_index(bad, QIDS, DIDS)


def test_an_out_of_range_index_is_named():
    with pytest.raises(ValueError, match=r"values must lie in \[-1, 5\), got 5"):
        mask_index(np.array([5, -1, -1]), QIDS, DIDS)
    with pytest.raises(ValueError, match=r"must have shape \(3,\), got shape \(2,\)"):
        mask_index(np.array([0, 1]), QIDS, DIDS)


def test_score_blocks_that_skip_queries_are_refused():
    self_idx = np.full(3, -1, dtype=np.int64)
    gold = gold_index(QIDS, DIDS, QRELS, self_idx)
    scores = torch.zeros((1, 5))
    with pytest.raises(ValueError, match="covered queries 0:0 of 0:3"):
        ranks_from_blocks(iter(()), 3, gold, self_idx)
    with pytest.raises(ValueError, match="must cover queries 0:3 in order, got 1:2"):
        ranks_from_blocks(iter([(1, 2, scores)]), 3, gold, self_idx)


def test_bm25_refuses_a_negative_chunk_size():
    corpus = {d: {"text": f"word{i} shared"} for i, d in enumerate(DIDS)}
    queries = {q: f"word{i + 1}" for i, q in enumerate(QIDS)}
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        bm25_ranks(corpus, queries, QRELS, query_ids=QIDS, self_mask=False, chunk_size=-1)
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        bm25_topk(corpus, queries, 2, query_ids=QIDS, self_mask=False, chunk_size=-1)
    ranks = bm25_ranks(corpus, queries, QRELS, query_ids=QIDS, self_mask=False, chunk_size=1).ranks
    assert ranks.tolist() == [0, 0, 0]


def test_the_near_miss_score_and_top_k_check_shapes():
    q, d = _emb(3), _emb(5, seed=1)
    with pytest.raises(ValueError, match="4 query rows for 3 ids"):
        gold_beats_near_misses(_emb(4), d, QIDS, DIDS, QRELS, {"q0": ["d4"]})
    with pytest.raises(ValueError, match="6 document rows for 5 ids"):
        gold_beats_near_misses(q, _emb(6), QIDS, DIDS, QRELS, {"q0": ["d4"]})
    with pytest.raises(ValueError, match="dimension mismatch: queries 4, documents 6"):
        search_topk(q, _emb(5, dim=6), 2, query_ids=QIDS, doc_ids=DIDS, self_mask=False)
