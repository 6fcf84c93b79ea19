"""Keep ``dvc.yaml`` honest: each stage declares exactly the code it runs and the params it reads.

A stage's code is the import closure of its stage module: every ``recipematch`` module
reachable through ``import`` / ``from … import`` statements (module level and inside
functions alike, read from the source with :mod:`ast`, nothing executed), plus the
``stages/<name>.py`` entry point. Its params are the module's ``PARAMS`` (which the stage
door enforces at run time: reading an undeclared key fails).

Data a stage reads from a path that a param names is declared in the stage module's
``DATA_DEPS`` as DVC interpolations (``"${data.path}"``): ``dvc.yaml`` must list exactly those,
so DVC hashes whatever file or folder the params name. One whose param is empty in
``params.yaml`` (an optional source, e.g. ``data.retrieve: ""``) is not listed, since DVC
cannot hash an empty path; the stage refuses to run with that param set while ``dvc.yaml``
lacks the entry (:func:`require_declared_dep`).

A stage that reads evaluation sets declares which in its module's ``EVAL_DEPS`` (selectors,
:func:`eval_deps`); ``dvc.yaml`` must list each such set's folder as
``${evaluations.<name>.folder}``, one per distinct folder, sorted by folder, so declaring a set
under ``evaluations`` is a params edit and ``--write``. A hand-written dep those folders
make redundant (``artifacts/external`` once ``artifacts/external/<name>/<subset>`` is listed)
goes, unless the module's ``KEEP_DEPS`` names it (the stage reads other files there).

``python -m recipematch.pipeline.deps`` prints what differs; ``--write`` rewrites the code,
data, evaluation and params entries of ``dvc.yaml`` in place (comments and other entries kept).
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import io
import itertools
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from recipematch.config import load_params_raw
from recipematch.config.yamlio import load_yaml_file
from recipematch.errors import RecipematchError
from recipematch.io import atomic_write_text
from recipematch.pipeline.graph import TEMPLATE
from recipematch.pipeline.params_check import check_params_whole

PACKAGE = "recipematch"

#: module (relative to src/) -> package-data folder it reads with importlib.resources
DATA_READERS = {"recipematch/llm/prompts.py": "recipematch/prompts", "recipematch/external/meld_attack.py": "recipematch/prompts",
                "recipematch/judging.py": "recipematch/rubrics"}


def _src_root() -> Path:
    return Path(importlib.import_module(PACKAGE).__file__).resolve().parent.parent


def _module_file(name: str, src: Path) -> Path | None:
    base = src.joinpath(*name.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def _imports(path: Path, module: str) -> set[str]:
    """Every module name imported anywhere in ``path`` (absolute names; for ``from a import b``
    both ``a`` and ``a.b``, the latter kept only if it is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base_parts = parts if is_pkg else parts[:-1]
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def closure(modules: Iterable[str]) -> set[Path]:
    """Files of every ``recipematch`` module reachable from ``modules`` (parents' ``__init__``
    included, since importing a module runs them)."""
    src = _src_root()
    seen: set[str] = set()
    files: set[Path] = set()
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in seen or not (name == PACKAGE or name.startswith(PACKAGE + ".")):
            continue
        seen.add(name)
        f = _module_file(name, src)
        if f is None:
            continue
        files.add(f)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        todo.extend(_imports(f, name))
    return files


def dvcignore_patterns(root: Path) -> tuple[str, ...]:
    """The name patterns of ``root/.dvcignore`` (comments and blank lines aside): files DVC
    leaves out of a folder's hash, so a package folder collapsed into one dep ignores them too."""
    path = root / ".dvcignore"
    if not path.is_file():
        return ()
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return tuple(line.rstrip("/") for line in lines if line and not line.startswith("#"))


def _ignored(rel: Path, ignore: Iterable[str]) -> bool:
    return any(fnmatch.fnmatch(part, pattern) for part in rel.parts for pattern in ignore)


def _package_files(folder: Path, ignore: Iterable[str]) -> set[Path] | None:
    """Every file under ``folder`` that DVC hashes (``ignore``: the ``.dvcignore`` patterns), or
    ``None`` when one of them is not a Python module (package data is declared on its own)."""
    out = set()
    for f in folder.rglob("*"):
        if f.is_dir() or _ignored(f.relative_to(folder), ignore):
            continue
        if f.suffix != ".py":
            return None
        out.add(f)
    return out


def collapse_packages(files: set[Path], src: Path, ignore: Iterable[str]) -> set[Path]:
    """``files`` (module files under ``src``) with every package folder whose modules are all
    in it listed as the folder (the largest such folder wins), so ``dvc.yaml`` names
    ``src/recipematch/config`` once instead of its modules one by one. A folder holding
    anything but modules (``ignore``: the name patterns DVC does not hash, :func:`dvcignore_patterns`) is never collapsed."""
    files = set(files)
    ignore = tuple(ignore)
    covered: set[Path] = set()
    folders: list[Path] = []
    pkg_root = src / PACKAGE
    for init in sorted(pkg_root.rglob("__init__.py"), key=lambda f: len(f.parts)):
        folder = init.parent
        if folder == pkg_root or any(c in folder.parents for c in folders) or _ignored(folder.relative_to(pkg_root), ignore):
            continue
        members = _package_files(folder, ignore)
        if members and members <= files:
            folders.append(folder)
            covered |= members
    return (files - covered) | set(folders)


def stage_module(entry: Path) -> str:
    """The ``recipematch.pipeline.<x>`` module a ``stages/<name>.py`` entry point runs."""
    tree = ast.parse(entry.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(f"{PACKAGE}.pipeline."):
            return node.module
    raise ValueError(f"{entry}: imports no {PACKAGE}.pipeline module")


def expected(root: Path, cmd: str) -> tuple[list[str], list[str]] | None:
    """``(code deps, params)`` a ``dvc.yaml`` stage with command ``cmd`` must declare, or
    ``None`` when the command runs no ``stages/*.py`` entry point."""
    m = re.search(r"\bstages/(\w+)\.py\b", cmd)
    if not m:
        return None
    entry = root / "stages" / f"{m.group(1)}.py"
    if not entry.is_file():
        raise RecipematchError(f"dvc.yaml: a stage's cmd runs {entry.relative_to(root)}, which does not exist")
    mod = stage_module(entry)
    src = _src_root()
    found = closure([mod])
    files = sorted(str(Path("src") / f.relative_to(src)) for f in collapse_packages(found, src, dvcignore_patterns(root)))
    # package data a module reads at run time (the prompt templates: their hashes key the
    # recordings and the call store) is code as far as DVC is concerned
    for module_file, data_dir in DATA_READERS.items():
        if src / module_file in found and str(Path("src") / data_dir) not in files:
            files.append(str(Path("src") / data_dir))
    params = list(importlib.import_module(mod).PARAMS)
    return [str(entry.relative_to(root)), *files], params


def _is_code(dep: str) -> bool:
    return dep.startswith(("src/", "stages/"))


_INTERP = re.compile(r"^\$\{([A-Za-z_][\w.]*)\}$")


def _is_param_dep(dep: str) -> bool:
    """A dep interpolated from params (``${data.path}``), not from a matrix item."""
    m = _INTERP.match(dep)
    return bool(m) and not m.group(1).startswith("item.")


def _param_value(params: dict, dotted: str):
    value = params
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def data_deps(root: Path, cmd: str) -> list[str]:
    """The ``${param}`` deps a stage with command ``cmd`` must list: its module's ``DATA_DEPS``
    whose param is set (non-empty) in ``root/params.yaml``."""
    m = re.search(r"\bstages/(\w+)\.py\b", cmd)
    if not m:
        return []
    mod = importlib.import_module(stage_module(root / "stages" / f"{m.group(1)}.py"))
    declared = list(getattr(mod, "DATA_DEPS", ()))
    if not declared:
        return []

    path = root / "params.yaml"
    params = load_params_raw(path) if path.is_file() else {}
    return [d for d in declared if _param_value(params or {}, _INTERP.match(d).group(1)) not in (None, "")]


#: a generated evaluation dep: one declared evaluation's folder, as DVC interpolates it
_EVAL_DEP = re.compile(r"^\$\{evaluations\.([A-Za-z0-9][A-Za-z0-9_-]*)\.folder\}$")


def _is_eval_dep(dep) -> bool:
    return isinstance(dep, str) and bool(_EVAL_DEP.match(dep))


def _stage_mod(root: Path, cmd: str):
    m = re.search(r"\bstages/(\w+)\.py\b", cmd)
    return importlib.import_module(stage_module(root / "stages" / f"{m.group(1)}.py")) if m else None


def _params(root: Path) -> dict:
    path = root / "params.yaml"
    return (load_params_raw(path) if path.is_file() else None) or {}


def _subst(text: str, ctx: Mapping, params: dict):
    """``text`` with its ``${key}`` / ``${item.x}`` (from ``ctx``, a foreach or matrix item) and
    ``${param.path}`` parts resolved; ``None`` when one does not resolve."""
    def one(expr: str):
        if expr == "key" or expr == "item" or expr.startswith("item."):
            head, _, rest = expr.partition(".")
            if head not in ctx:
                return None
            return _param_value(ctx[head], rest) if rest else ctx[head]
        return _param_value(params, expr)

    whole = TEMPLATE.fullmatch(text)
    if whole:
        return one(whole.group(1))
    pieces = TEMPLATE.split(text)  # literal, expression, literal, ...
    for i in range(1, len(pieces), 2):
        v = one(pieces[i])
        if v is None or isinstance(v, (dict, list)):
            return None
        pieces[i] = str(v)
    return "".join(pieces)


def _contexts(stage: Mapping, params: dict) -> list[dict]:
    """The items DVC expands a ``dvc.yaml`` stage into (``{"key": .., "item": ..}`` per foreach
    entry, ``{"item": {..}}`` per matrix point), ``[{}]`` for a plain stage."""
    if "foreach" in stage:
        over = stage["foreach"]
        over = _subst(over, {}, params) if isinstance(over, str) else over
        if isinstance(over, Mapping):
            return [{"key": k, "item": v} for k, v in over.items()]
        return [{"item": v} for v in over or []]
    if "matrix" in stage:
        axes = {}
        for k, v in stage["matrix"].items():
            v = _subst(v, {}, params) if isinstance(v, str) else v
            axes[k] = list(v or [])
        return [{"item": dict(zip(axes, combo))} for combo in itertools.product(*axes.values())]
    return [{}]


def _selected(selectors, ctx: Mapping, params: dict) -> set[str]:
    """The evaluation names ``selectors`` (a module's ``EVAL_DEPS``) pick for one stage item.

    A selector is ``"all"`` (every declared evaluation), ``"role:<role>"`` (those of that
    role) or ``"param:<dotted key>"`` (the one evaluation that param names; the key may hold
    ``${key}`` / ``${item.x}`` of a foreach item, e.g. ``"param:regen.${key}.of"``)."""
    evals = params.get("evaluations") or {}
    out: set[str] = set()
    for sel in ([selectors] if isinstance(selectors, str) else selectors):
        kind, _, arg = sel.partition(":")
        if kind == "all" and not arg:
            out.update(evals)
        elif kind == "role" and arg:
            out.update(n for n, ev in evals.items() if isinstance(ev, Mapping) and ev.get("role") == arg)
        elif kind == "param" and arg:
            key = _subst(arg, ctx, params)
            name = _param_value(params, key) if key else None
            if isinstance(name, str) and name in evals:  # an undeclared name: the stage itself refuses it
                out.add(name)
        else:
            raise ValueError(f"EVAL_DEPS selector {sel!r}: expected 'all', 'role:<role>' or 'param:<dotted key>'")
    return out


def _inside(path: str, folder: str) -> bool:
    p, f = PurePosixPath(path), PurePosixPath(folder)
    return p == f or f in p.parents


def _folder(params: dict, name: str) -> str:
    folder = _param_value(params, f"evaluations.{name}.folder")
    return str(PurePosixPath(folder)) if isinstance(folder, str) and folder else ""


def eval_deps(root: Path, stage: Mapping, name: str = "") -> list[str]:
    """The ``${evaluations.<name>.folder}`` deps ``dvc.yaml`` stage ``name`` (``stage``: its outer
    definition, ``foreach`` / ``matrix`` and ``do``) must list: the folders of the evaluations
    its module's ``EVAL_DEPS`` selects in ``root/params.yaml``, the union over a foreach or
    matrix stage's items (DVC takes one dep list per stage definition), one per distinct
    folder (the first name in sorted order speaks for a folder two sets share), sorted by folder.

    Raises:
        RecipematchError: a selected folder lies inside one of the stage's own outputs (DVC
            would see a cycle: e.g. a ``regen`` entry whose ``of`` is another entry's output).
    """
    body = stage.get("do", stage)
    mod = _stage_mod(root, body["cmd"])
    selectors = getattr(mod, "EVAL_DEPS", ()) if mod else ()
    if not selectors:
        return []
    params = _params(root)
    contexts = _contexts(stage, params)
    names: set[str] = set()
    for ctx in contexts:
        names |= _selected(selectors, ctx, params)
    by_folder: dict[str, str] = {}
    for ev in sorted(names):
        folder = _folder(params, ev)
        if folder:
            by_folder.setdefault(folder, ev)
    outs = [_subst(o if isinstance(o, str) else next(iter(o)), ctx, params)
            for ctx in contexts for o in body.get("outs", [])]
    for folder, ev in by_folder.items():
        clash = [o for o in outs if o and (_inside(folder, o) or _inside(o, folder))]
        if clash:
            raise RecipematchError(f"dvc.yaml stage {name or body['cmd']}: reads evaluation {ev} ({folder}), which "
                                   f"overlaps its own output {clash[0]}: DVC would see a cycle (a foreach stage "
                                   f"gets the union of its items' sets); declare that set elsewhere")
    return [f"${{evaluations.{by_folder[f]}.folder}}" for f in sorted(by_folder)]


def redundant_deps(root: Path, stage: Mapping) -> list[str]:
    """Hand-written literal deps of ``stage`` (a stage whose module declares ``EVAL_DEPS``) that
    its generated evaluation deps make redundant: each one a declared evaluation's folder or a
    folder holding one (``artifacts/external``), unless the module's ``KEEP_DEPS`` lists it (the
    stage reads other files there). The stage reads exactly the sets ``EVAL_DEPS`` selects."""
    body = stage.get("do", stage)
    mod = _stage_mod(root, body["cmd"])
    if not getattr(mod, "EVAL_DEPS", ()):
        return []
    params = _params(root)
    folders = [f for f in (_folder(params, n) for n in params.get("evaluations") or {}) if f]
    keep = set(getattr(mod, "KEEP_DEPS", ()))
    return [d for d in body.get("deps", [])
            if isinstance(d, str) and "${" not in d and d not in keep and not _is_code(d)
            and any(_inside(f, str(PurePosixPath(d))) for f in folders)]


_OK = object()  # no bad entry found


def _param_keys(entry: Any) -> list[str]:
    """The params keys a ``dvc.yaml`` ``params:`` entry names: a key of ``params.yaml``, or
    DVC's ``{file: [keys]}`` (keys of another file as ``file:key``; ``{file: }``, the whole
    file, as ``file:*``)."""
    if isinstance(entry, str):
        return [entry]
    return [k if f == "params.yaml" else f"{f}:{k}" for f, keys in entry.items() for k in (keys or ["*"])]


def _params_file_entry(entry: Mapping) -> bool:
    """``entry`` is DVC's ``{file: [keys]}`` (or ``{file: }``, every key of the file)."""
    return len(entry) >= 1 and all(isinstance(f, str) and f.strip() and (keys is None or isinstance(keys, list) and all(
        isinstance(k, str) and k.strip() for k in keys)) for f, keys in entry.items())


def _stage_table(doc: Any, path: Path) -> Mapping:
    """``doc["stages"]`` of a loaded ``dvc.yaml``, each stage a mapping with a ``cmd`` (under
    ``do`` for a foreach or matrix stage), whose ``deps`` list paths and ``params`` keys.

    Raises:
        RecipematchError: naming the file, the stage and what is missing or of another type
            (``- 5`` or an empty ``-`` among the deps: DVC would refuse the file).
    """
    if not isinstance(doc, Mapping) or not isinstance(doc.get("stages"), Mapping):
        raise RecipematchError(f"{path}: no `stages:` mapping")
    for name, outer in doc["stages"].items():
        st = outer.get("do", outer) if isinstance(outer, Mapping) else None
        if not isinstance(st, Mapping) or not isinstance(st.get("cmd"), str):
            raise RecipematchError(f"{path}: stage {name} has no `cmd` (a foreach or matrix stage: under `do`)")
        for key in ("deps", "params"):
            if key in st and not isinstance(st[key], list):
                raise RecipematchError(f"{path}: stage {name}: `{key}` must be a list (one `- entry` a line), "
                                       f"not {type(st[key]).__name__}")
        for key, kinds, what in (("deps", (str,), "a path"), ("params", (str, Mapping), "a key or {file: [keys]}")):
            bad = next((x for x in st.get(key) or [] if not isinstance(x, kinds) or isinstance(x, str) and not x.strip()
                        or isinstance(x, Mapping) and not _params_file_entry(x)), _OK)
            if bad is not _OK:
                raise RecipematchError(f"{path}: stage {name}: `{key}` entry {bad!r} is not {what} (DVC refuses it)")
    return doc["stages"]


def _load(path: Path) -> Any:
    """``path`` (a ``dvc.yaml``) parsed by the project's YAML loader: a repeated key, bad YAML or a
    file that is not UTF-8 is one :class:`RecipematchError` naming the file and line."""
    if not path.is_file():
        raise RecipematchError(f"{path} does not exist: run this in the project root")
    return load_yaml_file(path)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise RecipematchError(f"{path}: not UTF-8 text (byte {e.start})") from None


def check(root: Path) -> list[str]:
    """Every difference between ``dvc.yaml`` and what the stages import and read.

    Raises:
        RecipematchError: ``dvc.yaml`` cannot be read as a pipeline (:func:`_stage_table`).
    """
    path = root / "dvc.yaml"
    problems = []
    for name, outer in _stage_table(_load(path), path).items():
        st = outer.get("do", outer)  # a foreach stage declares its command under do
        exp = expected(root, st["cmd"])
        if exp is None:
            continue
        code, params = exp
        have = [d for d in st.get("deps", []) if isinstance(d, str) and _is_code(d)]
        missing, extra = sorted(set(code) - set(have)), sorted(set(have) - set(code))
        if missing:
            problems.append(f"stage {name}: deps lack {missing}")
        if extra:
            problems.append(f"stage {name}: deps list code it does not import {extra}")
        want = data_deps(root, st["cmd"])
        have_d = [d for d in st.get("deps", []) if isinstance(d, str) and _is_param_dep(d) and not _is_eval_dep(d)]
        if sorted(want) != sorted(have_d):
            problems.append(f"stage {name}: data deps {sorted(have_d)} but params.yaml and the stage "
                            f"call for {sorted(want)}")
        want_e = eval_deps(root, outer, name)
        have_e = [d for d in st.get("deps", []) if _is_eval_dep(d)]
        missing, extra = sorted(set(want_e) - set(have_e)), sorted(set(have_e) - set(want_e))
        if missing:
            problems.append(f"stage {name}: deps lack the evaluation folders it reads {missing}")
        if extra:
            problems.append(f"stage {name}: deps list evaluation folders it does not read {extra} "
                            f"(params.yaml evaluations and the module's EVAL_DEPS)")
        redundant = redundant_deps(root, outer)
        if redundant:
            problems.append(f"stage {name}: deps list {redundant}, which hold evaluation folders: its generated "
                            f"${{evaluations.<name>.folder}} deps replace them (the module's KEEP_DEPS keeps "
                            f"one it reads other files in)")
        have_p = [k for p in st.get("params", []) for k in _param_keys(p)]
        if sorted(have_p) != sorted(params):
            problems.append(f"stage {name}: params {sorted(have_p)} but the stage reads {sorted(params)}")
    return problems


def write(root: Path) -> int:
    """Rewrite the code, data and evaluation deps and the params of every stage in ``dvc.yaml``
    (dropping the hand-written deps the evaluation deps make redundant); returns entries changed."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    y = YAML()
    y.preserve_quotes = True
    y.indent(mapping=2, sequence=4, offset=2)
    path = root / "dvc.yaml"
    _stage_table(_load(path), path)  # every shape checked (one line each) before the round-trip loader reads it
    try:
        doc = y.load(_read_text(path))
    except YAMLError as e:
        raise RecipematchError(f"{path}: {str(e).splitlines()[0]}") from None
    changed = 0
    for name, outer in _stage_table(doc, path).items():
        st = outer.get("do", outer)  # a foreach stage declares its command under do
        exp = expected(root, st["cmd"])
        if exp is None:
            continue
        code, params = exp
        redundant = set(redundant_deps(root, outer))
        others = [d for d in st.get("deps", [])
                  if not (isinstance(d, str) and (_is_code(d) or _is_param_dep(d) or _is_eval_dep(d)
                                                  or d in redundant))]
        new_deps = [*code, *data_deps(root, st["cmd"]), *eval_deps(root, outer, name), *others]
        if list(st.get("deps", [])) != new_deps:
            st["deps"] = new_deps
            changed += 1
        if params and [str(p) for p in st.get("params", [])] != params:
            st["params"] = params
            changed += 1
        elif not params and "params" in st:
            del st["params"]
            changed += 1
    text = io.StringIO()
    y.dump(doc, text)
    atomic_write_text(path, text.getvalue())  # an interrupt leaves the old dvc.yaml whole
    return changed


def main(argv: list[str] | None = None) -> int:
    """``python -m recipematch.pipeline.deps [--write]`` in the project root: 0 when dvc.yaml
    agrees, 1 with the problems listed, 2 with one line for a project it cannot read (or, with
    ``--write``, a ``params.yaml`` that ``recipematch params --check`` refuses: nothing is written)."""
    argv = sys.argv[1:] if argv is None else argv
    if [a for a in argv if a != "--write"]:
        print(f"recipematch: error: unknown argument {argv[0] if argv[0] != '--write' else argv[1]!r}; usage: "
              "python -m recipematch.pipeline.deps [--write]", file=sys.stderr)
        return 2
    root = Path(".").resolve()
    if not (root / "dvc.yaml").is_file():
        print(f"recipematch: error: {root / 'dvc.yaml'} does not exist: run this in the project root", file=sys.stderr)
        return 2
    try:
        if "--write" in argv:
            # the deps written come from params.yaml: one `recipematch params --check` refuses (an
            # evaluation folder outside the project, say) never reaches dvc.yaml
            check_params_whole(root / "params.yaml")
            print(f"dvc.yaml: {write(root)} entries rewritten")
        problems = check(root)
    except RecipematchError as e:
        print(f"recipematch: error: {e}", file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
