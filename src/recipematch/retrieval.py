"""The one retrieval function: encode, search the whole corpus exactly, rank the gold.

Every evaluation of the project goes through this module (SPEC §7, Appendix A of the
paper; STYLE "one retrieval function").

Rules, identical in every path (fresh encode, cached embeddings, any ``chunk_size``, BM25):

- **Similarity** is the inner product of L2-normalised float32 vectors (cosine). Scores come
  from matrix products of exactly 64 queries against all documents (the last block
  zero-padded), gathered into blocks of ``chunk_size`` queries, so memory is bounded by
  ``chunk_size x n_docs`` floats, never the full score matrix. Because every product has the
  same shape, a query's scores are bit-identical whatever ``chunk_size`` is and whichever
  queries are scored with it (BLAS picks its kernel, hence its summation order, by shape;
  measured, and tested).
- **Rank** of a query (SPEC §7, the peer's rule) is the number of ranked documents that score
  *strictly higher* than the query's best-scoring gold; 0 means the gold is first. A hit at
  k is ``0 <= rank < k``.
- **Ties** go to the gold: a document that scores exactly the same as the best gold does not
  push it down. The tie rule therefore never depends on index order; the number of such
  documents is reported per query (``n_ties_at_gold``) so ties are never silent.
  :func:`search_topk` orders equal scores by document id (ascending string order), again
  independent of the corpus's row order.
- **Self-masking** (SPEC §7) is an explicit argument, written into every result: with
  ``self_mask=True`` the corpus entry whose id equals the query id is removed from that
  query's ranking before ranks or top-k are computed. If that entry is also listed as one of
  the query's golds, it is still masked, dropped from the gold set and counted
  (``self_gold_removed``; the peer only warned). Masking is by id only: a document with the
  query's exact text under another id (a *text twin*, e.g. an exact reprint) is ranked like
  any document; if it is a gold it is a hit, if not it competes. Their number is reported
  per query (``n_text_twins``, texts compared after whitespace normalisation) so analyses can
  slice them out.
- **No gold**: a query whose gold set is empty (after self-masking or a restriction such as
  the strict cross-language rule) gets rank :data:`NO_GOLD` (-1) and counts as a miss at
  every k; the count is reported (``n_queries_no_gold``). A qrels gold id that is not in the
  corpus at all is a data error and raises ``ValueError``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd
import torch

from recipematch.beir import (
    corpus_sha256,
    doc_text,
    positive_qrels,
    qrels_sha256,
    queries_sha256,
)
from recipematch.metrics import hits_at_k, recall_at_k, recall_by_group

__all__ = [
    "NO_GOLD",
    "TIE_RULE",
    "TEXT_TWIN_RULE",
    "Encoder",
    "SentenceTransformerEncoder",
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
]

NO_GOLD = -1
TIE_RULE = (
    "rank = number of non-masked documents scoring strictly higher than the best gold; "
    "documents tying with the best gold do not count against it (gold wins ties); "
    "top-k lists order equal scores by ascending document id"
)
TEXT_TWIN_RULE = (
    "self-masking is by id only; a document with the query's whitespace-normalised text "
    "under another id is ranked like any document and counted in n_text_twins"
)

_SCORE_BLOCK_ELEMENTS = 1 << 25  # floats per score block: 128 MiB in float32


def default_chunk_size(n_docs: int) -> int:
    """Queries per score block so a block holds about 2**25 float32 scores (128 MiB); it is
    rounded up to a multiple of 64, the rows of every score product."""
    return max(1, _SCORE_BLOCK_ELEMENTS // max(1, n_docs))


# --------------------------------------------------------------------------- encoders


@runtime_checkable
class Encoder(Protocol):
    """Anything that turns texts into L2-normalised float32 vectors.

    ``encode(texts)`` returns an array of shape ``(len(texts), dim)``, float32, each row of
    unit L2 norm. ``cache_key`` is a string that changes whenever the vectors could change
    (model, revision, every encoding setting). An encoder may also define
    ``encode_queries(texts)`` (for example to prepend an instruction); queries then go
    through it and documents through ``encode``.
    """

    cache_key: str

    def encode(self, texts: list[str]) -> np.ndarray: ...


def _l2_normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("an embedding has zero norm and cannot be normalised")
    return (x / norms).astype(np.float32, copy=False)


def _dir_content_sha256(path: Path) -> str:
    """SHA-256 over every file of a model directory (relative path, size, bytes)."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = f.relative_to(path).as_posix()
        if rel.startswith(".") or "/." in rel or rel.endswith(".md"):
            continue
        h.update(rel.encode())
        h.update(f.stat().st_size.to_bytes(8, "little"))
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class SentenceTransformerEncoder:
    """A sentence-transformers model behind the :class:`Encoder` protocol.

    Args:
        model_name_or_path: a local model directory (its content hash is the revision) or a
            name that sentence-transformers can resolve from its local cache. Nothing is
            downloaded when ``HF_HUB_OFFLINE=1``.
        max_seq_length: tokens kept per input (``None``: the model's own limit). SPEC §7 runs
            our models at 1,024.
        batch_size: texts per forward pass.
        query_prompt: text prepended to queries only (SPEC §6: the V2 instruction).
        device: torch device string.
        dtype: ``"float32"``, ``"bfloat16"`` (SPEC §7 for our models) or ``"float16"``;
            outputs are always returned as float32.
        revision: override for the model revision recorded in ``cache_key`` (default: the
            content hash of a local directory, else the name).

    All settings, the pooling mode and the revision are recorded in :attr:`settings`, and
    :attr:`cache_key` is their canonical JSON.

    Example:
        >>> enc = SentenceTransformerEncoder(path, max_seq_length=256)  # doctest: +SKIP
        >>> enc.encode(["x^2 = 4"]).shape  # doctest: +SKIP
        (1, 384)
    """

    def __init__(
        self,
        model_name_or_path: str | os.PathLike,
        *,
        max_seq_length: int | None = None,
        batch_size: int = 64,
        query_prompt: str | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        revision: str | None = None,
    ) -> None:
        from sentence_transformers import SentenceTransformer

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_seq_length is not None and max_seq_length < 1:
            raise ValueError(f"max_seq_length must be >= 1, got {max_seq_length}")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
        path = Path(model_name_or_path)
        self.model = SentenceTransformer(str(model_name_or_path), device=device)
        if max_seq_length is not None:
            self.model.max_seq_length = max_seq_length
        if dtype != "float32":
            self.model.to(_DTYPES[dtype])
        if revision is None:
            revision = ("sha256:" + _dir_content_sha256(path)) if path.is_dir() else str(
                model_name_or_path)
        pooling = None
        modules = []
        for module in self.model:
            modules.append(type(module).__name__)
            if type(module).__name__ == "Pooling" and hasattr(module, "get_config_dict"):
                cfg = module.get_config_dict()
                pooling = cfg.get("pooling_mode") or {
                    k: v for k, v in cfg.items() if k.startswith("pooling_mode") and v}
        self.batch_size = batch_size
        self.query_prompt = query_prompt
        self.settings = {
            "model": path.name if path.is_dir() else str(model_name_or_path),
            "revision": revision,
            "max_seq_length": int(self.model.max_seq_length),
            "dtype": dtype,
            "pooling": pooling,
            "modules": modules,
            "query_prompt": query_prompt,
            "document_prompt": None,
            "normalize": True,
            "batch_size": batch_size,
        }
        self.cache_key = json.dumps(self.settings, sort_keys=True, ensure_ascii=False)

    def _encode(self, texts: list[str], prompt: str | None) -> np.ndarray:
        texts = list(texts)
        if not texts:
            get_dim = getattr(self.model, "get_embedding_dimension", None) or (
                self.model.get_sentence_embedding_dimension)
            dim = get_dim() or 0
            return np.zeros((0, dim), dtype=np.float32)
        emb = self.model.encode(texts, batch_size=self.batch_size, prompt=prompt,
                                convert_to_numpy=True, show_progress_bar=False,
                                normalize_embeddings=False)
        return _l2_normalise(np.asarray(emb, dtype=np.float32))  # (n, dim)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Documents: ``(len(texts), dim)`` float32, unit rows."""
        return self._encode(texts, None)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        """Queries, with ``query_prompt`` prepended: ``(len(texts), dim)`` float32."""
        return self._encode(texts, self.query_prompt)


