"""The params schema: every key of ``params.yaml``, its type and its bounds, read once.

A stage reads ``params.yaml`` at its door (:func:`load_params`) into one frozen
:class:`Params`, checked whole before any work starts: unknown or missing keys, wrong types
and out-of-range values are refused with the dotted key named
(:class:`~recipematch.errors.RecipematchError`). The stage then sees only the keys its
``dvc.yaml`` entry declares (:meth:`Params.view`), and hands typed values to the library,
which never sees the params mapping.

Every bound lives on its field (``field(metadata=...)``: ``min``, ``max``, ``choices``,
``finite``, ``help``), so this module is the one list of what a value may be; the README's
troubleshooting table is written from it.

YAML pitfall handled here: ``dvc exp run -S lr=0.000001`` writes ``1e-06``, which YAML 1.1
loaders (PyYAML) read as a *string*. :func:`load_yaml` resolves scalars by the YAML 1.2 core
schema (as DVC's own reader does), and a numeric string for a float field is converted, so
parameters keep their types.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from recipematch.errors import RecipematchError, short_repr
from recipematch.metrics import SCORING_RULES
from recipematch.rules import EVAL_ROLES, SELF_MASK_RULES
from recipematch.rules import GAINS as GAINS_ALLOWED

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
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise yaml.constructor.ConstructorError(None, None, f"a key must be a plain scalar, got {short_repr(key, 120)}",
                                                        key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {short_repr(key, 120)}", key_node.start_mark)
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


#: what ``*api_key_env`` keys and ``--api-key-env`` may hold: the NAME of an environment
#: variable (letters, digits, _), never a key (which would then land in params, DVC and MLflow)
ENV_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")


def server_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an LLM server's base URL, or None when it can: an http(s) URL
    with a host, a port in 1-65535 if one is given, no whitespace, no ``user:password@`` part
    and no query or fragment (a key must come from an environment variable named by
    ``api_key_env``, never from params, which DVC, MLflow and the report copy).

    Returns:
        ``None``, or a short reason that does not repeat the URL's credential parts.
    """
    from urllib.parse import urlsplit

    if url != url.strip() or any(c.isspace() or not c.isprintable() for c in url):
        return "holds whitespace or a control character"
    try:
        u = urlsplit(url)
    except ValueError:
        return "is not a valid URL (check the host and the brackets of an IPv6 address)"
    # credentials first: a password holding '/', '#' or '?' is parsed as a port, and a port
    # error must not quote it
    if "@" in url:  # a password holding '/' or '#' moves its '@' out of the parsed host part
        return ("carries an '@' (a user:password part?): put the key in an environment variable and give its "
                "name in api_key_env")
    try:
        port = u.port
    except ValueError:
        return "is not a valid URL (the port must be a number in 1-65535)"
    if u.scheme not in ("http", "https") or not u.hostname:
        return "must be an http(s) URL with a host, e.g. http://127.0.0.1:8000/v1"
    if ":" not in u.hostname:  # a name or IPv4 address (an IPv6 literal holds ':')
        try:
            u.hostname.encode("idna")
        except UnicodeError:
            return "has a malformed host name (an empty or over-long label, e.g. 'a..b')"
    if u.query or u.fragment or "?" in url or "#" in url:
        return "carries a query or fragment (a key there would be copied into params, logs and MLflow)"
    if port == 0:
        return "has port 0"
    return None


def yaml_loader() -> type:
    """The project's YAML loader (a SafeLoader: YAML 1.2 scalars, a repeated key refused), for
    every YAML file a user writes (params, prompt sidecars)."""
    return _Loader


def yaml_error_line(path: str | Path, err: Exception) -> str:
    """One line for a YAML syntax error: ``FILE:LINE:COLUMN: not valid YAML: PROBLEM (CONTEXT)``
    (PyYAML's own message spans several lines and quotes the text back).

    Returns:
        the message; line and column are 1-based, left out when PyYAML gives no position.
    """
    mark = getattr(err, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else f"{path}"
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    return f"{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")


#: the most a YAML document may hold once its aliases are followed, counted as nodes plus
#: scalar characters (a params file or a prompt sidecar holds a few tens of thousands). Past
#: it the file is refused while loading, before any value is built, hashed or quoted: nine
#: nested levels of nine aliases expand to 387 million nodes from 300 bytes of text.
MAX_YAML_EXPANSION = 2_000_000

#: The largest YAML text read, in characters (params files are ~10,000; a prompt sidecar a
#: few thousand): a longer text is refused before parsing, since the parser builds a node
#: per item before the expansion bound is measured (a 2.4 MB flat list: 70 s, 884 MB).
MAX_YAML_CHARS = 262_144


def _yaml_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root: yaml.Node, where: str | Path, limit: int) -> None:
    """Refuse a node tree whose alias-expanded size passes ``limit`` or that refers to
    itself; O(distinct nodes), iterative (no recursion limit)."""
    size: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        k = id(node)
        if done:
            open_.discard(k)
            n = 1 + (len(node.value) if isinstance(node, yaml.ScalarNode) else
                     sum(size[id(c)] for c in _yaml_children(node)))
            size[k] = n
            if n > limit:
                line = node.start_mark.line + 1 if node.start_mark is not None else "?"
                raise RecipematchError(
                    f"{where}:{line}: the value starting here expands, once its aliases (*name) are followed, past "
                    f"{limit:,} nodes and characters; write the value out, or use fewer nested aliases")
            continue
        if k in size:
            continue
        if k in open_:
            line = node.start_mark.line + 1 if node.start_mark is not None else "?"
            raise RecipematchError(f"{where}:{line}: an alias refers to a value that contains it (a recursive value "
                                   f"cannot be a parameter)")
        open_.add(k)
        stack.append((node, True))
        stack.extend((c, False) for c in _yaml_children(node) if id(c) not in size)


def load_yaml_text(text: str, where: str | Path, *, limit: int = MAX_YAML_EXPANSION) -> Any:
    """Parse one YAML document with the project's loader (:func:`yaml_loader`): YAML 1.2
    scalars, a repeated key refused, and aliases bounded: a document that would expand past
    ``limit`` (:data:`MAX_YAML_EXPANSION`) nodes plus scalar characters, or that is recursive,
    is refused before any Python value is built. The one loader of params files and prompt
    sidecars.

    Args:
        text: the document (a leading byte-order mark is dropped).
        where: the file name for messages.

    Returns:
        The value (``None`` for an empty document).

    Raises:
        RecipematchError: longer than :data:`MAX_YAML_CHARS`, a character YAML does not allow,
            not valid YAML (``FILE:LINE:COLUMN``), more than one document, a repeated key,
            nesting too deep to parse, or an alias expansion past ``limit``.
    """
    if len(text) > MAX_YAML_CHARS:
        raise RecipematchError(f"{where}: {len(text):,} characters of YAML, more than the {MAX_YAML_CHARS:,} a params "
                               f"file or prompt sidecar may hold (MAX_YAML_CHARS)")
    try:
        loader = _Loader(text.lstrip("\ufeff"))  # the reader checks characters here: inside the try
    except yaml.YAMLError as e:
        raise RecipematchError(yaml_error_line(where, e)) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, where, limit)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise RecipematchError(yaml_error_line(where, e)) from None
    except RecursionError:
        raise RecipematchError(f"{where}: nested too deeply to read (thousands of levels of brackets)") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise RecipematchError(f"{where}: a value cannot be read: {str(e).splitlines()[0][:200]}") from None
    finally:
        loader.dispose()


