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
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from recipematch.errors import RecipematchError
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


#: Model types whose position ids start after the padding index (``padding_idx + 1``, as
#: RoBERTa does), so ``max_position_embeddings - pad_token_id - 1`` positions are usable.
OFFSET_POSITION_TYPES = frozenset({"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "mpnet", "longformer",
                                   "data2vec-text", "roberta-prelayernorm", "xmod", "ibert"})


def usable_positions(config: Mapping[str, Any] | None) -> int | None:
    """The one rule for how many tokens a transformer takes per text: its
    ``max_position_embeddings``, less ``pad_token_id + 1`` for the model types of
    :data:`OFFSET_POSITION_TYPES` (RoBERTa: 514 positions, 512 usable); ``None`` when the
    config states no positive integer. The tokenizer's ``model_max_length`` is not read: a
    checkpoint saved after training at ``train.max_seq_length`` writes that length there, which
    is no limit of the model's."""
    if not isinstance(config, Mapping):
        return None
    n = config.get("max_position_embeddings")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        return None
    if config.get("model_type") in OFFSET_POSITION_TYPES:
        pad = config.get("pad_token_id")
        pad = pad if isinstance(pad, int) and not isinstance(pad, bool) and 0 <= pad < n else 1
        n -= pad + 1
    return n if n > 0 else None


def position_limit(model) -> int | None:
    """The most tokens a loaded sentence-transformers ``model`` can take per text
    (:func:`usable_positions` of its transformer's config), or ``None``."""
    first = model[0] if len(model) else None
    cfg = getattr(getattr(first, "auto_model", None), "config", None)
    return usable_positions(cfg.to_dict()) if hasattr(cfg, "to_dict") else None


def folder_position_limit(path: str | os.PathLike) -> int | None:
    """:func:`position_limit` of a sentence-transformers model folder read from its JSON files
    alone (the Transformer module's ``config.json``, located through ``modules.json``), without
    loading weights: for checking params before a run. ``None`` when the folder does not state
    a limit or its files cannot be read."""
    root = Path(path)
    sub = ""
    try:
        modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
        for m in modules if isinstance(modules, list) else []:
            if isinstance(m, dict) and str(m.get("type", "")).endswith("Transformer"):
                sub = str(m.get("path") or "")
                break
    except (OSError, ValueError):
        pass
    base = (root / sub).resolve()
    if root.resolve() not in (base, *base.parents):
        return None  # a module path that leaves the folder is not read
    try:
        config = json.loads((base / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return usable_positions(config)


def set_max_seq_length(model, n: int, source: str | os.PathLike) -> None:
    """Set ``model.max_seq_length = n`` after checking it against the positions of the model
    loaded from ``source`` (:func:`folder_position_limit` of the folder, else
    :func:`position_limit` of the loaded model).

    Raises:
        RecipematchError: ``n`` is longer than the model's positions, naming ``source`` (before:
            a raw ``RuntimeError`` about tensor sizes in the middle of encoding or training).
    """
    limit = folder_position_limit(source) if Path(source).is_dir() else None
    if limit is None:
        limit = position_limit(model)
    if limit is not None and n > limit:
        raise RecipematchError(f"max_seq_length {n} is longer than model {source} can take ({limit} positions); "
                               f"set evaluate.max_seq_length / train.max_seq_length (or --max-seq-length) to at most "
                               f"{limit}")
    model.max_seq_length = n


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
            set_max_seq_length(self.model, max_seq_length, model_name_or_path)
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
        # "" (not None) when no prompt is ours: a folder's own default_prompt_name would otherwise be
        # prepended to every text while the settings record no prompt
        emb = self.model.encode(texts, batch_size=self.batch_size, prompt=prompt if prompt is not None else "",
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
