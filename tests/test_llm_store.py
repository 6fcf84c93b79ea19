"""recipematch.llm.store: append-only, content-addressed call store; crash recovery tested
with a real ``kill -9`` of a subprocess in the middle of a write."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from test_llm_support import (
    MODEL,
    SAMPLING,
    ChatServer,
    ScriptedBackend,
    fixture_corpus,
    fixture_d1_rows,
    message_key,
    release_script,
)

from recipematch.llm.backends import GenerationRequest, GenerationResult
from recipematch.llm.http_backend import OpenAICompatibleBackend
from recipematch.llm.pipeline import rows_to_jsonl, run_llm_pairs
from recipematch.llm.prompts import load_prompt
from recipematch.llm.store import CallStore, StoreCorruptError, make_record, verify_record

D1 = load_prompt("d1_recipe")


def req(i: int) -> GenerationRequest:
    system, user = D1.render(n_pos=1, n_neg=3, problem=f"problem {i}")
    return GenerationRequest("d1_recipe", D1.sha256, system, user, f"s{i}", 0, SAMPLING, 42, MODEL)


def rec(i: int, text: str | None = "answer", error: str | None = None) -> dict:
    return make_record(req(i), GenerationResult(text, error), None if text is None else {"ok": False, "reason": "x"})


def test_roundtrip_and_fields(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "store.jsonl"
    with CallStore(path) as s:
        s.append(rec(0))
        s.append(rec(1, None, "timeout"))
        assert len(s) == 2 and s.appended == 2
    with CallStore(path) as s:
        assert [r["source_id"] for r in s.records()] == ["s0", "s1"]
        r0 = s.get(req(0).key)
        assert r0 is not None and verify_record(r0)
        assert (r0["prompt_sha256"], r0["model_id"], r0["sampling"], r0["seed"], r0["raw_text"]) == (
            D1.sha256, MODEL, SAMPLING, 42, "answer")
        assert s.get(req(1).key)["error"] == "timeout" and s.get(req(1).key)["parse"] is None
        assert req(2).key not in s and s.recovered_torn_bytes == 0
    assert path.read_bytes().count(b"\n") == 2


def test_never_stores_a_request_twice(tmp_path: Path) -> None:
    with CallStore(tmp_path / "s.jsonl") as s:
        s.append(rec(0))
        with pytest.raises(ValueError, match="already stored"):
            s.append(rec(0, "another answer"))
        bad = dict(rec(1))
        bad["raw_text"] = "tampered"
        with pytest.raises(ValueError, match="record_sha256"):
            s.append(bad)


def test_torn_last_line_is_dropped_and_redone(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with CallStore(path) as s:
        s.append(rec(0))
    good = path.read_bytes()
    line = (json.dumps(rec(1)) + "\n").encode()
    path.write_bytes(good + line[: len(line) // 2])
    with CallStore(path) as s:
        assert s.recovered_torn_bytes == len(line) // 2
        assert len(s) == 1 and req(1).key not in s
        s.append(rec(1))
    assert path.read_bytes() == good + (json.dumps(rec(1), sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
    # a garbage last line that happens to end in a newline is torn too
    path.write_bytes(good + b'{"key": "abc\n')
    with CallStore(path) as s:
        assert s.recovered_torn_bytes == len(b'{"key": "abc\n') and len(s) == 1


def test_damage_before_the_last_line_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with CallStore(path) as s:
        s.append(rec(0))
        s.append(rec(1))
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(lines[0][:40] + b"\n" + lines[1] + b"\n")
    with pytest.raises(StoreCorruptError, match="damaged"):
        CallStore(path)
    tampered = json.loads(lines[1])
    tampered["raw_text"] = "changed"
    path.write_bytes(lines[0] + b"\n" + json.dumps(tampered).encode() + b"\n")
    with pytest.raises(StoreCorruptError):
        CallStore(path)  # a complete last line that fails its hash is not a torn write
    path.write_bytes(lines[0] + b"\n" + lines[0] + b"\n")
    with pytest.raises(StoreCorruptError, match="twice"):
        CallStore(path)


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    with CallStore(tmp_path / "s.jsonl"):
        with pytest.raises(RuntimeError, match="in use"):
            CallStore(tmp_path / "s.jsonl")
    CallStore(tmp_path / "s.jsonl").close()  # released on close


# ------------------------------------------------------------------ kill -9 mid-write

CHILD = textwrap.dedent(
    """
    import os, sys, time
    from recipematch.llm import store as store_mod
    from recipematch.llm.http_backend import OpenAICompatibleBackend
    from recipematch.llm.pipeline import run_llm_pairs
    import json

    base_url, store_path, tear_at, sources_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    sources = [tuple(x) for x in json.load(open(sources_path, encoding="utf-8"))]
    real_write = store_mod.CallStore._write
    n = {"writes": 0}

    def tearing_write(self, line):
        n["writes"] += 1
        if n["writes"] == tear_at:
            self._fh.write(line[: len(line) // 2])  # half a line reaches the file ...
            self._fh.flush()
            print("TORN", flush=True)
            time.sleep(120)  # ... and the parent kills us here with SIGKILL
        real_write(self, line)

    store_mod.CallStore._write = tearing_write
    be = OpenAICompatibleBackend(base_url, "%(model)s", concurrency=1, max_retries=0, timeout_s=30)
    run_llm_pairs(sources, prompt_name="d1_recipe", n_pos=1, n_neg=3, backend=be, judge_backend=be,
                  store_path=store_path, model_id="%(model)s", judge_model_id="%(model)s",
                  sampling=%(sampling)r, seed=42, require_tags=False, progress=False)
    print("FINISHED", flush=True)
    """
) % {"model": MODEL, "sampling": SAMPLING}


@pytest.mark.parametrize("tear_at", [4, 13])  # a generation write; a judge write
def test_kill_9_mid_write_then_resume(tmp_path: Path, tear_at: int) -> None:
    corpus = fixture_corpus()
    sources = sorted(corpus.items())
    kw = dict(prompt_name="d1_recipe", n_pos=1, n_neg=3, model_id=MODEL, judge_model_id=MODEL,
              sampling=SAMPLING, seed=42, require_tags=False, progress=False)
    # reference: an uninterrupted run; it also tells us every request and its answer
    script = release_script(corpus, fixture_d1_rows())
    seen: dict[str, GenerationRequest] = {}

    def capture(r: GenerationRequest) -> str | None:
        seen[r.key] = r
        return script(r)

    ref_rows, ref_fail, ref_counts = run_llm_pairs(sources, backend=ScriptedBackend(capture),
                                                   judge_backend=ScriptedBackend(capture),
                                                   store_path=tmp_path / "ref.jsonl", **kw)
    answers = {(r.system, r.user): t for r in seen.values() if (t := script(r)) is not None}
    n_requests = len(seen)
    # 9 generations; judge: 6 positives + near-misses 3 + 3 + 2 + 2 + 2 (00cz repeats one) + 0
    assert n_requests == 9 + 6 + 12
    store_path = tmp_path / "run.jsonl"
    (tmp_path / "sources.json").write_text(json.dumps(sources), encoding="utf-8")

    with ChatServer(answers) as srv:  # unreleased sources: it answers 400 (a final failure), stored as http_400
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, srv.base_url, str(store_path), str(tear_at), str(tmp_path / "sources.json")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            line = child.stdout.readline()
            assert line.strip() == "TORN", child.stderr.read()
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL

        raw = store_path.read_bytes()
        assert not raw.endswith(b"\n")  # the torn half-line is really there
        complete = [json.loads(ln) for ln in raw.split(b"\n")[:-1]]
        assert len(complete) == tear_at - 1
        stored_before = {r["key"] for r in complete}
        hits_before = Counter(srv.hits)

        with CallStore(store_path) as s:  # opening recovers the torn tail
            assert s.recovered_torn_bytes > 0 and len(s) == tear_at - 1

        be = OpenAICompatibleBackend(srv.base_url, MODEL, concurrency=2, max_retries=0, timeout_s=30)
        rows, fails, counts = run_llm_pairs(sources, backend=be, judge_backend=be, store_path=store_path, **kw)
        hits_after = srv.hits - hits_before

    keys = [json.loads(ln)["key"] for ln in store_path.read_bytes().splitlines()]
    assert sorted(keys) == sorted(seen)  # every request exactly once, none lost, none duplicated
    for k in stored_before:  # nothing stored before the kill was sent again
        r = seen[k]
        assert hits_after[message_key(r.system, r.user)] == 0
    for k in set(seen) - stored_before:  # everything else was sent exactly once by the resumed run
        r = seen[k]
        assert hits_after[message_key(r.system, r.user)] == 1
    # the torn request had been answered before the kill and was redone: sent twice in all;
    # at most one more (the next request, in flight at the kill) shares that fate
    # exactly the requests sent before the kill but not stored (the torn one, plus any still in
    # flight when SIGKILL landed; how many depends on timing, so it is derived, not guessed)
    twice = {k for k in seen if srv.hits[message_key(seen[k].system, seen[k].user)] == 2}
    in_flight = {k for k in seen if hits_before[message_key(seen[k].system, seen[k].user)] >= 1} - stored_before
    assert twice == in_flight and len(twice) >= 1
    assert rows_to_jsonl(rows) == rows_to_jsonl(ref_rows)
    assert counts["rows"] == ref_counts["rows"] == 6
    assert counts["generate"]["from_store"] == min(tear_at - 1, 9)


def test_lone_surrogate_in_a_raw_answer_is_stored_and_read_back(tmp_path: Path) -> None:
    """Regression: a raw answer holding a lone surrogate made make_record/append raise
    UnicodeEncodeError, losing the paid answer."""
    path = tmp_path / "store.jsonl"
    text = '{"original_problem": "p\ud800", "x": "\udfff"}'
    r = rec(0, text)
    assert verify_record(r)
    with CallStore(path) as s:
        s.append(r)
        s.append(rec(1, "plain caf\u00e9"))
    data = path.read_bytes()
    data.decode("utf-8")  # the file stays valid UTF-8 (the surrogates are written as \\u escapes)
    assert b"\\ud800" in data and "caf\u00e9".encode() in data  # other lines keep UTF-8 characters
    with CallStore(path) as s:
        assert s.get(req(0).key)["raw_text"] == text and verify_record(s.get(req(0).key))
        assert s.get(req(1).key)["raw_text"] == "plain caf\u00e9"


def test_a_failure_no_model_answered_is_superseded_by_a_later_answer(tmp_path: Path) -> None:
    """A connection error or time-out was not paid for: a rerun sends the request again and
    its answer supersedes the failure; a final failure (HTTP 400) or an answer never does."""
    path = tmp_path / "s.jsonl"
    with CallStore(path) as s:
        s.append(rec(0, None, "timeout"))
        s.append(rec(1, None, "http_400"))
        s.append(rec(2, None, "http_503_exhausted"))
        assert s.supersedable(req(0).key) and s.supersedable(req(2).key)
        assert not s.supersedable(req(1).key) and not s.supersedable(req(9).key)
        s.append(rec(0, "late answer"))
        with pytest.raises(ValueError, match="already stored"):
            s.append(rec(1, "answer"))
        with pytest.raises(ValueError, match="already stored"):
            s.append(rec(0, "a third answer"))  # an answer is final
    with CallStore(path) as s:  # the file holds both lines of s0; the later one wins
        assert path.read_bytes().count(b"\n") == 4
        assert s.get(req(0).key)["raw_text"] == "late answer" and len(s) == 3
        assert [r["source_id"] for r in s.records()] == ["s0", "s1", "s2"]
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines + [lines[1]]))  # a final failure repeated: corruption
    with pytest.raises(StoreCorruptError, match="stored twice"):
        CallStore(path)
