"""Every pipeline path is written once: ``Layout`` (``recipematch.pipeline.door``) and
``dvc.yaml`` agree, and no other module spells an ``artifacts/`` or ``models/`` path.

- :func:`layout_vs_dvc` compares ``Layout`` with the stages DVC's own resolver makes of
  ``dvc.yaml`` (``foreach``/``matrix`` expanded with ``params.yaml``): each stage output that
  Layout names is exactly that output (``train@<arm>`` writes ``Layout.models(<arm>)``, ...),
  every other output is one of the listed exceptions, and every Layout member (called with each
  name ``params.yaml`` declares) is an output, a path inside one, a data input, a folder that
  holds outputs, or a place outside DVC;
- :func:`path_literals` finds string constants in code (docstrings, comments and params
  defaults aside) that spell such a path outside ``Layout``.
"""

from __future__ import annotations

import ast
import copy
import inspect
import shutil
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from recipematch.pipeline.door import Layout
from recipematch.rules import BASELINES, mix_label, soup_label

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "recipematch"


# --------------------------------------------------------------------------- Layout vs dvc.yaml

def dvc_stages(root: Path) -> dict[str, dict[str, list[str]]]:
    """``{stage: {"outs": [...], "deps": [...]}}`` as DVC resolves the project at ``root``
    (``foreach``/``matrix`` stages expanded with its ``params.yaml``; outs include metrics and plots)."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:  # a dvc.yaml stage by its name, a .dvc file by its path
        return {getattr(s, "name", None) or Path(s.path).relative_to(Path(root).resolve()).as_posix():
                {"outs": [str(o.def_path) for o in s.outs], "deps": [str(d.def_path) for d in s.deps]}
                for s in repo.index.stages}


def _stage(group: str, *values) -> str:
    """DVC's name of a generated stage: ``group@key`` (foreach) or ``group@v1-v2`` (matrix)."""
    return f"{group}@{'-'.join(str(v) for v in values)}" if values else group


def _names(params: Mapping, section: str) -> list[str]:
    return list(params.get(section) or {})


def named_outs(lay: Layout, params: Mapping) -> list[tuple[str, str, Path]]:
    """``(stage, Layout expression, path)`` for every stage output Layout names, for the arms,
    prompts, remedy grid points and entries that ``params`` (``params.yaml``, raw) declares."""
    arms, prompts = list(params["arms"]), list(params["llm"]["prompts"])
    rem = params["remedies"]
    rows: list[tuple[str, str, Path]] = [
        ("corpus", "corpus", lay.corpus), ("evalsets", "evalsets", lay.evalsets), ("gates", "gates", lay.gates),
        ("verified", "cas", lay.cas), ("verified", "pair_file('cas')", lay.pair_file("cas")),
        ("recordings", "recordings", lay.recordings), ("backtranslate", "backtranslate", lay.backtranslate),
        ("replay_pool", "replay", lay.replay), ("style", "style", lay.style), ("report", "reports", lay.reports),
    ]
    rows += [("specs", f"specs({a!r}).parent", lay.specs(a).parent) for a in arms]  # one folder, a file per arm
    for q in prompts:
        rows += [(_stage("llm", q), f"llm({q!r})", lay.llm(q)),
                 (_stage("llm", q), f"pair_file({q!r})", lay.pair_file(q)),
                 (_stage("judge2", q), f"judge2({q!r})", lay.judge2(q)),
                 (_stage("judge2", q), f"judge2_cells({q!r})", lay.judge2_cells(q))]
    for a in arms:
        rows += [(_stage("cells", a), f"cells({a!r})", lay.cells(a)),
                 (_stage("validate", a), f"validated({a!r})", lay.validated(a)),
                 (_stage("train", a), f"models({a!r})", lay.models(a)),
                 (_stage("evaluate", a), f"eval_dir({a!r})", lay.eval_dir(a))]
    rows += [(f"evaluate_{b}", f"eval_dir({b!r})", lay.eval_dir(b)) for b in BASELINES]
    for a in rem["arms"] or []:
        for x in rem["soup_alphas"] or []:
            label = soup_label(a, str(x))
            rows += [(_stage("soup", a, x), f"soups({label!r})", lay.soups(label)),
                     (_stage("soup", a, x), f"eval_dir({label!r})", lay.eval_dir(label))]
        for x in rem["replay_fractions"] or []:
            label = mix_label(a, str(x))
            rows += [(_stage("mix", a, x), f"models({label!r})", lay.models(label)),
                     (_stage("mix", a, x), f"eval_dir({label!r})", lay.eval_dir(label))]
    rows += [(_stage("attack", n), f"pair_file({n!r})", lay.pair_file(n)) for n in _names(params, "attacks")]
    rows += [(_stage("external", n), f"external({n!r})", lay.external(n)) for n in _names(params, "external")]
    for n in _names(params, "regen"):
        rows += [(_stage("regen", n), f"regen({n!r})", lay.regen(n)),
                 (_stage("regen", n), f"regen_calls({n!r})", lay.regen_calls(n))]
    for section in ("pooling", "judging", "meld_generate", "saber"):  # one folder per entry, named by the section
        rows += [(_stage(section, n), f"{section}({n!r})", getattr(lay, section)(n)) for n in _names(params, section)]
    return rows


