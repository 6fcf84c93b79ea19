"""Paths written once, in ``dvc.yaml``'s ``cmd``: each stage gets every path it reads or writes
as a ``--<role> PATH`` option, and the command agrees with the stage's deps and outputs (DVC's
own resolver expands the stages with ``params.yaml``; :func:`command_vs_stage`):

- a path the stage writes is exactly one of its ``outs`` (``metrics:``/``plots:`` for a
  metrics or plot role), or scratch work outside DVC (``cache/``); every output is so passed;
- a path it reads is a dep or inside one (or a folder listed in :data:`HOLDER_ROLES`);
- every dep that is not code is read through an option, or is (or holds) a path params name;
- the door refuses a path outside the project, the root itself, or a written path that
  overlaps another of the stage's paths or lies in DVC-tracked data.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from conftest import REPO, stage_paths
from recipematch.errors import RecipematchError
from recipematch.pipeline.door import ROLES, StagePaths
from recipematch.pipeline.graph import resolve, stage_options, under

#: deps no command passes, each with the reason it is a dep
NOT_READ_DEPS = {
    ("style", "artifacts/eval"): "runs after the evaluate stages, whose embedding cache it reuses; reads nothing there",
    ("regen", "data"): "regen.<name>.rows (source: rows) is a released file under data/, named by params",
}
#: places outside DVC a command may pass (caches and scratch work that resumes an interrupted run)
OUTSIDE_DVC = ("cache",)


def _near(path: str, others) -> bool:
    """``path`` is one of ``others``, inside one, or holds one."""
    return any(under(path, o) or under(o, path) for o in others)


@pytest.fixture(scope="module")
def project():
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    return resolve(REPO), params


def _param_paths(params) -> set[str]:
    data = params.get("data") or {}
    folders = {ev["folder"] for ev in (params.get("evaluations") or {}).values()}
    copies = {e["copy"] for e in (params.get("external") or {}).values()}  # external@<name>'s input
    rows = {a["rows"] for a in (params.get("attacks") or {}).values()}  # attack@<name>'s input
    files = {(params.get("backtranslate") or {}).get("model_dir"), (params.get("remedies") or {}).get("replay_file")}
    return folders | copies | rows | {v for v in (data.get("path"), data.get("retrieve"), *files) if v}


#: written roles whose path is a dvc.yaml `metrics:` file / `plots:` file; other written roles are `outs:`
METRIC_ROLES = {"metrics", "eval_metrics", "train_metrics", "summary"}
PLOT_ROLES = {"plot"}
#: read roles that name a folder holding the deps the stage reads (listed one by one in dvc.yaml)
HOLDER_ROLES = {"release": "the peer release: dvc.yaml lists the release files each stage reads",
                "metrics_dir": "the report reads stages' metrics; its deps list each file and folder it reads "
                               "(test_the_report_declares_every_metrics_file_it_reads)"}


def _moved(project):
    stages, _ = project
    out = []
    for name, st in stages.items():
        main, opts = stage_options(st)
        if main.path_roles:
            out.append((name, st, {r: Path(opts[f"path_{r}"]).as_posix() for r in main.path_roles}))
    return out


def command_vs_stage(st, params) -> list[str]:
    """Every disagreement of stage ``st``'s command with its deps and outputs, one line each."""
    main, opts = stage_options(st)
    paths = {r: Path(opts[f"path_{r}"]).as_posix() for r in main.path_roles}
    bad = []
    for role, p in paths.items():
        where = f"{st.name}: --{role.replace('_', '-')} {p}"
        if role in main.writes:
            kind, allowed = (("metrics", st.metrics) if role in METRIC_ROLES else ("plots", st.plots)
                             if role in PLOT_ROLES else ("outs", st.outs))
            if role == "scratch":
                if not any(under(p, o) for o in OUTSIDE_DVC):
                    bad.append(f"{where}: scratch work lies outside DVC ({OUTSIDE_DVC})")
            elif p not in allowed:
                bad.append(f"{where}: written, but not one of the stage's {kind} {list(allowed)}")
        elif not (any(under(p, d) for d in st.deps) or any(under(p, o) for o in OUTSIDE_DVC)
                  or (role in HOLDER_ROLES and any(under(d, p) for d in st.deps))):
            bad.append(f"{where}: read, but neither a dep nor inside one")
    written = {p for r, p in paths.items() if r in main.writes}
    bad += [f"{st.name}: writes {o}, which its command passes as no written path" for o in st.written
            if o not in written]
    named = _param_paths(params)
    for d in st.deps:
        if d.startswith(("src/", "stages/")):
            continue
        if not (any(under(d, p) for r, p in paths.items() if r not in main.writes) or _near(d, named)
                or (st.name.split("@")[0], d) in NOT_READ_DEPS):
            bad.append(f"{st.name}: dep {d} is passed by no read option and named by no param")
    return bad


def test_every_stage_takes_its_paths_from_its_command(project):
    stages, _ = project
    assert len(_moved(project)) == len(stages) > 30


def test_every_command_agrees_with_its_deps_and_outputs(project):
    stages, params = project
    assert [line for st in stages.values() for line in command_vs_stage(st, params)] == []


