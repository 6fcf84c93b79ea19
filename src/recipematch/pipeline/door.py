"""The stage door: how every pipeline stage starts.

Each stage module under :mod:`recipematch.pipeline` declares ``PARAMS`` (the dotted
``params.yaml`` keys it reads, exactly those its ``dvc.yaml`` entry lists) and a ``run``
function, and exposes ``main = stage(...)(run)``: a click command that

1. reads ``params.yaml`` once (:func:`recipematch.config.load_params`, every key checked),
2. restricts it to the declared keys (reading another raises
   :class:`~recipematch.config.UndeclaredParam`),
3. calls ``run(params_view, layout, **options)`` and prints its JSON summary,
4. turns a :class:`~recipematch.errors.RecipematchError` into one line on stderr and exit
   status 2 (``--debug`` shows the traceback).

``stages/<name>.py`` (what ``dvc.yaml`` calls) and ``recipematch <name>`` run the same
command object.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from recipematch import __version__
from recipematch.errors import RecipematchError
from recipematch.io import sha256_tree, write_json

log = logging.getLogger("recipematch")


@dataclass(frozen=True)
class Layout:
    """Every path of the pipeline, relative to ``root`` (mirrors ``dvc.yaml``:
    ``tests/test_paths_once.py`` fails when the two disagree)."""

    root: Path

    def p(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def rel(self, path: Path) -> str:
        """``path`` (under ``root``) as ``params.yaml`` and ``dvc.yaml`` spell it: relative, ``/``-separated."""
        return Path(path).relative_to(self.root).as_posix()

    # inputs
    @property
    def release(self) -> Path: return self.p("data", "peer_release")
    # stage outputs
    @property
    def artifacts(self) -> Path: return self.p("artifacts")  # holds every stage output but models, metrics, reports
    @property
    def corpus(self) -> Path: return self.p("artifacts", "corpus")
    @property
    def evalsets(self) -> Path: return self.p("artifacts", "evalsets")
    @property
    def mathnet_retrieve(self) -> Path: return self.p("artifacts", "evalsets", "mathnet_retrieve")  # its tiers
    @property
    def gates(self) -> Path: return self.p("artifacts", "gates")
    @property
    def cas(self) -> Path: return self.p("artifacts", "cas")
    @property
    def recordings(self) -> Path: return self.p("artifacts", "recordings")
    def llm(self, prompt: str) -> Path: return self.p("artifacts", "llm", prompt)
    @property
    def pairs(self) -> Path: return self.p("artifacts", "pairs")
    def pair_file(self, source: str) -> Path: return self.p("artifacts", "pairs", f"{source}.jsonl")
    def judge2(self, prompt: str) -> Path: return self.p("artifacts", "judge2", prompt)
    # the two-judge rows the cells read under judge2.cells: both (empty under first, so that running
    # the second judge only for its agreement table reruns no cell)
    def judge2_cells(self, prompt: str) -> Path: return self.p("artifacts", "judge2_cells", f"{prompt}.jsonl")
    @property
    def backtranslate(self) -> Path: return self.p("artifacts", "backtranslate")
    def specs(self, arm: str) -> Path: return self.p("artifacts", "specs", f"{arm}.json")
    def cells(self, arm: str) -> Path: return self.p("artifacts", "cells", arm)
    def validated(self, arm: str) -> Path: return self.p("artifacts", "validated", f"{arm}.json")
    def models(self, arm: str) -> Path: return self.p("models", arm)
    def eval_dir(self, arm: str) -> Path: return self.p("artifacts", "eval", arm)
    @property
    def soups_root(self) -> Path: return self.p("artifacts", "soups")  # one folder per soup@ stage
    def soups(self, label: str) -> Path: return self.soups_root / label
    @property
    def replay(self) -> Path: return self.p("artifacts", "replay")
    @property
    def style(self) -> Path: return self.p("artifacts", "style")
    def external(self, name: str) -> Path: return self.p("artifacts", "external", name)
    def regen(self, name: str) -> Path: return self.p("artifacts", "regen", name)
    def regen_calls(self, name: str) -> Path: return self.p("artifacts", "regen_calls", name)
    def pooling(self, name: str) -> Path: return self.p("artifacts", "pooling", name)
    def judging(self, name: str) -> Path: return self.p("artifacts", "judging", name)
    def meld_generate(self, name: str) -> Path: return self.p("artifacts", "meld_generate", name)
    def saber(self, name: str) -> Path: return self.p("artifacts", "saber", name)
    @property
    def metrics(self) -> Path: return self.p("metrics")  # each stage's metrics file(s)
    @property
    def reports(self) -> Path: return self.p("reports")
    # places outside DVC: no stage output, ignored by git
    @property
    def cache(self) -> Path: return self.p("cache", "embeddings")
    @property
    def scratch(self) -> Path: return self.p("cache")


#: What each path a stage's ``cmd`` can pass holds (``--<role> PATH``, relative to ``--root``).
#: A role is a name, never a path: ``dvc.yaml``'s ``cmd`` lines are the one place paths are written.
ROLES: dict[str, str] = {
    "out": "the folder (or file) this stage writes",
    "metrics": "this stage's metrics file (dvc.yaml `metrics:`)",
    "release": "the peer release folder (data/, tracked by data.dvc)",
    "corpus": "the normalised corpus folder (stage corpus)",
    "evalsets": "the evaluation sets folder (stage evalsets)",
    "gates": "the contamination gate folder (stage gates)",
    "recordings": "the replayed LLM answers folder (stage recordings)",
    "pairs": "the folder of pair files, one <source>.jsonl each (stages verified, llm@, attack@)",
    "pair_file": "the pair file this stage writes (one <source>.jsonl under the pairs folder)",
    "specs": "the folder of arm specs, one <arm>.json each (stage specs)",
    "scratch": "a scratch folder outside DVC (interrupted work resumes from it)",
    "cache": "the embedding cache folder outside DVC (a cache, never an input)",
}


class StagePaths:
    """The paths one stage's ``dvc.yaml`` ``cmd`` passes it, by role (see :data:`ROLES`),
    each absolute under ``root``. Reading a role the command does not pass raises
    :class:`~recipematch.errors.RecipematchError` naming the stage and the option."""

    def __init__(self, stage_name: str, root: Path, given: Mapping[str, Path]):
        self.__dict__.update({"stage": stage_name, "root": Path(root), "_given": dict(given)})

    def __getattr__(self, role: str) -> Path:
        if role.startswith("__"):
            raise AttributeError(role)
        given = self.__dict__["_given"]
        if role not in given:
            raise RecipematchError(f"stage {self.__dict__['stage']}: its command passes no --{role.replace('_', '-')} "
                                   f"path (dvc.yaml `cmd` names every path a stage reads or writes)")
        return given[role]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("StagePaths is read-only")

    def rel(self, path: Path) -> str:
        """``path`` (under ``root``) as ``params.yaml`` and ``dvc.yaml`` spell it: relative, ``/``-separated."""
        return Path(path).relative_to(self.root).as_posix()

    def roles(self) -> dict[str, Path]:
        return dict(self._given)


def path_option(role: str) -> Callable:
    """The ``--<role> PATH`` option of a stage (required; relative to ``--root``)."""
    if role not in ROLES:
        raise ValueError(f"unknown path role {role!r}: add it to door.ROLES")
    return click.option(f"--{role.replace('_', '-')}", f"path_{role}", required=True,
                        type=click.Path(path_type=Path), help=f"Path of {ROLES[role]}.")


def offline_env() -> None:
    """Quiet, offline runs: no hub lookups, no telemetry."""
    for k, v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true",
                 "DVC_NO_ANALYTICS": "1", "TOKENIZERS_PARALLELISM": "false", "GX_ANALYTICS_ENABLED": "false",
                 "DO_NOT_TRACK": "1"}.items():
        os.environ.setdefault(k, v)


def _missing_input(e: OSError) -> str:
    name = e.filename or str(e)
    if isinstance(e, FileNotFoundError):
        if f"{os.sep}data{os.sep}" in str(name):
            return f"{name} does not exist: fetch the raw inputs with `dvc pull data.dvc`"
        return f"{name} does not exist: run the stage that writes it first (`dvc repro` runs them in order)"
    if isinstance(e, IsADirectoryError):
        return f"{name} is a folder where a file is expected"
    return f"{name}: {e.strerror or e}"


def _user_message(e: BaseException) -> str | None:
    """The one-line message for a user-facing failure, or None for a bug."""
    if isinstance(e, RecipematchError):
        return str(e)
    if isinstance(e, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
        return _missing_input(e)
    if type(e).__module__.startswith("pyarrow") and type(e).__name__ in ("ArrowInvalid", "ArrowIOError"):
        return f"unreadable table: {e}; rebuild it (dvc repro)"
    return None


def run_guarded(fn: Callable[[], Any], *, debug: bool) -> Any:
    """Call ``fn``. A :class:`RecipematchError`, a missing or misplaced input file, or an
    unreadable table becomes one line on stderr and exit status 2 (``debug`` re-raises);
    anything else is a bug and keeps its traceback."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - classified just below; bugs re-raise
        message = _user_message(e)
        if message is None or debug:
            raise
    click.echo(f"recipematch: error: {message}", err=True)
    sys.exit(2)


