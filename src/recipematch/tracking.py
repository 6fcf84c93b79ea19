"""MLflow tracking: one run per trained (arm, seed), safe under concurrency and recoverable.

A run is identified by its **run key** (tag :data:`RUN_KEY_TAG`), a content hash of what it
trains on and how (pair file, gate list, training settings, seed, code). Nothing that DVC
hashes holds an MLflow run id: stages find a run by its key, so a lost tracking store is
rebuilt from the seed records without rewriting them.

Rules:

- **One store initialisation at a time.** Creating or migrating the SQLite schema is not
  safe when two processes do it at once (two train stages started together on a missing
  ``mlflow.db`` crash one of them). :func:`client` serialises it with a lock file beside the
  database (``<db>.lock``) and creates the experiment under the same lock.
- **A corrupt store is named.** A file that is not a readable SQLite database stops with a
  :class:`TrackingStoreError` naming the file and what to do, instead of a database
  traceback.
- **Resumes never crash on params.** MLflow refuses to re-log a param with another value in
  one run; :func:`log_params_safe` logs new keys, skips equal values and records a changed
  value as a ``param_changed.<key>`` tag.
- **Metric history is written once.** Retraining a seed under the same run key reuses its
  run; :func:`log_metrics_once` does not append a ``(key, step)`` the run already holds. A
  score that changed on a rerun (an edited evaluation, same checkpoint) is appended at the
  next step and tagged ``metric_changed.<key>`` (``changed="supersede"``).
- **A long param is compared whole.** MLflow keeps 6,000 characters of a param value; a
  longer one is stored cut with the SHA-256 of the whole value at its end
  (:func:`param_value`), so a change past the cut is still seen as a change.
- **Lost runs are restored.** :func:`restore_run` finds the run of a seed record by its key,
  or re-creates it from the record (hashes as tags, summary metrics, ``restored_from_record``).
"""

from __future__ import annotations

import math
import os
import posixpath
import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError, short_repr
from recipematch.io import sha256_text

RUN_KEY_TAG = "recipematch.run_key"

#: The summary numbers of a seed record that a restored run gets back as step-0 metrics.
RECORD_METRICS = ("dev_accuracy_before", "dev_accuracy_best", "train_loss", "relative_weight_change",
                  "train_examples")
#: The hashes of a seed record that a restored run gets back as tags.
RECORD_TAGS = ("pair_file_sha256", "gate_list_sha256", "checkpoint_sha256")

_SQLITE_MAGIC = b"SQLite format 3\x00"
_MAX_BATCH = 1000  # MLflow's limit of metrics per log_batch call
#: MLflow's limits on a param's and a tag's value (``mlflow.utils.validation``), characters.
MAX_PARAM_CHARS = 6000
MAX_TAG_CHARS = 5000  # MLflow 2.x allows 8,000; 5,000 keeps older servers working


class TrackingStoreError(RecipematchError):
    """The MLflow tracking store cannot be opened; the message names it and what to do."""


def _quiet() -> None:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///<path>`` URI (``None`` for other stores or
    in-memory SQLite)."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    path = tracking_uri[len("sqlite:///"):].split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    return Path(path)


def _corrupt(path: Path, why: str) -> TrackingStoreError:
    return TrackingStoreError(
        f"{path}: the MLflow tracking store is unreadable ({why}); move it aside "
        f"(mv {path} {path}.corrupt) and rerun: the train stage re-creates every run from "
        "its seed records (seed_<N>.json beside each checkpoint) without retraining")


def check_sqlite_store(path: Path) -> None:
    """Refuse a tracking database that is not a readable SQLite file.

    A missing or empty file is fine (MLflow creates the schema). Otherwise the file must
    start with the SQLite header, pass ``PRAGMA quick_check`` (read-only), and, when it holds
    any table, hold MLflow's (``experiments`` and ``alembic_version``): another program's
    database is never written into.

    Raises:
        TrackingStoreError: one line naming ``path``, why, and what to do.
    """
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb") as f:
        head = f.read(len(_SQLITE_MAGIC))
    if head != _SQLITE_MAGIC:
        raise _corrupt(path, "not an SQLite database")
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = con.execute("PRAGMA quick_check").fetchall()
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise _corrupt(path, f"SQLite: {str(exc).splitlines()[0]}") from None
    if rows != [("ok",)]:
        raise _corrupt(path, f"SQLite integrity check: {str(rows[0][0]).splitlines()[0][:200]}")
    if tables and not {"experiments", "alembic_version"} <= tables:
        raise TrackingStoreError(f"{path}: an SQLite database of another program (tables "
                                 f"{short_repr(sorted(tables), 80)}), not an MLflow tracking store; point "
                                 "mlflow.tracking_uri elsewhere or move the file aside")


