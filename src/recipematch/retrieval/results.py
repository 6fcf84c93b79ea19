"""Result assembly: ranks to R@k, per-query tables and the summary of an evaluation.

:func:`evaluate` encodes (through the embedding cache), ranks (:mod:`.dense`) and assembles;
:func:`evaluate_embeddings` starts from vectors; the BM25 baseline (:mod:`.bm25`) shares
:func:`_build_result`, so every model is scored by the same code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from recipematch.beir import corpus_sha256, doc_text, positive_qrels, qrels_sha256, queries_sha256
from recipematch.metrics import hits_at_k, recall_at_k, recall_by_group
from recipematch.retrieval.cache import EmbeddingCache, encode_cached
from recipematch.retrieval.dense import rank_of_gold
from recipematch.retrieval.encoders import Encoder
from recipematch.retrieval.ranking import NO_GOLD, RankDetails
from recipematch.retrieval.selfmask import OwnEntries, comparable_text, own_entries

__all__ = ["TIE_RULE", "TEXT_TWIN_RULE", "evaluate", "evaluate_embeddings"]

TIE_RULE = (
    "rank = number of non-masked documents scoring strictly higher than the best gold; "
    "documents tying with the best gold do not count against it (gold wins ties); "
    "top-k lists order equal scores by ascending document id"
)
TEXT_TWIN_RULE = (
    "self-masking never looks past the query's own id; a document with the query's "
    "text under another id (compared in NFC, zero-width characters removed, whitespace collapsed) is ranked "
    "like any document and counted per query in n_text_twins (queries with one: n_queries_with_text_twin)"
)


_norm_text = comparable_text  # the name the former single-module retrieval exported


def _text_twins(query_ids, query_texts, doc_ids, doc_texts) -> np.ndarray:
    by_text: dict[str, int] = {}
    for t in doc_texts:
        key = comparable_text(t)
        by_text[key] = by_text.get(key, 0) + 1
    own = {d: comparable_text(t) for d, t in zip(doc_ids, doc_texts)}
    out = np.zeros(len(query_ids), dtype=np.int64)
    for i, (qid, qt) in enumerate(zip(query_ids, query_texts)):
        key = comparable_text(qt)
        n = by_text.get(key, 0)
        if own.get(qid) == key:
            n -= 1
        out[i] = n
    return out


def _scalar_meta_columns(query_ids, query_meta, taken) -> dict[str, list]:
    if not query_meta:
        return {}
    keys: list[str] = []
    for qid in query_ids:
        for k, v in (query_meta.get(qid) or {}).items():
            if k not in keys and k not in taken and (v is None or isinstance(
                    v, (str, int, float, bool))):
                keys.append(k)
    cols = {}
    for k in keys:
        vals = [(query_meta.get(qid) or {}).get(k) for qid in query_ids]
        if all(v is None or isinstance(v, (str, int, float, bool)) for v in vals):
            kinds = {type(v) for v in vals if v is not None}
            too_big = any(isinstance(v, int) and not isinstance(v, bool) and not -2**63 <= v < 2**63 for v in vals)
            if len(kinds) > 1 or too_big:  # one type per column, or the per-query table cannot be written
                vals = [None if v is None else str(v) for v in vals]
            cols[k] = vals
    return cols


def _eval_query_ids(queries, qrels, query_ids):
    if query_ids is None:
        positive = positive_qrels(qrels)
        ids = [q for q in queries if q in positive]
    else:
        ids = list(query_ids)
        missing = [q for q in ids if q not in queries]
        if missing:
            raise ValueError(f"{len(missing)} query ids not in queries, e.g. {missing[:5]}")
    if not ids:
        raise ValueError("no query to evaluate (no query has a positive qrel)")
    if len(set(ids)) != len(ids):
        raise ValueError("query_ids contain duplicates")
    return ids


def _build_result(query_ids, query_texts, doc_ids, doc_texts, details: RankDetails, *, ks,
                  self_mask: OwnEntries, model, corpus, queries, qrels, query_meta, extra) -> tuple[
                      dict, pd.DataFrame]:
    ks = tuple(int(k) for k in ks)
    ranks = details.ranks
    twins = _text_twins(query_ids, query_texts, doc_ids, doc_texts)
    per_query = {"query_id": list(query_ids), "rank": ranks}
    for k in ks:
        per_query[f"hit@{k}"] = hits_at_k(ranks, k)
    per_query.update({
        "n_gold": details.n_gold,
        "n_ties_at_gold": details.n_ties_at_gold,
        "n_text_twins": twins,
        "self_masked": details.self_masked,
        "self_gold_removed": details.self_gold_removed,
    })
    per_query.update(_scalar_meta_columns(query_ids, query_meta, set(per_query)))
    df = pd.DataFrame(per_query)
    summary: dict = dict(recall_at_k(ranks, ks))
    summary.update({
        "n_queries": int(len(query_ids)),
        "n_docs": int(len(doc_ids)),
        "ks": list(ks),
        "self_mask": self_mask.rule != "none",
        "self_mask_rule": self_mask.rule,
        "model": model,
        "corpus_sha256": corpus_sha256(corpus),
        "queries_sha256": queries_sha256({q: queries[q] for q in query_ids}),
        "qrels_sha256": qrels_sha256(qrels),
        "tie_rule": TIE_RULE,
        "text_twin_rule": TEXT_TWIN_RULE,
        "n_queries_no_gold": int((ranks == NO_GOLD).sum()),
        "n_queries_with_ties_at_gold": int((details.n_ties_at_gold > 0).sum()),
        "n_queries_self_masked": int(details.self_masked.sum()),
        "n_queries_id_match_not_masked": int(self_mask.n_id_match_not_masked),
        "n_queries_self_gold_removed": int(details.self_gold_removed.sum()),
        "n_queries_with_text_twin": int((twins > 0).sum()),
    })
    if query_meta and any("domain" in (query_meta.get(q) or {}) for q in query_ids):
        domains = [str((query_meta.get(q) or {}).get("domain")) for q in query_ids]
        summary["per_domain"] = recall_by_group(ranks, domains, ks)
    summary.update(extra)
    return summary, df


def evaluate_embeddings(
    query_emb: np.ndarray,
    doc_emb: np.ndarray,
    corpus: Mapping[str, Mapping],
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    query_ids: Sequence[str],
    ks: Sequence[int] = (1, 5, 10),
    self_mask: bool | str = True,
    model: str = "",
    query_meta: Mapping[str, Mapping] | None = None,
    chunk_size: int | None = None,
    extra: Mapping | None = None,
) -> tuple[dict, pd.DataFrame]:
    """:func:`evaluate` from precomputed embeddings (rows aligned with ``query_ids`` and
    with ``list(corpus)``)."""
    doc_ids = list(corpus)
    own = own_entries(list(query_ids), [queries[q] for q in query_ids], doc_ids, [corpus[d] for d in doc_ids],
                      self_mask)
    details = rank_of_gold(query_emb, doc_emb, query_ids, doc_ids, qrels,
                           self_mask=own.index, chunk_size=chunk_size, return_details=True)
    return _build_result(list(query_ids), [queries[q] for q in query_ids], doc_ids,
                         [doc_text(corpus[d]) for d in doc_ids], details, ks=ks,
                         self_mask=own, model=model, corpus=corpus, queries=queries,
                         qrels=qrels, query_meta=query_meta, extra=dict(extra or {}))


def evaluate(
    encoder: Encoder,
    corpus: Mapping[str, Mapping],
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    ks: Sequence[int] = (1, 5, 10),
    self_mask: bool | str = True,
    cache_dir: str | os.PathLike | EmbeddingCache | None = None,
    query_meta: Mapping[str, Mapping] | None = None,
    query_ids: Sequence[str] | None = None,
    chunk_size: int | None = None,
) -> tuple[dict, pd.DataFrame]:
    """Encode, rank the whole corpus and score R@k (the paper, Section 3 and Appendix A).

    Args:
        encoder: an :class:`Encoder`.
        corpus: ``doc_id -> {"title", "text"}``; the embedded text is
            :func:`recipematch.beir.doc_text`.
        queries: ``query_id -> text``.
        qrels: ``query_id -> {doc_id: score}``; golds are scores > 0.
        ks: cut-offs.
        self_mask: which entry is each query's own and masked: a rule of
            :mod:`recipematch.retrieval.selfmask` (``"id_and_text"``, ``"id"``, ``"none"``);
            ``True`` is ``"id_and_text"``, ``False`` is ``"none"``. Written to the summary
            (``self_mask_rule``, ``n_queries_self_masked``, ``n_queries_id_match_not_masked``).
        cache_dir: embedding cache directory (or :class:`EmbeddingCache`); ``None`` = none.
        query_meta: ``query_id -> metadata``; scalar fields become per-query columns and a
            ``domain`` field adds ``summary["per_domain"]``.
        query_ids: queries to score, in order (default: every query with a positive qrel,
            in ``queries`` order). A listed query without a gold is a miss (rank -1).
        chunk_size: queries per score block.

    Returns:
        ``(summary, per_query)``. ``summary`` holds ``"R@k"`` in percent (0–100) for every k,
        ``n_queries``, ``n_docs``, ``self_mask`` (bool), ``self_mask_rule``, ``model`` (``encoder.cache_key``),
        ``corpus_sha256``, ``queries_sha256``, ``qrels_sha256``, the tie and twin rules and
        their counts, ``encoder`` settings when the encoder has them, and ``per_domain``.
        ``per_query`` has columns ``query_id, rank, hit@k..., n_gold, n_ties_at_gold,
        n_text_twins, self_masked, self_gold_removed`` plus scalar metadata.
    """
    ids = _eval_query_ids(queries, qrels, query_ids)
    doc_ids = list(corpus)
    doc_emb = encode_cached(encoder, [doc_text(corpus[d]) for d in doc_ids], cache_dir,
                            role="document")
    query_emb = encode_cached(encoder, [queries[q] for q in ids], cache_dir, role="query")
    extra = {}
    if hasattr(encoder, "settings"):
        extra["encoder"] = dict(encoder.settings)
    return evaluate_embeddings(query_emb, doc_emb, corpus, queries, qrels, query_ids=ids,
                               ks=ks, self_mask=self_mask, model=encoder.cache_key,
                               query_meta=query_meta, chunk_size=chunk_size, extra=extra)
