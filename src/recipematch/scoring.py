"""Score a model (or BM25) on an evaluation set under its scoring rule.

The evaluation side of :mod:`recipematch.benchmarks_data`: a loader checks a folder and
names its rule (``plain``, ``crosslingual_strict``, ``samelang``;
:data:`recipematch.metrics.SCORING_RULES`); :func:`score` applies the rule to the qrels
(:func:`recipematch.metrics.rule_qrels`), ranks every query over the whole corpus with its
own entry masked (:mod:`recipematch.retrieval`; paper Section 3 and Appendix A) and returns
R@k in percent, per-slice R@k and the per-query ranks.

:func:`score` is the one public scorer of R@k: an encoder or :data:`BM25` (with its
``bm25_k1`` and ``bm25_b``) is its ``model`` argument, and the evaluate stages,
``recipematch evaluate`` and the survey call it. :func:`score_folder` is only
:func:`recipematch.benchmarks_data.load_set` then :func:`score`; everything that can be wrong
with the data fails in the loader, before a model is loaded. Graded measures (nDCG, AP) over
top-k runs are :func:`recipematch.graded.score_graded`'s.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from recipematch.beir import doc_text
from recipematch.benchmarks_data import BenchmarkSet, load_set
from recipematch.metrics import near_miss_win_rate, recall_by_slices, rule_qrels
from recipematch.retrieval import (
    NO_GOLD,
    EmbeddingCache,
    Encoder,
    encode_cached,
    evaluate_bm25,
    evaluate_embeddings,
    gold_beats_near_misses,
)
from recipematch.retrieval.selfmask import own_entries

__all__ = ["BM25", "scored_qrels", "score", "score_folder"]

#: Pass as ``model`` to score the lexical baseline (bm25s) instead of an encoder.
BM25 = "bm25"


def scored_qrels(bset: BenchmarkSet) -> dict[str, dict[str, int]]:
    """The golds ``bset.rule`` scores for each of ``bset.query_ids`` (``{}`` = a miss)."""
    qrels = {q: bset.qrels.get(q, {}) for q in bset.query_ids}
    return rule_qrels(bset.rule, qrels, query_lang=bset.query_lang or None,
                      gold_tags=bset.gold_tags or None)


def score(
    bset: BenchmarkSet,
    model: Encoder | str,
    *,
    ks: Sequence[int],
    self_mask: bool | str | None = None,
    cache_dir: str | os.PathLike | EmbeddingCache | None = None,
    bm25_k1: float | None = None,
    bm25_b: float | None = None,
    chunk_size: int | None = None,
) -> tuple[dict, pd.DataFrame]:
    """Score ``model`` on ``bset`` under ``bset.rule``.

    Args:
        bset: a checked set (:func:`recipematch.benchmarks_data.load_set` or a loader).
        model: an :class:`recipematch.retrieval.Encoder`, or :data:`BM25`.
        ks: cut-offs, each >= 1 (the paper reports 1, 5, 10).
        self_mask: which corpus entry is each query's own and masked (the paper always
            masks it): ``None`` (default) the set's declared rule (``bset.self_mask``), or a
            rule of :mod:`recipematch.retrieval.selfmask` (``True`` = ``"id_and_text"``,
            ``False`` = ``"none"``). The summary says what was masked
            (``self_mask_rule``, ``n_queries_self_masked``, ``n_queries_id_match_not_masked``).
        cache_dir: embedding cache (encoders only).
        bm25_k1, bm25_b: BM25 parameters; required when ``model`` is :data:`BM25` (the
            paper: 1.5 and 0.75).
        chunk_size: queries per score block (memory bound only; results do not depend on it).

    Returns:
        ``(summary, per_query)``. ``summary`` has ``"R@k"`` in percent (0–100) for each k,
        ``n_queries``, ``n_docs``, ``n_queries_no_gold`` (misses by rule, e.g. a query
        with no other-language gold), ``benchmark``, ``rule``, ``loader_counts``,
        ``slices`` (``{name: {"R@k": .., "n": ..}}``) when the set has slices, ``ranks``
        (``query_id -> rank``, -1 = no gold) and ``near_miss`` for sets with near-misses
        scored by an encoder. ``per_query`` has one row per scored query, in order:
        ``query_id, rank, hit@k...`` plus ``cluster`` and ``slice_<name>`` columns.

    Raises:
        ValueError: BM25 without ``bm25_k1``/``bm25_b``, or a rule that cannot be applied.
    """
    qrels = scored_qrels(bset)
    ids = list(bset.query_ids)
    if self_mask is None:
        self_mask = bset.self_mask
    extra = {"benchmark": bset.name, "rule": bset.rule, "loader_counts": dict(bset.counts)}
    if isinstance(model, str):
        if model != BM25:
            raise ValueError(f"model must be an Encoder or {BM25!r}, got {model!r}")
        if bm25_k1 is None or bm25_b is None:
            raise ValueError("BM25 needs bm25_k1 and bm25_b")
        summary, per_query = evaluate_bm25(bset.corpus, bset.queries, qrels, ks=ks,
                                           self_mask=self_mask, query_meta=bset.query_meta,
                                           query_ids=ids, k1=bm25_k1, b=bm25_b)
        summary.update(extra)
        wins = None
    else:
        doc_ids = list(bset.corpus)
        doc_emb = encode_cached(model, [doc_text(bset.corpus[d]) for d in doc_ids], cache_dir,
                                role="document")
        query_emb = encode_cached(model, [bset.queries[q] for q in ids], cache_dir,
                                  role="query")
        if hasattr(model, "settings"):
            extra["encoder"] = dict(model.settings)
        summary, per_query = evaluate_embeddings(
            query_emb, doc_emb, bset.corpus, bset.queries, qrels, query_ids=ids, ks=ks,
            self_mask=self_mask, model=model.cache_key, query_meta=bset.query_meta,
            chunk_size=chunk_size, extra=extra)
        wins = None
        if bset.near_misses:  # the entry masked in the ranking is neither a gold nor a near-miss here
            own = own_entries(ids, [bset.queries[q] for q in ids], doc_ids, [bset.corpus[d] for d in doc_ids],
                              self_mask)
            wins = gold_beats_near_misses(query_emb, doc_emb, ids, doc_ids, qrels, bset.near_misses,
                                          self_mask=own.index)
    ranks = per_query["rank"].to_numpy()
    summary["n_queries_no_gold"] = int((ranks == NO_GOLD).sum())
    summary["ranks"] = {q: int(r) for q, r in zip(ids, ranks)}
    if bset.slices:
        summary["slices"] = recall_by_slices(ranks, bset.slices, ks)
        for name, mask in bset.slices.items():
            per_query[f"slice_{name}"] = np.asarray(mask, dtype=bool)
    if bset.clusters is not None:
        per_query["cluster"] = [str(c) for c in bset.clusters]
    if wins is not None:
        per_query["gold_beats_near_misses"] = wins
        summary["near_miss"] = near_miss_win_rate(wins)
    return summary, per_query


def score_folder(folder: str | os.PathLike, rule: str, model: Encoder | str, *,
                 ks: Sequence[int], split: str = "test", name: str | None = None,
                 **kwargs) -> tuple[dict, pd.DataFrame]:
    """:func:`score` on a BEIR folder loaded and checked for ``rule``
    (:func:`recipematch.benchmarks_data.load_set`). Keyword arguments go to :func:`score`.

    Raises:
        RecipematchError: any check of the folder for its rule.
    """
    return score(load_set(Path(folder), rule, split=split, name=name), model, ks=ks, **kwargs)