def load_yaml_file(path: str | Path) -> Any:
    """Read one YAML document from a UTF-8 file through :func:`load_yaml_text` (any top-level value).

    Raises:
        RecipematchError: the file is missing or a folder, not UTF-8, not valid YAML, repeats a key,
            or expands past :data:`MAX_YAML_EXPANSION`.
    """
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise RecipematchError(f"{path}: file does not exist") from None
    except IsADirectoryError:
        raise RecipematchError(f"{path}: is a folder, not a YAML file") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecipematchError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    return load_yaml_text(text, path)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping with YAML 1.2 scalars and bounded aliases (:func:`load_yaml_file`).

    Raises:
        RecipematchError: the file is missing, not valid YAML or UTF-8, repeats a key,
            expands past :data:`MAX_YAML_EXPANSION`, or is not a mapping.
    """
    data = load_yaml_file(path)
    if not isinstance(data, dict):
        raise RecipematchError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


T = TypeVar("T")


def _spec(help: str, *, min: float | None = None, max: float | None = None, choices: Iterable[Any] | None = None,
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


def _deadline_spec() -> Any:
    """The total wall-clock bound of one LLM call (generator and second judge alike)."""
    return _spec("wall-clock seconds one call may take, retries and the whole answer included "
                 "(a server trickling its answer is cut off here: failure 'timeout')",
                 default=1800.0, min=1.0, max=604_800.0, finite=True)


def _max_response_spec() -> Any:
    """The body-size cap of one LLM answer (generator and second judge alike)."""
    return _spec("largest answer body read, in bytes; a longer answer fails as 'too_large' "
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
            return {k: _build(v, args[1], f"{where}.{k}") for k, v in value.items()}
        _check_json(value, where)  # a free mapping is sent or hashed as JSON (chat_template_kwargs)
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return _build(value, tp, where)
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
        if isinstance(value, str) and _FLOAT_12.match(value.strip()):
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
MOVED_KEYS = {"train.soup_alphas": "remedies.soup_alphas (with remedies.arms naming the arms souped)"}


def _build(raw: Any, cls: type[T], where: str) -> T:
    if not isinstance(raw, Mapping):
        raise RecipematchError(f"{where}: expected a mapping, got {short_repr(raw, 120)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(raw) - set(names), key=str)
    if unknown:
        what = f"{where}: unknown key(s)" if where else "unknown top-level key(s)"
        moved = [f"{where}.{k} is now {MOVED_KEYS[f'{where}.{k}']}" for k in unknown if f"{where}.{k}" in MOVED_KEYS]
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
    return _build(params[key], cls, where or key)


def top(params: Mapping[str, Any], key: str, tp: Any) -> Any:
    """A typed top-level scalar or list of a raw params mapping, e.g. ``top(p, "seed", int)``.

    Raises:
        RecipematchError: missing key or wrong type.
    """
    if key not in params:
        raise RecipematchError(f"params.yaml has no top-level '{key}'")
    return _coerce(params[key], tp, key)


# --------------------------------------------------------------------------- the sections

from recipematch.rules import GATE_VERSIONS  # noqa: E402 (the paper's rule, Appendix B)

LLM_BACKENDS = ("replay", "openai")
DEVICES = ("cpu", "cuda", "mps")


@dataclass(frozen=True)
class GatesConfig:
    """Contamination gates (paper Section 3, Appendix B). They cannot be switched off."""

    active: str = _spec("exclusion list in force: v1 (the headline arms' gate) or v2 (corrected); "
                        "gates cannot be switched off", choices=GATE_VERSIONS)
    ngram_n: int = _spec("word n-gram length of the containment gate (paper: 5)", min=1, max=50)
    ngram_threshold: float = _spec("containment above which a row is dropped, either direction (paper: 0.35)",
                                   min=0.0, max=1.0, finite=True)
    cosine_threshold: float = _spec("base-model cosine at or above which a row is dropped (paper: 0.9)",
                                    min=-1.0, max=1.0, finite=True)


@dataclass(frozen=True)
class EvalSetConfig:
    """Held-out evaluation sources (no arm trains on them; paper Section 3)."""

    seed: int = _spec("draws the held-out sources and the searched corpus sample", min=0, max=2**32 - 1)
    n_heldout: int = _spec("sources with a recorded D1 rewrite held out for the LLM-built tier (0 = build no "
                           "embedded tiers: an audit brings its own benchmark folder)", min=0, max=1_000_000)
    corpus_docs: int = _spec("corpus problems searched (0 = all, as the paper)", min=0, max=10_000_000)


@dataclass(frozen=True)
class CasConfig:
    """Computer-algebra generator limits (paper Appendix A: 30 s per problem)."""

    timeout_s: float = _spec("per-problem wall-clock limit in seconds", min=0.1, max=3600.0, finite=True)
    memory_mb: int = _spec("per-worker address-space cap in MB", min=64, max=1_048_576)
    workers: int = _spec("worker processes", min=1, max=256)


@dataclass(frozen=True)
class LLMConfig:
    """LLM generation and judging (paper Section 3; Appendix F)."""

    backend: str = _spec("replay (recorded answers) or openai (any OpenAI-compatible server, vLLM included)",
                         choices=LLM_BACKENDS)
    prompts: tuple[str, ...] = _spec("prompts to run, by name (one llm stage each)", min=1)
    model_id: str = _spec("generator model id", min=1, max_len=300)
    judge_model_id: str = _spec("judge model id", min=1, max_len=300)
    n_pos: int = _spec("positives asked for per source", min=1, max=16)
    n_neg: int = _spec("near-misses asked for per source (prompts that carry them)", min=0, max=16)
    require_tags: bool = _spec("require the judge's tags and justifications in every answer")
    temperature: float = _spec("sampling temperature", min=0.0, max=2.0, finite=True)
    top_p: float = _spec("nucleus sampling mass", min=0.0, max=1.0, finite=True)
    max_tokens: int = _spec("answer length cap in tokens", min=1, max=131_072)
    base_url: str = _spec("server URL for backend openai", default="", max_len=2000)
    api_key_env: str = _spec("NAME of the environment variable holding the server's API key ('' = none); "
                             "the key itself never lands in params, logs or stores", default="", max_len=200)
    judge_base_url: str = _spec("judge server URL ('' = the generator's server)", default="", max_len=2000)
    judge_api_key_env: str = _spec("NAME of the judge server's API-key variable", default="", max_len=200)
    chat_template_kwargs: dict = _spec("sent with every request, e.g. {enable_thinking: false} for Qwen3",
                                       default_factory=dict)
    allow_reasoning_preamble: bool = _spec("skip a <think> block or text before the JSON answer (schema kept strict)",
                                           default=False)
    concurrency: int = _spec("requests in flight", default=8, min=1, max=1024)
    max_retries: int = _spec("retries per request", default=4, min=0, max=100)
    timeout_s: float = _spec("seconds per request", default=300.0, min=0.1, max=86_400.0, finite=True)
    deadline_s: float = _deadline_spec()
    max_response_bytes: int = _max_response_spec()
    recipe_prompt: str = _spec("sidecar (.prompt.yaml, relative to the project root) of a user's prompt that plays "
                               "the recipe's role in place of the shipped D1 ('' = D1): its pairs are the recipe "
                               "arm's positives and near-misses (an audit of a benchmark written under it)",
                               default="", max_len=2000)


@dataclass(frozen=True)
class BudgetConfig:
    """Matched budget (paper Table 2, Appendix A)."""

    rows: int = _spec("rows per arm and seed (paper: 6,145)", min=1, max=10_000_000)
    dev_fraction: float = _spec("share of sources held out as dev, by source", min=1e-6, max=0.5, finite=True)
    max_rows_per_source: int = _spec("cap on rows of one source (0 = no cap)", min=0, max=1000)
    shared_sources: tuple[str, ...] = _spec("named arms drawn from one source list")


@dataclass(frozen=True)
class LoraConfig:
    """LoRA adapters instead of full fine-tuning (paper Table 2: the 4B replication, rank 16,
    learning rate 1e-4, gradient checkpointing). Off by default: all weights train."""

    enabled: bool = _spec("train LoRA adapters (peft) instead of all weights", default=False)
    rank: int = _spec("adapter rank r (paper: 16)", default=16, min=1, max=4096)
    alpha: float = _spec("adapter scaling numerator lora_alpha (scale = alpha / rank)", default=32.0, min=1e-6,
                         max=1e6, finite=True)
    dropout: float = _spec("dropout on the adapter input", default=0.0, min=0.0, max=0.99, finite=True)
    target_modules: tuple[str, ...] = _spec("module names that get adapters, e.g. [q_proj, v_proj] "
                                            "(empty: peft's default for the architecture)", default=())
    lr: float = _spec("learning rate while LoRA is on, in place of train.lr (paper: 1e-4)", default=1e-4,
                      min=1e-9, max=1.0, finite=True)


@dataclass(frozen=True)
class ReplayConfig:
    """General pairs mixed into every training file (paper Appendix E, Table 19: V1/V2's
    replay rows). Off by default (fraction 0)."""

    file: str = _spec("JSONL pair file of general pairs, relative to the project root ('' = none)", default="",
                      max_len=2000)
    fraction: float = _spec("share of the mixed training split that is replay rows (0 = off; paper V1/V2: "
                            "12,000 of 30,323)", default=0.0, min=0.0, max=0.9, finite=True)


@dataclass(frozen=True)
class TrainConfig:
    """Training (paper Section 3, Table 2, Eq. 1)."""

    seed: int = _spec("first training seed; each seed also draws its own budget rows (paper: 42)", min=0,
                      max=2**32 - 1000)
    n_seeds: int = _spec("training seeds train.seed, train.seed+1, ... (paper: 8)", min=1, max=1000)
    model: str = _spec("base model: the packaged MiniLM name or a local sentence-transformers folder", min=1,
                       max_len=2000)
    lr: float = _spec("learning rate (paper: 2e-5)", min=1e-9, max=1.0, finite=True)
    epochs: int = _spec("epochs (paper: 3)", min=1, max=1000)
    batch_size: int = _spec("examples per batch (paper: 256)", min=1, max=65_536)
    mini_batch_size: int = _spec("gradient-cache mini-batch (paper: 16)", min=1, max=65_536)
    scale: float = _spec("contrastive loss scale (paper: 20)", min=1e-6, max=1e4, finite=True)
    warmup_ratio: float = _spec("warm-up share of steps (paper: 0.05)", min=0.0, max=0.99, finite=True)
    max_seq_length: int = _spec("tokens per text in training", min=1, max=32_768)
    eval_steps: int = _spec("steps between dev evaluations (paper: 100)", min=1, max=10_000_000)
    max_dev_triplets: int = _spec("dev triplets scored (paper: 2,000)", min=1, max=10_000_000)
    device: str = _spec("cpu, cuda or mps", choices=DEVICES)
    bf16: bool = _spec("bf16 mixed precision")
    # training variants (paper Table 2, Appendix E, Table 19); the defaults leave full fine-tuning as it was
    gradient_checkpointing: bool = _spec("recompute activations in the backward pass (paper: the 4B LoRA run)",
                                         default=False)
    max_steps: int = _spec("train each seed exactly this many optimiser steps, fewer or more than train.epochs "
                           "passes would take (0 = train.epochs passes; Appendix D's step-matched SABER arm: the "
                           "summary arm at the document arm's steps)", default=0, min=0, max=10_000_000)
    lora: LoraConfig = _spec("LoRA adapters (off by default)", default_factory=LoraConfig)
    query_instruction: str = _spec("text prefixed to queries: to anchors in training and to queries when the "
                                   "trained models are scored (paper Appendix E: V2; '' = none)", default="",
                                   max_len=2000)
    replay: ReplayConfig = _spec("general pairs mixed into each training file (off by default)",
                                 default_factory=ReplayConfig)


@dataclass(frozen=True)
class RemediesConfig:
    """The two remedies for forgetting compared in paper Appendix E, Table 19, as a grid over
    some arms: WiSE-FT soups in weight space (θ = α·θ_ft + (1 − α)·θ_base, one ``soup@<arm>-<α>``
    stage per arm and α) and retraining with replay rows in data space (one
    ``mix@<arm>-<fraction>`` stage per arm and fraction). Its own section, so a grid edit
    retrains no arm. Empty ``arms``: no remedy stage."""

    arms: tuple[str, ...] = _spec("arms of `arms` given both remedies ([] = none)", default=())
    soup_alphas: tuple[float, ...] = _spec("WiSE-FT soup blends: the trained weights' share (paper Table 19: "
                                           "0.3, 0.5, 0.7; empty = no soup)", default=(), min=0.0, max=1.0,
                                           finite=True)
    replay_fractions: tuple[float, ...] = _spec("replay rows' share of the mixed training split, one retrained "
                                                "model each (paper V1/V2: 12,000 of 30,323; empty = no mix)",
                                                default=(), min=0.01, max=0.9, finite=True)
    replay_file: str = _spec("JSONL pair file the mixes draw replay rows from, relative to the project root "
                             "(the replay_pool stage writes artifacts/replay/ict.jsonl)", default="", max_len=2000)
    ict_seed: int = _spec("draws the held-out sentence of each inverse-cloze replay row (replay_pool stage)",
                          default=11, min=0, max=2**32 - 1)
    ict_min_chars: int = _spec("shortest sentence, in characters, an inverse-cloze row may use as its anchor",
                               default=20, min=1, max=100_000)


@dataclass(frozen=True)
class EvaluateConfig:
    """Evaluation (paper Section 3, Appendix A)."""

    ks: tuple[int, ...] = _spec("recall cut-offs; must include 1", min=1, max=10_000)
    max_seq_length: int = _spec("tokens per text when encoding (paper: 1,024)", min=1, max=32_768)
    batch_size: int = _spec("texts per encoding batch", min=1, max=65_536)
    device: str = _spec("cpu, cuda or mps", choices=DEVICES)
    bm25_k1: float = _spec("BM25 baseline k1 (paper: 1.5)", min=0.0, max=100.0, finite=True)
    bm25_b: float = _spec("BM25 baseline b (paper: 0.75)", min=0.0, max=1.0, finite=True)
    dtype: str = _spec("encoding precision: float32 or bfloat16 (paper: bf16, Appendix A)",
                       choices=("float32", "bfloat16"), default="float32")


EVAL_RULES_ALLOWED = tuple(SCORING_RULES)  # the one registry of scoring rules (Section 3, Appendix A)
EVAL_ROLES_ALLOWED = tuple(EVAL_ROLES)


@dataclass(frozen=True)
class EvaluationConfig:
    """One declared evaluation set (paper Section 3; roles and rules: :mod:`recipematch.rules`)."""

    folder: str = _spec("BEIR folder, relative to the project root (a stage output or a DVC-tracked folder)",
                        min=1, max_len=2000)
    rule: str = _spec("scoring rule", choices=EVAL_RULES_ALLOWED)
    role: str = _spec("benchmark (LLM-built), real (no generator), in_family (an arm's own generator), "
                      "diagnostic (not a paper set: scored and reported apart, never in a DiD) or external "
                      "(a benchmark no one in the project built, scored by its graded measures; Section 6)",
                      choices=EVAL_ROLES_ALLOWED)
    label: str = _spec("the report's row label", min=1, max_len=200)
    report_ks: tuple[int, ...] = _spec("cut-offs the report shows for this set", min=1, max=10_000)
    in_family_for: tuple[str, ...] = _spec("positives generators whose arms this set is in-family for "
                                           "(e.g. [cas] for the CAS near-miss probe)", default=())
    self_mask: str = _spec("which corpus entry is a query's own and masked: id_and_text (the entry with the "
                           "query's id and text; an ordinary BEIR folder's unrelated id match stays), id, none",
                           choices=SELF_MASK_RULES, default=SELF_MASK_RULES[0])
    measures: tuple[str, ...] = _spec("graded measures computed by ir_measures on each model's run, by the "
                                      "library's names (e.g. [nDCG@10, R@10]); the first is the one the report "
                                      "and the bootstrap gaps use; required for role external (Section 6)",
                                      default=(), max_len=200)
    gain: str = _spec("nDCG's gain: linear (trec_eval: gain = grade) or exponential (2**grade - 1, SABER-Math's)",
                      choices=GAINS_ALLOWED, default="linear")
    grade_scale: tuple[int, ...] = _spec("[lowest, highest] grade the benchmark declares; a qrels grade outside "
                                         "it is refused ([] = any integer grade)", default=(),
                                         min=-(2**31 - 1), max=2**31 - 1)
    depth: int = _spec("documents per query in the run the graded measures read", default=100, min=1,
                       max=1_000_000)
    group: str = _spec("sets sharing a group are macro-averaged, each set resampled on its own (ImpliRet's "
                       "subsets, MIRB's tasks; '' = none)", default="", max_len=64)
    version_of: str = _spec("the declared benchmark evaluation whose golds this set regenerates (a regen stage's "
                            "folder; the report's Table 24 sets the versions side by side; '' = none)",
                            default="", max_len=64)


from recipematch.rules import EXTERNAL_SUBSETS  # noqa: E402 (each loader's subsets, Section 6)

EXTERNAL_LOADERS = tuple(EXTERNAL_SUBSETS)


@dataclass(frozen=True)
class ExternalConfig:
    """One external benchmark's local copy and what to build from it (paper Section 6;
    loaders in :mod:`recipematch.external`): the ``external@<name>`` stage writes one BEIR folder
    per subset to ``artifacts/external/<name>/<subset>``. Nothing downloads: a missing copy
    stops the stage with one line (``recipematch plan`` lists it)."""

    loader: str = _spec("which loader reads the copy: impliret (the release's <style>__<category>.jsonl "
                        "files), bright (BRIGHT's documents/ and examples/ parquet files), meld (MELD's "
                        "adversarial_theorem_pairs_2.json and distractors_all.json), mirb (one BEIR folder per "
                        "MIRB task, <copy>/<task>/) or sabermath (<copy>/queries/data/*.parquet and "
                        "<copy>/documents/data/*.parquet: a reranking benchmark with real-valued 0-5 grades)",
                        choices=EXTERNAL_LOADERS)
    copy: str = _spec("the local copy, a folder relative to the project root (a DVC dependency)", min=1,
                      max_len=2000)
    subsets: tuple[str, ...] = _spec("ImpliRet subsets (<style>__<category>), BRIGHT splits, MELD's pairs_only or "
                                     "MIRB tasks or SABER-Math settings (statement-full, statement-statement, full-full) to build", min=1,
                                     max_len=200)
    revision: str = _spec("the copy's upstream revision, recorded in each MANIFEST.json", default="", max_len=200)
    max_rows: int = _spec("ImpliRet and SABER-Math only: keep each subset's first rows (ImpliRet) or the first "
                          "queries with their candidates (SABER-Math): a documented subsample; 0 = all",
                          default=0, min=0, max=100_000_000)


@dataclass(frozen=True)
class AttackConfig:
    """One MELD attack row set replayed from released rows (paper Section 6, Appendix D): the
    ``attack@<key>`` stage checks each row and writes the pair file ``artifacts/pairs/<key>.jsonl``
    that the arm of the same name trains on (gated and budgeted like every cell)."""

    rows: str = _spec("the released rows, a JSONL file relative to the project root (a DVC dependency): one "
                      "{source_id, anchor_text, positive_text, negatives: [{text}], meta} object a line", min=1,
                      max_len=2000)
    revision: str = _spec("the rows' upstream revision, recorded with the pair file", default="", max_len=200)
    seed: int = _spec("seed of the rows' own draws (saber_document: its negatives)", default=42, min=0,
                      max=2**31 - 1)


@dataclass(frozen=True)
class PoolConfig:
    """One candidate pool over a declared evaluation (:mod:`recipematch.pooling`): the
    ``pooling@<name>`` stage fuses dense routes (the named models), BM25 and word n-gram
    overlap by weighted reciprocal rank fusion and writes ``artifacts/pooling/<name>/`` and
    ``metrics/pooling/<name>.json``. Needs no LLM; the judging stages read its candidates."""

    evaluation: str = _spec("the declared evaluation whose queries and corpus are pooled (its self_mask applies)",
                            min=1, max_len=64)
    dense: tuple[str, ...] = _spec("models with a dense route each: base (train.model), arms (every arm of `arms`) "
                                   "and/or named arms; an arm has a route per trained seed", min=1, max_len=64)
    route_depth: int = _spec("documents each route contributes per query (the design: 100)", min=1, max=100_000)
    judge_depth: int = _spec("depth of the v1 (dense) and v2 (fused) pools (the design: 20)", min=1, max=100_000)
    mode: str = _spec("v1: the dense routes' top judge_depth; v2: v1 plus the fused top judge_depth",
                      choices=("v1", "v2"))
    rrf_k: float = _spec("reciprocal rank fusion's k (the design: 60)", min=0.0, max=1e9, finite=True)
    weight_dense: float = _spec("RRF weight of each dense route (the design: 2)", min=1e-9, max=1e9, finite=True)
    weight_bm25: float = _spec("RRF weight of the BM25 route (the design: 1)", min=1e-9, max=1e9, finite=True)
    weight_ngram: float = _spec("RRF weight of the n-gram route (the design: 1)", min=1e-9, max=1e9, finite=True)
    bm25_k1: float = _spec("the BM25 route's k1 (the design: 1.2)", min=0.0, max=100.0, finite=True)
    bm25_b: float = _spec("the BM25 route's b (the design: 0.75)", min=0.0, max=1.0, finite=True)
    token_pattern: str = _spec("the lexical routes' token regex, applied to lowercased text (the design: [a-z0-9]+)",
                               min=1, max_len=200)
    ngram_n: int = _spec("words per n-gram of the overlap route (the design: 5)", min=1, max=50)


@dataclass(frozen=True)
class RegenConfig:
    """One regenerated version of a declared benchmark's golds (paper Appendix E, the
    regeneration defence, Tables 24-25): the ``regen@<name>`` stage rewrites each query's gold
    another way, keeps the queries, qrels and the rest of the corpus, and writes the version as
    a BEIR folder (``artifacts/regen/<name>/``) that an ``evaluations`` entry can declare."""

    of: str = _spec("the declared benchmark evaluation whose gold documents are regenerated", min=1, max_len=64)
    source: str = _spec("llm: each query's source problem rewritten through the llm section's backend and judge "
                        "under `prompt` (replay: the recordings; openai: any OpenAI-compatible server); rows: "
                        "released regenerated golds (`rows`, `variant`)", choices=("llm", "rows"))
    prompt: str = _spec("source llm: the rewriting prompt (d1_recipe, d2_paraphrase, d3_style, d4_restatement, "
                        "d5_survey)", default="", max_len=64)
    rows: str = _spec("source rows: a JSON file under data/ shaped like the release's "
                      "data/defense_eval/regen_manifest.json ({queries: {id: {variant: {text, verified}}}})",
                      default="", max_len=2000)
    variant: str = _spec("source rows: which regenerated variant (the release: exact, paraphrase, style)",
                         default="", max_len=64)
    missing: str = _spec("a query left without a regenerated gold (failed, rejected or unverified): error (stop, "
                         "write nothing) or drop (leave the query out, counted)", choices=("error", "drop"),
                         default="error")


@dataclass(frozen=True, kw_only=True)
class _ClientConfig:
    """The LLM client of a labelling stage (judging, SABER): replay from recordings or an
    OpenAI-compatible server, with the sampling and transport settings every call sends.
    ``_section`` names the params section in error messages."""

    _section = "llm"

    backend: str = _spec("replay (recordings) or openai (an OpenAI-compatible server)", choices=LLM_BACKENDS,
                         default="replay")
    recordings: str = _spec("replay: the recordings JSONL (a live run's store gives one)", default="", max_len=2000)
    model_id: str = _spec("the judge model id (every label records it)", default="", max_len=300)
    base_url: str = _spec("server URL for backend openai", default="", max_len=2000)
    api_key_env: str = _spec("NAME of the environment variable holding the server's API key ('' = none)",
                             default="", max_len=200)
    temperature: float = _spec("sampling temperature", default=0.0, min=0.0, max=2.0, finite=True)
    top_p: float = _spec("nucleus sampling mass", default=1.0, min=0.0, max=1.0, finite=True)
    max_tokens: int = _spec("answer length cap in tokens", default=1024, min=1, max=131_072)
    seed: int = _spec("sampling seed sent with every call", default=42, min=0, max=2**31 - 1)
    concurrency: int = _spec("requests in flight", default=8, min=1, max=1024)
    max_retries: int = _spec("retries per request", default=4, min=0, max=100)
    timeout_s: float = _spec("seconds per request", default=300.0, min=0.1, max=86_400.0, finite=True)

    def __post_init__(self) -> None:
        where = self._section
        if not self.model_id.strip():
            raise RecipematchError(f"{where}.model_id: name the judge model (every label records it)")
        if self.backend == "openai" and not self.base_url:
            raise RecipematchError(f"{where}: backend openai needs base_url (e.g. http://127.0.0.1:8000/v1)")
        if self.base_url and (why := server_url_problem(self.base_url)):  # as llm.base_url: never a key in params
            raise RecipematchError(f"{where}.base_url {why}")
        if self.api_key_env and not ENV_VAR_NAME.fullmatch(self.api_key_env):
            raise RecipematchError(f"{where}.api_key_env must be the NAME of an environment variable, never the key")


@dataclass(frozen=True, kw_only=True)
class JudgingConfig(_ClientConfig):
    """Graded judging of one candidate pool (:mod:`recipematch.judging`): the LLM judge for the
    routed pairs (replay or an OpenAI-compatible server, every call in a store), a distilled
    cross-encoder for the rest, graded qrels out. Needs the user's judge prompt: none ships."""

    _section = "judging"

    pool: str = _spec("the pooling entry whose pool is judged", min=1, max_len=64)
    folder: str = _spec("the folder holding this run's own files (prompt, system_prompt, rubric, recordings: each "
                        "must lie inside it); dvc.yaml tracks it whole", min=1, max_len=2000)
    prompt: str = _spec("the judge prompt template (a file in the project; the user message, with the slots "
                        "{{task_id}}, {{query}} and {{document}})", min=1, max_len=2000)
    system_prompt: str = _spec("a file holding the system message ('' = none)", default="", max_len=2000)
    rubric: str = _spec("the rubric JSON ('' = the shipped strict-math-retrieval-v1)", default="", max_len=2000)
    structured_output: bool = _spec("ask the server to decode under the answer's JSON Schema", default=False)
    llm_fused_ranks: int = _spec("pairs at fused ranks 1..this go to the LLM judge (the design: 5; 0 = none)",
                                 default=5, min=0, max=100_000)
    llm_dense_ranks: int = _spec("pairs some dense route ranks 1..this go to the LLM judge (the design: 5)",
                                 default=5, min=0, max=100_000)
    long_chars: int = _spec("documents longer than this many characters go to the LLM judge (0 = off)",
                            default=30_000, min=0, max=100_000_000)
    max_doc_chars: int = _spec("characters of a document the LLM judge reads (the design: 30,000)",
                               default=30_000, min=1, max=100_000_000)
    long_max_doc_chars: int = _spec("characters of a long document the LLM judge reads (the design: 100,000)",
                                    default=100_000, min=1, max=100_000_000)
    distilled_model: str = _spec("base model of the distilled judge (a local folder or a packaged name)",
                                 default="all-MiniLM-L6-v2", min=1, max_len=2000)
    distilled_epochs: int = _spec("training epochs of the distilled judge", default=2, min=1, max=1000)
    distilled_batch_size: int = _spec("its batch size", default=16, min=1, max=4096)
    distilled_learning_rate: float = _spec("its learning rate", default=5e-5, min=1e-9, max=1.0, finite=True)
    distilled_max_length: int = _spec("tokens of a (query, document) pair it reads", default=256, min=8, max=32_768)
    distilled_device: str = _spec("torch device of the distilled judge", default="cpu", min=1, max_len=32)
    heldout_fraction: float = _spec("share of LLM-labelled queries held out of its training for the agreement "
                                    "check (disjoint by query)", default=0.2, min=0.0, max=0.9, finite=True)
    split_seed: int = _spec("seed of the held-out query draw", default=42, min=0, max=2**31 - 1)
    train_seed: int = _spec("seed of the distilled judge's training", default=42, min=0, max=2**31 - 1)
    min_train_pairs: int = _spec("fewest LLM labels it trains on (fewer: the distilled pairs stay unjudged, "
                                 "counted)", default=8, min=1, max=10_000_000)
    cut_low: float = _spec("raw score below this is 0 (the design: 0.5)", default=0.5, finite=True, min=-1e6,
                           max=1e6)
    cut_high: float = _spec("raw score below this is 1, else 2 (the design: 1.5)", default=1.5, finite=True,
                            min=-1e6, max=1e6)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.cut_low < self.cut_high:
            raise RecipematchError(f"judging: cut_low {self.cut_low} must be below cut_high {self.cut_high}")


