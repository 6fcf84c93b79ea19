"""dvc.yaml lists each declared evaluation's folder among the deps of exactly the stages that
read it (``EVAL_DEPS`` of the stage module, :mod:`recipematch.pipeline.deps`), so adding a set
is a params edit and ``python -m recipematch.pipeline.deps --write``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from recipematch.errors import RecipematchError
from recipematch.pipeline import deps

REPO = Path(__file__).resolve().parents[1]

#: a synthetic pipeline: the real stage entry points, hand-written deps as the project had them
DVC_YAML = """\
stages:
  corpus:
    cmd: python stages/corpus.py
    deps:
      - stages/corpus.py
  gates:
    cmd: python stages/gates.py
    deps:
      - artifacts/corpus
      - artifacts/evalsets
      - artifacts/external
      - artifacts/regen
  evaluate_bm25:
    cmd: python stages/evaluate_bm25.py
    deps:
      - artifacts/evalsets
      - artifacts/external
  evaluate:
    matrix:
      arm: ${arms}
    cmd: python stages/evaluate.py --arm ${item.arm}
    deps:
      - artifacts/evalsets
      - models/${item.arm}
    outs:
      - artifacts/eval/${item.arm}
  style:
    cmd: python stages/style.py
    deps:
      - artifacts/pairs
      - artifacts/evalsets
      - artifacts/external
  hits:
    cmd: python stages/hits.py
    deps:
      - artifacts/evalsets
      - artifacts/eval
  regen:
    foreach: ${regen}
    do:
      cmd: python stages/regen.py --name ${key}
      deps:
        - artifacts/evalsets
        - data
      outs:
        - artifacts/regen/${key}
  pooling:
    foreach: ${pooling}
    do:
      cmd: python stages/pooling.py --name ${key}
      deps:
        - models
      outs:
        - artifacts/pooling/${key}
  stats:
    cmd: python stages/stats.py
    deps:
      - artifacts/eval