def member_calls(params: Mapping) -> dict[str, list[tuple[str, ...]]]:
    """The arguments each Layout method is called with: every name ``params`` declares for it."""
    arms, prompts = list(params["arms"]), list(params["llm"]["prompts"])
    rem = params["remedies"]
    soups = [soup_label(a, str(x)) for a in rem["arms"] or [] for x in rem["soup_alphas"] or []]
    mixes = [mix_label(a, str(x)) for a in rem["arms"] or [] for x in rem["replay_fractions"] or []]
    calls = {"llm": prompts, "judge2": prompts, "judge2_cells": prompts,
             "pair_file": ["cas", *prompts, *_names(params, "attacks")],
             "specs": arms, "cells": arms, "validated": arms, "models": [*arms, *mixes],
             "eval_dir": [*BASELINES, *arms, *soups, *mixes], "soups": soups}
    calls |= {s: _names(params, s) for s in ("external", "regen", "pooling", "judging", "meld_generate", "saber")}
    calls["regen_calls"] = calls["regen"]
    return {k: [(v,) for v in vs] for k, vs in calls.items()}


#: Outputs no Layout member names, each with the reason it needs none.
UNNAMED_OUTS = {
    ("data.dvc", "data"): "the raw inputs, tracked whole by data.dvc: Layout names the part the stages read "
                          "by a fixed path (release); params.yaml names the rest (data.path, external copies, "
                          "attack rows)",
}
#: Layout members under which each stage names its own outputs (an output inside one needs no member).
STAGE_NAMED_UNDER = {
    "metrics": "dvc.yaml's metrics: files, one or a few per stage, each named by its stage "
               "(lay.metrics / 'corpus.json', lay.metrics / 'cells' / f'{arm}.json', ...)",
}
#: Layout members that are no output themselves but the folder of several (each must hold one).
HOLDERS = {
    "artifacts": "every stage output but models/, metrics/ and reports/ lies under it (plan tells a "
                 "params path built by the pipeline from an outside input by it)",
    "pairs": "the pair files (pair_file(<source>)) of verified, llm@<prompt> and attack@<name>; the cells "
             "stages depend on the whole folder",
    "metrics": "the metrics files of every stage",
    "soups_root": "the soup@<arm>-<alpha> stages' folders (soups(<label>)); the runs step lists it to log "
                  "every soup to MLflow",
}
#: Layout members outside DVC: no output may be, hold or contain one.
NOT_DVC = {
    "scratch": "cache/: per-run scratch (CAS work folders, this-run summaries, call caches), ignored by git",
    "cache": "cache/embeddings: the embedding cache, reused across runs, ignored by git",
}


def layout_members(cls: type) -> dict[str, object]:
    """The public path members of ``cls`` (a Layout or a subclass): properties and methods,
    without ``p`` and ``rel`` (the helpers)."""
    out = {}
    for klass in reversed(cls.__mro__[:-1]):
        for name, v in vars(klass).items():
            if name.startswith("_") or name in ("p", "rel", "root"):
                continue
            if isinstance(v, property) or inspect.isfunction(v):
                out[name] = v
    return out


