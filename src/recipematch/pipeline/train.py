"""Stage ``train@<arm>``: train every seed of one arm, one MLflow run per (arm, seed); resumable
per seed (paper Section 3, Table 2, Eq. 1)."""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path

from recipematch.config import EngineConfig
from recipematch import engine as engine_mod, tracking
from recipematch.errors import RecipematchError
from recipematch.io import (
    canonical_json,
    read_json,
    sha256_file,
    sha256_text,
    sha256_tree,
    write_json,
)
from recipematch.pairs import read_pair_file
from recipematch.pipeline.door import StagePaths, arm_option, check_device, progress_option, stage
from recipematch.pipeline.inputs import (
    arm_spec_from_file,
    git_rev,
    mlflow_artifacts,
    mlflow_uri,
    run_tags,
    train_seeds,
)
from recipematch.pipeline.models import contamination_gate, resolve_model
from recipematch.pipeline.runs import trained_run
from recipematch.training import train_one, TrainSettings

log = logging.getLogger("recipematch")

PARAMS = ("train", "mlflow", "gates")
#: Sections that choose where the seeds train, not what they compute (no DVC params).
RUNTIME = ("engine",)


def train_unit(unit: dict, _shared=None) -> dict:
    """One (arm, seed) unit, run by the engine (in process or in a Ray worker): train the
    seed's gated rows and save the checkpoint to ``unit["out_dir"]``; returns
    :func:`recipematch.training.train_one`'s record. Writes nothing else but its work folder.

    Raises:
        RecipematchError: the unit's device does not exist where it runs.
    """
    check_device("devices.train", unit["cfg"].device)
    return train_one(unit["rows"], base_model=unit["base_model"], out_dir=Path(unit["out_dir"]), seed=unit["seed"],
                     cfg=unit["cfg"], progress=unit["progress"], work_dir=Path(unit["work_dir"]))


