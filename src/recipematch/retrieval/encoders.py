"""Encoders: sentence-transformers models (and anything else) behind one protocol.

An encoder turns texts into L2-normalised float32 vectors, shape ``(n_texts, dim)``; its
``cache_key`` names everything that could change those vectors (model, revision, every
encoding setting), so an on-disk cache keyed by it is never stale. The models are run as the
paper's evaluation runs them (Section 3 and Appendix A: inputs cut at 1,024 tokens, bf16 for
the trained models).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from recipematch.io import sha256_tree

__all__ = ["Encoder", "SentenceTransformerEncoder", "MemoisedEncoder"]


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
    """Content hash of a local model folder: the project's one folder-hash rule,
    :func:`recipematch.io.sha256_tree` (relative paths and file hashes)."""
    return sha256_tree(path)


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class SentenceTransformerEncoder:
    """A sentence-transformers model behind the :class:`Encoder` protocol.

    Args:
        model_name_or_path: a local model directory (its content hash is the revision) or a
            name that sentence-transformers can resolve from its local cache. Nothing is
            downloaded when ``HF_HUB_OFFLINE=1``.
        max_seq_length: tokens kept per input (``None``: the model's own limit). The paper
            (Appendix A) runs its models at 1,024.
        batch_size: texts per forward pass.
        query_prompt: text prepended to queries only (Appendix A: the V2 model is evaluated
            with the instruction it was trained with).
        device: torch device string.
        dtype: ``"float32"``, ``"bfloat16"`` (the paper's trained models, Appendix A) or
            ``"float16"``; outputs are always returned as float32.
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
