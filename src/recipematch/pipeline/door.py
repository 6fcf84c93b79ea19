"""The stage door: how every pipeline stage starts.

Each stage module under :mod:`recipematch.pipeline` declares ``PARAMS`` (the dotted
``params.yaml`` keys it reads, exactly those its ``dvc.yaml`` entry lists) and a ``run``
function, and exposes ``main = stage(...)(run)``: a click command that

1. reads ``params.yaml`` once (:func:`recipematch.config.load_params`, every key checked),
2. restricts it to the declared keys (reading another raises
   :class:`~recipematch.config.UndeclaredParam`),
3. calls ``run(params_view, paths, **options)`` and prints its JSON summary, where ``paths``
   (:class:`StagePaths`) holds every path the stage reads or writes, each passed by
   ``dvc.yaml``'s ``cmd`` as a ``--<role> PATH`` option (:data:`ROLES`): ``dvc.yaml`` is the
   one place the pipeline's paths are written,
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
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click

from recipematch import __version__
from recipematch.errors import RecipematchError
from recipematch.io import sha256_tree, write_json

log = logging.getLogger("recipematch")


#: ``(recipematch subcommand, stage module)``: each module's ``main`` is the stage's click command, run
#: as ``python stages/<module>.py`` by ``dvc.yaml`` and as ``recipematch <subcommand>`` by an audit
#: project's (:mod:`recipematch.audit.project`)
STAGE_COMMANDS = (
    ("corpus", "corpus"), ("evalsets", "evalsets"), ("gates", "gates"), ("verified", "verified"),
    ("recordings", "recordings"), ("llm", "llm"), ("judge2", "judge2"), ("backtranslate", "backtranslate"),
    ("specs", "specs"), ("cells", "cells"), ("validate", "validate"), ("train", "train"),
    ("evaluate-arm", "evaluate"), ("evaluate-base", "evaluate_base"), ("evaluate-bm25", "evaluate_bm25"),
    ("soup", "soup"), ("mix", "mix"), ("replay-pool", "replay_pool"), ("stats", "stats"), ("style", "style"),
    ("hits", "hits"), ("report", "report"), ("external", "external"), ("attack", "attack"),
    ("pooling", "pooling"), ("regen", "regen"), ("judging", "judging"), ("saber", "saber"),
    ("meld-generate", "meld_generate"), ("audit-report", "audit"),
)

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
    "pair_file": "a pair file (one <source>.jsonl under the pairs folder): the one this stage writes, or for "
                 "judge2 the one it judges again",
    "llm": "the LLM store folder of one prompt (stage llm@<prompt>)",
    "judge_recordings": "the folder of the second judge's replay recordings, one <prompt>.jsonl each",
    "cells_file": "the pair file the cells stage reads for this prompt under judge2.cells: both",
    "spec": "this arm's cell spec file (stage specs)",
    "backtranslate": "the back-translated pair files, one <hop key>.jsonl each (stage backtranslate)",
    "judge2": "the second judge's folders, one <prompt> folder each (stages judge2@)",
    "judge2_cells": "the two-judge pair files, one <prompt>.jsonl each (stages judge2@)",
    "cells": "this arm's cell folder: its pool and one seed_<s>.jsonl per training seed (stage cells@)",
    "validated": "this arm's validation record (stage validate@)",
    "models": "the checkpoint folder of one arm or label: seed_<s>/ and seed_<s>.json per seed",
    "train_metrics": "the training metrics file of one arm or label",
    "eval": "the evaluation folder of one arm or label: per-query parquet and per_seed.json",
    "eval_metrics": "the evaluation metrics file of one arm or label",
    "evals": "the folder of evaluation folders, one per arm or label (stages evaluate*, soup@, mix@)",
    "models_root": "the folder of checkpoint folders, one per arm or label (stages train@, mix@)",
    "plot": "this stage's plot data file (dvc.yaml `plots:`)",
    "style": "the style detector's folder (stage style)",
    "metrics_dir": "the metrics folder, read whole (every stage's counts)",
    "cells_root": "the folder of cell folders, one per arm (stages cells@)",
    "calls": "the LLM calls this stage made, a DVC output (an interrupted run resumes from them)",
    "pools": "the folder of candidate pools, one per pooling entry (stages pooling@)",
    "summary": "the audit's summary file",
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


def _overlap(a: Path, b: Path) -> bool:
    return a == b or a in b.parents or b in a.parents


def check_stage_paths(name: str, root: Path, given: Mapping[str, Path], writes: tuple[str, ...]) -> None:
    """The paths a stage was given, checked before any work (a stage replaces what it writes
    whole, so a wrong one would delete data):

    - each is a path inside the project, relative to ``root``: not empty, not the root itself,
      not absolute, no ``..``;
    - a path it writes neither is, holds nor lies inside another of its paths, nor lies inside
      a folder DVC tracks as data (``<folder>.dvc`` beside it, e.g. ``data.dvc``), ``.git`` or
      ``.dvc``;
    - a path it writes reaches no other place in the project through a symlink;
    - a metrics or plot file (:data:`JSON_ROLES`) is a ``.json`` file; a path it writes is,
      and holds, no file git tracks (the project's code, params and docs: a hand-run
      ``--out src`` would otherwise replace them), except a metrics file under ``metrics/``
      (or the audit's summary at the top), which DVC keeps in git. Outside a git work tree
      this check is skipped.

    Raises:
        RecipematchError: naming the stage, the option and the path.
    """
    def opt(role: str) -> str:
        return f"--{role.replace('_', '-')} {str(given[role])!r}"

    for role, raw in given.items():
        p = Path(str(raw))
        if not str(raw).strip() or p.is_absolute() or ".." in p.parts or p == Path("."):
            raise RecipematchError(f"stage {name}: {opt(role)} must be a path inside the project, relative to "
                                   "--root (dvc.yaml's cmd passes each)")
        for part in p.parts:
            if part != part.strip() or any(ord(c) < 32 or ord(c) == 127 for c in part) or part.startswith("~"):
                raise RecipematchError(f"stage {name}: {opt(role)} has a name with a control character, a leading or "
                                       "trailing space, or a leading ~ (an unexpanded home folder?): pass the path "
                                       "dvc.yaml's cmd names")
            if len(os.fsencode(part)) > _NAME_MAX:
                raise RecipematchError(f"stage {name}: {opt(role)} has a name of over {_NAME_MAX} bytes, longer than "
                                       "a file system allows")
    rel = {role: Path(str(raw)) for role, raw in given.items()}
    for w in writes:
        for role, other in rel.items():
            if role != w and _overlap(rel[w], other):
                raise RecipematchError(f"stage {name}: {opt(w)} overlaps {opt(role)}: a stage writes apart from every "
                                       "other path it is given (it replaces what it writes)")
        for i in range(1, len(rel[w].parts) + 1):
            part = Path(*rel[w].parts[:i])
            if part.name in (".git", ".dvc") or i == 1 and part.name.startswith("."):
                raise RecipematchError(f"stage {name}: {opt(w)} lies inside {part}, a hidden folder of the project "
                                       "(git's, DVC's, a virtual environment's): a stage never writes there")
            if i < len(rel[w].parts) and (root / part).exists() and not (root / part).is_dir():
                raise RecipematchError(f"stage {name}: {opt(w)} lies inside {part}, which is a file, not a folder")
            if (root / f"{part}.dvc").is_file():
                raise RecipematchError(f"stage {name}: {opt(w)} lies inside {part}, which DVC tracks as data "
                                       f"({part}.dvc): a stage never writes into its inputs")
        top = Path(root).resolve()
        try:
            real = (top / rel[w]).resolve()
        except (RuntimeError, OSError):  # a symlink loop
            raise RecipematchError(f"stage {name}: {opt(w)} runs into a symlink loop") from None
        if real == top or real in top.parents:
            raise RecipematchError(f"stage {name}: {opt(w)} reaches {real} through a symlink, a folder that holds "
                                   "the project: a stage replaces what it writes whole")
        if real != top / rel[w] and top in real.parents:
            raise RecipematchError(f"stage {name}: {opt(w)} reaches {real.relative_to(top).as_posix() or '.'} through a "
                                   "symlink: pass the path itself (a symlink out of the project, to another disk, is "
                                   "fine)")
        if w in JSON_ROLES and rel[w].suffix != ".json":
            raise RecipematchError(f"stage {name}: {opt(w)} must be a .json file (dvc.yaml `metrics:`/`plots:`)")
        if w in JSON_ROLES and _committed_metrics_place(w, rel[w]):
            continue  # DVC keeps metrics files (cache: false) in git: writing them is the stage's job
        if tracked := git_tracked(root, rel[w]):
            raise RecipematchError(f"stage {name}: {opt(w)} is or holds {tracked[0]!r}, which git tracks: a stage "
                                   "writes only its own outputs, never the project's code, params or docs (were it this "
                                   f"stage's own output, untrack it: git rm -r --cached {rel[w].as_posix()})")


#: the longest file or folder name (bytes) common file systems allow (ext4, XFS, APFS, NTFS)
_NAME_MAX = 255


def _cmd_paths(args: list[str]) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """``([(role, path)], {option: value})`` a stage's ``cmd`` arguments pass: the path options
    (:data:`ROLES`) and the other options with a value (``--arm recipe``: what picks one stage
    of a matrix)."""
    pairs: list[tuple[str, str]] = []
    for i, tok in enumerate(args):
        if not tok.startswith("--"):
            continue
        key, eq, value = tok[2:].partition("=")
        if not eq:
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                continue  # a flag
            value = args[i + 1]
        pairs.append((key.replace("-", "_"), value))
    return [(k, v) for k, v in pairs if k in ROLES], {k: v for k, v in pairs if k not in ROLES}


def check_declared_outputs(module: str, root: Path, given: Mapping[str, Path], writes: tuple[str, ...],
                           stages: Mapping[str, Any], *, options: Mapping[str, Any] | None = None) -> None:
    """The paths a stage writes, checked against the paths the project's ``dvc.yaml`` names
    (``stages``: :func:`recipematch.pipeline.graph.project_stages`, with their deps), before any
    work. ``options`` are the stage's other options (``--arm``, ``--prompt``). A path the stage
    writes (relative to ``root``)

    - is not another stage's output nor lies inside one: another module's, or one of a matrix
      sibling (``validate --arm recipe --out artifacts/validated/verified.json``): a hand run
      with ``--metrics metrics/stats.json`` would replace the stats stage's file;
    - holds no stage's output: ``--out artifacts`` would replace every stage's work;
    - is, holds or lies inside no other path ``dvc.yaml`` names that no stage writes: a dep
      (``mt_models``, an external set's source copy), a path a ``cmd`` passes
      (``--cache cache/embeddings``), or one a ``cmd`` has another role or stage write
      (verified's ``--scratch cache/cas``; the ``llm@`` stages' shared ``--scratch cache/llm``
      is each one's own scratch, never another's ``--out``);
    - unless ``dvc.yaml`` has this stage write it in this role (verified's own scratch), is or
      lies in no file or folder at the project's top that exists and holds no stage's output
      (``mlflow.db``, ``src/...egg-info``, ``cache/x``, MLflow's ``mlartifacts``): a stage
      replaces what it writes whole.

    A path ``dvc.yaml`` does not name at all under a folder that holds stage outputs
    (``artifacts/hand_run``), or in a new folder, is fine.

    Raises:
        RecipematchError: naming the option, the path and the stage whose output or input it is,
            holds or lies inside.
    """
    options = options or {}

    def module_of(st: Any) -> str | None:
        try:
            return st.module
        except RecipematchError:  # a stage of the user's own (``bash scripts/x.sh``): never this one
            return None

    def picks(chosen: Mapping[str, str]) -> bool:
        return all(str(options[k]) == v for k, v in chosen.items() if k in options)

    declared = {d: st for st in stages.values() for d in st.written}
    named: dict[str, list[tuple[Any, str | None, bool]]] = {}  # path -> [(stage, role or None for a dep, own?)]
    for st in stages.values():
        roles, chosen = _cmd_paths(st.args)
        same = module_of(st) == module and picks(chosen)
        for role, path in roles:
            named.setdefault(Path(path).as_posix(), []).append((st, role, same))
        for d in st.deps:
            named.setdefault(Path(d).as_posix(), []).append((st, None, False))
    named = {d: v for d, v in named.items() if not any(_overlap(Path(d), Path(o)) for o in declared)}
    for role in writes:
        w = Path(str(given[role])).as_posix()
        flag = f"--{role.replace('_', '-')} {w!r}"
        for d, st in declared.items():
            other = not (module_of(st) == module and picks(_cmd_paths(st.args)[1]))
            if d == w and other or d != w and (d.startswith(w + "/") or other and w.startswith(d + "/")):
                how = "is" if d == w else "holds" if d.startswith(w + "/") else "lies inside"
                raise RecipematchError(f"{flag} {how} {d}, which dvc.yaml's stage {st.name} writes: a stage writes "
                                       "only its own outputs (they are replaced whole)")
        covered = False  # w is, or lies inside, a path dvc.yaml has this stage write in this role
        for d, uses in named.items():
            if not (d == w or d.startswith(w + "/") or w.startswith(d + "/")):
                continue
            mine = any(own and r == role for _, r, own in uses)
            foreign = next(((st, r) for st, r, own in uses if r is None or r != role or module_of(st) != module
                            or not own and d.startswith(w + "/")), None)
            covered = covered or mine and not d.startswith(w + "/")
            if not mine or foreign:
                st, r = foreign or next((st, r) for st, r, own in uses if not own)
                how = "is" if d == w else "holds" if d.startswith(w + "/") else "lies inside"
                whose = f"a dep of dvc.yaml's stage {st.name}" if r is None else \
                    f"what dvc.yaml's stage {st.name} passes as --{r.replace('_', '-')}"
                raise RecipematchError(f"{flag} {how} {d}, {whose}, and no stage's output: a stage writes only its own "
                                       "outputs (it replaces what it writes whole)")
        top = w.split("/", 1)[0]
        if not covered and (Path(root) / top).exists() and not any(_overlap(Path(top), Path(d)) for d in declared):
            where = "is" if top == w else "lies inside"
            raise RecipematchError(f"{flag} {where} the project's {top}, which holds no dvc.yaml stage's output: a "
                                   "stage replaces what it writes whole; pass the path dvc.yaml's cmd names, a path "
                                   "under a folder of stage outputs, or a new folder")


def _committed_metrics_place(role: str, rel: Path) -> bool:
    """Where a metrics or plot file git tracks may be rewritten: under ``metrics/``, or, for
    the audit's summary, at the project's top (``audit.json``)."""
    return rel.parts[0] == "metrics" and len(rel.parts) > 1 or role == "summary" and len(rel.parts) == 1


#: the written roles that are one JSON file DVC shows as metrics or plot data (tracked by git)
JSON_ROLES = ("metrics", "train_metrics", "eval_metrics", "plot", "summary")


def git_tracked(root: Path, rel: Path, limit: int = 1) -> list[str]:
    """Up to ``limit`` files git tracks at or under ``rel`` (relative to ``root``); ``[]`` where
    ``root`` is no git work tree or git is not installed.

    Raises:
        RecipematchError: git is there but cannot answer (a refused repository, a broken
            ``.git``, a time-out), with git's first line: the check is never skipped without a word.
    """
    try:
        res = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--", rel.as_posix()], capture_output=True,
                             timeout=60, check=False, env={**os.environ, "LC_ALL": "C", "LANGUAGE": ""})
    except FileNotFoundError:
        return []  # no git on this machine: nothing can be tracked
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RecipematchError(f"cannot ask git which files under {rel.as_posix()} it tracks: {e}") from None
    if res.returncode != 0:
        err = res.stderr.decode("utf-8", "replace").strip()
        if "not a git repository" in err and not (Path(root) / ".git").exists():
            return []
        raise RecipematchError(f"cannot ask git which files under {rel.as_posix()} it tracks: "
                               f"{(err.splitlines() or ['exit status ' + str(res.returncode)])[0]}")
    return [f for f in res.stdout.decode("utf-8", "replace").split("\0") if f][:limit]


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
        return (f"{name} does not exist: run the stage that writes it first (`dvc repro` runs them in order), or "
                "check the path the stage's command passes")
    if isinstance(e, IsADirectoryError):
        return f"{name} is a folder where a file is expected"
    if isinstance(e, FileExistsError):
        return f"{name} is in the way: a file where a folder is expected"
    return f"{name}: {e.strerror or e}"


def _user_message(e: BaseException) -> str | None:
    """The one-line message for a user-facing failure, or None for a bug."""
    if isinstance(e, RecipematchError):
        return str(e)
    if isinstance(e, (FileNotFoundError, IsADirectoryError, NotADirectoryError, FileExistsError)):
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


def open_params(params_path: Path, root: Path):
    """Read ``params.yaml`` once, checked whole; with the project root, resolved.

    Raises:
        RecipematchError: missing file or any bad key (named).
    """
    from recipematch.config import load_params  # lazy: keeps recipematch --help fast

    p = params_path if params_path.is_absolute() else root / params_path
    if not p.exists():
        raise RecipematchError(f"parameters file {p} does not exist (--params is relative to --root)")
    return load_params(p), root.resolve()


def check_params_file(path: Path):
    """Read and check a params file's every key, type and bound.

    Raises:
        RecipematchError: naming the file and the key.
    """
    from recipematch.config import load_params  # lazy: keeps recipematch --help fast

    return load_params(path)


def stage(name: str, keys: tuple[str, ...], *options: Callable, runtime: tuple[str, ...] = (),
          reads: tuple[str, ...] = (), writes: tuple[str, ...] = ()) -> Callable:
    """Decorator turning ``run(params_view, paths, **options) -> summary`` into the stage's
    click command (see the module docstring). ``options`` are click option decorators.
    ``runtime`` names top-level sections that choose where the work runs, never what it
    computes (``engine``): each is passed whole as a keyword of ``run`` and is no DVC param.
    ``reads`` and ``writes`` name the roles (:data:`ROLES`) the stage reads and writes: each
    becomes a required ``--<role> PATH`` option, which ``dvc.yaml``'s ``cmd`` passes, checked by
    :func:`check_stage_paths` before any work, and ``run`` gets a :class:`StagePaths` of them."""
    paths = (*reads, *writes)

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
                whole, at = open_params(params_path, root)
                p = whole.view(keys + runtime)
                given = {r: opts.pop(f"path_{r}") for r in paths}
                check_stage_paths(name, at, given, writes)
                if (at / "dvc.yaml").is_file():
                    from recipematch.pipeline.graph import project_stages  # lazy: graph imports this module

                    own = at / "params.yaml"  # a hand run's other --params must not hide the project's stages
                    views = [whole, *([None] if own.is_file() and (at / params_path).resolve() != own.resolve() else [])]
                    for q in views:
                        try:
                            stages = project_stages(at, q, deps=True)
                        except RecipematchError as e:
                            raise RecipematchError(f"stage {name}: cannot read the paths dvc.yaml declares: {e}") from None
                        check_declared_outputs(run.__module__, at, given, writes, stages, options=opts)
                elif project := next((d for d in at.parents if (d / "dvc.yaml").is_file()), None):
                    raise RecipematchError(f"stage {name}: --root {at} lies inside the project {project} (it holds "
                                           f"dvc.yaml, {at} does not): pass --root {project} and paths relative to it")
                lay = StagePaths(name, at, {r: at / given[r] for r in paths})
                return run(p, lay, **opts, **{k: getattr(p, k) for k in runtime})

            out = run_guarded(go, debug=debug)
            click.echo(json.dumps(out, indent=1, sort_keys=True, ensure_ascii=False, default=str))

        for o in reversed([*options, *(path_option(r) for r in paths)]):
            command = o(command)
        command.path_roles = paths  # type: ignore[attr-defined]
        command.writes = writes  # type: ignore[attr-defined]
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
