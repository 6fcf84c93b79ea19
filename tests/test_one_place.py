"""Each fact of the code is written in one place: these fail when one is written twice.

- a module over 700 lines says why on one line near its top (``# long module: <reason>``);
- no module imports a private name from another package (a shared helper is public in one place);
- the scoring-rule names and the evaluation roles are listed only by their registries;
- recall keys (``R@k``) are spelled only by :func:`recipematch.metrics.recall_key`;
- a package folder whose modules a stage imports whole is one ``dvc.yaml`` dep;
- every stage module is a ``recipematch`` subcommand and every ``stages/`` entry point runs one.
- BEIR files and corpus pools are parsed only by :mod:`recipematch.io`'s JSONL reader;
- :func:`recipematch.scoring.score` is the one public scorer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from recipematch.metrics import SCORING_RULES
from recipematch.pipeline.deps import collapse_packages, dvcignore_patterns
from recipematch.rules import EVAL_ROLES

SRC = Path(__file__).resolve().parents[1] / "src" / "recipematch"
MODULES = sorted(f for f in SRC.rglob("*.py") if "__pycache__" not in f.parts)
LIMIT = 700


def _rel(f: Path) -> str:
    return str(f.relative_to(SRC))


def _tree(f: Path) -> ast.Module:
    return ast.parse(f.read_text(encoding="utf-8"), filename=str(f))


def test_a_long_module_says_why_near_its_top():
    bad = []
    for f in MODULES:
        lines = f.read_text(encoding="utf-8").splitlines()
        if len(lines) <= LIMIT:
            continue
        body = _tree(f).body
        top = body[0].end_lineno if body and isinstance(body[0], ast.Expr) else 0  # below the docstring
        if not any(line.startswith("# long module: ") and len(line) > 30 for line in lines[top:top + 3]):
            bad.append(f"{_rel(f)}: {len(lines)} lines")
    assert bad == []


def test_no_module_imports_a_private_name_from_another_package():
    """A private name is shared at most within its package (``cas/``'s modules share their
    helpers); one used across packages is public in one place."""
    bad = []
    for f in MODULES:
        here = ".".join(("recipematch", *f.relative_to(SRC).parent.parts))
        for node in ast.walk(_tree(f)):
            if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("recipematch"):
                continue
            package = node.module.rsplit(".", 1)[0] if node.module.count(".") else node.module
            if package != here:
                bad += [f"{_rel(f)}:{node.lineno} imports {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert bad == []


def _string_collections(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            yield node.lineno, {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}


@pytest.mark.parametrize(("names", "home"), [(tuple(SCORING_RULES), "metrics.py"), (tuple(EVAL_ROLES), "rules.py")],
                         ids=["scoring rules", "evaluation roles"])
def test_a_registry_is_the_one_list_of_its_names(names, home):
    bad = []
    for f in MODULES:
        if _rel(f) == home:
            continue
        for line, strings in _string_collections(_tree(f)):
            if len(strings & set(names)) >= 2:
                bad.append(f"{_rel(f)}:{line} lists {sorted(strings & set(names))}")
    assert bad == []


def test_recall_keys_are_spelled_by_recall_key_only():
    bad = []
    for f in MODULES:
        if _rel(f) == "metrics.py":
            continue
        for node in ast.walk(_tree(f)):
            if isinstance(node, ast.JoinedStr) and node.values:
                first = node.values[0]
                if isinstance(first, ast.Constant) and str(first.value).endswith("R@") and len(node.values) > 1:
                    bad.append(f"{_rel(f)}:{node.lineno}")
    assert bad == []


def test_a_package_imported_whole_is_one_dep_and_a_partial_one_lists_its_modules(tmp_path):
    pkg = tmp_path / "recipematch"
    for rel in ("__init__.py", "a.py", "whole/__init__.py", "whole/x.py", "whole/inner/__init__.py",
                "whole/inner/y.py", "part/__init__.py", "part/p.py", "part/q.py", "data/__init__.py", "data/t.py"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text("")
    (pkg / "data" / "prompt.txt").write_text("package data is declared on its own")
    cache = pkg / "whole" / "__pycache__"
    cache.mkdir()
    (cache / "x.cpython-311.pyc").write_bytes(b"")
    used = {pkg / "__init__.py", pkg / "a.py", pkg / "whole/__init__.py", pkg / "whole/x.py",
            pkg / "whole/inner/__init__.py", pkg / "whole/inner/y.py", pkg / "part/__init__.py", pkg / "part/p.py",
            pkg / "data/__init__.py", pkg / "data/t.py"}
    want = {"recipematch/__init__.py", "recipematch/a.py", "recipematch/whole", "recipematch/part/__init__.py",
            "recipematch/part/p.py", "recipematch/data/__init__.py", "recipematch/data/t.py"}
    (tmp_path / ".dvcignore").write_text("# bytecode\n__pycache__/\n*.pyc\n")
    got = {str(p.relative_to(tmp_path)) for p in collapse_packages(used, tmp_path, dvcignore_patterns(tmp_path))}
    assert got == want
    # a stray editor file counts unless .dvcignore hides it (DVC would hash it into the folder)
    (pkg / "whole" / ".x.py.swp").write_text("")
    got = {str(p.relative_to(tmp_path)) for p in collapse_packages(used, tmp_path, dvcignore_patterns(tmp_path))}
    assert "recipematch/whole" not in got and "recipematch/whole/x.py" in got
    (tmp_path / ".dvcignore").write_text("# leftovers\n__pycache__/\n*.pyc\n*.swp\n")
    got = {str(p.relative_to(tmp_path)) for p in collapse_packages(used, tmp_path, dvcignore_patterns(tmp_path))}
    assert got == want


def test_a_module_linked_from_outside_src_keeps_its_path_in_src(tmp_path):
    pkg = tmp_path / "src" / "recipematch"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    outside = tmp_path / "elsewhere.py"
    outside.write_text("")
    (pkg / "sub" / "m.py").symlink_to(outside)
    used = {pkg / "__init__.py", pkg / "sub" / "__init__.py", pkg / "sub" / "m.py"}
    got = {str(p.relative_to(tmp_path / "src")) for p in collapse_packages(used, tmp_path / "src", ())}
    assert got == {"recipematch/__init__.py", "recipematch/sub"}


def test_every_stage_module_is_a_subcommand_and_every_entry_point_runs_one():
    from recipematch.cli import STAGE_COMMANDS
    from recipematch.pipeline.deps import stage_module

    stage_modules = {f.stem for f in (SRC / "pipeline").glob("*.py") if "\nmain = stage(" in f.read_text(encoding="utf-8")}
    commands = {module for _, module in STAGE_COMMANDS}
    assert commands == stage_modules
    entries = sorted((SRC.parents[1] / "stages").glob("*.py"))
    assert entries and {stage_module(e).rsplit(".", 1)[1] for e in entries} <= stage_modules


def test_an_import_inside_a_function_says_why():
    """Imports sit at the top of a module; one of ``recipematch`` inside a function carries a
    comment on its line, or the line above, saying why (a heavy library, an import cycle,
    ``--help`` speed, a name tests replace)."""
    bad = []
    for f in MODULES:
        lines = f.read_text(encoding="utf-8").splitlines()
        for fn in ast.walk(_tree(f)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("recipematch"):
                    here = lines[node.lineno - 1:node.end_lineno]
                    above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                    if not any("#" in line for line in here) and not above.startswith("#"):
                        bad.append(f"{_rel(f)}:{node.lineno}")
    assert sorted(set(bad)) == []


#: what a module that reads JSONL only through :mod:`recipematch.io` never does itself
_JSON_PARSERS = {"load", "loads", "raw_decode", "JSONDecoder"}
_FILE_READERS = {"read_text", "read_bytes", "readline", "readlines"}


@pytest.mark.parametrize("module", ["beir.py", "corpus.py"])
def test_a_jsonl_reader_is_not_written_twice(module):
    """beir.py and corpus.py parse no JSON and read no file themselves (beir opens files only
    to write them): their JSONL lines come from :func:`recipematch.io.iter_jsonl_strict` /
    :func:`recipematch.io.iter_jsonl`."""
    tree = _tree(SRC / module)
    bad = [f"{module}:{n.lineno} defines {n.name}" for n in ast.walk(tree)
           if isinstance(n, ast.FunctionDef) and "read" in n.name and "jsonl" in n.name]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "json":
            bad.append(f"{module}:{node.lineno} imports from json")
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "json" and f.attr in _JSON_PARSERS:
            bad.append(f"{module}:{node.lineno} json.{f.attr}")
        if isinstance(f, ast.Attribute) and f.attr in _FILE_READERS:
            bad.append(f"{module}:{node.lineno} .{f.attr}()")
        if isinstance(f, ast.Name) and f.id == "open":
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            if not (isinstance(mode, ast.Constant) and "w" in str(mode.value)):
                bad.append(f"{module}:{node.lineno} opens a file to read it")
    assert bad == []


def test_beir_reads_each_jsonl_file_through_io(monkeypatch):
    """corpus.jsonl, queries.jsonl and qrels/<split>.jsonl all go through io's reader, and a
    line it refuses keeps io's wording as a BeirFormatError."""
    import recipematch.io as rio
    from recipematch.beir import BeirFormatError, read_beir

    seen = []
    real = rio.iter_jsonl

    def spy(path, **kw):
        seen.append(Path(path).relative_to(folder).as_posix())
        return real(path, **kw)

    folder = Path(__file__).parent / "fixtures" / "beir" / "mathnet_mini" / "easy"
    monkeypatch.setattr(rio, "iter_jsonl", spy)
    ds = read_beir(folder)
    assert sorted(seen) == ["corpus.jsonl", "qrels/test.jsonl", "queries.jsonl"]
    assert len(ds.corpus) == 10 and ds.counts.n_qrels_rows > 0

    def refuse(path, **kw):
        yield 1, rio.BadLine(str(path), 1, "invalid JSON: planted", "")

    monkeypatch.setattr(rio, "iter_jsonl", refuse)
    with pytest.raises(BeirFormatError, match=r"corpus\.jsonl:1: not valid JSON Lines: invalid JSON: planted; "):
        read_beir(folder)


def test_scoring_has_one_public_scorer():
    """Of :mod:`recipematch.scoring`'s public functions only ``score`` reaches the ranking
    kernels; ``score_folder`` is ``load_set`` then ``score``; no retired wrapper
    (``evaluate_benchmark``, ``evaluate_benchmark_bm25``) is defined anywhere in the package."""
    import recipematch.scoring as scoring

    fns = {n.name: n for n in _tree(SRC / "scoring.py").body if isinstance(n, ast.FunctionDef)}

    def calls(name):
        return {c.func.id for c in ast.walk(fns[name]) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}

    public = [n for n in scoring.__all__ if callable(getattr(scoring, n))]
    kernels = {"evaluate_bm25", "evaluate_embeddings"}
    assert [n for n in public if calls(n) & kernels] == ["score"]
    assert [n for n in public if "score" in calls(n)] == ["score_folder"]
    assert calls("score_folder") == {"score", "load_set", "Path"}
    assert not [n for n in scoring.__all__ if n.startswith("evaluate")]
    retired = {"evaluate_benchmark", "evaluate_benchmark_bm25"}
    bad = [f"{_rel(f)}:{n.lineno} {n.name}" for f in MODULES for n in ast.walk(_tree(f))
           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in retired]
    assert bad == []
