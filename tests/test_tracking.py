import pandas as pd

from recipematch import tracking


def test_resumed_run_relogs_changed_param_without_crashing(tmp_path):
    c = tracking.client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = tracking.experiment_id(c, "t", artifact_location=(tmp_path / "art").as_uri())
    run_id, resumed = tracking.find_or_create_run(c, exp, "key-1", "arm-seed", {"arm": "recipe"})
    assert not resumed
    assert tracking.log_params_safe(c, run_id, {"lr": 2e-5, "seed": 42}) == {"logged": 2, "unchanged": 0, "changed": 0}
    # the stage is interrupted and rerun: the same key finds the same run
    again, resumed = tracking.find_or_create_run(c, exp, "key-1", "arm-seed", {"arm": "recipe"})
    assert again == run_id and resumed
    # a plain mlflow.log_param of another value would raise here; ours records it as a tag
    out = tracking.log_params_safe(c, run_id, {"lr": 1e-06, "seed": 42, "epochs": 3})
    assert out == {"logged": 1, "unchanged": 1, "changed": 1}
    run = c.get_run(run_id)
    assert run.data.params["lr"] == "2e-05" and run.data.params["epochs"] == "3"
    assert run.data.tags["param_changed.lr"] == "1e-06"
    other, resumed = tracking.find_or_create_run(c, exp, "key-2", "arm-seed", {})
    assert other != run_id and not resumed


def test_dataset_digest_is_recorded(tmp_path):
    c = tracking.client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = tracking.experiment_id(c, "t", artifact_location=(tmp_path / "art").as_uri())
    run_id, _ = tracking.find_or_create_run(c, exp, "k", "r", {})
    digest = "f" * 64
    tracking.log_dataset(run_id, pd.DataFrame({"a": [1]}), source="artifacts/cells/x.jsonl", name="cell", digest=digest,
                         context="training")
    ds = c.get_run(run_id).inputs.dataset_inputs[0].dataset
    assert ds.digest == digest[:36] and ds.name == "cell"


# ------------------------------------------------------------------ issue 14: tracking faults

import math
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from mlflow.entities import Metric

from recipematch.errors import RecipematchError

_RACER = textwrap.dedent("""
    import sys, time
    db, start, key = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    from recipematch import tracking
    while time.time() < start:
        time.sleep(0.001)
    c, exp = tracking.open_store(f"sqlite:///{db}", "race", artifact_location="file:///tmp/unused-art")
    run_id, _ = tracking.find_or_create_run(c, exp, key, key, {})
    c.log_param(run_id, "who", key)
    print("ok", run_id)
""")


def test_processes_started_together_on_a_missing_store_all_succeed(tmp_path):
    """Two (here three) train stages started together with no mlflow.db: the schema is
    created once, under the store lock, and every process gets its run."""
    db = tmp_path / "mlflow.db"
    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"),
           "OMP_NUM_THREADS": "1", "MLFLOW_DISABLE_TELEMETRY": "true"}
    start = time.time() + 15  # every process has imported mlflow before the start signal
    procs = [subprocess.Popen([sys.executable, str(script), str(db), repr(start), k], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in ("a", "b", "c")]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert out.startswith("ok ")
    c = tracking.client(f"sqlite:///{db}")
    runs = c.search_runs([c.get_experiment_by_name("race").experiment_id])
    assert sorted(r.data.params["who"] for r in runs) == ["a", "b", "c"]


@pytest.mark.parametrize("spoil", ["random", "truncated"])
def test_corrupt_store_gives_one_line_naming_the_file(tmp_path, spoil):
    db = tmp_path / "mlflow.db"
    if spoil == "random":
        db.write_bytes(bytes(range(256)) * 40)
    else:
        c = tracking.client(f"sqlite:///{db}")
        exp = tracking.experiment_id(c, "t")
        tracking.find_or_create_run(c, exp, "k", "r", {})
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 3])
    with pytest.raises(tracking.TrackingStoreError) as err:
        tracking.client(f"sqlite:///{db}")
    msg = str(err.value)
    assert isinstance(err.value, RecipematchError)
    assert str(db) in msg and "move it aside" in msg and "\n" not in msg


