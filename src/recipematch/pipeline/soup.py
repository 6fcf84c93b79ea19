"""Stage ``soup@<arm>-<alpha>``: WiSE-FT soups of every seed of one trained arm with the
untrained base, scored as their own rows (paper Appendix E, Table 19).

One stage per (arm, α) of ``remedies.arms`` × ``remedies.soup_alphas`` (Table 19's mixing in
weight space; the data-space remedy is the mix stage). For each training seed it writes the soup
checkpoint ``artifacts/soups/<arm>@soup<α>/seed_<s>/`` (with ``seed_<s>.json``: α, the
trained checkpoint's and the soup's hashes) and scores it on every declared evaluation
exactly as the evaluate stage scores an arm: the rows land under the label
``<arm>@soup<α>`` in ``artifacts/eval/<arm>@soup<α>/<set>.parquet`` and
``metrics/eval/<arm>@soup<α>.json``, beside the arms' own. Each (label, seed) is one MLflow
run with ``soup.alpha`` as a param.
"""

from __future__ import annotations

import logging
import math

from collections.abc import Mapping
from typing import Any

import click

from recipematch import tracking
from recipematch.errors import RecipematchError, short_repr
from recipematch.io import canonical_json, sha256_text, sha256_tree, write_json
from recipematch.pipeline.door import StagePaths, arm_option, check_device, stage
from recipematch.pipeline.evaluate import encoder_for, load_evaluations, load_graded, score_models, write_results
from recipematch.pipeline.inputs import mlflow_artifacts, mlflow_uri, train_seeds
from recipematch.pipeline.models import resolve_model
from recipematch.pipeline.runs import score_metrics
from recipematch.rules import soup_label
from recipematch.soups import build_soup

log = logging.getLogger("recipematch")

PARAMS = ("train.seed", "train.n_seeds", "train.model", "train.query_instruction", "remedies.arms",
          "remedies.soup_alphas", "evaluate", "evaluations", "mlflow")
#: the evaluation folders it reads (dvc.yaml lists them: recipematch.pipeline.deps): every declared set
EVAL_DEPS = "all"

alpha_option = click.option("--alpha", required=True,
                            help="A value of remedies.soup_alphas, as written there (it names the soup's folders).")




def _alpha(text: str, allowed) -> float:
    try:
        a = float(text)
    except ValueError:
        raise RecipematchError(f"--alpha {text!r} is not a number") from None
    if math.isfinite(a) and text != str(a):  # the row's folder name is this text: one spelling per value
        raise RecipematchError(f"--alpha {text}: write it as {a} (the folders are named by the value as Python "
                               f"prints it; in params.yaml write remedies.soup_alphas values as decimals: 1.0, not 1)")
    if not math.isfinite(a) or not any(a == float(x) for x in allowed):
        raise RecipematchError(f"--alpha {text}: not one of remedies.soup_alphas {list(allowed)}")
    return a


def run(p, lay: StagePaths, arm: str, alpha: str) -> dict:
    """Soups of one arm at one alpha: build each seed's soup, score it, log it."""
    if arm not in p.remedies.arms:
        raise RecipematchError(f"--arm {arm!r}: not in remedies.arms {list(p.remedies.arms)}")
    a = _alpha(alpha, p.remedies.soup_alphas)
    check_device("devices.evaluate", p.devices.evaluate)
    if not lay.models.is_dir():
        raise RecipematchError(f"--arm {arm!r}: {lay.models} does not exist (train it first)")
    label = soup_label(arm, alpha)
    base_name = p.train.model
    base = resolve_model(base_name)
    sets = load_evaluations(p, lay)
    graded = load_graded(p, lay, sets)  # every graded check before any model
    out_root = lay.out
    out_root.mkdir(parents=True, exist_ok=True)
    models = []
    for s in train_seeds(p.train.seed, p.train.n_seeds):
        ft = lay.models / f"seed_{s}"
        rec_path = lay.models / f"seed_{s}.json"
        if not rec_path.exists() or not ft.is_dir():
            raise RecipematchError(f"{rec_path} does not exist: train@{arm} has not trained seed {s}")
        ft_sha = sha256_tree(ft)
        info = build_soup(ft, base, a, out_root / f"seed_{s}", device=p.devices.evaluate)
        rec = {"arm": arm, "label": label, "seed": s, "alpha": a, "kind": info["kind"],
               "tensors_blended": info["tensors_blended"], "base_model": base_name,
               "finetuned_checkpoint_sha256": ft_sha, "checkpoint_sha256": sha256_tree(out_root / f"seed_{s}"),
               "query_instruction": p.train.query_instruction}
        rec["run_key"] = sha256_text(canonical_json({k: v for k, v in rec.items() if k != "checkpoint_sha256"}))
        write_json(out_root / f"seed_{s}.json", rec)
        log.info("soup %s seed %d: %s blend of %d tensors", label, s, info["kind"], info["tensors_blended"])
        models.append((str(s), encoder_for(str(out_root / f"seed_{s}"), p, p.train.query_instruction), rec))
    frames, per_model = score_models(models, sets, arm=label, ks=p.evaluate.ks, lay=lay,
                                     graded=graded)
    for seed_label, _m, rec in models:
        _log_to_mlflow(p.mlflow, lay, rec, per_model[seed_label])
    return write_results(lay, label, frames, per_model, ks=p.evaluate.ks)


