"""Retrieval metrics and scoring rules as pure functions over rank arrays and qrels.

A *rank* is the number of documents scoring strictly higher than the query's best gold
(paper Section 3 and Appendix A; :mod:`recipematch.retrieval`): 0 means the gold is first, and ``-1``
(:data:`recipematch.retrieval.NO_GOLD`) means the query had no gold to rank, which counts as
a miss at every cut-off. Recall values are **percent** (0–100) unless a name says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from recipematch.rules import UNKNOWN_LANG  # one definition, below the loaders and the metrics

__all__ = [
    "hits_at_k",
    "recall_at_k",
    "recall_by_group",
    "recall_by_slices",
    "near_miss_win_rate",
    "strict_crosslingual_qrels",
    "rule_qrels",
    "SCORING_RULES",
    "recall_key",
    "metric_key",
    "UNKNOWN_LANG",
]


def _ranks(ranks) -> np.ndarray:
    r = np.asarray(ranks)
    if r.ndim != 1:
        raise ValueError(f"ranks must be 1-D, got shape {r.shape}")
    if r.size and not np.issubdtype(r.dtype, np.integer):
        raise ValueError(f"ranks must be integers, got dtype {r.dtype}")
    if r.size and r.min() < -1:
        raise ValueError("ranks must be >= 0, or -1 for a query without a gold")
    return r.astype(np.int64, copy=False)


def hits_at_k(ranks, k: int) -> np.ndarray:
    """``(n_queries,)`` bool: ``0 <= rank < k`` (a query without a gold is never a hit)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    r = _ranks(ranks)
    return (r >= 0) & (r < k)


def recall_at_k(ranks, ks: Sequence[int] = (1, 5, 10)) -> dict[str, float]:
    """R@k in percent (0–100): the share of queries whose best gold has rank < k.

    Args:
        ranks: ``(n_queries,)`` integer ranks (``-1`` = no gold = miss).
        ks: cut-offs, each >= 1.

    Returns:
        ``{"R@1": .., "R@5": .., ...}``, floats in [0, 100].

    Raises:
        ValueError: empty ``ranks`` or an invalid rank or k.

    Example:
        >>> recall_at_k([0, 3, 12, -1], ks=(1, 5))
        {'R@1': 25.0, 'R@5': 50.0}
    """
    r = _ranks(ranks)
    if r.size == 0:
        raise ValueError("recall of zero queries is undefined")
    return {recall_key(k): float(100.0 * hits_at_k(r, int(k)).mean()) for k in ks}


def recall_by_group(ranks, groups: Sequence, ks: Sequence[int] = (1, 5, 10)
                    ) -> dict[str, dict[str, float]]:
    """R@k (percent) per group label (for example a query's domain), with ``n`` per group.

    Groups are returned in sorted order of their string labels.
    """
    r = _ranks(ranks)
    g = np.asarray([str(x) for x in groups], dtype=object)
    if g.shape != r.shape:
        raise ValueError("groups must align with ranks")
    out: dict[str, dict[str, float]] = {}
    for label in sorted(set(g.tolist())):
        m = g == label
        res: dict[str, float] = dict(recall_at_k(r[m], ks))
        res["n"] = int(m.sum())
        out[label] = res
    return out


def recall_by_slices(ranks, slices: Mapping[str, Sequence[bool]],
                     ks: Sequence[int] = (1, 5, 10)) -> dict[str, dict[str, float]]:
    """R@k (percent) on named boolean slices of the queries: the same-language set's
    primary / English / leaked / exact slices (paper Appendix A, Table 5), the cross-language
    set's language and mining-method slices (Table 4). An empty slice gives ``n = 0`` and
    NaN recalls."""
    r = _ranks(ranks)
    out: dict[str, dict[str, float]] = {}
    for name, mask in slices.items():
        m = np.asarray(mask, dtype=bool)
        if m.shape != r.shape:
            raise ValueError(f"slice {name!r} must align with ranks")
        res = (dict(recall_at_k(r[m], ks)) if m.any()
               else {recall_key(k): float("nan") for k in ks})
        res["n"] = int(m.sum())
        out[name] = res
    return out


def near_miss_win_rate(wins) -> dict[str, float]:
    """Hard tier: percent of queries whose gold beats every near-miss (paper Section 3:
    "11 of 14,993"). ``wins`` holds 1.0 / 0.0, and NaN for queries without near-misses,
    which are left out and counted.

    Returns:
        ``{"gold_beats_all_near_misses": percent, "n_wins": .., "n_scored": ..,
        "n_without_near_misses": ..}``.
    """
    w = np.asarray(wins, dtype=np.float64)
    scored = ~np.isnan(w)
    n = int(scored.sum())
    n_wins = int(w[scored].sum())
    return {
        "gold_beats_all_near_misses": float(100.0 * n_wins / n) if n else float("nan"),
        "n_wins": n_wins,
        "n_scored": n,
        "n_without_near_misses": int((~scored).sum()),
    }


