"""Multi-route candidate pooling: which (query, document) pairs a judge should label.

Every miss of a model on a real-duplicate set may be an unlabelled duplicate; only a pooled,
judged candidate set can say how many. The candidate design this module implements has three
kinds of route, each contributing its top ``route_depth`` documents per query:

- **dense**: any encoder the project loads, exact inner-product search with the query's own
  entry masked as its evaluation masks it (:func:`recipematch.retrieval.search_topk`); one
  route per model, so a pool over several models is the union of their candidates;
- **bm25**: bm25s (Lucene variant) over lowercased tokens of ``token_pattern`` (the design's
  ``[a-z0-9]+``; k1 1.2, b 0.75), through :func:`recipematch.retrieval.bm25.bm25_topk`;
- **ngram**: word n-gram overlap (the design's n = 5): a document's score is the number of
  distinct word n-grams it shares with the query (binary n-gram vectors from scikit-learn's
  ``CountVectorizer`` over the same tokens, one sparse product), so a document sharing none
  is not retrieved at all.

A lexical route retrieves only documents that score above 0: a query with no indexed token
or no shared n-gram gets fewer than ``route_depth`` (possibly no) candidates from it, and the
count is reported (``n_queries_empty``). Within a route, equal scores are ordered by
ascending document id (the project's rule), and rank 1 is the route's best.

**Fusion** is weighted reciprocal rank fusion: ``fused(d) = sum_r w_r / (k + rank_r(d))``
over the routes that retrieved ``d`` (ranks 1-based; the design: weight 2 for the dense
route, 1 for BM25 and for n-grams, k = 60). Ties are broken by the document's best rank
across the routes, then by ascending document id, so the order never depends on the corpus's
row order. The sum is taken in float64 in the routes' declared order.

**Modes** (the design's v1 and v2): ``v1`` pools each dense route's top ``judge_depth``;
``v2`` adds the documents in the fused top ``judge_depth`` that v1 lacks (the "new
candidates"). Both flags are written for every pair whatever the mode; the mode names which
one is *the* pool the counts describe.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from recipematch.beir import doc_text
from recipematch.errors import short_repr
from recipematch.retrieval.bm25 import score_blocks
from recipematch.retrieval.ranking import topk_from_blocks
from recipematch.rules import check_token_pattern

__all__ = ["ROUTE_KINDS", "POOL_MODES", "Route", "check_token_pattern", "tokenizer", "ngram_topk",
           "bm25_route", "fuse", "pool_counts"]

#: the kinds of route a pool fuses
ROUTE_KINDS = ("dense", "bm25", "ngram")
#: the pool's modes: v1 = the dense routes' top judge_depth; v2 = v1 plus the fused top judge_depth
POOL_MODES = ("v1", "v2")


@dataclass(frozen=True)
class Route:
    """One route's top documents.

    Attributes:
        name: the route's column suffix, letters, digits, ``_`` and ``-`` (e.g. ``dense_base``,
            ``bm25``, ``ngram5``).
        kind: one of :data:`ROUTE_KINDS`.
        weight: its RRF weight, > 0.
        indices: ``(n_queries, depth)`` int64 indices into the corpus's document list, best
            first; -1 marks an empty slot (never followed by a filled one).
    """

    name: str
    kind: str
    weight: float
    indices: np.ndarray

    def __post_init__(self) -> None:
        if self.kind not in ROUTE_KINDS:
            raise ValueError(f"route {self.name!r}: kind must be one of {ROUTE_KINDS}, got {self.kind!r}")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", self.name):
            raise ValueError(f"route name must be letters, digits, '_' or '-', got {short_repr(self.name, 60)}")
        if not (np.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"route {self.name!r}: weight must be finite and > 0, got {self.weight}")
        idx = np.asarray(self.indices)
        if idx.ndim != 2 or idx.dtype.kind not in "iu":
            raise ValueError(f"route {self.name!r}: indices must be a 2-d integer array")


def tokenizer(pattern: str):
    """The lexical routes' tokenizer: lowercase, then every match of ``pattern``."""
    rx = check_token_pattern(pattern)
    return lambda text: rx.findall(text.lower())


def _positive_topk(score_blocks, nq: int, doc_ids: Sequence[str], k: int, self_idx: np.ndarray):
    """Top ``k`` per query of score blocks, only documents scoring above 0 (the lexical rule),
    ordered and masked by the ranking kernel (:func:`recipematch.retrieval.ranking.topk_from_blocks`)."""

    def positive():
        for start, stop, block in score_blocks:
            yield start, stop, torch.where(block > 0, block, torch.tensor(-torch.inf, dtype=block.dtype))

    return topk_from_blocks(positive(), nq, doc_ids, k, self_idx)