@pytest.mark.parametrize(("stage", "old", "new", "words"), [
    ("corpus", "--out artifacts/corpus", "--out artifacts/elsewhere", "--out artifacts/elsewhere: written, but not"),
    ("evaluate_base", "--eval artifacts/eval/base", "--eval artifacts/eval", "--eval artifacts/eval: written"),
    ("replay_pool", "--out artifacts/replay", "--out artifacts", "--out artifacts: written"),
    ("replay_pool", "--out artifacts/replay --metrics metrics/replay.json",
     "--out metrics/replay.json --metrics artifacts/replay", "not one of the stage's metrics"),
    ("train@recipe", "--cells artifacts/cells/recipe", "--cells artifacts/cells", "--cells artifacts/cells: read"),
    ("gates", "--evalsets artifacts/evalsets", "--evalsets artifacts/gates", "--evalsets artifacts/gates: read"),
])
def test_a_command_that_disagrees_with_its_stage_is_named(project, stage, old, new, words):
    """The breaker's edits of dvc.yaml: each passed the first version of these checks."""
    stages, params = project
    st = stages[stage]
    assert old in st.cmd
    wrong = dataclasses.replace(st, cmd=st.cmd.replace(old, new))
    assert any(words in line for line in command_vs_stage(wrong, params)), command_vs_stage(wrong, params)


def test_stage_paths_come_from_the_command(tmp_path):
    lay = stage_paths(tmp_path, "gates")
    assert lay.roles() == {"corpus": tmp_path.resolve() / "artifacts/corpus",
                           "evalsets": tmp_path.resolve() / "artifacts/evalsets",
                           "out": tmp_path.resolve() / "artifacts/gates",
                           "metrics": tmp_path.resolve() / "metrics/gates.json"}


def test_a_role_the_command_does_not_pass_is_named(tmp_path):
    lay = StagePaths("gates", tmp_path, {"out": tmp_path / "g"})
    assert lay.out == tmp_path / "g"
    with pytest.raises(RecipematchError, match=r"stage gates: its command passes no --pair-file path"):
        lay.pair_file  # noqa: B018 - the read is the test
    with pytest.raises(AttributeError):
        lay.out = tmp_path


def test_every_role_is_described():
    assert all(isinstance(v, str) and v for v in ROLES.values())
    from recipematch.pipeline.door import path_option

    with pytest.raises(ValueError, match="unknown path role"):
        path_option("no_such_role")


def test_a_stage_run_without_its_paths_is_a_usage_error(tmp_path):
    from recipematch.pipeline.corpus import main

    r = CliRunner().invoke(main, ["--root", str(tmp_path)])
    assert r.exit_code == 2 and "Missing option '--" in r.output
    assert isinstance(main, click.Command)


def test_an_unknown_stage_is_named(tmp_path):
    with pytest.raises(RecipematchError, match="dvc.yaml has no stage 'nope'"):
        stage_paths(tmp_path, "nope")


def test_every_pair_file_a_stage_writes_is_where_its_readers_look(project):
    """A writer's ``--pair-file`` (verified, llm@, attack@) and judge2's ``--cells-file`` are the
    files the cells stages find by key (:func:`recipematch.pipeline.inputs.pair_path`)."""
    from recipematch.pipeline.inputs import pair_path

    stages, _ = project
    moved = {name: paths for name, _, paths in _moved(project)}
    cells = next(paths for name, paths in moved.items() if name.startswith("cells@"))
    keys = {"verified": "cas"}
    checked = 0
    for name, paths in moved.items():
        group, _, item = name.partition("@")
        if "pair_file" in paths and group != "judge2":
            assert paths["pair_file"] == pair_path(cells["pairs"], keys.get(group, item)).as_posix(), name
            checked += 1
        if "cells_file" in paths:
            assert paths["cells_file"] == pair_path(cells["judge2_cells"], item).as_posix(), name
            assert paths["pair_file"] == pair_path(cells["pairs"], item).as_posix(), name  # the file it judges
            checked += 1
    assert checked >= 1 + 2 + 2 + 3  # verified, two llm@, two judge2@, three attack@


@pytest.mark.parametrize(("given", "writes", "match"), [
    ({"out": "", "metrics": "m.json"}, ("out", "metrics"), r"--out '' must be a path inside the project"),
    ({"out": "."}, ("out",), r"--out '\.' must be a path inside the project"),
    ({"out": "../elsewhere"}, ("out",), r"--out '\.\./elsewhere' must be a path inside the project"),
    ({"out": "/tmp/x"}, ("out",), r"--out '/tmp/x' must be a path inside the project"),
    ({"eval": "artifacts/eval", "models": "artifacts/eval/x"}, ("eval",),
     r"--eval 'artifacts/eval' overlaps --models 'artifacts/eval/x'"),
    ({"out": "metrics/x.json", "metrics": "metrics/x.json"}, ("out", "metrics"), r"overlaps"),
    ({"out": "data/impliret"}, ("out",), r"lies inside data, which DVC tracks as data \(data\.dvc\)"),
    ({"out": ".git/x"}, ("out",), r"lies inside \.git"),
])
def test_a_bad_path_option_is_refused_before_any_work(tmp_path, given, writes, match):
    from recipematch.pipeline.door import check_stage_paths

    (tmp_path / "data.dvc").write_text("outs: []\n")
    with pytest.raises(RecipematchError, match=match):
        check_stage_paths("s", tmp_path, given, writes)
    check_stage_paths("s", tmp_path, {"out": "artifacts/x", "corpus": "artifacts/corpus"}, ("out",))  # apart: fine


