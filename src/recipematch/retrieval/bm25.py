"""The BM25 baseline (bm25s, Lucene variant), ranked and scored by the dense path's rules."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from recipematch.beir import doc_text
from recipematch.errors import RecipematchError
from recipematch.retrieval.dense import default_chunk_size
from recipematch.retrieval.ranking import RankDetails, gold_index, mask_index, rank_details, topk_from_blocks
from recipematch.retrieval.results import _build_result, _eval_query_ids
from recipematch.retrieval.selfmask import own_entries

__all__ = ["BM25_TOKEN_PATTERN", "bm25_ranks", "bm25_score_matrix", "bm25_settings", "bm25_topk", "evaluate_bm25"]


BM25_TOKEN_PATTERN = r"(?u)\b\w+\b"


def _bm25_index(doc_texts, k1, b, stopwords, token_pattern=BM25_TOKEN_PATTERN):
    import bm25s

    tokens = bm25s.tokenize(list(doc_texts), stopwords=stopwords, show_progress=False,
                            token_pattern=token_pattern)
    retriever = bm25s.BM25(k1=k1, b=b)
    retriever.index(tokens, show_progress=False)
    return retriever, tokens.vocab


def _bm25_blocks(retriever, vocab, query_texts, n_docs, chunk_size, stopwords, token_pattern=BM25_TOKEN_PATTERN):
    import bm25s

    q_tokens = bm25s.tokenize(list(query_texts), stopwords=stopwords, return_ids=False,
                              show_progress=False, token_pattern=token_pattern)
    for start in range(0, len(q_tokens), chunk_size):
        stop = min(start + chunk_size, len(q_tokens))
        block = np.zeros((stop - start, n_docs), dtype=np.float32)
        for r, toks in enumerate(q_tokens[start:stop]):
            known = [t for t in toks if t in vocab]
            if known:
                block[r] = retriever.get_scores(known)
        yield start, stop, torch.from_numpy(block)


def bm25_settings(k1: float, b: float, stopwords: str | None = None) -> dict:
    """The BM25 baseline's settings as results record them (and, as sorted JSON, its model name)."""
    return {"model": "bm25s", "k1": k1, "b": b, "method": "lucene", "stopwords": stopwords,
            "tokenizer": f"bm25s.tokenize (lower, {BM25_TOKEN_PATTERN})"}


def _check_not_blank(corpus: Mapping[str, Mapping]) -> None:
    if not any(doc_text(d).strip() for d in corpus.values()):
        raise RecipematchError("BM25: every corpus document is blank; there is nothing to index")


def score_blocks(corpus, queries, query_ids, k1, b, stopwords, chunk_size, *, token_pattern=BM25_TOKEN_PATTERN):
    """BM25 score blocks of ``query_ids`` over ``corpus`` (:func:`_bm25_blocks`), one index;
    ``token_pattern`` is applied after lower-casing (the pooling route's ``[a-z0-9]+``)."""
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 0):
        raise ValueError(f"chunk_size must be a positive integer (0 or None: the default), got {chunk_size!r}")
    doc_ids = list(corpus)
    retriever, vocab = _bm25_index([doc_text(corpus[d]) for d in doc_ids], k1, b, stopwords, token_pattern)
    cs = chunk_size or min(256, default_chunk_size(len(doc_ids)))
    return _bm25_blocks(retriever, vocab, [queries[q] for q in query_ids], len(doc_ids), cs, stopwords,
                        token_pattern)


def bm25_ranks(
    corpus: Mapping[str, Mapping],
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    query_ids: Sequence[str],
    self_mask: bool | np.ndarray,
    k1: float = 1.5,
    b: float = 0.75,
    stopwords: str | None = None,
    chunk_size: int | None = None,
) -> RankDetails:
    """BM25 ranks (bm25s, Lucene variant: the paper's lexical baseline, Table 1 and
    Appendix A) under the same rules as :func:`recipematch.retrieval.rank_of_gold` (the
    kernel, :mod:`recipematch.retrieval.ranking`: rank = non-masked documents scoring strictly
    above the best gold, the gold wins ties).

    Tokenisation: bm25s's tokenizer, lower-cased, with the pattern ``\\b\\w+\\b`` (single
    characters kept: in math problems they are the variables) and no stop-word list by
    default (the corpora are multilingual, and ``a`` is a variable as often as an article);
    pass ``stopwords="en"`` for bm25s's English list. A query with no indexed token scores 0
    everywhere, so its gold ties with every document and gets rank 0 by the tie rule; such
    queries show ``n_ties_at_gold = n_docs - n_gold`` and are easy to filter.

    Args:
        query_ids: the ranked queries (keys of ``queries``), in output order.
        self_mask: as in :func:`recipematch.retrieval.rank_of_gold` (``True``, ``False`` or an
            ``(n_queries,)`` int64 own-entry index, -1 = none).

    Returns:
        :class:`recipematch.retrieval.ranking.RankDetails`, arrays of shape ``(n_queries,)``;
        ranks in ``[0, n_docs)`` or :data:`recipematch.retrieval.ranking.NO_GOLD`.

    Raises:
        ValueError: a bad ``self_mask`` index, or a gold id not in the corpus;
            :class:`recipematch.errors.RecipematchError` (a ``ValueError``) when a
            query's only gold is its own masked entry.
    """
    doc_ids = list(corpus)
    self_idx = mask_index(self_mask, query_ids, doc_ids)
    gold = gold_index(query_ids, doc_ids, qrels, self_idx)
    blocks = score_blocks(corpus, queries, query_ids, k1, b, stopwords, chunk_size)
    return rank_details(blocks, len(query_ids), gold, self_idx)