def ngram_topk(doc_texts: Sequence[str], query_texts: Sequence[str], k: int, *, doc_ids: Sequence[str],
               n: int, token_pattern: str, self_idx: np.ndarray, chunk_size: int = 256
               ) -> tuple[np.ndarray, np.ndarray]:
    """The n-gram route: each query's top ``k`` documents by the number of distinct word
    ``n``-grams shared with it (module docstring).

    Args:
        doc_texts, doc_ids: the corpus, aligned, ``n_docs`` each.
        query_texts: ``n_queries`` texts.
        k: documents kept per query, >= 1.
        n: words per n-gram, >= 1.
        token_pattern: the token regex (:func:`tokenizer`).
        self_idx: ``(n_queries,)`` int64, the corpus index masked for each query (-1: none).

    Returns:
        ``indices`` ``(n_queries, k)`` int64 (-1: empty) and ``scores`` ``(n_queries, k)``
        float32 shared-n-gram counts (-inf where empty).
    """
    # imported here: only the n-gram route needs scikit-learn
    from sklearn.feature_extraction.text import CountVectorizer

    if k < 1 or n < 1:
        raise ValueError(f"k and n must be >= 1, got k={k}, n={n}")
    nq, nd = len(query_texts), len(doc_texts)
    vec = CountVectorizer(tokenizer=tokenizer(token_pattern), token_pattern=None, lowercase=False,
                          ngram_range=(n, n), binary=True, dtype=np.float32)
    try:
        docs = vec.fit_transform(list(doc_texts)).T.tocsr()  # (vocab, n_docs)
    except ValueError:  # no document has n tokens: the route finds nothing
        return np.full((nq, k), -1, dtype=np.int64), np.full((nq, k), -np.inf, dtype=np.float32)
    queries = vec.transform(list(query_texts))  # n-grams outside the corpus vocabulary cannot match
    queries.data[:] = 1.0

    def blocks():
        for start in range(0, nq, chunk_size):
            stop = min(start + chunk_size, nq)
            block = (queries[start:stop] @ docs).toarray().astype(np.float32, copy=False)
            yield start, stop, torch.from_numpy(np.ascontiguousarray(block.reshape(stop - start, nd)))

    return _positive_topk(blocks(), nq, doc_ids, k, self_idx)