"""

PARAMS = {
    "arms": ["recipe", "cell"],
    "evaluations": {
        "tier": {"folder": "artifacts/evalsets/tier", "rule": "plain", "role": "benchmark"},
        "real": {"folder": "artifacts/evalsets/real", "rule": "plain", "role": "real"},
        "tier_regen": {"folder": "artifacts/regen/again", "rule": "plain", "role": "benchmark"},
    },
    "style": {"tracking_set": "tier"},
    "regen": {"again": {"of": "tier"}},
    "pooling": {"pool": {"evaluation": "real"}},
}

#: the stages whose modules read every declared set
READ_ALL = {"gates", "evaluate_bm25", "evaluate"}


def _project(tmp_path: Path, params: dict) -> Path:
    shutil.copytree(REPO / "stages", tmp_path / "stages")
    (tmp_path / "dvc.yaml").write_text(DVC_YAML)
    _params(tmp_path, params)
    deps.write(tmp_path)
    return tmp_path


def _params(root: Path, params: dict) -> None:
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def _deps(root: Path) -> dict[str, list[str]]:
    doc = yaml.safe_load((root / "dvc.yaml").read_text())
    return {n: st.get("do", st).get("deps", []) for n, st in doc["stages"].items()}


def _evals(root: Path) -> dict[str, list[str]]:
    return {n: [d for d in ds if d.startswith("${evaluations.")] for n, ds in _deps(root).items()}


def _with(params: dict, name: str, entry: dict) -> dict:
    return {**params, "evaluations": {**params["evaluations"], name: entry}}


def test_write_lists_the_folders_each_stage_reads(tmp_path):
    root = _project(tmp_path, PARAMS)
    assert deps.check(root) == []
    every = ["${evaluations.real.folder}", "${evaluations.tier.folder}", "${evaluations.tier_regen.folder}"]  # by folder
    assert _evals(root) == {
        "corpus": [], "stats": [],
        "gates": every, "evaluate_bm25": every, "evaluate": every,
        "style": ["${evaluations.tier.folder}"],  # style.tracking_set only
        "hits": ["${evaluations.tier.folder}", "${evaluations.tier_regen.folder}"],  # the benchmark sets
        "regen": ["${evaluations.tier.folder}"],  # its entry's `of`, not its own output
        "pooling": ["${evaluations.real.folder}"],  # its entry's evaluation
    }
    d = _deps(root)
    # hand-written deps that only held evaluation folders are gone; the others stay
    assert "artifacts/evalsets" in d["gates"]  # KEEP_DEPS: heldout.json and the run record's hash
    assert "artifacts/regen" not in d["gates"]
    assert "artifacts/evalsets" not in d["evaluate_bm25"] + d["style"] + d["regen"] + d["hits"]
    # no declared set lies in artifacts/external here: the generator leaves that dep alone
    assert "artifacts/external" in d["gates"] and "artifacts/external" in d["style"]
    assert {"artifacts/pairs"} <= set(d["style"]) and "artifacts/eval" in d["hits"] and "data" in d["regen"]
    assert "models/${item.arm}" in d["evaluate"] and "models" in d["pooling"]


def test_adding_then_removing_a_set_is_a_params_edit_and_write(tmp_path):
    root = _project(tmp_path, PARAMS)
    new = "${evaluations.extra.folder}"
    _params(root, _with(PARAMS, "extra", {"folder": "artifacts/external/x/sub", "rule": "plain", "role": "external"}))
    problems = deps.check(root)
    lacking = {p.split(":")[0].removeprefix("stage ") for p in problems if "lack the evaluation folders" in p}
    assert lacking == READ_ALL and all(new in p for p in problems if "lack" in p), problems
    # artifacts/external now holds a declared set: the stages that listed it by hand are told
    holders = {p.split(":")[0].removeprefix("stage ") for p in problems if "deps list ['artifacts/external']" in p}
    assert holders == {"gates", "evaluate_bm25", "style"}
    deps.write(root)
    assert deps.check(root) == []
    assert {n for n, ds in _evals(root).items() if new in ds} == READ_ALL
    assert not any("artifacts/external" in ds for ds in _deps(root).values())

    _params(root, PARAMS)  # removed again
    problems = deps.check(root)
    assert {p.split(":")[0].removeprefix("stage ") for p in problems if "does not read" in p} == READ_ALL
    deps.write(root)
    assert deps.check(root) == []
    assert not any(new in ds for ds in _evals(root).values())


def test_a_stage_reading_one_set_follows_its_param(tmp_path):
    root = _project(tmp_path, PARAMS)
    _params(root, {**PARAMS, "style": {"tracking_set": "real"}})
    assert any(p.startswith("stage style: deps lack the evaluation folders it reads ['${evaluations.real.folder}']")
               for p in deps.check(root))
    deps.write(root)
    assert _evals(root)["style"] == ["${evaluations.real.folder}"]
    assert deps.check(root) == []


def test_check_fails_when_a_generated_eval_dep_is_missing(tmp_path, monkeypatch):
    root = _project(tmp_path, PARAMS)
    text = (root / "dvc.yaml").read_text()
    start = text.index("  evaluate_bm25:")
    line = "      - ${evaluations.real.folder}\n"
    cut = text.index(line, start)
    (root / "dvc.yaml").write_text(text[:cut] + text[cut + len(line):])
    assert deps.check(root) == [
        "stage evaluate_bm25: deps lack the evaluation folders it reads ['${evaluations.real.folder}']"]
    monkeypatch.chdir(root)
    assert deps.main([]) == 1


def test_a_hand_written_folder_holding_sets_is_reported(tmp_path):
    root = _project(tmp_path, PARAMS)
    text = (root / "dvc.yaml").read_text()
    (root / "dvc.yaml").write_text(text.replace("      - artifacts/eval\n", "      - artifacts/eval\n"
                                                "      - artifacts/regen\n", 1))  # in hits
    assert any(p.startswith("stage hits: deps list ['artifacts/regen']") for p in deps.check(root))


def test_sets_sharing_a_folder_give_one_dep(tmp_path):
    params = _with(PARAMS, "also_tier", {"folder": "artifacts/evalsets/tier/", "rule": "samelang", "role": "real"})
    root = _project(tmp_path, params)
    assert deps.check(root) == []
    assert _evals(root)["gates"] == ["${evaluations.real.folder}", "${evaluations.also_tier.folder}",
                                     "${evaluations.tier_regen.folder}"]


def test_empty_foreach_and_undeclared_names_give_no_deps(tmp_path):
    root = _project(tmp_path, {**PARAMS, "pooling": {}, "style": {"tracking_set": "nope"}})
    assert _evals(root)["pooling"] == [] and _evals(root)["style"] == []
    assert deps.check(root) == []


def test_a_stage_reading_its_own_output_is_refused(tmp_path):
    """DVC takes one dep list per foreach stage: a regen entry of another entry's output
    would make that entry depend on itself."""
    root = _project(tmp_path, PARAMS)
    _params(root, {**PARAMS, "regen": {"again": {"of": "tier"}, "twice": {"of": "tier_regen"}}})
    with pytest.raises(RecipematchError, match="stage regen: reads evaluation tier_regen .* overlaps its own output artifacts/regen/again"):
        deps.check(root)


def test_selectors_are_checked():
    with pytest.raises(ValueError, match="EVAL_DEPS selector"):
        deps._selected("some", {}, PARAMS)


def test_the_deps_command_outside_a_project_is_one_line(tmp_path, monkeypatch, capsys):
    from recipematch.pipeline import deps

    monkeypatch.chdir(tmp_path)
    assert deps.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("recipematch: error:") and "dvc.yaml does not exist" in err and len(err.splitlines()) == 1


def test_write_refuses_params_the_check_refuses(tmp_path, monkeypatch, capsys):
    """Breaker: ``deps --write`` wrote an evaluation folder outside the project into dvc.yaml,
    which ``recipematch params --check`` refuses; now it refuses it too and writes nothing."""
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    text = (tmp_path / "params.yaml").read_text(encoding="utf-8")
    assert "folder: artifacts/evalsets/tier_d1" in text
    (tmp_path / "params.yaml").write_text(text.replace("folder: artifacts/evalsets/tier_d1", "folder: /etc", 1),
                                          encoding="utf-8")
    before = (tmp_path / "dvc.yaml").read_bytes()
    monkeypatch.chdir(tmp_path)
    assert deps.main(["--write"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("recipematch: error:") and "evaluations.tier_d1" in err, err
    assert (tmp_path / "dvc.yaml").read_bytes() == before


@pytest.mark.parametrize("how", ["missing", "folder", "dangling_link"])
def test_write_without_a_params_file_writes_nothing(tmp_path, monkeypatch, how):
    """Breaker, round two: with params.yaml missing, a folder or a dangling symlink, ``--write``
    dropped 56 lines of params-named deps from dvc.yaml and exited 0."""
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    if how == "folder":
        (tmp_path / "params.yaml").mkdir()
    elif how == "dangling_link":
        (tmp_path / "params.yaml").symlink_to(tmp_path / "gone.yaml")
    before = (tmp_path / "dvc.yaml").read_bytes()
    monkeypatch.chdir(tmp_path)
    assert deps.main(["--write"]) == 2
    assert (tmp_path / "dvc.yaml").read_bytes() == before


def test_write_runs_the_whole_params_check(tmp_path, monkeypatch, capsys):
    """Breaker, round three: ``positives: d5`` passed ``deps --write`` while ``params --check``
    refused it (the arm-input check): both now run the same check."""
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    text = (tmp_path / "params.yaml").read_text(encoding="utf-8")
    assert "\npositives: d4 " in text
    (tmp_path / "params.yaml").write_text(text.replace("\npositives: d4 ", "\npositives: d5 ", 1), encoding="utf-8")
    from click.testing import CliRunner

    from recipematch.cli import main

    checked = CliRunner().invoke(main, ["params", "--check", str(tmp_path / "params.yaml")])
    assert checked.exit_code == 2, checked.output
    before = (tmp_path / "dvc.yaml").read_bytes()
    monkeypatch.chdir(tmp_path)
    assert deps.main(["--write"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == checked.output.strip().splitlines()[-1]
    assert (tmp_path / "dvc.yaml").read_bytes() == before


@pytest.mark.parametrize(("text", "want"), [
    ("", "no `stages:` mapping"), ("other: 1\n", "no `stages:` mapping"), ("stages: []\n", "no `stages:` mapping"),
    ("stages:\n  a:\n    deps: []\n", "stage a has no `cmd`"), (b"stages: {\xe9: 1}\n", "not UTF-8 text"),
    ("stages:\n  a:\n    cmd: python stages/nope.py\n", "stages/nope.py, which does not exist"),
    ("stages: [\n", "not valid YAML"),
])
def test_a_dvc_yaml_that_is_no_pipeline_is_one_line(tmp_path, monkeypatch, capsys, text, want):
    (tmp_path / "dvc.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
    monkeypatch.chdir(tmp_path)
    assert deps.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("recipematch: error:") and want in err and len(err.splitlines()) == 1, err


def test_unknown_arguments_are_refused(tmp_path, monkeypatch, capsys):
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    monkeypatch.chdir(tmp_path)
    assert deps.main(["--wirte"]) == 2 and "unknown argument '--wirte'" in capsys.readouterr().err
    assert deps.main(["--write=1"]) == 2


@pytest.mark.parametrize("of", ["nope", "gold_only"])
def test_a_regen_entry_of_no_declared_benchmark_is_refused_before_dvc_yaml_is_written(tmp_path, monkeypatch, capsys,
                                                                                      of):
    """Breaker: ``regen.<name>.of: nope`` passed ``params --check``, and ``deps --write`` then
    dropped the regen stage's evaluation dep; a diagnostic set (``gold_only``) passed too."""
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    raw = yaml.safe_load((tmp_path / "params.yaml").read_text(encoding="utf-8"))
    name = next(iter(raw["regen"]))
    raw["regen"][name]["of"] = of
    _params(tmp_path, raw)
    before = (tmp_path / "dvc.yaml").read_bytes()
    monkeypatch.chdir(tmp_path)
    assert deps.main(["--write"]) == 2
    err = capsys.readouterr().err
    assert f"regen.{name}.of: '{of}' is not a declared benchmark evaluation" in err and len(err.splitlines()) == 1, err
    assert (tmp_path / "dvc.yaml").read_bytes() == before


