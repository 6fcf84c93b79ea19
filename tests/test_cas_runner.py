"""run_generator: isolation (timeout, crash, memory), resume and determinism.

Workers are forked, so replacing ``runner._generate`` in the test process before the run
replaces it in the workers too; the replacement hangs, crashes or raises on marker texts
and calls the real generator otherwise.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from recipematch.cas import GENERATOR_VERSION, metrics_from_summary, run_generator
from recipematch.cas import runner as runner_mod
from recipematch.cas.runner import journal_path, timings_path

FIXTURES = Path(__file__).parent / "fixtures" / "cas" / "problems.jsonl"
PROBLEMS = [(r["_id"], r["text"]) for r in map(json.loads, FIXTURES.read_text(encoding="utf-8").splitlines())]
SMALL = [p for p in PROBLEMS if p[0] in ("fx-quad-ru", "fx-count-de", "fx-chain-fr", "fx-empty", "fx-sys-vi")]

_real_generate = runner_mod._generate


def _misbehaving(source_id: str, text: str, seed: int) -> dict:
    log = os.environ.get("CAS_TEST_CALL_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(source_id + "\n")
    if text == "HANG":
        time.sleep(120)
    if text == "EXIT":
        os._exit(7)
    if text == "RECURSE":
        def f(n):
            return f(n + 1)
        f(0)
    if text == "MEMORY":
        blob = bytearray(6 * 1024 ** 3)
        return {"status": "ok", "rows": [len(blob)], "census": {}}
    return _real_generate(source_id, text, seed)


@pytest.fixture
def misbehaving(monkeypatch):
    monkeypatch.setattr(runner_mod, "_generate", _misbehaving)


def _run(problems, out, **kw):
    args = dict(seed=42, timeout_s=20.0, memory_mb=512, workers=2, progress=False)
    args.update(kw)
    return run_generator(problems, out_path=out, **args)


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_timeout_is_recorded_and_others_proceed(misbehaving, tmp_path):
    out = tmp_path / "pairs.jsonl"
    t0 = time.monotonic()
    summary = _run([("h", "HANG")] + SMALL, out, timeout_s=2.0)
    assert time.monotonic() - t0 < 60
    recs = {r["source_id"]: r for r in _lines(out)}
    assert recs["h"]["status"] == "timeout" and "2 s" in recs["h"]["reason"]
    assert recs["fx-quad-ru"]["status"] == "ok" and recs["fx-quad-ru"]["rows"]
    assert summary["counts"]["timeout"] == 1
    assert summary["counts"]["ok"] + summary["counts"]["no_relation"] == len(SMALL)


def test_crash_recursion_and_memory_are_recorded(misbehaving, tmp_path):
    out = tmp_path / "pairs.jsonl"
    summary = _run([("x", "EXIT"), ("r", "RECURSE"), ("m", "MEMORY")] + SMALL[:2], out)
    recs = {r["source_id"]: r for r in _lines(out)}
    assert recs["x"]["status"] == "crash" and "code 7" in recs["x"]["reason"]
    assert recs["r"]["status"] == "crash" and recs["r"]["reason"].startswith("RecursionError")
    assert recs["m"]["status"] == "crash" and "MemoryError" in recs["m"]["reason"]
    assert summary["counts"]["crash"] == 3
    assert recs["fx-quad-ru"]["status"] == "ok"


def test_final_file_is_byte_identical_across_runs(tmp_path):
    a, b = tmp_path / "a" / "pairs.jsonl", tmp_path / "b" / "pairs.jsonl"
    _run(PROBLEMS, a, workers=2)
    _run(list(reversed(PROBLEMS)), b, workers=1)
    assert a.read_bytes() == b.read_bytes()
    recs = _lines(a)
    assert [r["source_id"] for r in recs] == sorted(r["source_id"] for r in recs)
    assert all("elapsed_s" not in r for r in recs)
    assert all(r["generator_version"] == GENERATOR_VERSION for r in recs)
    assert all("elapsed_s" in r for r in _lines(timings_path(a)))


def test_resume_after_a_kill_redoes_only_unfinished(misbehaving, tmp_path, monkeypatch):
    out = tmp_path / "pairs.jsonl"
    fresh = tmp_path / "fresh" / "pairs.jsonl"
    _run(SMALL, fresh)
    _run(SMALL, out)
    # simulate a kill during the write of the last journal line, before the final file
    jp = journal_path(out)
    data = jp.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    last_id = json.loads(data[last_start:])["source_id"]
    jp.write_bytes(data[:last_start + 25])
    out.unlink()
    log = tmp_path / "calls.log"
    monkeypatch.setenv("CAS_TEST_CALL_LOG", str(log))
    summary = _run(SMALL, out)
    assert log.read_text().split() == [last_id]
    assert summary["resumed"] == len(SMALL) - 1
    assert out.read_bytes() == fresh.read_bytes()
    # every journal line is whole JSON again
    assert len(_lines(jp)) == len(SMALL)


def test_rerun_skips_everything_and_a_changed_text_is_redone(misbehaving, tmp_path, monkeypatch):
    out = tmp_path / "pairs.jsonl"
    _run(SMALL, out)
    log = tmp_path / "calls.log"
    monkeypatch.setenv("CAS_TEST_CALL_LOG", str(log))
    changed = [(sid, text + " $y = 2$" if sid == "fx-count-de" else text) for sid, text in SMALL]
    summary = _run(changed, out)
    assert log.read_text().split() == ["fx-count-de"]
    assert summary["resumed"] == len(SMALL) - 1
    recs = {r["source_id"]: r for r in _lines(out)}
    assert recs["fx-count-de"]["status"] == "ok"


def test_summary_and_metrics(tmp_path):
    summary = _run(PROBLEMS, tmp_path / "pairs.jsonl")
    c = summary["census"]
    assert c["unique_expressions"] > 0 and 0 <= c["coverage_before"] <= c["coverage_after"] <= 1
    m = metrics_from_summary(summary)
    assert m["problems"] == len(PROBLEMS)
    assert sum(v for k, v in m.items() if k.startswith("status_")) == len(PROBLEMS)
    assert all(not isinstance(v, (dict, list)) for v in m.values())


def test_bad_arguments():
    with pytest.raises(ValueError):
        run_generator([], out_path=Path("/tmp/never.jsonl"), seed=1, timeout_s=0, memory_mb=1, workers=1)


# --------------------------------------------------------------------------- resume and limits

def _sleepy(source_id: str, text: str, seed: int) -> dict:
    """``SLEEP:<s>:<text>`` sleeps ``s`` seconds, then runs the real generator on ``text``."""
    if text.startswith("SLEEP:"):
        _, secs, rest = text.split(":", 2)
        log = os.environ.get("CAS_TEST_CALL_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(source_id + "\n")
        time.sleep(float(secs))
        return _real_generate(source_id, rest, seed)
    return _misbehaving(source_id, text, seed)


def test_resume_retries_failures_when_the_limits_change(monkeypatch, tmp_path):
    monkeypatch.setattr(runner_mod, "_generate", _sleepy)
    problems = [("h", "HANG"), ("slow", "SLEEP:2.5:Find $x$ if $x + 1 = 2$."), ("m", "MEMORY")] + SMALL[:2]
    out = tmp_path / "resumed" / "pairs.jsonl"
    first = _run(problems, out, timeout_s=1.0, memory_mb=512)
    recs = {r["source_id"]: r for r in _lines(out)}
    assert recs["h"]["status"] == recs["slow"]["status"] == "timeout"
    assert "1 s" in recs["h"]["reason"] and recs["m"]["status"] == "crash"
    assert first["counts"]["timeout"] == 2
    # the limits travel with each journal record, never into the final file
    assert all(r["timeout_s"] == 1.0 and r["memory_mb"] == 512 for r in _lines(journal_path(out)))
    assert all("timeout_s" not in r and "memory_mb" not in r for r in recs.values())

    # raised limits: every failure is retried, finished work is reused
    log = tmp_path / "calls.log"
    monkeypatch.setenv("CAS_TEST_CALL_LOG", str(log))
    second = _run(problems, out, timeout_s=4.0, memory_mb=600)
    assert sorted(log.read_text().split()) == ["h", "m", "slow"]
    assert second["resumed"] == 2 and second["retried_for_limits"] == 3
    recs = {r["source_id"]: r for r in _lines(out)}
    assert recs["slow"]["status"] == "ok" and recs["slow"]["rows"]
    assert recs["h"]["status"] == "timeout" and recs["h"]["reason"] == "wall-clock limit of 4 s exceeded"
    assert recs["m"]["status"] == "crash" and "600 MiB" in recs["m"]["reason"]

    # a fresh run under the new limits writes the same bytes
    monkeypatch.delenv("CAS_TEST_CALL_LOG")
    fresh = tmp_path / "fresh" / "pairs.jsonl"
    _run(problems, fresh, timeout_s=4.0, memory_mb=600)
    assert out.read_bytes() == fresh.read_bytes()

    # same limits again: nothing is redone, failures included
    log.unlink()
    monkeypatch.setenv("CAS_TEST_CALL_LOG", str(log))
    third = _run(problems, out, timeout_s=4.0, memory_mb=600)
    assert not log.exists() and third["resumed"] == len(problems) and third["retried_for_limits"] == 0
    assert out.read_bytes() == fresh.read_bytes()


def test_failures_from_an_old_journal_without_limits_are_retried(misbehaving, tmp_path, monkeypatch):
    out = tmp_path / "pairs.jsonl"
    _run([("x", "EXIT")] + SMALL[:1], out)
    jp = journal_path(out)
    old = [{k: v for k, v in r.items() if k not in ("timeout_s", "memory_mb")} for r in _lines(jp)]
    jp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in old), encoding="utf-8")
    log = tmp_path / "calls.log"
    monkeypatch.setenv("CAS_TEST_CALL_LOG", str(log))
    summary = _run([("x", "EXIT")] + SMALL[:1], out)
    assert log.read_text().split() == ["x"] and summary["resumed"] == 1


# --------------------------------------------------------------------------- orphaned workers

ORPHAN_PARENT = Path(__file__).parent / "fixtures" / "cas" / "orphan_parent.py"


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its new parent to reap it counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def _start_parent(tmp_path: Path, problems: str, *extra: str, hang_s: str = "3600"):
    import subprocess
    import sys
    env = dict(os.environ, HANG_S=hang_s)
    proc = subprocess.Popen([sys.executable, str(ORPHAN_PARENT), str(tmp_path), problems, *extra], env=env)
    return proc


def _pid(tmp_path: Path, name: str) -> int:
    assert _wait_for(lambda: (tmp_path / f"{name}.pid").exists(), 60), f"no {name}.pid"
    return int((tmp_path / f"{name}.pid").read_text())


def _cleanup(pids: list[int]) -> None:
    import signal
    for pid in pids:  # only the workers this test started
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc (Linux)")
def test_busy_workers_die_when_the_parent_is_killed(tmp_path):
    import signal
    proc = _start_parent(tmp_path, "a=HANG,b=HANG")
    workers = []
    try:
        workers = [_pid(tmp_path, "a"), _pid(tmp_path, "b")]
        assert all(_alive(w) for w in workers)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _wait_for(lambda: not any(_alive(w) for w in workers), 5), "workers outlived a kill -9 of the parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _cleanup(workers)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc (Linux)")
def test_idle_worker_sees_eof_when_the_parent_is_killed(tmp_path):
    """Without the parent-death signal, an idle worker still ends: it holds no copy of any
    parent-side pipe end, so its recv() gets EOF."""
    import signal
    proc = _start_parent(tmp_path, "a=HANG,b=quick", "--no-pdeathsig", hang_s="60")
    workers = []
    try:
        workers = [_pid(tmp_path, "a"), _pid(tmp_path, "b")]
        jp = journal_path(tmp_path / "out.jsonl")
        assert _wait_for(lambda: jp.exists() and '"b"' in jp.read_text(), 30)
        idle = workers[1]
        assert _alive(idle)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _wait_for(lambda: not _alive(idle), 5), "an idle worker outlived its parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _cleanup(workers)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc (Linux)")
def test_sigterm_to_the_parent_terminates_its_workers(tmp_path):
    import signal
    proc = _start_parent(tmp_path, "a=HANG,b=HANG", "--no-pdeathsig", hang_s="60")
    workers = []
    try:
        workers = [_pid(tmp_path, "a"), _pid(tmp_path, "b")]
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=15) == 128 + signal.SIGTERM
        assert _wait_for(lambda: not any(_alive(w) for w in workers), 5), "SIGTERM left the workers running"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _cleanup(workers)


def test_second_concurrent_run_on_same_output_refuses_and_duplicates_nothing(tmp_path, misbehaving):
    """Issue 14: two runs on one output at once. The second refuses with one clear line
    while the first holds the lock; the journal then holds each problem once."""
    import multiprocessing as mp

    from recipematch.cas.runner import lock_path
    from recipematch.errors import RecipematchError

    out = tmp_path / "pairs.jsonl"
    slow = [("slow", "HANG")] + SMALL
    ctx = mp.get_context("fork")
    first = ctx.Process(target=_run, args=(slow, out), kwargs={"timeout_s": 3.0, "workers": 1})
    first.start()
    try:
        deadline = time.time() + 20
        while time.time() < deadline and not (lock_path(out).exists() and lock_path(out).read_text().strip()):
            time.sleep(0.05)
        with pytest.raises(RecipematchError) as err:
            _run(SMALL, out, timeout_s=3.0, workers=1)
        msg = str(err.value)
        assert "\n" not in msg and str(lock_path(out)) in msg and "another recipematch run" in msg
    finally:
        first.join(60)
    assert first.exitcode == 0
    ids = [r["source_id"] for r in _lines(journal_path(out))]
    assert sorted(ids) == sorted(s for s, _ in slow)
    # the lock is released: a later run resumes everything and adds nothing to the journal
    summary = _run(slow, out, timeout_s=3.0, workers=1)
    assert summary["resumed"] == len(slow)
    assert len(_lines(journal_path(out))) == len(slow)