def test_a_stage_never_writes_over_what_git_tracks(tmp_path):
    """Breaker: a hand-run ``--metrics README.md`` replaced the README, and ``--out src`` would
    have replaced the code: a metrics file is a .json file, and any other written path holds no
    file git tracks. A committed metrics file (git tracks it too) is still written."""
    import subprocess

    from recipematch.pipeline.door import check_stage_paths

    for f in ("README.md", "src/pkg/a.py", "metrics/corpus.json"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("x")
    check_stage_paths("s", tmp_path, {"out": "src"}, ("out",))  # no git work tree yet: not checked
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "README.md", "src", "metrics"], check=True)
    with pytest.raises(RecipematchError, match=r"--metrics 'README.md' must be a \.json file"):
        check_stage_paths("s", tmp_path, {"out": "artifacts/x", "metrics": "README.md"}, ("out", "metrics"))
    with pytest.raises(RecipematchError, match=r"--out 'src' is or holds 'src/pkg/a.py', which git tracks"):
        check_stage_paths("s", tmp_path, {"out": "src"}, ("out",))
    with pytest.raises(RecipematchError, match=r"--pair-file 'README.md' is or holds 'README.md'"):
        check_stage_paths("s", tmp_path, {"pair_file": "README.md"}, ("pair_file",))
    check_stage_paths("s", tmp_path, {"out": "artifacts/corpus", "metrics": "metrics/corpus.json"}, ("out", "metrics"))
    # breaker, round two: a tracked JSON file outside metrics/ (a rubric, a test fixture) was overwritten
    (tmp_path / "src" / "pkg" / "rubric.json").write_text("{}")
    subprocess.run(["git", "-C", str(tmp_path), "add", "src"], check=True)
    with pytest.raises(RecipematchError, match=r"--metrics 'src/pkg/rubric.json' is or holds 'src/pkg/rubric.json'"):
        check_stage_paths("s", tmp_path, {"out": "artifacts/x", "metrics": "src/pkg/rubric.json"}, ("out", "metrics"))
    # ... and a symlink inside the project reached the code
    (tmp_path / "tmpq").mkdir()
    (tmp_path / "tmpq" / "lnk").symlink_to("../src/pkg")
    with pytest.raises(RecipematchError, match=r"--out 'tmpq/lnk' reaches src/pkg through a symlink"):
        check_stage_paths("s", tmp_path, {"out": "tmpq/lnk"}, ("out",))
    outside = tmp_path.parent / f"{tmp_path.name}_disk"
    outside.mkdir()
    (tmp_path / "cache").symlink_to(outside)  # a cache on another disk is fine
    check_stage_paths("s", tmp_path, {"scratch": "cache/llm"}, ("scratch",))


def test_a_symlink_loop_and_a_broken_git_are_named(tmp_path):
    """Breaker, round three: a symlink loop gave a RuntimeError traceback, and a broken .git
    (git: "not a git repository") skipped the tracked-file check."""
    import subprocess

    from recipematch.pipeline.door import check_stage_paths

    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "loop").symlink_to(tmp_path / "artifacts" / "loop")
    with pytest.raises(RecipematchError, match=r"--out 'artifacts/loop' runs into a symlink loop"):
        check_stage_paths("s", tmp_path, {"out": "artifacts/loop"}, ("out",))
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".git" / "HEAD").write_text("garbage\n")
    with pytest.raises(RecipematchError, match=r"cannot ask git which files under src it tracks"):
        check_stage_paths("s", tmp_path, {"out": "src"}, ("out",))


def test_a_git_that_cannot_answer_is_an_error_not_a_skipped_check(tmp_path, monkeypatch):
    import subprocess

    from recipematch.pipeline import door

    def refused(*a, **k):
        return subprocess.CompletedProcess(a, 128, b"", b"fatal: detected dubious ownership in repository\n")

    monkeypatch.setattr(door.subprocess, "run", refused)
    with pytest.raises(RecipematchError, match=r"cannot ask git which files under src it tracks: fatal: detected dubious"):
        door.check_stage_paths("s", tmp_path, {"out": "src"}, ("out",))

    def not_a_repo(*a, **k):
        return subprocess.CompletedProcess(a, 128, b"", b"fatal: not a git repository (or any parent)\n")

    monkeypatch.setattr(door.subprocess, "run", not_a_repo)
    door.check_stage_paths("s", tmp_path, {"out": "src"}, ("out",))  # no work tree: nothing is tracked


def test_a_stage_given_the_project_root_as_its_output_deletes_nothing(tmp_path):
    """Before: ``external --out ''`` replaced the whole project with its build and exited 0."""
    import shutil

    from recipematch.pipeline.external import main

    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    keep = tmp_path / "keep.txt"
    keep.write_text("mine")
    r = CliRunner().invoke(main, ["--root", str(tmp_path), "--name", "impliret", "--out", "", "--metrics", "m.json"])
    assert r.exit_code == 2 and "--out '.' must be a path inside the project" in r.output  # click reads '' as .
    assert keep.read_text() == "mine" and (tmp_path / "params.yaml").is_file()


def test_the_report_declares_every_metrics_file_it_reads(project):
    """The report stage reads, under its --metrics-dir, exactly the files and folders its module
    lists; each is a dep in dvc.yaml, so a changed count reruns the report."""
    from recipematch.pipeline import report

    stages, _ = project
    st = stages["report"]
    _, opts = stage_options(st)
    m = Path(opts["path_metrics_dir"]).as_posix()
    wanted = [f"{m}/{n}.json" for n in (*report.READS_FILES, *report.COUNTS_FILES)]
    wanted += [f"{m}/{n}" for n in report.READS_FOLDERS]
    assert [w for w in wanted if w not in st.deps] == []
    assert not [d for d in st.deps if under(d, m) and d not in wanted], "a metrics dep the report does not read"


