"""The machinery of the params schema: a field's bounds (``_spec``), value coercion and checks,
and building a frozen section dataclass from its YAML mapping with the dotted key named on error."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Any, TypeVar

from recipematch.config.yamlio import FLOAT_12
from recipematch.errors import RecipematchError, short_repr

T = TypeVar("T")


def spec(help: str, *, min: float | None = None, max: float | None = None, choices: Iterable[Any] | None = None,
          finite: bool = False, default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING,
          max_len: int | None = None) -> Any:
    """A params field with its help text and bounds (checked by :func:`_check_value`)."""
    md = {"help": help, "min": min, "max": max, "choices": tuple(choices) if choices is not None else None,
          "finite": finite, "max_len": max_len}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=md)
    if default is dataclasses.MISSING:
        return field(metadata=md)
    return field(default=default, metadata=md)


def deadline_spec() -> Any:
    """The total wall-clock bound of one LLM call (generator and second judge alike)."""
    return spec("wall-clock seconds one call may take, retries and the whole answer included "
                 "(a server trickling its answer is cut off here: failure 'timeout')",
                 default=1800.0, min=1.0, max=604_800.0, finite=True)


def max_response_spec() -> Any:
    """The body-size cap of one LLM answer (generator and second judge alike)."""
    return spec("largest answer body read, in bytes; a longer answer fails as 'too_large' "
                 "and none of it is stored", default=8 * 1024 * 1024, min=1024, max=1024 * 1024 * 1024)


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
            except RecipematchError as e:
                errors.append(str(e))
        raise RecipematchError(f"{where}: {short_repr(value, 120)} matches none of {tp}: {errors}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise RecipematchError(f"{where}: expected a list, got {short_repr(value, 120)}")
        (inner, *_) = typing.get_args(tp) or (Any,)
        return tuple(_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise RecipematchError(f"{where}: expected a mapping, got {short_repr(value, 120)}")
        args = typing.get_args(tp)
        if len(args) == 2 and dataclasses.is_dataclass(args[1]):
            bad = [k for k in value if not isinstance(k, str)]
            if bad:
                raise RecipematchError(f"{where}: names must be text, got {short_repr(bad[0], 120)}")
            return {k: build(v, args[1], f"{where}.{k}") for k, v in value.items()}
        _check_json(value, where)  # a free mapping is sent or hashed as JSON (chat_template_kwargs)
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return build(value, tp, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise RecipematchError(f"{where}: expected true/false, got {short_repr(value, 120)}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecipematchError(f"{where}: expected an integer, got {short_repr(value, 120)}")
        return value
    if tp is float:
        if isinstance(value, bool):
            raise RecipematchError(f"{where}: expected a number, got {short_repr(value, 120)}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str) and FLOAT_12.match(value.strip()):
            return float(value)
        raise RecipematchError(f"{where}: expected a number, got {short_repr(value, 120)}")
    if tp is str:
        if not isinstance(value, str):
            raise RecipematchError(f"{where}: expected a string, got {short_repr(value, 120)}")
        _check_text(value, where)
        return value
    return value


def _check_text(value: str, where: str) -> None:
    """Refuse a string that is not valid Unicode text (a lone surrogate from a ``\\ud800``
    escape: no file, prompt or MLflow param can hold it)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RecipematchError(f"{where}: holds a lone surrogate (U+{ord(value[e.start]):04X} at character "
                               f"{e.start}), not text") from None


