"""``recipematch runs restore`` refuses bad files before it writes anything (breaker findings:
a list-shaped ``per_seed.json`` was counted as "without scores", ``seed_013.json`` beside
``seed_13.json`` gave a TypeError, and an evaluation name MLflow cannot store gave a
traceback after the run was written)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from recipematch.cli import main
from recipematch.errors import RecipematchError
from recipematch.pipeline.restore import per_seed_scores, seed_records
from recipematch.pipeline.runs import score_metrics

REPO = Path(__file__).resolve().parents[1]


def _project(tmp_path: Path) -> tuple[Path, Path]:
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    arm = tmp_path / "models" / "recipe"
    arm.mkdir(parents=True)
    (arm / "seed_13.json").write_text(json.dumps({"run_key": "a" * 64, "seed": 13, "cell": "d1xrecipe",
                                                  "train_loss": 0.5, "config": {"epochs": 1}}))
    ev = tmp_path / "artifacts" / "eval" / "recipe"
    ev.mkdir(parents=True)
    (ev / "per_seed.json").write_text(json.dumps({"13": {"tier": {"R@1": 40.0}}}))
    return arm, ev


def _restore(tmp_path: Path):
    return CliRunner().invoke(main, ["runs", "restore", "--root", str(tmp_path)])


@pytest.mark.parametrize("case", ["list_per_seed", "leading_zero", "bad_metric_name", "odd_seed_name"])
def test_a_bad_file_is_named_and_the_store_is_not_touched(tmp_path: Path, case: str) -> None:
    arm, ev = _project(tmp_path)
    if case == "list_per_seed":
        (ev / "per_seed.json").write_text(json.dumps([{"tier": {"R@1": 40.0}}]))
        want = "per_seed.json: expected {seed:"
    elif case == "leading_zero":
        shutil.copy(arm / "seed_13.json", arm / "seed_013.json")
        want = "seed_013.json: not a seed record name the stages write"
    elif case == "odd_seed_name":
        (arm / "seed_x.json").write_text("{}")
        want = "seed_x.json: not a seed record name"
    else:
        (ev / "per_seed.json").write_text(json.dumps({"13": {"tier:v2": {"R@1": 40.0}}}))
        want = "which MLflow cannot store"
    res = _restore(tmp_path)
    assert res.exit_code == 2, res.output
    assert want in res.output and "Traceback" not in res.output
    assert not (tmp_path / "mlflow.db").exists()  # every file is checked before the store is opened


def test_the_good_project_restores(tmp_path: Path) -> None:
    _project(tmp_path)
    res = _restore(tmp_path)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.strip().splitlines()[-1]) == {"runs": 1, "restored": 1, "scores_logged": 1,
                                                               "without_scores": 0}


def test_seed_records_and_per_seed_scores(tmp_path: Path) -> None:
    (tmp_path / "seed_2.json").write_text('{"seed": 2}')
    (tmp_path / "seed_10.json").write_text('{"seed": 10}')
    (tmp_path / "seed_0.json").write_text('{"seed": 0}')
    (tmp_path / "other.json").write_text("[]")  # not a seed_*.json: not read
    assert [s for s, _ in seed_records(tmp_path)] == [0, 2, 10]
    assert per_seed_scores(None) == {} and per_seed_scores(tmp_path / "absent.json") == {}
    (tmp_path / "per_seed.json").write_text('"text"')
    with pytest.raises(RecipematchError, match="got a str"):
        per_seed_scores(tmp_path / "per_seed.json")


def test_score_metrics_names_the_unstorable_metric() -> None:
    assert [m.key for m in score_metrics({"tier_a": {"R@1": 1.0, "R@10": 2.0, "n_queries": 5}}, 0)] == [
        "tier_a.R_at_1", "tier_a.R_at_10"]
    with pytest.raises(RecipematchError, match="'x' \\* 300|MLflow cannot store"):
        score_metrics({"x" * 300: {"R@1": 1.0}}, 0, "per_seed.json seed 1")