def run(p, lay: StagePaths, arm: str, *, progress: bool = True, engine=None, label: str | None = None,
        replay_cfg=None) -> dict:
    """Stage 7: train every seed of one arm (one MLflow run per seed), the seeds as units of
    ``engine`` (an :class:`~recipematch.config.EngineConfig`; ``None``: one after another
    in this process).

    ``label`` (default: ``arm``) names the model folder ``models/<label>/``, the metrics file
    and the MLflow runs; ``replay_cfg`` (a :class:`~recipematch.config.ReplayConfig`) replaces
    ``train.replay``. The mix stage passes both to retrain an arm's cells with replay rows
    (Appendix E, Table 19)."""
    import pandas as pd

    import recipematch.training as training_mod

    train_stage_mod = sys.modules[__name__]
    eng = engine if engine is not None else EngineConfig()
    engine_mod.preflight(eng)  # an unreachable engine.address fails before any work

    spec = arm_spec_from_file(lay, arm)  # an arm without a spec is named before any work
    tcfg = p.train
    label = label or arm
    rcfg = replay_cfg if replay_cfg is not None else tcfg.replay
    rkey = "remedies.replay_file" if replay_cfg is not None else "train.replay.file"
    mcfg = p.mlflow
    engine_mod.check_unit_device(eng, "devices.train", p.devices.train)
    if eng.kind == "local":  # a Ray unit checks its device where it runs
        check_device("devices.train", p.devices.train)
    check_device("devices.cosine_gate", p.devices.cosine_gate)
    gate, ex_path = contamination_gate(p, lay)
    ex = gate.exclusion
    validated = read_json(lay.validated)
    base = resolve_model(tcfg.model)
    settings = TrainSettings.pick(tcfg, device=p.devices.train)
    train_settings = {"model": tcfg.model, **settings.identity()}  # variants join only when on
    replay = None  # general pairs mixed into each training file (Appendix E); off at fraction 0
    if rcfg.fraction > 0:
        replay = training_mod.ReplayPool.load(lay.root / rcfg.file, gate, key=rkey)
        train_settings["replay"] = {"file_sha256": replay.sha256, "fraction": rcfg.fraction}
    uri = mlflow_uri(mcfg.tracking_uri, lay.root)
    c, exp_id = tracking.open_store(uri, mcfg.experiment, artifact_location=mlflow_artifacts(lay.root))
    # every write to the store holds its lock: parallel stages (`dvc queue start -j 2`) never
    # write one SQLite file at the same time, and find-or-create of a run key is atomic
    writing = functools.partial(tracking.store_lock, uri)
    out_root = lay.models
    out_root.mkdir(parents=True, exist_ok=True)
    for stale in out_root.glob("rm-train-*"):  # left by an older version killed mid-training
        import shutil

        shutil.rmtree(stale, ignore_errors=True)
    summary = {}
    todo: list[dict] = []  # seeds to train: their runs are opened here, their units run below
    # the code that trains is part of a run's identity: an edit retrains, an interruption resumes
    code_sha = sha256_text("".join(sha256_file(Path(m.__file__)) for m in (training_mod, train_stage_mod)))
    for s in train_seeds(tcfg.seed, tcfg.n_seeds):
        pair_path = lay.cells / f"seed_{s}.jsonl"
        pair_sha = sha256_file(pair_path)
        v = validated.get(str(s))
        if v is None or v["file_sha256"] != pair_sha:
            raise RecipematchError(f"train[{arm}] seed {s}: {pair_path} has not passed validation (hash differs); "
                                   f"run the validate stage")
        gate_sha = sha256_file(ex_path)
        run_key = sha256_text(canonical_json({"arm": arm, **({"label": label} if label != arm else {}), "seed": s, "pairs": pair_sha, "gate": gate_sha,
                                              "train": train_settings, "code": code_sha}))
        ckpt = out_root / f"seed_{s}"
        rec_path = out_root / f"seed_{s}.json"
        if rec_path.exists() and ckpt.exists():
            rec = read_json(rec_path)
            if rec.get("run_key") == run_key and rec.get("checkpoint_sha256") == sha256_tree(ckpt):
                log.info("train[%s] seed %d: finished earlier (run key %s), skipped", label, s, run_key[:12])
                # a lost tracking store gets the run back from the record; the record is not rewritten
                with writing():
                    trained_run(c, exp_id, label, {"seed": s, "cell": spec.name, **rec})
                summary[str(s)] = _summary(rec)
                continue
        rows = read_pair_file(pair_path)
        rows, gate_counts, _ = gate.apply(rows)
        if replay is not None:
            rows, _n_replay = training_mod.mix_replay(rows, replay.rows, fraction=rcfg.fraction, seed=s,
                                                      source=rcfg.file)
        gate_again = {"rows_dropped": sum(v for k, v in gate_counts.items() if k.startswith("rows_dropped.")),
                      "negatives_dropped": sum(v for k, v in gate_counts.items() if k.startswith("negatives_dropped."))}
        # what the run shows, kept in the seed record too so that `runs restore` re-creates it whole
        # (git_rev, resumed and the DVC experiment name stay out: a record is the same for the same inputs)
        run_params = {"arm": label, "cell": spec.name, "positives": spec.positives, "negatives": spec.negatives,
                      "negatives_volume": spec.volume, "seed": s, "budget_rows": len(rows), "train.model": tcfg.model,
                      **{f"train.{k}": v for k, v in settings.mlflow_params().items()},
                      "train.replay.file": rcfg.file, "train.replay.fraction": rcfg.fraction}
        tags = run_tags(p.declared())
        run_tags_kept = {"gate_version": ex.version, "params_sha256": tags["params_sha256"],
                         "checkpoint_path": ckpt.relative_to(lay.root).as_posix(),
                         **({"mix_of": arm} if label != arm else {})}
        with writing():
            run_id, resumed = tracking.find_or_create_run(c, exp_id, run_key, f"{label}-{spec.name}-seed{s}",
                                                         {"arm": label, "cell": spec.name, "seed": str(s),
                                                          **({"mix_of": arm} if label != arm else {})})
            tracking.log_params_safe(c, run_id, run_params)
            c.set_tag(run_id, "pair_file_sha256", pair_sha)
            c.set_tag(run_id, "gate_list_sha256", gate_sha)
            c.set_tag(run_id, "git_rev", git_rev(lay.root))
            c.set_tag(run_id, "resumed", str(resumed).lower())
            for k, v in {**tags, **run_tags_kept}.items():
                c.set_tag(run_id, k, v)
            tracking.log_dataset(run_id, pd.DataFrame({"source_id": [r["source_id"] for r in rows], "split": [r["split"] for r in rows]}),
                                 source=str(pair_path.relative_to(lay.root)), name=f"cell-{arm}-seed{s}", digest=pair_sha, context="training")
        todo.append({"seed": s, "run_id": run_id, "rows": rows, "ckpt": ckpt, "rec_path": rec_path,
                     "run_key": run_key, "pair_sha": pair_sha, "gate_sha": gate_sha, "gate_again": gate_again,
                     "run_params": run_params, "run_tags": run_tags_kept})

    def record(i: int, result: dict) -> None:
        """The driver records a seed as soon as its unit returns (the only MLflow writer)."""
        import time as _time

        from mlflow.entities import Metric

        j = todo[i]
        s, run_id, ckpt = j["seed"], j["run_id"], j["ckpt"]
        if not ckpt.is_dir():
            raise engine_mod.EngineError(
                f"train[{label}] seed {s}: the unit finished but its checkpoint {ckpt} is not visible here; "
                f"with engine.address every node must see the project folder at the same path (a shared filesystem)")
        ckpt_sha = sha256_tree(ckpt)
        with writing():
            c.set_tag(run_id, "checkpoint_sha256", ckpt_sha)
            now = int(_time.time() * 1000)
            metrics = [Metric("dev_accuracy_before", result["dev_accuracy_before"], now, 0),
                       Metric("dev_accuracy_best", result["dev_accuracy_best"], now, 0),
                       Metric("train_loss", result["train_loss"], now, 0),
                       Metric("relative_weight_change", result["relative_weight_change"], now, 0),
                       Metric("train_examples", result["train_examples"], now, 0),
                       Metric("gate_again_rows_dropped", j["gate_again"]["rows_dropped"], now, 0),
                       Metric("replay_rows", result.get("replay_rows", 0), now, 0)]
            for name, rep in result["sampler"].items():
                metrics += [Metric(f"sampler.{name}.examples_dropped", rep["examples_dropped"], now, 0),
                            Metric(f"sampler.{name}.batches_yielded", rep["batches_yielded"], now, 0)]
            for h in result["history"]:
                for k, val in h.items():
                    if k in ("loss", "eval_dev_cosine_accuracy"):
                        metrics.append(Metric(k, val, now, h["step"]))
            tracking.log_metrics_once(c, run_id, metrics)  # a retrain under the same run key appends nothing
            c.set_terminated(run_id, status="FINISHED")
        # no MLflow run id in the record (DVC hashes it): the run is found by its run key
        rec = {**{k: v for k, v in result.items() if k != "history"}, "run_key": j["run_key"], "cell": spec.name,
               "checkpoint_sha256": ckpt_sha, "pair_file_sha256": j["pair_sha"], "gate_list_sha256": j["gate_sha"],
               "gate_again": j["gate_again"], "run_params": j["run_params"], "run_tags": j["run_tags"]}
        write_json(j["rec_path"], rec)
        summary[str(s)] = _summary(rec)

    # work folders live outside the DVC output, one per (arm, seed): train_one clears what a killed run left there
    units = [{"rows": j["rows"], "base_model": base, "out_dir": str(j["ckpt"]), "seed": j["seed"], "cfg": settings,
              "progress": progress, "work_dir": str(lay.scratch / f"seed_{j['seed']}")}
             for j in todo]
    try:
        engine_mod.map_units(train_unit, units, eng, labels=[f"train[{label}] seed {j['seed']}" for j in todo],
                             on_done=record)
    except BaseException:
        with writing():
            for j in todo:
                if str(j["seed"]) not in summary:
                    c.set_terminated(j["run_id"], status="FAILED")
        raise
    summary = {str(s): summary[str(s)] for s in train_seeds(tcfg.seed, tcfg.n_seeds)}
    write_json(lay.train_metrics, summary)
    return summary


def _summary(rec: dict) -> dict:
    """The committed per-seed training metrics. Floats are rounded to 4 places: the loss
    differs in the 7th digit between runs with byte-identical weights (summation order),
    and committed files hold only what reproduces."""
    return {"dev_accuracy_best": round(float(rec["dev_accuracy_best"]), 4), "steps": rec["steps"],
            "train_examples": rec["train_examples"], "train_loss": round(float(rec["train_loss"]), 4)}


main = stage("train", PARAMS, arm_option, progress_option, runtime=RUNTIME,
             reads=("spec", "cells", "validated", "evalsets", "gates", "cache"), writes=("models", "train_metrics", "scratch"))(run)