def open_params(params_path: Path, root: Path, keys: tuple[str, ...]):
    """Read ``params.yaml`` once, checked whole, restricted to ``keys``.

    Raises:
        RecipematchError: missing file or any bad key (named).
    """
    from recipematch.config import load_params  # lazy: keeps recipematch --help fast

    p = params_path if params_path.is_absolute() else root / params_path
    if not p.exists():
        raise RecipematchError(f"parameters file {p} does not exist (--params is relative to --root)")
    return load_params(p).view(keys), Layout(root.resolve())


def check_params_file(path: Path):
    """Read and check a params file whole (``recipematch params --check``).

    Raises:
        RecipematchError: naming the file and the key.
    """
    from recipematch.config import load_params  # lazy: keeps recipematch --help fast

    return load_params(path)


def stage(name: str, keys: tuple[str, ...], *options: Callable, runtime: tuple[str, ...] = (),
          paths: tuple[str, ...] | None = None) -> Callable:
    """Decorator turning ``run(params_view, layout, **options) -> summary`` into the stage's
    click command (see the module docstring). ``options`` are click option decorators.
    ``runtime`` names top-level sections that choose where the work runs, never what it
    computes (``engine``): each is passed whole as a keyword of ``run`` and is no DVC param.
    ``paths`` names the roles (:data:`ROLES`) the stage reads or writes: each becomes a required
    ``--<role> PATH`` option, which ``dvc.yaml``'s ``cmd`` passes, and ``run`` gets a
    :class:`StagePaths` of them instead of a :class:`Layout`."""

    def deco(run: Callable[..., Any]) -> click.Command:
        @click.command(name, help=(run.__doc__ or "").strip().split("\n\n")[0])
        @click.option("--params", "params_path", type=click.Path(dir_okay=False, path_type=Path),
                      default=Path("params.yaml"), show_default=True, help="Parameters file (relative to --root).")
        @click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
                      show_default=True, help="Project root; every stage path is relative to it.")
        @click.option("--debug", is_flag=True, help="Show a traceback for user errors too.")
        @functools.wraps(run)
        def command(params_path: Path, root: Path, debug: bool, **opts: Any) -> None:
            offline_env()
            if not logging.getLogger().handlers:
                logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

            def go():
                p, lay = open_params(params_path, root, keys + runtime)
                if paths is not None:
                    lay = StagePaths(name, lay.root, {r: lay.root / opts.pop(f"path_{r}") for r in paths})
                return run(p, lay, **opts, **{k: getattr(p, k) for k in runtime})

            out = run_guarded(go, debug=debug)
            click.echo(json.dumps(out, indent=1, sort_keys=True, ensure_ascii=False, default=str))

        for o in reversed([*options, *(path_option(r) for r in paths or ())]):
            command = o(command)
        command.path_roles = paths  # type: ignore[attr-defined]
        command.params_keys = keys  # type: ignore[attr-defined]
        command.runtime_keys = runtime  # type: ignore[attr-defined]
        return command

    return deco


