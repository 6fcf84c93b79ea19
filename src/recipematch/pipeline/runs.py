"""The MLflow run of one trained seed and the metrics of one seed's scores, shared by the
training, evaluate and soup stages: :func:`trained_run` finds (or re-creates from its seed
record) the run of an arm's, replay mix's or label's seed; :func:`score_metrics` turns one
seed's ``{evaluation: {"R@k": score}}`` into MLflow metrics, checked before anything is written.
``recipematch runs restore`` (:mod:`recipematch.pipeline.restore`) uses both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recipematch import tracking
from recipematch.errors import RecipematchError, short_repr
from recipematch.tracking import finite_value


def trained_run_args(arm: str, rec: Mapping[str, Any], where: str = "seed record") -> dict[str, Any]:
    """The run name, tags and params :func:`trained_run` gives a re-created run of one trained
    seed, every one checked with no store open (``restore`` checks all records first).

    Raises:
        RecipematchError: naming ``where``: a ``cell`` that is not a name,
            ``run_params``/``run_tags``/``config`` not a mapping, a tag a training run does not write, or what
            :func:`recipematch.tracking.check_record` refuses.
    """
    seed, cell = str(rec.get("seed")), rec.get("cell", arm)
    if not isinstance(cell, str) or not 0 < len(cell) <= 250:
        raise RecipematchError(f"{where}: 'cell' {short_repr(cell, 60)} is not a cell name (text, 1 to 250 "
                               "characters); retrain it")
    params, tags, config = rec.get("run_params"), rec.get("run_tags") or {}, rec.get("config") or {}
    if params is not None and not isinstance(params, Mapping) or not isinstance(tags, Mapping) \
            or not isinstance(config, Mapping):
        raise RecipematchError(f"{where}: 'run_params', 'run_tags' and 'config' must be mappings; retrain it")
    own = {"arm", "cell", "seed", tracking.RUN_KEY_TAG, "restored_from_record", *tracking.RECORD_TAGS}
    bad = [k for k in tags if not tracking.storable_name(k) or k in own or k.startswith("mlflow.")]
    if bad:
        raise RecipematchError(f"{where}: run_tags name {short_repr(bad[0], 80)} is not a tag a training run "
                               "writes (restore sets arm, cell, seed, the run key and the hashes itself; MLflow "
                               "names: letters, digits, _ - . / and spaces); retrain it")
    if params is None:
        params = {"arm": arm, "cell": cell, "seed": rec.get("seed"), **{f"train.{k}": v for k, v in config.items()}}
    tracking.check_record(rec, params, where)
    run_tags = {"arm": arm, "cell": cell, "seed": seed,
                **{k: tracking.param_value(v, tracking.MAX_TAG_CHARS) for k, v in tags.items()}}
    return {"run_name": f"{arm}-{cell}-seed{seed}", "tags": run_tags, "params": dict(params)}


def trained_run(c, exp_id: str, arm: str, rec: Mapping[str, Any], where: str = "seed record") -> tuple[str, bool]:
    """The run of one trained seed (``rec``: its ``models/<arm>/seed_N.json``; ``arm`` the arm or
    a replay mix's label), re-created when the store lost it with the params and tags the
    training run logged (the record's ``run_params`` and ``run_tags``; a record written before
    they were kept gives its ``train.*`` config). Returns ``(run_id, restored)``.

    Raises:
        RecipematchError: what :func:`trained_run_args` refuses (checked before anything is
            written), or :func:`recipematch.tracking.restore_run`'s errors.
    """
    return tracking.restore_run(c, exp_id, rec, where=where, **trained_run_args(arm, rec, where))


def score_metrics(res: Mapping[str, Mapping[str, Any]], now: int, where: str = "scores") -> list:
    """MLflow metrics of one seed's scores: ``<evaluation>.R_at_<k>`` at step 0.

    Raises:
        RecipematchError: ``res`` is not ``{evaluation: {"R@k": number}}`` (or holds no
            R@k score at all), a score is not
            a finite number, a metric name is one MLflow cannot store (letters, digits,
            ``_ - . /`` and spaces), or two keys give one name (``R@x@y``, ``R@x_at_y``), each
            naming ``where``, the evaluation and the key.
    """
    from mlflow.entities import Metric  # lazy: mlflow is heavy and only a run writes metrics

    if not isinstance(res, Mapping) or not all(isinstance(r, Mapping) for r in res.values()):
        raise RecipematchError(f"{where}: expected {{evaluation: {{'R@k': score}}}}")
    out = []
    for t, r in res.items():
        for k, v in r.items():
            if not str(k).startswith("R@"):
                continue
            name = f"{t}.{str(k).replace('@', '_at_')}"
            if not tracking.storable_name(name):
                raise RecipematchError(f"{where}: {t!r} {k!r} gives the metric name {short_repr(name, 80)}, which "
                                       "MLflow cannot store (letters, digits, _ - . / and spaces; at most 250)")
            if any(m.key == name for m in out):
                raise RecipematchError(f"{where}: two scores of {t!r} give the metric name {short_repr(name, 80)} "
                                       f"('@' is written '_at_'); rerun its evaluate stage")
            out.append(Metric(name, finite_value(v, f"{where}: {t} {k}"), now, 0))
    if not out:
        raise RecipematchError(f"{where}: no R@k score in {short_repr(res, 80)}; rerun its evaluate stage")
    return out
