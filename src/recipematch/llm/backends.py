"""Generation backends behind one interface (SPEC §3.2: "every call's prompt hash, model,
sampling settings and seed are recorded").

All backends implement :meth:`GenerationBackend.generate`::

    generate(requests: list[GenerationRequest], on_result=None) -> list[GenerationResult]

The returned list is aligned with ``requests``. A backend never raises for a failed call:
it returns a :class:`GenerationResult` with ``raw_text=None`` and an ``error`` code. If
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
* :class:`VLLMBackend`: in-process vLLM (``import vllm`` happens inside the constructor; vLLM
  lives in a separate GPU environment, see ``pyproject.toml`` extra ``gpu``).

Error codes (``GenerationResult.error``): ``no_recorded_answer``,
``recorded_model_mismatch``, ``http_429_exhausted``, ``http_5xx_exhausted`` (``http_500_exhausted``,
``http_503_exhausted``, ...), ``http_<status>`` (other 4xx, not retried), ``timeout``,
``connection_error``, ``malformed_response``, ``empty_content``, ``backend_exception``.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "GenerationRequest",
    "GenerationResult",
    "GenerationBackend",
    "ReplayBackend",
    "OpenAICompatibleBackend",
    "VLLMBackend",
    "normalise_sampling",
    "canonical_json",
    "replay_key",
    "ResultCallback",
]

ResultCallback = Callable[[int, "GenerationResult"], None]


def canonical_json(obj: Any) -> str:
    """Canonical JSON text: sorted keys, no spaces, UTF-8 characters kept, NaN refused."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _sha256_text(text: str) -> str:
    """SHA-256 hex of the text's UTF-8 bytes. A lone surrogate (not encodable as UTF-8) is
    encoded with ``surrogatepass`` instead of raising; every other text hashes as plain UTF-8."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "sampling", normalise_sampling(self.sampling))
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
        sampling, seed, model_id, response_schema_sha256}`` (``v`` = key format version 1).
        Two requests share a key iff they would send the same call."""
        schema = None if self.response_schema is None else _sha256_text(canonical_json(self.response_schema))
        return _sha256_text(
            canonical_json(
                {
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
        raw_text: the model's answer text as received (never altered).
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
        raise ValueError(f"{where}: recording lacks {missing}: {dict(rec)!r:.200}")
    ident = f"{where} (source_id {rec['source_id']!r}, variant {rec['variant']!r})"
    for f in ("prompt_sha256", "source_id", "model_id", "origin"):
        if not isinstance(rec[f], str) or not rec[f]:
            raise ValueError(f"{ident}: {f} must be a non-empty string, got {rec[f]!r:.80}")
    v = rec["variant"]
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"{ident}: variant must be an int or a string, got {v!r:.80}")
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
    """Chat completions over HTTP (OpenAI-compatible servers: vLLM, SGLang, TGI, vendors).

    Args:
        base_url: server root, e.g. ``"http://127.0.0.1:8000"`` (a trailing ``/v1`` is
            accepted); requests go to ``{root}/v1/chat/completions``.
        model: the ``model`` field sent to the server. Each request's ``model_id`` must
            equal it (a request meant for another model fails with ``model_mismatch``).
        api_key: sent as ``Authorization: Bearer <key>`` when given.
        concurrency: calls in flight at once (≥ 1).
        max_retries: retries after the first call (≥ 0) on 429, 5xx, time-out, connection
            error or a malformed body. Other 4xx are not retried.
        backoff: base delay in seconds; retry ``k`` (0-based) waits ``backoff * 2**k``, or the
            server's ``Retry-After`` seconds when larger (capped at ``max_backoff``).
        timeout_s: per-call read/connect time-out in seconds.
        structured_output: send ``response_format={"type": "json_schema", ...}`` when the
            request carries a ``response_schema`` (servers such as vLLM honour it).
        sleep: the sleep function (tests pass a fast one).

    Raises:
        ValueError: ``concurrency < 1``, ``max_retries < 0``, ``backoff < 0`` or
            ``timeout_s <= 0``.

    The body sends ``messages=[system, user]``, ``temperature``, ``top_p``,
    ``max_tokens``, ``seed`` and ``n=1``; the answer is ``choices[0].message.content``.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        concurrency: int = 8,
        max_retries: int = 4,
        backoff: float = 1.0,
        timeout_s: float = 300.0,
        max_backoff: float = 60.0,
        structured_output: bool = False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        import requests  # declared dependency of the environment (via transformers/mlflow)

        if concurrency < 1 or max_retries < 0 or backoff < 0 or timeout_s <= 0:
            raise ValueError("need concurrency >= 1, max_retries >= 0, backoff >= 0, timeout_s > 0")
        root = base_url.rstrip("/")
        if root.endswith("/v1"):
            root = root[: -len("/v1")]
        self.url = root + "/v1/chat/completions"
        self.model = model
        self.api_key = api_key
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout_s = timeout_s
        self.structured_output = structured_output
        self._sleep = sleep
        self._requests = requests
        self._local = threading.local()

    def _session(self):
        s = getattr(self._local, "session", None)
        if s is None:
            s = self._requests.Session()
            self._local.session = s
        return s

    def _body(self, req: GenerationRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": req.system},
                {"role": "user", "content": req.user},
            ],
            "temperature": req.sampling["temperature"],
            "top_p": req.sampling["top_p"],
            "max_tokens": req.sampling["max_tokens"],
            "seed": req.seed,
            "n": 1,
        }
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

    def _call(self, req: GenerationRequest) -> GenerationResult:
        if req.model_id != self.model:
            return GenerationResult(
                None, "model_mismatch", attempts=0, detail=f"backend serves {self.model!r}, request wants {req.model_id!r}"
            )
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(self._body(req), ensure_ascii=False).encode("utf-8")
        exc_t = self._requests.exceptions
        last_error, detail = "connection_error", None
        for attempt in range(self.max_retries + 1):
            retry_after = None
            try:
                resp = self._session().post(self.url, data=data, headers=headers, timeout=self.timeout_s)
            except exc_t.Timeout as e:
                last_error, detail = "timeout", str(e)
            except exc_t.RequestException as e:
                last_error, detail = "connection_error", str(e)
            else:
                status = resp.status_code
                if status == 200:
                    parsed = self._parse_body(resp.content)
                    if isinstance(parsed, GenerationResult):
                        return GenerationResult(
                            parsed.raw_text, parsed.error, attempts=attempt + 1,
                            finish_reason=parsed.finish_reason, detail=parsed.detail,
                        )
                    last_error, detail = "malformed_response", parsed
                elif status == 429 or status >= 500:
                    last_error = "http_429" if status == 429 else f"http_{status}"
                    detail = resp.text[:500]
                    retry_after = resp.headers.get("Retry-After")
                else:
                    return GenerationResult(None, f"http_{status}", attempts=attempt + 1, detail=resp.text[:500])
            if attempt < self.max_retries:
                self._sleep(self._delay(attempt, retry_after))
        code = f"{last_error}_exhausted" if last_error.startswith("http_") else last_error
        return GenerationResult(None, code, attempts=self.max_retries + 1, detail=detail)

    @staticmethod
    def _parse_body(content: bytes) -> GenerationResult | str:
        """A result for a well-formed body, else a string saying what was wrong."""
        try:
            obj = json.loads(content.decode("utf-8"))
            choice = obj["choices"][0]
            text = choice["message"]["content"]
            finish = choice.get("finish_reason")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            return f"malformed response body: {type(e).__name__}: {e}"[:500]
        if text is None or not isinstance(text, str):
            return GenerationResult(None, "empty_content", finish_reason=finish)
        return GenerationResult(text, None, finish_reason=finish if isinstance(finish, str) else None)

    def generate(
        self, requests: Sequence[GenerationRequest], on_result: ResultCallback | None = None
    ) -> list[GenerationResult]:
        results: list[GenerationResult | None] = [None] * len(requests)
        if not requests:
            return []
        deliver = _Deliver(on_result)
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            futures = {pool.submit(self._safe_call, r): i for i, r in enumerate(requests)}
            for fut in as_completed(futures):  # callbacks run here, in the caller's thread
                i = futures[fut]
                results[i] = fut.result()
                deliver(i, results[i])
        deliver.finish()
        return results  # type: ignore[return-value]

    def _safe_call(self, req: GenerationRequest) -> GenerationResult:
        try:
            return self._call(req)
        except Exception as e:  # a bug must not lose the other answers of the batch
            return GenerationResult(None, "backend_exception", detail=f"{type(e).__name__}: {e}"[:500])


_VLLM_MISSING = (
    "VLLMBackend needs the 'vllm' package, which is not installed in this environment. "
    "vLLM pins its own torch/transformers and cannot share the dev/CI environment; install it "
    "in a separate GPU environment (pip install 'recipematch[gpu]'), or use "
    "OpenAICompatibleBackend against a running `vllm serve` instead."
)


class VLLMBackend(GenerationBackend):
    """In-process vLLM generation, batched through ``LLM.chat``.

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
    seed=request.seed, n=1)``.

    Raises:
        ImportError: vLLM is not installed (the message says how to get it).
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
            raise ImportError(_VLLM_MISSING) from e
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
        for start in range(0, len(todo), self.batch_size):
            idx = todo[start : start + self.batch_size]
            convs = [
                [
                    {"role": "system", "content": requests[i].system},
                    {"role": "user", "content": requests[i].user},
                ]
                for i in idx
            ]
            params = [self._params(requests[i]) for i in idx]
            try:
                outs = self.llm.chat(convs, sampling_params=params, use_tqdm=False)
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
