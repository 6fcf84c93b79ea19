"""Fan-out of independent units of work on an existing engine: the (arm, seed) units of the
train and evaluate stages (paper Section 3: every arm is trained and scored over 8 seeds,
42–49) run one after another in the stage's own process (``local``, the default) or as Ray
tasks (``ray``) on this machine or on a running Ray cluster.

Rules:

- **Results do not depend on the engine.** A unit carries everything it computes from (its
  seed included); nothing is drawn from scheduling. :func:`map_units` returns results in
  the order of the units, whatever order they finish in. Each Ray task runs torch on
  ``engine.num_cpus`` threads.
- **Workers compute, the driver records.** Workers write only their unit's own files
  (a checkpoint, under the project folder, which every node must see at the same path); the
  driver gets each result back (``on_done``) and is the only process that writes the
  tracking store, so there is never a second writer on one SQLite file.
- **Failures.** After the first failure no further unit starts; units already running finish
  and are reported through ``on_done``; then the first failure in unit order is raised: a
  unit's own exception as it is, a worker that died (killed, out of memory, node lost) as
  :class:`EngineError` naming the unit. A stage that resumes per unit then redoes only the
  units that did not finish.
- **An engine that cannot be reached is named.** ``engine.address`` (the head's ``HOST:PORT``) is probed with a TCP
  connection (``engine.connect_timeout_s``) before Ray is asked to join it: a refused,
  unresolvable or silent address fails fast with :class:`EngineError` naming it.

The engine settings choose where units run, never what they compute, so they are no DVC
param of any stage: changing them reruns nothing (the fan-out tests check that 2 Ray
workers and the sequential path give byte-identical outputs).
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Callable, Sequence
from typing import Any

from recipematch.errors import RecipematchError

log = logging.getLogger("recipematch")

__all__ = ["EngineError", "check_address", "check_unit_device", "map_units", "preflight", "ray_session", "same_code_env"]

_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+):([0-9]{1,5})$")


class EngineError(RecipematchError):
    """The engine cannot be reached, or a worker died while running a unit; the message
    names the address or the unit and what to do."""


def check_address(address: str, timeout_s: float) -> tuple[str, int]:
    """Probe a Ray cluster's head (``HOST:PORT``, the port ``ray start --head`` printed)
    with one TCP connection of at most ``timeout_s`` seconds. Ray Client addresses
    (``ray://``) are refused: the client's extra packages are not in the pinned environment,
    so the stage runs on a node of the cluster instead.

    Returns:
        ``(host, port)``.

    Raises:
        EngineError: the address is malformed, does not resolve, refuses the connection or
            does not answer within ``timeout_s``; the message names ``engine.address``.
    """
    if address.strip().startswith("ray://"):
        raise EngineError(f"engine.address {address!r}: Ray Client (ray://) is not supported; run the stage on a "
                          f"node of the cluster and give the head's HOST:PORT (e.g. 10.0.0.5:6379)")
    m = _HOST_PORT.match(address.strip())
    if not m:
        raise EngineError(f"engine.address {address!r}: expected HOST:PORT of the cluster's head "
                          f"(or '' to start Ray on this machine)")
    host, port = m.group(1).strip("[]"), int(m.group(2))
    if not 0 < port < 65536:
        raise EngineError(f"engine.address {address!r}: port {port} is out of range")
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except socket.gaierror as e:
        raise EngineError(f"engine.address {address!r}: host {host!r} does not resolve ({e.strerror or e})") from None
    except TimeoutError:
        raise EngineError(f"engine.address {address!r}: no answer within {timeout_s:g} s "
                          f"(engine.connect_timeout_s); is the Ray head running and reachable?") from None
    except OSError as e:
        raise EngineError(f"engine.address {address!r}: cannot connect ({e.strerror or e}); "
                          f"start the cluster's head (`ray start --head`) or fix the address") from None
    return host, port


def ray_session(cfg: Any):
    """The ``ray`` module with a session open: the one already open in this process, else a
    new connection to ``cfg.address`` (checked first by :func:`check_address`), else (``''``)
    a Ray started on this machine with ``cfg.workers * cfg.num_cpus`` CPUs.

    Raises:
        EngineError: Ray is not installed, or the address cannot be reached.
    """
    try:
        import ray
    except ImportError:
        raise EngineError("engine.kind is ray but Ray is not installed in this environment "
                          "(pip install ray; see docs/fan-out.md)") from None
    address = cfg.address
    if address:
        check_address(address, cfg.connect_timeout_s)
    if ray.is_initialized():
        return ray
    quiet = {"include_dashboard": False, "logging_level": logging.WARNING, "configure_logging": True}
    if address:
        try:
            ray.init(address=address, **quiet)
        except (ConnectionError, TimeoutError, RuntimeError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            raise EngineError(f"engine.address {address!r}: Ray could not join the cluster ({first})") from None
    else:
        ray.init(num_cpus=int(cfg.workers * cfg.num_cpus), runtime_env=same_code_env(), **quiet)
    return ray


def same_code_env() -> dict:
    """A Ray ``runtime_env`` under which workers on this machine import the ``recipematch``
    this process runs (its source folder first on ``PYTHONPATH``), never another copy."""
    import os
    from pathlib import Path

    import recipematch

    src = str(Path(recipematch.__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH", "")
    return {"env_vars": {"PYTHONPATH": os.pathsep.join([src, *([rest] if rest else [])])}}


def preflight(cfg: Any) -> None:
    """What a stage checks before any work: an ``engine.address`` that cannot be reached
    fails now (:func:`check_address`), not after the stage has prepared its units.

    Raises:
        EngineError: naming the address.
    """
    if cfg.kind == "ray" and cfg.address:
        check_address(cfg.address, cfg.connect_timeout_s)


def _run_unit(fn: Callable[[Any, Any], Any], unit: Any, shared: Any, threads: int) -> Any:
    """A unit inside a Ray worker: torch on ``threads`` threads, then ``fn(unit, shared)``."""
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:  # a unit that needs no torch
        pass
    return fn(unit, shared)


def map_units(fn: Callable[[Any, Any], Any], units: Sequence[Any], cfg: Any, *, shared: Any = None,
              labels: Sequence[str] | None = None,
              on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
    """Run ``fn(unit, shared)`` for every unit on the engine ``cfg`` and return the results in
    the order of ``units``.

    Args:
        fn: a module-level function (Ray ships it to workers by reference); it must draw all
            randomness from its unit.
        units: picklable inputs, one per unit (e.g. one training seed each).
        cfg: a :class:`recipematch.config.EngineConfig` (``kind``, ``address``, ``workers``,
            ``num_cpus``, ``num_gpus``, ``connect_timeout_s``, ``retries``).
        shared: one read-only input every unit gets (put once into Ray's object store).
        labels: one name per unit for logs and errors (default ``unit <i>``).
        on_done: called on the driver as ``on_done(index, result)`` as each unit finishes
            (completion order), before any later unit's result is handled.

    Returns:
        ``[fn(units[0], shared), fn(units[1], shared), …]``.

    Raises:
        EngineError: the engine cannot be reached, or a worker died running a unit (named).
        Exception: the first failing unit's own exception (after the running units finish).
    """
    labels = list(labels) if labels is not None else [f"unit {i}" for i in range(len(units))]
    if len(labels) != len(units):
        raise ValueError(f"{len(labels)} labels for {len(units)} units")
    if not units:
        return []
    if cfg.kind == "local":
        out = []
        for i, u in enumerate(units):
            r = fn(u, shared)
            if on_done is not None:
                on_done(i, r)
            out.append(r)
        return out
    if cfg.kind != "ray":
        raise EngineError(f"engine.kind {cfg.kind!r}: expected local or ray")
    return _map_ray(fn, units, cfg, shared, labels, on_done)


def _map_ray(fn, units, cfg, shared, labels, on_done) -> list[Any]:
    ray = ray_session(cfg)
    from ray.exceptions import RayError, RayTaskError

    threads = max(1, int(cfg.num_cpus))
    task = ray.remote(_run_unit)
    shared_ref = ray.put(shared)
    results: list[Any] = [None] * len(units)
    failures: dict[int, BaseException] = {}
    pending: dict[Any, int] = {}
    next_i = 0

    def submit(i: int) -> None:
        ref = task.options(num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus,
                           max_retries=cfg.retries, retry_exceptions=False,
                           name=labels[i]).remote(fn, units[i], shared_ref, threads)
        pending[ref] = i
        log.info("engine: %s submitted", labels[i])

    while next_i < len(units) and len(pending) < cfg.workers:
        submit(next_i)
        next_i += 1
    while pending:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        i = pending.pop(ref)
        try:
            r = ray.get(ref)
        except RayTaskError as e:  # the unit's own exception, raised as itself
            failures[i] = e.cause if isinstance(e.cause, BaseException) else e
            log.error("engine: %s failed: %s", labels[i], str(failures[i]).splitlines()[0] if str(failures[i]) else
                      type(failures[i]).__name__)
        except RayError as e:  # the worker or its node died (killed, out of memory, lost)
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            failures[i] = EngineError(f"{labels[i]}: the worker running it stopped before it finished "
                                      f"({type(e).__name__}: {first}); finished units are kept: rerun the stage "
                                      f"to redo the unfinished ones")
            log.error("engine: %s", failures[i])
        else:
            results[i] = r
            log.info("engine: %s finished", labels[i])
            if on_done is not None:
                on_done(i, r)
        if not failures and next_i < len(units):
            submit(next_i)
            next_i += 1
    if failures:
        first = min(failures)
        exc = failures[first]
        if len(failures) > 1:
            log.error("engine: %d units failed: %s", len(failures), ", ".join(labels[i] for i in sorted(failures)))
        raise exc
    return results


def check_unit_device(cfg: Any, key: str, device: str) -> None:
    """Refuse a unit device the engine's reservation contradicts: a CUDA unit on Ray needs
    ``engine.num_gpus`` > 0 (Ray hides every GPU from a task that reserves none), and a GPU
    reserved per unit is wasted on a CPU unit.

    Raises:
        EngineError: naming ``key`` and ``engine.num_gpus``.
    """
    if cfg.kind != "ray":
        return
    if device == "cuda" and cfg.num_gpus <= 0:
        raise EngineError(f"{key} is cuda but engine.num_gpus is 0: Ray hides the GPUs from a task that reserves "
                          f"none (set engine.num_gpus, e.g. 1)")
    if device != "cuda" and cfg.num_gpus > 0:
        raise EngineError(f"engine.num_gpus is {cfg.num_gpus:g} but {key} is {device}: set {key}: cuda "
                          f"or engine.num_gpus: 0")
