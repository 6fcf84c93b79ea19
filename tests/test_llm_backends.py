"""recipematch.llm.backends: one contract for Replay, OpenAI-compatible HTTP and vLLM backends,
plus each backend's own failure handling (local HTTP server on 127.0.0.1, fake vLLM module)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator

import pytest
from test_llm_support import MODEL, SAMPLING, ChatServer, ScriptedBackend, fake_vllm_module, fixture_corpus

from recipematch.errors import RecipematchError
from recipematch.llm.backends import GenerationBackend, GenerationRequest, GenerationResult, normalise_sampling
from recipematch.llm.http_backend import OpenAICompatibleBackend, ServerUnreachableError
from recipematch.llm.parsing import json_schema_for
from recipematch.llm.pipeline import rows_to_jsonl, run_llm_pairs
from recipematch.llm.prompts import load_prompt
from recipematch.llm.replay import ReplayBackend
from recipematch.llm.vllm_backend import VLLMBackend

D1 = load_prompt("d1_recipe")
JUDGE = load_prompt("judge")


def gen_request(sid: str, text: str, model: str = MODEL, variant: int = 0) -> GenerationRequest:
    system, user = D1.render(n_pos=1, n_neg=3, problem=text)
    return GenerationRequest("d1_recipe", D1.sha256, system, user, sid, variant, SAMPLING, 42, model,
                             json_schema_for("d1_recipe", 1, 3))


def judge_request(sid: str, anchor: str, cand: str, key: str) -> GenerationRequest:
    system, user = JUDGE.render(anchor=anchor, candidate=cand)
    return GenerationRequest("judge", JUDGE.sha256, system, user, sid, key, SAMPLING, 42, MODEL)


Answers = list[tuple[GenerationRequest, str]]
Factory = Callable[[Answers], GenerationBackend]


@pytest.fixture(params=["replay", "openai", "vllm"])
def make_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Factory]:
    """Build a backend of one kind that knows exactly the given (request, answer) pairs."""
    kind = request.param
    servers: list[ChatServer] = []

    def factory(answers: Answers) -> GenerationBackend:
        if kind == "replay":
            recs = [{"prompt_sha256": r.prompt_sha256, "source_id": r.source_id, "variant": r.variant,
                     "raw_text": t, "model_id": r.model_id, "origin": "recorded"} for r, t in answers]
            return ReplayBackend(recordings=recs)
        table = {(r.system, r.user): t for r, t in answers}
        if kind == "openai":
            srv = ChatServer(table).__enter__()
            servers.append(srv)
            return OpenAICompatibleBackend(srv.base_url, MODEL, concurrency=3, max_retries=0, timeout_s=10)
        vllm, sp = fake_vllm_module(table)
        monkeypatch.setitem(sys.modules, "vllm", vllm)
        monkeypatch.setitem(sys.modules, "vllm.sampling_params", sp)
        return VLLMBackend(MODEL, batch_size=2)

    yield factory
    for s in servers:
        s.__exit__(None, None, None)


@pytest.fixture
def corpus() -> dict[str, str]:
    return fixture_corpus()


# ------------------------------------------------------------------ contract (all backends)


def test_contract_answers_byte_for_byte_in_request_order(make_backend: Factory, corpus: dict[str, str]) -> None:
    sids = ["0004", "000d", "000u", "002r", "00cz"]
    reqs = [gen_request(s, corpus[s]) for s in sids]
    texts = [f'{{"answer": "{s}", "note": "caf\u00e9 \u6570\u5b66 {{x}}\\n"}}\n' for s in sids]
    backend = make_backend(list(zip(reqs, texts)))
    res = backend.generate(list(reversed(reqs)))
    assert [r.raw_text for r in res] == list(reversed(texts))
    assert all(r.error is None for r in res)


def test_contract_unanswerable_request_fails_without_text(make_backend: Factory, corpus: dict[str, str]) -> None:
    known, unknown = gen_request("0004", corpus["0004"]), gen_request("0000", corpus["0000"])
    backend = make_backend([(known, '{"a": 1}')])
    res = backend.generate([unknown, known])
    assert res[0].raw_text is None and res[0].error  # never invented text
    assert res[1].raw_text == '{"a": 1}'


def test_contract_on_result_once_per_request(make_backend: Factory, corpus: dict[str, str]) -> None:
    reqs = [gen_request(s, corpus[s]) for s in ["0004", "000d", "000u"]] + [gen_request("0000", corpus["0000"])]
    backend = make_backend([(r, f"t{i}") for i, r in enumerate(reqs[:3])])
    seen: list[tuple[int, str | None]] = []
    res = backend.generate(reqs, on_result=lambda i, r: seen.append((i, r.raw_text)))
    assert sorted(seen, key=lambda x: x[0]) == [(0, "t0"), (1, "t1"), (2, "t2"), (3, None)]
    assert [r.raw_text for r in res] == ["t0", "t1", "t2", None]


def test_contract_empty_batch(make_backend: Factory) -> None:
    assert make_backend([]).generate([]) == []


def test_contract_model_mismatch_is_a_failure(make_backend: Factory, corpus: dict[str, str]) -> None:
    req = gen_request("0004", corpus["0004"])
    backend = make_backend([(req, "t")])
    other = gen_request("0004", corpus["0004"], model="some/other-model")
    res = backend.generate([other])[0]
    assert res.raw_text is None and "mismatch" in res.error


def test_contract_pipeline_rows_identical_across_backends(make_backend: Factory, corpus: dict[str, str], tmp_path) -> None:
    """The arm runner gives the same rows whichever backend serves the same answers."""
    sources = sorted(corpus.items())
    answers = {"0004": (["Sea $ABCD$ un rect\u00e1ngulo; halla su \u00e1rea."], ["Sea $ABCD$ un cuadrado.", "Sea $ABCD$ un rombo."]),
               "000d": (["Two convex quadrilaterals with equal sides."], ["Two concave quadrilaterals."]),
               "000u": ([corpus["000u"]], ["x"])}  # positive identical to the anchor: no row

    def gen_text(sid: str) -> str | None:
        if sid not in answers:
            return None
        p, n = answers[sid]
        return json.dumps({"original_problem": corpus[sid], "equivalent_variants": [{"problem": t} for t in p],
                           "near_miss_variants": [{"problem": t} for t in n]}, ensure_ascii=False)

    def judge_text(cand: str) -> str:
        verdict = "equivalent" if "rombo" in cand or "halla" in cand or "equal" in cand else "not_equivalent"
        return json.dumps({"verdict": verdict, "confidence": 0.75, "reason": "r"})

    captured: list[tuple[GenerationRequest, str]] = []

    def script(r: GenerationRequest) -> str | None:
        text = judge_text(r.user.split("Problem B:\n", 1)[1][:-1]) if r.prompt_name == "judge" else gen_text(r.source_id)
        if text is not None:
            captured.append((r, text))
        return text

    kw = dict(prompt_name="d1_recipe", n_pos=1, n_neg=3, model_id=MODEL, judge_model_id=MODEL, sampling=SAMPLING,
              seed=42, require_tags=False, progress=False)
    ref_rows, ref_fail, ref_counts = run_llm_pairs(sources, backend=ScriptedBackend(script),
                                                   judge_backend=ScriptedBackend(script),
                                                   store_path=tmp_path / "ref.jsonl", **kw)
    backend = make_backend(captured)
    rows, fail, counts = run_llm_pairs(sources, backend=backend, judge_backend=backend,
                                       store_path=tmp_path / "b.jsonl", **kw)

    def drop_origin(rs: list[dict]) -> str:
        rs = json.loads(json.dumps(rs))
        for r in rs:
            r["positive_provenance"]["judge"].pop("origin")
            for n in r["negatives"]:
                n["judge"].pop("origin")
        return rows_to_jsonl(rs)

    assert drop_origin(rows) == drop_origin(ref_rows)
    assert [r["source_id"] for r in rows] == ["0004", "000d"]
    assert [n["text"] for n in rows[0]["negatives"]] == ["Sea $ABCD$ un cuadrado."]  # "rombo" judged equivalent
    assert counts["positives"] == ref_counts["positives"] == {"candidates": 2, "kept": 2, "rejected": 0, "judge_failed": 0}
    assert counts["parse"]["item_rejected"] == {"positive:positive_identical_to_anchor": 1}
    assert counts["generate"]["answered"] == 3 and sum(counts["generate"]["failed"].values()) == 6


# ------------------------------------------------------------------ replay


def test_replay_file_and_conflicts(tmp_path, corpus: dict[str, str]) -> None:
    req = gen_request("0004", corpus["0004"])
    rec = {"prompt_sha256": req.prompt_sha256, "source_id": "0004", "variant": 0, "raw_text": "t",
           "model_id": MODEL, "origin": "peer_release_post_judge"}
    path = tmp_path / "rec.jsonl"
    path.write_text(json.dumps(rec) + "\n" + json.dumps(rec) + "\n", encoding="utf-8")  # exact repeat is fine
    b = ReplayBackend(path)
    assert len(b) == 1
    res = b.generate([req])[0]
    assert (res.raw_text, res.origin, res.attempts) == ("t", "peer_release_post_judge", 0)
    assert b.generate([gen_request("0004", corpus["0004"], variant=1)])[0].error == "no_recorded_answer"
    with pytest.raises(ValueError, match="conflicting"):
        ReplayBackend(recordings=[rec, {**rec, "raw_text": "u"}])
    with pytest.raises(ValueError, match="lacks"):
        ReplayBackend(recordings=[{"source_id": "0004"}])
    with pytest.raises(ValueError):
        ReplayBackend()


# ------------------------------------------------------------------ OpenAI-compatible HTTP


@pytest.fixture
def served(corpus: dict[str, str]) -> Iterator[tuple[ChatServer, list[GenerationRequest]]]:
    reqs = [gen_request(s, corpus[s]) for s in ["0004", "000d", "000u"]]
    with ChatServer({(r.system, r.user): f"answer {r.source_id}" for r in reqs}) as srv:
        yield srv, reqs


def http_backend(srv: ChatServer, sleeps: list[float] | None = None, **kw) -> OpenAICompatibleBackend:
    args = dict(concurrency=2, max_retries=2, backoff=0.5, timeout_s=5.0)
    args.update(kw)
    return OpenAICompatibleBackend(srv.base_url + "/v1/", MODEL, sleep=(sleeps.append if sleeps is not None else time.sleep),
                                   **args)


def test_http_body_and_headers(served) -> None:
    srv, reqs = served
    res = http_backend(srv, api_key="sk-test").generate(reqs[:1])[0]
    assert (res.raw_text, res.attempts, res.finish_reason, res.origin) == ("answer 0004", 1, "stop", "live")
    body = srv.bodies[0]
    assert body["messages"] == [{"role": "system", "content": reqs[0].system}, {"role": "user", "content": reqs[0].user}]
    assert (body["model"], body["temperature"], body["top_p"], body["max_tokens"], body["seed"], body["n"]) == (
        MODEL, 0.7, 0.8, 4096, 42, 1)
    assert "response_format" not in body
    assert srv.headers[0]["Authorization"] == "Bearer sk-test"


def test_http_structured_output_sends_schema(served) -> None:
    srv, reqs = served
    http_backend(srv, structured_output=True).generate(reqs[:1])
    rf = srv.bodies[0]["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["schema"] == json_schema_for("d1_recipe", 1, 3)


def test_http_429_then_success_with_backoff(served) -> None:
    srv, reqs = served
    srv.script(reqs[0].system, reqs[0].user, [("status", 429), ("status_retry_after", 429, 3), ("ok",)])
    sleeps: list[float] = []
    res = http_backend(srv, sleeps).generate(reqs[:1])[0]
    assert (res.raw_text, res.attempts) == ("answer 0004", 3)
    assert sleeps == [0.5, 3.0]  # backoff * 2**k, or Retry-After when larger


def test_http_429_exhausted(served) -> None:
    srv, reqs = served
    k = srv.script(reqs[0].system, reqs[0].user, [("status", 429)])
    sleeps: list[float] = []
    res = http_backend(srv, sleeps).generate(reqs[:1])[0]
    assert (res.raw_text, res.error, res.attempts) == (None, "http_429_exhausted", 3)
    assert srv.hits[k] == 3 and sleeps == [0.5, 1.0]


def test_http_500_retried_then_exhausted_or_recovered(served) -> None:
    srv, reqs = served
    k0 = srv.script(reqs[0].system, reqs[0].user, [("status", 500)])
    srv.script(reqs[1].system, reqs[1].user, [("status", 503), ("ok",)])
    res = http_backend(srv, []).generate(reqs[:2])
    assert (res[0].error, res[0].attempts, srv.hits[k0]) == ("http_500_exhausted", 3, 3)
    assert (res[1].raw_text, res[1].attempts) == ("answer 000d", 2)


def test_http_other_4xx_not_retried(served) -> None:
    srv, reqs = served
    k = srv.script(reqs[0].system, reqs[0].user, [("status", 400)])
    res = http_backend(srv, []).generate(reqs[:1])[0]
    assert (res.error, res.attempts, srv.hits[k]) == ("http_400", 1, 1)


def test_http_malformed_body(served) -> None:
    srv, reqs = served
    srv.script(reqs[0].system, reqs[0].user, [("malformed",)])
    srv.script(reqs[1].system, reqs[1].user, [("no_choices",), ("ok",)])
    res = http_backend(srv, []).generate(reqs[:2])
    assert (res[0].error, res[0].attempts) == ("malformed_response", 3)
    assert "malformed response body" in res[0].detail
    assert (res[1].raw_text, res[1].attempts) == ("answer 000d", 2)


def test_http_malformed_answer_text_is_returned_for_the_parser(served) -> None:
    srv, reqs = served
    srv.script(reqs[0].system, reqs[0].user, [("text", '{"original_problem": "x", ')])
    srv.script(reqs[1].system, reqs[1].user, [("length", '{"original_problem": "cut off')])
    res = http_backend(srv, []).generate(reqs[:2])
    assert res[0].raw_text == '{"original_problem": "x", ' and res[0].error is None
    assert (res[1].raw_text, res[1].finish_reason) == ('{"original_problem": "cut off', "length")


def test_http_slow_answer_times_out_then_recovers(served) -> None:
    srv, reqs = served
    k0 = srv.script(reqs[0].system, reqs[0].user, [("sleep", 1.5)])
    srv.script(reqs[1].system, reqs[1].user, [("sleep", 1.5), ("ok",)])
    t = time.monotonic()
    res = http_backend(srv, [], timeout_s=0.3, max_retries=1).generate(reqs[:2])
    assert (res[0].raw_text, res[0].error, res[0].attempts, srv.hits[k0]) == (None, "timeout", 2, 2)
    assert (res[1].raw_text, res[1].attempts) == ("answer 000d", 2)
    assert time.monotonic() - t < 2.5  # waiting out two slow answers would take 3 s


def test_http_connection_refused_raises_naming_the_url_after_retries() -> None:
    srv = ChatServer()
    port = srv.port
    srv.httpd.server_close()  # the port is now closed
    sleeps: list[float] = []
    b = OpenAICompatibleBackend(f"http://127.0.0.1:{port}", MODEL, max_retries=2, backoff=0.25, timeout_s=1,
                                concurrency=1, sleep=sleeps.append)
    reqs = [gen_request(f"s{i}", f"problem {i}") for i in range(5)]
    delivered: dict[int, GenerationResult] = {}
    with pytest.raises(ServerUnreachableError, match=f"http://127.0.0.1:{port}/v1/chat/completions") as ei:
        b.generate(reqs, on_result=lambda i, r: delivered.__setitem__(i, r))
    assert isinstance(ei.value, RecipematchError) and "5 of 5 calls" in str(ei.value)
    # every result was delivered first (the store keeps what it can), all connection errors
    assert sorted(delivered) == [0, 1, 2, 3, 4] and {r.error for r in delivered.values()} == {"connection_error"}
    # the first call used its retries; the others were not sent against the dead address
    assert sorted(r.attempts for r in delivered.values()) == [0, 0, 0, 0, 3]
    assert sleeps == [0.25, 0.5]


def test_http_concurrency_is_bounded(corpus: dict[str, str]) -> None:
    reqs = [gen_request(f"s{i}", f"problem {i}") for i in range(6)]
    with ChatServer({(r.system, r.user): "t" for r in reqs}, handler_delay=0.2) as srv:
        res = OpenAICompatibleBackend(srv.base_url, MODEL, concurrency=3).generate(reqs)
        assert [r.raw_text for r in res] == ["t"] * 6
        assert 2 <= srv.max_inflight <= 3


def test_http_constructor_validation() -> None:
    with pytest.raises(ValueError):
        OpenAICompatibleBackend("http://127.0.0.1:1", MODEL, concurrency=0)


# ------------------------------------------------------------------ vLLM


def test_vllm_missing_gives_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(RecipematchError, match="vLLM is not installed in this environment; run `vllm serve` and use "
                                                "backend: openai") as ei:
        VLLMBackend(MODEL)
    assert isinstance(ei.value, ImportError)


def test_backends_module_does_not_import_vllm() -> None:
    import subprocess

    code = "import recipematch.llm, sys; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_vllm_batches_and_maps_sampling(monkeypatch: pytest.MonkeyPatch, corpus: dict[str, str]) -> None:
    reqs = [gen_request(s, corpus[s]) for s in ["0004", "000d", "000u"]]
    vllm, sp = fake_vllm_module({(r.system, r.user): f"a{i}" for i, r in enumerate(reqs)})
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sp)
    b = VLLMBackend("/models/qwen3-32b-awq", model_id=MODEL, batch_size=2, tensor_parallel_size=1, quantization="awq")
    assert vllm.instances[0].model == "/models/qwen3-32b-awq"
    assert vllm.instances[0].kw == {"tensor_parallel_size": 1, "quantization": "awq"}
    res = b.generate(reqs)
    assert [r.raw_text for r in res] == ["a0", "a1", "a2"]
    assert [len(c[0]) for c in vllm.calls] == [2, 1]
    params = vllm.calls[0][1][0].kw
    assert {k: params[k] for k in ("n", "temperature", "top_p", "max_tokens", "seed")} == {
        "n": 1, "temperature": 0.7, "top_p": 0.8, "max_tokens": 4096, "seed": 42}
    assert params["structured_outputs"].json == json_schema_for("d1_recipe", 1, 3)
    assert vllm.calls[0][0][0] == [{"role": "system", "content": reqs[0].system},
                                   {"role": "user", "content": reqs[0].user}]


def test_vllm_broken_batch_fails_only_its_requests(monkeypatch: pytest.MonkeyPatch, corpus: dict[str, str]) -> None:
    reqs = [gen_request(s, corpus[s]) for s in ["0004", "000d", "000u"]]
    vllm, sp = fake_vllm_module({(r.system, r.user): "ok" for r in reqs})
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sp)
    b = VLLMBackend(MODEL, batch_size=2)
    real_chat = b.llm.chat
    calls = {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("CUDA out of memory")
        return real_chat(*a, **k)

    b.llm.chat = flaky
    res = b.generate(reqs)
    assert [r.error for r in res] == ["backend_exception", "backend_exception", None]
    assert "CUDA out of memory" in res[0].detail and res[2].raw_text == "ok"


# ------------------------------------------------------------------ requests and results


def test_request_key_covers_every_answer_changing_field(corpus: dict[str, str]) -> None:
    base = gen_request("0004", corpus["0004"])
    same = gen_request("0004", corpus["0004"])
    assert base.key == same.key and len(base.key) == 64
    variants = [
        gen_request("0004", corpus["0004"], variant=1),
        gen_request("0004", corpus["0004"] + " "),
        gen_request("0004", corpus["0004"], model="other"),
        GenerationRequest(**{**base.__dict__, "seed": 43}),
        GenerationRequest(**{**base.__dict__, "sampling": {**SAMPLING, "temperature": 0.0}}),
        GenerationRequest(**{**base.__dict__, "response_schema": None}),
        GenerationRequest(**{**base.__dict__, "source_id": "0005"}),
    ]
    assert len({v.key for v in variants} | {base.key}) == len(variants) + 1
    # 1 and 1.0 are the same setting
    a = GenerationRequest(**{**base.__dict__, "sampling": {"temperature": 1, "top_p": 1, "max_tokens": 10}})
    b = GenerationRequest(**{**base.__dict__, "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 10}})
    assert a.key == b.key


@pytest.mark.parametrize(
    "sampling",
    [{"temperature": 0.7, "top_p": 0.8}, {**SAMPLING, "top_k": 20}, {**SAMPLING, "temperature": -1},
     {**SAMPLING, "top_p": 0}, {**SAMPLING, "max_tokens": 0}, {**SAMPLING, "max_tokens": 1.5},
     {**SAMPLING, "temperature": float("nan")}, {**SAMPLING, "temperature": True}],
)
def test_bad_sampling_refused(sampling: dict) -> None:
    with pytest.raises(ValueError):
        normalise_sampling(sampling)


def test_result_needs_exactly_one_of_text_and_error() -> None:
    with pytest.raises(ValueError):
        GenerationResult(None, None)
    with pytest.raises(ValueError):
        GenerationResult("t", "timeout")


def test_contract_a_raising_callback_does_not_lose_other_results(make_backend: Factory, corpus: dict[str, str]) -> None:
    """Regression: an exception in ``on_result`` (e.g. the store) aborted the batch and, over
    HTTP, discarded every result still in flight. Now every result is delivered, then the
    first exception is raised."""
    reqs = [gen_request(s, corpus[s]) for s in ["0004", "000d", "000u", "0025"]]
    backend = make_backend([(r, f"answer {r.source_id}") for r in reqs])
    delivered: dict[int, str | None] = {}

    def on_result(i: int, res: GenerationResult) -> None:
        delivered[i] = res.raw_text
        if len(delivered) == 1:
            raise RuntimeError("store exploded")

    with pytest.raises(RuntimeError, match="store exploded"):
        backend.generate(reqs, on_result=on_result)
    assert delivered == {i: f"answer {r.source_id}" for i, r in enumerate(reqs)}


def test_vllm_passes_chat_template_kwargs_per_batch(monkeypatch: pytest.MonkeyPatch, corpus: dict[str, str]) -> None:
    plain = [gen_request(s, corpus[s]) for s in ["0004", "000d"]]
    off = [GenerationRequest(**{**r.__dict__, "chat_template_kwargs": {"enable_thinking": False}}) for r in plain]
    vllm, sp = fake_vllm_module({(r.system, r.user): "ok" for r in plain})
    seen_kwargs: list[dict] = []
    real_chat = vllm.LLM.chat

    def chat(self, messages, sampling_params=None, use_tqdm=True, **kw):  # noqa: ANN001
        seen_kwargs.append(kw)
        return real_chat(self, messages, sampling_params=sampling_params, use_tqdm=use_tqdm)

    monkeypatch.setattr(vllm.LLM, "chat", chat)
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sp)
    res = VLLMBackend(MODEL, batch_size=8).generate([plain[0], off[0], plain[1], off[1]])
    assert [r.raw_text for r in res] == ["ok"] * 4
    assert seen_kwargs == [{}, {"chat_template_kwargs": {"enable_thinking": False}}]


def test_http_api_key_from_named_variable_and_redacted(monkeypatch: pytest.MonkeyPatch, served) -> None:
    srv, reqs = served
    monkeypatch.setenv("RM_TEST_KEY", "sk-abc-123")
    b = http_backend(srv, api_key_env="RM_TEST_KEY")
    assert b.generate(reqs[:1])[0].raw_text == "answer 0004"
    assert srv.headers[-1]["Authorization"] == "Bearer sk-abc-123"
    assert "sk-abc-123" not in repr(b) and "RM_TEST_KEY" in repr(b)
    with pytest.raises(ValueError, match="at most one"):
        OpenAICompatibleBackend(srv.base_url, MODEL, api_key="k", api_key_env="RM_TEST_KEY")


def test_request_key_includes_chat_template_kwargs_only_when_given(corpus: dict[str, str]) -> None:
    base = gen_request("0004", corpus["0004"])
    off = GenerationRequest(**{**base.__dict__, "chat_template_kwargs": {"enable_thinking": False}})
    on = GenerationRequest(**{**base.__dict__, "chat_template_kwargs": {"enable_thinking": True}})
    assert len({base.key, off.key, on.key}) == 3
    # a request without it keeps the key it had before the field existed (existing stores stay valid)
    assert GenerationRequest(**{**base.__dict__, "chat_template_kwargs": None}).key == base.key
    empty = GenerationRequest(**{**base.__dict__, "chat_template_kwargs": {}})
    assert empty.key == base.key and empty.chat_template_kwargs is None
    with pytest.raises(ValueError, match="JSON values"):
        GenerationRequest(**{**base.__dict__, "chat_template_kwargs": {"x": {1, 2}}})
