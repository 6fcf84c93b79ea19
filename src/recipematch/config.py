"""Typed, frozen configuration for every stage, read from a ``params.yaml`` given by path.

The library never opens ``params.yaml`` by itself (STYLE: the thin ``stages/`` entry points
pass the path). Each section maps onto a frozen dataclass that rejects unknown and missing
keys and checks types, so a typo in ``dvc exp run -S`` fails loudly instead of being ignored.

YAML pitfall handled here: ``dvc exp run -S lr=0.000001`` writes ``1e-06``, which YAML 1.1
loaders (PyYAML) read as a *string*. :func:`load_yaml` resolves floats by the YAML 1.2 rule
(``1e-06``, ``2E5``, ``.5`` are floats), and :func:`section` also converts a numeric string
for a float field, so parameters keep their types.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

_FLOAT_12 = re.compile(r"""^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$""", re.X)


class _Loader(yaml.SafeLoader):
    """SafeLoader whose float rule follows YAML 1.2 (``1e-06`` is a float)."""


_Loader.yaml_implicit_resolvers = {k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:float"]
                                   for k, v in yaml.SafeLoader.yaml_implicit_resolvers.copy().items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))
# integers must still win over floats for plain digit strings
_Loader.yaml_implicit_resolvers = {
    k: sorted(v, key=lambda tr: 0 if tr[0] == "tag:yaml.org,2002:int" else 1)
    for k, v in _Loader.yaml_implicit_resolvers.items()
}


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping with YAML 1.2 floats (see module docstring).

    Raises:
        ValueError: the file is not a mapping at top level.
    """
    with open(path, encoding="utf-8") as f:
        data = yaml.load(f, Loader=_Loader)  # noqa: S506 - _Loader derives from SafeLoader
    if not isinstance(data, dict):
        raise ValueError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


T = TypeVar("T")


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where)
            except (TypeError, ValueError) as e:
                errors.append(str(e))
        raise TypeError(f"{where}: {value!r} matches none of {tp}: {errors}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{where}: expected a list, got {value!r}")
        (inner, *_) = typing.get_args(tp) or (Any,)
        return tuple(_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise TypeError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return section({"x": value}, "x", tp, where=where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise TypeError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool):
            raise TypeError(f"{where}: expected a number, got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str) and _FLOAT_12.match(value.strip()):
            return float(value)
        raise TypeError(f"{where}: expected a number, got {value!r}")
    if tp is str:
        if not isinstance(value, str):
            raise TypeError(f"{where}: expected a string, got {value!r}")
        return value
    return value


def section(params: Mapping[str, Any], key: str, cls: type[T], *, where: str | None = None) -> T:
    """Build the frozen dataclass ``cls`` from ``params[key]``.

    Raises:
        KeyError: the section or a required field is missing.
        TypeError: a value has the wrong type, or the section has unknown keys.
    """
    where = where or key
    if key not in params:
        raise KeyError(f"params.yaml has no '{key}' section")
    raw = params[key]
    if not isinstance(raw, Mapping):
        raise TypeError(f"{where}: expected a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(raw) - names
    if unknown:
        raise TypeError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(names)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                continue
            raise KeyError(f"{where}: missing key '{f.name}'")
        kwargs[f.name] = _coerce(raw[f.name], hints[f.name], f"{where}.{f.name}")
    return cls(**kwargs)


def top(params: Mapping[str, Any], key: str, tp: Any) -> Any:
    """A typed top-level scalar or list, e.g. ``top(p, "seed", int)``."""
    if key not in params:
        raise KeyError(f"params.yaml has no top-level '{key}'")
    return _coerce(params[key], tp, key)


@dataclass(frozen=True)
class GatesConfig:
    """SPEC §4. ``active``: ``v1`` or ``v2`` (no "off"); n-gram gate over word ``ngram_n``-grams
    with containment threshold ``ngram_threshold`` in [0, 1] (paper: 5 and 0.35), checked in
    both directions; embedding-cosine gate at ``cosine_threshold`` (paper: 0.9) with the
    base model."""

    active: str
    ngram_n: int
    ngram_threshold: float
    cosine_threshold: float


@dataclass(frozen=True)
class EvalSetConfig:
    """Held-out evaluation sources (no arm trains on them). ``n_heldout`` sources with a
    recorded D1 rewrite are drawn with ``seed`` for the LLM-built tier; ``corpus_docs`` corpus
    problems are searched (0 = the whole corpus, as the paper does; SPEC §7)."""

    seed: int
    n_heldout: int
    corpus_docs: int


@dataclass(frozen=True)
class CasConfig:
    """Computer-algebra generator limits (SPEC §3.1: 30 s per problem)."""

    timeout_s: float
    memory_mb: int
    workers: int


@dataclass(frozen=True)
class LLMConfig:
    """LLM generation and judging (SPEC §3.2). ``backend``: ``replay`` | ``openai`` | ``vllm``."""

    backend: str
    prompts: tuple[str, ...]
    model_id: str
    judge_model_id: str
    n_pos: int
    n_neg: int
    require_tags: bool
    temperature: float
    top_p: float
    max_tokens: int
    base_url: str = ""


@dataclass(frozen=True)
class BudgetConfig:
    """Matched budget (SPEC §5): exact ``rows`` per arm and seed; ``dev_fraction`` of sources
    held out as dev; at most ``max_rows_per_source`` rows of one source (1: as the peer's
    released verified and recipe files, one row per source; 0 = no cap). Arms named in
    ``shared_sources`` draw from one source list: the sources all of them can supply."""

    rows: int
    dev_fraction: float
    max_rows_per_source: int
    shared_sources: tuple[str, ...]


@dataclass(frozen=True)
class TrainConfig:
    """Training (SPEC §6; CPU-sized defaults in params.yaml, paper values in params-paper.yaml)."""

    model: str
    lr: float
    epochs: int
    batch_size: int
    mini_batch_size: int
    scale: float
    warmup_ratio: float
    max_seq_length: int
    eval_steps: int
    max_dev_triplets: int
    device: str
    bf16: bool


@dataclass(frozen=True)
class EvaluateConfig:
    """Evaluation (SPEC §7): recall cut-offs and encoding length."""

    ks: tuple[int, ...]
    max_seq_length: int
    batch_size: int
    device: str


@dataclass(frozen=True)
class StatsConfig:
    """Statistics (SPEC §8): bootstrap replicates and seed."""

    n_boot: int
    seed: int
    paired_seeds: bool


@dataclass(frozen=True)
class MlflowConfig:
    """Tracking store; a relative sqlite path is resolved against the project root."""

    tracking_uri: str
    experiment: str