@contextmanager
def store_lock(tracking_uri: str) -> Iterator[None]:
    """Hold an exclusive lock for the store of ``tracking_uri`` (a ``<db>.lock`` file beside
    a SQLite database; nothing for other stores). Blocks until the lock is free."""
    path = sqlite_path(tracking_uri)
    if path is None:
        yield
        return
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        yield


def client(tracking_uri: str):
    """An ``MlflowClient`` on ``tracking_uri`` (e.g. ``sqlite:////abs/mlflow.db``), with the
    store's schema created or migrated under :func:`store_lock`.

    Raises:
        TrackingStoreError: the SQLite file is corrupt or MLflow cannot open the store.
    """
    _quiet()
    import mlflow
    from mlflow.tracking import MlflowClient

    path = sqlite_path(tracking_uri)
    with store_lock(tracking_uri):
        if path is not None:
            check_sqlite_store(path)
        mlflow.set_tracking_uri(tracking_uri)
        try:
            c = MlflowClient(tracking_uri=tracking_uri)  # a store of another schema version fails here
            c.search_experiments(max_results=1)  # opens the store: schema created/migrated here
        except Exception as exc:  # noqa: BLE001 - any failure to open the store gets one clear line
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            if path is not None:
                raise _corrupt(path, f"{type(exc).__name__}: {first}") from None
            raise TrackingStoreError(f"MLflow tracking store {tracking_uri!r} cannot be opened: {first}") from None
    return c


def experiment_id(c, name: str, artifact_location: str | None = None) -> str:
    """Id of experiment ``name``, created (with ``artifact_location``) when absent and
    restored when it was deleted. Safe when another process creates it at the same time."""
    from mlflow.exceptions import MlflowException

    exp = c.get_experiment_by_name(name)
    if exp is None:
        try:
            return c.create_experiment(name, artifact_location=artifact_location)
        except MlflowException:  # created meanwhile by another process
            exp = c.get_experiment_by_name(name)
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        c.restore_experiment(exp.experiment_id)
    return exp.experiment_id


def open_store(tracking_uri: str, experiment: str, artifact_location: str | None = None) -> tuple[Any, str]:
    """:func:`client` and :func:`experiment_id` together, under one store lock."""
    c = client(tracking_uri)
    with store_lock(tracking_uri):
        exp = experiment_id(c, experiment, artifact_location)
    return c, exp


def find_run(c, exp_id: str, run_key: str) -> str | None:
    """Id of the newest active run tagged with ``run_key``, or ``None``.

    Raises:
        RecipematchError: ``run_key`` is not a run key (:func:`check_run_key`).
    """
    check_run_key(run_key, "run lookup")
    found = c.search_runs([exp_id], filter_string=f"tags.`{RUN_KEY_TAG}` = '{run_key}'", max_results=1,
                          order_by=["attributes.start_time DESC"])
    return found[0].info.run_id if found else None


def find_or_create_run(c, exp_id: str, run_key: str, run_name: str, tags: Mapping[str, str]) -> tuple[str, bool]:
    """The run tagged with ``run_key`` (resumed), or a new one. Returns ``(run_id, resumed)``.

    ``run_key`` is a content hash of what the run trains on and how (pair file hash, config,
    seed): the same key means the same experiment, so a rerun after an interruption reuses
    the run instead of adding a duplicate.
    """
    run_id = find_run(c, exp_id, run_key)
    if run_id is not None:
        return run_id, True
    run = c.create_run(exp_id, run_name=run_name, tags={RUN_KEY_TAG: run_key, **{k: str(v) for k, v in tags.items()}})
    return run.info.run_id, False


def param_value(value: Any, limit: int = MAX_PARAM_CHARS) -> str:
    """``str(value)`` as an MLflow param: unchanged up to ``limit`` characters; longer, cut
    and ended with ``…[<n> chars, sha256 <hex>]`` (the whole value's hash), still ``limit``
    characters long, so two values differing anywhere store differently."""
    sv = str(value)
    if len(sv) <= limit:
        return sv

    tail = f"…[{len(sv)} chars, sha256 {sha256_text(sv)}]"
    return sv[:limit - len(tail)] + tail


