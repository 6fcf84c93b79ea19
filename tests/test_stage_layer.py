"""The stage layer's own rules: dvc.yaml declares exactly what each stage imports and reads,
params.yaml is opened in one place, library code raises the project's error type."""

import ast
from pathlib import Path

import pytest

from recipematch.pipeline import deps

SRC = Path(__file__).resolve().parents[1] / "src" / "recipematch"


def test_dvc_yaml_declares_exactly_each_stages_code_and_params(repo_root):
    problems = deps.check(repo_root)
    assert problems == [], "\n".join(problems) + "\n(fix with: python -m recipematch.pipeline.deps --write)"


def test_check_catches_a_drifted_entry(repo_root, tmp_path):
    import shutil

    for name in ("dvc.yaml",):
        shutil.copy(repo_root / name, tmp_path / name)
    shutil.copytree(repo_root / "stages", tmp_path / "stages")
    text = (tmp_path / "dvc.yaml").read_text()
    text = text.replace("      - src/recipematch/gates.py\n", "", 1).replace("      - budget.rows\n", "", 1)
    (tmp_path / "dvc.yaml").write_text(text)
    problems = deps.check(tmp_path)
    assert any("deps lack ['src/recipematch/gates.py']" in p for p in problems)
    assert any("params" in p and "budget.rows" in p for p in problems)


def test_every_stage_reads_params_through_its_declared_view(repo_root):
    """Each stage module declares PARAMS; its door enforces them at run time (UndeclaredParam)."""
    import importlib

    from recipematch.cli import STAGE_COMMANDS

    for _name, module in STAGE_COMMANDS:
        mod = importlib.import_module(f"recipematch.pipeline.{module}")
        assert isinstance(mod.PARAMS, tuple)
        assert mod.main.params_keys == mod.PARAMS


def _calls(name: str) -> list[str]:
    hits = []
    for f in sorted(SRC.rglob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
                if called == name:
                    hits.append(f"{f.relative_to(SRC)}:{node.lineno}")
    return hits


def test_params_yaml_is_opened_in_one_place():
    assert sorted({h.split(":")[0] for h in _calls("load_params")}) == ["pipeline/door.py"]
    assert [h.split(":")[0] for h in _calls("load_yaml")] == ["config.py"]


@pytest.mark.parametrize("pkg", ["", "pipeline"])
def test_library_raises_no_systemexit_and_checks_input_without_assert(pkg):
    bad = []
    for f in sorted((SRC / pkg).glob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert):
                bad.append(f"{f.relative_to(SRC)}:{node.lineno}: assert")
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if getattr(exc, "id", None) == "SystemExit":
                    bad.append(f"{f.relative_to(SRC)}:{node.lineno}: raise SystemExit")
    assert bad == []


def test_user_error_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    (tmp_path / "params.yaml").write_text("seed: -1\n")
    r = subprocess.run([sys.executable, "-m", "recipematch", "corpus", "--root", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    err = [line for line in r.stderr.splitlines() if line.startswith("recipematch: error:")]
    assert len(err) == 1 and "params.yaml" in err[0], r.stderr
    r = subprocess.run([sys.executable, "-m", "recipematch", "corpus", "--root", str(tmp_path), "--debug"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_tracking_of_a_dvc_temp_experiment_lands_in_the_project(tmp_path):
    """`dvc exp run --temp/--queue` runs stages in <project>/.dvc/tmp/exps/<x>/: a relative
    sqlite store must resolve to the project's own mlflow.db, not the throw-away copy's."""
    from recipematch.pipeline.door import Layout
    from recipematch.pipeline.inputs import mlflow_artifacts, mlflow_uri, project_root

    copy = tmp_path / "proj" / ".dvc" / "tmp" / "exps" / "tmpab12"
    copy.mkdir(parents=True)
    lay = Layout(copy)
    assert project_root(lay) == (tmp_path / "proj").resolve()
    assert mlflow_uri("sqlite:///mlflow.db", lay) == f"sqlite:///{(tmp_path / 'proj' / 'mlflow.db').resolve()}"
    assert mlflow_artifacts(lay) == (tmp_path / "proj" / "mlruns").resolve().as_uri()
    plain = Layout(tmp_path / "proj")
    assert mlflow_uri("sqlite:///mlflow.db", plain) == mlflow_uri("sqlite:///mlflow.db", lay)
    assert mlflow_uri("http://127.0.0.1:5000", lay) == "http://127.0.0.1:5000"