def test_a_mistyped_evals_option_is_named_not_blamed_on_an_evaluate_stage(tmp_path):
    """stats and hits read scored frames through one function: a --evals folder that does not
    exist, or holds no folder of the model, names the option (and what the folder holds); a
    missing frame in the model's folder names the model's evaluate stage."""
    from recipematch.errors import RecipematchError
    from recipematch.pipeline.scored import scored_frame

    with pytest.raises(RecipematchError, match=r"^--evals .*evalz: no such folder; check the path"):
        scored_frame(tmp_path / "evalz", "recipe", "tier_d1")
    (tmp_path / "evalfile").write_text("x")
    with pytest.raises(RecipematchError, match=r"^--evals .*evalfile: a file, not the folder"):
        scored_frame(tmp_path / "evalfile", "recipe", "tier_d1")
    (tmp_path / "wrong" / "scratch").mkdir(parents=True)  # breaker: an existing folder that is not --evals
    with pytest.raises(RecipematchError, match=r"^--evals .*wrong: no folder 'recipe' \(it holds 'scratch'\); check the path"):
        scored_frame(tmp_path / "wrong", "recipe", "tier_d1")
    (tmp_path / "eval" / "recipe").mkdir(parents=True)
    with pytest.raises(RecipematchError, match=r"tier_d1.parquet does not exist: rerun the evaluate stage of 'recipe'"):
        scored_frame(tmp_path / "eval", "recipe", "tier_d1")
    (tmp_path / "eval" / "recipe" / "tier_d1.parquet").mkdir()  # breaker, round three: a folder was returned
    with pytest.raises(RecipematchError, match=r"tier_d1.parquet is a folder, not a scored frame"):
        scored_frame(tmp_path / "eval", "recipe", "tier_d1")
    (tmp_path / "eval" / "recipe" / "tier_d1.parquet").rmdir()
    (tmp_path / "eval" / "base").symlink_to(tmp_path / "gone")
    with pytest.raises(RecipematchError, match=r"'base' is a symlink to nothing"):
        scored_frame(tmp_path / "eval", "base", "tier_d1")
    (tmp_path / "eval" / "recipe" / "tier_d1.parquet").write_bytes(b"x")
    assert scored_frame(tmp_path / "eval", "recipe", "tier_d1") == tmp_path / "eval" / "recipe" / "tier_d1.parquet"


def test_every_cli_command_says_what_it_does():
    """`recipematch --help` gives every command a description (a stage's comes from its run
    function's docstring)."""
    from recipematch.cli import main

    assert not [n for n, c in main.commands.items() if not (c.help or "").strip()]


def test_every_dvc_yaml_stage_passes_the_door_against_the_declared_outputs():
    """The check below refuses nothing ``dvc repro`` runs: each stage's own paths pass it."""
    from recipematch.config import load_params
    from recipematch.pipeline.door import check_declared_outputs, check_stage_paths
    from recipematch.pipeline.graph import project_stages

    stages = project_stages(REPO, load_params(REPO / "params.yaml"), deps=True)
    assert len(stages) >= 30 and "mt_models" in stages["backtranslate"].deps
    for st in stages.values():
        main, opts = stage_options(st)
        given = {r: Path(opts[f"path_{r}"]) for r in main.path_roles}
        check_stage_paths(st.name, REPO, given, main.writes)
        check_declared_outputs(st.module, REPO, given, main.writes, stages,
                               options={k: v for k, v in opts.items() if not k.startswith("path_")})


@pytest.mark.parametrize(("module", "given", "writes", "match"), [
    ("recipematch.pipeline.external", {"out": "artifacts"}, ("out",), r"--out 'artifacts' holds artifacts/\S+"),
    ("recipematch.pipeline.external", {"out": "models"}, ("out",), r"--out 'models' holds models/\S+"),
    ("recipematch.pipeline.external", {"out": "cache"}, ("out",), r"--out 'cache' holds cache/\S+, what dvc.yaml's "
     r"stage \S+ passes"),
    ("recipematch.pipeline.external", {"out": "mine"}, ("out",), r"is the project's mine, which holds no dvc.yaml stage's output"),
    ("recipematch.pipeline.corpus", {"out": "artifacts/x", "metrics": "metrics/stats.json"}, ("out", "metrics"),
     r"--metrics 'metrics/stats.json' is metrics/stats.json, which dvc.yaml's stage stats writes"),
    ("recipematch.pipeline.external", {"out": "artifacts/corpus/sub"}, ("out",),
     r"--out 'artifacts/corpus/sub' lies inside artifacts/corpus, which dvc.yaml's stage corpus writes"),
])
def test_a_stage_never_writes_over_another_stages_declared_output(tmp_path, module, given, writes, match):
    """Breaker: ``external --out artifacts`` (or ``models``, ``cache``) deleted every stage's
    work and exited 0, and ``--metrics metrics/stats.json`` replaced another stage's file:
    the door now reads what ``dvc.yaml`` declares."""
    from recipematch.config import load_params
    from recipematch.pipeline.door import check_declared_outputs
    from recipematch.pipeline.graph import project_stages

    stages = project_stages(REPO, load_params(REPO / "params.yaml"))
    (tmp_path / "mine").mkdir()
    with pytest.raises(RecipematchError, match=match):
        check_declared_outputs(module, tmp_path, {k: Path(v) for k, v in given.items()}, writes, stages)
    # a folder dvc.yaml does not name (a hand run into a new place, a scratch folder) stays fine
    check_declared_outputs(module, tmp_path, {"out": Path("artifacts/hand_run_x")}, ("out",), stages)
    check_declared_outputs(module, tmp_path, {"scratch": Path("cache/mine")}, ("scratch",), stages)