# --------------------------------------------------------------------------- cache


class MemoisedEncoder:
    """Wraps an :class:`Encoder` so that a text is encoded once per role however many
    evaluations show it (the LLM-built tier and the probe share their corpus problems).

    Vectors are the wrapped encoder's; ``cache_key`` is unchanged, so on-disk caches stay
    valid. Memory grows with the distinct texts seen (``dim`` float32 each).
    """

    def __init__(self, encoder: Encoder) -> None:
        self.inner = encoder
        self.cache_key = encoder.cache_key
        self._memo: dict[str, dict[str, np.ndarray]] = {"document": {}, "query": {}}
        self.encoded = {"document": 0, "query": 0}

    def _get(self, texts: list[str], role: str) -> np.ndarray:
        memo = self._memo[role]
        todo = list(dict.fromkeys(t for t in texts if t not in memo))
        if todo:
            fn = getattr(self.inner, "encode_queries", None) if role == "query" else None
            emb = np.asarray(fn(todo) if fn is not None else self.inner.encode(todo), dtype=np.float32)
            for t, v in zip(todo, emb):
                memo[t] = v
            self.encoded[role] += len(todo)
        if not texts:
            return self.inner.encode([])
        return np.stack([memo[t] for t in texts])  # (len(texts), dim)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Documents: ``(len(texts), dim)`` float32, unit rows."""
        return self._get(list(texts), "document")

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        """Queries (through the wrapped encoder's ``encode_queries`` when it has one)."""
        return self._get(list(texts), "query")


