"""Generation backends behind one interface (paper Section 3 and Appendix C: every call's
prompt hash, model, sampling settings and seed are recorded).

All backends implement :meth:`GenerationBackend.generate`::

    generate(requests: list[GenerationRequest], on_result=None) -> list[GenerationResult]

The returned list is aligned with ``requests``. A backend never raises for a failed call:
it returns a :class:`GenerationResult` with ``raw_text=None`` and an ``error`` code. The one
exception is a server that cannot be reached at all: ``OpenAICompatibleBackend`` then
delivers every result it has (answers received before the outage included) and raises
:class:`~recipematch.llm.http_backend.ServerUnreachableError`, naming the URL, once the batch
is done. If ``on_result`` is given it is called once per request, ``on_result(index,
result)``, in the caller's thread, as soon as that result is known (the call store uses it to
write each answer before the next arrives, so a killed run loses at most the calls in
flight). If ``on_result`` raises, the backend still finishes the batch and delivers every
other result to it; the first such exception is raised once the batch is done (so one bad
callback never discards the answers of the calls still in flight).

Backends, one module each:

* :class:`~recipematch.llm.replay.ReplayBackend` (:mod:`recipematch.llm.replay`): answers from
  recorded outputs keyed by ``(prompt_sha256, source_id, variant)``; anything unrecorded fails
  with ``no_recorded_answer``. It never invents text.
* :class:`~recipematch.llm.http_backend.OpenAICompatibleBackend`
  (:mod:`recipematch.llm.http_backend`): ``POST {base_url}/v1/chat/completions`` with bounded
  concurrency and retries with exponential back-off on HTTP 429, HTTP 5xx, time-outs,
  connection errors and malformed response bodies.
* :class:`~recipematch.llm.vllm_backend.VLLMBackend` (:mod:`recipematch.llm.vllm_backend`):
  in-process vLLM, kept only for an environment where ``import vllm`` works; elsewhere it
  raises :class:`~recipematch.llm.vllm_backend.VLLMNotInstalledError`. The at-scale path is a
  vLLM *server* reached through ``OpenAICompatibleBackend`` (see :mod:`recipematch.llm.serving`
  for the ``vllm serve`` command).

Error codes (``GenerationResult.error``): ``no_recorded_answer``,
``recorded_model_mismatch``, ``http_429_exhausted``, ``http_5xx_exhausted`` (``http_500_exhausted``,
``http_503_exhausted``, ...), ``http_<status>`` (other 4xx, not retried), ``timeout``,
``connection_error``, ``malformed_response``, ``empty_content``, ``backend_exception``,
``model_mismatch``, ``too_large`` (an answer body over the backend's ``max_response_bytes``:
final; a ``timeout`` also covers a call that ran past its ``deadline_s``). The codes in :data:`RETRY_LATER_ERRORS` mean that no model answered
(nothing was paid for): the pipeline sends such a request again on its next run.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from recipematch.errors import short_repr
from recipematch.io import canonical_json, sha256_text

__all__ = [
    "GenerationRequest",
    "GenerationResult",
    "GenerationBackend",
    "RETRY_LATER_ERRORS",
    "is_retry_later",
    "normalise_sampling",
    "canonical_json",
    "ResultCallback",
]

ResultCallback = Callable[[int, "GenerationResult"], None]

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
