"""Every pipeline path is written once, in ``dvc.yaml``'s ``cmd`` (each stage gets its paths as
``--<role> PATH`` options; ``tests/test_stage_paths.py`` holds the commands to the stages' deps
and outputs): no module spells an ``artifacts/``, ``models/``, ``metrics/``, ``reports/`` or
``cache/`` path. :func:`path_literals` finds string constants in code (docstrings, comments and
params defaults aside) that spell one.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "recipematch"


# --------------------------------------------------------------------------- path literals in code

#: The first folders of the pipeline's outputs and caches: a string constant spelling a path under one is flagged.
ROOTS = ("artifacts", "models", "metrics", "reports", "cache")
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


def _callee(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def path_literals(f: Path, rel: str) -> list[tuple[int, str]]:
    """``(line, text)`` of each pipeline path spelled in code in module ``f``: a string constant
    starting ``artifacts/`` or ``models/`` (an f-string's too), or a bare ``artifacts``/``models``
    joined as a path part (``root / "artifacts"``, ``lay.p("artifacts", ...)``). Docstrings,
    comments and params defaults are skipped."""
    tree = ast.parse(f.read_text(encoding="utf-8"), filename=str(f))
    skip = _docstrings(tree) | _params_defaults(tree, rel)
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
#: new one fails.
SPELLED_ELSEWHERE: dict[str, tuple[str, set[str]]] = {
    "audit/project.py": ("the audit-report stage, which only an audit project runs, is written here (every other "
                         "audit stage is the main dvc.yaml's)",
                         {"artifacts/pairs", "metrics/stats.json", "metrics/gates.json", "metrics/corpus.json"}),
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
    assert [line for line, _ in path_literals(f, "m.py")] == [5, 6, 7]
    cfg = tmp_path / "c.py"
    cfg.write_text('x = spec("help", default="artifacts/replay/ict.jsonl")\n', encoding="utf-8")
    assert path_literals(cfg, "config/sections.py") == []
    assert path_literals(cfg, "other.py") == [(1, "artifacts/replay/ict.jsonl")]