@pytest.mark.parametrize(("module", "options", "given", "writes", "match"), [
    ("recipematch.pipeline.backtranslate", {}, {"out": "mt_models/nllb-200-distilled-600M"}, ("out",),
     r"lies inside mt_models, a dep of dvc.yaml's stage backtranslate, and no stage's output"),
    ("recipematch.pipeline.backtranslate", {}, {"out": "cache/cas"}, ("out",),
     r"--out 'cache/cas' is cache/cas, what dvc.yaml's stage verified passes as --scratch"),
    ("recipematch.pipeline.external", {}, {"out": "cache/embeddings/x"}, ("out",),
     r"lies inside cache/embeddings, what dvc.yaml's stage \S+ passes as --cache"),
    ("recipematch.pipeline.llm", {"prompt": "d1_recipe"}, {"out": "cache/llm"}, ("out",),
     r"is cache/llm, what dvc.yaml's stage llm@\w+ passes as --scratch"),
    ("recipematch.pipeline.validate", {"arm": "recipe"},
     {"out": "artifacts/validated/verified.json", "metrics": "metrics/validate/verified.json"}, ("out", "metrics"),
     r"--out 'artifacts/validated/verified.json' is artifacts/validated/verified.json, which dvc.yaml's stage "
     r"validate@verified writes"),
    ("recipematch.pipeline.llm", {"prompt": "d1_recipe"}, {"out": "artifacts/llm/d4_restatement"}, ("out",),
     r"which dvc.yaml's stage llm@d4_restatement writes"),
])
def test_a_stage_never_writes_into_an_input_or_a_matrix_siblings_output(module, options, given, writes, match):
    """Breaker, round five: ``backtranslate --out mt_models/...`` deleted the translation model
    (a dep), ``--out cache/cas`` wiped verified's resumable scratch, and ``validate --arm recipe``
    could replace ``validate@verified``'s files (only other modules were checked)."""
    from recipematch.config import load_params
    from recipematch.pipeline.door import check_declared_outputs
    from recipematch.pipeline.graph import project_stages

    stages = project_stages(REPO, load_params(REPO / "params.yaml"), deps=True)
    with pytest.raises(RecipematchError, match=match):
        check_declared_outputs(module, REPO, {k: Path(v) for k, v in given.items()}, writes, stages, options=options)
    # the stage's own paths pass: the matrix member the options pick, verified's own scratch
    arm = {"arm": "verified"} if "arm" in options else {"prompt": "d4_restatement"}
    if "artifacts/" in str(given.get("out")):
        check_declared_outputs(module, REPO, {k: Path(v) for k, v in given.items()}, writes, stages, options=arm)
    check_declared_outputs("recipematch.pipeline.verified", REPO, {"scratch": Path("cache/cas")}, ("scratch",), stages)
    check_declared_outputs("recipematch.pipeline.llm", REPO, {"scratch": Path("cache/llm")}, ("scratch",), stages,
                           options={"prompt": "d1_recipe"})  # the llm@ stages' shared scratch


def test_a_matrix_items_dep_and_a_folder_dvc_yaml_never_names_are_protected(tmp_path):
    """Breaker, round six: a dep spelled ``${item.copy}`` (an external set's source copy) was not
    protected, so ``report --out ext/impliret`` deleted it; and ``--out mlartifacts/1`` (MLflow's
    artifact store, a folder no stage names) was replaced whole."""
    from recipematch.config import load_params
    from recipematch.pipeline.door import check_declared_outputs
    from recipematch.pipeline.graph import project_stages

    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    assert "copy: data/impliret " in text
    (tmp_path / "params.yaml").write_text(text.replace("copy: data/impliret ", "copy: ext/impliret "), encoding="utf-8")
    stages = project_stages(REPO, load_params(tmp_path / "params.yaml"), deps=True)
    report = "recipematch.pipeline.report"
    with pytest.raises(RecipematchError, match=r"--out 'ext/impliret' is ext/impliret, a dep of dvc.yaml's stage "
                                               r"external@impliret"):
        check_declared_outputs(report, tmp_path, {"out": Path("ext/impliret")}, ("out",), stages)
    (tmp_path / "mlartifacts" / "1").mkdir(parents=True)
    with pytest.raises(RecipematchError, match=r"--out 'mlartifacts/1' lies inside the project's mlartifacts, "
                                               r"which holds no dvc.yaml stage's output"):
        check_declared_outputs(report, tmp_path, {"out": Path("mlartifacts/1")}, ("out",), stages)
    check_declared_outputs(report, tmp_path, {"out": Path("newplace/1")}, ("out",), stages)  # a new folder is fine


