"""Isolated, parallel, resumable run of the generator over many problems (paper, Appendix A: the CAS arm).

Each problem runs in a worker process under a wall-clock limit (params, 30 s by default,
the paper's per-problem limit) and an address-space cap (``RLIMIT_AS``). A worker that
exceeds the limit is killed and replaced, and the problem is recorded as ``timeout``; a
worker that dies (signal, ``os._exit``, out of memory in C code) gives ``crash`` with the
exit code or signal; an exception that escapes :func:`generate_for_problem`
(``MemoryError``, ``RecursionError``, a SymPy error) gives ``crash`` with its type and
message. No error escapes the runner.

Files (all derived from ``out_path``; the library receives paths, never invents them):

* ``<out_path>.journal.jsonl``: the append log. One JSON line per finished problem, written
  and flushed as soon as it finishes: ``{"source_id", "text_sha256", "generator_version",
  "seed", "timeout_s", "memory_mb", "status", "reason", "elapsed_s", "rows", "census"}``.
  A truncated last line (a killed run) is ignored and that problem is redone.
* **Resume rule**: a rerun reuses a journal record with the same source id, text hash,
  generator version and seed when its outcome is finished work (``ok``, ``no_relation``,
  ``no_pair``: deterministic, whatever the limits), and a ``timeout``/``crash`` record
  (memory included) only when it was produced under the **same** ``timeout_s`` and
  ``memory_mb``: after a change of limits every failure is retried, so its reason names
  the limits of the run that wrote the final file. (Lowering the limits keeps earlier
  ``ok`` outcomes that the lower limits might not have reached.)
* ``out_path``: the final file, written at the end (atomically), one line per input
  problem sorted by ``source_id`` then text hash, **without** ``elapsed_s``, ``timeout_s``
  and ``memory_mb``, keys sorted: byte-identical across runs whatever the completion
  order, and between a fresh run and a resumed one.
* ``<out_path>.timings.jsonl``: ``{"source_id", "status", "elapsed_s"}`` sorted the same
  way (timing is kept out of the deterministic output).
"""

from __future__ import annotations

import fcntl
import json
import multiprocessing as mp
import os
import signal
import time
import traceback
from multiprocessing.connection import Connection, wait
from pathlib import Path

from recipematch.cas import generator as _gen_mod
from recipematch.errors import RecipematchError
from recipematch.io import sha256_text
from recipematch.cas.generator import GENERATOR_VERSION
from recipematch.cas.isolation import (
    child_setup,
    set_memory_cap,
    terminate_workers_on_sigterm,
)

__all__ = [
    "STATUSES",
    "aggregate_census",
    "journal_path",
    "lock_path",
    "metrics_from_summary",
    "run_generator",
    "timings_path",
]

#: Every status a problem can end with.
STATUSES = ("ok", "no_relation", "no_pair", "timeout", "crash")
#: Outcomes that are finished work: reused on resume whatever the limits.
FINISHED = ("ok", "no_relation", "no_pair")
#: Journal fields kept out of the final file (they vary between equivalent runs).
_RUN_ONLY = ("elapsed_s", "timeout_s", "memory_mb")


def journal_path(out_path: Path) -> Path:
    """The append log next to ``out_path``."""
    return out_path.with_name(out_path.name + ".journal.jsonl")


def lock_path(out_path: Path) -> Path:
    """The lock file next to ``out_path``: one run at a time per output."""
    return out_path.with_name(out_path.name + ".lock")


def _acquire_lock(out_path: Path):
    """Take an exclusive, non-blocking ``flock`` on :func:`lock_path` and return its open
    file (the lock lives as long as the file is open, and the kernel drops it when the
    process dies, so a killed run never leaves a stale lock).

    Raises:
        RecipematchError: when another process holds the lock (a second run on the same
            output would redo every problem and double the journal).
    """
    lpath = lock_path(out_path)
    fh = lpath.open("a+", encoding="utf-8")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "unknown"
        fh.close()
        raise RecipematchError(f"{lpath}: another recipematch run (pid {holder}) is writing {out_path}; "
                               "wait for it to finish or use another output") from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