#: What :func:`soup_run` reads from a soup's seed record.
SOUP_RECORD_KEYS = ("seed", "label", "arm", "alpha", "kind", "base_model", "query_instruction", "run_key",
                    "checkpoint_sha256", "finetuned_checkpoint_sha256")


def soup_run_args(rec: Mapping[str, Any], where: str = "soup record") -> dict[str, Any]:
    """The run key, name, tags, params and hash tags of one (soup, seed)'s run, from its record
    (``artifacts/soups/<label>/seed_N.json``), checked with no store open (``runs restore``
    checks every record before it writes).

    Raises:
        RecipematchError: naming ``where``: a key of :data:`SOUP_RECORD_KEYS` missing, a run key
            that is not one, a seed that is not a whole number, ``alpha`` not a number, a
            name, label or hash that is not text.
    """
    missing = [k for k in SOUP_RECORD_KEYS if k not in rec]
    if missing:
        raise RecipematchError(f"{where}: lacks {missing}; rerun its soup stage")
    tracking.check_run_key(rec["run_key"], where)
    if isinstance(rec["seed"], bool) or not isinstance(rec["seed"], int):
        raise RecipematchError(f"{where}: 'seed' {short_repr(rec['seed'], 40)} is not a whole number; rerun its soup stage")
    tracking.finite_value(rec["alpha"], f"{where}: alpha")
    text = ("label", "arm", "kind", "base_model", "query_instruction", "checkpoint_sha256",
            "finetuned_checkpoint_sha256")
    if bad := [k for k in text if not isinstance(rec[k], str)]:
        raise RecipematchError(f"{where}: {bad[0]!r} {short_repr(rec[bad[0]], 40)} is not text; rerun its soup stage")
    seed = str(rec["seed"])
    return {"run_key": rec["run_key"], "run_name": f"{rec['label']}-seed{seed}",
            "tags": {"arm": rec["label"], "seed": seed, "soup_of": rec["arm"]},
            "params": {"arm": rec["label"], "soup_of": rec["arm"], "seed": rec["seed"], "soup.alpha": rec["alpha"],
                       "soup.kind": rec["kind"], "train.model": rec["base_model"],
                       "train.query_instruction": rec["query_instruction"]},
            "hashes": {k: rec[k] for k in ("checkpoint_sha256", "finetuned_checkpoint_sha256")}}


def soup_run(c, exp_id: str, rec: Mapping[str, Any], where: str = "soup record") -> tuple[str, bool]:
    """The run of one (soup, seed) (``rec``: its ``artifacts/soups/<label>/seed_N.json``), found
    by its run key or created with its params and checkpoint hashes. Returns
    ``(run_id, created)``.

    Raises:
        RecipematchError: what :func:`soup_run_args` refuses, before anything is written.
    """
    a = soup_run_args(rec, where)
    run_id, found = tracking.find_or_create_run(c, exp_id, a["run_key"], a["run_name"], a["tags"])
    tracking.log_params_safe(c, run_id, a["params"])
    for k, v in a["hashes"].items():
        c.set_tag(run_id, k, v)
    return run_id, not found


def _log_to_mlflow(mcfg, lay: StagePaths, rec: dict, res: dict) -> None:
    """One MLflow run per (soup, seed), found again by its run key; a score that changed since
    the last run (an edited evaluation) is logged at the next step and tagged."""
    import time as _time

    c, exp_id = tracking.open_store(mlflow_uri(mcfg.tracking_uri, lay.root), mcfg.experiment,
                                    artifact_location=mlflow_artifacts(lay.root))
    with tracking.store_lock(mlflow_uri(mcfg.tracking_uri, lay.root)):
        run_id, _ = soup_run(c, exp_id, rec)
        tracking.log_metrics_once(c, run_id, score_metrics(res, int(_time.time() * 1000)), changed="supersede")
        c.set_terminated(run_id, status="FINISHED")


main = stage("soup", PARAMS, arm_option, alpha_option,
             reads=("cache", "models"), writes=("out", "eval", "eval_metrics"))(run)
