"""The MLflow runs of a project, re-created from what DVC keeps (``recipematch runs restore``).

MLflow's store is not a DVC output: moving a broken ``mlflow.db`` aside and running
``dvc repro`` reruns nothing, since no dep changed. The seed records
(``models/<arm>/seed_N.json`` of arms and replay mixes, ``artifacts/soups/<label>/seed_N.json``)
and the per-seed scores (``artifacts/eval/<arm>/per_seed.json``) hold everything a run showed
(its params and tags included) except the training-loss history and the tags of where and when
it ran (``git_rev``, ``resumed``, ``dvc_exp``), which would make a record differ between two
runs of the same inputs: this module writes them back, one run per (arm, seed), found by its run
key, so a rerun adds nothing twice.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipematch import tracking
from recipematch.errors import RecipematchError, short_repr
from recipematch.io import read_json
from recipematch.pipeline.graph import project_stages, stage_options
from recipematch.pipeline.inputs import mlflow_artifacts, mlflow_uri
from recipematch.rules import mix_label, soup_label
from recipematch.tracking import finite_value

log = logging.getLogger("recipematch")

_SEED_FILE = re.compile(r"^seed_(\d+)\.json$")


def trained_run(c, exp_id: str, arm: str, rec: Mapping[str, Any], where: str = "seed record") -> tuple[str, bool]:
    """The run of one trained seed (``rec``: its ``models/<arm>/seed_N.json``; ``arm`` the arm or
    a replay mix's label), re-created when the store lost it with the params and tags the
    training run logged (the record's ``run_params`` and ``run_tags``; a record written before
    they were kept gives its ``train.*`` config). Returns ``(run_id, restored)``.

    Raises:
        RecipematchError: ``run_params``/``run_tags`` not a mapping (naming ``where``), or
            :func:`recipematch.tracking.restore_run`'s errors.
    """
    seed, cell = str(rec.get("seed")), rec.get("cell", arm)
    params, tags = rec.get("run_params"), rec.get("run_tags") or {}
    if params is not None and not isinstance(params, Mapping) or not isinstance(tags, Mapping):
        raise RecipematchError(f"{where}: 'run_params' and 'run_tags' must be mappings; retrain it")
    own = {"arm", "cell", "seed", tracking.RUN_KEY_TAG, "restored_from_record", *tracking.RECORD_TAGS}
    bad = [k for k in tags if not isinstance(k, str) or not tracking.MLFLOW_NAME.match(k) or k in own
           or k.startswith("mlflow.")]
    if bad:
        raise RecipematchError(f"{where}: run_tags name {short_repr(bad[0], 80)} is not a tag a training run "
                               "writes (restore sets arm, cell, seed, the run key and the hashes itself; MLflow "
                               "names: letters, digits, _ - . / and spaces); retrain it")
    if params is None:
        params = {"arm": arm, "cell": cell, "seed": rec.get("seed"),
                  **{f"train.{k}": v for k, v in (rec.get("config") or {}).items()}}
    run_tags = {"arm": arm, "cell": cell, "seed": seed,
                **{k: tracking.param_value(v, tracking.MAX_TAG_CHARS) for k, v in tags.items()}}
    return tracking.restore_run(c, exp_id, rec, run_name=f"{arm}-{cell}-seed{seed}", tags=run_tags, where=where,
                                params=dict(params))


def score_metrics(res: Mapping[str, Mapping[str, Any]], now: int, where: str = "scores") -> list:
    """MLflow metrics of one seed's scores: ``<evaluation>.R_at_<k>`` at step 0.

    Raises:
        RecipematchError: ``res`` is not ``{evaluation: {"R@k": number}}`` or a score is not
            a finite number (naming ``where``, the evaluation and the key).
    """
    from mlflow.entities import Metric

    if not isinstance(res, Mapping) or not all(isinstance(r, Mapping) for r in res.values()):
        raise RecipematchError(f"{where}: expected {{evaluation: {{'R@k': score}}}}")
    return [Metric(f"{t}.{k.replace('@', '_at_')}", finite_value(v, f"{where}: {t} {k}"), now, 0)
            for t, r in res.items() for k, v in r.items() if str(k).startswith("R@")]


def _seed_records(folder) -> list[tuple[int, dict]]:
    out = []
    for f in sorted(folder.glob("seed_*.json")):
        m = _SEED_FILE.match(f.name)
        if m:
            out.append((int(m.group(1)), read_json(f)))
    return sorted(out)


def restore(p, root: Path) -> dict[str, int]:
    """Re-create every trained arm's, replay mix's and soup's runs (:func:`trained_run`, and
    soups by their run key) and log their scores from ``per_seed.json`` where the evaluate stage wrote one.
    The folders are the ones the project's ``dvc.yaml`` passes its ``train@``, ``soup@`` and
    ``evaluate@`` stages (:mod:`recipematch.pipeline.graph`).
    Scores are logged with ``changed="supersede"`` (:func:`recipematch.tracking.log_metrics_once`):
    nothing the store holds is appended again.

    Returns:
        counts ``{"runs", "restored", "scores_logged", "without_scores"}``.

    Raises:
        RecipematchError: a seed record without a run key (naming its file).
    """
    import time

    from recipematch.pipeline.soup import SOUP_RECORD_KEYS, soup_run  # lazy: import cycle with recipematch.pipeline.soup

    root = Path(root).resolve()
    groups, evals = [], {}  # (label, checkpoint folder, kind, its evaluation folder)
    for st in project_stages(root, p).values():
        main, opts = stage_options(st)
        if main.name == "train" and opts["arm"] in p.arms:
            groups.append((opts["arm"], root / opts["path_models"], "trained", None))
        elif main.name == "mix":  # a replay mix trains like an arm (Appendix E); its stage scores it too
            groups.append((mix_label(opts["arm"], opts["fraction"]), root / opts["path_models"], "trained",
                           root / opts["path_eval"]))
        elif main.name == "soup":
            groups.append((soup_label(opts["arm"], opts["alpha"]), root / opts["path_out"], "soup",
                           root / opts["path_eval"]))
        elif main.name == "evaluate":
            evals[opts["arm"]] = root / opts["path_eval"]
    uri = mlflow_uri(p.mlflow.tracking_uri, root)
    c, exp_id = tracking.open_store(uri, p.mlflow.experiment, artifact_location=mlflow_artifacts(root))
    out = {"runs": 0, "restored": 0, "scores_logged": 0, "without_scores": 0}
    now = int(time.time() * 1000)
    with tracking.store_lock(uri):
        for label, folder, kind, eval_dir in groups:
            eval_dir = eval_dir or evals.get(label)  # a trained arm's scores: its evaluate@ stage's folder
            per_seed_path = eval_dir / "per_seed.json" if eval_dir is not None else None
            per_seed = read_json(per_seed_path) if per_seed_path is not None and per_seed_path.is_file() else {}
            for seed, rec in _seed_records(folder) if folder.is_dir() else []:
                where = folder / f"seed_{seed}.json"
                if not isinstance(rec, Mapping) or not rec.get("run_key"):
                    raise RecipematchError(f"{where}: no 'run_key'; rerun its stage")
                res = per_seed.get(str(seed)) if isinstance(per_seed, Mapping) else None
                # scores checked before any run is written: a bad file leaves the store as it was
                metrics = None if res is None else score_metrics(res, now, f"{per_seed_path} seed {seed}")
                if kind == "trained":
                    run_id, restored = trained_run(c, exp_id, label, rec, where=str(where))
                else:
                    missing = [k for k in SOUP_RECORD_KEYS if k not in rec]
                    if missing:
                        raise RecipematchError(f"{where}: lacks {missing}; rerun its soup stage")
                    run_id, restored = soup_run(c, exp_id, rec)
                out["runs"] += 1
                out["restored"] += int(restored)
                if metrics is None:
                    out["without_scores"] += 1
                    continue
                counts = tracking.log_metrics_once(c, run_id, metrics, changed="supersede")
                out["scores_logged"] += counts["logged"]
                c.set_terminated(run_id, status="FINISHED")
    log.info("runs restore: %d runs (%d re-created), %d scores logged, %d runs without scores yet",
             out["runs"], out["restored"], out["scores_logged"], out["without_scores"])
    return out
