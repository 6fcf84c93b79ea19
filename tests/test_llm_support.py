"""Helpers shared by the ``test_llm_*`` modules (no tests here).

* :class:`ChatServer`: an OpenAI-compatible ``/v1/chat/completions`` server on 127.0.0.1 at a
  random free port, started and stopped by the tests. It answers from a table
  ``(system, user) -> text`` and can be scripted per request to misbehave (HTTP 429/500,
  malformed bodies, slow answers). It counts hits per request. Optionally it serves only one
  model (``model``: other model names get HTTP 404, as vLLM answers), requires an API key
  (``required_key``: a request without it gets HTTP 401 whose body echoes the header it got,
  as a careless server might), and lists its model at ``GET /v1/models``.
* :func:`fake_vllm_module`: a stand-in ``vllm`` module whose ``LLM.chat`` answers from the
  same table, so :class:`VLLMBackend`'s batching and parameter mapping run without vLLM.
* :class:`ScriptedBackend`: an in-memory backend driven by a function, counting calls.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import types
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from conftest import RELEASE

from recipematch.llm.backends import GenerationBackend, GenerationRequest, GenerationResult

FIXTURES = Path(__file__).parent / "fixtures" / "llm"
#: The repository's own copy of the peer's release (``dvc pull data.dvc``); tests that read it
#: call ``conftest.require_real_data(SHARED_RELEASE)`` (skipped locally, failed under CI).
SHARED_RELEASE = RELEASE
MODEL = "Qwen/Qwen3-32B-AWQ"
SAMPLING = {"temperature": 0.7, "top_p": 0.8, "max_tokens": 4096}


def message_key(system: str, user: str) -> str:
    return hashlib.sha256(system.encode() + b"\x00" + user.encode()).hexdigest()


class ChatServer:
    """See module docstring. Actions for :meth:`script` (one per hit, the last repeats):
    ``("ok",)`` answer from the table; ``("text", s)`` answer ``s``; ``("status", code)``;
    ``("status_retry_after", code, seconds)``; ``("malformed",)`` a body that is not JSON;
    ``("no_choices",)`` valid JSON without ``choices``; ``("sleep", s)`` sleep then answer;
    ``("length", s)`` answer ``s`` with ``finish_reason="length"``."""

    def __init__(self, answers: dict[tuple[str, str], str] | None = None, *, handler_delay: float = 0.0,
                 model: str | None = None, required_key: str | None = None) -> None:
        self.answers = {message_key(s, u): t for (s, u), t in (answers or {}).items()}
        self.model = model
        self.required_key = required_key
        self.scripts: dict[str, list[tuple]] = {}
        self.hits: Counter = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.handler_delay = handler_delay
        self.inflight = 0
        self.max_inflight = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                outer._handle(self)

            def do_GET(self) -> None:  # noqa: N802
                if not outer._authorised(self):
                    return
                if self.path.rstrip("/") != "/v1/models":
                    outer._send(self, 404, b'{"error": "no such route"}')
                    return
                ids = [outer.model] if outer.model else ["any"]
                outer._send(self, 200, json.dumps({"object": "list", "data": [{"id": m} for m in ids]}).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)

    def add(self, system: str, user: str, text: str) -> str:
        k = message_key(system, user)
        self.answers[k] = text
        return k

    def script(self, system: str, user: str, actions: list[tuple]) -> str:
        k = message_key(system, user)
        self.scripts[k] = actions
        return k

    def _send(self, h: BaseHTTPRequestHandler, code: int, body: bytes, extra: dict[str, str] | None = None) -> None:
        try:
            h.send_response(code)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # client gave up (time-out)
            pass

    def _authorised(self, h: BaseHTTPRequestHandler) -> bool:
        if self.required_key is None:
            return True
        got = h.headers.get("Authorization", "")
        if got == f"Bearer {self.required_key}":
            return True
        self._send(h, 401, json.dumps({"error": f"invalid credentials: {got!r}"}).encode())
        return False

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        n = int(h.headers.get("Content-Length", "0"))
        body = json.loads(h.rfile.read(n).decode("utf-8"))
        if not self._authorised(h):
            return
        if self.model is not None and body.get("model") != self.model:
            self._send(h, 404, json.dumps({"error": f"The model `{body.get('model')}` does not exist."}).encode())
            return
        msgs = body["messages"]
        if len(msgs) == 1:  # no system message was sent (a prompt without one)
            msgs = [{"role": "system", "content": ""}, *msgs]
        k = message_key(msgs[0]["content"], msgs[1]["content"])
        with self._lock:
            self.hits[k] += 1
            hit = self.hits[k]
            self.bodies.append(body)
            self.headers.append(dict(h.headers))
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            if self.handler_delay:
                time.sleep(self.handler_delay)
            actions = self.scripts.get(k, [("ok",)])
            act = actions[min(hit, len(actions)) - 1]
            kind = act[0]
            if kind == "sleep":
                time.sleep(act[1])
                kind = "ok"
            if kind == "ok":
                if k not in self.answers:
                    self._send(h, 400, b'{"error": "no such request"}')  # final, like a refused request
                    return
                self._send(h, 200, self._completion(self.answers[k], "stop"))
            elif kind == "text":
                self._send(h, 200, self._completion(act[1], "stop"))
            elif kind == "length":
                self._send(h, 200, self._completion(act[1], "length"))
            elif kind == "status":
                self._send(h, act[1], b'{"error": "scripted"}')
            elif kind == "status_retry_after":
                self._send(h, act[1], b'{"error": "scripted"}', {"Retry-After": str(act[2])})
            elif kind == "malformed":
                self._send(h, 200, b'{"choices": [{"message": {"content": "x"')
            elif kind == "no_choices":
                self._send(h, 200, b'{"object": "chat.completion"}')
            elif kind in ("endless", "trickle", "huge", "gzip_bomb"):
                self._stream(h, act)
            elif kind == "echo_auth":  # a server that quotes the request's headers in its answer
                self._send(h, 200, self._completion(f"headers: {h.headers.get('Authorization', '')}", "stop"))
            else:
                raise AssertionError(kind)
        finally:
            with self._lock:
                self.inflight -= 1

    @staticmethod
    def _stream(h: BaseHTTPRequestHandler, act: tuple) -> None:
        """Bodies that must not be read whole: ``("endless",)`` a chunked body that never
        ends; ``("trickle", n_bytes, interval_s)`` a Content-Length body sent one byte per
        interval; ``("huge", n_bytes)`` one valid completion padded to n_bytes;
        ``("gzip_bomb", n_bytes)`` a small gzip body that inflates to n_bytes."""
        import gzip

        kind = act[0]
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            if kind == "endless":
                h.send_header("Transfer-Encoding", "chunked")
                h.end_headers()
                piece = b"x" * 65536
                deadline = time.monotonic() + 60  # a test server never outlives its test for long
                while time.monotonic() < deadline:
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            elif kind == "trickle":
                n, interval = act[1], act[2]
                h.send_header("Content-Length", str(n))
                h.end_headers()
                for _ in range(n):
                    h.wfile.write(b" ")
                    h.wfile.flush()
                    time.sleep(interval)
            elif kind == "huge":
                pad = " " * act[1]
                body = ChatServer._completion("{}" + pad, "stop")
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                h.wfile.write(body)
            else:
                body = gzip.compress(b"{" + b" " * act[1] + b"}")
                h.send_header("Content-Encoding", "gzip")
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                h.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: what we want
            pass

    @staticmethod
    def _completion(text: str, finish: str) -> bytes:
        body = {
            "id": "cmpl-test",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        }
        try:
            return json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate in the text: send it as a JSON escape
            return json.dumps(body, ensure_ascii=True).encode("ascii")


def fake_vllm_module(answers: dict[tuple[str, str], str]) -> tuple[types.ModuleType, types.ModuleType]:
    """A stand-in ``vllm`` package (and its ``sampling_params`` submodule). ``LLM.chat``
    answers each conversation from ``answers``; an unknown one gets no output. Every
    ``LLM`` instance and ``chat`` call is recorded on the module (``instances``, ``calls``)."""
    vllm = types.ModuleType("vllm")
    sp = types.ModuleType("vllm.sampling_params")
    vllm.instances = []  # type: ignore[attr-defined]
    vllm.calls = []  # type: ignore[attr-defined]

    class SamplingParams:
        def __init__(self, **kw: Any) -> None:
            self.kw = kw

    class StructuredOutputsParams:
        def __init__(self, json: Any = None) -> None:  # noqa: A002
            self.json = json

    class _Out:
        def __init__(self, text: str) -> None:
            self.text = text
            self.finish_reason = "stop"

    class _ReqOut:
        def __init__(self, outputs: list[_Out]) -> None:
            self.outputs = outputs

    class LLM:
        def __init__(self, model: str, **kw: Any) -> None:
            self.model = model
            self.kw = kw
            vllm.instances.append(self)  # type: ignore[attr-defined]

        def chat(self, messages: list, sampling_params: Any = None, use_tqdm: bool = True) -> list[_ReqOut]:
            vllm.calls.append((messages, sampling_params))  # type: ignore[attr-defined]
            out = []
            for conv in messages:
                text = answers.get((conv[0]["content"], conv[1]["content"]))
                out.append(_ReqOut([] if text is None else [_Out(text)]))
            return out

    vllm.LLM = LLM  # type: ignore[attr-defined]
    vllm.SamplingParams = SamplingParams  # type: ignore[attr-defined]
    sp.SamplingParams = SamplingParams  # type: ignore[attr-defined]
    sp.StructuredOutputsParams = StructuredOutputsParams  # type: ignore[attr-defined]
    vllm.sampling_params = sp  # type: ignore[attr-defined]
    return vllm, sp


class ScriptedBackend(GenerationBackend):
    """Answers each request with ``fn(request)`` (a text, or a :class:`GenerationResult`);
    counts calls per request key."""

    def __init__(self, fn: Callable[[GenerationRequest], str | GenerationResult | None]) -> None:
        self.fn = fn
        self.calls: Counter = Counter()

    def generate(self, requests, on_result=None):  # type: ignore[no-untyped-def]
        out = []
        for i, r in enumerate(requests):
            self.calls[r.key] += 1
            ans = self.fn(r)
            if ans is None:
                res = GenerationResult(None, "no_recorded_answer")
            elif isinstance(ans, GenerationResult):
                res = ans
            else:
                res = GenerationResult(ans, None)
            if on_result is not None:
                on_result(i, res)
            out.append(res)
        return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def fixture_corpus() -> dict[str, str]:
    return {r["_id"]: r["text"] for r in read_jsonl(FIXTURES / "corpus.sample.jsonl")}


def fixture_d1_rows() -> list[dict[str, Any]]:
    return read_jsonl(FIXTURES / "pairs_d1_recipe.sample.jsonl")


def release_script(corpus: dict[str, str], rows: list[dict[str, Any]]) -> Callable[[GenerationRequest], str | None]:
    """Answers like a live model would, from the fixture's released D1 rows: generation gets
    a D1 answer holding the released texts (no tags); the judge says ``equivalent`` (0.9)
    for a released positive and ``not_equivalent`` (0.8) otherwise. Unreleased sources get
    no answer (``None``)."""
    by_sid = {r["source_id"]: r for r in rows}
    positives = {r["positive_text"] for r in rows}

    def script(req: GenerationRequest) -> str | None:
        if req.prompt_name == "judge":
            cand = req.user.split("Problem B:\n", 1)[1][:-1]
            ok = cand in positives
            return json.dumps({"verdict": "equivalent" if ok else "not_equivalent",
                               "confidence": 0.9 if ok else 0.8, "reason": "scripted"})
        row = by_sid.get(req.source_id)
        if row is None:
            return None
        return json.dumps({"original_problem": corpus[req.source_id],
                           "equivalent_variants": [{"problem": row["positive_text"]}],
                           "near_miss_variants": [{"problem": n["text"]} for n in row["negatives"]]},
                          ensure_ascii=False)

    return script


def learn_answers(sources: list[tuple[str, str]], script: Callable[[GenerationRequest], str | None],
                  store_path: Path, **kw: Any) -> tuple[dict[tuple[str, str], str], list[GenerationRequest], tuple]:
    """Run an arm once through :class:`ScriptedBackend` to learn its requests; returns the
    ``(system, user) -> answer`` table a :class:`ChatServer` needs, the requests, and the
    reference ``(rows, failures, counts)``."""
    from recipematch.llm.pipeline import run_llm_pairs

    seen: dict[str, GenerationRequest] = {}

    def capture(r: GenerationRequest) -> str | None:
        seen[r.key] = r
        return script(r)

    ref = run_llm_pairs(sources, backend=ScriptedBackend(capture), judge_backend=ScriptedBackend(capture),
                        store_path=store_path, **kw)
    table = {(r.system, r.user): t for r in seen.values() if (t := script(r)) is not None}
    return table, list(seen.values()), ref