@pytest.mark.parametrize(("given", "options", "match"), [
    ({"out": "mlflow.db"}, {}, r"--out 'mlflow.db' is the project's mlflow.db, which holds no dvc.yaml stage's output"),
    ({"out": "src/recipematch.egg-info"}, {}, r"lies inside the project's src, which holds no"),
    ({"out": "cache/x"}, {}, r"lies inside the project's cache, which holds no"),
    ({"scratch": "cache/train-tmp/cell"}, {"arm": "recipe"}, r"is cache/train-tmp/cell, what dvc.yaml's stage train@cell "
                                                              r"passes as --scratch"),
    ({"scratch": "cache/train-tmp"}, {"arm": "recipe"}, r"holds cache/train-tmp/\w+, what dvc.yaml's stage train@"),
])
def test_a_file_or_folder_the_project_keeps_outside_dvc_is_never_written(tmp_path, given, options, match):
    """Breaker, round seven: ``--out mlflow.db`` replaced MLflow's database with a folder, an
    egg-info folder under ``src`` was accepted, and a matrix sibling's scratch gave a traceback."""
    from recipematch.config import load_params
    from recipematch.pipeline.door import check_declared_outputs
    from recipematch.pipeline.graph import project_stages

    stages = project_stages(REPO, load_params(REPO / "params.yaml"), deps=True)
    (tmp_path / "mlflow.db").write_text("runs")
    for folder in ("src/recipematch.egg-info", "cache/cas"):
        (tmp_path / folder).mkdir(parents=True)
    module = "recipematch.pipeline.train" if options else "recipematch.pipeline.report"
    with pytest.raises(RecipematchError, match=match):
        check_declared_outputs(module, tmp_path, {k: Path(v) for k, v in given.items()}, tuple(given), stages,
                               options=options)
    # the stage's own scratch under the same folder passes
    check_declared_outputs("recipematch.pipeline.train", tmp_path, {"scratch": Path("cache/train-tmp/recipe")},
                           ("scratch",), stages, options={"arm": "recipe"})


def test_a_symlinked_output_that_holds_the_project_is_refused(tmp_path):
    """Breaker, round seven: ``reports -> ..`` passed the door, and the report replaced the
    folder above the project (the project with it)."""
    from recipematch.pipeline.door import check_stage_paths

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "reports").symlink_to("..")
    with pytest.raises(RecipematchError, match=r"--out 'reports' reaches \S+ through a symlink, a folder that holds "
                                               r"the project"):
        check_stage_paths("report", tmp_path / "proj", {"out": "reports"}, ("out",))


def test_a_cmd_with_a_shell_comment_or_a_stage_of_the_users_own_runs(tmp_path):
    """Breaker, round six: ``# don't edit`` after a cmd (the shell drops it) gave every stage a
    ``No closing quotation`` traceback, and a stage of the user's own (``bash scripts/x.sh``)
    made every stage refuse to run."""
    from recipematch.config import load_params
    from recipematch.pipeline.door import check_declared_outputs
    from recipematch.pipeline.graph import params_mapping, resolve

    text = (REPO / "dvc.yaml").read_text(encoding="utf-8")
    assert "      --metrics metrics/corpus.json\n" in text
    text = text.replace("      --metrics metrics/corpus.json\n", "      --metrics metrics/corpus.json  # don't edit\n", 1)
    text = text.replace("stages:\n", "stages:\n  mine:\n    cmd: bash scripts/x.sh\n    outs:\n      - mine_out\n", 1)
    (tmp_path / "dvc.yaml").write_text(text, encoding="utf-8")
    stages = resolve(tmp_path, params=params_mapping(load_params(REPO / "params.yaml")), deps=True)
    assert stages["corpus"].module == "recipematch.pipeline.corpus" and stages["corpus"].args[-1] == "metrics/corpus.json"
    check_declared_outputs("recipematch.pipeline.corpus", tmp_path, {"out": Path("artifacts/corpus"),
                           "metrics": Path("metrics/corpus.json")}, ("out", "metrics"), stages)
    with pytest.raises(RecipematchError, match=r"is mine_out, which dvc.yaml's stage mine writes"):
        check_declared_outputs("recipematch.pipeline.corpus", tmp_path, {"out": Path("mine_out")}, ("out",), stages)
    (tmp_path / "dvc.yaml").write_text("stages:\n  s:\n    cmd: python stages/corpus.py --out 'a\n", encoding="utf-8")
    with pytest.raises(RecipematchError, match=r"dvc.yaml stage s: cmd cannot be split as the shell does"):
        resolve(tmp_path, params={})["s"].module


@pytest.mark.parametrize("kind", ["link", "file"])
def test_an_output_that_is_a_link_or_a_file_is_replaced_without_leftovers(tmp_path, kind):
    """Breaker, round six: ``reports`` as a symlink to a folder on another disk (which the door
    allows), or as a plain file, failed with "Not a directory" and left ``reports.partial``."""
    from recipematch.io import building_dir

    out = tmp_path / "reports"
    if kind == "link":
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "old.md").write_text("old")
        out.symlink_to(tmp_path / "elsewhere")
    else:
        out.write_text("a file")
    with building_dir(out) as tmp:
        (tmp / "report.md").write_text("new")
    assert (out / "report.md").read_text() == "new" and not (out / "old.md").exists()
    assert out.is_symlink() == (kind == "link") and not list(tmp_path.glob("*.partial"))


def _project_copy(root: Path) -> None:
    import shutil

    root.mkdir(parents=True, exist_ok=True)
    for f in ("params.yaml", "dvc.yaml"):
        shutil.copy(REPO / f, root / f)


def test_a_root_inside_a_project_is_refused(tmp_path):
    """Breaker, round five: ``--root artifacts`` (a folder of the project, with no dvc.yaml of its
    own) skipped the declared-output check, and ``--out corpus`` replaced the corpus stage's output."""
    from recipematch.pipeline.backtranslate import main

    _project_copy(tmp_path)
    keep = tmp_path / "artifacts" / "corpus" / "c.jsonl"
    keep.parent.mkdir(parents=True)
    keep.write_text("precious")
    r = CliRunner().invoke(main, ["--root", str(tmp_path / "artifacts"), "--params", "../params.yaml", "--no-progress",
                                  "--corpus", "c", "--gates", "g", "--out", "corpus", "--metrics", "m.json"])
    assert r.exit_code == 2 and f"lies inside the project {tmp_path} (it holds dvc.yaml" in r.output, r.output
    assert keep.read_text() == "precious"


