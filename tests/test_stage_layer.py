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
    """Stages read params.yaml only at their door; the one other reader is the audit's setup,
    which is not a stage: it checks the user's template before writing a new project's
    params.yaml, and it may not import the stage layer (no upward import). ``deps --write``
    checks params through the door (``check_params_whole``)."""
    assert sorted({h.split(":")[0] for h in _calls("load_params")}) == ["audit/project.py", "pipeline/door.py"]
    assert [h.split(":")[0] for h in _calls("load_yaml")] == ["config/__init__.py"]


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

    from conftest import stage_args

    (tmp_path / "params.yaml").write_text("seed: -1\n")
    r = subprocess.run([sys.executable, "-m", "recipematch", "corpus", "--root", str(tmp_path), *stage_args("corpus")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    err = [line for line in r.stderr.splitlines() if line.startswith("recipematch: error:")]
    assert len(err) == 1 and "params.yaml" in err[0], r.stderr
    r = subprocess.run([sys.executable, "-m", "recipematch", "corpus", "--root", str(tmp_path), "--debug",
                        *stage_args("corpus")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_tracking_of_a_dvc_temp_experiment_lands_in_the_project(tmp_path):
    """`dvc exp run --temp/--queue` runs stages in <project>/.dvc/tmp/exps/<x>/: a relative
    sqlite store must resolve to the project's own mlflow.db, not the throw-away copy's."""
    from recipematch.pipeline.inputs import mlflow_artifacts, mlflow_uri, project_root

    copy = tmp_path / "proj" / ".dvc" / "tmp" / "exps" / "tmpab12"
    copy.mkdir(parents=True)
    lay = copy
    assert project_root(lay) == (tmp_path / "proj").resolve()
    assert mlflow_uri("sqlite:///mlflow.db", lay) == f"sqlite:///{(tmp_path / 'proj' / 'mlflow.db').resolve()}"
    assert mlflow_artifacts(lay) == (tmp_path / "proj" / "mlruns").resolve().as_uri()
    plain = tmp_path / "proj"
    assert mlflow_uri("sqlite:///mlflow.db", plain) == mlflow_uri("sqlite:///mlflow.db", lay)
    assert mlflow_uri("http://127.0.0.1:5000", lay) == "http://127.0.0.1:5000"


def _dvc_stages(repo_root):
    import yaml

    doc = yaml.safe_load((repo_root / "dvc.yaml").read_text())
    params = yaml.safe_load((repo_root / "params.yaml").read_text())
    out = {}
    for name, st in doc["stages"].items():
        items = [None]
        if "matrix" in st:
            key = st["matrix"]["arm"] if "arm" in st["matrix"] else st["matrix"]["prompt"]
            path = key.strip("${}").split(".")
            vals = params
            for part in path:
                vals = vals[part]
            items = list(vals)
        for it in items:
            def sub(x):
                return x if it is None else x.replace("${item.arm}", it).replace("${item.prompt}", it)

            deps = [sub(d) for d in st.get("deps", [])]
            outs = [sub(o if isinstance(o, str) else next(iter(o))) for o in st.get("outs", [])]
            outs += [sub(m if isinstance(m, str) else next(iter(m))) for m in st.get("metrics", [])]
            ps = [p if isinstance(p, str) else next(iter(p)) for p in st.get("params", [])]
            out[name if it is None else f"{name}@{it}"] = {"deps": deps, "outs": outs, "params": ps}
    return out


def _reruns(stages, key):
    """Stages DVC reruns when params key ``key`` changes: those declaring it (or a parent
    section), then everything downstream of their outputs."""
    def declares(ps):
        return any(key == p or key.startswith(p + ".") for p in ps)

    hit = {n for n, s in stages.items() if declares(s["params"])}
    changed = True
    while changed:
        changed = False
        outs = [o for n in hit for o in stages[n]["outs"]]
        for n, s in stages.items():
            if n not in hit and any(d == o or d.startswith(o.rstrip("/") + "/") or o.startswith(d.rstrip("/") + "/")
                                    for d in s["deps"] for o in outs):
                hit.add(n)
                changed = True
    return hit


def test_training_seed_reruns_training_and_scoring_but_no_pair_building(repo_root):
    """`dvc exp run -S train.seed=43` retrains and re-scores without rebuilding any pair file
    or repeating any LLM call (one role per seed, issue: the paper's seeds 42-49 are training
    seeds; `seed` is the pair-building seed)."""
    stages = _dvc_stages(repo_root)
    reruns = _reruns(stages, "train.seed")
    pair_building = {n for n in stages if n.split("@")[0] in ("corpus", "evalsets", "gates", "verified",
                                                            "recordings", "llm", "specs")}
    assert not reruns & pair_building, reruns & pair_building
    for arm in ("verified", "recipe"):
        assert {f"cells@{arm}", f"validate@{arm}", f"train@{arm}", f"evaluate@{arm}"} <= reruns
    assert {"stats", "report"} <= reruns
    assert "evaluate_base" not in reruns and "evaluate_bm25" not in reruns
    # the pair-building seed, by contrast, rebuilds the CAS and LLM pairs
    assert {"verified", "llm@d1_recipe"} <= _reruns(stages, "seed")


def test_a_device_this_machine_lacks_is_refused_naming_the_key(tmp_path, repo_root):
    import shutil
    import subprocess
    import sys

    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal cannot be shown here")
    from recipematch.errors import RecipematchError
    from recipematch.pipeline.door import check_device

    with pytest.raises(RecipematchError, match="devices.evaluate: cuda requested but this machine has no CUDA"):
        check_device("devices.evaluate", "cuda")
    check_device("devices.evaluate", "cpu")
    text = (repo_root / "params.yaml").read_text().replace("  evaluate: cpu ", "  evaluate: cuda ")
    (tmp_path / "params.yaml").write_text(text)
    shutil.copytree(repo_root / "stages", tmp_path / "stages")
    from conftest import stage_args

    r = subprocess.run([sys.executable, "stages/evaluate_base.py", *stage_args("evaluate_base")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "devices.evaluate: cuda requested" in r.stderr


def test_docstrings_cite_the_paper_not_unshipped_documents():
    """The repository does not ship SPEC.md or STYLE.md: code cites the paper instead."""
    import re

    bad = []
    for f in sorted(SRC.rglob("*.py")):
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\bSPEC\b|SPEC §|\bSTYLE\b", line):
                bad.append(f"{f.relative_to(SRC)}:{i}")
    assert bad == []
