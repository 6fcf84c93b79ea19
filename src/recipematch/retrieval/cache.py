"""The embedding cache: each (encoder, role, texts) encoded once, kept on disk.

Entries are ``<key>.npy`` (float32, shape ``(n_texts, dim)``) with a ``<key>.json`` sidecar;
the key hashes the encoder's ``cache_key``, the role (``document`` or ``query``) and the
exact texts in order. A cache file that cannot be read as such an array (truncated, random
bytes, pickled objects, another shape) is a miss: it is reported in a warning naming the
file, then encoded again and overwritten. Arrays are loaded with ``allow_pickle=False``, so
a cache file can never run code.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from recipematch.errors import RecipematchError
from recipematch.io import sha256_text, sha256_texts
from recipematch.retrieval.encoders import Encoder, _l2_normalise

__all__ = ["EmbeddingCache", "encode_cached", "texts_sha256"]


def texts_sha256(texts: Sequence[str]) -> str:
    """SHA-256 of an ordered list of texts (length-prefixed UTF-8, so boundaries count; the
    number of texts is hashed first): :func:`recipematch.io.sha256_texts`."""
    texts = list(texts)
    return sha256_texts(texts, count=len(texts))


class EmbeddingCache:
    """Embeddings on disk, keyed by ``sha256(encoder.cache_key, role, sha256(texts))``.

    One ``<key>.npy`` (float32, shape ``(n, dim)``) and a ``<key>.json`` sidecar (the key's
    ingredients) per entry; writes are atomic (temporary file + rename). A second
    evaluation of the same model on the same texts loads the array and encodes nothing.
    ``hits`` and ``misses`` count lookups; ``corrupt`` counts the misses that found an
    unusable file (see :meth:`load`).
    """

    def __init__(self, cache_dir: str | os.PathLike) -> None:
        self.cache_dir = Path(cache_dir)
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RecipematchError(f"embedding cache folder {self.cache_dir} cannot be created: "
                                   f"{e.strerror or e}; pass another --cache-dir") from None
        self.hits = 0
        self.misses = 0
        self.corrupt = 0

    @staticmethod
    def key(cache_key: str, texts: Sequence[str], role: str) -> str:
        payload = json.dumps({"encoder": cache_key, "role": role,
                              "texts_sha256": texts_sha256(texts)}, sort_keys=True)
        return sha256_text(payload)

    def load(self, key: str, n: int) -> np.ndarray | None:
        """The cached ``(n, dim)`` float32 array of ``key``, or ``None`` (a miss).

        A file that exists but is not such an array (truncated, random bytes, pickled
        objects, another shape or dtype, non-finite values) is a miss too: a warning names
        the file and why, and the caller encodes again and overwrites it. Pickled data is
        never loaded.
        """
        path = self.cache_dir / f"{key}.npy"
        if not path.exists():
            return None
        if path.is_dir():
            self._corrupt(path, "it is a folder")
            import shutil

            shutil.rmtree(path, ignore_errors=True)
            return None
        try:
            arr = np.load(path, allow_pickle=False)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is a miss, never a crash
            why = ("it holds pickled (object) data, which is never loaded" if "pickle" in str(exc).lower()
                   else f"it is not a readable .npy array ({type(exc).__name__})")
            self._corrupt(path, why)
            return None
        if not isinstance(arr, np.ndarray) or arr.ndim != 2 or arr.shape[0] != n or arr.dtype != np.float32:
            self._corrupt(path, f"it holds shape {getattr(arr, 'shape', None)} and dtype "
                                f"{getattr(arr, 'dtype', None)}, expected ({n}, dim) float32")
            return None
        if not np.all(np.isfinite(arr)):
            self._corrupt(path, "it holds NaN or infinite values")
            return None
        if n and not np.allclose(np.linalg.norm(arr, axis=1), 1.0, atol=1e-3):
            self._corrupt(path, "its rows are not unit vectors")
            return None
        return arr

    def _corrupt(self, path: Path, why: str) -> None:
        self.corrupt += 1
        warnings.warn(f"embedding cache entry {path} is unusable ({why}); treated as a cache miss: "
                      "it is encoded again and overwritten", stacklevel=3)

    def save(self, key: str, emb: np.ndarray, meta: Mapping) -> None:
        for suffix, writer in ((".npy", lambda fh: np.save(fh, emb, allow_pickle=False)),
                               (".json", lambda fh: fh.write(
                                   json.dumps(dict(meta), sort_keys=True).encode()))):
            fd, tmp = tempfile.mkstemp(dir=self.cache_dir, suffix=suffix + ".tmp")
            try:
                with os.fdopen(fd, "wb") as fh:
                    writer(fh)
                os.replace(tmp, self.cache_dir / f"{key}{suffix}")
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise


def _encoder_name(encoder: Encoder) -> str:
    """The model name an encoder's ``cache_key`` records (its JSON ``model`` field), else its
    class name: for messages."""
    try:
        name = json.loads(encoder.cache_key).get("model")
    except (AttributeError, TypeError, ValueError):
        name = None
    return str(name) if name else type(encoder).__name__


def _call_encoder(encoder: Encoder, texts: list[str], role: str) -> np.ndarray:
    fn = getattr(encoder, "encode_queries", None) if role == "query" else None
    emb = fn(texts) if fn is not None else encoder.encode(texts)
    emb = np.asarray(emb)
    if emb.ndim != 2 or emb.shape[0] != len(texts):
        raise ValueError(f"encoder returned shape {emb.shape} for {len(texts)} texts")
    bad = ~np.isfinite(emb).all(axis=1)
    if bad.any():
        raise RecipematchError(f"model {_encoder_name(encoder)} gave non-finite (NaN or inf) embeddings for {int(bad.sum())} of "
                               f"{len(texts)} {role} texts (first: row {int(np.flatnonzero(bad)[0])}); the "
                               "checkpoint is broken (a diverged training run?): retrain or remove it")
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
