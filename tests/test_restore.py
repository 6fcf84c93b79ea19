"""``recipematch runs restore`` refuses bad files before it writes anything, and opens no
store when one is bad (breaker findings, two rounds: a list-shaped ``per_seed.json`` was
counted as "without scores", ``seed_013.json`` beside ``seed_13.json`` gave a TypeError, an
evaluation name MLflow cannot store gave a traceback after the run was written, and record
checks ran only once the store was open)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
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


def _soup(tmp_path: Path, **edit) -> None:
    soup = tmp_path / "artifacts" / "soups" / "recipe@soup0.3"  # soup@recipe-0.3's output (params.yaml remedies)
    soup.mkdir(parents=True)
    rec = {"run_key": "s" * 64, "seed": 13, "arm": "recipe", "label": "recipe@soup0.3", "alpha": 0.3, "kind": "full",
           "base_model": "m", "query_instruction": "", "checkpoint_sha256": "a" * 64,
           "finetuned_checkpoint_sha256": "b" * 64}
    (soup / "seed_13.json").write_text(json.dumps({**rec, **edit}))


#: second breaker round: records checked only once the store was open (it was created, and an
#: earlier good seed's run written), tracebacks after the store was written, a soup's run key
#: put into the search filter unchecked, scores that were quietly not logged
SECOND_ROUND = {
    "quote_in_run_key": ({"run_key": "a'b"}, "is not a run key"),
    "text_train_loss": ({"train_loss": "x"}, "train_loss: 'x' is not a finite number"),
    "param_name": ({"run_params": {"a:b@": 1}}, "param name 'a:b@' cannot be stored"),
    "leading_slash_param": ({"run_params": {"/a": 1}}, "param name '/a' cannot be stored"),
    "tags_list": ({"run_tags": ["a"]}, "must be mappings"),
    "config_list": ({"config": [1, 2]}, "must be mappings"),
    "config_text": ({"config": "abc"}, "must be mappings"),
    "seed_mismatch": ({"seed": 99}, "its 'seed' is 99, not 14"),
    # third round
    "no_seed": ({"seed": None}, "its 'seed' is None, not 14"),
    "float_seed": ({"seed": 14.0}, "its 'seed' is 14.0, not 14"),
    "huge_train_loss": ({"train_loss": 10 ** 400}, "train_loss: "),
    "newline_run_key": ({"run_key": "abc\n"}, "is not a run key"),
    "cell_mapping": ({"cell": {"a": 1}}, "is not a cell name"),
    "cell_too_long": ({"cell": "c" * 9000}, "is not a cell name"),
    "duplicate_run_key": ({"run_key": "a" * 64}, "its run key is also"),
    # fourth round
    "surrogate_param": ({"run_params": {"train.model": "\udfff"}}, "is not UTF-8 (a lone surrogate escape)"),
    "surrogate_cell": ({"cell": "\udfff"}, "is not UTF-8"),
    "surrogate_tag": ({"run_tags": {"gate_version": "\ud800"}}, "is not UTF-8"),
    "nul_cell": ({"cell": "a\u0000b"}, "holds a NUL character"),
    "hash_mapping": ({"checkpoint_sha256": {"a": 1}}, "'checkpoint_sha256' is {'a': 1}, not a hash"),
    "other_arm": ({"run_params": {"arm": "verified"}}, "a record of arm 'verified'"),
    "mix_record": ({"run_params": {"arm": "recipe@mix0.2"}, "run_tags": {"mix_of": "recipe"}},
                   "a record of arm 'recipe@mix0.2'"),
    "other_checkpoint": ({"run_tags": {"checkpoint_path": "models/verified/seed_14"}},
                         "(checkpoint 'models/verified/seed_14') in the folder dvc.yaml gives 'recipe'"),
}


@pytest.mark.parametrize("case", sorted(SECOND_ROUND))
def test_every_record_is_checked_before_the_store_opens(tmp_path: Path, case: str) -> None:
    arm, _ = _project(tmp_path)  # seed 13 is good: its run must not be written before seed 14 is refused
    edit, want = SECOND_ROUND[case]
    rec = {"run_key": "b" * 64, "seed": 14, "cell": "d1xrecipe", "train_loss": 0.5, "config": {"epochs": 1}, **edit}
    (arm / "seed_14.json").write_text(json.dumps(rec))
    res = _restore(tmp_path)
    assert res.exit_code == 2, res.output
    assert want in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize(("edit", "want"), [
    ({"run_key": "x' OR tags.a = 'b"}, "is not a run key"),
    ({"run_key": 7}, "7 is not a run key"),
    ({"label": {"a": 1}}, "'label' {'a': 1} is not text"),
    ({"checkpoint_sha256": None}, "'checkpoint_sha256' None is not text"),
    ({"alpha": "half"}, "alpha: 'half' is not a finite number"),
    ({"seed": "13"}, "its 'seed' is '13', not 13"),
    ({"alpha": 10 ** 400}, "alpha: "),
    ({"label": "WRONG@label"}, "a record of 'WRONG@label'"),  # third round: checked against its folder
    ({"alpha": 0.9}, "alpha 0.9) in the folder dvc.yaml gives 'recipe@soup0.3'"),
])
def test_a_bad_soup_record_is_refused_before_the_store_opens(tmp_path: Path, edit, want) -> None:
    _project(tmp_path)
    _soup(tmp_path, **edit)
    res = _restore(tmp_path)
    assert res.exit_code == 2 and want in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize(("per_seed", "want"), [
    ({"13": None}, "seed 13: expected {evaluation:"),
    ({"13": {"tier": {"n_queries": 5}}}, "seed 13: no R@k score"),
    ({"13": {"/tier": {"R@1": 40.0}}}, "which MLflow cannot store"),
    ({"13": {"tier": {"R@1/": 40.0}}}, "which MLflow cannot store"),
    ({"014": {"tier": {"R@1": 40.0}}}, "key '014' is not a seed"),
    ("[" * 100000, "nested too deep"),
    ({"13": {"tier": {"R@1": 10 ** 400}}}, "is not a finite number"),  # third round
    ('{"13": {"tier": {"R@1": 1' + "0" * 5000 + "}}}", "not valid JSON"),
    ({"13\n": {"tier": {"R@1": 40.0}}}, "is not a seed"),
    ({"13": {}}, "seed 13: no R@k score"),
])
def test_scores_that_would_be_quietly_dropped_are_refused(tmp_path: Path, per_seed, want) -> None:
    _, ev = _project(tmp_path)
    (ev / "per_seed.json").write_text(per_seed if isinstance(per_seed, str) else json.dumps(per_seed))
    res = _restore(tmp_path)
    assert res.exit_code == 2 and want in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "mlflow.db").exists()


def test_a_folder_where_per_seed_json_lies_or_a_file_where_seed_records_lie(tmp_path: Path) -> None:
    arm, ev = _project(tmp_path)
    (ev / "per_seed.json").unlink()
    (ev / "per_seed.json").mkdir()
    res = _restore(tmp_path)
    assert res.exit_code == 2 and "is a folder, expected a JSON file" in res.output, res.output
    (ev / "per_seed.json").rmdir()
    shutil.rmtree(arm)
    arm.write_text("x")
    res = _restore(tmp_path)
    assert res.exit_code == 2 and "a file where the stage writes a folder of seed records" in res.output, res.output
    assert not (tmp_path / "mlflow.db").exists()


def test_nothing_to_restore_opens_no_store(tmp_path: Path) -> None:
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    res = _restore(tmp_path)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.strip().splitlines()[-1])["runs"] == 0
    assert not (tmp_path / "mlflow.db").exists()


def test_scores_of_a_seed_without_a_record_are_named(tmp_path: Path, caplog) -> None:
    _, ev = _project(tmp_path)
    (ev / "per_seed.json").write_text(json.dumps({"13": {"tier": {"R@1": 40.0}}, "15": {"tier": {"R@1": 1.0}}}))
    with caplog.at_level("WARNING", logger="recipematch"):
        res = _restore(tmp_path)
    assert res.exit_code == 0, res.output
    assert any("scores seeds 15, which have no seed record" in r.getMessage() for r in caplog.records)


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
    _soup(tmp_path)
    res = _restore(tmp_path)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.strip().splitlines()[-1]) == {"runs": 2, "restored": 2, "scores_logged": 1,
                                                               "without_scores": 1}


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


def test_a_symlink_loop_is_named_not_a_traceback(tmp_path: Path) -> None:
    arm, ev = _project(tmp_path)
    (arm / "seed_14.json").symlink_to(arm / "seed_14.json")
    res = _restore(tmp_path)
    assert res.exit_code == 2 and "seed_14.json: a symlink loop" in res.output, res.output
    (arm / "seed_14.json").unlink()
    (ev / "per_seed.json").unlink()
    (ev / "per_seed.json").symlink_to(ev / "per_seed.json")  # was read as "no scores"
    res = _restore(tmp_path)
    assert res.exit_code == 2 and "per_seed.json: a symlink loop" in res.output, res.output
    assert not (tmp_path / "mlflow.db").exists()


def test_a_run_cut_short_before_its_mark_is_completed(tmp_path: Path) -> None:
    """Third round: a run created without ``restored_from_record`` (a restore stopped between
    creating it and marking it) was taken for complete forever."""
    from recipematch import tracking

    _project(tmp_path)
    c, exp = tracking.open_store(f"sqlite:///{tmp_path / 'mlflow.db'}", "recipematch")
    run_id, _ = tracking.find_or_create_run(c, exp, "a" * 64, "cut-short", {})
    res = _restore(tmp_path)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.strip().splitlines()[-1])["restored"] == 1
    run = c.get_run(run_id)
    assert run.data.metrics["train_loss"] == 0.5 and run.data.params["train.epochs"] == "1"
    assert run.data.tags["restored_from_record"] == "true"
    res = _restore(tmp_path)
    assert json.loads(res.output.strip().splitlines()[-1])["restored"] == 0


def test_a_restored_soup_run_is_finished_without_scores(tmp_path: Path) -> None:
    from recipematch import tracking

    _project(tmp_path)
    _soup(tmp_path)
    assert _restore(tmp_path).exit_code == 0
    c, exp = tracking.open_store(f"sqlite:///{tmp_path / 'mlflow.db'}", "recipematch")
    run = c.get_run(tracking.find_run(c, exp, "s" * 64))
    assert run.info.status == "FINISHED" and run.data.tags["restored_from_record"] == "true"  # told from an original


def test_a_repeated_key_is_refused_not_quietly_last(tmp_path: Path) -> None:
    """Fourth round: ``{"R@1": 40.0, "R@1": 99.0}`` logged 99 without a word."""
    arm, ev = _project(tmp_path)
    (ev / "per_seed.json").write_text('{"13": {"tier": {"R@1": 40.0, "R@1": 99.0}}}')
    res = _restore(tmp_path)
    assert res.exit_code == 2 and "repeats the key 'R@1'" in res.output, res.output
    assert not (tmp_path / "mlflow.db").exists()
    (ev / "per_seed.json").write_text('{"13": {"tier": {"R@1": 40.0}}}')
    (arm / "seed_13.json").write_text('{"run_key": "%s", "seed": 13, "run_key": "%s"}' % ("a" * 64, "c" * 64))
    res = _restore(tmp_path)
    assert res.exit_code == 2 and "repeats the key 'run_key'" in res.output, res.output


def test_two_scores_giving_one_metric_name_are_refused() -> None:
    with pytest.raises(RecipematchError, match=r"two scores of 'tier' give the metric name 'tier.R_at_x_at_y'"):
        score_metrics({"tier": {"R@x@y": 1.0, "R@x_at_y": 2.0}}, 0)


def test_a_store_of_another_program_or_schema_is_one_line(tmp_path: Path) -> None:
    """Fourth round: restore wrote MLflow's tables into another program's SQLite file, and a
    store of another schema version gave MLflow's traceback."""
    import sqlite3

    _project(tmp_path)
    con = sqlite3.connect(tmp_path / "mlflow.db")
    con.execute("create table foo(x)")
    con.commit()
    con.close()
    res = _restore(tmp_path)
    assert res.exit_code == 2 and "an SQLite database of another program" in res.output, res.output
    con = sqlite3.connect(tmp_path / "mlflow.db")
    assert [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")] == ["foo"]
    con.close()
    (tmp_path / "mlflow.db").unlink()
    assert _restore(tmp_path).exit_code == 0
    con = sqlite3.connect(tmp_path / "mlflow.db")
    con.execute("update alembic_version set version_num = 'ffffffffffff'")
    con.commit()
    con.close()
    # a fresh process: MLflow keeps the store it opened above for this URI
    res = subprocess.run([sys.executable, "-m", "recipematch", "runs", "restore", "--root", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "ffffffffffff" in res.stderr, res.stderr


def test_a_soup_run_a_stopped_stage_left_running_is_finished(tmp_path: Path) -> None:
    """Fourth round: a soup run created by its stage and cut short (no scores) stayed RUNNING."""
    from recipematch import tracking

    _project(tmp_path)
    _soup(tmp_path)
    c, exp = tracking.open_store(f"sqlite:///{tmp_path / 'mlflow.db'}", "recipematch")
    run_id, _ = tracking.find_or_create_run(c, exp, "s" * 64, "cut-short", {})
    res = _restore(tmp_path)
    assert res.exit_code == 0, res.output
    run = c.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["restored_from_record"] == "true"


def test_records_outside_the_project_or_no_stages_are_refused(tmp_path: Path) -> None:
    """Fourth round: a dvc.yaml whose --models pointed outside the project was read, and one
    with no stages restored nothing with exit 0."""
    _project(tmp_path)
    text = (tmp_path / "dvc.yaml").read_text(encoding="utf-8")
    assert "--models models/${item.arm}" in text
    (tmp_path / "dvc.yaml").write_text(text.replace("--models models/${item.arm}", "--models ../x/${item.arm}", 1))
    res = _restore(tmp_path)
    assert res.exit_code == 2 and "is not a path inside the project" in res.output, res.output
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    res = _restore(tmp_path)
    assert res.exit_code == 2 and "declares no stages" in res.output, res.output
