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
