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


_INT_12 = re.compile(r"^[-+]?[0-9]+$|^0o[0-7]+$|^0x[0-9a-fA-F]+$")
_BOOL_12 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema scalars, as DVC (ruamel, YAML 1.2) reads the
    same file: ``1e-06`` is a float, ``040`` is 40 (not octal 32), ``1:00`` and ``yes`` are
    strings; and a key given twice is an error instead of silently taking the last value."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        value = self.construct_scalar(node)
        if value.startswith("0o"):
            return int(value[2:], 8)
        if value.startswith("0x"):
            return int(value[2:], 16)
        return int(value)


_REPLACED = {"tag:yaml.org,2002:float", "tag:yaml.org,2002:int", "tag:yaml.org,2002:bool"}
_Loader.yaml_implicit_resolvers = {k: [(tag, rx) for tag, rx in v if tag not in _REPLACED]
                                   for k, v in yaml.SafeLoader.yaml_implicit_resolvers.copy().items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL_12, list("tTfF"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", _INT_12, list("-+0123456789"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping with YAML 1.2 floats (see module docstring).

    Raises:
        ValueError: the file is not valid YAML, repeats a key, or is not a mapping.
    """
    with open(path, encoding="utf-8") as f:
        try:
            data = yaml.load(f, Loader=_Loader)  # noqa: S506 - _Loader derives from SafeLoader
        except yaml.YAMLError as e:
            raise ValueError(f"{path}: not valid YAML: {e}") from None
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


#: Every top-level key of params.yaml; anything else is a typo and is refused.
TOP_LEVEL_KEYS = ("seed", "n_seeds", "positives", "negatives", "negatives_volume", "arms", "evalsets", "gates", "cas",
                  "llm", "budget", "train", "evaluate", "stats", "mlflow")


def check_params(params: Mapping[str, Any]) -> None:
    """Validate a whole params mapping before any stage runs, so a typo or an impossible
    value fails at once with its key named, not hours later inside training.

    Raises:
        KeyError: a required key is missing.
        TypeError: a value has the wrong type, or an unknown key is present.
        ValueError: a value is out of range (with the allowed range in the message).
    """
    import math

    from recipematch.cells import NAMED_ARMS, CellSpec
    from recipematch.gates import GATE_VERSIONS

    unknown = sorted(set(params) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise TypeError(f"unknown top-level key(s) {unknown}; allowed: {list(TOP_LEVEL_KEYS)}")
    for k in TOP_LEVEL_KEYS:
        if k not in params:
            raise KeyError(f"params.yaml has no top-level '{k}'")
    if top(params, "seed", int) < 0:
        raise ValueError("seed must be >= 0")
    if top(params, "n_seeds", int) < 1:
        raise ValueError("n_seeds must be >= 1")
    CellSpec(top(params, "positives", str), top(params, "negatives", str), top(params, "negatives_volume", str))
    arms = top(params, "arms", list[str])
    bad = [a for a in arms if a != "cell" and a not in NAMED_ARMS]
    if bad or len(set(arms)) != len(arms) or not arms:
        raise ValueError(f"arms must be distinct names from {sorted(NAMED_ARMS)} or 'cell'; got {list(arms)}")
    ev = section(params, "evalsets", EvalSetConfig)
    if ev.n_heldout < 1 or ev.corpus_docs < 0 or ev.seed < 0:
        raise ValueError("evalsets: n_heldout >= 1, corpus_docs >= 0 (0 = all) and seed >= 0")
    g = section(params, "gates", GatesConfig)
    if g.active not in GATE_VERSIONS:
        raise ValueError(f"gates.active must be one of {GATE_VERSIONS} (gates cannot be switched off), got {g.active!r}")
    if g.ngram_n < 1 or not 0 <= g.ngram_threshold <= 1 or not -1 <= g.cosine_threshold <= 1:
        raise ValueError("gates: ngram_n >= 1, ngram_threshold in [0, 1], cosine_threshold in [-1, 1]")
    c = section(params, "cas", CasConfig)
    if not (c.timeout_s > 0 and c.memory_mb > 0 and c.workers >= 1):
        raise ValueError("cas: timeout_s > 0, memory_mb > 0, workers >= 1")
    llm = section(params, "llm", LLMConfig)
    if llm.backend not in ("replay", "openai", "vllm") or not llm.prompts or llm.n_pos < 1 or llm.n_neg < 0:
        raise ValueError("llm: backend replay|openai|vllm, at least one prompt, n_pos >= 1, n_neg >= 0")
    b = section(params, "budget", BudgetConfig)
    if b.rows < 1 or not 0 < b.dev_fraction < 1 or b.max_rows_per_source < 0:
        raise ValueError("budget: rows >= 1, dev_fraction in (0, 1), max_rows_per_source >= 0 (0 = no cap)")
    bad = [a for a in b.shared_sources if a not in NAMED_ARMS]
    if bad:
        raise ValueError(f"budget.shared_sources may list named arms only; unknown: {bad}")
    t = section(params, "train", TrainConfig)
    if not (math.isfinite(t.lr) and t.lr > 0) or t.epochs < 1 or t.batch_size < 1 or t.mini_batch_size < 1:
        raise ValueError("train: lr finite and > 0, epochs >= 1, batch_size >= 1, mini_batch_size >= 1")
    if not (math.isfinite(t.scale) and t.scale > 0) or not 0 <= t.warmup_ratio < 1 or t.max_seq_length < 1:
        raise ValueError("train: scale > 0, warmup_ratio in [0, 1), max_seq_length >= 1")
    e = section(params, "evaluate", EvaluateConfig)
    if not e.ks or 1 not in e.ks or any(k < 1 for k in e.ks):
        raise ValueError(f"evaluate.ks must be cut-offs >= 1 including 1 (the report's R@1), got {list(e.ks)}")
    st = section(params, "stats", StatsConfig)
    if st.n_boot < 100:
        raise ValueError(f"stats.n_boot must be >= 100 for a 95% interval to mean anything, got {st.n_boot}")
    section(params, "mlflow", MlflowConfig)