def log_params_safe(c, run_id: str, params: Mapping[str, Any]) -> dict[str, int]:
    """Log params without ever raising on a changed value (see module docstring); values over
    MLflow's limit go through :func:`param_value`.

    Returns:
        counts ``{"logged", "unchanged", "changed"}``.
    """
    existing = c.get_run(run_id).data.params
    out = {"logged": 0, "unchanged": 0, "changed": 0}
    from mlflow.entities import Param

    new = []
    for k, v in params.items():
        sv = param_value(v)
        if k not in existing:
            new.append(Param(k, sv))
            out["logged"] += 1
        elif existing[k] == sv:
            out["unchanged"] += 1
        else:
            c.set_tag(run_id, f"param_changed.{k}", param_value(v, MAX_TAG_CHARS))
            out["changed"] += 1
    if new:
        c.log_batch(run_id, params=new)
    return out


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def log_metrics_once(c, run_id: str, metrics: Sequence[Any], *, changed: str = "keep") -> dict[str, int]:
    """Log ``mlflow.entities.Metric`` objects without appending what the run already holds.

    ``changed="keep"`` (training: same run key means same inputs, settings and code): every
    ``(key, step)`` the run already holds, or that repeats within ``metrics``, is skipped; a
    skipped value that differs from the stored one is counted as ``differs`` and flagged with
    the tag ``metric_differs.<key>`` (the stored value kept: a difference is non-determinism,
    shown, not hidden).

    ``changed="supersede"`` (scores: an evaluation can change under the same checkpoint): a
    value equal to the key's latest stored value is skipped (``kept``); a different one is
    appended at the step after the latest and flagged ``metric_changed.<key>`` (``differs``),
    so the run's latest value is the newest score and its history the scores over reruns.

    Returns:
        counts ``{"logged", "kept", "differs"}``.

    Raises:
        ValueError: ``changed`` is neither ``"keep"`` nor ``"supersede"``.
    """
    if changed not in ("keep", "supersede"):
        raise ValueError(f"changed must be 'keep' or 'supersede', got {changed!r}")
    from mlflow.entities import Metric

    have: dict[str, dict[int, float]] = {}
    for key in dict.fromkeys(m.key for m in metrics):
        have[key] = {int(h.step): float(h.value) for h in c.get_metric_history(run_id, key)}
    out = {"logged": 0, "kept": 0, "differs": 0}
    todo = []
    for m in metrics:
        stored = have[m.key]
        value = float(m.value)
        if changed == "supersede" and stored:
            last = max(stored)
            old = stored[last]
            if _same(old, value):
                out["kept"] += 1
                continue
            out["differs"] += 1
            c.set_tag(run_id, f"metric_changed.{m.key}", f"step {last}: {old!r}, step {last + 1}: {value!r}")
            m = Metric(m.key, value, m.timestamp, last + 1)
        elif int(m.step) in stored:
            out["kept"] += 1
            old = stored[int(m.step)]
            if not _same(old, value):
                out["differs"] += 1
                c.set_tag(run_id, f"metric_differs.{m.key}", f"step {m.step}: kept {old!r}, new {value!r}")
            continue
        stored[int(m.step)] = value
        todo.append(m)
        out["logged"] += 1
    for i in range(0, len(todo), _MAX_BATCH):
        c.log_batch(run_id, metrics=todo[i:i + _MAX_BATCH])
    return out


#: A run key as the stages write it (a SHA-256 hex digest, a survey's ``survey:<digest>``;
#: letters, digits, _ . - : allowed): nothing that could end the quoted search filter it is matched by.
_RUN_KEY = re.compile(r"^[\w.\-:]{1,128}\Z")
#: MLflow's characters for a param, tag or metric name (``mlflow.utils.validation``): letters,
#: digits, ``_ - . /`` and spaces, at most 250 characters (:func:`storable_name` adds its path rule).
MLFLOW_NAME = re.compile(r"^[\w\-. /]{1,250}\Z")


def storable_name(name: Any) -> bool:
    """Whether MLflow stores ``name`` as a param, tag or metric name: :data:`MLFLOW_NAME`'s
    characters, and, read as a path, one that names itself (no leading or trailing ``/``, no
    ``//``, ``.`` or ``..`` part), as ``mlflow.utils.validation`` requires."""
    if not isinstance(name, str) or not MLFLOW_NAME.match(name):
        return False
    norm = posixpath.normpath(name)
    return norm == name and norm != "." and not norm.startswith(("..", "/"))


