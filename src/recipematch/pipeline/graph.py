"""The pipeline graph as ``dvc.yaml`` states it: each stage's command, deps and outputs,
``foreach``/``matrix`` expanded with the project's params by DVC's own resolver.

``dvc.yaml`` is the one place the pipeline's paths are written: each stage's ``cmd`` passes
them as ``--<role> PATH`` options (:data:`recipematch.pipeline.door.ROLES`). Code that needs
a stage's paths outside ``dvc repro`` (the plan, the tests) reads them here:
:func:`stage_paths` parses the stage's resolved ``cmd`` with the stage's own click command.
"""

from __future__ import annotations

import importlib
import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from recipematch.errors import RecipematchError
from recipematch.pipeline.door import STAGE_COMMANDS, StagePaths


@dataclass(frozen=True)
class Stage:
    """One resolved ``dvc.yaml`` stage: ``cmd`` with every ``${...}`` filled in, its deps, its
    outputs (``outs``), metrics files and plot files, relative to the project root as written."""

    name: str
    cmd: str
    deps: tuple[str, ...]
    outs: tuple[str, ...]
    metrics: tuple[str, ...] = ()
    plots: tuple[str, ...] = ()

    @property
    def written(self) -> tuple[str, ...]:
        """Everything the stage writes: outputs, metrics and plots."""
        return (*self.outs, *self.metrics, *self.plots)

    @property
    def module(self) -> str:
        """``recipematch.pipeline.<m>`` for a ``python stages/<m>.py ...`` command, or for a
        ``recipematch <stage> ...`` one (an audit project's: :mod:`recipematch.audit.project`)."""
        argv = self.argv
        if len(argv) >= 2 and argv[0] == "python" and argv[1].startswith("stages/") and argv[1].endswith(".py"):
            return "recipematch.pipeline." + argv[1][len("stages/"):-len(".py")]
        if len(argv) >= 2 and argv[0] == "recipematch":
            module = dict(STAGE_COMMANDS).get(argv[1])
            if module is not None:
                return "recipematch.pipeline." + module
        raise RecipematchError(f"dvc.yaml stage {self.name}: cmd {self.cmd!r} is neither `python stages/<m>.py ...` "
                               "nor `recipematch <stage> ...`")

    @property
    def argv(self) -> list[str]:
        """``cmd`` split as the shell splits it (a ``# comment`` dropped).

        Raises:
            RecipematchError: quoting the shell cannot read either (naming the stage).
        """
        try:
            return shlex.split(self.cmd, comments=True)
        except ValueError as e:
            raise RecipematchError(f"dvc.yaml stage {self.name}: cmd cannot be split as the shell does ({e})") from None

    @property
    def args(self) -> list[str]:
        return self.argv[2:]