@dataclass(frozen=True, kw_only=True)
class SaberConfig(_ClientConfig):
    """SABER-Math's labelling of one problem corpus (:mod:`recipematch.saber`; SABER-Math
    Sections 3.2-3.5): topic and summary similarity, three-category candidates, a Swiss
    tournament of pairwise LLM judgments, Bradley-Terry grades in [0, 5]. The judge model
    also writes the core-idea summaries."""

    _section = "saber"

    folder: str = _spec("the folder holding this run's files (corpus, ontology, topics, prompts, queries, "
                        "summaries, recordings: each must lie inside it); dvc.yaml tracks it whole", min=1,
                        max_len=2000)
    corpus: str = _spec("the problems: a BEIR corpus.jsonl (rows may carry a 'solution' field)", min=1, max_len=2000)
    ontology: str = _spec("the topic tree: JSON {node: parent or null}", min=1, max_len=2000)
    topics: str = _spec("JSONL {\"_id\", \"topics\": [nodes]} for the problems (their most specific topics; '' "
                        "= assigned by the LLM's top-down walk of the ontology with topic_prompt)", default="",
                        max_len=2000)
    topic_prompt: str = _spec("the topic scorer's template, read when topics is '' (a file; slots {{text}} and "
                              "{{tags}}; the answer is JSON {tag: score in [0, 1]}; SABER-Math Appendix F.1 "
                              "gives one); none ships", default="", max_len=2000)
    topic_system_prompt: str = _spec("a file holding the topic scorer's system message ('' = none)", default="",
                                     max_len=2000)
    tau_assign: float = _spec("a child is kept when its score over the largest of its node's call exceeds this "
                              "(SABER-Math Section 3.2.2: 0.85)", default=0.85, min=0.0, max=0.999999, finite=True)
    judge_prompt: str = _spec("the pairwise judge's template (a file; slots {{query}}, {{first}}, {{second}}; the "
                              "answer is A or B, bare or as JSON {\"preferred\": ...}); none ships", min=1,
                              max_len=2000)
    queries: str = _spec("JSONL of {\"_id\"} naming the query problems ('' = every problem may be one)", default="",
                         max_len=2000)
    summaries: str = _spec("JSONL {\"_id\", \"summary\"} of core-idea summaries ('' = through the LLM with the "
                           "shipped saber_core_idea prompt, reading each row's text and solution)", default="",
                           max_len=2000)
    tau_topic: float = _spec("topic-relevance threshold (SABER-Math: 0.858)", default=0.858, min=0.0, max=1.0,
                             finite=True)
    tau_summ: float = _spec("summary-relevance threshold (SABER-Math: 0.211)", default=0.211, min=0.0, max=1.0,
                            finite=True)
    k: int = _spec("candidates drawn per category and query (SABER-Math: K = 50)", default=50, min=1, max=100_000)
    max_queries: int = _spec("queries kept among the eligible, drawn uniformly (SABER-Math: 1,000; 0 = all)",
                             default=1000, min=0, max=10_000_000)
    stratify: bool = _spec("draw max_queries evenly over the top-level topics (the root's children; SABER-Math "
                           "Section 3.4) rather than uniformly over all eligible", default=True)
    rounds: int = _spec("Swiss tournament rounds (SABER-Math: R = 20)", default=20, min=1, max=10_000)
    both_orders: bool = _spec("judge every pair in both orders; disagreeing orders are a failure", default=False)
    bt_alpha: float = _spec("L2 regularisation of the Bradley-Terry fit (choix)", default=0.01, min=1e-12, max=1e6,
                            finite=True)
    selection_seed: int = _spec("seed of the query and candidate draws", default=42, min=0, max=2**31 - 1)
    tournament_seed: int = _spec("seed of the tournaments' pairings (query i uses this + i)", default=42, min=0,
                                 max=2**31 - 1)
    extra_stop_words: tuple[str, ...] = _spec("stop words added to scikit-learn's English list for the summary "
                                              "Jaccard (SABER-Math's mathematics list is in its supplement)",
                                              default=())
    max_doc_chars: int = _spec("characters of each problem the judge reads", default=30_000, min=1,
                               max=100_000_000)


