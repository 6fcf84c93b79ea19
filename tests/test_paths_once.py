"""Every pipeline path is written once, in ``dvc.yaml``'s ``cmd`` (each stage gets its paths as
``--<role> PATH`` options; ``tests/test_stage_paths.py`` holds the commands to the stages' deps
and outputs): no module spells an ``artifacts/``, ``models/``, ``metrics/``, ``reports/`` or
``cache/`` path. :func:`path_literals` finds string constants in code (docstrings, comments and
params defaults aside) that spell one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "recipematch"


# --------------------------------------------------------------------------- path literals in code

#: The first folders of the pipeline's outputs and caches: a string constant spelling a path under one is flagged.
ROOTS = ("artifacts", "models", "metrics", "reports", "cache")
#: A path under one of them, at the start of a string or after a space, quote or bracket (a message's path too).
SPELLED = re.compile(r"(?:^|[\s'\"(\[`])(?:" + "|".join(ROOTS) + r")/")
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
    """String constants that are a params field's default or help (``default=`` and the text of
    ``spec(...)`` in ``recipematch/config``: what ``recipematch params`` prints)."""
    if not rel.startswith("config/"):
        return set()
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    defaults = {id(k.value) for node in calls for k in node.keywords
                if k.arg == "default" and isinstance(k.value, ast.Constant)}
    helps = {id(node.args[0]) for node in calls if _callee(node) == "spec" and node.args
             and isinstance(node.args[0], ast.Constant)}
    return defaults | helps


def _callee(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def path_literals(f: Path, rel: str) -> list[tuple[int, str]]:
    """``(line, text)`` of each pipeline path spelled in code in module ``f``: a string constant
    holding a path under one of :data:`ROOTS` (an f-string's too, a message's too), or a bare root
    joined as a path part (``root / "artifacts"``, ``lay.p("artifacts", ...)``). Docstrings,
    comments and params defaults are skipped."""
    tree = ast.parse(f.read_text(encoding="utf-8"), filename=str(f))
    skip = _docstrings(tree) | _params_defaults(tree, rel)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SPELLED.search(node.value):
            found.append((node.lineno, node.value))
        parts = ([node.left, node.right] if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                 else node.args if isinstance(node, ast.Call) and _callee(node) in JOINERS else [])
        found += [(node.lineno, ast.unparse(node)) for a in parts
                  if isinstance(a, ast.Constant) and a.value in ROOTS]
    return sorted(set(found))


#: Modules allowed to spell a pipeline path, each with its reason; the literals are listed so a
#: new one fails.
SPELLED_ELSEWHERE: dict[str, tuple[str, set[str]]] = {
    "audit/project.py": ("the audit-report stage, which only an audit project runs, is written here (every other "
                         "audit stage is the main dvc.yaml's)",
                         {"artifacts/pairs", "metrics/stats.json", "metrics/gates.json", "metrics/corpus.json",
                          "recipematch audit-report --metrics-dir metrics --pairs artifacts/pairs --out reports "
                          "--summary audit.json"}),
    "config/checks.py": ("params are checked without reading dvc.yaml: an external copy inside the external "
                         "stages' output folder would be replaced by the build it feeds",
                         {".copy must not lie under artifacts/external/ (the stages' output, replaced whole on every "
                          "build), got "}),
    "pipeline/gates.py": ("KEEP_DEPS: a dvc.yaml dep as dvc.yaml spells it (read by recipematch.pipeline.deps, "
                          "which writes dvc.yaml); the command passes the same folder as --evalsets", {"artifacts/evalsets"}),
    "pipeline/mix.py": ("KEEP_DEPS: a dvc.yaml dep as dvc.yaml spells it (read by recipematch.pipeline.deps, "
                        "which writes dvc.yaml); the command passes the same folder as --evalsets", {"artifacts/evalsets"}),
}


def _modules() -> list[tuple[Path, str]]:
    return [(f, f.relative_to(SRC).as_posix()) for f in sorted(SRC.rglob("*.py")) if "__pycache__" not in f.parts]


def test_no_module_spells_a_pipeline_path():
    bad = []
    for f, rel in _modules():
        allowed = SPELLED_ELSEWHERE.get(rel, ("", set()))[1]
        bad += [f"{rel}:{line}: {text}" for line, text in path_literals(f, rel) if text not in allowed]
    assert bad == []


def test_every_allowed_spelling_is_still_there():
    """An exception whose literal is gone is removed from the list."""
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
    assert [line for line, _ in path_literals(f, "m.py")] == [5, 6, 7, 9]  # a message's path too
    cfg = tmp_path / "c.py"
    cfg.write_text('x = spec("help", default="artifacts/replay/ict.jsonl")\n', encoding="utf-8")
    assert path_literals(cfg, "config/sections.py") == []
    assert path_literals(cfg, "other.py") == [(1, "artifacts/replay/ict.jsonl")]
