"""Generation at scale through OpenAI-compatible servers (recipematch.llm.serving and the HTTP
backend): the vLLM server command, Qwen3's thinking switch and reasoning preambles, generator
and judge on different servers, API keys that never leak, and server faults (unreachable,
stalling, malformed) with resume. Every server is a local one on 127.0.0.1."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from test_llm_support import (
    MODEL,
    SAMPLING,
    ChatServer,
    fixture_corpus,
    fixture_d1_rows,
    learn_answers,
    message_key,
    release_script,
)

from recipematch.errors import RecipematchError
from recipematch.llm import serving
from recipematch.llm.http_backend import ServerUnreachableError, read_api_key
from recipematch.llm.pipeline import rows_to_jsonl, run_llm_pairs
from recipematch.llm.recordings import recordings_from_store
from recipematch.llm.serving import ServerSpec, open_server, vllm_serve_command

JUDGE_MODEL = "mistralai/Mistral-Small-24B-Instruct-2501"
SECRET = "sk-RMTEST-7f3c9e1a-0b52-DO-NOT-LEAK"
NO_THINK = {"enable_thinking": False}


def no_sleep(_s: float) -> None:
    return None


def spec(srv_or_url, model: str = MODEL, **kw) -> ServerSpec:
    url = srv_or_url if isinstance(srv_or_url, str) else srv_or_url.base_url
    args = dict(concurrency=3, max_retries=1, backoff_s=0.01, timeout_s=10.0)
    args.update(kw)
    return ServerSpec(url, model, **args)


def arm_kw(**extra) -> dict:
    kw = dict(prompt_name="d1_recipe", n_pos=1, n_neg=3, model_id=MODEL, judge_model_id=MODEL, sampling=SAMPLING,
              seed=42, require_tags=False, progress=False)
    kw.update(extra)
    return kw


@pytest.fixture
def corpus() -> dict[str, str]:
    return fixture_corpus()


@pytest.fixture
def sources(corpus) -> list[tuple[str, str]]:
    return sorted(corpus.items())


@pytest.fixture
def script(corpus):
    return release_script(corpus, fixture_d1_rows())


# ------------------------------------------------------------------ 1. vLLM as a server


def test_vllm_serve_command_for_qwen3_32b_awq() -> None:
    cmd = vllm_serve_command("Qwen/Qwen3-32B-AWQ", port=8000, max_model_len=16384, gpu_memory_utilization=0.9,
                             reasoning_parser="qwen3", seed=0)
    assert " ".join(cmd) == ("vllm serve Qwen/Qwen3-32B-AWQ --host 127.0.0.1 --port 8000 --max-model-len 16384 "
                             "--gpu-memory-utilization 0.9 --reasoning-parser qwen3 --seed 0")
    assert "vllm serve Qwen/Qwen3-32B-AWQ" in serving.__doc__ and '"vllm>=0.8.5"' in serving.__doc__
    with pytest.raises(ValueError):
        vllm_serve_command("m", port=0)


def test_server_spec_refuses_bad_values() -> None:
    with pytest.raises(RecipematchError, match="base_url is empty"):
        ServerSpec("", MODEL)
    with pytest.raises(RecipematchError, match="model is empty"):
        ServerSpec("http://127.0.0.1:1", "")
    with pytest.raises(RecipematchError, match="JSON values"):
        ServerSpec("http://127.0.0.1:1", MODEL, chat_template_kwargs={"x": object()})
    with pytest.raises(RecipematchError, match="http"):
        open_server(ServerSpec("127.0.0.1:8000", MODEL))


def test_arm_through_a_server_equals_the_in_memory_reference(tmp_path: Path, sources, script) -> None:
    table, _reqs, (ref_rows, _f, ref_counts) = learn_answers(sources, script, tmp_path / "ref.jsonl", **arm_kw())
    with ChatServer(table, model=MODEL) as srv:
        be = open_server(spec(srv), probe=True, sleep=no_sleep)
        rows, _failures, counts = run_llm_pairs(sources, backend=be, judge_backend=be,
                                                store_path=tmp_path / "s.jsonl", **arm_kw())
    assert rows_to_jsonl(rows) == rows_to_jsonl(ref_rows) and counts["rows"] == ref_counts["rows"] == 6


# ------------------------------------------------------------------ 2. Qwen3 thinking switch, reasoning preamble


def test_chat_template_kwargs_are_sent_and_part_of_the_request_key(tmp_path: Path, sources, script) -> None:
    kw = arm_kw(chat_template_kwargs=NO_THINK, judge_chat_template_kwargs=NO_THINK)
    table, reqs, (ref_rows, _f, _c) = learn_answers(sources, script, tmp_path / "ref.jsonl", **kw)
    assert all(r.chat_template_kwargs == NO_THINK for r in reqs)
    store = tmp_path / "s.jsonl"
    with ChatServer(table) as srv:
        be = open_server(spec(srv), sleep=no_sleep)
        rows, _failures, counts = run_llm_pairs(sources, backend=be, judge_backend=be, store_path=store, **kw)
        assert srv.bodies and all(b["chat_template_kwargs"] == {"enable_thinking": False} for b in srv.bodies)
        sent = len(srv.bodies)
        # the same switch again: every answer from the store
        again = run_llm_pairs(sources, backend=be, judge_backend=be, store_path=store, **kw)
        assert len(srv.bodies) == sent and again[2]["generate"]["sent"] == 0
        # the other setting is another request (another answer): sent again, not answered from the store
        think = arm_kw(chat_template_kwargs={"enable_thinking": True})
        other = run_llm_pairs(sources[:1], backend=be, judge_backend=be, store_path=store, **think)
        assert other[2]["generate"]["sent"] == 1 and srv.bodies[-1]["chat_template_kwargs"] == {"enable_thinking": True}
    assert rows_to_jsonl(rows) == rows_to_jsonl(ref_rows)
    plain = arm_kw()
    _t, plain_reqs, _ = learn_answers(sources, script, tmp_path / "plain.jsonl", **plain)
    assert {r.key for r in reqs}.isdisjoint({r.key for r in plain_reqs})
    assert all(r.chat_template_kwargs is None for r in plain_reqs)


PREAMBLE = '<think>\nThe problem mentions {braces} and "quotes \\" }"; check the count.\n</think>\n\n'


def test_reasoning_preamble_tolerated_without_loosening_the_schema(tmp_path: Path, sources, corpus, script) -> None:
    table, _reqs, (ref_rows, _f, ref_counts) = learn_answers(sources, script, tmp_path / "ref.jsonl", **arm_kw())
    thinking = {k: PREAMBLE + v for k, v in table.items()}
    by_sid = {sid: k for k in thinking for sid in corpus if corpus[sid] in k[1] and "Problem A" not in k[1]}
    # three generation answers go wrong in the ways a thinking model goes wrong
    thinking[by_sid["002r"]] = "<think>\nstill thinking when max_tokens ran out ..."  # never closes
    thinking[by_sid["00cz"]] = PREAMBLE + "So the answer is as above."  # no JSON after the preamble
    extra = json.loads(table[by_sid["01bq"]])
    extra["note"] = "x"
    thinking[by_sid["01bq"]] = PREAMBLE + json.dumps(extra, ensure_ascii=False)  # schema breach after a preamble
    with ChatServer(thinking) as srv:
        be = open_server(spec(srv), sleep=no_sleep)
        rows, failures, counts = run_llm_pairs(sources, backend=be, judge_backend=be, store_path=tmp_path / "a.jsonl",
                                               allow_reasoning_preamble=True, **arm_kw())
        strict = run_llm_pairs(sources, backend=be, judge_backend=be, store_path=tmp_path / "b.jsonl", **arm_kw())
    assert counts["parse"]["rejected"] == {"no_json_after_preamble": 1, "reasoning_unclosed": 1,
                                           "unexpected_field": 1}
    assert {(f["source_id"], f["reason"]) for f in failures if f["stage"] == "parse"} == {
        ("002r", "reasoning_unclosed"), ("00cz", "no_json_after_preamble"), ("01bq", "unexpected_field")}
    # every other answer, judge answers included, parsed exactly as without the preamble
    assert rows_to_jsonl(rows) == rows_to_jsonl([r for r in ref_rows if r["source_id"] not in ("002r", "00cz", "01bq")])
    assert counts["judge"]["parse_rejected"] == {}
    # without the switch a preamble is leading text, as before
    assert strict[2]["rows"] == 0 and strict[2]["parse"]["rejected"]["leading_text"] == 5
    stored = [json.loads(ln) for ln in (tmp_path / "a.jsonl").read_text("utf-8").splitlines()]
    assert {r["parse"].get("preamble_chars") for r in stored if r["parse"] and r["parse"]["ok"]} == {len(PREAMBLE)}


# ------------------------------------------------------------------ 3 + 4. two servers, keys from named variables


def test_generator_and_judge_on_different_servers_with_their_own_keys(tmp_path: Path, sources, script,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    kw = arm_kw(judge_model_id=JUDGE_MODEL)
    table, reqs, (ref_rows, _f, _c) = learn_answers(sources, script, tmp_path / "ref.jsonl", **kw)
    judge_keys = {message_key(r.system, r.user) for r in reqs if r.prompt_name == "judge"}
    gen_table = {k: v for k, v in table.items() if message_key(*k) not in judge_keys}
    judge_table = {k: v for k, v in table.items() if message_key(*k) in judge_keys}
    monkeypatch.setenv("RM_GEN_KEY", "gen-key-1")
    monkeypatch.setenv("RM_JUDGE_KEY", "judge-key-2")
    with ChatServer(gen_table, model=MODEL, required_key="gen-key-1") as g, \
            ChatServer(judge_table, model=JUDGE_MODEL, required_key="judge-key-2") as j:
        gen = open_server(spec(g, MODEL, api_key_env="RM_GEN_KEY"), probe=True, sleep=no_sleep)
        judge = open_server(spec(j, JUDGE_MODEL, api_key_env="RM_JUDGE_KEY"), probe=True, sleep=no_sleep)
        rows, failures, counts = run_llm_pairs(sources, backend=gen, judge_backend=judge,
                                               store_path=tmp_path / "s.jsonl", **kw)
    assert rows_to_jsonl(rows) == rows_to_jsonl(ref_rows) and len(rows) == 6
    assert {b["model"] for b in g.bodies} == {MODEL} and {b["model"] for b in j.bodies} == {JUDGE_MODEL}
    assert len(g.bodies) == 9 and len(j.bodies) == counts["judge"]["requests"] == len(judge_table)
    assert {h["Authorization"] for h in g.headers} == {"Bearer gen-key-1"}
    assert {h["Authorization"] for h in j.headers} == {"Bearer judge-key-2"}
    assert {r["positive_provenance"]["judge"]["model_id"] for r in rows} == {JUDGE_MODEL}
    assert {r["positive_provenance"]["model_id"] for r in rows} == {MODEL}


def test_missing_key_variable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RM_ABSENT_KEY", raising=False)
    with pytest.raises(RecipematchError, match="RM_ABSENT_KEY .*not set"):
        open_server(ServerSpec("http://127.0.0.1:1", MODEL, api_key_env="RM_ABSENT_KEY"))
    monkeypatch.setenv("RM_EMPTY_KEY", "")
    with pytest.raises(RecipematchError, match="RM_EMPTY_KEY"):
        read_api_key("RM_EMPTY_KEY")
    with pytest.raises(RecipematchError, match="NAME of an environment variable"):
        read_api_key("sk-this-looks-like-a-key!")


def test_api_key_never_lands_in_store_records_logs_or_errors(tmp_path: Path, sources, script, corpus,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture,
                                                            capfd: pytest.CaptureFixture) -> None:
    kw = arm_kw(judge_model_id=JUDGE_MODEL)
    table, reqs, _ = learn_answers(sources, script, tmp_path / "ref.jsonl", **kw)
    monkeypatch.setenv("RM_SECRET_KEY", SECRET)
    caplog.set_level(logging.DEBUG)  # urllib3 and requests log at DEBUG
    store = tmp_path / "s.jsonl"
    texts: list[str] = []
    # the generator's server takes the key; the judge's wants another and echoes what it got
    with ChatServer(table, required_key=SECRET) as g, ChatServer(table, required_key="other-key") as j:
        gen = open_server(spec(g, api_key_env="RM_SECRET_KEY"), sleep=no_sleep)
        judge = open_server(spec(j, JUDGE_MODEL, api_key_env="RM_SECRET_KEY"), sleep=no_sleep)
        rows, failures, counts = run_llm_pairs(sources, backend=gen, judge_backend=judge, store_path=store, **kw)
        with pytest.raises(RecipematchError) as refused:
            judge.probe()
        texts += [str(refused.value), repr(gen), repr(judge)]
    assert counts["generate"]["answered"] == 6 and counts["judge"]["failed"] == {"http_401": counts["judge"]["requests"]}
    assert counts["judge"]["requests"] > 0
    detail = next(f["item"]["detail"] for f in failures if f["reason"] == "http_401")
    assert "[redacted]" in detail  # the server did echo the key; the backend scrubbed it
    texts += [store.read_text("utf-8"), rows_to_jsonl(rows), json.dumps(failures), json.dumps(counts),
              json.dumps(spec(g, api_key_env="RM_SECRET_KEY").describe()),
              json.dumps(recordings_from_store(store)), caplog.text]
    out, err = capfd.readouterr()
    texts += [out, err]
    assert caplog.text  # the log capture did see the HTTP traffic
    for t in texts:
        assert SECRET not in t
    assert "RM_SECRET_KEY" in texts[2]  # the repr names the variable instead


# ------------------------------------------------------------------ 5. server faults


def test_unreachable_server_names_the_url_then_resumes_when_it_is_up(tmp_path: Path, sources, script) -> None:
    table, _reqs, (ref_rows, _f, _c) = learn_answers(sources, script, tmp_path / "ref.jsonl", **arm_kw())
    dead = ChatServer()
    dead.httpd.server_close()  # nothing listens on this port any more
    url = dead.base_url
    store = tmp_path / "s.jsonl"
    be = open_server(spec(url, concurrency=1, max_retries=2), sleep=no_sleep)
    with pytest.raises(ServerUnreachableError, match=f"cannot reach the LLM server at {url}/v1/chat/completions"):
        run_llm_pairs(sources, backend=be, judge_backend=be, store_path=store, **arm_kw())
    with pytest.raises(ServerUnreachableError, match=f"{url}/v1/models"):
        be.probe()
    stored = [json.loads(ln) for ln in store.read_text("utf-8").splitlines()]
    assert len(stored) == 9 and {r["error"] for r in stored} == {"connection_error"}  # recorded, nothing paid
    assert sorted(r["attempts"] for r in stored) == [0] * 8 + [3]  # one call used its retries, the rest waited
    with ChatServer(table) as srv:  # the server is up now (another port: the store does not key on the URL)
        be = open_server(spec(srv), sleep=no_sleep)
        rows, _failures, counts = run_llm_pairs(sources, backend=be, judge_backend=be, store_path=store, **arm_kw())
        assert counts["generate"]["sent"] == 9 and max(srv.hits.values()) == 1
    assert rows_to_jsonl(rows) == rows_to_jsonl(ref_rows)


def test_stalling_server_times_out_retries_records_failures_and_resumes(tmp_path: Path, sources, script,
                                                                       corpus) -> None:
    table, reqs, (ref_rows, _f, _c) = learn_answers(sources, script, tmp_path / "ref.jsonl", **arm_kw())
    gen = {r.source_id: r for r in reqs if r.prompt_name == "d1_recipe"}
    stalled = ["0004", "01bq"]
    store = tmp_path / "s.jsonl"
    with ChatServer(table) as srv:
        for sid in stalled:
            srv.script(gen[sid].system, gen[sid].user, [("sleep", 1.5)])  # every hit stalls past the time-out
        be = open_server(spec(srv, timeout_s=0.3, max_retries=1), sleep=no_sleep)
        rows, failures, counts = run_llm_pairs(sources, backend=be, judge_backend=be, store_path=store, **arm_kw())
        assert counts["generate"]["failed"] == {"http_400": 3, "timeout": 2}  # 3 sources were never released
        assert {(f["source_id"], f["reason"]) for f in failures if f["stage"] == "generate"} >= {
            ("0004", "timeout"), ("01bq", "timeout")}
        assert all(srv.hits[message_key(gen[s].system, gen[s].user)] == 2 for s in stalled)  # 1 try + 1 retry
        assert [r["source_id"] for r in rows] == [r["source_id"] for r in ref_rows if r["source_id"] not in stalled]
        before = dict(srv.hits)
        srv.scripts.clear()  # the server recovers
        rows2, _f2, counts2 = run_llm_pairs(sources, backend=be, judge_backend=be, store_path=store, **arm_kw())
        resent = {k: srv.hits[k] - before.get(k, 0) for k in srv.hits if srv.hits[k] != before.get(k, 0)}
    stalled_keys = {message_key(gen[s].system, gen[s].user) for s in stalled}
    # the two stalled calls were sent once more; nothing answered before was sent again; the
    # stalled sources' judge calls were new
    assert {k: v for k, v in resent.items() if k in stalled_keys} == {k: 1 for k in stalled_keys}
    assert all(v == 1 and before.get(k, 0) == 0 for k, v in resent.items() if k not in stalled_keys)
    assert counts2["generate"]["sent"] == 2 and counts2["generate"]["from_store"] == 7
    assert rows_to_jsonl(rows2) == rows_to_jsonl(ref_rows)


def test_malformed_answers_are_failure_records_and_resume_pays_nothing_twice(tmp_path: Path, sources,
                                                                            script) -> None:
    table, reqs, (ref_rows, _f, _c) = learn_answers(sources, script, tmp_path / "ref.jsonl", **arm_kw())
    gen = {r.source_id: r for r in reqs if r.prompt_name == "d1_recipe"}
    store = tmp_path / "s.jsonl"
    with ChatServer(table) as srv:
        k_body = srv.script(gen["0004"].system, gen["0004"].user, [("malformed",)])  # the body is not JSON
        k_json = srv.script(gen["000d"].system, gen["000d"].user, [("text", "Sure! The variants are: ...")])
        k_cut = srv.script(gen["01bq"].system, gen["01bq"].user, [("length", '{"original_problem": "cut off')])
        be = open_server(spec(srv, max_retries=2), sleep=no_sleep)
        rows, failures, counts = run_llm_pairs(sources, backend=be, judge_backend=be, store_path=store, **arm_kw())
        assert counts["generate"]["failed"] == {"http_400": 3, "malformed_response": 1}
        assert counts["parse"]["rejected"] == {"invalid_json": 1, "truncated": 1}
        reasons = {(f["source_id"], f["stage"], f["reason"]) for f in failures}
        assert {("0004", "generate", "malformed_response"), ("000d", "parse", "invalid_json"),
                ("01bq", "parse", "truncated")} <= reasons
        assert srv.hits[k_body] == 3 and srv.hits[k_json] == 1 and srv.hits[k_cut] == 1
        srv.scripts.clear()
        rows2, failures2, counts2 = run_llm_pairs(sources, backend=be, judge_backend=be, store_path=store,
                                                  **arm_kw())
        # the unusable body was not an answer: sent again; the two bad answers were paid: kept, not re-sent
        assert srv.hits[k_body] == 4 and srv.hits[k_json] == 1 and srv.hits[k_cut] == 1
    assert counts2["generate"]["sent"] == 1 and counts2["parse"]["rejected"] == {"invalid_json": 1, "truncated": 1}
    assert [r["source_id"] for r in rows2] == [r["source_id"] for r in ref_rows if r["source_id"] not in ("000d", "01bq")]


def test_probe_names_model_and_key_problems(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RM_PROBE_KEY", "right")
    with ChatServer(model=MODEL, required_key="right") as srv:
        assert open_server(spec(srv, api_key_env="RM_PROBE_KEY"), probe=True).probe() == [MODEL]
        with pytest.raises(RecipematchError, match=f"does not serve model '{JUDGE_MODEL}'"):
            open_server(spec(srv, JUDGE_MODEL, api_key_env="RM_PROBE_KEY"), probe=True)
        monkeypatch.setenv("RM_PROBE_KEY", "wrong")
        with pytest.raises(RecipematchError, match=r"refused the key in \$RM_PROBE_KEY \(HTTP 401\)") as ei:
            open_server(spec(srv, api_key_env="RM_PROBE_KEY"), probe=True)
        assert "wrong" not in str(ei.value)
