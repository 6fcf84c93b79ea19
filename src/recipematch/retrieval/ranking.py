"""The ranking kernel: how every retrieval path ranks, cuts to top-k and masks a query's own entry.

Dense search (:mod:`recipematch.retrieval.dense`), BM25 (:mod:`recipematch.retrieval.bm25`),
the lexical pooling routes (:mod:`recipematch.pooling`), the near-miss score and style
tracking (:mod:`recipematch.style_tracking`) all go through the functions here, so the rules exist
once (the paper, Section 3 and Appendix A):

- **Rank** of a query is the number of non-masked documents that score *strictly higher* than
  its best-scoring gold; 0 means the gold is first.
- **Ties** go to the gold: a document scoring exactly the best gold's score does not push it
  down (such documents are counted, ``n_ties_at_gold``). Top-k lists order equal scores by
  ascending document id (string order), so no result depends on the corpus's row order.
- **Self-masking**: each query masks at most one corpus entry, given as a *mask index*, an
  ``(n_queries,)`` int64 array of corpus indices with -1 for "none" (:func:`mask_index`).
  Which entry is a query's own is decided by :mod:`recipematch.retrieval.selfmask`'s rules,
  not here. The masked entry scores ``-inf`` in its query's row (:func:`mask_self`), is never
  a gold (:func:`gold_index`) and, in the near-miss score, never a near-miss
  (:func:`is_own_entry`).

Score blocks are ``(start, stop, scores)`` triples: ``scores`` is a float32 torch tensor of
shape ``(stop - start, n_docs)`` holding queries ``start:stop``; the functions here may write
into it (the mask).

This module imports nothing else of :mod:`recipematch.retrieval` at load time:
``benchmarks/gpu_check.py`` loads it with :mod:`.dense` from their folder, without the
package's ``__init__``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from recipematch.beir import positive_qrels

__all__ = ["NO_GOLD", "GoldIndex", "RankDetails", "self_index", "mask_index", "gold_index", "is_own_entry",
           "own_entry_cells", "mask_self", "ranks_from_blocks", "rank_details", "topk_from_blocks"]

#: the rank of a query that has no gold left to find (a miss at every k)
NO_GOLD = -1


def self_index(query_ids: Sequence[str], doc_ids: Sequence[str]) -> np.ndarray:
    """The corpus entry whose id equals each query's id.

    Args:
        query_ids: ``n_queries`` ids.
        doc_ids: ``n_docs`` unique ids.

    Returns:
        ``(n_queries,)`` int64 indices into ``doc_ids`` in ``[0, n_docs)``, -1 where no
        document has the query's id.

    Raises:
        ValueError: ``doc_ids`` contain duplicates.
    """
    pos = {d: i for i, d in enumerate(doc_ids)}
    if len(pos) != len(doc_ids):
        raise ValueError("doc_ids contain duplicates")
    return np.fromiter((pos.get(q, -1) for q in query_ids), dtype=np.int64,
                       count=len(query_ids))


def mask_index(self_mask: bool | np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str]) -> np.ndarray:
    """The corpus entry masked for each query, from a ``self_mask`` argument of the entry points.

    Args:
        self_mask: ``True``: the entry whose id equals the query id (:func:`self_index`);
            ``False``: none; or an ``(n_queries,)`` integer index (-1 = none), as
            :func:`recipematch.retrieval.selfmask.own_entries` gives it, returned as int64.
        query_ids: ``n_queries`` ids.
        doc_ids: ``n_docs`` unique ids.

    Returns:
        ``(n_queries,)`` int64 indices in ``[-1, n_docs)``; -1: nothing masked.

    Raises:
        ValueError: an index array that is not of an integer dtype, of the wrong shape or out
            of range, or duplicate doc ids (not checked for ``self_mask=False``).
        TypeError: ``self_mask`` neither a bool nor an array.
    """
    if isinstance(self_mask, np.ndarray):
        if len(set(doc_ids)) != len(doc_ids):
            raise ValueError("doc_ids contain duplicates")
        if not np.issubdtype(self_mask.dtype, np.integer):
            raise ValueError(f"self_mask index must be an integer array, got dtype {self_mask.dtype} (a boolean "
                             "array is not a mask: pass True or False, or the index own_entries gives)")
        idx = np.asarray(self_mask, dtype=np.int64)
        if idx.shape != (len(query_ids),):
            raise ValueError(f"self_mask index must have shape ({len(query_ids)},), got shape {idx.shape}")
        if idx.size and (idx.min() < -1 or idx.max() >= len(doc_ids)):
            bad = int(idx.min()) if idx.min() < -1 else int(idx.max())
            raise ValueError(f"self_mask index values must lie in [-1, {len(doc_ids)}), got {bad}")
        return idx
    if not isinstance(self_mask, (bool, np.bool_)):
        raise TypeError(f"self_mask must be True, False or an integer index array, got {type(self_mask).__name__}")
    idx = self_index(query_ids, doc_ids)
    return idx if self_mask else np.full(len(query_ids), -1, dtype=np.int64)


def is_own_entry(rows: np.ndarray, cols: np.ndarray, self_idx: np.ndarray) -> np.ndarray:
    """Which (query, document) pairs are the query's masked entry.

    Args:
        rows: ``(n_pairs,)`` integer query indices into ``self_idx``.
        cols: ``(n_pairs,)`` integer document indices (>= 0).
        self_idx: ``(n_queries,)`` integer mask index (:func:`mask_index`; -1 = none).

    Returns:
        ``(n_pairs,)`` bool: ``cols[i]`` is the entry masked for query ``rows[i]``.
    """
    return self_idx[rows] == cols


def own_entry_cells(block_self_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The masked cells of a block of queries' score (or similarity) rows.

    Args:
        block_self_idx: ``(n_rows,)`` integer mask index of the block's queries, in row order
            (-1 = none).

    Returns:
        ``(rows, cols)``: int64 row positions within the block (ascending) of the queries that
        mask an entry, and their masked document indices (``block_self_idx``'s dtype); both
        ``(n_masked,)``.
    """
    rows = np.flatnonzero(block_self_idx >= 0)
    return rows, block_self_idx[rows]


