"""Style tracking (paper Appendix C, "The recipe arm tracks the fingerprint"; Tables 14 and 15):
for sampled queries, the Spearman correlation between a model's cosine similarity to every corpus
document and the style probe's score of that document (:mod:`recipematch.style`; positive: the
model rates LLM-styled documents as more similar), averaged over queries; and where each query's
top-k documents sit in the corpus's style distribution, as a percentile (50 = no preference).

Conventions
-----------
* A document's style percentile is ``100 * (midrank - 0.5) / n_docs`` of its style score
  among all corpus documents (``scipy.stats.percentileofscore(kind="mean")``), so the
  corpus mean is exactly 50.
* Spearman's rho is the Pearson correlation of average ranks (``scipy.stats.spearmanr``);
  a query whose similarities are all equal has no rho (NaN, counted, left out of the mean).
* Top-k: highest cosine similarity first, ties broken by the lower corpus index.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.stats import rankdata

from recipematch.errors import RecipematchError

__all__ = ["StyleTracking", "sample_queries", "similarity_style_spearman", "style_percentiles", "style_tracking",
           "top_k_style_percentile"]

_QUERY_BLOCK = 64  # queries scored at once (per-query results are independent)


def style_percentiles(style_scores) -> np.ndarray:
    """Each document's percentile in the corpus style distribution.

    Args:
        style_scores: shape ``(n_docs,)``, finite.

    Returns:
        Shape ``(n_docs,)``, values in (0, 100): ``100 * (midrank - 0.5) / n_docs`` (ties share
        their mean rank; equals ``scipy.stats.percentileofscore(style_scores, s, kind="mean")``);
        the mean over the corpus is exactly 50.
    """
    t = _check_style(style_scores)
    return 100.0 * (rankdata(t) - 0.5) / t.size


def _check_style(style_scores) -> np.ndarray:
    t = np.asarray(style_scores, dtype=np.float64)
    if t.ndim != 1 or t.size == 0:
        raise RecipematchError(f"style tracking: style_scores must be 1-D and non-empty, got shape {t.shape}")
    if not np.all(np.isfinite(t)):
        raise RecipematchError("style tracking: style_scores must be finite")
    return t


def _check_mask(mask, shape) -> np.ndarray | None:
    if mask is None:
        return None
    m = np.asarray(mask, dtype=bool)
    if m.shape != shape:
        raise RecipematchError(f"style tracking: mask must have shape {shape}, got {m.shape}")
    return m


def _check_inputs(similarities, style_scores, mask):
    """``(style (n_docs,), similarities (n_queries, n_docs) float64, mask or None)``, checked."""
    t = _check_style(style_scores)
    s = np.asarray(similarities, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] != t.size:
        raise RecipematchError(f"style tracking: similarities must be (n_queries, {t.size}), got {s.shape}")
    if not np.all(np.isfinite(s)):
        raise RecipematchError("style tracking: similarities must be finite")
    return t, s, _check_mask(mask, s.shape)


def similarity_style_spearman(similarities, style_scores, *, mask=None) -> np.ndarray:
    """Per-query Spearman correlation between similarity and style over the corpus (Table 14).

    Args:
        similarities: shape ``(n_queries, n_docs)``, finite (a model's query–document scores).
        style_scores: shape ``(n_docs,)``, finite (the detector's decision values).
        mask: optional bool ``(n_queries, n_docs)``; True leaves that document out of that
            query's correlation (e.g. the query's own corpus entry).

    Returns:
        Shape ``(n_queries,)``, values in [-1, 1]; NaN for a query whose (unmasked)
        similarities or style scores are all equal or fewer than two.

    Raises:
        RecipematchError: bad shapes or non-finite values.
    """
    t, s, m = _check_inputs(similarities, style_scores, mask)
    if m is None or not m.any():
        # no document left out: the style ranks are shared by every query
        a = rankdata(s, axis=1)
        a -= a.mean(axis=1, keepdims=True)
        b = rankdata(t)
        b -= b.mean()
        num = a @ b
        den = np.sqrt(np.einsum("ij,ij->i", a, a) * float(b @ b))
    else:
        rs = rankdata(np.where(m, np.nan, s), axis=1, nan_policy="omit")
        rt = rankdata(np.where(m, np.nan, np.broadcast_to(t, s.shape)), axis=1, nan_policy="omit")
        a = np.nan_to_num(rs - np.nanmean(rs, axis=1, keepdims=True))  # left-out entries -> 0
        b = np.nan_to_num(rt - np.nanmean(rt, axis=1, keepdims=True))
        num = np.einsum("ij,ij->i", a, b)
        den = np.sqrt(np.einsum("ij,ij->i", a, a) * np.einsum("ij,ij->i", b, b))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return np.clip(rho, -1.0, 1.0)


def top_k_style_percentile(similarities, style_scores, *, k: int, mask=None) -> np.ndarray:
    """Mean style percentile of each query's top-``k`` documents (Tables 14–15; 50 = no preference).

    Args:
        similarities: shape ``(n_queries, n_docs)``, finite.
        style_scores: shape ``(n_docs,)``, finite; percentiles are taken over all ``n_docs``
            (:func:`style_percentiles`), masked documents included.
        k: documents per query, 1 <= k <= the unmasked documents of every query.
        mask: optional bool ``(n_queries, n_docs)``; True = never retrieved for that query.

    Returns:
        Shape ``(n_queries,)``, values in (0, 100). Ranking: highest similarity first, ties
        by lower document index.

    Raises:
        RecipematchError: bad shapes, non-finite values, or ``k`` out of range.
    """
    t, s, m = _check_inputs(similarities, style_scores, mask)
    available = t.size - (0 if m is None else int(m.sum(axis=1).max(initial=0)))
    if not 1 <= int(k) <= available:
        raise RecipematchError(f"style tracking: top_k must be in [1, {available}] (unmasked documents per query), got {k}")
    if m is not None:
        s = np.where(m, -np.inf, s)
    return style_percentiles(t)[_top_k_indices(s, int(k))].mean(axis=1)


def _top_k_indices(s: np.ndarray, k: int) -> np.ndarray:
    """Row-wise indices of the ``k`` largest values, ties broken by the lower index: the same
    set as ``np.argsort(-s, kind="stable")[:, :k]``, found in linear time per row."""
    n = s.shape[1]
    kth = np.partition(s, n - k, axis=1)[:, n - k][:, None]  # the k-th largest value per row
    above = s > kth
    tied = s == kth
    need = k - above.sum(axis=1, keepdims=True)  # >= 1: how many tied entries to take
    take = above | (tied & (np.cumsum(tied, axis=1) <= need))
    return np.nonzero(take)[1].reshape(s.shape[0], k)


def sample_queries(n_total: int, n_sample: int, *, seed: int) -> np.ndarray:
    """Indices of the queries to score, sorted: all ``n_total`` when ``n_sample >= n_total``,
    otherwise ``np.random.default_rng(seed).choice(n_total, n_sample, replace=False)``.

    Raises:
        RecipematchError: ``n_total < 1`` or ``n_sample < 1``.
    """
    if int(n_total) < 1 or int(n_sample) < 1:
        raise RecipematchError(f"style tracking: need n_total >= 1 and n_queries >= 1, got {n_total}, {n_sample}")
    if int(n_sample) >= int(n_total):
        return np.arange(int(n_total), dtype=np.int64)
    idx = np.random.default_rng(seed).choice(int(n_total), int(n_sample), replace=False)
    return np.sort(idx).astype(np.int64)


@dataclass(frozen=True)
class StyleTracking:
    """One model's row of Tables 14/15.

    Attributes:
        rho_mean: mean over scored queries of the per-query Spearman rho, in [-1, 1].
        top_k_percentile_mean: mean over queries of the top-k style percentile, in (0, 100).
        n_queries: queries scored; n_queries_undefined: those with no rho (left out of
            ``rho_mean``); n_docs: corpus size; top_k, seed: the parameters.
        query_indices: the sampled query rows; rho_per_query, top_k_percentile_per_query:
            per-query values in that order (for paired comparisons between models).
    """

    rho_mean: float
    top_k_percentile_mean: float
    n_queries: int
    n_queries_undefined: int
    n_docs: int
    top_k: int
    seed: int
    query_indices: tuple[int, ...] = field(repr=False)
    rho_per_query: tuple[float, ...] = field(repr=False)
    top_k_percentile_per_query: tuple[float, ...] = field(repr=False)

    def to_metrics(self, prefix: str = "") -> dict:
        """Flat dict of the scalars (the per-query tuples are left out)."""
        return {f"{prefix}rho_mean": float(self.rho_mean),
                f"{prefix}top_k_percentile_mean": float(self.top_k_percentile_mean),
                f"{prefix}n_queries": int(self.n_queries), f"{prefix}n_queries_undefined": int(self.n_queries_undefined),
                f"{prefix}n_docs": int(self.n_docs), f"{prefix}top_k": int(self.top_k), f"{prefix}seed": int(self.seed)}


def _unit_rows(x, what: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] == 0:
        raise RecipematchError(f"style tracking: {what} must be 2-D (n, dim) and non-empty, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise RecipematchError(f"style tracking: {what} must be finite")
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise RecipematchError(f"style tracking: {what} row {int(np.flatnonzero(norms[:, 0] == 0)[0])} is a zero vector")
    return a / norms


def style_tracking(query_embeddings, corpus_embeddings, style_scores, *, n_queries: int, seed: int,
                   top_k: int, exclude_doc=None) -> StyleTracking:
    """Does a model rate LLM-styled documents as more similar? (Tables 14 and 15.)

    Similarity is cosine (both embedding sets are L2-normalised here, in float64). For
    ``n_queries`` queries sampled with :func:`sample_queries`, the per-query Spearman rho
    between similarity and style over the corpus (:func:`similarity_style_spearman`) and the
    top-``top_k`` style percentile (:func:`top_k_style_percentile`).

    Args:
        query_embeddings: shape ``(n_q, dim)``, finite, no zero row.
        corpus_embeddings: shape ``(n_docs, dim)``, finite, no zero row.
        style_scores: shape ``(n_docs,)``: the detector's decision value per corpus document.
        n_queries: queries to sample (the paper: 2,000); all when ``>= n_q``.
        seed: sampling seed (the paper: 42).
        top_k: retrieved documents per query (the paper: 10).
        exclude_doc: optional int array ``(n_q,)``: corpus row of each query's own entry,
            left out of its correlation and its top-k; -1 for none.

    Returns:
        :class:`StyleTracking`.

    Raises:
        RecipematchError: bad shapes, dims that differ, non-finite values, zero vectors, an
            ``exclude_doc`` index out of range, or ``top_k`` out of range.
    """
    q = _unit_rows(query_embeddings, "query_embeddings")
    c = _unit_rows(corpus_embeddings, "corpus_embeddings")
    t = _check_style(style_scores)
    if q.shape[1] != c.shape[1]:
        raise RecipematchError(f"style tracking: query dim {q.shape[1]} != corpus dim {c.shape[1]}")
    if t.size != c.shape[0]:
        raise RecipematchError(f"style tracking: {t.size} style scores for {c.shape[0]} corpus documents")
    excl = None
    if exclude_doc is not None:
        excl = np.asarray(exclude_doc)
        if excl.shape != (q.shape[0],) or not np.issubdtype(excl.dtype, np.integer):
            raise RecipematchError(f"style tracking: exclude_doc must be an int array of shape ({q.shape[0]},)")
        if np.any((excl < -1) | (excl >= c.shape[0])):
            raise RecipematchError(f"style tracking: exclude_doc values must be -1 or in [0, {c.shape[0]})")
    # imported here: the retrieval package loads torch, which the style probe (this module's
    # other half, run by the audit) does not need
    from recipematch.retrieval.ranking import own_entry_cells  # lazy: recipematch.retrieval.ranking pulls in pandas, torch

    idx = sample_queries(q.shape[0], n_queries, seed=seed)
    rho = np.empty(idx.size, dtype=np.float64)
    pct = np.empty(idx.size, dtype=np.float64)
    for start in range(0, idx.size, _QUERY_BLOCK):
        rows = idx[start:start + _QUERY_BLOCK]
        sims = q[rows] @ c.T
        mask = None
        if excl is not None:
            own_rows, own_cols = own_entry_cells(excl[rows])  # the ranking kernel's own-entry cells
            if own_rows.size:
                mask = np.zeros(sims.shape, dtype=bool)
                mask[own_rows, own_cols] = True
        rho[start:start + rows.size] = similarity_style_spearman(sims, t, mask=mask)
        pct[start:start + rows.size] = top_k_style_percentile(sims, t, k=top_k, mask=mask)
    defined = np.isfinite(rho)
    rho_mean = float(rho[defined].mean()) if defined.any() else float("nan")
    return StyleTracking(rho_mean=rho_mean, top_k_percentile_mean=float(pct.mean()), n_queries=int(idx.size),
                         n_queries_undefined=int((~defined).sum()), n_docs=int(c.shape[0]), top_k=int(top_k),
                         seed=int(seed), query_indices=tuple(int(i) for i in idx),
                         rho_per_query=tuple(float(r) for r in rho),
                         top_k_percentile_per_query=tuple(float(p) for p in pct))