@dataclass(frozen=True, kw_only=True)
class MeldGenerateConfig(_ClientConfig):
    """One MELD attack row set generated through the LLM backends (:mod:`recipematch.external.meld_generate`;
    paper Section 6, Appendix D): the reconstructed MELD procedure (or the rewritten-prompt control, by
    the entry's name), MELD's validity and equivalence screen, rows in the release's schema. The entry's
    name is the row set (meld9, meld_heldout, meld9alt, meld9altm); point ``attacks.<name>.rows`` at
    ``artifacts/meld_generate/<name>/pairs.jsonl`` to train on them."""

    _section = "meld_generate"

    folder: str = _spec("the folder holding this run's files (domains, recordings: each must lie inside it); "
                        "dvc.yaml tracks it whole", min=1, max_len=2000)
    domains: str = _spec("the domain table: JSONL {domain, field_1, field_2, connection} per domain pair (MELD's nine "
                         "framing pairs for meld9; the connection texts are the attacker's)", min=1, max_len=2000)
    n_pairs: int = _spec("pairs asked for per call (MELD: 30)", default=30, min=1, max=1000)
    rounds: int = _spec("calls per domain pair; later rounds pass back the topics already written", default=24,
                        min=1, max=10_000)
    target_pairs: int = _spec("stop after the round in which this many pairs have passed the screen (0 = run every "
                              "round)", default=0, min=0, max=10_000_000)
    greedy_first_round: bool = _spec("round 1 at temperature 0 (the paper's meld9 arm)", default=True)
    screen: bool = _spec("MELD's three-question screen; a pair is kept when both statements are valid and "
                         "equivalent (false: every parsed pair is kept)", default=True)
    negatives: int = _spec("same-framing negatives per row, from the run's own kept pool (the paper: 3)", default=3,
                           min=1, max=100)
    direction: str = _spec("random: one row per pair, the anchor side drawn; both: a row each way",
                           default="random", choices=("random", "both"))
    row_seed: int = _spec("seed of the directions and negatives", default=42, min=0, max=2**31 - 1)
    temperature: float = _spec("sampling temperature of the generation rounds after the first (the paper: 1.0; the "
                               "screen runs at 0)", default=1.0, min=0.0, max=2.0, finite=True)
    max_tokens: int = _spec("answer length cap in tokens (30 LaTeX pairs need several thousand)", default=8192,
                            min=1, max=131_072)
    model_id: str = _spec("the generator model id (it writes and screens the pairs; every row records it)",
                          default="", max_len=300)