def mask_self(scores: torch.Tensor, block_self_idx: np.ndarray) -> None:
    """Mask each query's own entry in a score block, in place: its score becomes ``-inf``, so it
    is never above a gold, never ties one (gold scores are finite) and is in no top-k.

    Args:
        scores: ``(n_rows, n_docs)`` floating tensor (float32 in every caller), one query per
            row.
        block_self_idx: ``(n_rows,)`` integer mask index of those queries (-1 = none), values
            below ``n_docs``.
    """
    rows, cols = own_entry_cells(block_self_idx)
    if rows.size:
        scores[torch.from_numpy(rows), torch.from_numpy(cols)] = -torch.inf


@dataclass
class GoldIndex:
    """Each query's golds as flat arrays, its masked entry left out.

    Attributes:
        ptr: ``(n_queries + 1,)`` int64 offsets: query ``q``'s golds are
            ``doc_idx[ptr[q]:ptr[q + 1]]``.
        doc_idx: ``(n_pairs,)`` int64 document indices of the golds, in qrels order per query.
        self_gold_removed: ``(n_queries,)`` bool: the query's masked entry was a gold and was
            dropped.
    """

    ptr: np.ndarray
    doc_idx: np.ndarray
    self_gold_removed: np.ndarray


def gold_index(query_ids: Sequence[str], doc_ids: Sequence[str], qrels: Mapping[str, Mapping[str, int]],
               self_idx: np.ndarray) -> GoldIndex:
    """The golds (qrels scores > 0) of each query as a :class:`GoldIndex`, without the entry
    ``self_idx`` masks for it (Section 3: the masked entry is not ranked, so it cannot be found).

    Args:
        query_ids: ``n_queries`` ids.
        doc_ids: ``n_docs`` unique ids.
        qrels: ``query_id -> {doc_id: score}``.
        self_idx: ``(n_queries,)`` int64 mask index (:func:`mask_index`).

    Raises:
        ValueError: a gold id that is not in ``doc_ids``;
            :class:`recipematch.errors.RecipematchError` (a ``ValueError``) naming the queries
            whose only gold is their masked entry.
    """
    pos = {d: i for i, d in enumerate(doc_ids)}
    positive = positive_qrels(qrels)
    missing = sorted({d for q in query_ids for d in positive.get(q, ()) if d not in pos})
    if missing:
        raise ValueError(f"{len(missing)} gold doc ids are not in the corpus, e.g. "
                         f"{missing[:5]}; fix the qrels or the corpus")
    rows: list[int] = []
    cols: list[int] = []
    for i, q in enumerate(query_ids):
        for d in positive.get(q, ()):
            rows.append(i)
            cols.append(pos[d])
    r = np.asarray(rows, dtype=np.int64)
    c = np.asarray(cols, dtype=np.int64)
    own = is_own_entry(r, c, self_idx)
    removed = np.zeros(len(query_ids), dtype=bool)
    removed[r[own]] = True
    ptr = np.zeros(len(query_ids) + 1, dtype=np.int64)
    np.cumsum(np.bincount(r[~own], minlength=len(query_ids)), out=ptr[1:])
    emptied = [query_ids[i] for i in np.flatnonzero(removed) if ptr[i + 1] == ptr[i]]
    if emptied:
        # imported here: importing the retrieval package would run its __init__, which this
        # module must not need (the module docstring)
        from recipematch.retrieval.selfmask import own_only_gold_error  # lazy: import cycle with recipematch.retrieval.selfmask

        raise own_only_gold_error(emptied)
    return GoldIndex(ptr, c[~own], removed)


