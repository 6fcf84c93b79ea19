"""Stage 8: evaluation of every seed of an arm (or the base)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from recipematch.config import EvaluateConfig, MlflowConfig, TrainConfig, section
from recipematch.io import read_json, write_json
from recipematch.pipeline.common import Layout, mlflow_uri, resolve_model, train_seeds

log = logging.getLogger("recipematch")

#: The evaluations every model is scored on (BEIR folders under artifacts/evalsets).
TESTS = ("llm_tier", "probe", "probe_only")


def run_evaluate(params: Mapping[str, Any], lay: Layout, arm: str, *, progress: bool = True) -> dict:
    """Score every seed of ``arm`` (or the untrained ``base``) on :data:`TESTS`.

    Writes per-query ranks (``artifacts/eval/<arm>/ranks.parquet``: arm, seed, test,
    query_id, rank, hit@k) and mean ± sd per test to ``metrics/eval/<arm>.json``; mirrors the
    numbers to each (arm, seed) MLflow run. Self-masking is on (SPEC §7).
    """
    import pandas as pd

    from recipematch.beir import load_beir
    from recipematch.retrieval import (
        MemoisedEncoder,
        SentenceTransformerEncoder,
        evaluate,
    )
    from recipematch.stats import mean_sd

    ecfg = section(params, "evaluate", EvaluateConfig)
    tcfg = section(params, "train", TrainConfig)
    mcfg = section(params, "mlflow", MlflowConfig)
    if arm == "base":
        models = [("base", resolve_model(tcfg.model), None)]
    else:
        models = []
        for s in train_seeds(params):
            rec = read_json(lay.models(arm) / f"seed_{s}.json")
            models.append((str(s), str(lay.models(arm) / f"seed_{s}"), rec))
    data = {t: load_beir(lay.evalsets / t) for t in TESTS}
    frames, per_model = [], {}
    for seed_label, path, rec in models:
        enc = MemoisedEncoder(SentenceTransformerEncoder(path, max_seq_length=ecfg.max_seq_length,
                                                         batch_size=ecfg.batch_size, device=ecfg.device))
        res = {}
        for t in TESTS:
            corpus, queries, qrels = data[t]
            summary, per_query = evaluate(enc, corpus, queries, qrels, ks=ecfg.ks, self_mask=True,
                                          cache_dir=lay.cache)
            per_query = per_query.assign(arm=arm, seed=seed_label, test=t)
            frames.append(per_query)
            res[t] = {f"R@{k}": float(summary[f"R@{k}"]) for k in ecfg.ks} | {"n_queries": int(summary["n_queries"]),
                                                                              "self_mask": bool(summary["self_mask"])}
        per_model[seed_label] = res
        if rec is not None:
            _log_eval_to_mlflow(mcfg, lay, rec, arm, seed_label, res)
    ranks = pd.concat(frames, ignore_index=True)
    out = lay.eval_dir(arm)
    out.mkdir(parents=True, exist_ok=True)
    ranks.to_parquet(out / "ranks.parquet", index=False)
    agg = {}
    for t in TESTS:
        for k in ecfg.ks:
            vals = [per_model[s][t][f"R@{k}"] for s in per_model]
            m, sd = mean_sd(vals)
            agg[f"{t}.R@{k}.mean"] = round(float(m), 4)
            agg[f"{t}.R@{k}.sd"] = round(float(sd), 4) if sd == sd else None
        agg[f"{t}.n_queries"] = per_model[next(iter(per_model))][t]["n_queries"]
    agg["seeds"] = len(per_model)
    write_json(lay.metrics / "eval" / f"{arm}.json", agg)
    write_json(out / "per_seed.json", per_model)
    return agg


def _log_eval_to_mlflow(mcfg: MlflowConfig, lay: Layout, rec: Mapping[str, Any], arm: str, seed: str,
                        res: Mapping[str, Mapping[str, Any]]) -> None:
    """Mirror the scores to the seed's MLflow run, found by the record's run key (re-created
    from the record when the tracking store lost it; the record itself is never rewritten)."""
    import time as _time

    from mlflow.entities import Metric

    from recipematch import tracking

    c, exp_id = tracking.open_store(mlflow_uri(mcfg, lay), mcfg.experiment,
                                    artifact_location=(lay.root / "mlruns").resolve().as_uri())
    tags = {"arm": arm, "seed": seed, **({"cell": rec["cell"]} if "cell" in rec else {})}
    run_id, _ = tracking.restore_run(c, exp_id, rec, run_name=f"{arm}-seed{seed}", tags=tags)
    now = int(_time.time() * 1000)
    metrics = [Metric(f"{t}.{k.replace('@', '_at_')}", float(v), now, 0)
               for t, r in res.items() for k, v in r.items() if k.startswith("R@")]
    c.log_batch(run_id, metrics=metrics)
    c.set_tag(run_id, "self_mask", "true")