def test_retraining_under_the_same_run_key_does_not_append_history(tmp_path):
    c = tracking.client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = tracking.experiment_id(c, "t")
    for i in range(3):  # three trainings of one finished seed
        run_id, resumed = tracking.find_or_create_run(c, exp, "same-key", "arm-seed42", {})
        assert resumed is (i > 0)
        metrics = [Metric("loss", 0.5, 1000 + i, 1), Metric("loss", 0.25, 1000 + i, 2),
                   Metric("train_loss", 0.3, 1000 + i, 0), Metric("nan_metric", math.nan, 1000 + i, 0)]
        out = tracking.log_metrics_once(c, run_id, metrics)
        assert out == ({"logged": 4, "kept": 0, "differs": 0} if i == 0 else {"logged": 0, "kept": 4, "differs": 0})
    assert [(m.step, m.value) for m in c.get_metric_history(run_id, "loss")] == [(1, 0.5), (2, 0.25)]
    assert len(c.get_metric_history(run_id, "train_loss")) == 1
    # a different value under the same key is kept once and flagged, not appended
    out = tracking.log_metrics_once(c, run_id, [Metric("train_loss", 0.31, 2000, 0)])
    assert out == {"logged": 0, "kept": 1, "differs": 1}
    assert len(c.get_metric_history(run_id, "train_loss")) == 1
    assert "kept 0.3" in c.get_run(run_id).data.tags["metric_differs.train_loss"]


def _record(run_key="rk-1"):
    # an old-style record still carries an MLflow run id of a store that is gone
    return {"run_key": run_key, "mlflow_run_id": "0" * 32, "checkpoint_sha256": "c" * 64, "pair_file_sha256": "p" * 64,
            "gate_list_sha256": "g" * 64, "dev_accuracy_before": 0.1, "dev_accuracy_best": 0.4, "train_loss": 1.2,
            "train_examples": 99, "cell": "d4xrecipe"}


def test_restore_run_finds_by_run_key_or_recreates_from_the_record(tmp_path):
    c = tracking.client(f"sqlite:///{tmp_path / 'new.db'}")
    exp = tracking.experiment_id(c, "t")
    rec = _record()
    run_id, restored = tracking.restore_run(c, exp, rec, run_name="recipe-seed42", tags={"arm": "recipe", "seed": "42"},
                                            params={"seed": 42})
    assert restored
    run = c.get_run(run_id)
    assert run.data.tags[tracking.RUN_KEY_TAG] == "rk-1" and run.data.tags["restored_from_record"] == "true"
    assert run.data.tags["checkpoint_sha256"] == "c" * 64 and run.data.params["seed"] == "42"
    assert run.data.metrics["dev_accuracy_best"] == 0.4 and run.info.status == "FINISHED"
    again, restored = tracking.restore_run(c, exp, rec, run_name="recipe-seed42", tags={})
    assert (again, restored) == (run_id, False)
    assert len(c.search_runs([exp])) == 1


