"""Worker processes that never outlive their parent, and one-shot isolated calls.

Shared by :mod:`recipematch.cas.runner` (many problems) and :mod:`recipematch.cas.cli`
(one command). A forked worker must die with its parent however the parent ends:

* **idle** (blocked in ``recv()``): the worker closes every parent-side pipe end it
  inherited (its own and its siblings'), so when the parent dies the pipe has no writer
  left and ``recv()`` sees EOF;
* **busy** (inside a problem that hangs): on Linux the worker asks the kernel for
  ``SIGKILL`` when its parent dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)`` through
  ``ctypes``; elsewhere this step is skipped), and checks that the parent did not die
  before the request;
* the parent turns ``SIGTERM`` into :class:`Terminated` (a ``SystemExit`` with status
  143) while it runs workers, so its ``finally`` blocks kill them
  (:func:`terminate_workers_on_sigterm`).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection, wait

__all__ = [
    "Terminated",
    "child_setup",
    "run_isolated",
    "set_memory_cap",
    "set_parent_death_signal",
    "terminate_workers_on_sigterm",
]

_PR_SET_PDEATHSIG = 1


class Terminated(SystemExit):
    """Raised in the parent on ``SIGTERM`` while workers run (exit status 128 + 15)."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Linux only: have the kernel send ``sig`` to this process when its parent exits.

    Returns:
        True when the request was made, False on other platforms or when ``prctl`` is not
        available (the pipe-EOF rule still ends idle workers).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return False
    prctl.restype = ctypes.c_int
    rc = prctl(ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(int(sig)), ctypes.c_ulong(0), ctypes.c_ulong(0),
               ctypes.c_ulong(0))
    return rc == 0


def child_setup(parent_pid: int, inherited: Iterable[Connection | None] = ()) -> None:
    """First thing a forked worker does: close the parent-side pipe ends it inherited,
    ask for ``SIGKILL`` on the parent's death, and exit at once if the parent is already
    gone (it may have died between the fork and the request)."""
    for conn in inherited:
        if conn is None:
            continue
        with contextlib.suppress(OSError):
            conn.close()
    set_parent_death_signal()
    if os.getppid() != parent_pid:
        os._exit(0)


def set_memory_cap(memory_mb: int) -> None:
    """Cap the address space (``RLIMIT_AS``) at ``memory_mb`` MiB on top of what the
    forked interpreter already maps (a parent that imported torch maps gigabytes of
    address space it never touches)."""
    limit = int(memory_mb) * 1024 * 1024
    try:
        with open("/proc/self/statm") as fh:
            vm_pages = int(fh.read().split()[0])
        current = vm_pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        current = 0
    limit = current + limit
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@contextlib.contextmanager
def terminate_workers_on_sigterm() -> Iterator[None]:
    """While the block runs, ``SIGTERM`` raises :class:`Terminated` in the main thread so
    that the caller's ``finally`` kills its workers; the previous handler is restored on
    exit. Outside the main thread (where handlers cannot be installed) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _on_term(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _isolated_child(conn: Connection, parent_conn: Connection, parent_pid: int, fn: Callable, args: tuple,
                    memory_mb: int | None) -> None:
    child_setup(parent_pid, [parent_conn])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if memory_mb:
        with contextlib.suppress(ValueError, OSError):
            set_memory_cap(memory_mb)
    try:
        result = ("ok", fn(*args))
    except MemoryError:
        result = ("crash", "MemoryError: memory cap exceeded")
    except RecursionError as exc:
        result = ("crash", f"RecursionError: {exc}"[:300])
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        result = ("crash", f"{type(exc).__name__}: {exc}"[:300])
    try:
        conn.send(result)
    except (OSError, ValueError, TypeError) as exc:
        conn.send(("crash", f"unsendable result: {type(exc).__name__}"))
    conn.close()


def run_isolated(fn: Callable, args: tuple, *, timeout_s: float, memory_mb: int | None = None) -> tuple[str, object]:
    """Call ``fn(*args)`` in a forked child under a wall-clock limit.

    Args:
        fn: a module-level function (it runs in the forked child).
        args: its arguments.
        timeout_s: seconds before the child is killed.
        memory_mb: optional address-space cap for the child, MiB on top of its mapping.

    Returns:
        ``("ok", result)``, ``("timeout", None)`` or ``("crash", reason)`` (an exception in
        ``fn``, or the child died). The child is always gone when this returns.
    """
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_isolated_child, args=(child, parent, os.getpid(), fn, args, memory_mb), daemon=True)
    with terminate_workers_on_sigterm():
        proc.start()
        child.close()
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return "timeout", None
                ready = wait([parent, proc.sentinel], timeout=left)
                if parent in ready:
                    try:
                        return parent.recv()
                    except (EOFError, OSError):
                        pass
                if ready:
                    proc.join(timeout=1)
                    code = proc.exitcode
                    return "crash", (f"worker killed by signal {-code}" if code is not None and code < 0
                                     else f"worker exited with code {code}")
        finally:
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=5)
            parent.close()
