"""Paths written once, in ``dvc.yaml``'s ``cmd``: each stage that takes ``--<role> PATH`` options
gets every path it reads or writes from its command, and the command agrees with the stage's
deps and outputs (DVC's own resolver expands the stages with ``params.yaml``).

- every output and metrics file of such a stage lies in a path its command passes;
- every path its command passes is an output, a dep, inside one, holds one, or lies outside
  DVC (``cache/``);
- every dep that is not code is passed by the command, or is (or holds) a path params name (evaluation folders,
  ``${data.path}``);
- every stage takes its paths so.
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from conftest import REPO, stage_paths
from recipematch.errors import RecipematchError
from recipematch.pipeline.door import ROLES, StagePaths
from recipematch.pipeline.graph import resolve, stage_options

#: deps no command passes, each with the reason it is a dep
NOT_READ_DEPS = {
    ("style", "artifacts/eval"): "runs after the evaluate stages, whose embedding cache it reuses; reads nothing there",
    ("regen", "data"): "regen.<name>.rows (source: rows) is a released file under data/, named by params",
}
#: places outside DVC a command may pass (caches and scratch work that resumes an interrupted run)
OUTSIDE_DVC = ("cache",)


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _near(path: str, others) -> bool:
    """``path`` is one of ``others``, inside one, or holds one."""
    return any(_under(path, o) or _under(o, path) for o in others)


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


def _moved(project):
    stages, _ = project
    out = []
    for name, st in stages.items():
        main, opts = stage_options(st)
        if main.path_roles:
            out.append((name, st, {r: Path(opts[f"path_{r}"]).as_posix() for r in main.path_roles}))
    return out


def test_every_stage_takes_its_paths_from_its_command(project):
    stages, _ = project
    assert len(_moved(project)) == len(stages) > 30


def test_every_output_lies_in_a_path_the_command_passes(project):
    bad = [f"{name}: {o}" for name, st, paths in _moved(project) for o in st.outs
           if not any(_under(o, p) for p in paths.values())]
    assert bad == []


def test_every_path_the_command_passes_is_a_dep_an_output_or_outside_dvc(project):
    bad = []
    for name, st, paths in _moved(project):
        for role, p in paths.items():
            if not (_near(p, st.outs) or _near(p, st.deps) or any(_under(p, o) for o in OUTSIDE_DVC)):
                bad.append(f"{name}: --{role} {p}")
    assert bad == []


def test_every_data_dep_is_passed_by_the_command_or_named_by_params(project):
    _, params = project
    named = _param_paths(params)
    bad = []
    for name, st, paths in _moved(project):
        for d in st.deps:
            if d.startswith(("src/", "stages/")):
                continue
            if not (any(_under(d, p) for p in paths.values()) or _near(d, named)
                    or (name.split("@")[0], d) in NOT_READ_DEPS):
                bad.append(f"{name}: {d}")
    assert bad == []


def test_a_wrong_output_path_in_a_command_is_found(project, tmp_path):
    """The checks above can fail: a command whose --out misses the stage's output is caught."""
    stages, _ = project
    st = stages["corpus"]
    wrong = type(st)(st.name, st.cmd.replace("--out artifacts/corpus", "--out artifacts/elsewhere"), st.deps, st.outs)
    main, opts = stage_options(wrong)
    paths = {r: Path(opts[f"path_{r}"]).as_posix() for r in main.path_roles}
    assert [o for o in st.outs if not any(_under(o, p) for p in paths.values())] == ["artifacts/corpus"]


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