@dataclass(frozen=True)
class StatsConfig:
    """Statistics (paper Appendix A: nested bootstrap, B = 5,000)."""

    n_boot: int = _spec("bootstrap replicates", min=100, max=100_000)
    seed: int = _spec("bootstrap seed", min=0, max=2**32 - 1)
    paired_seeds: bool = _spec("resample seed indices shared by both arms (true) or each arm's own (false)")


@dataclass(frozen=True)
class StyleConfig:
    """Style probe and style tracking (paper Appendix C, Tables 13–15)."""

    train_prompt: str = _spec("prompt whose rewrites train the detector (paper: D1)", min=1, max_len=100)
    score_prompts: tuple[str, ...] = _spec("prompts whose held-out rewrites are scored (Table 13 rows)", min=1)
    test_fraction: float = _spec("share of source ids held out", min=0.01, max=0.99, finite=True)
    seed: int = _spec("split, bootstrap and query-sampling seed", min=0, max=2**32 - 1)
    n_boot: int = _spec("bootstrap replicates over held-out sources (paper: 2,000)", min=100, max=100_000)
    level: float = _spec("interval coverage", min=0.5, max=0.999, finite=True)
    C: float = _spec("logistic-regression inverse regularisation", min=1e-6, max=1e6, finite=True)
    max_iter: int = _spec("logistic-regression iterations", min=10, max=100_000)
    tracking_set: str = _spec("declared evaluation whose corpus style tracking ranks", min=1, max_len=64)
    tracking_queries: int = _spec("queries sampled for tracking (paper: 2,000)", min=1, max=1_000_000)
    top_k: int = _spec("retrieved documents whose style percentile is reported (paper: 10)", min=1, max=10_000)


@dataclass(frozen=True)
class HitsConfig:
    """Hit accounting (paper Section 7): the queries one model alone ranks a gold first on."""

    contrasts: tuple[str, ...] = _spec("model pairs 'a - b' whose sole wins are counted on every benchmark set "
                                       "(arms, 'cell' or base/bm25; a pair naming an arm not run is skipped)",
                                       default=("recipe - verified",))
    k: int = _spec("a win is a gold within the top k (paper: 1)", default=1, min=1, max=1000)
    probe: str = _spec("declared evaluation whose queries give probe discrimination ('' = none)",
                       default="probe", max_len=64)


@dataclass(frozen=True)
class Judge2Config:
    """The second judge of the two-judge control (paper Section 3, Appendix C): another
    vendor's model re-judges every candidate of each LLM arm under the same judge prompt;
    the cells may train on the rows both judges accept. Off by default (the sample ships no
    second-judge answers)."""

    enabled: bool = _spec("run the second judge (false: the judge2 stages only record that they are off)",
                          default=False)
    backend: str = _spec("replay (recordings/judge2/<prompt>.jsonl) or openai (its own OpenAI-compatible server)",
                         choices=LLM_BACKENDS, default="replay")
    model_id: str = _spec("the second judge's model id", default="mistralai/Mistral-Small-24B-Instruct-2501",
                          min=1, max_len=300)
    base_url: str = _spec("the second judge's server URL (backend openai)", default="", max_len=2000)
    api_key_env: str = _spec("NAME of the environment variable holding its server's API key ('' = none)",
                             default="", max_len=200)
    temperature: float = _spec("sampling temperature", default=0.0, min=0.0, max=2.0, finite=True)
    top_p: float = _spec("nucleus sampling mass", default=1.0, min=0.0, max=1.0, finite=True)
    max_tokens: int = _spec("answer length cap in tokens", default=1024, min=1, max=131_072)
    chat_template_kwargs: dict = _spec("sent with every second-judge request", default_factory=dict)
    allow_reasoning_preamble: bool = _spec("skip a <think> block or text before the JSON verdict", default=False)
    concurrency: int = _spec("requests in flight", default=8, min=1, max=1024)
    max_retries: int = _spec("retries per request", default=4, min=0, max=100)
    timeout_s: float = _spec("seconds per request", default=300.0, min=0.1, max=86_400.0, finite=True)
    deadline_s: float = _deadline_spec()
    max_response_bytes: int = _max_response_spec()
    cells: str = _spec("the keep set the cells read for LLM pair files: first (the first judge's) or both "
                       "(rows both judges accept; needs enabled: true)", choices=("first", "both"), default="first")

    def __post_init__(self) -> None:
        if self.cells == "both" and not self.enabled:
            raise RecipematchError("judge2.cells: both needs judge2.enabled: true (the two-judge files come from "
                                   "the judge2 stages)")
        if self.enabled and self.backend == "openai" and not self.base_url:
            raise RecipematchError("judge2.base_url: backend openai needs the second judge's server URL "
                                   "(e.g. http://127.0.0.1:8001/v1)")
        if self.api_key_env and not ENV_VAR_NAME.fullmatch(self.api_key_env):
            raise RecipematchError("judge2.api_key_env must be the NAME of an environment variable "
                                   "(letters, digits, _), never the key itself")


@dataclass(frozen=True)
class BacktranslateConfig:
    """The back-translation control (paper Appendix C): NLLB round trips as positives no LLM
    wrote (cells with positives bt = one hop, bt3 = three hops). The stage translates only
    when an arm reads bt or bt3, and only with the model's files present locally."""

    model_dir: str = _spec("local folder of the translation model (NLLB-200-distilled-600M in the paper), "
                           "relative to the project root; keep it under mt_models/ so DVC sees new weights",
                           default="mt_models/nllb-200-distilled-600M", min=1, max_len=2000)
    model_id: str = _spec("the model id recorded in each row's provenance",
                          default="facebook/nllb-200-distilled-600M", min=1, max_len=300)
    languages: tuple[str, ...] = _spec("source languages translated (ISO 639-1 tags); empty = every language "
                                       "NLLB knows; others are dropped and counted", default=())
    default_language: str = _spec("tag for corpus rows without a language ('' = such rows are dropped and "
                                  "counted as unsupported_language)", default="", max_len=20)
    max_sources: int = _spec("sources translated, in source-id order (0 = all)", default=0, min=0,
                             max=10_000_000)
    device: str = _spec("cpu, cuda or mps", choices=DEVICES, default="cpu")
    batch_size: int = _spec("lines per generate call", default=16, min=1, max=65_536)
    num_beams: int = _spec("beam width (1 = greedy)", default=4, min=1, max=64)
    max_input_tokens: int = _spec("input tokens per line (longer lines are cut)", default=512, min=4,
                                  max=32_768)
    max_new_tokens: int = _spec("output tokens per line", default=512, min=1, max=32_768)

    def __post_init__(self) -> None:
        if Path(self.model_dir).is_absolute() or ".." in Path(self.model_dir).parts:
            raise RecipematchError(f"backtranslate.model_dir must be a folder inside the project, got {short_repr(self.model_dir, 120)}")


ENGINE_KINDS = ("local", "ray")


@dataclass(frozen=True)
class EngineConfig:
    """Where the (arm, seed) units of the train and evaluate stages run (paper Section 3:
    every arm over 8 training seeds). Execution only: results do not depend on it, so it is
    no DVC param of any stage (see :mod:`recipematch.engine`)."""

    kind: str = _spec("local (units one after another in the stage's process) or ray (Ray tasks)",
                      choices=ENGINE_KINDS, default="local")
    address: str = _spec("ray: '' starts Ray on this machine; the head's HOST:PORT joins a running cluster "
                         "(run the stage on a node of it)", default="", max_len=500)
    workers: int = _spec("units running at once (ray)", default=1, min=1, max=4096)
    num_cpus: int = _spec("CPUs reserved per unit (ray); also the unit's torch threads", default=1, min=1, max=1024)
    num_gpus: float = _spec("GPUs reserved per unit (ray; 0.5 puts two units on one GPU)", default=0.0, min=0.0,
                            max=64.0, finite=True)
    connect_timeout_s: float = _spec("seconds to wait for engine.address to answer", default=10.0, min=0.1,
                                     max=600.0, finite=True)
    retries: int = _spec("times Ray reruns a unit whose worker died (0: the stage fails; its rerun redoes only the "
                         "unfinished units)", default=0, min=0, max=100)


_URI = re.compile(r"^(?:sqlite:///.+|https?://[^\s/]+.*|file:.+)$")


@dataclass(frozen=True)
class MlflowConfig:
    """Tracking store; a relative sqlite path is resolved against the project root."""

    tracking_uri: str = _spec("sqlite:///PATH, http(s)://HOST:PORT or file:PATH", min=1, max_len=2000)
    experiment: str = _spec("experiment name", min=1, max_len=200)


