"""Dense exact ranking: every query against the whole corpus, in bounded memory.

Scores are inner products of unit float32 vectors (cosine). Rules (shared with BM25, see
:mod:`recipematch.retrieval`): a query's rank is the number of non-masked documents scoring
strictly above its best gold (the paper's rule, Section 3 and Appendix A); the gold wins
ties; top-k lists order equal scores by ascending document id. ``self_mask`` is either a
bool (``True``: mask the entry whose id equals the query's) or the own-entry index that
:func:`recipematch.retrieval.selfmask.own_entries` computes under an evaluation's declared
rule (the scoring entry points pass that).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from recipematch.beir import positive_qrels

__all__ = ["NO_GOLD", "RankDetails", "default_chunk_size", "rank_of_gold", "search_topk",
           "gold_beats_near_misses"]

NO_GOLD = -1

_SCORE_BLOCK_ELEMENTS = 1 << 25  # floats per score block: 128 MiB in float32


def default_chunk_size(n_docs: int) -> int:
    """Queries per score block so a block holds about 2**25 float32 scores (128 MiB); it is
    rounded up to a multiple of 64, the rows of every score product."""
    return max(1, _SCORE_BLOCK_ELEMENTS // max(1, n_docs))


def _as_f32(x: np.ndarray, name: str) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n, dim), got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return x


def _self_index(query_ids: Sequence[str], doc_ids: Sequence[str]) -> np.ndarray:
    """(n_queries,) int64: index of the doc whose id equals the query id, -1 if none."""
    pos = {d: i for i, d in enumerate(doc_ids)}
    if len(pos) != len(doc_ids):
        raise ValueError("doc_ids contain duplicates")
    return np.fromiter((pos.get(q, -1) for q in query_ids), dtype=np.int64,
                       count=len(query_ids))


def _mask_index(self_mask: bool | np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str]) -> np.ndarray:
    """(n_queries,) int64: the corpus index masked for each query, -1 for none.

    Raises:
        ValueError: an index array of the wrong shape or out of range, or duplicate doc ids.
    """
    if isinstance(self_mask, np.ndarray):
        if len(set(doc_ids)) != len(doc_ids):
            raise ValueError("doc_ids contain duplicates")
        idx = np.asarray(self_mask, dtype=np.int64)
        if idx.shape != (len(query_ids),) or (idx.size and (idx.min() < -1 or idx.max() >= len(doc_ids))):
            raise ValueError(f"self_mask index must have shape ({len(query_ids)},) with values in "
                             f"[-1, {len(doc_ids)}), got shape {idx.shape}")
        return idx
    idx = _self_index(query_ids, doc_ids)
    return idx if self_mask else np.full(len(query_ids), -1, dtype=np.int64)


@dataclass
class _GoldIndex:
    """Golds as flat arrays: query q's golds are doc_idx[ptr[q]:ptr[q+1]]."""

    ptr: np.ndarray  # (n_queries + 1,) int64
    doc_idx: np.ndarray  # (n_pairs,) int64
    self_gold_removed: np.ndarray  # (n_queries,) bool


def _gold_index(query_ids, doc_ids, qrels, self_idx) -> _GoldIndex:
    pos = {d: i for i, d in enumerate(doc_ids)}
    positive = positive_qrels(qrels)
    missing = sorted({d for q in query_ids for d in positive.get(q, ()) if d not in pos})
    if missing:
        raise ValueError(f"{len(missing)} gold doc ids are not in the corpus, e.g. "
                         f"{missing[:5]}; fix the qrels or the corpus")
    ptr = [0]
    flat: list[int] = []
    removed = np.zeros(len(query_ids), dtype=bool)
    for i, q in enumerate(query_ids):
        for d in positive.get(q, ()):
            j = pos[d]
            if j == self_idx[i]:
                removed[i] = True
                continue
            flat.append(j)
        ptr.append(len(flat))
    emptied = [query_ids[i] for i in np.flatnonzero(removed) if ptr[i + 1] == ptr[i]]
    if emptied:
        # imported here: this module is loaded alone by file where the package's other modules are absent
        from recipematch.retrieval.selfmask import own_only_gold_error

        raise own_only_gold_error(emptied)
    return _GoldIndex(np.asarray(ptr, dtype=np.int64), np.asarray(flat, dtype=np.int64),
                      removed)


@dataclass
class RankDetails:
    """Per-query outcome of :func:`rank_of_gold` (all arrays have shape ``(n_queries,)``).

    Attributes:
        ranks: int64, documents strictly above the best gold; :data:`NO_GOLD` (-1) if none.
        n_ties_at_gold: int64, non-gold, non-masked documents scoring exactly the best gold's
            score (they do not count against it).
        n_gold: int64, golds ranked (after self-masking).
        self_gold_removed: bool, the query's own entry was listed as a gold and was dropped.
        self_masked: bool, a corpus entry with the query's id existed and was masked.
    """

    ranks: np.ndarray
    n_ties_at_gold: np.ndarray
    n_gold: np.ndarray
    self_gold_removed: np.ndarray
    self_masked: np.ndarray


