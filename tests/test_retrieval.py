"""The retrieval harness: self-masking in every path, ties, caches, chunking, BM25.

The one-hot mock encoder maps a text of space-separated tokens to the normalised sum of
their one-hot vectors ("" maps to its own token), so every cosine is hand-computable:
"A" vs "A B" is 1/sqrt(2), "A B" vs "A B" is 1, "A" vs "B" is 0.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from recipematch.beir import load_beir, read_beir
from recipematch.retrieval import (
    NO_GOLD,
    EmbeddingCache,
    encode_cached,
    evaluate,
    evaluate_bm25,
    gold_beats_near_misses,
    rank_of_gold,
    search_topk,
    texts_sha256,
)

FIX = Path(__file__).parent / "fixtures" / "beir"


class OneHot:
    """Mock encoder: bag of tokens over a fixed vocabulary, L2-normalised."""

    def __init__(self, vocab="A B C D E F G H I J".split()):
        self.vocab = {t: i for i, t in enumerate([*vocab, "<empty>"])}
        self.cache_key = "onehot:" + ",".join(self.vocab)
        self.calls = 0
        self.n_texts = 0

    def encode(self, texts):
        self.calls += 1
        self.n_texts += len(texts)
        out = np.zeros((len(texts), len(self.vocab)), dtype=np.float32)
        for i, t in enumerate(texts):
            for tok in t.split() or ["<empty>"]:
                out[i, self.vocab[tok]] += 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _two_doc():
    return load_beir(FIX / "two_doc")


# ------------------------------------------------------------------ the two-document case


@pytest.mark.parametrize("chunk_size", [None, 1])
def test_two_doc_fresh_encode(chunk_size):
    corpus, queries, qrels = _two_doc()
    s, pq = evaluate(OneHot(), corpus, queries, qrels, self_mask=True, chunk_size=chunk_size)
    assert (s["R@1"], s["R@5"], s["R@10"]) == (100.0, 100.0, 100.0)
    assert s["self_mask"] is True and s["n_queries"] == 1
    assert pq["rank"].tolist() == [0] and pq["self_masked"].tolist() == [True]
    s, pq = evaluate(OneHot(), corpus, queries, qrels, self_mask=False, chunk_size=chunk_size)
    assert (s["R@1"], s["R@5"]) == (0.0, 100.0)  # the query's own entry ranks first
    assert s["self_mask"] is False and pq["rank"].tolist() == [1]


def test_two_doc_cached_path_encodes_nothing_the_second_time(tmp_path):
    corpus, queries, qrels = _two_doc()
    enc = OneHot()
    first, _ = evaluate(enc, corpus, queries, qrels, self_mask=True, cache_dir=tmp_path)
    calls = enc.calls
    cache = EmbeddingCache(tmp_path)
    second, pq = evaluate(enc, corpus, queries, qrels, self_mask=True, cache_dir=cache)
    assert enc.calls == calls == 2  # documents + queries, once
    assert (cache.hits, cache.misses) == (2, 0)
    assert second["R@1"] == first["R@1"] == 100.0 and pq["rank"].tolist() == [0]
    off, _ = evaluate(enc, corpus, queries, qrels, self_mask=False, cache_dir=cache)
    assert off["R@1"] == 0.0 and enc.calls == 2  # same embeddings, mask applied after


def test_two_doc_search_topk_and_rank_of_gold():
    corpus, queries, qrels = _two_doc()
    enc = OneHot()
    d = enc.encode([corpus[k]["text"] for k in corpus])
    q = enc.encode(["A"])
    for cs in (1, 2, None):
        idx, sc = search_topk(q, d, 1, query_ids=["q1"], doc_ids=list(corpus), self_mask=True,
                              chunk_size=cs)
        assert idx.tolist() == [[1]] and sc.tolist() == [[0.0]]
        idx, _ = search_topk(q, d, 1, query_ids=["q1"], doc_ids=list(corpus), self_mask=False,
                             chunk_size=cs)
        assert idx.tolist() == [[0]]
        assert rank_of_gold(q, d, ["q1"], list(corpus), qrels, self_mask=True,
                            chunk_size=cs).tolist() == [0]
    idx, sc = search_topk(q, d, 3, query_ids=["q1"], doc_ids=list(corpus), self_mask=True)
    assert idx.tolist() == [[1, -1, -1]] and sc[0, 1] == -np.inf  # fewer docs than k


def test_two_doc_bm25():
    corpus, queries, qrels = _two_doc()
    s, pq = evaluate_bm25(corpus, queries, qrels, self_mask=True)
    assert s["R@1"] == 100.0 and pq["rank"].tolist() == [0]
    s, pq = evaluate_bm25(corpus, queries, qrels, self_mask=False)
    assert s["R@1"] == 0.0 and pq["rank"].tolist() == [1]
    assert '"k1": 1.5' in s["model"] and '"b": 0.75' in s["model"]


# ------------------------------------------------------------------ the general fixture


def _small():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = read_beir(FIX / "small")
    return ds


@pytest.mark.parametrize("chunk_size", [None, 1, 3])
def test_small_fixture_exact_values(chunk_size, tmp_path):
    ds = _small()
    s, pq = evaluate(OneHot(), ds.corpus, ds.queries, ds.qrels, self_mask=True,
                     query_meta=ds.query_meta, chunk_size=chunk_size, cache_dir=tmp_path)
    assert pq["query_id"].tolist() == ["qa", "qb", "qc", "qd"]  # qz has no positive qrel
    assert pq["rank"].tolist() == [0, 0, 0, 1]
    assert pq["n_ties_at_gold"].tolist() == [1, 0, 1, 1]
    assert pq["hit@1"].tolist() == [True, True, True, False]
    assert pq["domain"].tolist() == ["Algebra", "Geometry", "Algebra", "Geometry"]
    assert (s["R@1"], s["R@5"], s["R@10"]) == (75.0, 100.0, 100.0)
    assert s["per_domain"] == {"Algebra": {"R@1": 100.0, "R@5": 100.0, "R@10": 100.0, "n": 2},
                               "Geometry": {"R@1": 50.0, "R@5": 100.0, "R@10": 100.0, "n": 2}}
    assert s["n_queries_with_ties_at_gold"] == 3
    assert s["n_queries_self_masked"] == 2
    assert s["n_queries_with_text_twin"] == 1  # qd "A B" has the twin d1
    s_off, pq_off = evaluate(OneHot(), ds.corpus, ds.queries, ds.qrels, self_mask=False,
                             chunk_size=chunk_size)
    assert pq_off["rank"].tolist() == [1, 1, 0, 1] and s_off["R@1"] == 25.0


def test_ties_never_depend_on_corpus_order():
    ds = _small()
    enc = OneHot()
    ids = list(ds.corpus)
    rng = np.random.default_rng(0)
    results = set()
    for _ in range(5):
        perm = [ids[i] for i in rng.permutation(len(ids))]
        corpus = {k: ds.corpus[k] for k in perm}
        _, pq = evaluate(enc, corpus, ds.queries, ds.qrels, self_mask=True)
        d = enc.encode([corpus[k]["text"] for k in perm])
        q = enc.encode(["A"])
        idx, _ = search_topk(q, d, 3, query_ids=["qa"], doc_ids=perm, self_mask=True)
        results.add((tuple(pq["rank"]), tuple(perm[i] for i in idx[0])))
    # "A": d1 and d3 tie at 1/sqrt(2), ordered by id; then zero-score docs by id
    assert results == {((0, 0, 0, 1), ("d1", "d3", "d2"))}


def test_tie_spilling_over_the_cut_is_resolved_by_id():
    # five documents with equal scores, cut at k=2: ids decide, not row order
    d = np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (5, 1))
    q = np.array([[1.0, 0.0]], dtype=np.float32)
    idx, sc = search_topk(q, d, 2, query_ids=["q"], doc_ids=["e", "c", "a", "d", "b"],
                          self_mask=True)
    assert idx.tolist() == [[2, 4]] and sc.tolist() == [[1.0, 1.0]]  # "a", "b"


def test_query_listing_itself_as_gold_is_masked_and_counted():
    corpus = {"q": {"title": "", "text": "A"}, "g": {"title": "", "text": "A B"},
              "x": {"title": "", "text": "A C D"}}
    import warnings

    from recipematch.errors import RecipematchError

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # counted in the summary, not a raw Python warning
        s, pq = evaluate(OneHot(), corpus, {"q": "A"}, {"q": {"q": 1, "g": 1}}, self_mask=True)
    assert pq["rank"].tolist() == [0] and pq["self_gold_removed"].tolist() == [True]
    assert pq["n_gold"].tolist() == [1] and s["n_queries_self_gold_removed"] == 1
    # its only gold is itself: nothing left to find, refused rather than scored as a miss
    with pytest.raises(RecipematchError, match=r"1 queries have their own masked corpus entry as their only gold"):
        evaluate(OneHot(), corpus, {"q": "A"}, {"q": {"q": 1}}, self_mask=True)
    _, pq = evaluate(OneHot(), corpus, {"q": "A"}, {"q": {"q": 1}}, self_mask=False)
    assert pq["rank"].tolist() == [0]


def test_query_without_gold_is_a_reported_miss_and_unknown_gold_raises():
    corpus = {"a": {"title": "", "text": "A"}, "b": {"title": "", "text": "B"}}
    s, pq = evaluate(OneHot(), corpus, {"q": "A", "r": "B"}, {"q": {}, "r": {"b": 1}},
                     self_mask=True, query_ids=["q", "r"])
    assert pq["rank"].tolist() == [NO_GOLD, 0]
    assert s["R@1"] == 50.0 and s["n_queries_no_gold"] == 1
    with pytest.raises(ValueError, match="not in the corpus"):
        evaluate(OneHot(), corpus, {"q": "A"}, {"q": {"zz": 1}}, self_mask=True)


def test_text_twin_under_another_id_is_ranked_and_counted():
    corpus = {"q": {"title": "", "text": "A"}, "twin": {"title": "", "text": " A "},
              "g": {"title": "", "text": "A B"}}
    s, pq = evaluate(OneHot(), corpus, {"q": "A"}, {"q": {"g": 1}}, self_mask=True)
    assert pq["rank"].tolist() == [1]  # the twin is not masked
    assert pq["n_text_twins"].tolist() == [1] and s["n_queries_with_text_twin"] == 1
    s, pq = evaluate(OneHot(), corpus, {"q": "A"}, {"q": {"twin": 1}}, self_mask=True)
    assert pq["rank"].tolist() == [0]  # an exact reprint that is gold is a hit


# ------------------------------------------------------------------ speed-ups = plain versions


def _random_unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _grid(rng, n, d):
    """Vectors with entries in {-1, -0.5, 0, 0.5, 1}: every dot product is exact in float32
    whatever the summation order, so a plain reference sees the same scores and ties."""
    return (rng.integers(-2, 3, size=(n, d)) / 2).astype(np.float32)


def test_rank_of_gold_matches_a_plain_loop():
    rng = np.random.default_rng(1)
    docs = _grid(rng, 300, 6)  # few distinct scores: many exact ties
    q = np.concatenate([docs[:20], _grid(rng, 20, 6)])
    doc_ids = [f"d{i:03d}" for i in range(300)]
    query_ids = doc_ids[:20] + [f"x{i}" for i in range(20)]
    qrels = {qid: {doc_ids[j]: 1 for j in rng.choice(300, size=1 + i % 3, replace=False)}
             for i, qid in enumerate(query_ids)}
    for self_mask in (True, False):
        expected, ties = [], []
        for i, qid in enumerate(query_ids):
            s = [float(np.dot(docs[j].astype(np.float64), q[i])) for j in range(300)]
            keep = [j for j in range(300) if not (self_mask and doc_ids[j] == qid)]
            golds = [j for j in keep if doc_ids[j] in qrels[qid]]
            best = max(s[j] for j in golds)
            expected.append(sum(1 for j in keep if s[j] > best))
            ties.append(sum(1 for j in keep if s[j] == best and j not in golds))
        for cs in (1, 7, 64, None):
            got = rank_of_gold(q, docs, query_ids, doc_ids, qrels, self_mask=self_mask,
                               chunk_size=cs, return_details=True)
            assert got.ranks.tolist() == expected
            assert got.n_ties_at_gold.tolist() == ties
    assert sum(ties) > 20  # the case really has ties


def test_search_topk_matches_a_full_sort():
    rng = np.random.default_rng(2)
    docs = _grid(rng, 500, 5)  # many exact ties
    q = np.concatenate([docs[:10], _grid(rng, 10, 5)])
    doc_ids = [f"{(i * 7919) % 1000:04d}" for i in range(500)]  # ids not in row order
    query_ids = doc_ids[:10] + [f"q{i}" for i in range(10)]
    for self_mask in (True, False):
        for cs in (1, 3, None):
            idx, sc = search_topk(q, docs, 10, query_ids=query_ids, doc_ids=doc_ids,
                                  self_mask=self_mask, chunk_size=cs)
            for i, qid in enumerate(query_ids):
                s = docs.astype(np.float64) @ q[i]
                rows = sorted((j for j in range(500) if not (self_mask and doc_ids[j] == qid)),
                              key=lambda j: (-s[j], doc_ids[j]))[:10]
                assert idx[i].tolist() == rows
                assert sc[i].tolist() == s[rows].tolist()


def test_scores_are_bit_identical_whatever_the_chunking():
    rng = np.random.default_rng(3)
    docs, q = _random_unit(rng, 2000, 96), _random_unit(rng, 150, 96)
    doc_ids = [f"d{i}" for i in range(2000)]
    query_ids = [f"q{i}" for i in range(150)]
    qrels = {qid: {doc_ids[(7 * i) % 2000]: 1} for i, qid in enumerate(query_ids)}
    ref_r = rank_of_gold(q, docs, query_ids, doc_ids, qrels, self_mask=True)
    ref_i, ref_s = search_topk(q, docs, 10, query_ids=query_ids, doc_ids=doc_ids,
                               self_mask=True)
    for cs in (1, 5, 64, 65, 150):
        assert rank_of_gold(q, docs, query_ids, doc_ids, qrels, self_mask=True,
                            chunk_size=cs).tolist() == ref_r.tolist()
        i, s = search_topk(q, docs, 10, query_ids=query_ids, doc_ids=doc_ids, self_mask=True,
                           chunk_size=cs)
        assert np.array_equal(i, ref_i) and np.array_equal(s, ref_s)
    # a query's scores do not depend on which queries share its block
    sub = rank_of_gold(q[37:38], docs, query_ids[37:38], doc_ids, qrels, self_mask=True)
    assert sub.tolist() == ref_r[37:38].tolist()
    assert rank_of_gold(q[37:38], docs, query_ids[37:38], doc_ids, qrels, self_mask=True,
                        return_details=True).ranks.tolist() == ref_r[37:38].tolist()


def test_gold_beats_near_misses():
    enc = OneHot()
    doc_ids = ["g1", "n1", "g2", "n2", "n3"]
    d = enc.encode(["A B", "A C", "A", "B", "C"])
    q = enc.encode(["A", "A", "B"])
    qrels = {"x": {"g1": 1}, "y": {"g2": 1}, "z": {"n2": 1}}
    wins = gold_beats_near_misses(q, d, ["x", "y", "z"], doc_ids, qrels,
                                  {"x": ["n1"], "y": ["n1", "n3"]})
    # x: gold .707 ties near-miss .707 -> not a win; y: 1.0 beats .707; z: no near-miss
    assert wins[:2].tolist() == [0.0, 1.0] and np.isnan(wins[2])


# ------------------------------------------------------------------ the cache


def test_cache_key_covers_role_texts_and_encoder(tmp_path):
    enc = OneHot()
    cache = EmbeddingCache(tmp_path)
    a = encode_cached(enc, ["A", "B"], cache, role="document")
    encode_cached(enc, ["A", "B"], cache, role="document")
    encode_cached(enc, ["A", "B"], cache, role="query")
    encode_cached(enc, ["B", "A"], cache, role="document")
    other = OneHot()
    other.cache_key = "onehot-v2"
    encode_cached(other, ["A", "B"], cache, role="document")
    assert (cache.hits, cache.misses) == (1, 4)
    assert a.dtype == np.float32 and a.shape == (2, 11)
    assert texts_sha256(["ab", "c"]) != texts_sha256(["a", "bc"])
    assert len(list(tmp_path.glob("*.npy"))) == 4



def _pickled_npy(path):
    np.save(path, np.array([{"x": 1}], dtype=object), allow_pickle=True)


def _raw_pickle(path):
    import pickle

    path.write_bytes(pickle.dumps({"x": 1}))


def _truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _random_bytes(path):
    path.write_bytes(np.random.default_rng(0).bytes(300))


def _wrong_shape(path):
    np.save(path, np.ones((5, 11), dtype=np.float32))


def _nan(path):
    np.save(path, np.full((2, 11), np.nan, dtype=np.float32))


@pytest.mark.parametrize("spoil", [_pickled_npy, _raw_pickle, _truncated, _random_bytes, _wrong_shape, _nan])
def test_corrupt_cache_entry_is_a_miss_with_a_warning_naming_the_file(tmp_path, spoil):
    """Issue 14: a corrupt ``.npy`` is a cache miss, named in a warning; never an unsafe hint."""
    enc = OneHot()
    cache = EmbeddingCache(tmp_path)
    good = encode_cached(enc, ["A", "B"], cache)
    (npy,) = tmp_path.glob("*.npy")
    spoil(npy)
    with pytest.warns(UserWarning) as rec:
        again = encode_cached(enc, ["A", "B"], cache)
    messages = [str(w.message) for w in rec]
    assert any(str(npy) in m and "cache miss" in m for m in messages), messages
    assert not any("allow_pickle" in m for m in messages)
    np.testing.assert_array_equal(again, good)
    assert (cache.hits, cache.misses, cache.corrupt) == (0, 2, 1)
    # the entry was rewritten: the next lookup is a silent hit
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(encode_cached(enc, ["A", "B"], cache), good)
    assert cache.hits == 1


def test_encoder_output_is_checked():
    class Bad:
        cache_key = "bad"

        def encode(self, texts):
            return np.zeros((len(texts), 3), dtype=np.float32)

    with pytest.raises(ValueError, match="zero norm"):
        encode_cached(Bad(), ["x"], None)