def bm25_route(corpus: Mapping[str, Mapping], queries: Mapping[str, str], query_ids: Sequence[str], k: int, *,
               k1: float, b: float, token_pattern: str, self_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The BM25 route: bm25s over lowercased ``token_pattern`` tokens, documents scoring 0
    left out (module docstring). Returns ``(indices, scores)`` as :func:`ngram_topk`."""
    check_token_pattern(token_pattern)
    pat = re.compile(token_pattern)
    if not any(pat.search(doc_text(row).lower()) for row in corpus.values()):
        # no document has a token: bm25s has no vocabulary, and the route is empty for every query
        return (np.full((len(query_ids), k), -1, dtype=np.int64),
                np.full((len(query_ids), k), -np.inf, dtype=np.float32))
    blocks = score_blocks(corpus, queries, query_ids, k1, b, None, None, token_pattern=token_pattern)
    return _positive_topk(blocks, len(query_ids), list(corpus), k, self_idx)


def fuse(routes: Sequence[Route], query_ids: Sequence[str], doc_ids: Sequence[str], *, rrf_k: float,
         judge_depth: int, gold: Mapping[str, Mapping[str, int]] | None = None) -> pd.DataFrame:
    """Every (query, document) pair some route retrieved, with each route's rank, the fused
    score and rank, and the v1 / v2 pool flags (module docstring).

    Args:
        routes: at least one, distinct names, each ``(len(query_ids), depth)``.
        query_ids, doc_ids: the rows of the routes' arrays and the ids their indices name.
        rrf_k: RRF's k, >= 0.
        judge_depth: the pools' depth, >= 1 (the design: 20).
        gold: ``query_id -> {doc_id: grade}``; a pair is ``is_gold`` when its grade is > 0.

    Returns:
        One row per pair, sorted by query (in ``query_ids`` order) then fused rank:
        ``query_id, doc_id``, ``rank_<route>`` (nullable Int64, 1-based), ``best_rank``,
        ``n_routes``, ``fused_score`` (float64), ``fused_rank`` (1-based), ``in_dense``
        (within some dense route's top ``judge_depth``), ``in_v1``, ``in_v2``, ``is_gold``.

    Raises:
        ValueError: no route, duplicate names, shapes that disagree, an index out of range,
            ``rrf_k`` < 0 or ``judge_depth`` < 1.
    """
    if not routes:
        raise ValueError("fuse needs at least one route")
    names = [r.name for r in routes]
    if len(set(names)) != len(names):
        raise ValueError(f"route names must be distinct, got {names}")
    if not (np.isfinite(rrf_k) and rrf_k >= 0) or judge_depth < 1:
        raise ValueError(f"rrf_k must be >= 0 and judge_depth >= 1, got {rrf_k}, {judge_depth}")
    nq, nd = len(query_ids), len(doc_ids)
    parts = []
    for ri, r in enumerate(routes):
        idx = np.asarray(r.indices, dtype=np.int64)
        if idx.shape[0] != nq:
            raise ValueError(f"route {r.name!r} has {idx.shape[0]} rows for {nq} queries")
        if idx.size and (idx.min() < -1 or idx.max() >= nd):
            raise ValueError(f"route {r.name!r}: an index outside [-1, {nd})")
        q, pos = np.nonzero(idx >= 0)
        parts.append(pd.DataFrame({"q": q.astype(np.int64), "d": idx[q, pos], "route": ri,
                                   "rank": (pos + 1).astype(np.int64)}))
    long = pd.concat(parts, ignore_index=True)
    if long.duplicated(["q", "d", "route"]).any():
        raise ValueError("a route lists one document twice for a query")
    weights = np.array([r.weight for r in routes], dtype=np.float64)
    long["contrib"] = weights[long["route"].to_numpy()] / (rrf_k + long["rank"].to_numpy(dtype=np.float64))
    # the sum in the routes' declared order (float addition is not associative)
    long = long.sort_values(["q", "d", "route"], kind="stable")
    wide = long.pivot(index=["q", "d"], columns="route", values="rank")
    contrib = long.pivot(index=["q", "d"], columns="route", values="contrib").fillna(0.0)
    fused = np.zeros(len(contrib), dtype=np.float64)
    for ri in range(len(routes)):
        if ri in contrib.columns:
            fused = fused + contrib[ri].to_numpy()
    out = pd.DataFrame(index=wide.index).reset_index()
    dense_top = np.zeros(len(out), dtype=bool)
    for ri, r in enumerate(routes):
        col = wide[ri].to_numpy() if ri in wide.columns else np.full(len(out), np.nan)
        out[f"rank_{r.name}"] = pd.array(np.where(np.isnan(col), pd.NA, col), dtype="Int64")
        if r.kind == "dense":
            dense_top |= ~np.isnan(col) & (col <= judge_depth)
    ranks = wide.to_numpy(dtype=np.float64)
    out["best_rank"] = np.nanmin(ranks, axis=1).astype(np.int64)
    out["n_routes"] = (~np.isnan(ranks)).sum(axis=1).astype(np.int64)
    out["fused_score"] = fused
    doc_arr = np.asarray(doc_ids, dtype=object)
    out["doc_id"] = doc_arr[out["d"].to_numpy()]
    out = out.sort_values(["q", "fused_score", "best_rank", "doc_id"], ascending=[True, False, True, True],
                          kind="stable").reset_index(drop=True)
    out["fused_rank"] = out.groupby("q").cumcount().astype(np.int64) + 1
    key = pd.MultiIndex.from_arrays([out["q"], out["d"]])
    out["in_dense"] = pd.Series(dense_top, index=wide.index).reindex(key).to_numpy()
    out["in_v1"] = out["in_dense"]
    out["in_v2"] = out["in_v1"] | (out["fused_rank"] <= judge_depth)
    qid_arr = np.asarray(query_ids, dtype=object)
    out["query_id"] = qid_arr[out["q"].to_numpy()]
    gold = gold or {}
    out["is_gold"] = [bool((gold.get(q) or {}).get(d, 0) > 0) for q, d in zip(out["query_id"], out["doc_id"])]
    cols = ["query_id", "doc_id", *[f"rank_{r.name}" for r in routes], "best_rank", "n_routes", "fused_score",
            "fused_rank", "in_dense", "in_v1", "in_v2", "is_gold"]
    return out[cols]


def pool_counts(cands: pd.DataFrame, routes: Sequence[Route], query_ids: Sequence[str], *, mode: str,
                judge_depth: int, gold: Mapping[str, Mapping[str, int]]) -> dict:
    """The pool's counts (the metrics of the ``pooling`` stage).

    Args:
        cands: :func:`fuse`'s table.
        routes: the routes it fused, in order.
        query_ids: the pooled queries.
        mode: one of :data:`POOL_MODES`; ``pool`` describes that mode's pairs.
        judge_depth: as given to :func:`fuse`.
        gold: the golds the evaluation scores, ``query_id -> {doc_id: grade}``.

    Returns:
        ``{"n_queries", "n_pairs_any_route", "routes": {name: {kind, weight, n_pairs,
        n_queries_empty, queries_gold_in_top_depth, top1_misses, top1_misses_in_pool}},
        "overlap": {"<a> & <b>": pairs both routes hold in their top judge_depth},
        "fused_top": {"top_<n>_in_dense_top_<n>": share, "from_<route>": pairs of the fused top
        judge_depth that route holds in its own top judge_depth}, "pool": {"mode", "v1_pairs",
        "v2_pairs", "v2_new_pairs", "v2_new_per_query", "v2_new_outside_dense_routes",
        "pairs", "queries_gold_in_pool", "gold_pairs_in_pool"}}``; shares in [0, 1].
    """
    if mode not in POOL_MODES:
        raise ValueError(f"mode must be one of {POOL_MODES}, got {mode!r}")
    nq = len(query_ids)
    pool_col = "in_v1" if mode == "v1" else "in_v2"
    top_sets = {}
    out_routes = {}
    for r in routes:
        col = cands[f"rank_{r.name}"]
        have = col.notna().to_numpy()
        top = have & (col.fillna(0).to_numpy() <= judge_depth)
        top_sets[r.name] = set(zip(cands["query_id"][top], cands["doc_id"][top]))
        first = cands[have & (col.fillna(0).to_numpy() == 1)]
        first_gold = dict(zip(first["query_id"], first["is_gold"]))
        first_pool = dict(zip(first["query_id"], first[pool_col]))
        misses = [q for q in query_ids if not first_gold.get(q, False)]
        gold_q = cands[top & cands["is_gold"].to_numpy()]["query_id"].nunique()
        out_routes[r.name] = {
            "kind": r.kind, "weight": r.weight, "n_pairs": int(have.sum()),
            "n_queries_empty": int(nq - cands[have]["query_id"].nunique()),
            "queries_gold_in_top_depth": int(gold_q),
            "top1_misses": len(misses),
            "top1_misses_in_pool": int(sum(1 for q in misses if first_pool.get(q, False))),
        }
    names = [r.name for r in routes]
    overlap = {f"{a} & {b}": len(top_sets[a] & top_sets[b]) for i, a in enumerate(names) for b in names[i + 1:]}
    fused_top = cands[cands["fused_rank"] <= judge_depth]
    fused_pairs = set(zip(fused_top["query_id"], fused_top["doc_id"]))
    f5 = cands[cands["fused_rank"] <= 5]
    dense5 = np.zeros(len(f5), dtype=bool)
    for r in routes:
        if r.kind == "dense":
            c = f5[f"rank_{r.name}"]
            dense5 |= c.notna().to_numpy() & (c.fillna(0).to_numpy() <= 5)
    fused = {"from_" + n: len(fused_pairs & top_sets[n]) for n in names}
    fused["pairs"] = len(fused_pairs)
    fused["top_5_in_dense_top_5"] = round(float(dense5.mean()), 6) if len(f5) else 0.0
    v1 = cands["in_v1"].to_numpy()
    v2 = cands["in_v2"].to_numpy()
    new = v2 & ~v1
    in_any_dense = np.zeros(len(cands), dtype=bool)
    for r in routes:
        if r.kind == "dense":
            in_any_dense |= cands[f"rank_{r.name}"].notna().to_numpy()
    pool = cands[cands[pool_col].to_numpy()]
    n_gold_pairs = sum(1 for q in query_ids for d, g in (gold.get(q) or {}).items() if g > 0)
    return {
        "n_queries": nq,
        "n_pairs_any_route": int(len(cands)),
        "routes": out_routes,
        "overlap": overlap,
        "fused_top": fused,
        "pool": {
            "mode": mode, "judge_depth": judge_depth,
            "v1_pairs": int(v1.sum()), "v2_pairs": int(v2.sum()), "v2_new_pairs": int(new.sum()),
            "v2_new_per_query": round(float(new.sum()) / nq, 6) if nq else 0.0,
            "v2_new_outside_dense_routes": int((new & ~in_any_dense).sum()),
            "pairs": int(len(pool)),
            "queries_gold_in_pool": int(pool[pool["is_gold"]]["query_id"].nunique()),
            "gold_pairs_in_pool": int(pool["is_gold"].sum()),
            "gold_pairs": int(n_gold_pairs),
        },
    }