def test_another_params_file_does_not_hide_the_projects_outputs(tmp_path):
    """Breaker, round five: with ``--params`` naming a file without the recipe arm, the door
    checked only that file's stages, and ``--out models/recipe`` replaced train@recipe's output."""
    from recipematch.pipeline.backtranslate import main

    _project_copy(tmp_path)
    raw = yaml.safe_load((tmp_path / "params.yaml").read_text(encoding="utf-8"))
    assert "recipe" in raw["arms"]
    raw["arms"] = [a for a in raw["arms"] if a != "recipe"]
    raw["contrasts"] = [c for c in raw["contrasts"] if "recipe" not in c]
    raw["remedies"]["arms"] = []
    (tmp_path / "p2.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    keep = tmp_path / "models" / "recipe" / "seed_42.json"
    keep.parent.mkdir(parents=True)
    keep.write_text("ckpt")
    args = ["--root", str(tmp_path), "--no-progress", "--corpus", "artifacts/corpus", "--gates", "artifacts/gates",
            "--out", "models/recipe", "--metrics", "metrics/x.json"]
    r = CliRunner().invoke(main, ["--params", "p2.yaml", *args])
    assert r.exit_code == 2 and "is models/recipe, which dvc.yaml's stage train@recipe writes" in r.output, r.output
    assert keep.read_text() == "ckpt"


@pytest.mark.parametrize(("out", "match"), [
    (".venv", r"lies inside \.venv, a hidden folder"),
    ("artifacts/a\nb", r"control character"),
    (" artifacts/ok", r"leading or trailing space"),
    ("~/x", r"leading ~"),
    ("a" * 300, r"over 255 bytes"),
    ("metrics/corpus.json/x.json", r"lies inside metrics/corpus.json, which is a file"),
])
def test_odd_written_paths_are_refused_with_one_line(tmp_path, out, match):
    """Breaker: a 300-character name gave an ENAMETOOLONG traceback; a newline, a leading space,
    a literal ~ and a path through a file were accepted (the last failed only after the output
    had been replaced)."""
    from recipematch.pipeline.door import check_stage_paths

    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "corpus.json").write_text("{}")
    with pytest.raises(RecipematchError, match=match):
        check_stage_paths("s", tmp_path, {"out": out}, ("out",))


def test_a_hand_run_onto_the_artifacts_folder_deletes_nothing(tmp_path):
    """The whole command, in a project with a dvc.yaml: refused with exit 2, the folder kept."""
    import shutil

    from recipematch.pipeline.external import main

    for f in ("params.yaml", "dvc.yaml"):
        shutil.copy(REPO / f, tmp_path / f)
    keep = tmp_path / "artifacts" / "corpus" / "corpus.parquet"
    keep.parent.mkdir(parents=True)
    keep.write_text("mine")
    r = CliRunner().invoke(main, ["--root", str(tmp_path), "--name", "impliret", "--out", "artifacts",
                                  "--metrics", "metrics/brk.json"])
    assert r.exit_code == 2 and "--out 'artifacts' holds artifacts/" in r.output, r.output
    assert keep.read_text() == "mine"


def _report(root: Path, rel: str, text: str):
    """The report stage run by hand in a copy of the committed metrics, ``rel`` holding ``text``."""
    import shutil

    from recipematch.pipeline.report import main

    shutil.copy(REPO / "params.yaml", root / "params.yaml")
    shutil.copytree(REPO / "metrics", root / "metrics", dirs_exist_ok=True)
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)
    return CliRunner().invoke(main, ["--root", str(root), "--metrics-dir", "metrics", "--cells-root", "artifacts/cells",
                                     "--out", "reports"])


@pytest.mark.parametrize(("name", "text", "want"), [
    ("style", "{}", r"style.json: not the file its stage writes \('probe' is missing"),
    ("style", '{"probe": "garbage", "tracking": {}}', r"'probe' is a str"),
    ("hits", "{}", r"hits.json: not the file its stage writes \('k' is missing"),
    ("hits", "[]", r"its top level is a list"),
    ("hits", '{"contrasts": 5}', r"'k' is missing"),
    ("stats", "[1]", r"stats.json: not the file its stage writes \(its top level is a list"),
    ("stats", "{}", r"'evaluations' is missing"),
])
def test_the_report_refuses_a_metrics_file_its_stage_did_not_write(tmp_path, name, text, want):
    """Breaker: garbage ``stats.json``/``style.json`` gave tracebacks, and ``{}`` in
    ``style.json`` or ``hits.json`` quietly dropped a whole section of the report."""
    r = _report(tmp_path, f"metrics/{name}.json", text)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert re.search(want, r.output), r.output
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize(("name", "edit", "want"), [
    ("style", lambda d: d.update(tracking={"base": [1]}), r"in tracking: 'base' is a list"),
    ("style", lambda d: d.update(probe={}), r"in probe: 'train_prompt' is missing"),
    ("hits", lambda d: d.update(sets={k: [1] for k in d["sets"]}), r"in sets: '\w+' is a list"),
    ("hits", lambda d: d.update(skipped=[{"a": 1}]), r"in skipped.0: 'pair' is missing"),
    ("hits", lambda d: d.update(k=-3), r"'k' is -3, not a rank cut-off from 1"),
    ("stats", lambda d: d.update(evaluations={}), r"'evaluations' is \{\}, not at least one set"),
    ("stats", lambda d: d["evaluations"]["crosslingual"].pop("role"), r"in evaluations.crosslingual: 'role' is missing"),
    ("stats", lambda d: d["evaluations"]["crosslingual"].update(role=7), r"'role' is an int"),
    ("stats", lambda d: d.update(contrasts="x"), r"'contrasts' is a str"),
    ("stats", lambda d: d.pop("gaps"), r"'gaps' is missing"),
])
def test_the_report_refuses_nested_garbage_with_one_line(tmp_path, name, edit, want):
    """Breaker, round five: only top-level keys were checked, so a list in ``style.json``'s
    tracking or ``hits.json``'s sets gave tracebacks, and ``k: -3`` or an empty probe were
    printed ("within the top -3", "trained on `None`")."""
    import json

    d = json.loads((REPO / "metrics" / f"{name}.json").read_text(encoding="utf-8"))
    edit(d)
    r = _report(tmp_path, f"metrics/{name}.json", json.dumps(d))
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert f"{name}.json: not the file its stage writes" in r.output and re.search(want, r.output), r.output