def bm25_score_matrix(
    corpus: Mapping[str, Mapping],
    queries: Mapping[str, str],
    query_ids: Sequence[str],
    *,
    k1: float = 1.5,
    b: float = 0.75,
    stopwords: str | None = None,
) -> np.ndarray:
    """Every BM25 score of ``query_ids`` over ``corpus`` (one index over the whole corpus, the
    tokenisation of :func:`bm25_ranks`), for reranking a query's candidates
    (:func:`recipematch.graded.rerank_run`).

    Returns:
        ``(n_queries, n_docs)`` float32, columns in ``list(corpus)`` order; no mask.

    Raises:
        RecipematchError: every corpus document is blank.
    """
    _check_not_blank(corpus)
    out = np.zeros((len(query_ids), len(corpus)), dtype=np.float32)
    for start, stop, block in score_blocks(corpus, queries, query_ids, k1, b, stopwords, None):
        out[start:stop] = block.numpy()
    return out


def bm25_topk(
    corpus: Mapping[str, Mapping],
    queries: Mapping[str, str],
    k: int,
    *,
    query_ids: Sequence[str],
    self_mask: bool | np.ndarray,
    k1: float = 1.5,
    b: float = 0.75,
    stopwords: str | None = None,
    chunk_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """BM25's top ``k`` documents per query, masked and ordered as
    :func:`recipematch.retrieval.search_topk` orders the dense ones (score descending, then
    ascending document id); the tokenisation of :func:`bm25_ranks`.

    Returns:
        ``indices`` ``(n_queries, k)`` int64 into ``list(corpus)`` (-1: an empty slot) and
        ``scores`` ``(n_queries, k)`` float32.

    Raises:
        ValueError: ``k`` < 1, or a bad mask.
        RecipematchError: every corpus document is blank.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    _check_not_blank(corpus)
    doc_ids = list(corpus)
    self_idx = mask_index(self_mask, query_ids, doc_ids)
    blocks = score_blocks(corpus, queries, query_ids, k1, b, stopwords, chunk_size)
    return topk_from_blocks(blocks, len(query_ids), doc_ids, k, self_idx)


def evaluate_bm25(
    corpus: Mapping[str, Mapping],
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    ks: Sequence[int] = (1, 5, 10),
    self_mask: bool | str = True,
    query_meta: Mapping[str, Mapping] | None = None,
    query_ids: Sequence[str] | None = None,
    k1: float = 1.5,
    b: float = 0.75,
    stopwords: str | None = None,
) -> tuple[dict, pd.DataFrame]:
    """The BM25 baseline through the same metric code as :func:`evaluate` (``self_mask``: a
    rule of :mod:`recipematch.retrieval.selfmask`, ``True`` = its default)."""
    ids = _eval_query_ids(queries, qrels, query_ids)
    _check_not_blank(corpus)
    doc_ids = list(corpus)
    own = own_entries(ids, [queries[q] for q in ids], doc_ids, [corpus[d] for d in doc_ids], self_mask)
    details = bm25_ranks(corpus, queries, qrels, query_ids=ids, self_mask=own.index, k1=k1,
                         b=b, stopwords=stopwords)
    settings = bm25_settings(k1, b, stopwords)
    return _build_result(ids, [queries[q] for q in ids], doc_ids,
                         [doc_text(corpus[d]) for d in doc_ids], details, ks=ks,
                         self_mask=own,
                         model=json.dumps(settings, sort_keys=True), corpus=corpus,
                         queries=queries, qrels=qrels, query_meta=query_meta,
                         extra={"encoder": settings})
