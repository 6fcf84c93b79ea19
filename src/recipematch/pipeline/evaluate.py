"""Stages ``evaluate@<arm>`` (and, through :mod:`.evaluate_base` / :mod:`.evaluate_bm25`, the
untrained base model and the BM25 baseline): score every model on every evaluation declared
in ``params.yaml`` ``evaluations``, each under its rule, the query's own corpus entry masked
under the set's declared ``self_mask`` rule (paper Section 3, Appendix A; one console line per
set says how many entries were masked and how many id matches were not).

Writes, per evaluation, the per-query ranks (``artifacts/eval/<arm>/<evaluation>.parquet``:
arm, seed, query_id, rank, hit@k, and ``cluster`` / ``slice_*`` columns where the set has
them) and mean ± sd over seeds to ``metrics/eval/<arm>.json`` (slices included). A model
encodes the shared corpus once: its encoder is memoised across the evaluations and backed by
the embedding cache.
"""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace
from collections.abc import Mapping, Sequence
from typing import Any

from recipematch.config import EngineConfig
from recipematch.benchmarks_data import load_set
from recipematch import engine as engine_mod, tracking
from recipematch.errors import RecipematchError
from recipematch.external.meld import load_distractors, separation
from recipematch.io import read_json, write_json
from recipematch.metrics import metric_key, recall_key
from recipematch.pipeline.door import StagePaths, arm_option, check_device, progress_option, stage
from recipematch.pipeline.inputs import mlflow_artifacts, mlflow_uri, train_seeds
from recipematch.pipeline.models import encoder
from recipematch.pipeline.runs import score_metrics, trained_run
from recipematch.stats import mean_sd

log = logging.getLogger("recipematch")

PARAMS = ("train.seed", "train.n_seeds", "train.query_instruction", "evaluate", "evaluations", "mlflow")
#: the evaluation folders it reads (dvc.yaml lists them: recipematch.pipeline.deps): every declared set
EVAL_DEPS = "all"
#: Sections that choose where the seeds are scored, not what they compute (no DVC params).
RUNTIME = ("engine",)


def load_evaluations(p, lay: StagePaths) -> dict:
    """Every declared evaluation, loaded and checked before any model is loaded.

    Raises:
        RecipematchError: a missing folder or any check of the set's rule, naming the set.
    """
    out = {}
    for name, ev in sorted(p.evaluations.items()):
        folder = lay.root / ev.folder
        if not folder.is_dir():
            raise RecipematchError(f"evaluations.{name}.folder: {folder} does not exist "
                                   f"(run the stage that writes it, or `dvc pull` it)")
        out[name] = load_set(folder, ev.rule, name=name, self_mask=ev.self_mask)
    return out


def load_graded(p, lay: StagePaths, sets: Mapping[str, Any]) -> dict:
    """The graded measures of each declared evaluation that names some (Section 6; ``measures``,
    ``gain``, ``grade_scale``, ``depth``), checked against its folder before any model: the
    qrels' grades (file, line, field), the measure names, the excluded-ids file, the depth. A
    folder with MELD's ``distractors.jsonl`` carries them in the spec (its separation AUC).

    Returns:
        ``{name: recipematch.graded.GradedSpec}`` for those sets only.

    Raises:
        RecipematchError: naming the evaluation and what is wrong.
    """
    from dataclasses import replace

    from recipematch.graded import check_declared_measures, prepare  # lazy: recipematch.graded pulls in pandas

    check_declared_measures(p)
    out = {}
    for name, ev in sorted(p.evaluations.items()):
        if ev.measures:
            spec = prepare(lay.root / ev.folder, ev.measures, n_docs=len(sets[name].corpus), gain=ev.gain,
                           scale=tuple(ev.grade_scale) or None, depth=ev.depth,
                           where=f"evaluations.{name}.measures:")
            dis = load_distractors(lay.root / ev.folder)
            out[name] = replace(spec, distractors=tuple(dis)) if dis else spec
    return out