@dataclass(frozen=True)
class DataConfig:
    """Where the organic source problems come from (paper Section 3)."""

    source: str = _spec("sample (the shipped 2,500-problem sample), mathnet (the full MathNet corpus, a "
                        "local Hugging Face dataset folder) or jsonl (any organic pool: one JSON object per "
                        "line with id and text)", choices=("sample", "mathnet", "jsonl"))
    path: str = _spec("file or folder of that source, relative to the project root", min=1, max_len=2000)
    retrieve: str = _spec("local MathNet-Retrieve folder (easy/, medium/, hard/ as on the Hugging Face hub), "
                          "relative to the project root; the evalsets stage writes its tiers to "
                          "artifacts/evalsets/mathnet_retrieve/<tier> for declared evaluations ('' = none)",
                          default="", max_len=2000)


@dataclass(frozen=True)
class Params:
    """The whole ``params.yaml``, checked (see :func:`load_params`)."""

    seed: int = _spec("pair-building seed (CAS draws, LLM sampling, cell assembly); training seeds are train.seed",
                      min=0, max=2**32 - 1)
    positives: str = _spec("the cell under test: positives", min=1)
    negatives: str = _spec("the cell under test: negatives", min=1)
    negatives_volume: str = _spec("the cell under test: LLM negative volume", min=1)
    arms: tuple[str, ...] = _spec("arms trained and scored: named cells and/or 'cell'", min=1)
    contrasts: tuple[str, ...] = _spec("gaps the report shows, each 'arm - arm' (Table 1, Tables 9 and 12)", min=1)
    evalsets: EvalSetConfig = _spec("held-out evaluation sources")
    gates: GatesConfig = _spec("contamination gates")
    cas: CasConfig = _spec("computer-algebra generator")
    llm: LLMConfig = _spec("LLM generation and judging")
    budget: BudgetConfig = _spec("matched budget")
    train: TrainConfig = _spec("training")
    evaluate: EvaluateConfig = _spec("evaluation")
    evaluations: dict[str, EvaluationConfig] = _spec("every evaluation set each model is scored on, by name")
    stats: StatsConfig = _spec("statistics")
    style: StyleConfig = _spec("style probe and tracking")
    mlflow: MlflowConfig = _spec("tracking")
    data: DataConfig = _spec("organic source problems")
    external: dict[str, ExternalConfig] = _spec("external benchmarks built from local copies (Section 6), by name "
                                                "({} = none; the key is required: dvc.yaml builds one stage per entry)")
    attacks: dict[str, AttackConfig] = _spec("MELD attack row sets replayed from released rows (Section 6, "
                                             "Appendix D), by pair-file key ({} = none; required like external)")
    pooling: dict[str, PoolConfig] = _spec("candidate pools over declared evaluations, by name ({} = none; required "
                                           "like external: dvc.yaml builds one stage per entry)")
    judging: dict[str, JudgingConfig] = _spec("graded judging of candidate pools, by name ({} = none; required like "
                                              "pooling: dvc.yaml builds one stage per entry)")
    saber: dict[str, SaberConfig] = _spec("SABER-Math labelling runs, by name ({} = none; required like pooling)")
    meld_generate: dict[str, MeldGenerateConfig] = _spec("MELD attack row sets generated through the LLM backends "
                                                         "(Appendix D), by row-set name ({} = none; dvc.yaml builds "
                                                         "one stage per entry)", default_factory=dict)
    regen: dict[str, RegenConfig] = _spec("regenerated gold versions of declared benchmarks (Appendix E), by name "
                                          "({} = none; dvc.yaml builds one stage per entry)", default_factory=dict)
    hits: HitsConfig = _spec("hit accounting: sole wins (Section 7)", default_factory=HitsConfig)
    remedies: RemediesConfig = _spec("the remedies for forgetting (Appendix E, Table 19): soups and replay mixes",
                                     default_factory=RemediesConfig)
    judge2: Judge2Config = _spec("the second judge (two-judge control)", default_factory=Judge2Config)
    backtranslate: BacktranslateConfig = _spec("the back-translation control", default_factory=BacktranslateConfig)
    engine: EngineConfig = _spec("where training and evaluation units run (execution only)",
                                 default_factory=EngineConfig)

    def view(self, keys: Iterable[str]) -> ParamsView:
        """The keys a stage declared (dotted, e.g. ``"gates.active"`` or ``"budget"``);
        reading any other key raises :class:`UndeclaredParam`."""
        return ParamsView(self, frozenset(keys))


#: Every top-level key of params.yaml; anything else is a typo and is refused.
TOP_LEVEL_KEYS = tuple(f.name for f in dataclasses.fields(Params))


def _cross_checks(p: Params) -> None:
    """Rules that join several keys."""
    from recipematch.rules import LLM_PROMPTS, NAMED_ARMS, CellSpec

    try:
        CellSpec(p.positives, p.negatives, p.negatives_volume)
    except RecipematchError as e:
        raise RecipematchError(f"positives/negatives/negatives_volume: {e}") from None
    bad = [a for a in p.arms if a != "cell" and a not in NAMED_ARMS]
    if bad or len(set(p.arms)) != len(p.arms) or not p.arms:
        raise RecipematchError(f"arms must be distinct names from {sorted(NAMED_ARMS)} or 'cell'; got {list(p.arms)}")
    _check_contrasts(p)
    bad = [a for a in p.budget.shared_sources if a not in NAMED_ARMS]
    if bad:
        raise RecipematchError(f"budget.shared_sources may list named arms only; unknown: {bad}")
    if p.budget.shared_sources and (len(p.budget.shared_sources) < 2
                                    or len(set(p.budget.shared_sources)) != len(p.budget.shared_sources)):
        raise RecipematchError("budget.shared_sources: list two or more distinct named arms (or none)")
    if len(set(p.evaluate.ks)) != len(p.evaluate.ks):
        raise RecipematchError(f"evaluate.ks lists a cut-off twice: {list(p.evaluate.ks)}")
    for key, name in (("llm.api_key_env", p.llm.api_key_env), ("llm.judge_api_key_env", p.llm.judge_api_key_env)):
        if name and not ENV_VAR_NAME.fullmatch(name):
            raise RecipematchError(f"{key} must be the NAME of an environment variable (letters, digits, _), "
                                   f"never the key itself")
    bad = [x for x in p.llm.prompts if x not in LLM_PROMPTS]
    if bad or len(set(p.llm.prompts)) != len(p.llm.prompts) or not p.llm.prompts:
        raise RecipematchError(f"llm.prompts must be distinct names from {list(LLM_PROMPTS)}; got {list(p.llm.prompts)}")
    if p.llm.backend == "openai" and not p.llm.base_url:
        raise RecipematchError("llm.base_url: backend openai needs the server's URL (e.g. http://127.0.0.1:8000/v1)")
    for key, url in (("llm.base_url", p.llm.base_url), ("llm.judge_base_url", p.llm.judge_base_url),
                     ("judge2.base_url", p.judge2.base_url)):
        if url and (why := server_url_problem(url)):
            raise RecipematchError(f"{key} {why}")
    if 1 not in p.evaluate.ks:
        raise RecipematchError(f"evaluate.ks must be cut-offs >= 1 including 1 (the report's R@1), got {list(p.evaluate.ks)}")
    if not p.evaluations:
        raise RecipematchError("evaluations: declare at least one evaluation set")
    for name, ev in p.evaluations.items():
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]{0,63}", name):
            raise RecipematchError(f"evaluations.{name}: a name starts with a letter, then up to 63 letters, "
                                   f"digits, '_' or '-'")
        if not ev.report_ks:
            raise RecipematchError(f"evaluations.{name}.report_ks: list at least one cut-off")
        if ev.folder.strip() in (".", "") or ev.folder.startswith("~"):
            raise RecipematchError(f"evaluations.{name}.folder must be a folder inside the project, got {short_repr(ev.folder, 120)}")
        bad = [k for k in ev.report_ks if k not in p.evaluate.ks]
        if bad:
            raise RecipematchError(f"evaluations.{name}.report_ks {bad} are not in evaluate.ks {list(p.evaluate.ks)}")
        if Path(ev.folder).is_absolute() or ".." in Path(ev.folder).parts:
            raise RecipematchError(f"evaluations.{name}.folder must be relative to the project root, got {short_repr(ev.folder, 120)}")
        _check_graded_evaluation(name, ev)
        from recipematch.rules import POSITIVES
        bad = [g for g in ev.in_family_for if g not in POSITIVES]
        if bad:
            raise RecipematchError(f"evaluations.{name}.in_family_for: unknown positives {bad}; choose from {sorted(POSITIVES)}")
    _check_external(p)
    _check_attacks(p)
    _check_pooling(p)
    _check_regen(p)
    _check_judging(p)
    _check_saber(p)
    _check_meld_generate(p)
    e = p.engine
    if e.kind == "local" and (e.workers != 1 or e.address or e.num_gpus):
        raise RecipematchError("engine.workers, engine.address and engine.num_gpus need engine.kind: ray "
                               "(local runs units one after another in the stage's process)")
    if p.style.train_prompt not in p.style.score_prompts:
        raise RecipematchError(f"style.train_prompt {short_repr(p.style.train_prompt, 120)} must be one of style.score_prompts")
    bad = [x for x in p.style.score_prompts if x not in p.llm.prompts]
    if bad:
        raise RecipematchError(f"style.score_prompts {bad} are not in llm.prompts {list(p.llm.prompts)}")
    _check_hits(p)
    if p.style.tracking_set not in p.evaluations:
        raise RecipematchError(f"style.tracking_set {short_repr(p.style.tracking_set, 120)} is not a declared evaluation")
    if not any(ev.role == "benchmark" for ev in p.evaluations.values()):
        raise RecipematchError("evaluations: declare at least one set with role: benchmark")
    if p.train.replay.fraction > 0 and not p.train.replay.file:
        raise RecipematchError("train.replay.fraction > 0 needs train.replay.file (a JSONL pair file)")
    _check_remedies(p)
    if not _URI.match(p.mlflow.tracking_uri):
        raise RecipematchError(f"mlflow.tracking_uri must be sqlite:///PATH, http(s)://HOST[:PORT] or file:PATH, "
                               f"got {short_repr(p.mlflow.tracking_uri, 120)}")
    if re.search(r"\s", p.mlflow.tracking_uri):
        raise RecipematchError("mlflow.tracking_uri must not contain blanks")
    for key, value in (("data.path", p.data.path), ("data.retrieve", p.data.retrieve)):
        if value and (Path(value).is_absolute() or ".." in Path(value).parts or value.startswith("~")
                      or value.strip() in (".", "")):
            raise RecipematchError(f"{key} must be a file or folder inside the project, relative to its root "
                                   f"(DVC hashes it as a dependency), got {short_repr(value, 120)}")
    if any(ord(c) < 32 for c in p.mlflow.experiment):
        raise RecipematchError("mlflow.experiment must not contain control characters")