def under(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or lies inside it, both spelled as ``dvc.yaml`` spells paths
    (relative, ``/``-separated)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _out_path(entry: Any) -> str:
    return next(iter(entry)) if isinstance(entry, Mapping) else str(entry)


#: where :func:`resolve` points DVC when the params come as a mapping: a folder that holds no
#: ``params.yaml`` (DVC would read one as ``vars``); named back to the real file in messages
_NO_PARAMS = ".recipematch-params-given"


def read_dvc_yaml(path: Path) -> dict[str, Any]:
    """``path`` (a ``dvc.yaml``) as a mapping.

    Raises:
        RecipematchError: missing, not YAML, or not a mapping with a ``stages`` mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise RecipematchError(f"{path} does not exist: the pipeline's stages and paths are read from dvc.yaml")
    try:
        d = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise RecipematchError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(d, Mapping) or not isinstance(d.get("stages") or {}, Mapping):
        raise RecipematchError(f"{path}: expected a mapping with a `stages:` mapping (DVC's dvc.yaml)")
    return dict(d)


def resolve(root: Path, *, dvc_yaml: Path | None = None, params: Mapping | None = None,
            only: str | None = None, deps: bool = False) -> dict[str, Stage]:
    """Every stage of ``dvc_yaml`` (default ``root/dvc.yaml``), by DVC's name (``cells@recipe``),
    or only the stage named ``only`` (then params the other stages read may be absent).

    ``${...}`` are filled from ``root/params.yaml`` or, when ``params`` is given, from that
    mapping instead (and the ``dvc.yaml``'s own inline ``vars``); then the stages come without
    deps, which name the project's own evaluation sets, or with ``deps`` with those deps whose
    ``${...}`` the mapping can fill (a matrix's ``${item...}`` always).

    Raises:
        RecipematchError: no ``dvc.yaml``, one that is not YAML or not DVC's shape, no stage
            ``only``, or one DVC cannot resolve (DVC's message kept).
    """
    from dvc.exceptions import DvcException
    from dvc.fs import LocalFileSystem
    from dvc.parsing import DataResolver, EntryNotFound

    root = Path(root).resolve()
    path = Path(dvc_yaml or root / "dvc.yaml")
    d = read_dvc_yaml(path)
    if params is not None:  # deps left out: they name the project's own evaluation sets (deps --write)
        def no_deps(st: Any) -> Any:
            if not isinstance(st, Mapping):
                return st
            kept = {"deps": [x for x in st["deps"] if _fillable(x, params)]} if deps and isinstance(
                st.get("deps"), list) else {}
            return {**{k: (no_deps(v) if k == "do" else v) for k, v in st.items() if k != "deps"}, **kept}

        inline = [v for v in d.get("vars") or [] if isinstance(v, Mapping)]  # files named in vars are params files
        d = {**d, "vars": [*inline, dict(params)], "stages": {g: no_deps(st) for g, st in (d.get("stages") or {}).items()}}
        wdir = str(path.resolve().parent / _NO_PARAMS)
    else:
        wdir = str(root)
    try:
        resolver = DataResolver(SimpleNamespace(fs=LocalFileSystem(), config={}), wdir, d)
        out = resolver.resolve()["stages"] if only is None else resolver.resolve_one(only)
    except EntryNotFound:
        raise RecipematchError(f"{path} has no stage {only!r}") from None
    except DvcException as e:
        text = str(e).replace(f"{_NO_PARAMS}/", "")
        raise RecipematchError(f"{path}: {text} (stage {only})" if only else f"{path}: {text}") from e
    stages = {}
    for name, st in (out or {}).items():
        if not isinstance(st.get("cmd"), str):
            raise RecipematchError(f"{path}: stage {name} has no `cmd` string")
        got = {key: tuple(_out_path(o) for o in st.get(key) or []) for key in ("outs", "metrics", "plots")}
        stages[name] = Stage(name, st["cmd"], tuple(str(x) for x in st.get("deps") or []), got["outs"],
                             got["metrics"], got["plots"])
    return stages


def stage_options(stage: Stage) -> tuple[Any, dict[str, Any]]:
    """``(click command, its parsed options)`` for ``stage``'s ``cmd`` (nothing is run).

    Raises:
        RecipematchError: a command that does not parse (naming the ``dvc.yaml`` stage).
    """
    import click

    main = importlib.import_module(stage.module).main
    try:
        ctx = main.make_context(stage.name, stage.args, resilient_parsing=False)
    except click.ClickException as e:
        raise RecipematchError(f"dvc.yaml stage {stage.name}: cmd {stage.cmd!r}: {e.format_message()}") from None
    return main, dict(ctx.params)


def stage_paths(root: Path, name: str, *, dvc_yaml: Path | None = None, params: Mapping | None = None) -> StagePaths:
    """The :class:`StagePaths` stage ``name`` gets under ``root`` when DVC runs it.

    Raises:
        RecipematchError: as :func:`resolve` and :func:`stage_options`.
    """
    return _named_paths(resolve(root, dvc_yaml=dvc_yaml, params=params, only=name), root, name)


def _named_paths(stages: Mapping[str, Stage], root: Path, name: str) -> StagePaths:
    if name not in stages:
        raise RecipematchError(f"dvc.yaml has no stage {name!r}")
    main, opts = stage_options(stages[name])
    return paths_of(main, root, opts)


def paths_of(main: Any, root: Path, opts: Mapping[str, Any]) -> StagePaths:
    """The :class:`StagePaths` of stage command ``main`` under ``root`` from its parsed
    options ``opts`` (``main.make_context(...).params``)."""
    root = Path(root).resolve()
    return StagePaths(main.name, root, {r: root / opts[f"path_{r}"] for r in main.path_roles})


def source_dvc_yaml() -> Path:
    """The ``dvc.yaml`` of the recipematch checkout this package runs from.

    Raises:
        RecipematchError: an installed copy without the repository.
    """
    import recipematch

    path = Path(recipematch.__file__).resolve().parents[2] / "dvc.yaml"
    if not path.is_file():
        raise RecipematchError(f"no pipeline at {path}: the stages and their paths are read from the recipematch "
                               "repository's dvc.yaml (install it with pip install -e .)")
    return path


def project_stages(root: Path, p: Any = None, *, only: str | None = None, deps: bool = False) -> dict[str, Stage]:
    """The stages ``dvc repro`` would run in the project at ``root``: its ``dvc.yaml``,
    resolved with the checked params ``p`` (a :class:`~recipematch.config.Params`, what the
    command read through ``--params``) or else the project's ``params.yaml``. Outside a project
    (no ``dvc.yaml``), the checkout's (:func:`source_dvc_yaml`) with ``p``, or no params.
    With ``deps``, each stage's deps the params can fill (:func:`resolve`).

    Raises:
        RecipematchError: as :func:`resolve`; a ``params.yaml`` that is missing or not YAML.
    """
    root = Path(root)
    if p is not None:
        params = params_mapping(p)
    elif (root / "dvc.yaml").is_file():
        from recipematch.config import load_params_raw  # lazy: config imports the stage layer's neighbours

        if not (root / "params.yaml").is_file():
            raise RecipematchError(f"{root / 'params.yaml'} does not exist: the project's dvc.yaml is resolved with it")
        raw = load_params_raw(root / "params.yaml")
        if not isinstance(raw, Mapping):
            raise RecipematchError(f"{root / 'params.yaml'}: expected a mapping of params")
        params = raw
    else:
        if only is not None and "@" in only:
            raise RecipematchError(f"{root.resolve()} holds no dvc.yaml: {only} is a stage of a project, run this in "
                                   "its root")
        params = {}
    dvc_yaml = root / "dvc.yaml" if (root / "dvc.yaml").is_file() else source_dvc_yaml()
    return resolve(root, dvc_yaml=dvc_yaml, params=params, only=only, deps=deps)


#: a DVC interpolation, ``${key}``
TEMPLATE = re.compile(r"\$\{([^}]*)\}")


def _fillable(dep: Any, params: Mapping) -> bool:
    """``dep`` is text whose every ``${key}`` is a matrix item or a key ``params`` holds."""
    if not isinstance(dep, str):
        return False
    for m in TEMPLATE.finditer(dep):
        key = m.group(1).strip()
        if key == "item" or key.startswith("item.") or key == "key":
            continue
        value: Any = params
        for part in key.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is None:
            return False
    return True


def project_stage_paths(root: Path, name: str, p: Any = None) -> StagePaths:
    """The paths stage ``name`` gets in the project at ``root`` (:func:`project_stages`).

    Raises:
        RecipematchError: as :func:`project_stages`; no such stage (naming it).
    """
    return _named_paths(project_stages(root, p, only=name), root, name)


def params_mapping(p: Any) -> dict[str, Any]:
    """A checked :class:`~recipematch.config.Params` as the plain mapping DVC interpolates
    (what :func:`resolve` takes as ``params``)."""
    import dataclasses

    def plain(obj: Any) -> Any:
        if dataclasses.is_dataclass(obj):
            return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        if isinstance(obj, Mapping):
            return {str(k): plain(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [plain(v) for v in obj]
        return obj

    return plain(p)


def require_declared_dep(root: Path, stage_name: str, template: str, value: str, *, fix: str = "") -> None:
    """Refuse to run stage ``stage_name`` with an optional data param set (``value``) while
    ``root/dvc.yaml`` does not list it among the stage's deps (as ``template``, e.g.
    ``${data.retrieve}``, or literally, or a folder it lies inside: DVC hashes a folder dep
    whole): DVC would not hash that data. Without a ``dvc.yaml`` (a library call outside a
    project) or a stage of that name, there is nothing to check. ``fix`` says how to mend it where ``deps --write``
    does not (the default names that command).

    Raises:
        RecipematchError: naming ``dvc.yaml``, the stage and what fixes it; a ``dvc.yaml`` that
            is not YAML or not DVC's shape (:func:`read_dvc_yaml`).
    """
    path = Path(root) / "dvc.yaml"
    if not path.is_file():
        return
    stage = (read_dvc_yaml(path).get("stages") or {}).get(stage_name)
    if not isinstance(stage, Mapping):  # no such stage: nothing reads the data there
        return
    stage = stage.get("do", stage)
    listed = {d for d in (stage.get("deps") if isinstance(stage, Mapping) else None) or [] if isinstance(d, str)}
    norm = posixpath.normpath
    if template not in listed and not any(under(norm(str(value)), norm(d)) for d in listed):
        raise RecipematchError(f"{path}: stage {stage_name} reads {value} ({template[2:-1]}) but does not list "
                               f"{template} in its deps, so DVC would not hash it; "
                               + (fix or "run `python -m recipematch.pipeline.deps --write` (with these params in "
                                  "params.yaml) and commit dvc.yaml"))