@pytest.mark.parametrize(("name", "text", "want"), [
    ("hits", lambda t: t.replace('"a_alone": ', '"a_alone": -5, "x": ', 1), r"'a_alone' is -5, not a count"),
    ("hits", lambda t: t.replace('"auc": ', '"auc": Infinity, "x": ', 1), r"holds the number Infinity"),
    ("style", lambda t: t.replace('"rho_mean": ', '"rho_mean": NaN, "x": ', 1), r"holds the number NaN"),
    ("style", lambda t: t.replace('"rho_mean": ', '"rho_mean": 1e999, "x": ', 1), r"holds the number 1e999"),
    ("hits", lambda t: t.replace('"k": ', '"k": 1' + '0' * 400 + ', "x": ', 1), r"'k' is 1000.*, not a rank cut-off"),
    ("style", lambda t: t.replace('"rho_mean": ', '"rho_mean": 1' + '0' * 400 + ', "x": ', 1),
     r"'rho_mean' is 1000.*, not a number of at most"),
])
def test_the_report_refuses_numbers_no_stage_writes(tmp_path, name, text, want):
    """Breaker, round six: a negative count, Infinity, NaN or a 400-digit cut-off were printed."""
    r = _report(tmp_path, f"metrics/{name}.json", text((REPO / "metrics" / f"{name}.json").read_text(encoding="utf-8")))
    assert r.exit_code == 2 and "Traceback" not in r.output and re.search(want, r.output), r.output


def test_a_report_that_fails_while_writing_keeps_the_previous_one_whole(tmp_path):
    """Breaker, round five: a bad value deep in ``stats.json`` gave a traceback and left new
    figures beside the previous ``report.md``; now one line, and the previous report kept."""
    import json

    import yaml as _yaml

    arms = _yaml.safe_load((REPO / "params.yaml").read_text())["arms"]
    for a in arms:  # each arm's cell.json, as its cells stage writes it
        (tmp_path / "artifacts" / "cells" / a).mkdir(parents=True)
        (tmp_path / "artifacts" / "cells" / a / "cell.json").write_text(json.dumps(
            {"name": a, "spec": {"positives": "d1", "negatives": "cas", "volume": "full"}}))
    d = json.loads((REPO / "metrics" / "stats.json").read_text(encoding="utf-8"))
    d["contrasts_skipped"] = ["recipe-reference", "reference-verified"]
    ok = _report(tmp_path, "metrics/stats.json", json.dumps(d))
    assert ok.exit_code == 0, ok.output
    # newcomer: declared contrasts of arms not run were left out without a word
    assert ("`contrasts` not shown, an arm of each not run (add it to `arms`): recipe − reference, reference − verified."
            in (tmp_path / "reports" / "report.md").read_text(encoding="utf-8"))
    before = {f.name: f.read_bytes() for f in (tmp_path / "reports").iterdir()}
    metric = next(iter(d["arms"]["base"]))
    d["arms"]["base"][metric]["mean"] = "x"
    (tmp_path / "metrics" / "stats.json").write_text(json.dumps(d))
    from recipematch.pipeline.report import main

    r = CliRunner().invoke(main, ["--root", str(tmp_path), "--metrics-dir", "metrics", "--cells-root",
                                  "artifacts/cells", "--out", "reports"])
    assert r.exit_code == 2 and "Traceback" not in r.output and "while writing the report" in r.output, r.output
    assert {f.name: f.read_bytes() for f in (tmp_path / "reports").iterdir()} == before
    assert not (tmp_path / "reports.partial").exists()


@pytest.mark.parametrize(("text", "want"), [
    ("[]", r"its top level is a list"), ("{}", r"'name' is missing"),
    ('{"name": "x", "spec": "abc"}', r"'spec' is a str"),
    ('{"name": "x", "spec": {"positives": "d1"}}', r"'negatives' is missing"),
    ('{"name": "a|b\\n", "spec": {"positives": "d1", "negatives": "cas", "volume": "full"}}',
     r"'name' is 'a\|b\\n', not a name of letters"),
])
def test_the_report_refuses_a_cell_json_its_stage_did_not_write(tmp_path, text, want):
    arm = yaml.safe_load((REPO / "params.yaml").read_text())["arms"][0]
    r = _report(tmp_path, f"artifacts/cells/{arm}/cell.json", text)
    assert r.exit_code == 2 and "cell.json: not the file its stage writes" in r.output, r.output
    assert re.search(want, r.output), r.output