@dataclass
class RankDetails:
    """Per-query outcome of a ranking (all arrays have shape ``(n_queries,)``).

    Attributes:
        ranks: int64, documents strictly above the best gold, in ``[0, n_docs)``;
            :data:`NO_GOLD` (-1) if the query has no gold.
        n_ties_at_gold: int64, non-gold, non-masked documents scoring exactly the best gold's
            score (they do not count against it); 0 without a gold.
        n_gold: int64, golds ranked (after self-masking).
        self_gold_removed: bool, the query's own entry was listed as a gold and was dropped.
        self_masked: bool, the query had an entry to mask (with ``self_mask=True``: a corpus
            entry with the query's id existed) and it was masked.
    """

    ranks: np.ndarray
    n_ties_at_gold: np.ndarray
    n_gold: np.ndarray
    self_gold_removed: np.ndarray
    self_masked: np.ndarray


def ranks_from_blocks(blocks: Iterable[tuple[int, int, torch.Tensor]], n_queries: int,
                      gold: GoldIndex, self_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each query's rank and ties at its best gold, from its score blocks (module docstring).

    Args:
        blocks: score blocks ``(start, stop, scores)`` covering queries ``0:n_queries`` once;
            each ``scores`` (float32, ``(stop - start, n_docs)``) is masked in place.
        n_queries: the number of queries.
        gold: :func:`gold_index` of the same queries, documents and ``self_idx``.
        self_idx: ``(n_queries,)`` int64 mask index (:func:`mask_index`).

    Returns:
        ``ranks`` and ``n_ties_at_gold``, both ``(n_queries,)`` int64, as in
        :class:`RankDetails` (:data:`NO_GOLD` and 0 for a query without a gold).
    """
    ranks = np.empty(n_queries, dtype=np.int64)
    ties = np.zeros(n_queries, dtype=np.int64)
    ptr = gold.ptr
    covered = 0
    for start, stop, scores in blocks:
        covered = _next_block(covered, start, stop, n_queries)
        c = stop - start
        mask_self(scores, self_idx[start:stop])
        lo, hi = ptr[start], ptr[stop]
        g_rows = torch.from_numpy(np.repeat(np.arange(c), np.diff(ptr[start:stop + 1])))
        g_cols = torch.from_numpy(gold.doc_idx[lo:hi])
        g_scores = scores[g_rows, g_cols]  # (n_pairs_in_block,)
        best = torch.full((c,), -torch.inf, dtype=scores.dtype)
        best.scatter_reduce_(0, g_rows, g_scores, reduce="amax")  # (c,)
        above = (scores > best[:, None]).sum(dim=1)  # (c,)
        equal = (scores == best[:, None]).sum(dim=1)
        gold_equal = torch.zeros(c, dtype=torch.int64).index_add_(
            0, g_rows, (g_scores == best[g_rows]).to(torch.int64))
        r = above.numpy().astype(np.int64)
        t = (equal - gold_equal).numpy().astype(np.int64)
        no_gold = np.diff(ptr[start:stop + 1]) == 0
        r[no_gold] = NO_GOLD
        t[no_gold] = 0
        ranks[start:stop] = r
        ties[start:stop] = t
    _all_covered(covered, n_queries)
    return ranks, ties


def _next_block(covered: int, start: int, stop: int, n_queries: int) -> int:
    """The queries covered after block ``start:stop``; blocks must tile ``0:n_queries`` in order.

    Raises:
        ValueError: a gap, an overlap or a block past the last query.
    """
    if start != covered or not start < stop <= n_queries:
        raise ValueError(f"score blocks must cover queries 0:{n_queries} in order, got {start}:{stop} after "
                         f"0:{covered}")
    return stop


def _all_covered(covered: int, n_queries: int) -> None:
    """Raises ValueError when the score blocks stopped before the last query."""
    if covered != n_queries:
        raise ValueError(f"score blocks covered queries 0:{covered} of 0:{n_queries} (a chunk size below 1?)")


def rank_details(blocks: Iterable[tuple[int, int, torch.Tensor]], n_queries: int, gold: GoldIndex,
                 self_idx: np.ndarray) -> RankDetails:
    """:func:`ranks_from_blocks` with the rest of :class:`RankDetails` (same arguments)."""
    ranks, ties = ranks_from_blocks(blocks, n_queries, gold, self_idx)
    return RankDetails(ranks=ranks, n_ties_at_gold=ties, n_gold=np.diff(gold.ptr),
                       self_gold_removed=gold.self_gold_removed, self_masked=self_idx >= 0)


def topk_from_blocks(blocks: Iterable[tuple[int, int, torch.Tensor]], nq: int, doc_ids: Sequence[str], k: int,
                     self_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each query's top ``k`` documents from its score blocks, masked (:func:`mask_self`),
    ordered by score descending, then by ascending document id (string order).

    Ties at the cut are settled by document id too: the result never depends on the corpus's
    row order. A ``-inf`` score (a masked entry, or one a caller set to ``-inf`` to exclude it)
    is never listed.

    Args:
        blocks: score blocks ``(start, stop, scores)`` covering queries ``0:nq`` once; each
            ``scores`` (float32, ``(stop - start, n_docs)``) is masked in place.
        nq: the number of queries.
        doc_ids: ``n_docs`` ids, the blocks' columns.
        k: documents kept per query, >= 1.
        self_idx: ``(nq,)`` integer mask index (:func:`mask_index`; -1 = none).

    Returns:
        ``indices`` ``(nq, k)`` int64 into ``doc_ids`` and ``scores`` ``(nq, k)`` float32, best
        first; where fewer than ``k`` documents remain, the missing slots hold -1 and ``-inf``.
    """
    n = len(doc_ids)
    id_rank = np.empty(n, dtype=np.int64)
    id_rank[np.argsort(np.asarray(doc_ids, dtype=object), kind="stable")] = np.arange(n)
    out_idx = np.full((nq, k), -1, dtype=np.int64)
    out_scores = np.full((nq, k), -np.inf, dtype=np.float32)
    kk = min(k + 1, n)
    covered = 0
    for start, stop, scores in blocks:
        covered = _next_block(covered, start, stop, nq)
        mask_self(scores, self_idx[start:stop])
        if kk == 0:
            continue
        vals_t, idx_t = torch.topk(scores, kk, dim=1, largest=True, sorted=True)
        vals = vals_t.numpy()
        idx = idx_t.numpy().astype(np.int64)
        kc = min(k, kk)
        # order the first kc by (score desc, id asc); the (k+1)-th slot tells if a tie
        # spills over the cut, in which case the row is redone over all tying documents.
        top_v, top_i = vals[:, :kc], idx[:, :kc]
        order = np.lexsort((id_rank[top_i], -top_v.astype(np.float64)), axis=1)
        top_v = np.take_along_axis(top_v, order, axis=1)
        top_i = np.take_along_axis(top_i, order, axis=1)
        if kk > kc:
            spill = (vals[:, kc] == vals[:, kc - 1]) & np.isfinite(vals[:, kc - 1])
            for r in np.flatnonzero(spill):  # rare: exact ties at the cut
                row = scores[r].numpy()
                cand = np.flatnonzero(row >= vals[r, kc - 1])
                o = np.lexsort((id_rank[cand], -row[cand].astype(np.float64)))[:kc]
                top_i[r], top_v[r] = cand[o], row[cand[o]]
        top_i = np.where(np.isfinite(top_v), top_i, -1)
        out_idx[start:stop, :kc] = top_i
        out_scores[start:stop, :kc] = top_v
    _all_covered(covered, nq)
    return out_idx, out_scores