def timings_path(out_path: Path) -> Path:
    """The timings file next to ``out_path``."""
    return out_path.with_name(out_path.name + ".timings.jsonl")


def _sha(text: str) -> str:
    return sha256_text(text, errors="surrogatepass")


def _generate(source_id: str, text: str, seed: int) -> dict:
    """The function a worker runs (a module attribute so tests can replace it)."""
    return _gen_mod.generate_for_problem(source_id, text, seed=seed)


def _set_memory_cap(memory_mb: int) -> None:
    set_memory_cap(memory_mb)


def _worker(conn: Connection, memory_mb: int, parent_pid: int = 0, inherited: tuple = ()) -> None:
    # never outlive the parent: close the parent-side pipe ends this fork inherited (so an
    # idle recv() sees EOF when the parent dies) and ask for SIGKILL on its death (Linux)
    child_setup(parent_pid or os.getppid(), inherited)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        _set_memory_cap(memory_mb)
    except (ValueError, OSError):
        pass
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        source_id, text, seed = task
        t0 = time.perf_counter()
        try:
            res = _generate(source_id, text, seed)
            payload = {"status": res.get("status", "ok"), "reason": res.get("reason"),
                       "rows": res.get("rows", []), "census": res.get("census", {})}
        except MemoryError:
            payload = {"status": "crash", "reason": f"MemoryError: memory cap of {memory_mb} MiB exceeded",
                       "rows": [], "census": {}}
        except RecursionError as exc:
            payload = {"status": "crash", "reason": f"RecursionError: {exc}"[:300], "rows": [], "census": {}}
        except Exception as exc:  # noqa: BLE001 - every failure becomes a recorded outcome
            tb = traceback.extract_tb(exc.__traceback__)
            where = f" at {tb[-1].name}:{tb[-1].lineno}" if tb else ""
            payload = {"status": "crash", "reason": f"{type(exc).__name__}: {exc}"[:300] + where,
                       "rows": [], "census": {}}
        payload["elapsed_s"] = round(time.perf_counter() - t0, 4)
        try:
            conn.send(payload)
        except (OSError, ValueError, TypeError) as exc:
            conn.send({"status": "crash", "reason": f"unsendable result: {type(exc).__name__}", "rows": [],
                       "census": {}, "elapsed_s": payload["elapsed_s"]})


class _Slot:
    def __init__(self, ctx, memory_mb: int, siblings: list[Connection] = ()):
        parent, child = ctx.Pipe(duplex=True)
        self.conn = parent
        # the child closes its copy of this slot's parent end and of every sibling's
        inherited = (parent, *siblings)
        self.proc = ctx.Process(target=_worker, args=(child, memory_mb, os.getpid(), inherited), daemon=True)
        self.proc.start()
        child.close()
        self.task: tuple[str, str, str] | None = None  # (source_id, text, sha)
        self.started = 0.0

    def kill(self) -> None:
        try:
            self.proc.kill()
        except (OSError, AttributeError):
            pass
        self.proc.join(timeout=5)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.kill()
        else:
            self.conn.close()


