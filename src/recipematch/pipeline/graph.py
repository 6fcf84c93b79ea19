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
        stages_in = {g: {k: v for k, v in s.items() if k != "deps"} for g, s in (d.get("stages") or {}).items()}
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
        RecipematchError: no such stage (the known ones listed), or a stage whose command
            passes no paths (it still reads a ``Layout``).
    """
    stages = resolve(root, dvc_yaml=dvc_yaml, params=params, only=name)
    if name not in stages:
        raise RecipematchError(f"dvc.yaml has no stage {name!r}")
    main, opts = stage_options(stages[name])
    roles = getattr(main, "path_roles", None)
    if roles is None:
        raise RecipematchError(f"stage {name} takes no path options")
    root = Path(root).resolve()
    return StagePaths(main.name, root, {r: root / opts[f"path_{r}"] for r in roles})