def recall_key(k: int) -> str:
    """The name of recall at cut-off ``k`` in every result file and table: ``"R@<k>"``."""
    return f"R@{int(k)}"


def metric_key(evaluation: str, k: int, contrast: str | None = None) -> str:
    """The key of one arm's (or, with ``contrast``, one gap's) R@k on a declared evaluation, as
    the evaluate and stats stages write it and the report reads it:
    ``"<evaluation>.R@<k>"`` or ``"<contrast>.<evaluation>.R@<k>"``."""
    key = f"{evaluation}.{recall_key(k)}"
    return f"{contrast}.{key}" if contrast else key



#: The scoring rules a declared evaluation set can name: rule -> what it scores.
SCORING_RULES: dict[str, str] = {
    "plain": "every qrels gold with score > 0 counts",
    "crosslingual_strict": (
        "a query's golds are those whose tag in that query's metadata.gold_langs differs from "
        "its metadata.lang; a gold tagged 'unknown' counts as another language; tags as "
        "released; a query with no such gold is a miss (paper Section 3, Appendix A)"),
    "samelang": ("every qrels gold counts; R@k is also reported on the primary / english / "
                 "leaked / exact slices (paper Appendix A, Table 5)"),
}


def strict_crosslingual_qrels(
    qrels: Mapping[str, Mapping[str, int]],
    query_lang: Mapping[str, str],
    gold_tags: Mapping[str, Mapping[str, str]],
) -> dict[str, dict[str, int]]:
    """The strict cross-language golds of every query (paper Section 3 and Appendix A).

    A query's gold counts when its tag *as that query lists it* (``gold_tags[qid][gold]``,
    i.e. ``metadata.gold_langs`` aligned with ``metadata.gold_ids``) differs from the
    query's ``metadata.lang``. A gold tagged :data:`UNKNOWN_LANG` counts as another language.
    Tags are used as released (some are noisy); the same document may carry different tags
    for different queries, and each query's own list decides.

    Args:
        qrels: ``query_id -> {doc_id: score}``; only scores > 0 are golds.
        query_lang: ``query_id -> tag`` for every query in ``qrels``.
        gold_tags: ``query_id -> {gold_id: tag}`` for every gold of that query.

    Returns:
        ``query_id -> {doc_id: score}``; a query left without a gold maps to ``{}`` (scored
        as a miss, rank -1).

    Raises:
        ValueError: a query without a language tag, or a gold without a tag in its query's
            list (naming both ids).
    """
    out: dict[str, dict[str, int]] = {}
    for qid, per_q in qrels.items():
        ql = query_lang.get(qid)
        if not isinstance(ql, str) or not ql:
            raise ValueError(f"query {qid!r}: no language tag (metadata.lang)")
        tags = gold_tags.get(qid, {})
        kept: dict[str, int] = {}
        for did, s in per_q.items():
            if s <= 0:
                continue
            if did not in tags:
                raise ValueError(f"query {qid!r}: gold {did!r} has no tag in metadata.gold_ids/"
                                 "gold_langs")
            tag = tags[did]
            if tag == UNKNOWN_LANG or tag != ql:
                kept[did] = s
        out[qid] = kept
    return out


def rule_qrels(
    rule: str,
    qrels: Mapping[str, Mapping[str, int]],
    *,
    query_lang: Mapping[str, str] | None = None,
    gold_tags: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, dict[str, int]]:
    """The golds that ``rule`` (a key of :data:`SCORING_RULES`) scores.

    ``plain`` and ``samelang`` keep the golds with score > 0; ``crosslingual_strict``
    applies :func:`strict_crosslingual_qrels` and needs ``query_lang`` and ``gold_tags``.

    Raises:
        ValueError: an unknown rule, or the strict rule without its tags.
    """
    if rule not in SCORING_RULES:
        raise ValueError(f"unknown scoring rule {rule!r}; expected one of {sorted(SCORING_RULES)}")
    if rule == "crosslingual_strict":
        if query_lang is None or gold_tags is None:
            raise ValueError("the crosslingual_strict rule needs query_lang and gold_tags")
        return strict_crosslingual_qrels(qrels, query_lang, gold_tags)
    return {q: {d: s for d, s in per_q.items() if s > 0} for q, per_q in qrels.items()}