def _check_attacks(p) -> None:
    """Each attack is one of the MELD or SABER row sets, its rows a file inside the project; an arm that
    trains on one needs it declared (one line naming the arm and the file to declare)."""
    from recipematch.rules import ATTACKS, NAMED_ARMS, CellSpec, missing_input_message

    for key, a in p.attacks.items():
        if key not in ATTACKS:
            raise RecipematchError(f"attacks.{key}: unknown row set; choose from {list(ATTACKS)}")
        if (Path(a.rows).is_absolute() or ".." in Path(a.rows).parts or a.rows.startswith("~")
                or a.rows.strip() in (".", "", "./") or a.rows.endswith("/") or any(ord(c) < 32 for c in a.rows)):
            raise RecipematchError(f"attacks.{key}.rows must be a file inside the project, relative to its root "
                                   f"(DVC hashes it as a dependency), got {short_repr(a.rows, 120)}")
    for arm in p.arms:
        spec = CellSpec(p.positives, p.negatives, p.negatives_volume) if arm == "cell" else NAMED_ARMS.get(arm)
        for key in spec.inputs() if spec else ():
            if key in ATTACKS and key not in p.attacks:
                raise RecipematchError(f"arms[{arm}]: {missing_input_message(spec, key)}")


def pool_models(dense: Iterable[str], arms: Iterable[str]) -> list[str]:
    """A pool's dense models with ``arms`` expanded to every arm of ``arms``, in order (so an
    ablation that changes ``arms`` pools its own arms)."""
    out: list[str] = []
    for m in dense:
        out.extend(arms if m == "arms" else [m])
    return out


#: a stage-entry name (pooling@NAME, judging@NAME, ...): it is a path part and a DVC foreach key
ENTRY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def _check_entry_name(where: str, name: str) -> None:
    if not ENTRY_NAME.fullmatch(name):
        raise RecipematchError(f"{where}: a name is letters, digits, '_' or '-', at most 64")


def _check_inside_project(where: str, cfg: Any, keys: Iterable[str]) -> None:
    """Each of ``cfg``'s file keys ``keys`` that is set is a relative path without '..'."""
    for key in keys:
        val = getattr(cfg, key)
        if val and (Path(val).is_absolute() or ".." in Path(val).parts):
            raise RecipematchError(f"{where}.{key} must be a path inside the project, got {short_repr(val, 100)}")


#: top-level folders that hold stage outputs, caches or code: never a labelling run's input folder
_NOT_INPUT_FOLDERS = frozenset({"artifacts", "metrics", "reports", "cache", "models", "mlruns", ".git", ".dvc",
                                "src", "stages", "tests", ".venv"})


def _check_inside_folder(where: str, cfg: Any, keys: Iterable[str]) -> None:
    """``cfg.folder`` is inside the project and each set file key of ``keys`` lies inside it:
    a labelling stage's dvc.yaml entry declares that folder, so every file it reads is a dep."""
    _check_inside_project(where, cfg, ("folder", *keys))
    top = Path(cfg.folder)
    if top.parts in ((), (".",)):
        raise RecipematchError(f"{where}.folder must name a folder below the project root, got {cfg.folder!r}")
    if (top.parts[0] in _NOT_INPUT_FOLDERS or cfg.folder != cfg.folder.strip()
            or any(c in cfg.folder for c in "~$\\") or any(ord(c) < 32 for c in cfg.folder)):
        raise RecipematchError(f"{where}.folder {short_repr(cfg.folder, 100)} must be a plain folder of inputs, not "
                               f"under {sorted(_NOT_INPUT_FOLDERS)} (stage outputs, caches and code) and without "
                               "'~', '$', backslashes or surrounding spaces")
    for key in keys:
        val = getattr(cfg, key)
        if val and top not in Path(val).parents:
            raise RecipematchError(f"{where}.{key} must lie inside {where}.folder {short_repr(cfg.folder, 100)} "
                                   f"(dvc.yaml tracks that folder), got {short_repr(val, 100)}")


def _check_pooling(p) -> None:
    """Each pool: a name that is a path part, a declared evaluation, dense models that are base
    or a declared arm (each once), a judge depth within the route depth, a usable token regex."""
    from recipematch.rules import check_token_pattern

    for name, pc in p.pooling.items():
        where = f"pooling.{name}"
        _check_entry_name(where, name)
        if pc.evaluation not in p.evaluations:
            raise RecipematchError(f"{where}.evaluation: {short_repr(pc.evaluation, 60)} is not a declared evaluation "
                                   f"(declared: {sorted(p.evaluations)})")
        if not pc.dense:
            raise RecipematchError(f"{where}.dense: name at least one model (base or an arm); the v1 pool is the "
                                   "dense routes' top judge_depth")
        bad = [m for m in pc.dense if m not in ("base", "arms") and m not in p.arms]
        if bad:
            raise RecipematchError(f"{where}.dense: {bad} are neither base, arms (every arm of `arms`) nor arms "
                                   f"listed in `arms` ({list(p.arms)})")
        models = pool_models(pc.dense, p.arms)
        if len(set(models)) != len(models):
            raise RecipematchError(f"{where}.dense names a model twice: {list(pc.dense)} is {models}")
        if pc.judge_depth > pc.route_depth:
            raise RecipematchError(f"{where}: judge_depth {pc.judge_depth} exceeds route_depth {pc.route_depth} "
                                   "(the pools are cut from the routes' lists)")
        check_token_pattern(pc.token_pattern, f"{where}.token_pattern")


def _check_regen(p) -> None:
    """Each regen entry: a path-part name, a prompt of the llm section (source llm) or a rows
    file under data/ and a variant (source rows); each evaluation's ``version_of`` names another
    declared benchmark evaluation. (``of`` is checked by the regen stage: a params file that
    declares other evaluations still parses.)"""
    for name, rc in p.regen.items():
        where = f"regen.{name}"
        _check_entry_name(where, name)
        if rc.source == "llm":
            if rc.prompt not in p.llm.prompts:
                raise RecipematchError(f"{where}.prompt: {short_repr(rc.prompt, 60)} is not in llm.prompts "
                                       f"{list(p.llm.prompts)} (source llm rewrites through that section)")
            if rc.rows or rc.variant:
                raise RecipematchError(f"{where}: rows and variant belong to source rows, not llm")
        else:
            if not rc.rows or not rc.variant:
                raise RecipematchError(f"{where}: source rows needs both rows (the file) and variant")
            if rc.prompt:
                raise RecipematchError(f"{where}.prompt belongs to source llm, not rows")
            _check_inside_project(where, rc, ("rows",))
            if Path(rc.rows).parts[:1] != ("data",):
                raise RecipematchError(f"{where}.rows must lie under data/ (the DVC-tracked inputs the regen stage "
                                       f"declares), got {short_repr(rc.rows, 100)}")
    for name, ev in p.evaluations.items():
        if ev.version_of:
            other = p.evaluations.get(ev.version_of)
            if other is None or other.role != "benchmark" or ev.version_of == name:
                raise RecipematchError(f"evaluations.{name}.version_of: {short_repr(ev.version_of, 60)} is not another "
                                       "declared benchmark evaluation")


def _check_judging(p) -> None:
    """Each judging entry: a path-part name, a declared pool, files inside the project."""
    for name, jc in p.judging.items():
        where = f"judging.{name}"
        _check_entry_name(where, name)
        if jc.pool not in p.pooling:
            raise RecipematchError(f"{where}.pool: {short_repr(jc.pool, 60)} is not a pooling entry "
                                   f"(declared: {sorted(p.pooling)})")
        _check_inside_folder(where, jc, ("prompt", "system_prompt", "rubric", "recordings"))


def _check_meld_generate(p) -> None:
    """Each generation run: a MELD row set's name (it decides the system prompt and the group),
    files inside its folder."""
    from recipematch.rules import MELD_ATTACKS

    for name, mc in p.meld_generate.items():
        where = f"meld_generate.{name}"
        if name not in MELD_ATTACKS:
            raise RecipematchError(f"{where}: the name is the row set it writes; choose from {list(MELD_ATTACKS)}")
        _check_inside_folder(where, mc, ("domains", "recordings"))


def _check_saber(p) -> None:
    """Each SABER run: a path-part name, files inside the project."""
    for name, sc in p.saber.items():
        where = f"saber.{name}"
        _check_entry_name(where, name)
        _check_inside_folder(where, sc, ("corpus", "queries", "ontology", "topics", "summaries", "judge_prompt",
                                         "topic_prompt", "topic_system_prompt", "recordings"))
        if not sc.topics and not sc.topic_prompt:
            raise RecipematchError(f"{where}: give topics (a file) or topic_prompt (the LLM assigns them)")


def _check_external(p) -> None:
    """Each external benchmark: a name that is a path part, a copy inside the project, known
    subsets for its loader, each named once."""
    for name, ex in p.external.items():
        where = f"external.{name}"
        _check_entry_name(where, name)
        if (Path(ex.copy).is_absolute() or ".." in Path(ex.copy).parts or ex.copy.startswith("~")
                or ex.copy.strip() in (".", "") or any(ord(c) < 32 for c in ex.copy)):
            raise RecipematchError(f"{where}.copy must be a folder inside the project, relative to its root "
                                   f"(DVC hashes it as a dependency), got {short_repr(ex.copy, 120)}")
        if Path(ex.copy).parts[:2] == ("artifacts", "external"):
            raise RecipematchError(f"{where}.copy must not lie under artifacts/external/ (the stages' output, "
                                   f"replaced whole on every build), got {short_repr(ex.copy, 120)}")
        from recipematch.rules import EXTERNAL_SUBSETS

        SUBSETS = EXTERNAL_SUBSETS[ex.loader]
        if ex.loader in ("bright", "meld", "mirb") and ex.max_rows:
            raise RecipematchError(f"{where}.max_rows: the {ex.loader} loader keeps every row (the benchmark's protocol)")
        bad = [x for x in ex.subsets if x not in SUBSETS]
        if bad:
            raise RecipematchError(f"{where}.subsets: unknown {ex.loader} subsets {bad}; choose from {list(SUBSETS)}")
        if len(set(ex.subsets)) != len(ex.subsets):
            raise RecipematchError(f"{where}.subsets names a subset twice: {list(ex.subsets)}")