arm_option = click.option("--arm", required=True, help="An arm named in params.yaml `arms`.")
progress_option = click.option("--progress/--no-progress", default=True, show_default=True,
                               help="Progress bars on stderr.")


# --------------------------------------------------------------------------- run records

def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version(), "recipematch": __version__}
    for pkg in ("torch", "transformers", "sentence-transformers", "sympy", "dvc", "mlflow", "great-expectations", "pandas"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "absent"
    return out


def write_run_record(out_dir: Path, stage_name: str, config: Any, inputs: Mapping[str, Path],
                     counts: Mapping[str, Any]) -> None:
    """The stage's run record: the params it read, package versions, input hashes, counts.

    It lives inside the stage's DVC output, so it holds nothing that changes without the
    output changing: no timestamps, no git revision, no command line (DVC's lock file and
    the MLflow runs' ``git_rev`` tags carry those)."""
    hashes = {}
    for key, path in sorted(inputs.items()):
        hashes[key] = sha256_tree(path) if Path(path).exists() else "missing"
    write_json(out_dir / "run_record.json", {
        "stage": stage_name, "config": config, "versions": _versions(), "input_sha256": hashes, "counts": counts,
    })


def check_device(key: str, device: str) -> None:
    """A CUDA or MPS device must exist on this machine.

    Raises:
        RecipematchError: naming the params key.
    """
    import re

    if device == "cpu":
        return
    if not re.fullmatch(r"cuda(:\d+)?|mps", device):
        raise RecipematchError(f"{key}: {device!r} is not a torch device (cpu, cuda, cuda:N or mps)")
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RecipematchError(f"{key}: cuda requested but this machine has no CUDA device (set it to cpu)")
    if device == "mps" and not torch.backends.mps.is_available():
        raise RecipematchError(f"{key}: mps requested but this machine has no MPS device (set it to cpu)")