def score_models(models: Sequence[tuple[str, Any, dict | None]], sets: Mapping[str, Any], *, arm: str, ks,
                 lay: StagePaths, bm25: tuple[float, float] | None = None, graded: Mapping[str, Any] | None = None):
    """Score each ``(seed_label, model, record)`` on each set; a set in ``graded``
    (:func:`load_graded`) also gets its graded measures from the library, per query.

    Returns:
        ``(frames, per_model)``: per set a list of per-query frames (a graded set's frame adds
        one ``measure:<library name>`` column per measure, fractions 0-1); per seed label, per
        set ``{"R@k": .., "n_queries": .., "slices": {...}}`` (percent), and for a graded set
        ``"measures": {library name: mean (fraction)}`` with its settings (``"graded"``), and
        for an encoder on a set with MELD's distractors ``"separation"``
        (:func:`recipematch.external.meld.separation`; BM25 has no cosine: none).
    """
    from recipematch.retrieval.selfmask import describe_counts  # lazy: recipematch.retrieval.selfmask pulls in pandas, torch
    from recipematch.scoring import BM25, score  # lazy: recipematch.scoring pulls in pandas, torch

    frames: dict[str, list] = {n: [] for n in sets}
    per_model: dict[str, dict] = {}
    told: set[str] = set()
    for seed_label, model, _rec in models:
        res = {}
        for name, bset in sets.items():  # each set under its declared self-masking rule
            if model == BM25:
                summary, per_query = score(bset, BM25, ks=ks, bm25_k1=bm25[0], bm25_b=bm25[1])
            else:
                summary, per_query = score(bset, model, ks=ks, cache_dir=lay.cache)
            if name not in told:  # the same for every model: said once per set
                told.add(name)
                log.info(describe_counts(name, summary["self_mask_rule"], summary["n_queries_self_masked"],
                                         summary["n_queries_id_match_not_masked"]))
            r = {recall_key(k): float(summary[recall_key(k)]) for k in ks}
            if graded and name in graded:
                from recipematch.graded import score_graded  # lazy: recipematch.graded pulls in pandas

                spec = graded[name]
                kw = {"bm25_k1": bm25[0], "bm25_b": bm25[1]} if model == BM25 else {"cache_dir": lay.cache}
                values, table, run = score_graded(bset, model, spec, **kw)
                per_query = per_query.merge(table, on="query_id", how="left", validate="one_to_one")
                r["measures"] = {m: float(v) for m, v in values.items()}
                r["graded"] = spec.describe(run)
                if spec.distractors and model != BM25:
                    r["separation"] = separation(bset, model, spec.distractors, cache_dir=lay.cache)
            frames[name].append(per_query.assign(arm=arm, seed=seed_label))
            r["n_queries"] = int(summary["n_queries"])
            r["self_mask"] = summary["self_mask_rule"]
            r["n_self_masked"] = int(summary["n_queries_self_masked"])
            r["n_id_match_not_masked"] = int(summary["n_queries_id_match_not_masked"])
            if summary.get("slices"):
                r["slices"] = {s: {kk: (None if isinstance(v, float) and math.isnan(v) else v)
                                   for kk, v in d.items()} for s, d in summary["slices"].items()}
            res[name] = r
        per_model[seed_label] = res
    return frames, per_model


def write_results(lay: StagePaths, arm: str, frames, per_model, *, ks) -> dict:
    """Per-query parquet per set, per-seed JSON, and mean ± sd metrics for ``arm``."""
    import pandas as pd

    import shutil

    out = lay.eval
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, fs in frames.items():  # written aside, then swapped in whole: a failure leaves no mixed folder
        pd.concat(fs, ignore_index=True).to_parquet(tmp / f"{name}.parquet", index=False)
    agg: dict[str, Any] = {}
    seeds = list(per_model)
    for name in frames:
        for k in ks:
            m, sd = mean_sd([per_model[s][name][recall_key(k)] for s in seeds])
            agg[f"{metric_key(name, k)}.mean"] = round(float(m), 4)
            agg[f"{metric_key(name, k)}.sd"] = round(float(sd), 4) if sd == sd else None
        agg[f"{name}.n_queries"] = per_model[seeds[0]][name]["n_queries"]
        for sl, d in (per_model[seeds[0]][name].get("slices") or {}).items():
            vals = [per_model[s][name]["slices"][sl]["R@1"] for s in seeds]
            vals = [v for v in vals if v is not None]
            agg[f"{name}.slice.{sl}.n"] = d["n"]
            agg[f"{name}.slice.{sl}.R@1.mean"] = round(float(sum(vals) / len(vals)), 4) if vals else None
        for m in per_model[seeds[0]][name].get("measures") or {}:  # the library's measures, x 100 like R@k
            mv, sd = mean_sd([100.0 * per_model[s][name]["measures"][m] for s in seeds])
            agg[f"{name}.measure.{m}.mean"] = round(float(mv), 4)
            agg[f"{name}.measure.{m}.sd"] = round(float(sd), 4) if sd == sd else None
        for m in ("auc_all", "auc_same_framing"):  # MELD's separation AUC (0-1), where it was computed
            vals = [(per_model[s][name].get("separation") or {}).get(m) for s in seeds]
            if all(v is not None for v in vals) and vals:
                mv, sd = mean_sd(vals)
                agg[f"{name}.separation.{m}.mean"] = round(float(mv), 4)
                agg[f"{name}.separation.{m}.sd"] = round(float(sd), 4) if sd == sd else None
    agg["seeds"] = len(seeds)
    write_json(tmp / "per_seed.json", per_model)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    write_json(lay.eval_metrics, agg)
    return agg