def _check_json(value: Any, where: str, depth: int = 0) -> None:
    """Refuse what JSON cannot carry: YAML sets, dates, binary, non-text keys, non-finite
    numbers, lone surrogates."""
    if depth > 100:
        raise RecipematchError(f"{where}: nested more than 100 levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if value.bit_length() > 64:  # JSON writers and servers read 64-bit integers; str() fails past 4,300 digits
            raise RecipematchError(f"{where}: an integer of {value.bit_length()} bits is not a JSON number a server reads")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise RecipematchError(f"{where}: {value} is not a JSON number")
        return
    if isinstance(value, str):
        _check_text(value, where)
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_json(v, f"{where}[{i}]", depth + 1)
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise RecipematchError(f"{where}: key {short_repr(k, 60)} is not text (JSON keys are)")
            _check_text(k, where)
            _check_json(v, f"{where}.{k}", depth + 1)
        return
    raise RecipematchError(f"{where}: a {type(value).__name__} ({short_repr(value, 60)}) is not a JSON value")


def _check_value(v: Any, md: Mapping[str, Any], where: str) -> None:
    if isinstance(v, tuple):
        for i, x in enumerate(v):
            _check_value(x, md, f"{where}[{i}]")
        return
    if isinstance(v, float) and md.get("finite") and not math.isfinite(v):
        raise RecipematchError(f"{where} must be a finite number, got {short_repr(v, 120)}")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        lo, hi = md.get("min"), md.get("max")
        if (lo is not None and not v >= lo) or (hi is not None and not v <= hi):
            rng = f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"
            raise RecipematchError(f"{where} must lie in {rng}, got {short_repr(v, 120)}")
    if isinstance(v, str):
        if md.get("max_len") is not None and len(v) > md["max_len"]:
            raise RecipematchError(f"{where} is {len(v)} characters long; at most {md['max_len']}")
        if md.get("min") is not None and len(v) < md["min"]:
            raise RecipematchError(f"{where} must not be empty")
    choices = md.get("choices")
    if choices is not None and not isinstance(v, tuple) and v not in choices:
        raise RecipematchError(f"{where} must be one of {list(choices)}, got {short_repr(v, 120)} ({md['help']})")


#: keys an older params.yaml may still carry -> where they live now (named in the unknown-key error)
MOVED_KEYS = {"train.soup_alphas": "remedies.soup_alphas (with remedies.arms naming the arms souped)",
              "train.device": "devices.train", "evaluate.device": "devices.evaluate",
              "gates.cosine_device": "devices.cosine_gate", "backtranslate.device": "devices.backtranslate"}
#: keys an older entry of a named section may still carry (section, key) -> where they live now
MOVED_ENTRY_KEYS = {("judging", "distilled_device"): "devices.distilled_judge"}


def build(raw: Any, cls: type[T], where: str) -> T:
    if not isinstance(raw, Mapping):
        raise RecipematchError(f"{where}: expected a mapping, got {short_repr(raw, 120)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(raw) - set(names), key=str)
    if unknown:
        what = f"{where}: unknown key(s)" if where else "unknown top-level key(s)"
        moved = [f"{where}.{k} is now {MOVED_KEYS[f'{where}.{k}']}" for k in unknown if f"{where}.{k}" in MOVED_KEYS]
        moved += [f"{where}.{k} is now {MOVED_ENTRY_KEYS[(where.split('.')[0], k)]}" for k in unknown
                  if where.count(".") == 1 and (where.split(".")[0], k) in MOVED_ENTRY_KEYS]
        raise RecipematchError(f"{what} {unknown}; allowed: {names}" + (f" ({'; '.join(moved)})" if moved else ""))
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = f"{where}.{f.name}" if where else f.name
        if f.name not in raw:
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                continue
            raise RecipematchError(f"{key}: missing (params.yaml must set it)")
        v = _coerce(raw[f.name], hints[f.name], key)
        _check_value(v, f.metadata, key)
        kwargs[f.name] = v
    return cls(**kwargs)


def section(params: Mapping[str, Any], key: str, cls: type[T], *, where: str | None = None) -> T:
    """Build the frozen dataclass ``cls`` from ``params[key]`` (types and bounds checked).

    Raises:
        RecipematchError: the section or a required key is missing, a value has the wrong
            type or lies out of range, or the section has unknown keys.
    """
    if key not in params:
        raise RecipematchError(f"params.yaml has no '{key}' section")
    return build(params[key], cls, where or key)


def top(params: Mapping[str, Any], key: str, tp: Any) -> Any:
    """A typed top-level scalar or list of a raw params mapping, e.g. ``top(p, "seed", int)``.

    Raises:
        RecipematchError: missing key or wrong type.
    """
    if key not in params:
        raise RecipematchError(f"params.yaml has no top-level '{key}'")
    return _coerce(params[key], tp, key)