def texts_sha256(texts: Sequence[str]) -> str:
    """SHA-256 of an ordered list of texts (length-prefixed UTF-8, so boundaries count)."""
    h = hashlib.sha256()
    h.update(len(texts).to_bytes(8, "little"))
    for t in texts:
        data = t.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


class EmbeddingCache:
    """Embeddings on disk, keyed by ``sha256(encoder.cache_key, role, sha256(texts))``.

    One ``<key>.npy`` (float32, shape ``(n, dim)``) and a ``<key>.json`` sidecar (the key's
    ingredients) per entry; writes are atomic (temporary file + rename). A second
    evaluation of the same model on the same texts loads the array and encodes nothing.
    ``hits`` and ``misses`` count lookups.
    """

    def __init__(self, cache_dir: str | os.PathLike) -> None:
        self.cache_dir = Path(cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(cache_key: str, texts: Sequence[str], role: str) -> str:
        payload = json.dumps({"encoder": cache_key, "role": role,
                              "texts_sha256": texts_sha256(texts)}, sort_keys=True)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def load(self, key: str, n: int) -> np.ndarray | None:
        path = self.cache_dir / f"{key}.npy"
        if not path.exists():
            return None
        arr = np.load(path, allow_pickle=False)
        if arr.ndim != 2 or arr.shape[0] != n or arr.dtype != np.float32:
            raise ValueError(f"embedding cache entry {path} has shape {arr.shape} and dtype "
                             f"{arr.dtype}; expected ({n}, dim) float32")
        return arr

    def save(self, key: str, emb: np.ndarray, meta: Mapping) -> None:
        for suffix, writer in ((".npy", lambda fh: np.save(fh, emb, allow_pickle=False)),
                               (".json", lambda fh: fh.write(
                                   json.dumps(dict(meta), sort_keys=True).encode()))):
            fd, tmp = tempfile.mkstemp(dir=self.cache_dir, suffix=suffix + ".tmp")
            with os.fdopen(fd, "wb") as fh:
                writer(fh)
            os.replace(tmp, self.cache_dir / f"{key}{suffix}")


def _call_encoder(encoder: Encoder, texts: list[str], role: str) -> np.ndarray:
    fn = getattr(encoder, "encode_queries", None) if role == "query" else None
    emb = fn(texts) if fn is not None else encoder.encode(texts)
    emb = np.asarray(emb)
    if emb.ndim != 2 or emb.shape[0] != len(texts):
        raise ValueError(f"encoder returned shape {emb.shape} for {len(texts)} texts")
    return _l2_normalise(emb)


def encode_cached(
    encoder: Encoder,
    texts: Sequence[str],
    cache_dir: str | os.PathLike | EmbeddingCache | None,
    *,
    role: str = "document",
) -> np.ndarray:
    """Encode ``texts`` (``role`` ``"document"`` or ``"query"``), reusing a cached array.

    Returns ``(len(texts), dim)`` float32 with unit rows. With ``cache_dir=None`` nothing is
    cached. The cache key covers ``encoder.cache_key``, the role and the exact texts in order.
    """
    if role not in ("document", "query"):
        raise ValueError(f"role must be 'document' or 'query', got {role!r}")
    texts = list(texts)
    if cache_dir is None:
        return _call_encoder(encoder, texts, role)
    cache = cache_dir if isinstance(cache_dir, EmbeddingCache) else EmbeddingCache(cache_dir)
    key = cache.key(encoder.cache_key, texts, role)
    arr = cache.load(key, len(texts))
    if arr is not None:
        cache.hits += 1
        return arr
    cache.misses += 1
    arr = _call_encoder(encoder, texts, role)
    cache.save(key, arr, {"encoder": encoder.cache_key, "role": role, "n": len(texts),
                          "texts_sha256": texts_sha256(texts)})
    return arr


# --------------------------------------------------------------------------- ranking core


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
    if removed.any():
        warnings.warn(f"{int(removed.sum())} queries list their own corpus entry as a gold; "
                      "it is masked and dropped from their gold set", stacklevel=3)
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
                       gold: _GoldIndex, self_idx: np.ndarray, self_mask: bool
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Ranks and tie counts from score blocks ``(start, stop, scores (stop-start, n_docs))``."""
    ranks = np.empty(n_queries, dtype=np.int64)
    ties = np.zeros(n_queries, dtype=np.int64)
    ptr = gold.ptr
    for start, stop, scores in blocks:
        c = stop - start
        if self_mask:
            rows = np.flatnonzero(self_idx[start:stop] >= 0)
            if rows.size:
                scores[torch.from_numpy(rows), torch.from_numpy(self_idx[start + rows])] = (
                    -torch.inf)
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
    self_mask: bool,
    chunk_size: int | None = None,
    return_details: bool = False,
) -> np.ndarray | RankDetails:
    """Rank of each query's best gold over the whole corpus (SPEC §7).

    Args:
        query_emb: ``(n_queries, dim)`` unit vectors (float32).
        doc_emb: ``(n_docs, dim)`` unit vectors (float32).
        query_ids: ``n_queries`` ids, aligned with ``query_emb``.
        doc_ids: ``n_docs`` unique ids, aligned with ``doc_emb``.
        qrels: ``query_id -> {doc_id: score}``; golds are scores > 0.
        self_mask: mask the corpus entry whose id equals the query id (required keyword).
        chunk_size: queries per score block (default :func:`default_chunk_size`); the result
            does not depend on it.
        return_details: return a :class:`RankDetails` instead of the ranks alone.

    Returns:
        ``(n_queries,)`` int64 ranks in ``[0, n_docs)`` (0 = gold first), or
        :data:`NO_GOLD` for a query without a gold; or :class:`RankDetails`.

    Raises:
        ValueError: shapes disagree, NaN/inf embeddings, duplicate doc ids, or a gold id
            that is not in ``doc_ids``.
    """
    q = _as_f32(query_emb, "query_emb")
    d = _as_f32(doc_emb, "doc_emb")
    if q.shape[0] != len(query_ids) or d.shape[0] != len(doc_ids):
        raise ValueError("embeddings and ids disagree in length")
    if q.shape[0] and q.shape[1] != d.shape[1]:
        raise ValueError(f"dimension mismatch: queries {q.shape[1]}, documents {d.shape[1]}")
    self_idx = _self_index(query_ids, doc_ids)
    gold = _gold_index(query_ids, doc_ids, qrels, self_idx if self_mask else
                       np.full(len(query_ids), -1, dtype=np.int64))
    cs = chunk_size or default_chunk_size(len(doc_ids))
    ranks, ties = _ranks_from_blocks(_embedding_blocks(q, d, cs), len(query_ids), gold,
                                     self_idx, self_mask)
    if not return_details:
        return ranks
    return RankDetails(ranks=ranks, n_ties_at_gold=ties, n_gold=np.diff(gold.ptr),
                       self_gold_removed=gold.self_gold_removed,
                       self_masked=(self_idx >= 0) & self_mask)


def search_topk(
    query_emb: np.ndarray,
    doc_emb: np.ndarray,
    k: int,
    *,
    query_ids: Sequence[str],
    doc_ids: Sequence[str],
    self_mask: bool,
    chunk_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by inner product, in memory-bounded query blocks.

    Equal scores are ordered by ascending document id (string order), so the output never
    depends on the corpus's row order. With ``self_mask`` the query's own entry is removed
    before the cut to k. Where fewer than k documents remain, the missing slots hold index
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
    n = d.shape[0]
    self_idx = _self_index(query_ids, doc_ids)
    id_rank = np.empty(n, dtype=np.int64)
    id_rank[np.argsort(np.asarray(doc_ids, dtype=object), kind="stable")] = np.arange(n)
    nq = q.shape[0]
    out_idx = np.full((nq, k), -1, dtype=np.int64)
    out_scores = np.full((nq, k), -np.inf, dtype=np.float32)
    kk = min(k + 1, n)
    cs = chunk_size or default_chunk_size(n)
    for start, stop, scores in _embedding_blocks(q, d, cs):
        if self_mask:
            rows = np.flatnonzero(self_idx[start:stop] >= 0)
            if rows.size:
                scores[torch.from_numpy(rows), torch.from_numpy(self_idx[start + rows])] = (
                    -torch.inf)
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
) -> np.ndarray:
    """Hard tier: does the best gold score *strictly* above every near-miss of its query?

    Args:
        near_misses: ``query_id -> near-miss doc ids`` (ids absent from ``doc_ids`` are
            ignored).

    Returns:
        ``(n_queries,)`` float64: 1.0 if the best gold beats every near-miss, 0.0 if some
        near-miss scores at least as high (a tie is not a win), NaN when the query has no
        near-miss or no gold in the corpus (excluded from the rate, see
        :func:`recipematch.metrics.near_miss_win_rate`).
    """
    q = _as_f32(query_emb, "query_emb")
    d = _as_f32(doc_emb, "doc_emb")
    pos = {x: i for i, x in enumerate(doc_ids)}
    positive = positive_qrels(qrels)
    rows_g, cols_g, rows_n, cols_n = [], [], [], []
    for i, qid in enumerate(query_ids):
        for did in positive.get(qid, ()):
            if did in pos and did != qid:
                rows_g.append(i)
                cols_g.append(pos[did])
        for did in near_misses.get(qid, ()):
            if did in pos and did != qid:
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


# --------------------------------------------------------------------------- evaluation


_WS = re.compile(r"\s+")


def _norm_text(t: str) -> str:
    return _WS.sub(" ", t).strip()


def _text_twins(query_ids, query_texts, doc_ids, doc_texts) -> np.ndarray:
    by_text: dict[str, int] = {}
    for t in doc_texts:
        key = _norm_text(t)
        by_text[key] = by_text.get(key, 0) + 1
    own = {d: _norm_text(t) for d, t in zip(doc_ids, doc_texts)}
    out = np.zeros(len(query_ids), dtype=np.int64)
    for i, (qid, qt) in enumerate(zip(query_ids, query_texts)):
        key = _norm_text(qt)
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
                  self_mask, model, corpus, queries, qrels, query_meta, extra) -> tuple[
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
        "self_mask": bool(self_mask),
        "model": model,
        "corpus_sha256": corpus_sha256(corpus),
        "queries_sha256": queries_sha256({q: queries[q] for q in query_ids}),
        "qrels_sha256": qrels_sha256(qrels),
        "tie_rule": TIE_RULE,
        "text_twin_rule": TEXT_TWIN_RULE,
        "n_queries_no_gold": int((ranks == NO_GOLD).sum()),
        "n_queries_with_ties_at_gold": int((details.n_ties_at_gold > 0).sum()),
        "n_queries_self_masked": int(details.self_masked.sum()),
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
    self_mask: bool = True,
    model: str = "",
    query_meta: Mapping[str, Mapping] | None = None,
    chunk_size: int | None = None,
    extra: Mapping | None = None,
) -> tuple[dict, pd.DataFrame]:
    """:func:`evaluate` from precomputed embeddings (rows aligned with ``query_ids`` and
    with ``list(corpus)``)."""
    doc_ids = list(corpus)
    details = rank_of_gold(query_emb, doc_emb, query_ids, doc_ids, qrels,
                           self_mask=self_mask, chunk_size=chunk_size, return_details=True)
    return _build_result(list(query_ids), [queries[q] for q in query_ids], doc_ids,
                         [doc_text(corpus[d]) for d in doc_ids], details, ks=ks,
                         self_mask=self_mask, model=model, corpus=corpus, queries=queries,
                         qrels=qrels, query_meta=query_meta, extra=dict(extra or {}))


def evaluate(
    encoder: Encoder,
    corpus: Mapping[str, Mapping],
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    ks: Sequence[int] = (1, 5, 10),
    self_mask: bool = True,
    cache_dir: str | os.PathLike | EmbeddingCache | None = None,
    query_meta: Mapping[str, Mapping] | None = None,
    query_ids: Sequence[str] | None = None,
    chunk_size: int | None = None,
) -> tuple[dict, pd.DataFrame]:
    """Encode, rank the whole corpus and score R@k (SPEC §7).

    Args:
        encoder: an :class:`Encoder`.
        corpus: ``doc_id -> {"title", "text"}``; the embedded text is
            :func:`recipematch.beir.doc_text`.
        queries: ``query_id -> text``.
        qrels: ``query_id -> {doc_id: score}``; golds are scores > 0.
        ks: cut-offs.
        self_mask: mask each query's own corpus entry (module rules); written to the summary.
        cache_dir: embedding cache directory (or :class:`EmbeddingCache`); ``None`` = none.
        query_meta: ``query_id -> metadata``; scalar fields become per-query columns and a
            ``domain`` field adds ``summary["per_domain"]``.
        query_ids: queries to score, in order (default: every query with a positive qrel,
            in ``queries`` order). A listed query without a gold is a miss (rank -1).
        chunk_size: queries per score block.

    Returns:
        ``(summary, per_query)``. ``summary`` holds ``"R@k"`` in percent (0–100) for every k,
        ``n_queries``, ``n_docs``, ``self_mask``, ``model`` (``encoder.cache_key``),
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


# --------------------------------------------------------------------------- BM25


BM25_TOKEN_PATTERN = r"(?u)\b\w+\b"


def _bm25_index(doc_texts, k1, b, stopwords):
    import bm25s

    tokens = bm25s.tokenize(list(doc_texts), stopwords=stopwords, show_progress=False,
                            token_pattern=BM25_TOKEN_PATTERN)
    retriever = bm25s.BM25(k1=k1, b=b)
    retriever.index(tokens, show_progress=False)
    return retriever, tokens.vocab


def _bm25_blocks(retriever, vocab, query_texts, n_docs, chunk_size, stopwords):
    import bm25s

    q_tokens = bm25s.tokenize(list(query_texts), stopwords=stopwords, return_ids=False,
                              show_progress=False, token_pattern=BM25_TOKEN_PATTERN)
    for start in range(0, len(q_tokens), chunk_size):
        stop = min(start + chunk_size, len(q_tokens))
        block = np.zeros((stop - start, n_docs), dtype=np.float32)
        for r, toks in enumerate(q_tokens[start:stop]):
            known = [t for t in toks if t in vocab]
            if known:
                block[r] = retriever.get_scores(known)
        yield start, stop, torch.from_numpy(block)


def bm25_ranks(
    corpus: Mapping[str, Mapping],
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    query_ids: Sequence[str],
    self_mask: bool,
    k1: float = 1.5,
    b: float = 0.75,
    stopwords: str | None = None,
    chunk_size: int | None = None,
) -> RankDetails:
    """BM25 (bm25s, Lucene variant; SPEC §7: k1 1.5, b 0.75) ranks under the same rules
    as :func:`rank_of_gold`.

    Tokenisation: bm25s's tokenizer, lower-cased, with the pattern ``\\b\\w+\\b`` (single
    characters kept: in math problems they are the variables) and no stop-word list by
    default (the corpora are multilingual, and ``a`` is a variable as often as an article);
    pass ``stopwords="en"`` for bm25s's English list. A query with no indexed token scores 0
    everywhere, so its gold ties with every document and gets rank 0 by the tie rule; such
    queries show ``n_ties_at_gold = n_docs - n_gold`` and are easy to filter.
    """
    doc_ids = list(corpus)
    self_idx = _self_index(query_ids, doc_ids)
    gold = _gold_index(query_ids, doc_ids, qrels, self_idx if self_mask else
                       np.full(len(query_ids), -1, dtype=np.int64))
    retriever, vocab = _bm25_index([doc_text(corpus[d]) for d in doc_ids], k1, b, stopwords)
    cs = chunk_size or min(256, default_chunk_size(len(doc_ids)))
    ranks, ties = _ranks_from_blocks(
        _bm25_blocks(retriever, vocab, [queries[q] for q in query_ids], len(doc_ids), cs,
                     stopwords), len(query_ids), gold, self_idx, self_mask)
    return RankDetails(ranks=ranks, n_ties_at_gold=ties, n_gold=np.diff(gold.ptr),
                       self_gold_removed=gold.self_gold_removed,
                       self_masked=(self_idx >= 0) & self_mask)


def evaluate_bm25(
    corpus: Mapping[str, Mapping],
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    ks: Sequence[int] = (1, 5, 10),
    self_mask: bool = True,
    query_meta: Mapping[str, Mapping] | None = None,
    query_ids: Sequence[str] | None = None,
    k1: float = 1.5,
    b: float = 0.75,
    stopwords: str | None = None,
) -> tuple[dict, pd.DataFrame]:
    """The BM25 baseline through the same metric code as :func:`evaluate`."""
    ids = _eval_query_ids(queries, qrels, query_ids)
    details = bm25_ranks(corpus, queries, qrels, query_ids=ids, self_mask=self_mask, k1=k1,
                         b=b, stopwords=stopwords)
    doc_ids = list(corpus)
    settings = {"model": "bm25s", "k1": k1, "b": b, "method": "lucene",
                "stopwords": stopwords,
                "tokenizer": f"bm25s.tokenize (lower, {BM25_TOKEN_PATTERN})"}
    return _build_result(ids, [queries[q] for q in ids], doc_ids,
                         [doc_text(corpus[d]) for d in doc_ids], details, ks=ks,
                         self_mask=self_mask,
                         model=json.dumps(settings, sort_keys=True), corpus=corpus,
                         queries=queries, qrels=qrels, query_meta=query_meta,
                         extra={"encoder": settings})