def encoder_for(path: str, p, query_prompt: str = ""):
    """The encoder of ``path`` under ``evaluate``, on ``devices.evaluate``; ``query_prompt`` prefixes queries (a trained
    arm's ``train.query_instruction``, Appendix E)."""
    e = p.evaluate
    return encoder(path, max_seq_length=e.max_seq_length, batch_size=e.batch_size, device=p.devices.evaluate, dtype=e.dtype,
                   query_prompt=query_prompt)


def score_unit(unit: Mapping[str, Any], shared: Mapping[str, Any]):
    """One (arm, seed) unit, run by the engine (in process or in a Ray worker): encode with
    the seed's checkpoint and score it on every set of ``shared["sets"]``; returns
    :func:`score_models`' ``(frames, per_model)`` for that one seed. Writes only the
    embedding cache (atomic, one entry per model and texts).

    Raises:
        RecipematchError: the unit's device does not exist where it runs.
    """
    check_device("devices.evaluate", shared["params"].devices.evaluate)
    model = encoder_for(unit["model"], shared["params"], shared.get("query_prompt", ""))  # the settings every stage uses
    return score_models([(unit["seed"], model, None)], shared["sets"], arm=shared["arm"], ks=shared["ks"],
                        lay=shared["lay"], graded=shared.get("graded"))


def run(p, lay: StagePaths, arm: str, *, progress: bool = True, engine=None) -> dict:
    """Stage 8: score every seed of one trained arm on every declared evaluation, the seeds
    as units of ``engine`` (an :class:`~recipematch.config.EngineConfig`; ``None``: one
    after another in this process)."""
    eng = engine if engine is not None else EngineConfig()
    engine_mod.preflight(eng)  # an unreachable engine.address fails before any work
    ecfg = p.evaluate
    engine_mod.check_unit_device(eng, "devices.evaluate", p.devices.evaluate)
    if eng.kind == "local":  # a Ray unit checks its device where it runs
        check_device("devices.evaluate", p.devices.evaluate)
    if not lay.models.is_dir():
        raise RecipematchError(f"--arm {arm!r}: {lay.models} does not exist (train it first)")
    sets = load_evaluations(p, lay)
    graded = load_graded(p, lay, sets)
    seeds, records = [], []
    for s in train_seeds(p.train.seed, p.train.n_seeds):
        rec_path = lay.models / f"seed_{s}.json"
        if not rec_path.exists():
            raise RecipematchError(f"{rec_path} does not exist: train@{arm} has not trained seed {s}")
        seeds.append(str(s))
        records.append(read_json(rec_path))
    units = [{"seed": s, "model": str(lay.models / f"seed_{s}")} for s in seeds]
    # the evaluate and devices sections are frozen dataclasses: they travel to a worker as it is
    shared = {"sets": sets, "graded": graded, "arm": arm, "ks": ecfg.ks, "lay": lay,
              "params": SimpleNamespace(evaluate=ecfg, devices=p.devices),
              "query_prompt": p.train.query_instruction}

    def record(i: int, out) -> None:  # the driver is the only MLflow writer
        _log_eval_to_mlflow(p.mlflow, lay, records[i], arm, seeds[i], out[1][seeds[i]])

    outs = engine_mod.map_units(score_unit, units, eng, shared=shared, labels=[f"evaluate[{arm}] seed {s}" for s in seeds],
                                on_done=record)
    frames = {name: [f for fs, _ in outs for f in fs[name]] for name in sets}  # in seed order, whatever finished first
    per_model = {s: out[1][s] for s, out in zip(seeds, outs)}
    return write_results(lay, arm, frames, per_model, ks=ecfg.ks)


def _log_eval_to_mlflow(mcfg, lay: StagePaths, rec: Mapping[str, Any], arm: str, seed: str,
                        res: Mapping[str, Mapping[str, Any]]) -> None:
    """Mirror the scores to the seed's MLflow run, found by the record's run key (re-created
    from the record when the tracking store lost it; the record itself is never rewritten). A
    score equal to the stored one is not appended again; one that changed (an edited
    evaluation scored with the same checkpoint) is logged at the next step and tagged
    ``metric_changed.<key>`` (:func:`recipematch.tracking.log_metrics_once`)."""
    import time as _time

    c, exp_id = tracking.open_store(mlflow_uri(mcfg.tracking_uri, lay.root), mcfg.experiment,
                                    artifact_location=mlflow_artifacts(lay.root))
    with tracking.store_lock(mlflow_uri(mcfg.tracking_uri, lay.root)):  # one writer at a time (parallel stages)
        run_id, _ = trained_run(c, exp_id, arm, {"seed": seed, **rec})
        tracking.log_metrics_once(c, run_id, score_metrics(res, int(_time.time() * 1000)), changed="supersede")
        c.set_tag(run_id, "self_mask", ",".join(sorted(f"{t}={r['self_mask']}" for t, r in res.items())))


main = stage("evaluate", PARAMS, arm_option, progress_option, runtime=RUNTIME,
             reads=("cache", "models"), writes=("eval", "eval_metrics"))(run)