def _under(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


def layout_vs_dvc(lay: Layout, stages: Mapping[str, Mapping[str, list[str]]], params: Mapping) -> list[str]:
    """Every disagreement of ``lay`` with ``stages`` (:func:`dvc_stages`), one line each naming
    the Layout member and the dvc.yaml stage; ``[]`` when they agree."""
    bad: list[str] = []
    all_outs = {o: s for s, st in stages.items() for o in st["outs"]}
    data_deps = {d for st in stages.values() for d in st["deps"] if d == "data" or _under(d, "data")}
    named: set[tuple[str, str]] = set()
    # 1. each output Layout names is exactly the stage's output
    for stage, expr, path in named_outs(lay, params):
        want = lay.rel(path)
        if stage not in stages:
            bad.append(f"Layout.{expr} = {want}: dvc.yaml has no stage {stage} (stages: "
                       f"{sorted(s for s in stages if s.split('@')[0] == stage.split('@')[0])})")
        elif want not in stages[stage]["outs"]:
            bad.append(f"Layout.{expr} = {want}, but dvc.yaml stage {stage} writes {stages[stage]['outs']}")
        else:
            named.add((stage, want))
    # 2. every other output is under a folder its stage names files in, or a listed exception
    under = {m: lay.rel(getattr(lay, m)) for m in STAGE_NAMED_UNDER}
    for stage, st in stages.items():
        for out in st["outs"]:
            if (stage, out) in named or (stage, out) in UNNAMED_OUTS or any(_under(out, f) for f in under.values()):
                continue
            bad.append(f"dvc.yaml stage {stage} writes {out}, which no Layout member names (add one, or list it "
                       f"in UNNAMED_OUTS with the reason it needs none)")
    # 3. every Layout member is an output, inside one, a data input, a holder of outputs, or outside DVC
    calls = member_calls(params)
    for name, member in layout_members(type(lay)).items():
        if isinstance(member, property):
            results = [(name, getattr(lay, name))]
        elif name not in calls:
            bad.append(f"Layout.{name}() takes a name: say in member_calls which params.yaml names it is called with")
            continue
        else:
            results = [(f"{name}({', '.join(map(repr, args))})", getattr(lay, name)(*args)) for args in calls[name]]
        for expr, path in results:
            rel = lay.rel(path)
            holds = sorted(o for o in all_outs if _under(o, rel))
            inside = sorted(o for o in all_outs if o == rel or _under(rel, o))
            if name in NOT_DVC:
                if holds or inside:
                    bad.append(f"Layout.{expr} = {rel} is declared outside DVC but overlaps the output "
                               f"{(inside or holds)[0]} of dvc.yaml stage {all_outs[(inside or holds)[0]]}")
            elif inside or (_under(rel, "data") and (rel in data_deps or any(_under(d, rel) for d in data_deps))):
                continue
            elif name in HOLDERS and holds:
                continue
            else:
                bad.append(f"Layout.{expr} = {rel}: no dvc.yaml stage writes it (no output, not inside one, "
                           f"no data/ input" + (", holds no output" if name in HOLDERS else "") + ")")
    return bad


def _params(root: Path) -> dict:
    return yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def stages() -> dict[str, dict[str, list[str]]]:
    return dvc_stages(REPO)


def test_layout_and_dvc_yaml_agree(stages):
    assert layout_vs_dvc(Layout(REPO), stages, _params(REPO)) == []


def test_the_stages_params_yaml_declares_none_of_agree_too(tmp_path):
    """``judging``, ``saber`` and ``meld_generate`` declare no entry by default, so DVC makes no
    stage of them: checked here with one made-up entry each (the same dvc.yaml, in a copy)."""
    from dvc.repo import Repo

    Repo.init(str(tmp_path), no_scm=True).close()
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    params = copy.deepcopy(_params(REPO))
    params["judging"] = {"j1": {"pool": next(iter(params["pooling"] or {"p": 0})), "folder": "data/j1"}}
    params["saber"] = {"s1": {"folder": "data/s1"}}
    params["meld_generate"] = {"m1": {"folder": "data/m1"}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    got = dvc_stages(tmp_path)
    assert {"judging@j1", "saber@s1", "meld_generate@m1"} <= set(got)
    assert layout_vs_dvc(Layout(tmp_path), got, params) == []


def _one(bad: list[str], *words: str) -> bool:
    """Whether one line of ``bad`` holds every word."""
    return any(all(w in line for w in words) for line in bad)


def test_a_wrong_layout_member_is_named_with_its_stage(stages):
    class WrongModels(Layout):
        def models(self, arm: str) -> Path:
            return self.p("model", arm)

    class WrongCorpus(Layout):
        corpus = property(lambda self: self.p("artifacts", "corpora"))

    params = _params(REPO)
    arm = params["arms"][0]
    bad = layout_vs_dvc(WrongModels(REPO), stages, params)
    assert _one(bad, f"Layout.models({arm!r}) = model/{arm}", f"dvc.yaml stage train@{arm} writes"), bad
    assert _one(bad, f"dvc.yaml stage train@{arm} writes models/{arm}, which no Layout member names"), bad
    assert _one(bad, f"Layout.models({arm!r}) = model/{arm}: no dvc.yaml stage writes it"), bad
    bad = layout_vs_dvc(WrongCorpus(REPO), stages, params)
    assert _one(bad, "Layout.corpus = artifacts/corpora, but dvc.yaml stage corpus writes"), bad


def test_a_member_no_stage_writes_and_an_output_no_member_names_fail(stages):
    class Extra(Layout):
        @property
        def bogus(self) -> Path:
            return self.p("artifacts", "bogus")

        def per_name(self, name: str) -> Path:
            return self.p("artifacts", "per_name", name)

    class ScratchInsideAnOutput(Layout):
        scratch = property(lambda self: self.p("artifacts", "corpus", "tmp"))

    params = _params(REPO)
    bad = layout_vs_dvc(Extra(REPO), stages, params)
    assert _one(bad, "Layout.bogus = artifacts/bogus: no dvc.yaml stage writes it"), bad
    assert _one(bad, "Layout.per_name() takes a name"), bad
    more = {**stages, "newstage": {"outs": ["artifacts/newstage", "metrics/newstage.json"], "deps": []}}
    bad = layout_vs_dvc(Layout(REPO), more, params)
    assert bad == ["dvc.yaml stage newstage writes artifacts/newstage, which no Layout member names (add one, or "
                   "list it in UNNAMED_OUTS with the reason it needs none)"]
    bad = layout_vs_dvc(ScratchInsideAnOutput(REPO), stages, params)
    assert _one(bad, "Layout.scratch = artifacts/corpus/tmp is declared outside DVC", "dvc.yaml stage corpus"), bad


def test_every_exception_is_in_use(stages):
    """A listed exception that nothing needs any more is removed, not kept."""
    outs = {(s, o) for s, st in stages.items() for o in st["outs"]}
    assert set(UNNAMED_OUTS) <= outs
    members = layout_members(Layout)
    assert set(STAGE_NAMED_UNDER) | set(HOLDERS) | set(NOT_DVC) <= set(members)


# --------------------------------------------------------------------------- path literals in code

#: The first folders of the pipeline's outputs (Layout's): a string constant spelling a path under one is flagged.
ROOTS = ("artifacts", "models")
#: Functions that join path parts: a bare root as one of their arguments is a path too.
JOINERS = {"p", "joinpath", "Path", "PurePath", "PurePosixPath", "join"}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


def _params_defaults(tree: ast.AST, rel: str) -> set[int]:
    """String constants that are a params field's default (``default=`` in ``recipematch/config``)."""
    if not rel.startswith("config/"):
        return set()
    return {id(k.value) for node in ast.walk(tree) if isinstance(node, ast.Call)
            for k in node.keywords if k.arg == "default" and isinstance(k.value, ast.Constant)}


def _layout_class(tree: ast.AST, rel: str) -> set[int]:
    if rel != "pipeline/door.py":
        return set()
    return {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name == "Layout" for n in ast.walk(c)}


def _callee(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def path_literals(f: Path, rel: str) -> list[tuple[int, str]]:
    """``(line, text)`` of each pipeline path spelled in code in module ``f``: a string constant
    starting ``artifacts/`` or ``models/`` (an f-string's too), or a bare ``artifacts``/``models``
    joined as a path part (``root / "artifacts"``, ``lay.p("artifacts", ...)``). Docstrings,
    comments, params defaults and Layout itself are skipped."""
    tree = ast.parse(f.read_text(encoding="utf-8"), filename=str(f))
    skip = _docstrings(tree) | _params_defaults(tree, rel) | _layout_class(tree, rel)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(
                tuple(f"{r}/" for r in ROOTS)):
            found.append((node.lineno, node.value))
        parts = ([node.left, node.right] if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                 else node.args if isinstance(node, ast.Call) and _callee(node) in JOINERS else [])
        found += [(node.lineno, ast.unparse(node)) for a in parts
                  if isinstance(a, ast.Constant) and a.value in ROOTS]
    return sorted(set(found))


#: Modules allowed to spell a pipeline path, each with its reason; the literals are listed so a
#: new one fails. Those marked "not moved yet" are owned by other changes: each has a Layout member now.
SPELLED_ELSEWHERE: dict[str, tuple[str, set[str]]] = {
    "audit/project.py": ("the audit-report stage, which only an audit project runs, is written here (every other "
                         "audit stage is the main dvc.yaml's)", {"artifacts/pairs"}),
    "pipeline/gates.py": ("KEEP_DEPS: a dvc.yaml dep as dvc.yaml spells it (read by recipematch.pipeline.deps, "
                          "which writes dvc.yaml); Layout.evalsets is the same folder", {"artifacts/evalsets"}),
    "pipeline/mix.py": ("KEEP_DEPS: a dvc.yaml dep as dvc.yaml spells it (read by recipematch.pipeline.deps, "
                        "which writes dvc.yaml); Layout.evalsets is the same folder", {"artifacts/evalsets"}),
}


def _modules() -> list[tuple[Path, str]]:
    return [(f, f.relative_to(SRC).as_posix()) for f in sorted(SRC.rglob("*.py")) if "__pycache__" not in f.parts]


def test_no_module_spells_a_pipeline_path_outside_layout():
    bad = []
    for f, rel in _modules():
        allowed = SPELLED_ELSEWHERE.get(rel, ("", set()))[1]
        bad += [f"{rel}:{line}: {text}" for line, text in path_literals(f, rel) if text not in allowed]
    assert bad == []


def test_every_allowed_spelling_is_still_there():
    """An exception whose literal is gone (moved to Layout) is removed from the list."""
    found = {rel: {t for _, t in path_literals(f, rel)} for f, rel in _modules()}
    stale = [f"{rel}: {t}" for rel, (_, texts) in SPELLED_ELSEWHERE.items()
             for t in sorted(texts - found.get(rel, set()))]
    assert stale == []


def test_the_literal_check_sees_code_and_skips_prose(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""Writes artifacts/x/y."""\n'
                 'def run(lay, root, name):\n'
                 '    """Reads models/arm."""\n'
                 '    # artifacts/z in a comment\n'
                 '    a = root / "artifacts" / "x"\n'
                 '    b = lay.p("models", name)\n'
                 '    c = f"artifacts/regen/{name}"\n'
                 '    d = {"models": 3}["models"]\n'
                 '    return "see artifacts/x", a, b, c, d\n', encoding="utf-8")
    assert [line for line, _ in path_literals(f, "m.py")] == [5, 6, 7]
    cfg = tmp_path / "c.py"
    cfg.write_text('x = spec("help", default="artifacts/replay/ict.jsonl")\n', encoding="utf-8")
    assert path_literals(cfg, "config/sections.py") == []
    assert path_literals(cfg, "other.py") == [(1, "artifacts/replay/ict.jsonl")]


def test_layout_is_skipped_only_in_door(tmp_path):
    f = tmp_path / "door.py"
    f.write_text('class Layout:\n    x = "artifacts/a"\n\nclass Other:\n    y = "artifacts/b"\n', encoding="utf-8")
    assert path_literals(f, "pipeline/door.py") == [(5, "artifacts/b")]
    assert len(path_literals(f, "pipeline/other.py")) == 2