@pytest.mark.parametrize(("deps_text", "want"), [
    ("    deps: stages/corpus.py\n", "stage corpus: `deps` must be a list (one `- entry` a line), not str"),
    ("    deps: {a: 1}\n", "`deps` must be a list (one `- entry` a line), not dict"),
    ("    deps:\n", "`deps` must be a list (one `- entry` a line), not NoneType"),
    ("    deps:\n   - [\n", "not valid YAML"),
    ("    cmd: again\n    deps: []\n", "duplicate key 'cmd'"),
    ("    deps:\n      - stages/corpus.py\n      - 5\n", "stage corpus: `deps` entry 5 is not a path (DVC refuses it)"),
    ("    deps:\n      - stages/corpus.py\n      -\n", "stage corpus: `deps` entry None is not a path"),
])
def test_write_refuses_a_dvc_yaml_it_would_mangle(tmp_path, monkeypatch, capsys, deps_text, want):
    """Breaker: ``deps: stages/corpus.py`` (a string) was written back one character a line
    (``- s``, ``- t``, ...); bad YAML, a repeated key or an empty ``deps:`` gave tracebacks."""
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    text = (REPO / "dvc.yaml").read_text(encoding="utf-8")
    i = text.index("  corpus:\n")
    j = text.index("    deps:\n", i)
    k = text.index("    params:", j)
    (tmp_path / "dvc.yaml").write_text(text[:j] + deps_text + text[k:], encoding="utf-8")
    before = (tmp_path / "dvc.yaml").read_bytes()
    monkeypatch.chdir(tmp_path)
    assert deps.main(["--write"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("recipematch: error:") and want in err and len(err.splitlines()) == 1, err
    assert (tmp_path / "dvc.yaml").read_bytes() == before


@pytest.mark.parametrize(("model_dir", "ok", "where"), [
    ("nllb", False, "."), ("models/nllb", False, "."), ("mt_models/other", True, "."), ("./mt_models/x", True, "."),
    ("weights/nllb", False, "configs"),
])
def test_a_translation_model_outside_the_hashed_folder_is_refused(tmp_path, model_dir, ok, where):
    """Breaker, rounds five and six: ``backtranslate.model_dir: nllb`` passed ``params --check``
    though ``dvc.yaml`` hashes only ``mt_models`` (new weights there would never rerun the stage),
    ``./mt_models/x`` was refused, and a params file in a subfolder was not checked."""
    from click.testing import CliRunner

    from recipematch.cli import main

    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    raw["backtranslate"]["model_dir"] = model_dir
    (tmp_path / where).mkdir(exist_ok=True)
    _params(tmp_path / where, raw)
    r = CliRunner().invoke(main, ["params", "--check", str(tmp_path / where / "params.yaml")])
    if ok:
        assert r.exit_code == 0, r.output
    else:
        assert r.exit_code == 2 and f"stage backtranslate reads {model_dir} (backtranslate.model_dir) but does not " \
                                   "list" in r.output and "put the model under mt_models/" in r.output, r.output


@pytest.mark.parametrize("entry", ["{}", "{a.yaml: 5}", "{a.yaml: [3]}"])
def test_a_params_entry_that_is_no_file_and_keys_is_one_line(tmp_path, monkeypatch, capsys, entry):
    """Breaker, round six: ``- {}`` among a stage's params gave a StopIteration traceback."""
    text = (REPO / "dvc.yaml").read_text(encoding="utf-8")
    i = text.index("    params:\n", text.index("  corpus:\n")) + len("    params:\n")
    (tmp_path / "dvc.yaml").write_text(text[:i] + f"      - {entry}\n" + text[i:], encoding="utf-8")
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    assert deps.main([]) == 2
    err = capsys.readouterr().err
    assert "stage corpus: `params` entry" in err and "is not a key or {file: [keys]}" in err and len(err.splitlines()) == 1


def test_dvcs_explicit_params_file_form_names_the_same_keys(tmp_path, monkeypatch, capsys):
    """Breaker, round seven: ``- params.yaml: [data.source, data.path]`` (DVC's explicit form)
    was read as the one key ``params.yaml``."""
    doc = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))
    keys = [k for k in doc["stages"]["corpus"]["params"] if isinstance(k, str)]
    assert keys
    text = (REPO / "dvc.yaml").read_text(encoding="utf-8")
    i = text.index("    params:\n", text.index("  corpus:\n"))
    j = text.index("\n    outs:", i)
    (tmp_path / "dvc.yaml").write_text(text[:i] + f"    params:\n      - params.yaml: [{', '.join(keys)}]" + text[j:],
                                       encoding="utf-8")
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    for folder in ("stages", "src"):
        (tmp_path / folder).symlink_to(REPO / folder)
    monkeypatch.chdir(tmp_path)
    assert deps.main([]) == 0, capsys.readouterr()