def _ranks_from_blocks(blocks: Iterator[tuple[int, int, torch.Tensor]], n_queries: int,
                       gold: _GoldIndex, self_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks and tie counts from score blocks ``(start, stop, scores (stop-start, n_docs))``;
    ``self_idx`` (from :func:`_mask_index`) is masked in each row (-1: nothing)."""
    ranks = np.empty(n_queries, dtype=np.int64)
    ties = np.zeros(n_queries, dtype=np.int64)
    ptr = gold.ptr
    for start, stop, scores in blocks:
        c = stop - start
        rows = np.flatnonzero(self_idx[start:stop] >= 0)
        if rows.size:
            scores[torch.from_numpy(rows), torch.from_numpy(self_idx[start + rows])] = -torch.inf
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
    return ranks, ties


_SCORE_ROWS = 64  # every score product has exactly this many query rows


def _embedding_blocks(q: np.ndarray, d: np.ndarray, chunk_size: int):
    """Score blocks ``(start, stop, scores (stop - start, n_docs) float32)``.

    Every matrix product has the same shape, ``(64, dim) @ (dim, n_docs)`` (the last block is
    zero-padded): BLAS picks its kernel by shape, so a query's scores are bit-identical
    whatever ``chunk_size`` is, whichever queries share its block and wherever it sits in it.
    """
    dt = torch.from_numpy(d).T  # (dim, n_docs), a view
    n = d.shape[0]
    rows = _SCORE_ROWS
    chunk = max(rows, -(-chunk_size // rows) * rows)
    nq = q.shape[0]
    pad = torch.zeros((rows, q.shape[1]), dtype=torch.float32)
    for start in range(0, nq, chunk):
        stop = min(start + chunk, nq)
        out = torch.empty((-(-(stop - start) // rows) * rows, n), dtype=torch.float32)
        for r in range(start, stop, rows):
            block = torch.from_numpy(q[r:r + rows])
            if block.shape[0] < rows:
                pad.zero_()
                pad[:block.shape[0]] = block
                block = pad
            torch.mm(block, dt, out=out[r - start:r - start + rows])
        yield start, stop, out[:stop - start]


def rank_of_gold(
    query_emb: np.ndarray,
    doc_emb: np.ndarray,
    query_ids: Sequence[str],
    doc_ids: Sequence[str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    self_mask: bool | np.ndarray,
    chunk_size: int | None = None,
    return_details: bool = False,
) -> np.ndarray | RankDetails:
    """Rank of each query's best gold over the whole corpus (the paper, Section 3 and Appendix A).

    Args:
        query_emb: ``(n_queries, dim)`` unit vectors (float32).
        doc_emb: ``(n_docs, dim)`` unit vectors (float32).
        query_ids: ``n_queries`` ids, aligned with ``query_emb``.
        doc_ids: ``n_docs`` unique ids, aligned with ``doc_emb``.
        qrels: ``query_id -> {doc_id: score}``; golds are scores > 0.
        self_mask: ``True``: mask the corpus entry whose id equals the query id; ``False``:
            mask nothing; or an ``(n_queries,)`` int64 index of the entry to mask per query
            (-1 = none), as :func:`recipematch.retrieval.selfmask.own_entries` gives it
            (required keyword).
        chunk_size: queries per score block (default :func:`default_chunk_size`); the result
            does not depend on it.
        return_details: return a :class:`RankDetails` instead of the ranks alone.

    Returns:
        ``(n_queries,)`` int64 ranks in ``[0, n_docs)`` (0 = gold first), or
        :data:`NO_GOLD` for a query without a gold; or :class:`RankDetails`.

    Raises:
        ValueError: shapes disagree, NaN/inf embeddings, duplicate doc ids, or a gold id
            that is not in ``doc_ids``; :class:`recipematch.errors.RecipematchError` (a
            ``ValueError``) when a query's only gold is its own masked entry.
    """
    q = _as_f32(query_emb, "query_emb")
    d = _as_f32(doc_emb, "doc_emb")
    if q.shape[0] != len(query_ids) or d.shape[0] != len(doc_ids):
        raise ValueError("embeddings and ids disagree in length")
    if q.shape[0] and q.shape[1] != d.shape[1]:
        raise ValueError(f"dimension mismatch: queries {q.shape[1]}, documents {d.shape[1]}")
    self_idx = _mask_index(self_mask, query_ids, doc_ids)
    gold = _gold_index(query_ids, doc_ids, qrels, self_idx)
    cs = chunk_size or default_chunk_size(len(doc_ids))
    ranks, ties = _ranks_from_blocks(_embedding_blocks(q, d, cs), len(query_ids), gold, self_idx)
    if not return_details:
        return ranks
    return RankDetails(ranks=ranks, n_ties_at_gold=ties, n_gold=np.diff(gold.ptr),
                       self_gold_removed=gold.self_gold_removed, self_masked=self_idx >= 0)


def search_topk(
    query_emb: np.ndarray,
    doc_emb: np.ndarray,
    k: int,
    *,
    query_ids: Sequence[str],
    doc_ids: Sequence[str],
    self_mask: bool | np.ndarray,
    chunk_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by inner product, in memory-bounded query blocks.

    Equal scores are ordered by ascending document id (string order), so the output never
    depends on the corpus's row order. ``self_mask`` (as in :func:`rank_of_gold`) names the
    entry removed before the cut to k. Where fewer than k documents remain, the missing slots hold index
    -1 and score ``-inf``.

    Returns:
        ``indices`` ``(n_queries, k)`` int64 into ``doc_ids`` and ``scores`` ``(n_queries, k)``
        float32, best first.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    q = _as_f32(query_emb, "query_emb")
    d = _as_f32(doc_emb, "doc_emb")
    if q.shape[0] != len(query_ids) or d.shape[0] != len(doc_ids):
        raise ValueError("embeddings and ids disagree in length")
    self_idx = _mask_index(self_mask, query_ids, doc_ids)
    cs = chunk_size or default_chunk_size(d.shape[0])
    return _topk_from_blocks(_embedding_blocks(q, d, cs), q.shape[0], doc_ids, k, self_idx)


def _topk_from_blocks(blocks, nq: int, doc_ids: Sequence[str], k: int,
                      self_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of score blocks ``(start, stop, (stop - start, n_docs) float32 tensor)`` under
    :func:`search_topk`'s order (score descending, then ascending document id) and mask."""
    n = len(doc_ids)
    id_rank = np.empty(n, dtype=np.int64)
    id_rank[np.argsort(np.asarray(doc_ids, dtype=object), kind="stable")] = np.arange(n)
    out_idx = np.full((nq, k), -1, dtype=np.int64)
    out_scores = np.full((nq, k), -np.inf, dtype=np.float32)
    kk = min(k + 1, n)
    for start, stop, scores in blocks:
        rows = np.flatnonzero(self_idx[start:stop] >= 0)
        if rows.size:
            scores[torch.from_numpy(rows), torch.from_numpy(self_idx[start + rows])] = -torch.inf
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
    return out_idx, out_scores


def gold_beats_near_misses(
    query_emb: np.ndarray,
    doc_emb: np.ndarray,
    query_ids: Sequence[str],
    doc_ids: Sequence[str],
    qrels: Mapping[str, Mapping[str, int]],
    near_misses: Mapping[str, Sequence[str]],
    self_mask: bool | np.ndarray = True,
) -> np.ndarray:
    """Hard tier: does the best gold score *strictly* above every near-miss of its query?

    Args:
        near_misses: ``query_id -> near-miss doc ids`` (ids absent from ``doc_ids`` are
            ignored).
        self_mask: the entry masked per query, as in :func:`rank_of_gold` (an index from
            :func:`recipematch.retrieval.selfmask.own_entries`, or ``True`` for the entry with
            the query's id): it is neither a gold nor a near-miss here.

    Returns:
        ``(n_queries,)`` float64: 1.0 if the best gold beats every near-miss, 0.0 if some
        near-miss scores at least as high (a tie is not a win), NaN when the query has no
        near-miss or no gold in the corpus (excluded from the rate, see
        :func:`recipematch.metrics.near_miss_win_rate`).
    """
    q = _as_f32(query_emb, "query_emb")
    d = _as_f32(doc_emb, "doc_emb")
    pos = {x: i for i, x in enumerate(doc_ids)}
    own = _mask_index(self_mask, query_ids, doc_ids)
    positive = positive_qrels(qrels)
    rows_g, cols_g, rows_n, cols_n = [], [], [], []
    for i, qid in enumerate(query_ids):
        for did in positive.get(qid, ()):
            if did in pos and pos[did] != own[i]:
                rows_g.append(i)
                cols_g.append(pos[did])
        for did in near_misses.get(qid, ()):
            if did in pos and pos[did] != own[i]:
                rows_n.append(i)
                cols_n.append(pos[did])

    def seg_max(rows, cols):
        best = np.full(len(query_ids), -np.inf)
        r_all = np.asarray(rows, dtype=np.int64)
        c_all = np.asarray(cols, dtype=np.int64)
        for start in range(0, r_all.size, 8192):  # bounded memory: 8192 pairs at a time
            r, c = r_all[start:start + 8192], c_all[start:start + 8192]
            s = np.einsum("ij,ij->i", q[r], d[c])  # (n_pairs,)
            np.maximum.at(best, r, s.astype(np.float64))
        return best

    g, n = seg_max(rows_g, cols_g), seg_max(rows_n, cols_n)
    out = (g > n).astype(np.float64)
    out[~np.isfinite(g) | ~np.isfinite(n)] = np.nan
    return out
