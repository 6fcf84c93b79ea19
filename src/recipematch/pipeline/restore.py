"""The MLflow runs of a project, re-created from what DVC keeps (``recipematch runs restore``).

MLflow's store is not a DVC output: moving a broken ``mlflow.db`` aside and running
``dvc repro`` reruns nothing, since no dep changed. The seed records
(``models/<arm>/seed_N.json`` of arms and replay mixes, ``artifacts/soups/<label>/seed_N.json``)
and the per-seed scores (``artifacts/eval/<arm>/per_seed.json``) hold everything a run showed
(its params and tags included) except the training-loss history and the tags of where and when
it ran (``git_rev``, ``resumed``, ``dvc_exp``), which would make a record differ between two
runs of the same inputs: this module writes them back, one run per (arm, seed), found by its run
key, so a rerun adds nothing twice. It is no stage's dep: a change here reruns nothing.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipematch import tracking
from recipematch.errors import RecipematchError, short_repr
from recipematch.io import read_json
from recipematch.pipeline.graph import project_stages, stage_options
from recipematch.pipeline.inputs import mlflow_artifacts, mlflow_uri
from recipematch.pipeline.runs import score_metrics, trained_run, trained_run_args
from recipematch.pipeline.soup import soup_run, soup_run_args
from recipematch.rules import mix_label, soup_label

log = logging.getLogger("recipematch")

#: a seed record's file name as the training and soup stages write it (``seed_<s>.json``)
_SEED_FILE = re.compile(r"^seed_(0|[1-9][0-9]*)\.json\Z")
#: a seed as ``per_seed.json`` keys it
_SEED_KEY = re.compile(r"^(0|[1-9][0-9]*)\Z")


def _check_text(obj: Any, where: str) -> None:
    """Every key and text value in ``obj`` (a parsed JSON value) is text MLflow's store can hold:
    UTF-8 encodable (no lone surrogate such as ``"\\udfff"``) and without a NUL character.

    Raises:
        RecipematchError: naming ``where`` and the text.
    """
    stack = [obj]
    while stack:
        x = stack.pop()
        if isinstance(x, Mapping):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, str):
            try:
                x.encode("utf-8")
            except UnicodeEncodeError:
                raise RecipematchError(f"{where}: text {short_repr(x, 40)} is not UTF-8 (a lone surrogate escape); "
                                       "rerun its stage") from None
            if "\0" in x:
                raise RecipematchError(f"{where}: text {short_repr(x, 40)} holds a NUL character; rerun its stage")


def seed_records(folder: Path) -> list[tuple[int, dict]]:
    """``[(seed, record)]`` of a checkpoint folder's ``seed_<s>.json`` files, by seed; ``[]``
    where the folder does not exist yet.

    Raises:
        RecipematchError: ``folder`` is a file; a ``seed_*.json`` name the stages do not write
            (``seed_013.json``, which would stand for the same seed as ``seed_13.json``); a
            record that is not a JSON object or whose ``seed`` is not its file's whole number; or a file
            :func:`recipematch.io.read_json` cannot read, each naming the file.
    """
    folder = Path(folder)
    if not folder.exists():
        return []
    if not folder.is_dir():
        raise RecipematchError(f"{folder}: a file where the stage writes a folder of seed records; move it aside "
                               "and rerun its stage")
    out = {}
    for f in sorted(folder.glob("seed_*.json")):
        m = _SEED_FILE.match(f.name)
        if not m:
            raise RecipematchError(f"{f}: not a seed record name the stages write (seed_<s>.json, no leading "
                                   "zeros); move it out of the folder")
        seed, rec = int(m.group(1)), read_json(f, unique_keys=True)
        if not isinstance(rec, Mapping):
            raise RecipematchError(f"{f}: expected a JSON object, got a {type(rec).__name__}; rerun its stage")
        if type(rec.get("seed")) is not int or rec["seed"] != seed:
            raise RecipematchError(f"{f}: its 'seed' is {short_repr(rec.get('seed'), 40)}, not {seed}; rerun its stage")
        _check_text(rec, str(f))
        out[seed] = rec
    return sorted(out.items())


def per_seed_scores(path: Path | None) -> Mapping[str, Any]:
    """The evaluate stage's ``per_seed.json`` (``{seed: {evaluation: {"R@k": score}}}``), or
    ``{}`` where there is none yet.

    Raises:
        RecipematchError: the path is a folder, the file is not a JSON object, or a key is not
            a seed as the stage writes it (a whole number, no leading zeros), naming the file.
    """
    if path is None or not (path.exists() or path.is_symlink()):  # a dangling or looping link is read, and named
        return {}
    scores = read_json(path, unique_keys=True)
    _check_text(scores, str(path))
    if not isinstance(scores, Mapping):
        raise RecipematchError(f"{path}: expected {{seed: {{evaluation: {{'R@k': score}}}}}}, got a "
                               f"{type(scores).__name__}; rerun its evaluate stage")
    if bad := [k for k in scores if not _SEED_KEY.match(k)]:
        raise RecipematchError(f"{path}: key {short_repr(bad[0], 40)} is not a seed as the evaluate stage writes it "
                               "(a whole number, no leading zeros); rerun its evaluate stage")
    return scores


def _groups(p, root: Path) -> list[tuple[str, Path, str, Path | None]]:
    """``(label, checkpoint folder, "trained" | "soup", its evaluation folder)`` of every
    ``train@``, ``mix@`` and ``soup@`` stage, the folders as the project's ``dvc.yaml`` passes them."""
    groups, evals = [], {}
    stages = project_stages(root, p)
    if not stages:
        raise RecipematchError(f"{root / 'dvc.yaml'} declares no stages: runs restore reads the folders its train@, "
                               "mix@, soup@ and evaluate@ stages write")
    for st in stages.values():
        main, opts = stage_options(st)
        for role in ("path_models", "path_out", "path_eval"):
            rel = Path(str(opts.get(role) or "x"))
            if rel.is_absolute() or ".." in rel.parts:
                raise RecipematchError(f"dvc.yaml stage {st.name}: --{role[5:]} {str(rel)!r} is not a path inside the "
                                       "project: runs restore reads only the project's own records")
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
    # a trained arm's scores: its evaluate@ stage's folder
    return [(label, folder, kind, eval_dir or evals.get(label)) for label, folder, kind, eval_dir in groups]


