"""Chat completions over HTTP from an OpenAI-compatible server (``vllm serve``, SGLang, TGI,
vendors): the way the paper's generator and judges (Section 3, Appendix C) run at scale, behind
the one backend contract of :mod:`recipematch.llm.backends` (its error codes included).

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
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import requests  # declared dependency of the environment (via transformers/mlflow)
import urllib3.exceptions as urllib3_exc  # requests' own transport

from recipematch.errors import RecipematchError, short_repr
from recipematch.llm.backends import GenerationBackend, GenerationRequest, GenerationResult, ResultCallback, _Deliver
from recipematch.llm.watchdog import CallWatchdog, watched_session

__all__ = [
    "OpenAICompatibleBackend",
    "ServerUnreachableError",
    "read_api_key",
    "DEFAULT_DEADLINE_S",
    "DEFAULT_MAX_RESPONSE_BYTES",
]

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
