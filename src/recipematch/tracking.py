"""MLflow tracking: one run per trained (arm, seed), resumable without crashing.

MLflow refuses to re-log a param with another value inside one run (``MlflowException:
Changing param values is not allowed``). A resumed training stage reopens its run, so
:func:`log_params_safe` logs only new keys, skips equal values and records a changed value
as a ``param_changed.<key>`` tag instead of raising.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

RUN_KEY_TAG = "recipematch.run_key"


def _quiet() -> None:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def client(tracking_uri: str):
    """An ``MlflowClient`` on ``tracking_uri`` (e.g. ``sqlite:///mlflow.db``)."""
    _quiet()
    import mlflow
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(tracking_uri)
    return MlflowClient(tracking_uri=tracking_uri)


def experiment_id(c, name: str, artifact_location: str | None = None) -> str:
    """Id of experiment ``name``, created (with ``artifact_location``) when absent."""
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    return c.create_experiment(name, artifact_location=artifact_location)


def find_or_create_run(c, exp_id: str, run_key: str, run_name: str, tags: Mapping[str, str]) -> tuple[str, bool]:
    """The run tagged with ``run_key`` (resumed), or a new one. Returns ``(run_id, resumed)``.

    ``run_key`` is a content hash of what the run trains on and how (pair file hash, config,
    seed): the same key means the same experiment, so a rerun after an interruption reuses
    the run instead of adding a duplicate.
    """
    found = c.search_runs([exp_id], filter_string=f"tags.`{RUN_KEY_TAG}` = '{run_key}'", max_results=1,
                          order_by=["attributes.start_time DESC"])
    if found:
        return found[0].info.run_id, True
    run = c.create_run(exp_id, run_name=run_name, tags={RUN_KEY_TAG: run_key, **{k: str(v) for k, v in tags.items()}})
    return run.info.run_id, False


def log_params_safe(c, run_id: str, params: Mapping[str, Any]) -> dict[str, int]:
    """Log params without ever raising on a changed value (see module docstring).

    Returns:
        counts ``{"logged", "unchanged", "changed"}``.
    """
    existing = c.get_run(run_id).data.params
    out = {"logged": 0, "unchanged": 0, "changed": 0}
    from mlflow.entities import Param

    new = []
    for k, v in params.items():
        sv = str(v)[:6000]
        if k not in existing:
            new.append(Param(k, sv))
            out["logged"] += 1
        elif existing[k] == sv:
            out["unchanged"] += 1
        else:
            c.set_tag(run_id, f"param_changed.{k}", sv[:5000])
            out["changed"] += 1
    if new:
        c.log_batch(run_id, params=new)
    return out


def log_dataset(run_id: str, df, *, source: str, name: str, digest: str, context: str) -> None:
    """Record a data input (its content hash as MLflow's dataset digest) on a run."""
    _quiet()
    import mlflow

    from mlflow.entities import DatasetInput, InputTag
    from mlflow.tracking import MlflowClient

    ds = mlflow.data.from_pandas(df, source=source, name=name, digest=digest[:36])
    entity = DatasetInput(ds._to_mlflow_entity(), tags=[InputTag(key="mlflow.data.context", value=context)])
    MlflowClient().log_inputs(run_id, datasets=[entity])