def restore(p, root: Path) -> dict[str, int]:
    """Re-create every trained arm's, replay mix's and soup's runs (:func:`trained_run`, and
    soups by their run key) and log their scores from ``per_seed.json`` where the evaluate stage wrote one.
    The folders are the ones the project's ``dvc.yaml`` passes its ``train@``, ``soup@`` and
    ``evaluate@`` stages (:mod:`recipematch.pipeline.graph`).
    Scores are logged with ``changed="supersede"`` (:func:`recipematch.tracking.log_metrics_once`):
    nothing the store holds is appended again. Every file is read and checked before the
    store is opened, so a bad one leaves the store as it was; with no seed record at all the
    store is not opened.

    Returns:
        counts ``{"runs", "restored", "scores_logged", "without_scores"}``.

    Raises:
        RecipematchError: a seed record without a run key or that :func:`trained_run_args` /
            :func:`soup_run_args` refuse, a soup record in another soup's folder, two records
            with one run key, a seed file name the stages do not write, a
            ``per_seed.json`` that is not keyed by seed, or scores :func:`score_metrics` refuses
            (each naming its file). Nothing is written then, and no store is created.
    """
    root = Path(root).resolve()
    now = int(time.time() * 1000)
    todo = []  # (label, kind, seed file, record, metrics or None), all checked before anything is written
    keys: dict[str, Path] = {}  # run key -> the record that holds it
    for label, folder, kind, eval_dir in _groups(p, root):
        per_seed_path = eval_dir / "per_seed.json" if eval_dir is not None else None
        per_seed = per_seed_scores(per_seed_path)
        records = seed_records(folder)
        for seed, rec in records:
            where = folder / f"seed_{seed}.json"
            if not rec.get("run_key"):
                raise RecipematchError(f"{where}: no 'run_key'; rerun its stage")
            if kind == "trained":
                trained_run_args(label, rec, str(where))
                arm = (rec.get("run_params") or {}).get("arm", label)
                path = (rec.get("run_tags") or {}).get("checkpoint_path")
                own = (folder / f"seed_{seed}").relative_to(root).as_posix()
                if arm != label or path is not None and path != own:
                    raise RecipematchError(f"{where}: a record of arm {short_repr(arm, 60)} (checkpoint "
                                           f"{short_repr(path, 80)}) in the folder dvc.yaml gives {label!r} ({own}); "
                                           "move it back or retrain it")
            else:
                soup_run_args(rec, str(where))
                if rec["label"] != label or soup_label(rec["arm"], rec["alpha"]) != label:
                    raise RecipematchError(f"{where}: a record of {short_repr(rec['label'], 60)} (arm "
                                           f"{short_repr(rec['arm'], 40)}, alpha {short_repr(rec['alpha'], 20)}) in the "
                                           f"folder dvc.yaml gives {label!r}; rerun its soup stage")
            if (other := keys.setdefault(rec["run_key"], where)) != where:
                raise RecipematchError(f"{where}: its run key is also {other}'s: two seeds would share one run; "
                                       "rerun their stages")
            metrics = (score_metrics(per_seed[str(seed)], now, f"{per_seed_path} seed {seed}")
                       if str(seed) in per_seed else None)
            todo.append((label, kind, where, rec, metrics))
        if unmatched := sorted(set(per_seed) - {str(s) for s, _ in records}, key=int):
            log.warning("runs restore: %s scores seeds %s, which have no seed record in %s: not logged",
                        per_seed_path, ", ".join(unmatched), folder)
    out = {"runs": 0, "restored": 0, "scores_logged": 0, "without_scores": 0}
    if not todo:
        log.warning("runs restore: no seed records under the folders dvc.yaml's train@, mix@ and soup@ stages "
                    "write: nothing to restore (run `dvc repro` first)")
        return out
    uri = mlflow_uri(p.mlflow.tracking_uri, root)
    c, exp_id = tracking.open_store(uri, p.mlflow.experiment, artifact_location=mlflow_artifacts(root))
    with tracking.store_lock(uri):
        for label, kind, where, rec, metrics in todo:
            if kind == "trained":
                run_id, restored = trained_run(c, exp_id, label, rec, where=str(where))
            else:
                run_id, restored = soup_run(c, exp_id, rec, where=str(where))
                # a re-created soup run, or one a stopped soup stage left RUNNING, is complete once its params
                # and hashes are logged
                if restored or c.get_run(run_id).info.status == "RUNNING":
                    c.set_tag(run_id, "restored_from_record", "true")
                    c.set_terminated(run_id, status="FINISHED")
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