def test_evaluate_after_a_lost_store_logs_to_a_restored_run_and_rewrites_no_record(tmp_path):
    """The evaluate stage's MLflow mirror after mlflow.db was lost: no 'Run with id=... not
    found'; the run is re-created from the seed record, and no file is written."""
    from recipematch.config import MlflowConfig
    from conftest import Outputs
    from recipematch.pipeline.evaluate import _log_eval_to_mlflow

    lay = Outputs(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    res = {"probe": {"R@1": 50.0, "R@5": 75.0, "n_queries": 4, "self_mask": True}}
    mcfg = MlflowConfig(tracking_uri="sqlite:///mlflow.db", experiment="e2e")
    _log_eval_to_mlflow(mcfg, lay, _record(), "recipe", "42", res)
    _log_eval_to_mlflow(mcfg, lay, _record(), "recipe", "42", res)  # a second evaluation: same run
    c = tracking.client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = c.search_runs([c.get_experiment_by_name("e2e").experiment_id])
    assert run.data.tags[tracking.RUN_KEY_TAG] == "rk-1" and run.data.tags["cell"] == "d4xrecipe"
    assert run.data.metrics["probe.R_at_1"] == 50.0
    written = sorted(p.name for p in tmp_path.rglob("*"))
    assert set(written) - set(before) <= {"mlflow.db", "mlflow.db.lock"}


def test_a_bad_record_is_one_line_and_writes_nothing(tmp_path):
    """Breaker, round two: a record with a non-numeric summary or a param name MLflow refuses
    raised raw ValueError/MlflowException after the run was created; every later restore then
    skipped the half-written run."""
    c = tracking.client(f"sqlite:///{tmp_path / 'new.db'}")
    exp = tracking.experiment_id(c, "t")
    with pytest.raises(RecipematchError, match=r"seed_14.json: train_loss: 'abc' is not a finite number"):
        tracking.restore_run(c, exp, {**_record(), "train_loss": "abc"}, run_name="r", tags={},
                             where="seed_14.json")
    with pytest.raises(RecipematchError, match="param name 'bad key!@#'"):
        tracking.restore_run(c, exp, _record(), run_name="r", tags={}, params={"bad key!@#": 1})
    with pytest.raises(RecipematchError, match="run_key"):
        tracking.restore_run(c, exp, _record("rk' OR 1=1"), run_name="r", tags={})
    assert c.search_runs([exp]) == []


def test_a_restore_cut_short_is_completed_by_the_next(tmp_path):
    c = tracking.client(f"sqlite:///{tmp_path / 'new.db'}")
    exp = tracking.experiment_id(c, "t")
    # what a restore killed right after creating the run leaves behind
    run_id, _ = tracking.find_or_create_run(c, exp, "rk-1", "recipe-seed42", {})
    c.set_tag(run_id, "restored_from_record", "partial")
    again, restored = tracking.restore_run(c, exp, _record(), run_name="recipe-seed42", tags={}, params={"seed": 42})
    assert (again, restored) == (run_id, True)
    run = c.get_run(run_id)
    assert run.data.tags["restored_from_record"] == "true" and run.data.params["seed"] == "42"
    assert run.data.metrics["train_loss"] == 1.2 and run.info.status == "FINISHED"
    assert tracking.restore_run(c, exp, _record(), run_name="recipe-seed42", tags={}) == (run_id, False)
    assert len(c.search_runs([exp])) == 1


@pytest.mark.parametrize("res", [{"tier": {"R@1": None}}, {"tier": {"R@1": "n/a"}}, {"tier": {"R@1": float("nan")}},
                                 {"tier": [1]}, [1]])
def test_scores_that_are_not_numbers_are_one_line(res):
    from recipematch.pipeline.runs import score_metrics

    with pytest.raises(RecipematchError, match="per_seed.json seed 14"):
        score_metrics(res, 0, "per_seed.json seed 14")


@pytest.mark.parametrize(("name", "ok"), [("tier.R_at_1", True), ("a/b c-d", True), ("/a", False), ("a/", False),
                                          ("a//b", False), ("./a", False), ("..", False), ("a/../b", False),
                                          (".", False), ("a:b", False), ("", False), (7, False)])
def test_storable_name_follows_mlflows_path_rule(name, ok):
    assert tracking.storable_name(name) is ok


def test_run_keys_as_the_stages_and_the_survey_write_them():
    assert tracking.check_run_key("a" * 64, "w") == "a" * 64
    assert tracking.check_run_key("survey:" + "b" * 64, "w").startswith("survey:")
    for bad in ("a'b", "", "x" * 129, None, "a b"):
        with pytest.raises(RecipematchError, match="is not a run key"):
            tracking.check_run_key(bad, "w")
