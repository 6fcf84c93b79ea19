"""Dense exact ranking: every query against the whole corpus, in bounded memory.

Scores are inner products of unit float32 vectors (cosine), computed here in score blocks and
ranked by the kernel, :mod:`recipematch.retrieval.ranking`, under the rules every path shares
(the paper, Section 3 and Appendix A): a query's rank is the number of non-masked documents
scoring strictly above its best gold; the gold wins ties; top-k lists order equal scores by
ascending document id. ``self_mask`` is either a bool (``True``: mask the entry whose id
equals the query's) or the own-entry index that
:func:`recipematch.retrieval.selfmask.own_entries` computes under an evaluation's declared
rule (the scoring entry points pass that).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from recipematch.beir import positive_qrels

# relative: benchmarks/gpu_check.py loads this module and the kernel from their folder without
# the package's __init__ (under another package name), where an absolute import would run it
from .ranking import NO_GOLD, RankDetails, gold_index, is_own_entry, mask_index, rank_details, topk_from_blocks

__all__ = ["NO_GOLD", "RankDetails", "default_chunk_size", "rank_of_gold", "search_topk",
           "gold_beats_near_misses"]

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


def _checked_pair(query_emb, doc_emb, query_ids: Sequence[str], doc_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Both embedding matrices as float32, checked against their ids and each other.

    Raises:
        ValueError: not 2-D, NaN/inf, a row count that differs from its ids, or a dimension
            mismatch between queries and documents.
    """
    q = _as_f32(query_emb, "query_emb")
    d = _as_f32(doc_emb, "doc_emb")
    if q.shape[0] != len(query_ids) or d.shape[0] != len(doc_ids):
        raise ValueError(f"embeddings and ids disagree in length: {q.shape[0]} query rows for {len(query_ids)} "
                         f"ids, {d.shape[0]} document rows for {len(doc_ids)} ids")
    if q.shape[0] and q.shape[1] != d.shape[1]:
        raise ValueError(f"dimension mismatch: queries {q.shape[1]}, documents {d.shape[1]}")
    return q, d


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
    q, d = _checked_pair(query_emb, doc_emb, query_ids, doc_ids)
    self_idx = mask_index(self_mask, query_ids, doc_ids)
    gold = gold_index(query_ids, doc_ids, qrels, self_idx)
    cs = chunk_size or default_chunk_size(len(doc_ids))
    details = rank_details(_embedding_blocks(q, d, cs), len(query_ids), gold, self_idx)
    return details if return_details else details.ranks


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
    """Exact top-k by inner product, in memory-bounded query blocks (the paper's exact search,
    Section 3 and Appendix A).

    Equal scores are ordered by ascending document id (string order), so the output never
    depends on the corpus's row order (:func:`recipematch.retrieval.ranking.topk_from_blocks`).

    Args:
        query_emb: ``(n_queries, dim)`` unit vectors (float32).
        doc_emb: ``(n_docs, dim)`` unit vectors (float32).
        k: documents kept per query, >= 1.
        query_ids: ``n_queries`` ids, aligned with ``query_emb``.
        doc_ids: ``n_docs`` unique ids, aligned with ``doc_emb``.
        self_mask: the entry removed before the cut to k, as in :func:`rank_of_gold`.
        chunk_size: queries per score block (default :func:`default_chunk_size`); the result
            does not depend on it.

    Returns:
        ``indices`` ``(n_queries, k)`` int64 into ``doc_ids`` and ``scores`` ``(n_queries, k)``
        float32 (cosines, for unit vectors), best first. Where fewer than k documents remain, the missing
        slots hold index -1 and score ``-inf``.

    Raises:
        ValueError: ``k`` < 1, embeddings not 2-D or with NaN/inf, embeddings and ids of
            different lengths, duplicate doc ids (unless ``self_mask`` is ``False``), or a bad
            ``self_mask`` index.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    q, d = _checked_pair(query_emb, doc_emb, query_ids, doc_ids)
    self_idx = mask_index(self_mask, query_ids, doc_ids)
    cs = chunk_size or default_chunk_size(d.shape[0])
    return topk_from_blocks(_embedding_blocks(q, d, cs), q.shape[0], doc_ids, k, self_idx)


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

    Scores are the inner products of :func:`rank_of_gold`, pair by pair (float32 products,
    compared in float64).

    Args:
        query_emb, doc_emb, query_ids, doc_ids, qrels: as in :func:`rank_of_gold`; gold ids
            absent from ``doc_ids`` are ignored here.
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

    Raises:
        ValueError: embeddings not 2-D or with NaN/inf, duplicate doc ids (unless
            ``self_mask`` is ``False``), or a bad ``self_mask`` index.
    """
    q, d = _checked_pair(query_emb, doc_emb, query_ids, doc_ids)
    pos = {x: i for i, x in enumerate(doc_ids)}
    own = mask_index(self_mask, query_ids, doc_ids)
    positive = positive_qrels(qrels)

    def pairs(doc_lists):  # (query, document) index pairs in the corpus, the masked entry left out
        rows, cols = [], []
        for i, qid in enumerate(query_ids):
            for did in doc_lists.get(qid, ()):
                if did in pos:
                    rows.append(i)
                    cols.append(pos[did])
        r = np.asarray(rows, dtype=np.int64)
        c = np.asarray(cols, dtype=np.int64)
        keep = ~is_own_entry(r, c, own)
        return r[keep], c[keep]

    def seg_max(r_all, c_all):
        best = np.full(len(query_ids), -np.inf)
        for start in range(0, r_all.size, 8192):  # bounded memory: 8192 pairs at a time
            r, c = r_all[start:start + 8192], c_all[start:start + 8192]
            s = np.einsum("ij,ij->i", q[r], d[c])  # (n_pairs,)
            np.maximum.at(best, r, s.astype(np.float64))
        return best

    g, n = seg_max(*pairs(positive)), seg_max(*pairs(near_misses))
    out = (g > n).astype(np.float64)
    out[~np.isfinite(g) | ~np.isfinite(n)] = np.nan
    return out