def check_run_key(run_key: Any, where: str) -> str:
    """``run_key`` when it is a run key as the stages write it (:data:`_RUN_KEY`), else a
    one-line error naming ``where``: it is matched inside a quoted search filter."""
    if not isinstance(run_key, str) or not _RUN_KEY.match(run_key):
        raise RecipematchError(f"{where}: 'run_key' {short_repr(run_key, 80)} is not a run key (letters, digits, "
                               "_ . - :); retrain it")
    return run_key


def finite_value(value: Any, what: str) -> float:
    """``value`` as a finite float, or a one-line error naming ``what``."""
    try:
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(float(value))
    except OverflowError:  # an integer beyond any float
        ok = False
    if not ok:
        raise RecipematchError(f"{what}: {short_repr(value, 60)} is not a finite number")
    return float(value)


def check_record(record: Mapping[str, Any], params: Mapping[str, Any] | None, where: str) -> dict[str, float]:
    """What :func:`restore_run` checks before it writes, without a store: the record's run key,
    its summary numbers (:data:`RECORD_METRICS`, returned as floats), its hashes
    (:data:`RECORD_TAGS`, text) and ``params``' names.

    Raises:
        RecipematchError: naming ``where``, as :func:`restore_run` documents.
    """
    check_run_key(record.get("run_key"), where)
    values = {k: finite_value(record[k], f"{where}: {k}") for k in RECORD_METRICS if k in record}
    if bad := [k for k in RECORD_TAGS if k in record and not isinstance(record[k], str)]:
        raise RecipematchError(f"{where}: {bad[0]!r} is {short_repr(record[bad[0]], 40)}, not a hash (text)")
    bad = [k for k in (params or {}) if not storable_name(k)]
    if bad:
        raise RecipematchError(f"{where}: param name {short_repr(bad[0], 80)} cannot be stored by MLflow "
                               f"(letters, digits, _ - . / and spaces; no leading, trailing or double /)")
    return values


def restore_run(c, exp_id: str, record: Mapping[str, Any], *, run_name: str, tags: Mapping[str, str],
                params: Mapping[str, Any] | None = None, where: str = "seed record") -> tuple[str, bool]:
    """The run of a seed record (found by ``record["run_key"]``), re-created from the record
    when the tracking store lost it. Never writes any file. Returns ``(run_id, restored)``.

    A re-created run gets the record's hashes (:data:`RECORD_TAGS`) as tags, its summary
    numbers (:data:`RECORD_METRICS`) as step-0 metrics, ``params`` and the tag
    ``restored_from_record``: ``partial`` while it is being written, ``true`` once all of it
    is, so a restore cut short is completed by the next one. Everything is checked before
    anything is written.

    Raises:
        RecipematchError: the record (``where``) has no well-formed ``run_key``, a summary
            number that is not a finite number, or a param name MLflow cannot store.
    """
    import time

    from mlflow.entities import Metric

    values = check_record(record, params, where)
    run_key = record["run_key"]
    run_id = find_run(c, exp_id, run_key)
    if run_id is not None:
        data = c.get_run(run_id).data
        mark = data.tags.get("restored_from_record")
        # complete: a restore that finished, or a training run that logged its params and the record's hashes
        if mark == "true" or mark is None and data.params and all(k in data.tags for k in RECORD_TAGS if k in record):
            return run_id, False
    else:  # created with the mark in the same call: a restore cut short at any point is completed next time
        run_id, _ = find_or_create_run(c, exp_id, run_key, run_name, {**tags, "restored_from_record": "partial"})
    for k in RECORD_TAGS:
        if k in record:
            c.set_tag(run_id, k, param_value(record[k], MAX_TAG_CHARS))
    if params:
        log_params_safe(c, run_id, params)
    now = int(time.time() * 1000)
    log_metrics_once(c, run_id, [Metric(k, v, now, 0) for k, v in values.items()])
    c.set_tag(run_id, "restored_from_record", "true")
    c.set_terminated(run_id, status="FINISHED")
    return run_id, True


def log_dataset(run_id: str, df, *, source: str, name: str, digest: str, context: str) -> None:
    """Record a data input (its content hash as MLflow's dataset digest) on a run."""
    _quiet()
    import mlflow

    from mlflow.entities import DatasetInput, InputTag
    from mlflow.tracking import MlflowClient

    ds = mlflow.data.from_pandas(df, source=source, name=name, digest=digest[:36])
    entity = DatasetInput(ds._to_mlflow_entity(), tags=[InputTag(key="mlflow.data.context", value=context)])
    MlflowClient().log_inputs(run_id, datasets=[entity])