def _check_graded_evaluation(name: str, ev: EvaluationConfig) -> None:
    """The graded fields of one evaluation (Section 6): an external set names its measures; the
    scale is two ordered grades; a group is a name. The measure names are the library's to
    parse: :func:`recipematch.graded.check_declared_measures` (``params --check``, and every scoring stage's door)."""
    where = f"evaluations.{name}"
    if ev.role == "external" and not ev.measures:
        raise RecipematchError(f"{where}.measures: role external needs at least one graded measure (e.g. [nDCG@10])")
    if not ev.measures and (ev.gain != "linear" or ev.grade_scale):
        raise RecipematchError(f"{where}: gain and grade_scale apply to graded measures; declare measures too")
    if ev.grade_scale and (len(ev.grade_scale) != 2 or ev.grade_scale[0] > ev.grade_scale[1]):
        raise RecipematchError(f"{where}.grade_scale: [lowest, highest], lowest <= highest, got {list(ev.grade_scale)}")
    if ev.group and not ENTRY_NAME.fullmatch(ev.group):
        raise RecipematchError(f"{where}.group: letters, digits, '_' or '-', got {short_repr(ev.group, 80)}")


def check_arm_inputs(p) -> None:
    """Every declared arm (``cell`` = ``positives`` x ``negatives`` x ``negatives_volume``) reads
    only LLM pair files this configuration builds (a prompt in ``llm.prompts``; paper Tables
    9, 11-12). Called by the first stages that read the arms (``specs``, ``backtranslate``)
    and by ``recipematch params --check``, so a cell the sample cannot build
    (``-S positives=d5``) stops with one line naming the arm, the field and the missing file
    before any model loads. Back-translated and computer-algebra files are always built (the
    ``bt``/``bt3`` cells stop in their cells stage when no translation model is present).

    Args:
        p: parsed params, or a view holding ``arms``, ``positives``, ``negatives``,
            ``negatives_volume`` and ``llm``.

    Raises:
        RecipematchError: ``arms[<arm>]: no input for <field>=<value> of cell ...``.
    """
    from recipematch.rules import LLM_PROMPTS, NAMED_ARMS, CellSpec, missing_input_message

    for arm in p.arms:
        spec = CellSpec(p.positives, p.negatives, p.negatives_volume) if arm == "cell" else NAMED_ARMS.get(arm)
        if spec is None:
            continue  # an unknown arm name is reported by its own check
        for key in spec.inputs():
            if key in LLM_PROMPTS and key not in p.llm.prompts:
                where = ("arms[cell] (positives/negatives/negatives_volume)" if arm == "cell" else f"arms[{arm}]")
                raise RecipematchError(f"{where}: {missing_input_message(spec, key)}")


def _check_remedies(p: Params) -> None:
    """``remedies``: arms that ``arms`` trains (each once), no value listed twice, a replay
    file inside the project whenever a mix is declared (Appendix E, Table 19)."""
    r = p.remedies
    for key in ("arms", "soup_alphas", "replay_fractions"):
        vals = list(getattr(r, key))
        if len(set(vals)) != len(vals):
            raise RecipematchError(f"remedies.{key} lists a value twice: {vals}")
    bad = [a for a in r.arms if a not in p.arms]
    if bad:
        raise RecipematchError(f"remedies.arms {bad} are not in arms {list(p.arms)}: a remedy starts from a "
                               f"trained arm; name arms that train, or no remedy (-S 'remedies.arms=[]')")
    if r.arms and r.replay_fractions and not r.replay_file:
        raise RecipematchError("remedies.replay_fractions needs remedies.replay_file (a JSONL pair file)")
    _check_inside_project("remedies", r, ("replay_file",))


def _check_contrast_list(key: str, texts, extra: set[str] = frozenset()) -> None:
    """Each of ``texts`` is 'arm - arm' over known names (a named cell, ``cell``, a baseline,
    or one of ``extra``), none declared twice; errors name ``key[i]``."""
    from recipematch.rules import BASELINES, NAMED_ARMS, parse_contrast

    seen = set()
    for i, text in enumerate(texts):
        try:
            a, b = parse_contrast(text)
        except RecipematchError as e:
            raise RecipematchError(f"{key}[{i}]: {e}") from None
        bad = [x for x in (a, b) if x not in NAMED_ARMS and x != "cell" and x not in BASELINES and x not in extra]
        if bad:
            what = " or a declared remedy row" if extra else ""
            raise RecipematchError(f"{key}[{i}] {short_repr(text, 120)} names {bad}: not a named arm, 'cell' "
                                   f"or a baseline {list(BASELINES)}{what}")
        if (a, b) in seen:
            raise RecipematchError(f"{key}[{i}] {short_repr(text, 120)} is declared twice")
        seen.add((a, b))


def _check_hits(p: Params) -> None:
    """``hits.contrasts`` are contrasts as ``contrasts`` are, a declared remedy row allowed too
    (``hits.probe`` is checked by the hits stage, which reads the evaluations: a params file
    whose evaluations have no probe still parses)."""
    from recipematch.rules import remedy_labels

    r = p.remedies
    _check_contrast_list("hits.contrasts", p.hits.contrasts, set(remedy_labels(r.arms, r.soup_alphas, r.replay_fractions)))


def _check_contrasts(p: Params) -> None:
    """Each declared contrast is 'arm - arm' over known arm names (a named cell, ``cell``, or
    the baselines base and bm25), and no contrast is declared twice (paper Table 1: the gaps
    the report shows). A contrast whose arms are not both run (in ``arms``, or a baseline) is
    skipped by the stats stage and listed there, so ``-S arms=...`` needs no contrasts edit."""
    _check_contrast_list("contrasts", p.contrasts)


def parse_params(raw: Mapping[str, Any]) -> Params:
    """Check a whole params mapping and return it typed.

    Raises:
        RecipematchError: naming the dotted key: unknown, missing, wrong type, out of range,
            or breaking a rule that joins keys (arms, prompts, the cell under test, ...).
    """
    _check_grid_spelling(raw)
    p = _build(raw, Params, "")
    _cross_checks(p)
    return p


def _check_grid_spelling(raw: Mapping[str, Any]) -> None:
    """``remedies.soup_alphas`` and ``remedies.replay_fractions`` as written: DVC passes each value
    to its stage as YAML spelled it, and the stage names its folder by the value as Python prints
    it (``recipe@soup0.3``), so a value must be a decimal number (``1.0``, not ``1`` or
    ``"0.50"``) and not ``-0.0`` (Appendix E, Table 19).

    Raises:
        RecipematchError: naming the key and the value.
    """
    import math

    rem = raw.get("remedies") if isinstance(raw, Mapping) else None
    if not isinstance(rem, Mapping):
        return
    for key in ("soup_alphas", "replay_fractions"):
        vals = rem.get(key)
        if not isinstance(vals, list):
            continue
        for v in vals:
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                continue  # the type check names it
            if not isinstance(v, float):
                raise RecipematchError(f"remedies.{key}: write {v!r} as a decimal number such as 1.0 or 0.5 (DVC "
                                       "passes the value as written and the stage names its folder by it)")
            if v == 0 and math.copysign(1.0, v) < 0:
                raise RecipematchError(f"remedies.{key}: write -0.0 as 0.0")


def load_params_raw(path: str | Path) -> dict[str, Any]:
    """Read ``params.yaml`` as a plain mapping, unchecked (for tools that inspect which keys
    are set, such as the ``dvc.yaml`` deps check); stages read it through :func:`load_params`.

    Raises:
        RecipematchError: as :func:`load_yaml`.
    """
    return load_yaml(path)


def load_params(path: str | Path) -> Params:
    """Read and check ``params.yaml`` (the one place it is opened).

    Raises:
        RecipematchError: the message starts with the file's path and names the key.
    """
    raw = load_params_raw(path)
    try:
        return parse_params(raw)
    except RecipematchError as e:
        raise RecipematchError(f"{path}: {e}") from None


def check_params(raw: Mapping[str, Any]) -> None:
    """Validate a raw params mapping (see :func:`parse_params`)."""
    parse_params(raw)


def field_table() -> list[dict[str, Any]]:
    """Every params key with its help text and bounds (for the README's table)."""
    out = []

    def walk(cls, prefix):
        for f in dataclasses.fields(cls):
            tp = typing.get_type_hints(cls)[f.name]
            key = f"{prefix}{f.name}"
            if dataclasses.is_dataclass(tp):
                walk(tp, key + ".")
                continue
            md = {k: v for k, v in f.metadata.items() if v is not None and v is not False}
            if tp is str and "min" in md:
                md.pop("min")
                md["non_empty"] = True
            out.append({"key": key, "type": getattr(tp, "__name__", str(tp)), **md})
            args = typing.get_args(tp)
            if typing.get_origin(tp) is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
                walk(args[1], key + ".<name>.")  # each entry's own keys (evaluations.<name>.self_mask)

    walk(Params, "")
    return out


# --------------------------------------------------------------------------- a stage's view

class UndeclaredParam(AttributeError):
    """A stage read a params key that its ``dvc.yaml`` entry does not declare (a bug in the
    stage: DVC would not rerun it when that key changes)."""


class ParamsView:
    """Read-only view of :class:`Params` restricted to a stage's declared keys.

    A fully declared section (``"budget"``) comes back as its frozen dataclass; a partly
    declared one (``"gates.active"``) as a further view.
    """

    def __init__(self, target: Any, keys: frozenset[str], prefix: str = "") -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_keys", keys)
        object.__setattr__(self, "_prefix", prefix)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self._keys:
            return getattr(self._target, name)
        sub = frozenset(k.split(".", 1)[1] for k in self._keys if k.startswith(name + "."))
        if sub:
            return ParamsView(getattr(self._target, name), sub, f"{self._prefix}{name}.")
        raise UndeclaredParam(f"this stage reads params key '{self._prefix}{name}', which it does not declare "
                              f"(declared: {sorted(self._prefix + k for k in self._keys)})")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("params are read-only")

    def declared(self) -> dict[str, Any]:
        """``{dotted key: value}`` for every declared key (the run record's config)."""
        out = {}
        for k in sorted(self._keys):
            obj = self._target
            for part in k.split("."):
                obj = getattr(obj, part)
            if isinstance(obj, Mapping):  # a section of named entries (evaluations, pooling, ...)
                obj = {n: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for n, v in obj.items()}
            out[self._prefix + k] = dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj
        return out
