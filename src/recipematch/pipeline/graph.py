"""The pipeline graph as ``dvc.yaml`` states it: each stage's command, deps and outputs,
``foreach``/``matrix`` expanded with the project's params by DVC's own resolver.

``dvc.yaml`` is the one place the pipeline's paths are written: each stage's ``cmd`` passes
them as ``--<role> PATH`` options (:data:`recipematch.pipeline.door.ROLES`). Code that needs
a stage's paths outside ``dvc repro`` (the plan, the tests) reads them here:
:func:`stage_paths` parses the stage's resolved ``cmd`` with the stage's own click command.
"""

from __future__ import annotations

import importlib
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from recipematch.errors import RecipematchError
from recipematch.pipeline.door import StagePaths


@dataclass(frozen=True)
class Stage:
    """One resolved ``dvc.yaml`` stage: ``cmd`` with every ``${...}`` filled in, its deps and
    outputs (metrics and plots included), relative to the project root as written."""

    name: str
    cmd: str
    deps: tuple[str, ...]
    outs: tuple[str, ...]

    @property
    def module(self) -> str:
        """``recipematch.pipeline.<m>`` for a ``python stages/<m>.py ...`` command."""
        argv = shlex.split(self.cmd)
        if len(argv) < 2 or argv[0] != "python" or not argv[1].startswith("stages/") or not argv[1].endswith(".py"):
            raise RecipematchError(f"dvc.yaml stage {self.name}: cmd {self.cmd!r} is not `python stages/<m>.py ...`")
        return "recipematch.pipeline." + argv[1][len("stages/"):-len(".py")]

    @property
    def args(self) -> list[str]:
        return shlex.split(self.cmd)[2:]


def _out_path(entry: Any) -> str:
    return next(iter(entry)) if isinstance(entry, Mapping) else str(entry)


def resolve(root: Path, *, dvc_yaml: Path | None = None, params: Mapping | None = None,
            only: str | None = None) -> dict[str, Stage]:
    """Every stage of ``dvc_yaml`` (default ``root/dvc.yaml``), by DVC's name (``cells@recipe``),
    or only the stage named ``only`` (then params the other stages read may be absent).

    ``${...}`` are filled from ``root/params.yaml`` or, when ``params`` is given, from that
    mapping instead (tests resolve the project's ``dvc.yaml`` against their own params); then
    the stages come without deps, which name the project's own evaluation sets.

    Raises:
        RecipematchError: no ``dvc.yaml``, or one DVC cannot resolve (DVC's message kept).
    """
    from dvc.exceptions import DvcException
    from dvc.fs import LocalFileSystem
    from dvc.parsing import DataResolver, EntryNotFound

    root = Path(root).resolve()
    path = dvc_yaml or root / "dvc.yaml"
    if not Path(path).is_file():
        raise RecipematchError(f"{path} does not exist: the pipeline's stages and paths are read from dvc.yaml")
    d = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if params is not None:  # deps left out: they name the project's own evaluation sets (deps --write)
        def no_deps(st: Mapping) -> dict:
            return {k: (no_deps(v) if k == "do" else v) for k, v in st.items() if k != "deps"}

        stages_in = {g: no_deps(s) for g, s in (d.get("stages") or {}).items()}
        d = {**d, "vars": [dict(params)], "stages": stages_in}
        fs_root = Path(path).resolve().parent  # no params.yaml read: the mapping is the only source
        wdir = str(fs_root / ".recipematch-no-params")
    else:
        wdir = str(root)
    try:
        resolver = DataResolver(SimpleNamespace(fs=LocalFileSystem(), config={}), wdir, d)
        out = resolver.resolve()["stages"] if only is None else resolver.resolve_one(only)
    except EntryNotFound:
        raise RecipematchError(f"{path} has no stage {only!r}") from None
    except DvcException as e:
        raise RecipematchError(f"{path}: {e} (stage {only})" if only else f"{path}: {e}") from e
    stages = {}
    for name, s in (out or {}).items():
        outs = [_out_path(o) for key in ("outs", "metrics", "plots") for o in s.get(key) or []]
        stages[name] = Stage(name, s["cmd"], tuple(str(x) for x in s.get("deps") or []), tuple(outs))
    return stages


def stage_options(stage: Stage) -> tuple[Any, dict[str, Any]]:
    """``(click command, its parsed options)`` for ``stage``'s ``cmd`` (nothing is run)."""
    main = importlib.import_module(stage.module).main
    ctx = main.make_context(stage.name, stage.args, resilient_parsing=False)
    return main, dict(ctx.params)


def stage_paths(root: Path, name: str, *, dvc_yaml: Path | None = None, params: Mapping | None = None) -> StagePaths:
    """The :class:`StagePaths` stage ``name`` gets under ``root`` when DVC runs it.

    Raises:
        RecipematchError: no such stage, or a command ``python stages/<m>.py`` does not parse.
    """
    stages = resolve(root, dvc_yaml=dvc_yaml, params=params, only=name)
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


def project_stage_paths(root: Path, name: str) -> StagePaths:
    """The paths stage ``name`` gets in the project at ``root``: its own ``dvc.yaml`` and
    ``params.yaml`` when it has a ``dvc.yaml`` (deps left out, so only the keys the command and
    outputs name must be there), else the checkout's ``dvc.yaml`` (:func:`source_dvc_yaml`) with
    no params, enough for a stage whose command names no ``${...}``.

    Raises:
        RecipematchError: as :func:`stage_paths`, or a templated stage outside a project.
    """
    if (Path(root) / "dvc.yaml").is_file():
        params_file = Path(root) / "params.yaml"
        if not params_file.is_file():
            raise RecipematchError(f"{params_file} does not exist: the project's dvc.yaml is resolved with it")
        params = yaml.safe_load(params_file.read_text(encoding="utf-8")) or {}
        return stage_paths(root, name, params=params if isinstance(params, Mapping) else {})
    return stage_paths(root, name, dvc_yaml=source_dvc_yaml(), params={})


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
