"""Generation backends behind one interface (paper Section 3 and Appendix C: every call's
prompt hash, model, sampling settings and seed are recorded).

All backends implement :meth:`GenerationBackend.generate`::

    generate(requests: list[GenerationRequest], on_result=None) -> list[GenerationResult]

The returned list is aligned with ``requests``. A backend never raises for a failed call:
it returns a :class:`GenerationResult` with ``raw_text=None`` and an ``error`` code. The one
exception is a server that cannot be reached at all: :class:`OpenAICompatibleBackend` then
delivers every result it has (answers received before the outage included) and raises
:class:`ServerUnreachableError`, naming the URL, once the batch is done. If
``on_result`` is given it is called once per request, ``on_result(index, result)``, in the
caller's thread, as soon as that result is known (the call store uses it to write each
answer before the next arrives, so a killed run loses at most the calls in flight). If
``on_result`` raises, the backend still finishes the batch and delivers every other result
to it; the first such exception is raised once the batch is done (so one bad callback never
discards the answers of the calls still in flight).

Backends:

* :class:`ReplayBackend`: answers from recorded outputs keyed by
  ``(prompt_sha256, source_id, variant)``; anything unrecorded fails with
  ``no_recorded_answer``. It never invents text.
* :class:`OpenAICompatibleBackend`: ``POST {base_url}/v1/chat/completions`` with bounded
  concurrency and retries with exponential back-off on HTTP 429, HTTP 5xx, time-outs,
  connection errors and malformed response bodies.
* :class:`VLLMBackend`: in-process vLLM, kept only for an environment where ``import vllm``
  works; elsewhere it raises :class:`VLLMNotInstalledError`. The at-scale path is a vLLM
  *server* reached through :class:`OpenAICompatibleBackend` (see
  :mod:`recipematch.llm.serving` for the ``vllm serve`` command).

Error codes (``GenerationResult.error``): ``no_recorded_answer``,
``recorded_model_mismatch``, ``http_429_exhausted``, ``http_5xx_exhausted`` (``http_500_exhausted``,
``http_503_exhausted``, ...), ``http_<status>`` (other 4xx, not retried), ``timeout``,
``connection_error``, ``malformed_response``, ``empty_content``, ``backend_exception``,
``model_mismatch``, ``too_large`` (an answer body over the backend's ``max_response_bytes``:
final; a ``timeout`` also covers a call that ran past its ``deadline_s``). The codes in :data:`RETRY_LATER_ERRORS` mean that no model answered
(nothing was paid for): the pipeline sends such a request again on its next run.

API keys: :class:`OpenAICompatibleBackend` reads its key from an environment variable whose
*name* it is given (``api_key_env``); the key is kept in a private attribute, left out of
``repr``, and replaced by ``[redacted]`` in every error text the backend produces and in
every answer text (a server that echoes the request's ``Authorization`` header inside a 200
answer), so it never reaches a result, the call store, a record or a log.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError, short_repr
from recipematch.io import canonical_json, sha256_text
from recipematch.llm.watchdog import CallWatchdog

__all__ = [
    "GenerationRequest",
    "GenerationResult",
    "GenerationBackend",
    "ReplayBackend",
    "OpenAICompatibleBackend",
    "VLLMBackend",
    "VLLMNotInstalledError",
    "ServerUnreachableError",
    "RETRY_LATER_ERRORS",
    "is_retry_later",
    "read_api_key",
    "normalise_sampling",
    "canonical_json",
    "replay_key",
    "ResultCallback",
]

ResultCallback = Callable[[int, "GenerationResult"], None]

#: default wall-clock limit of one call to an OpenAI-compatible server, retries included (s)
DEFAULT_DEADLINE_S = 1800.0
#: default cap on one answer body (bytes, after content decoding): an answer of
#: ``max_tokens`` tokens is a few hundred kB at most, so 8 MiB only stops a runaway server
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
_READ_CHUNK = 64 * 1024


class _BodyTooLarge(Exception):
    pass


class _DeadlinePassed(Exception):
    pass


class _Undecodable(Exception):
    pass


#: Error codes meaning no model produced an answer (transport faults, a server that refused
#: the credentials or does not know the route or model, a request for another model). The
#: call is not paid for, so the pipeline sends it again on a later run; every other stored
#: failure (an HTTP 400, an empty answer, a missing recording) is final.
RETRY_LATER_ERRORS: frozenset[str] = frozenset(
    {"connection_error", "timeout", "malformed_response", "backend_exception", "model_mismatch",
     "http_401", "http_403", "http_404", "http_408", "http_429_exhausted"}
)
_HTTP_5XX_EXHAUSTED = re.compile(r"http_5\d\d_exhausted")


def is_retry_later(error: str | None) -> bool:
    """True when ``error`` is a failure code of :data:`RETRY_LATER_ERRORS` or an exhausted
    HTTP 5xx (``http_500_exhausted``, ``http_503_exhausted``, ...)."""
    return error is not None and (error in RETRY_LATER_ERRORS or bool(_HTTP_5XX_EXHAUSTED.fullmatch(error)))


class VLLMNotInstalledError(RecipematchError, ImportError):
    """``VLLMBackend`` was asked for where vLLM cannot be imported."""


class ServerUnreachableError(RecipematchError):
    """No connection to an OpenAI-compatible server after every retry; the message names the URL."""


def read_api_key(env_var: str, environ: Mapping[str, str] | None = None) -> str:
    """The API key held by the environment variable named ``env_var``.

    Args:
        env_var: the variable's *name* (e.g. ``"RECIPEMATCH_LLM_API_KEY"``), as params give it.
        environ: the environment to read (default :data:`os.environ`).

    Raises:
        RecipematchError: the name is empty or not a valid variable name, or the variable is
            unset or empty. The message names the variable, never a value.
    """
    env = os.environ if environ is None else environ
    if not isinstance(env_var, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env_var):
        raise RecipematchError(f"api_key_env must be the NAME of an environment variable, got {short_repr(env_var, 40)}")
    key = env.get(env_var, "")
    if not key:
        raise RecipematchError(
            f"environment variable {env_var} (named by api_key_env) is not set or empty; export the "
            "server's API key there (the key is never written into params)")
    return key


def _sha256_text(text: str) -> str:
    """SHA-256 hex of the text's UTF-8 bytes (:func:`recipematch.io.sha256_text`); a lone
    surrogate is hashed with ``surrogatepass`` instead of raising."""
    return sha256_text(text, errors="surrogatepass")


def normalise_sampling(sampling: Mapping[str, Any]) -> dict[str, float | int]:
    """Validate and normalise sampling settings to ``{temperature, top_p, max_tokens}``.

    ``temperature`` (float ≥ 0) and ``top_p`` (float in (0, 1]) become floats and
    ``max_tokens`` (int ≥ 1) an int, so ``1`` and ``1.0`` give the same request key.

    Raises:
        ValueError: a key is missing or unknown, or a value is out of range.
    """
    keys = {"temperature", "top_p", "max_tokens"}
    if set(sampling) != keys:
        raise ValueError(f"sampling must have exactly the keys {sorted(keys)}, got {sorted(sampling)}")
    t, p, m = sampling["temperature"], sampling["top_p"], sampling["max_tokens"]
    for name, v in (("temperature", t), ("top_p", p)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"sampling {name} must be a finite number, got {v!r}")
    if t < 0:
        raise ValueError(f"temperature must be >= 0, got {t}")
    if not 0 < p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {p}")
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"max_tokens must be an int >= 1, got {m!r}")
    return {"temperature": float(t), "top_p": float(p), "max_tokens": int(m)}


@dataclass(frozen=True)
class GenerationRequest:
    """One chat call.

    Attributes:
        prompt_name: template name, e.g. ``"d1_recipe"`` or ``"judge"``.
        prompt_sha256: the template's identity (:attr:`PromptTemplate.sha256`).
        system, user: the rendered texts, sent byte for byte.
        source_id: the corpus ``_id`` of the anchor problem.
        variant: sample index (int ≥ 0) for generation; for the judge the candidate key
            (first 16 hex characters of the SHA-256 of the candidate text).
        sampling: ``{temperature, top_p, max_tokens}`` (see :func:`normalise_sampling`).
        seed: sampling seed (int).
        model_id: the model the call is meant for.
        response_schema: optional JSON Schema for structured output (used by backends that
            support it; part of the request key because it changes the answer).
        chat_template_kwargs: optional keyword arguments for the server's chat template,
            e.g. ``{"enable_thinking": False}`` for Qwen3 (sent as the request body's
            ``chat_template_kwargs``; part of the request key when given, since it changes
            the answer). JSON values only; an empty mapping is the same as ``None``.
    """

    prompt_name: str
    prompt_sha256: str
    system: str
    user: str
    source_id: str
    variant: int | str
    sampling: Mapping[str, float | int]
    seed: int
    model_id: str
    response_schema: Mapping[str, Any] | None = None
    chat_template_kwargs: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sampling", normalise_sampling(self.sampling))
        if isinstance(self.chat_template_kwargs, Mapping) and not self.chat_template_kwargs:
            object.__setattr__(self, "chat_template_kwargs", None)  # {} sends nothing: the same request as None
        if self.chat_template_kwargs is not None:
            if not isinstance(self.chat_template_kwargs, Mapping) or not all(
                isinstance(k, str) for k in self.chat_template_kwargs
            ):
                raise ValueError(f"chat_template_kwargs must be a mapping with string keys, got "
                                 f"{short_repr(self.chat_template_kwargs, 80)}")
            try:
                canonical_json(dict(self.chat_template_kwargs))
            except (TypeError, ValueError) as e:
                raise ValueError(f"chat_template_kwargs must hold JSON values only: {e}") from None
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an int, got {self.seed!r}")
        if isinstance(self.variant, bool) or not isinstance(self.variant, (int, str)):
            raise ValueError(f"variant must be an int or str, got {self.variant!r}")
        if not self.source_id or not self.model_id or len(self.prompt_sha256) != 64:
            raise ValueError("source_id and model_id must be non-empty and prompt_sha256 64 hex characters")

    @property
    def key(self) -> str:
        """Content address of the request: SHA-256 hex of the canonical JSON of
        ``{v, prompt_name, prompt_sha256, system_sha256, user_sha256, source_id, variant,
        sampling, seed, model_id, response_schema_sha256}`` (``v`` = key format version 1),
        plus ``chat_template_kwargs`` when it is not ``None`` (so keys of requests without it
        are unchanged). Two requests share a key iff they would send the same call."""
        schema = None if self.response_schema is None else _sha256_text(canonical_json(self.response_schema))
        extra = {} if self.chat_template_kwargs is None else {"chat_template_kwargs": dict(self.chat_template_kwargs)}
        return _sha256_text(
            canonical_json(
                {
                    **extra,
                    "v": 1,
                    "prompt_name": self.prompt_name,
                    "prompt_sha256": self.prompt_sha256,
                    "system_sha256": _sha256_text(self.system),
                    "user_sha256": _sha256_text(self.user),
                    "source_id": self.source_id,
                    "variant": self.variant,
                    "sampling": dict(self.sampling),
                    "seed": self.seed,
                    "model_id": self.model_id,
                    "response_schema_sha256": schema,
                }
            )
        )


@dataclass(frozen=True)
class GenerationResult:
    """What a backend answered for one request.

    Exactly one of ``raw_text`` / ``error`` is not ``None``.

    Attributes:
        raw_text: the model's answer text as received; the one change ever made is an API
            key a server echoed back, replaced by ``[redacted]``.
        error: failure code (see module docstring).
        origin: where the text came from: ``"live"`` for a model call, or the recording's
            origin for a replay (``"peer_release_post_judge"``, ``"implied_by_release"``, ...).
        attempts: number of calls made (1 + retries); 0 for a replay.
        finish_reason: the server's finish reason when it gave one (``"stop"``, ``"length"``).
        detail: free text about an error (status line, exception), for the record.
    """

    raw_text: str | None
    error: str | None
    origin: str = "live"
    attempts: int = 1
    finish_reason: str | None = None
    detail: str | None = None

    def __post_init__(self) -> None:
        if (self.raw_text is None) == (self.error is None):
            raise ValueError("exactly one of raw_text and error must be set")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Deliver:
    """Calls ``on_result`` and keeps the first exception it raises instead of letting it
    abort the batch (see the module docstring); :meth:`finish` re-raises it at the end."""

    def __init__(self, on_result: ResultCallback | None) -> None:
        self.on_result = on_result
        self.error: BaseException | None = None

    def __call__(self, i: int, res: GenerationResult) -> None:
        if self.on_result is None:
            return
        try:
            self.on_result(i, res)
        except Exception as e:  # noqa: BLE001 - delivered later, after the batch is done
            if self.error is None:
                self.error = e

    def finish(self) -> None:
        if self.error is not None:
            raise self.error


class GenerationBackend(ABC):
    """One interface for every way of answering :class:`GenerationRequest` s."""

    @abstractmethod
    def generate(
        self, requests: Sequence[GenerationRequest], on_result: ResultCallback | None = None
    ) -> list[GenerationResult]:
        """Answer ``requests``; the result list is aligned with them (same length, same
        order). Never raises for a failed call (see module docstring)."""


_RECORDING_FIELDS = ("prompt_sha256", "source_id", "variant", "raw_text", "model_id", "origin")


def _read_recordings_file(path: Path) -> Iterator[tuple[str, Any]]:
    """``(location, parsed line)`` for every non-blank line; a line that is not UTF-8 or
    not JSON raises :class:`ValueError` naming the file and line."""
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{path}, line {lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{where}: not UTF-8 ({e.reason} at byte {e.start})") from None
            if not line.strip():
                continue
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON: {e.msg} (column {e.colno})") from None
            except (ValueError, RecursionError) as e:
                raise ValueError(f"{where}: not valid JSON: {type(e).__name__}: {e}"[:500]) from None


def _check_recording(where: str, rec: Any) -> None:
    """Raise :class:`ValueError` naming ``where`` unless ``rec`` is a usable recording."""
    if not isinstance(rec, Mapping):
        raise ValueError(f"{where}: a recording must be a JSON object, got {type(rec).__name__}")
    missing = [f for f in _RECORDING_FIELDS if f not in rec]
    if missing:
        raise ValueError(f"{where}: recording lacks {missing}: {short_repr(dict(rec), 200)}")
    ident = f"{where} (source_id {rec['source_id']!r}, variant {rec['variant']!r})"
    for f in ("prompt_sha256", "source_id", "model_id", "origin"):
        if not isinstance(rec[f], str) or not rec[f]:
            raise ValueError(f"{ident}: {f} must be a non-empty string, got {short_repr(rec[f], 80)}")
    v = rec["variant"]
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"{ident}: variant must be an int or a string, got {short_repr(v, 80)}")
    if not isinstance(rec["raw_text"], str):
        got = "null" if rec["raw_text"] is None else type(rec["raw_text"]).__name__
        raise ValueError(f"{ident}: raw_text must be a string (a recording replays an answer), got {got}")


def replay_key(prompt_sha256: str, source_id: str, variant: int | str) -> str:
    """The replay lookup key: canonical JSON of ``[prompt_sha256, source_id, variant]``."""
    return canonical_json([prompt_sha256, source_id, variant])


class ReplayBackend(GenerationBackend):
    """Answers from recorded outputs; never invents text.

    Args:
        recordings_path: JSONL file, one recording per line with at least
            ``prompt_sha256, source_id, variant, raw_text, model_id, origin`` (the format
            :func:`recipematch.llm.recordings.build_recordings` writes).
        recordings: alternatively, the recordings themselves (exactly one of the two).
        check_model: when true (default) a request whose ``model_id`` differs from the
            recording's fails with ``recorded_model_mismatch``: one model's recorded answer
            is never passed off as another's.

    A request is looked up by ``(prompt_sha256, source_id, variant)`` (its system and user
    texts are not compared; the prompt hash and source id fix them). Unrecorded requests
    fail with ``no_recorded_answer``.

    Raises:
        ValueError: a line is not UTF-8 or not JSON, a recording is not an object, lacks a
            field or has one of the wrong type (``raw_text`` must be a string), or two
            recordings share a key but differ in text. The message names the file and line
            (``recording #i`` for in-memory recordings) and the problem.
    """

    def __init__(
        self,
        recordings_path: str | Path | None = None,
        *,
        recordings: Iterable[Mapping[str, Any]] | None = None,
        check_model: bool = True,
    ) -> None:
        if (recordings_path is None) == (recordings is None):
            raise ValueError("give exactly one of recordings_path and recordings")
        located: Iterable[tuple[str, Any]]
        if recordings_path is not None:
            located = list(_read_recordings_file(Path(recordings_path)))
        else:
            located = ((f"recording #{i}", rec) for i, rec in enumerate(recordings))  # type: ignore[arg-type]
        self.check_model = check_model
        self._table: dict[str, Mapping[str, Any]] = {}
        where_of: dict[str, str] = {}
        self.calls = 0  # number of requests answered or refused, for tests and logs
        for where, rec in located:
            _check_recording(where, rec)
            k = replay_key(rec["prompt_sha256"], rec["source_id"], rec["variant"])
            old = self._table.get(k)
            if old is not None and (old["raw_text"], old["model_id"]) != (rec["raw_text"], rec["model_id"]):
                raise ValueError(f"{where}: conflicting recordings for {k} (first at {where_of[k]})")
            self._table[k] = rec
            where_of.setdefault(k, where)

    def __len__(self) -> int:
        return len(self._table)

    def _answer(self, req: GenerationRequest) -> GenerationResult:
        rec = self._table.get(replay_key(req.prompt_sha256, req.source_id, req.variant))
        if rec is None:
            return GenerationResult(None, "no_recorded_answer", origin="replay", attempts=0)
        if self.check_model and rec["model_id"] != req.model_id:
            return GenerationResult(
                None,
                "recorded_model_mismatch",
                origin="replay",
                attempts=0,
                detail=f"recorded {rec['model_id']!r}, requested {req.model_id!r}",
            )
        return GenerationResult(rec["raw_text"], None, origin=rec["origin"], attempts=0)

    def generate(
        self, requests: Sequence[GenerationRequest], on_result: ResultCallback | None = None
    ) -> list[GenerationResult]:
        out = []
        deliver = _Deliver(on_result)
        for i, req in enumerate(requests):
            res = self._answer(req)
            self.calls += 1
            deliver(i, res)
            out.append(res)
        deliver.finish()
        return out


class OpenAICompatibleBackend(GenerationBackend):
    """Chat completions over HTTP (OpenAI-compatible servers: ``vllm serve``, SGLang, TGI,
    vendors). The paper's generator and judges (Section 3, Appendix C) run this way at scale.

    Args:
        base_url: server root, e.g. ``"http://127.0.0.1:8000"`` (a trailing ``/v1`` is
            accepted); requests go to ``{root}/v1/chat/completions``.
        model: the ``model`` field sent to the server. Each request's ``model_id`` must
            equal it (a request meant for another model fails with ``model_mismatch``).
        api_key: the key itself, for programmatic use (tests, notebooks). Pipelines pass
            ``api_key_env`` instead. Sent as ``Authorization: Bearer <key>``.
        api_key_env: the NAME of the environment variable holding the key, read once here
            (:func:`read_api_key`); at most one of ``api_key`` / ``api_key_env``.
        concurrency: calls in flight at once (≥ 1).
        max_retries: retries after the first call (≥ 0) on 429, 5xx, time-out, connection
            error or a malformed body. Other 4xx are not retried.
        backoff: base delay in seconds; retry ``k`` (0-based) waits ``backoff * 2**k``, or the
            server's ``Retry-After`` seconds when larger (capped at ``max_backoff``).
        timeout_s: per-read connect/read time-out in seconds (> 0): a server that sends
            nothing for longer fails that attempt with ``timeout``.
        deadline_s: wall-clock limit in seconds (> 0) for one call, every attempt, back-off
            and byte of the body included: a server that trickles its answer (each read
            inside ``timeout_s``) is cut off here and the call fails with ``timeout``; no
            retry starts after it.
        max_response_bytes: the most bytes (≥ 1024) of one answer body that are read, after
            content decoding; the body is streamed and reading stops at the cap, so an
            endless or huge answer never sits in memory or in the call store: the call fails
            with ``too_large`` (final, not retried).
        max_backoff: longest wait between two attempts, in seconds.
        structured_output: send ``response_format={"type": "json_schema", ...}`` when the
            request carries a ``response_schema`` (servers such as vLLM honour it).
        sleep: the sleep function (tests pass a fast one).

    Raises:
        ValueError: ``concurrency < 1``, ``max_retries < 0``, ``backoff < 0``,
            ``timeout_s <= 0``, or both ``api_key`` and ``api_key_env`` given.
        RecipematchError: ``api_key_env`` names an unset or empty variable.

    The body sends ``messages=[system, user]`` (the system message is left out when the
    request's system text is empty), ``temperature``, ``top_p``, ``max_tokens``, ``seed``,
    ``n=1`` and, when the request has them, ``chat_template_kwargs`` (e.g. Qwen3's
    ``{"enable_thinking": false}``); the answer is ``choices[0].message.content`` (a
    server-side reasoning parser's ``reasoning_content`` is not kept).

    Unreachable server: when a call has used up its retries on connection errors, the
    calls not yet started fail at once (``connection_error``, 0 attempts) instead of each
    retrying against a dead address; every result is delivered and :meth:`generate` then
    raises :class:`ServerUnreachableError` naming the URL. A server that accepts the
    connection but stalls is not "unreachable": those calls fail with ``timeout``.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        api_key_env: str | None = None,
        concurrency: int = 8,
        max_retries: int = 4,
        backoff: float = 1.0,
        timeout_s: float = 300.0,
        deadline_s: float = DEFAULT_DEADLINE_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_backoff: float = 60.0,
        structured_output: bool = False,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import requests  # declared dependency of the environment (via transformers/mlflow)

        if concurrency < 1 or max_retries < 0 or backoff < 0 or timeout_s <= 0:
            raise ValueError("need concurrency >= 1, max_retries >= 0, backoff >= 0, timeout_s > 0")
        if not deadline_s > 0 or not math.isfinite(deadline_s) or max_response_bytes < 1024:
            raise ValueError("need a finite deadline_s > 0 and max_response_bytes >= 1024")
        if api_key is not None and api_key_env is not None:
            raise ValueError("give at most one of api_key and api_key_env")
        if not isinstance(base_url, str) or not re.match(r"https?://[^/\s]+", base_url.strip()):
            raise RecipematchError(f"LLM server base_url must be an http(s) URL such as "
                                   f"http://127.0.0.1:8000, got {short_repr(base_url, 100)}")
        root = base_url.strip().rstrip("/")
        if root.endswith("/v1"):
            root = root[: -len("/v1")]
        self.root = root
        self.url = root + "/v1/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.__key = read_api_key(api_key_env) if api_key_env is not None else (api_key or None)
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout_s = timeout_s
        self.deadline_s = float(deadline_s)
        self.max_response_bytes = int(max_response_bytes)
        self.structured_output = structured_output
        self._sleep = sleep
        self._clock = clock
        self._requests = requests
        self._local = threading.local()
        self._down = threading.Event()

    def __repr__(self) -> str:
        key = "none" if self.__key is None else (f"from ${self.api_key_env}" if self.api_key_env else "given")
        return f"OpenAICompatibleBackend(url={self.url!r}, model={self.model!r}, api_key={key})"

    def _scrub(self, text: str | None, limit: int | None = None) -> str | None:
        """``text`` with the API key replaced by ``[redacted]`` (error texts and answers may echo
        it), then cut to ``limit`` characters; a piece of the key (4 characters or more) left at
        the cut is redacted too."""
        if text is None:
            return None
        key = self.__key
        if key:
            text = text.replace(key, "[redacted]")
        if limit is None or len(text) <= limit:
            return text
        text = text[:limit]
        if key:
            for n in range(min(len(key) - 1, len(text)), 3, -1):
                if text.endswith(key[:n]):
                    return text[:-n] + "[redacted]"
        return text

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.__key:
            headers["Authorization"] = f"Bearer {self.__key}"
        return headers

    def _session(self):
        s = getattr(self._local, "session", None)
        if s is None:
            from recipematch.llm.watchdog import watched_session

            s = watched_session()
            self._local.session = s
        return s

    def _drop_session(self) -> None:
        """Forget this thread's session (after a watchdog cut its sockets, none is reused)."""
        s = getattr(self._local, "session", None)
        self._local.session = None
        if s is not None:
            s.close()

    def _body(self, req: GenerationRequest) -> dict[str, Any]:
        messages = [{"role": "user", "content": req.user}]
        if req.system:
            messages.insert(0, {"role": "system", "content": req.system})
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": req.sampling["temperature"],
            "top_p": req.sampling["top_p"],
            "max_tokens": req.sampling["max_tokens"],
            "seed": req.seed,
            "n": 1,
        }
        if req.chat_template_kwargs is not None:
            body["chat_template_kwargs"] = dict(req.chat_template_kwargs)
        if self.structured_output and req.response_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": req.prompt_name.replace(":", "_"), "schema": dict(req.response_schema)},
            }
        return body

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        d = self.backoff * (2**attempt)
        if retry_after:
            try:
                d = max(d, float(retry_after))
            except ValueError:
                pass
        return min(d, self.max_backoff)

    def probe(self) -> list[str]:
        """Ask the server which models it serves (``GET {root}/v1/models``), with the
        backend's retries, before paying for anything.

        Returns:
            The served model ids.

        Raises:
            ServerUnreachableError: no connection or no answer after every retry (names the URL).
            RecipematchError: the server refused the key (401/403), answered with another
                error status or an unreadable body, or does not serve :attr:`model`.
        """
        url = self.root + "/v1/models"
        exc_t = self._requests.exceptions
        detail = ""
        for attempt in range(self.max_retries + 1):
            bound = min(self.deadline_s, self.timeout_s)
            watchdog = CallWatchdog(bound)
            try:
                t_end = self._clock() + bound
                with watchdog:
                    resp = self._session().get(url, headers=self._headers(), timeout=self.timeout_s, stream=True)
                    try:
                        content = self._read_body(resp, t_end, self.max_response_bytes if resp.status_code == 200
                                                  else 4096)
                        if watchdog.fired:
                            raise _DeadlinePassed
                    finally:
                        resp.close()
            except (exc_t.RequestException, _Undecodable) if watchdog.fired else ():
                detail = f"no complete model list within {bound:g} s"
                self._drop_session()
            except _BodyTooLarge:
                raise RecipematchError(f"LLM server {url} sent a model list over {self.max_response_bytes} "
                                       f"bytes (max_response_bytes)") from None
            except (_DeadlinePassed, _Undecodable) as e:
                detail = f"{type(e).__name__.lstrip('_')}: no complete model list in time"
            except exc_t.RequestException as e:
                detail = f"{type(e).__name__}: {e}"
            else:
                if resp.status_code in (401, 403):
                    key = f"the key in ${self.api_key_env}" if self.api_key_env else "the API key"
                    raise RecipematchError(f"LLM server {url} refused {key} (HTTP {resp.status_code})")
                if resp.status_code == 200:
                    try:
                        ids = [m["id"] for m in json.loads(content.decode("utf-8"))["data"]]
                    except (ValueError, KeyError, TypeError) as e:
                        raise RecipematchError(f"LLM server {url} sent an unreadable model list: "
                                               f"{type(e).__name__}") from None
                    if self.model not in ids:
                        raise RecipematchError(f"LLM server {url} does not serve model {self.model!r}; it serves "
                                               f"{ids[:10]}")
                    return ids
                if resp.status_code != 429 and resp.status_code < 500:
                    raise RecipematchError(f"LLM server {url} answered HTTP {resp.status_code}: "
                                           f"{self._scrub(content.decode('utf-8', errors='replace'), 200)}")
                detail = f"HTTP {resp.status_code}"
            if attempt < self.max_retries:
                self._sleep(self._delay(attempt, None))
        raise ServerUnreachableError(f"cannot reach the LLM server at {url} after {self.max_retries + 1} "
                                     f"attempt(s): {self._scrub(detail, 300)}")

    def _call(self, req: GenerationRequest) -> GenerationResult:
        if req.model_id != self.model:
            return GenerationResult(
                None, "model_mismatch", attempts=0, detail=f"backend serves {self.model!r}, request wants {req.model_id!r}"
            )
        if self._down.is_set():
            return GenerationResult(None, "connection_error", attempts=0,
                                    detail=f"not sent: the server at {self.url} was unreachable earlier in this batch")
        data = json.dumps(self._body(req), ensure_ascii=False).encode("utf-8")
        exc_t = self._requests.exceptions
        last_error, detail = "connection_error", None
        t_end = self._clock() + self.deadline_s
        attempt = 0
        for attempt in range(self.max_retries + 1):
            retry_after = None
            left = t_end - self._clock()
            if left <= 0:
                last_error, detail = "timeout", f"call deadline of {self.deadline_s:g} s passed"
                break
            resp = None
            watchdog = CallWatchdog(left)
            try:
                wait = min(self.timeout_s, left)
                with watchdog:  # cuts the sockets at t_end: headers and body alike are bounded
                    resp = self._session().post(self.url, data=data, headers=self._headers(),
                                                timeout=(wait, wait), stream=True)
                    status = resp.status_code
                    # an error status's text is only quoted (500 characters), so little of it is read
                    body = self._read_body(resp, t_end, self.max_response_bytes if status == 200 else 4096)
                    if watchdog.fired:  # a cut connection can end as a short, well-formed read
                        raise _DeadlinePassed
            except _DeadlinePassed:
                last_error, detail = "timeout", f"call deadline of {self.deadline_s:g} s passed while reading the answer"
                break
            # (the except expression is evaluated when an exception arrives: only a cut call is a timeout)
            except (exc_t.RequestException, _Undecodable) if watchdog.fired else ():
                last_error, detail = "timeout", (f"call deadline of {self.deadline_s:g} s passed before the server's "
                                                 f"answer ended")
                break
            except _Undecodable as e:
                last_error, detail = "malformed_response", self._scrub(f"undecodable body: {e}", 500)
            except _BodyTooLarge:
                return GenerationResult(None, "too_large", attempts=attempt + 1,
                                        detail=f"answer body over max_response_bytes ({self.max_response_bytes} "
                                               f"bytes); reading stopped there and nothing of it was kept")
            except exc_t.Timeout as e:
                last_error, detail = "timeout", self._scrub(str(e))
            except exc_t.RequestException as e:
                last_error, detail = "connection_error", self._scrub(f"{self.url}: {e}")
            else:
                text = body.decode("utf-8", errors="replace")
                if status == 200:
                    parsed = self._parse_body(body)
                    if isinstance(parsed, GenerationResult):
                        return GenerationResult(
                            self._scrub(parsed.raw_text), parsed.error, attempts=attempt + 1,
                            finish_reason=self._scrub(parsed.finish_reason, 64), detail=self._scrub(parsed.detail),
                        )
                    last_error, detail = "malformed_response", self._scrub(parsed, 500)
                elif status == 429 or status >= 500:
                    last_error = "http_429" if status == 429 else f"http_{status}"
                    detail = self._scrub(text, 500)
                    retry_after = resp.headers.get("Retry-After")
                else:
                    return GenerationResult(None, f"http_{status}", attempts=attempt + 1,
                                            detail=self._scrub(text, 500))
            finally:
                if resp is not None:
                    resp.close()
                if watchdog.fired:
                    self._drop_session()
            if attempt < self.max_retries:
                if last_error == "connection_error" and self._down.is_set():
                    break
                pause = self._delay(attempt, retry_after)
                if self._clock() + pause >= t_end:
                    detail = f"{detail} (no retry: the call deadline of {self.deadline_s:g} s would pass)"
                    break
                self._sleep(pause)
        if last_error == "connection_error":
            self._down.set()
        code = f"{last_error}_exhausted" if last_error.startswith("http_") else last_error
        return GenerationResult(None, code, attempts=attempt + 1, detail=detail)

    def _read_body(self, resp, t_end: float, cap: int) -> bytes:
        """The body of a streamed ``resp``, decoded, read in pieces of whatever has arrived
        (``read1``), so the deadline is checked between pieces even when a server trickles.

        Raises:
            _BodyTooLarge: more than ``cap`` bytes (only for a 200; an error body is cut at
                ``cap`` silently, since only its first characters are quoted).
            _DeadlinePassed: ``t_end`` passed before the body ended.
        """
        import urllib3.exceptions as urllib3_exc  # requests' own transport

        raw = resp.raw
        buf = bytearray()
        while True:
            if self._clock() > t_end:
                raise _DeadlinePassed
            try:
                piece = raw.read1(_READ_CHUNK, decode_content=True)
            except urllib3_exc.ReadTimeoutError as e:
                raise self._requests.exceptions.ReadTimeout(str(e)) from None
            except urllib3_exc.DecodeError as e:
                raise _Undecodable(str(e)) from None
            except (urllib3_exc.ProtocolError, OSError) as e:
                raise self._requests.exceptions.ConnectionError(str(e)) from None
            if not piece:
                return bytes(buf)
            buf += piece
            if len(buf) > cap:
                if resp.status_code == 200:
                    raise _BodyTooLarge
                return bytes(buf[:cap])

    @staticmethod
    def _parse_body(content: bytes) -> GenerationResult | str:
        """A result for a well-formed body, else a string saying what was wrong."""
        try:
            obj = json.loads(content.decode("utf-8"))
            choice = obj["choices"][0]
            text = choice["message"]["content"]
            finish = choice.get("finish_reason")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            return f"malformed response body: {type(e).__name__}: {e}"  # the caller scrubs and cuts it
        if text is None or not isinstance(text, str):
            return GenerationResult(None, "empty_content", finish_reason=finish if isinstance(finish, str) else None)
        return GenerationResult(text, None, finish_reason=finish if isinstance(finish, str) else None)

    def generate(
        self, requests: Sequence[GenerationRequest], on_result: ResultCallback | None = None
    ) -> list[GenerationResult]:
        """See :meth:`GenerationBackend.generate`.

        Raises:
            ServerUnreachableError: after delivering every result, when calls used up their
                retries on connection errors (the message names the URL and how many calls
                got no connection); answers received before are delivered as usual.
        """
        results: list[GenerationResult | None] = [None] * len(requests)
        if not requests:
            return []
        self._down.clear()
        deliver = _Deliver(on_result)
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            futures = {pool.submit(self._safe_call, r): i for i, r in enumerate(requests)}
            for fut in as_completed(futures):  # callbacks run here, in the caller's thread
                i = futures[fut]
                results[i] = fut.result()
                deliver(i, results[i])
        if self._down.is_set():
            failed = [r for r in results if r is not None and r.error == "connection_error"]
            tried = [r for r in failed if r.attempts]
            first = tried[0].detail if tried else ""
            raise ServerUnreachableError(
                f"cannot reach the LLM server at {self.url}: {len(failed)} of {len(results)} calls got no "
                f"connection (each call tries {self.max_retries + 1} time(s); last error: {first}"[:600]
                + "). Answers received before are kept; start the server and run again.") from deliver.error
        deliver.finish()
        return results  # type: ignore[return-value]

    def _safe_call(self, req: GenerationRequest) -> GenerationResult:
        try:
            return self._call(req)
        except Exception as e:  # a bug must not lose the other answers of the batch
            return GenerationResult(None, "backend_exception", detail=self._scrub(f"{type(e).__name__}: {e}", 500))


_VLLM_MISSING = (
    "vLLM is not installed in this environment; run `vllm serve` and use backend: openai "
    "(vLLM pins its own torch/transformers and lives in a separate GPU environment; see "
    "recipematch.llm.serving for the command)"
)


class VLLMBackend(GenerationBackend):
    """In-process vLLM generation, batched through ``LLM.chat``: only for an environment
    where vLLM imports (the dev/CI environment cannot hold it). At paper scale run
    ``vllm serve`` and use :class:`OpenAICompatibleBackend` (:mod:`recipematch.llm.serving`).

    Args:
        model: model path or name given to ``vllm.LLM`` (also the ``model_id`` every
            request must carry, unless ``model_id`` is given).
        model_id: the id recorded with answers, when it differs from ``model``.
        structured_output: constrain decoding to the request's ``response_schema`` when
            the installed vLLM supports it (``StructuredOutputsParams`` in newer releases,
            ``GuidedDecodingParams`` in older ones); silently unconstrained otherwise, and
            the strict parser still checks every answer.
        batch_size: requests per ``LLM.chat`` call (``on_result`` fires after each batch).
        **llm_kwargs: passed to ``vllm.LLM`` (e.g. ``tensor_parallel_size``,
            ``max_model_len``, ``quantization="awq"``).

    Sampling comes from each request: ``SamplingParams(temperature, top_p, max_tokens,
    seed=request.seed, n=1)``; a request's ``chat_template_kwargs`` go to ``LLM.chat``
    (requests with different ones are sent in different batches).

    Raises:
        VLLMNotInstalledError: (a :class:`~recipematch.errors.RecipematchError` and an
            :class:`ImportError`) vLLM cannot be imported here.
    """

    def __init__(
        self,
        model: str,
        *,
        model_id: str | None = None,
        structured_output: bool = True,
        batch_size: int = 256,
        **llm_kwargs: Any,
    ) -> None:
        try:
            import vllm  # noqa: PLC0415 - lazy on purpose: vLLM is an optional GPU extra
        except ImportError as e:
            raise VLLMNotInstalledError(_VLLM_MISSING) from e
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self._vllm = vllm
        self.model_id = model_id or model
        self.structured_output = structured_output
        self.batch_size = batch_size
        self.llm = vllm.LLM(model=model, **llm_kwargs)

    def _structured(self, schema: Mapping[str, Any] | None) -> dict[str, Any]:
        if not self.structured_output or schema is None:
            return {}
        sp_mod = getattr(self._vllm, "sampling_params", None)
        if sp_mod is not None and hasattr(sp_mod, "StructuredOutputsParams"):
            return {"structured_outputs": sp_mod.StructuredOutputsParams(json=dict(schema))}
        if sp_mod is not None and hasattr(sp_mod, "GuidedDecodingParams"):
            return {"guided_decoding": sp_mod.GuidedDecodingParams(json=dict(schema))}
        return {}

    def _params(self, req: GenerationRequest):
        return self._vllm.SamplingParams(
            n=1,
            temperature=req.sampling["temperature"],
            top_p=req.sampling["top_p"],
            max_tokens=req.sampling["max_tokens"],
            seed=req.seed,
            **self._structured(req.response_schema),
        )

    def generate(
        self, requests: Sequence[GenerationRequest], on_result: ResultCallback | None = None
    ) -> list[GenerationResult]:
        results: list[GenerationResult | None] = [None] * len(requests)
        deliver = _Deliver(on_result)
        todo = []
        for i, req in enumerate(requests):
            if req.model_id != self.model_id:
                results[i] = GenerationResult(
                    None, "model_mismatch", attempts=0,
                    detail=f"backend serves {self.model_id!r}, request wants {req.model_id!r}",
                )
                deliver(i, results[i])
            else:
                todo.append(i)
        groups: dict[str, list[int]] = {}
        for i in todo:  # one LLM.chat call takes one set of chat-template arguments
            ctk = requests[i].chat_template_kwargs
            groups.setdefault("" if ctk is None else canonical_json(dict(ctk)), []).append(i)
        for gkey, members in groups.items():
            extra = {} if gkey == "" else {"chat_template_kwargs": json.loads(gkey)}
            for start in range(0, len(members), self.batch_size):
                idx = members[start : start + self.batch_size]
                convs = [
                    ([{"role": "system", "content": requests[i].system}] if requests[i].system else [])
                    + [{"role": "user", "content": requests[i].user}]
                    for i in idx
                ]
                params = [self._params(requests[i]) for i in idx]
                try:
                    outs = self.llm.chat(convs, sampling_params=params, use_tqdm=False, **extra)
                    batch = [self._result(o) for o in outs]
                    if len(batch) != len(idx):
                        raise RuntimeError(f"vLLM returned {len(batch)} outputs for {len(idx)} prompts")
                except Exception as e:  # one broken batch fails its own requests only
                    batch = [
                        GenerationResult(None, "backend_exception", detail=f"{type(e).__name__}: {e}"[:500])
                        for _ in idx
                    ]
                for i, res in zip(idx, batch):
                    results[i] = res
                    deliver(i, res)
        deliver.finish()
        return results  # type: ignore[return-value]

    @staticmethod
    def _result(request_output: Any) -> GenerationResult:
        outs = getattr(request_output, "outputs", None) or []
        if not outs:
            return GenerationResult(None, "empty_content")
        text = getattr(outs[0], "text", None)
        finish = getattr(outs[0], "finish_reason", None)
        if not isinstance(text, str):
            return GenerationResult(None, "empty_content", finish_reason=finish)
        return GenerationResult(text, None, finish_reason=finish if isinstance(finish, str) else None)