def _read_journal(path: Path) -> dict[tuple[str, str], dict]:
    done: dict[tuple[str, str], dict] = {}
    if not path.exists():
        return done
    with path.open("r", encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break  # truncated by a kill: redo that problem
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(rec, dict) or "source_id" not in rec:
                continue
            done[(rec["source_id"], rec.get("text_sha256", ""))] = rec
    return done


def _reusable(rec: dict, timeout_s: float, memory_mb: int) -> bool:
    """The resume rule (module docstring): finished outcomes always, failures only under
    the same limits (a record without limits, from an older journal, is retried)."""
    if rec.get("status") in FINISHED:
        return True
    try:
        return (float(rec["timeout_s"]) == float(timeout_s)) and (int(rec["memory_mb"]) == int(memory_mb))
    except (KeyError, TypeError, ValueError):
        return False


def _repair_journal(path: Path) -> None:
    """Cut a truncated last line so new lines start on a fresh line."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n")
        with path.open("r+b") as fh:
            fh.truncate(cut + 1 if cut >= 0 else 0)


def aggregate_census(records: list[dict]) -> dict:
    """Corpus census over problem records (paper, Appendix A: "unique-expression coverage").

    Unique expressions are unique span contents (by key) over all records; a key parsed
    in any record counts once. Shares are fractions in [0, 1].

    Returns:
        ``{"unique_expressions", "coverage_before", "coverage_after", "relation_share",
        "coverage_after_interpreted" (after, without uninterpreted parts),
        "spans", "segments", "segments_parsed", "qualifying_relations", "tried_relations",
        "list_bound_relations" (relations over a comma list, never rewritten),
        "counterexamples_discarded" (refuting points that failed the exact or 50-digit
        re-check), "problems_with_relation", "rejections": {reason: count}}``.
    """
    uniq: dict[str, list[bool]] = {}  # key -> [before, after, relation, interpreted]
    totals = {"spans": 0, "segments": 0, "segments_parsed": 0, "qualifying_relations": 0,
              "tried_relations": 0, "list_bound_relations": 0, "counterexamples_discarded": 0}
    rej: dict[str, int] = {}
    with_rel = 0
    for rec in records:
        c = rec.get("census") or {}
        for k in totals:
            totals[k] += int(c.get(k, 0) or 0)
        if c.get("qualifying_relations"):
            with_rel += 1
        for key, b, a, r, *rest in c.get("expressions", []):
            cur = uniq.setdefault(key, [False, False, False, False])
            cur[0] |= bool(b)
            cur[1] |= bool(a)
            cur[2] |= bool(r)
            cur[3] |= bool(rest[0]) if rest else bool(a)
        for k, v in (c.get("rejections") or {}).items():
            rej[k] = rej.get(k, 0) + int(v)
    n = len(uniq)
    return {
        "unique_expressions": n,
        "coverage_before": (sum(v[0] for v in uniq.values()) / n) if n else 0.0,
        "coverage_after": (sum(v[1] for v in uniq.values()) / n) if n else 0.0,
        "relation_share": (sum(v[2] for v in uniq.values()) / n) if n else 0.0,
        "coverage_after_interpreted": (sum(v[3] for v in uniq.values()) / n) if n else 0.0,
        **totals,
        "problems_with_relation": with_rel,
        "rejections": dict(sorted(rej.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def run_generator(problems: list[tuple[str, str]], *, out_path: Path, seed: int, timeout_s: float,
                  memory_mb: int, workers: int, progress: bool = True) -> dict:
    """Run :func:`recipematch.cas.generate_for_problem` over ``problems`` in worker processes.

    Args:
        problems: ``(source_id, text)`` pairs.
        out_path: the final JSONL file (its journal and timings files sit next to it).
        seed: the run's seed.
        timeout_s: wall-clock limit per problem, seconds (> 0); paper: 30.
        memory_mb: address-space cap per worker process (``RLIMIT_AS``), MiB, counted on
            top of what the forked interpreter already maps.
        workers: number of worker processes (≥ 1).
        progress: show a tqdm bar.

    Workers never outlive the call (:mod:`recipematch.cas.isolation`): ``SIGTERM`` to the
    parent kills them and ends the call with :class:`~recipematch.cas.isolation.Terminated`
    (exit status 143), and if the parent is killed outright they exit on their own.

    Returns:
        ``{"counts": {status: n}, "census": aggregate_census(...), "problems": n,
        "resumed": n skipped from the journal, "retried_for_limits": n failures redone
        because the limits changed, "generator_version", "rows": n,
        "distinct_negatives": n, "negative_attachments": n, "out_path", "journal_path",
        "timings_path"}``.

    Concurrency: the call holds an exclusive lock on ``<out_path>.lock`` (:func:`lock_path`)
    for its whole duration; a second run on the same output while the first is alive
    refuses at once instead of redoing every problem.

    Raises:
        ValueError: on a non-positive ``timeout_s``, ``workers`` or ``memory_mb``.
        RecipematchError: when another run holds the lock on ``out_path``.
    """
    if timeout_s <= 0 or workers < 1 or memory_mb <= 0:
        raise ValueError("timeout_s, workers and memory_mb must be positive")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    lock = _acquire_lock(out_path)
    try:
        return _run_locked(problems, out_path=out_path, seed=seed, timeout_s=timeout_s, memory_mb=memory_mb,
                           workers=workers, progress=progress)
    finally:
        lock.close()


def _run_locked(problems: list[tuple[str, str]], *, out_path: Path, seed: int, timeout_s: float,
                memory_mb: int, workers: int, progress: bool) -> dict:
    jpath = journal_path(out_path)
    _repair_journal(jpath)
    journal = _read_journal(jpath)
    todo: list[tuple[str, str, str]] = []
    resumed = 0
    retried = 0
    keys: list[tuple[str, str]] = []
    for source_id, text in problems:
        text = text if isinstance(text, str) else ""
        sha = _sha(text)
        keys.append((str(source_id), sha))
        rec = journal.get((str(source_id), sha))
        if rec is not None and rec.get("generator_version") == GENERATOR_VERSION and rec.get("seed") == seed:
            if _reusable(rec, timeout_s, memory_mb):
                resumed += 1
                continue
            retried += 1
        todo.append((str(source_id), text, sha))

    bar = None
    if progress:
        from tqdm.auto import tqdm
        tqdm.monitor_interval = 0  # no monitor thread: workers are forked later
        bar = tqdm(total=len(todo), desc="cas", unit="problem")
    ctx = mp.get_context("fork")
    slots: list[_Slot] = []
    pending = list(reversed(todo))
    # SIGTERM raises Terminated here, so the finally below kills the workers
    with jpath.open("a", encoding="utf-8") as jf, terminate_workers_on_sigterm():
        def record(task: tuple[str, str, str], payload: dict) -> None:
            source_id, _text, sha = task
            rec = {"source_id": source_id, "text_sha256": sha, "generator_version": GENERATOR_VERSION,
                   "seed": seed, "timeout_s": float(timeout_s), "memory_mb": int(memory_mb),
                   "status": payload["status"], "reason": payload.get("reason"),
                   "elapsed_s": payload.get("elapsed_s"), "rows": payload.get("rows", []),
                   "census": payload.get("census", {})}
            jf.write(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n")
            jf.flush()
            journal[(source_id, sha)] = rec
            if bar is not None:
                bar.update(1)

        def assign(slot: _Slot) -> None:
            if not pending:
                slot.task = None
                return
            task = pending.pop()
            slot.task = task
            slot.started = time.monotonic()
            try:
                slot.conn.send((task[0], task[1], seed))
            except (OSError, BrokenPipeError):
                record(task, {"status": "crash", "reason": "worker pipe closed before the task", "elapsed_s": 0.0})
                slot.task = None

        def new_slot(replacing: int | None = None) -> _Slot:
            siblings = [s.conn for i, s in enumerate(slots) if i != replacing]
            return _Slot(ctx, memory_mb, siblings)

        try:
            for _ in range(min(workers, len(todo))):
                slots.append(new_slot())
            for s in slots:
                assign(s)
            while any(s.task is not None for s in slots):
                busy = [s for s in slots if s.task is not None]
                now = time.monotonic()
                next_deadline = min(s.started + timeout_s for s in busy)
                ready = wait([s.conn for s in busy] + [s.proc.sentinel for s in busy],
                             timeout=max(0.0, next_deadline - now))
                ready_set = set(ready)
                for idx, s in enumerate(slots):
                    if s.task is None:
                        continue
                    got = None
                    if s.conn in ready_set:
                        try:
                            got = s.conn.recv()
                        except (EOFError, OSError):
                            got = None
                    if got is not None:
                        record(s.task, got)
                        assign(s)
                        continue
                    dead = s.proc.sentinel in ready_set or not s.proc.is_alive()
                    if s.conn in ready_set or dead:
                        s.proc.join(timeout=1)
                        code = s.proc.exitcode
                        why = (f"worker killed by signal {-code}" if code is not None and code < 0
                               else f"worker exited with code {code}")
                        record(s.task, {"status": "crash", "reason": why,
                                        "elapsed_s": round(time.monotonic() - s.started, 4)})
                        s.kill()
                        slots[idx] = new_slot(idx)
                        assign(slots[idx])
                        continue
                    if time.monotonic() - s.started >= timeout_s:
                        record(s.task, {"status": "timeout",
                                        "reason": f"wall-clock limit of {timeout_s:g} s exceeded",
                                        "elapsed_s": round(time.monotonic() - s.started, 4)})
                        s.kill()
                        slots[idx] = new_slot(idx)
                        assign(slots[idx])
        finally:
            for s in slots:
                if s.task is None:
                    s.stop()
                else:
                    s.kill()
            if bar is not None:
                bar.close()

    # final deterministic outputs
    final: list[dict] = []
    seen: set[tuple[str, str]] = set()
    for key in keys:
        if key in seen or key not in journal:
            continue
        seen.add(key)
        rec = journal[key]
        final.append(rec)
    final.sort(key=lambda r: (r["source_id"], r["text_sha256"]))
    tmp = out_path.with_name(out_path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for rec in final:
            clean = {k: v for k, v in rec.items() if k not in _RUN_ONLY}
            fh.write(json.dumps(clean, ensure_ascii=False, sort_keys=True) + "\n")
    os.replace(tmp, out_path)
    tpath = timings_path(out_path)
    tmp = tpath.with_name(tpath.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for rec in final:
            fh.write(json.dumps({"source_id": rec["source_id"], "status": rec["status"],
                                 "elapsed_s": rec.get("elapsed_s")}, sort_keys=True) + "\n")
    os.replace(tmp, tpath)

    counts = {s: 0 for s in STATUSES}
    rows = distinct = attach = 0
    for rec in final:
        counts[rec["status"]] = counts.get(rec["status"], 0) + 1
        rows += len(rec.get("rows", []))
        texts = set()
        for row in rec.get("rows", []):
            attach += len(row.get("negatives", []))
            texts |= {n["text"] for n in row.get("negatives", [])}
        distinct += len(texts)
    return {"counts": counts, "census": aggregate_census(final), "problems": len(final), "resumed": resumed,
            "retried_for_limits": retried,
            "generator_version": GENERATOR_VERSION, "rows": rows, "distinct_negatives": distinct,
            "negative_attachments": attach, "out_path": str(out_path), "journal_path": str(jpath),
            "timings_path": str(timings_path(out_path))}


def metrics_from_summary(summary: dict) -> dict:
    """Flat metrics for ``metrics/`` (small JSON, one level): outcome counts per status,
    rows, negatives, and the census shares (fractions), from :func:`run_generator`'s
    summary."""
    c = summary["census"]
    flat = {f"status_{k}": int(v) for k, v in sorted(summary["counts"].items())}
    flat.update({
        "problems": summary["problems"], "rows": summary["rows"],
        "distinct_negatives": summary["distinct_negatives"],
        "negative_attachments": summary["negative_attachments"],
        "unique_expressions": c["unique_expressions"],
        "coverage_before": round(c["coverage_before"], 6), "coverage_after": round(c["coverage_after"], 6),
        "relation_share": round(c["relation_share"], 6),
        "coverage_after_interpreted": round(c["coverage_after_interpreted"], 6),
        "problems_with_relation": c["problems_with_relation"],
        "generator_version": summary["generator_version"],
    })
    return flat
