"""The one retrieval function: encode, search the whole corpus exactly, rank the gold.

Every evaluation of the project goes through this package (the paper's evaluation: Section
3 and Appendix A). It is split by job:

- :mod:`.encoders`: the :class:`Encoder` protocol, :class:`SentenceTransformerEncoder`,
  :class:`MemoisedEncoder`;
- :mod:`.cache`: the on-disk embedding cache (:class:`EmbeddingCache`, :func:`encode_cached`);
- :mod:`.dense`: exact dense ranking (:func:`rank_of_gold`, :func:`search_topk`,
  :func:`gold_beats_near_misses`);
- :mod:`.ranking`: the ranking kernel every path uses (:class:`RankDetails`, :data:`NO_GOLD`,
  the own-entry mask :func:`.ranking.mask_self`, ranks and top-k from score blocks);
- :mod:`.results`: R@k, per-query tables and summaries (:func:`evaluate`,
  :func:`evaluate_embeddings`);
- :mod:`.bm25`: the BM25 baseline (:func:`evaluate_bm25`, :func:`bm25_ranks`);
- :mod:`.selfmask`: which corpus entry is a query's own (:func:`own_entries`, the rules).

Every name above is importable from ``recipematch.retrieval`` itself; the kernel's helpers
from :mod:`.ranking`.

Rules, identical in every path (fresh encode, cached embeddings, any ``chunk_size``, BM25):

- **Similarity** is the inner product of L2-normalised float32 vectors (cosine). Scores come
  from matrix products of exactly 64 queries against all documents (the last block
  zero-padded), gathered into blocks of ``chunk_size`` queries, so memory is bounded by
  ``chunk_size x n_docs`` floats, never the full score matrix. Because every product has the
  same shape, a query's scores are bit-identical whatever ``chunk_size`` is and whichever
  queries are scored with it (BLAS picks its kernel, hence its summation order, by shape;
  measured, and tested).
- **Rank** of a query (the paper's rule, Section 3) is the number of ranked documents that
  score *strictly higher* than the query's best-scoring gold; 0 means the gold is first. A
  hit at k is ``0 <= rank < k``.
- **Ties** go to the gold: a document that scores exactly the same as the best gold does not
  push it down. The tie rule therefore never depends on index order; the number of such
  documents is reported per query (``n_ties_at_gold``) so ties are never silent.
  :func:`search_topk` orders equal scores by document id (ascending string order), again
  independent of the corpus's row order.
- **Self-masking** (the paper, Section 3: a query's own corpus entry is masked) is an
  explicit argument, written into every result: a rule of :mod:`.selfmask`. The default,
  ``id_and_text``, removes the corpus entry whose id equals the query id *and* whose text is
  the query's (whitespace-normalised) from that query's ranking before ranks or top-k are
  computed; an id match with other text (ordinary BEIR folders number queries and documents
  separately) stays in the ranking and is counted (``n_queries_id_match_not_masked``).
  ``id`` masks by id alone, ``none`` masks nothing. If a masked entry is also listed as one
  of the query's golds, it is dropped from the gold set and counted
  (``self_gold_removed``; the peer only warned); a query whose *only* gold it was has nothing
  left to find and the evaluation is refused (``RecipematchError`` naming such queries). A document with the query's exact text
  under another id (a *text twin*, e.g. an exact reprint) is never masked; if it is a gold
  it is a hit, if not it competes. Their number is reported per query (``n_text_twins``, texts
  compared after whitespace normalisation) so analyses can slice them out.
- **No gold**: a query whose gold set is empty (after self-masking or a restriction such as
  the strict cross-language rule) gets rank :data:`NO_GOLD` (-1) and counts as a miss at
  every k; the count is reported (``n_queries_no_gold``). A qrels gold id that is not in the
  corpus at all is a data error and raises ``ValueError``.
"""

from __future__ import annotations

# the public names below were importable from the single-module ``recipematch.retrieval`` and stay so
from recipematch.beir import corpus_sha256, doc_text, positive_qrels, qrels_sha256, queries_sha256
from recipematch.metrics import hits_at_k, recall_at_k, recall_by_group
from recipematch.retrieval.bm25 import BM25_TOKEN_PATTERN, bm25_ranks, evaluate_bm25
from recipematch.retrieval.cache import EmbeddingCache, encode_cached, texts_sha256
from recipematch.retrieval.dense import default_chunk_size, gold_beats_near_misses, rank_of_gold, search_topk
from recipematch.retrieval.encoders import Encoder, MemoisedEncoder, SentenceTransformerEncoder
from recipematch.retrieval.ranking import NO_GOLD, RankDetails
from recipematch.retrieval.selfmask import DEFAULT_SELF_MASK, SELF_MASK_RULES, OwnEntries, own_entries
from recipematch.retrieval.results import TEXT_TWIN_RULE, TIE_RULE, evaluate, evaluate_embeddings

__all__ = [
    "NO_GOLD",
    "TIE_RULE",
    "TEXT_TWIN_RULE",
    "Encoder",
    "SentenceTransformerEncoder",
    "MemoisedEncoder",
    "EmbeddingCache",
    "encode_cached",
    "texts_sha256",
    "RankDetails",
    "rank_of_gold",
    "search_topk",
    "gold_beats_near_misses",
    "evaluate",
    "evaluate_embeddings",
    "evaluate_bm25",
    "bm25_ranks",
    "default_chunk_size",
    "BM25_TOKEN_PATTERN",
    "SELF_MASK_RULES",
    "DEFAULT_SELF_MASK",
    "OwnEntries",
    "own_entries",
]

# re-exported for callers of the former single module (not part of the documented API)
_COMPAT = (corpus_sha256, doc_text, positive_qrels, qrels_sha256, queries_sha256, hits_at_k, recall_at_k,
           recall_by_group)
