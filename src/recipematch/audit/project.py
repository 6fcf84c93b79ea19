"""The audit's DVC project (:mod:`recipematch.audit`): its ``params.yaml`` (the main
project's keys, set for an audit and checked whole), its ``dvc.yaml`` (the main
``dvc.yaml``'s stages, paths and params as written there, run as ``recipematch <stage>``), and :func:`init_audit`, which checks every
input (:mod:`recipematch.audit.checks`), copies it under ``WORKDIR/data`` and runs ``git
init``, ``dvc init`` and ``dvc add`` (subprocesses)."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

import recipematch
from recipematch.audit.checks import (check_base_url, check_benchmark, check_real_apart, check_recipe,
                                      check_replay_rows, check_sources, check_workdir_apart)
from recipematch.config import ENV_VAR_NAME, field_table, load_params, parse_params
from recipematch.errors import RecipematchError
from recipematch.llm.prompts import load_custom_prompt_spec
from recipematch.base_models import resolve_model
from recipematch.rules import DID_ROLES, POSITIVES, RELEASE_FILES

#: the arms of an audit: the recipe and the control cell (positives = the control prompt)
AUDIT_ARMS = ("recipe", "cell")
#: the contrast the audit reports (arm, minus arm)
AUDIT_CONTRAST = ("recipe", "cell")
#: where init puts the user's inputs inside WORKDIR
BENCHMARK_DIR = "data/benchmark"
REAL_DIR = "data/real"
SOURCES_FILE = "data/sources.jsonl"
RECIPE_DIR = "data/recipe"
REPLAY_DIR = "data/peer_release"  # the recordings stage reads release rows from here
ALSO_DIR = "data/also"  # further declared evaluations (--also NAME=FOLDER[:RULE])


def control_positives(prompt: str) -> str:
    """The ``positives`` key of a shipped control prompt (e.g. ``d4_restatement`` → ``d4``).

    Raises:
        RecipematchError: not a shipped prompt that can be a control (``d1_recipe`` is the recipe).
    """
    keys = {v: k for k, v in POSITIVES.items() if k not in ("cas", "bt", "bt3", "d1")}
    if prompt not in keys:
        raise RecipematchError(f"--control {prompt!r}: choose a shipped prompt from {sorted(keys)} "
                               "(the default d4_restatement is the paper's recipe-free restatement)")
    return keys[prompt]


# --------------------------------------------------------------------------- params and dvc.yaml

def default_template() -> Path:
    """The project's own ``params.yaml`` (the embedded default) next to the source tree.

    Raises:
        RecipematchError: not found (an installed copy without the repository): pass
            ``--template``.
    """
    cand = Path(recipematch.__file__).resolve().parents[2] / "params.yaml"
    if not cand.is_file():
        raise RecipematchError(f"no params template at {cand}: pass --template PARAMS.yaml (the project's params.yaml)")
    return cand


def _plain(obj: Any) -> Any:
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def template_params(path: Path) -> dict[str, Any]:
    """The template params file, checked whole (the project's one params reader), as a plain
    mapping (every key, defaults filled in).

    Raises:
        RecipematchError: naming the file and the bad key.
    """
    return _plain(dataclasses.asdict(load_params(Path(path))))


def audit_params(template: Mapping[str, Any], *, control: str, recipe_sidecar: str, backend: str, base_url: str,
                 model: str | None, api_key_env: str, real: bool, base_model: str | None, seeds: int | None,
                 rows: int | None, benchmark_label: str = "benchmark (LLM-built)", real_rule: str = "plain",
                 also: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The audit's ``params.yaml``: ``template`` (the main project's params) with the audit's
    keys set (module docstring), checked whole. ``also``: further declared evaluations
    ``{name: "FOLDER:RULE"}`` (folders inside the project), scored and gated like every
    declared set, with ``role: in_family`` so that they stay out of the number.

    Raises:
        RecipematchError: the result breaks a params rule (naming the key).
    """
    p = copy.deepcopy(dict(template))
    p["positives"], p["negatives"], p["negatives_volume"] = control_positives(control), "recipe", "full"
    p["arms"] = list(AUDIT_ARMS)
    if "contrasts" in p:  # a params schema with declared contrasts: the audit's one gap
        p["contrasts"] = [" - ".join(AUDIT_CONTRAST)]
    p["evalsets"] = {**p["evalsets"], "n_heldout": 0}
    p["data"] = {**p.get("data", {}), "source": "jsonl", "path": SOURCES_FILE, "retrieve": ""}
    llm = {**p["llm"], "backend": backend, "base_url": base_url, "prompts": ["d1_recipe", control],
           "api_key_env": api_key_env, "recipe_prompt": recipe_sidecar}
    if model:
        llm["model_id"] = llm["judge_model_id"] = model
    p["llm"] = llm
    ev = {"benchmark": {"folder": BENCHMARK_DIR, "rule": "plain", "role": "benchmark"}}
    report_rows = {"benchmark": {"label": benchmark_label, "ks": [1]}}
    if real:
        ev["real"] = {"folder": REAL_DIR, "rule": real_rule, "role": "real"}
        report_rows["real"] = {"label": "generator-free set", "ks": [1]}
    for name, spec in (also or {}).items():
        folder, _, rule = spec.rpartition(":")
        ev[name] = {"folder": folder, "rule": rule, "role": "in_family"}
    p["evaluations"] = ev
    p["report"] = report_rows  # a set without a row is shown under its name (an --also set's row is its name)
    p["style"] = {**p["style"], "train_prompt": "d1_recipe", "score_prompts": ["d1_recipe", control],
                  "tracking_set": "benchmark"}
    p["budget"] = {**p["budget"], "shared_sources": []}
    # the template's pools, judging, SABER and regen runs name the template's own evaluations
    for key in ("pooling", "judging", "saber", "regen", "meld_generate"):
        if key in p:
            p[key] = {}
    if "remedies" in p:  # the audit's one question is recipe vs control: no soups or replay mixes
        p["remedies"] = {**p["remedies"], "arms": []}
    if "hits" in p:  # the audit's sets carry no near-miss probe of the template's
        p["hits"] = {**p["hits"], "probe": ""}
    if base_model:
        p["train"] = {**p["train"], "model": base_model}
    if seeds is not None:
        p["train"] = {**p["train"], "n_seeds": seeds}
    if rows is not None:
        p["budget"] = {**p["budget"], "rows": rows}
    parse_params(p)
    return p


def _stage_params(module: str) -> list[str]:
    """The params a stage reads: its module's ``PARAMS`` (what the door enforces and
    :mod:`recipematch.pipeline.deps` checks in the main ``dvc.yaml``)."""
    return list(importlib.import_module(f"recipematch.pipeline.{module}").PARAMS)


#: the command of the audit-report stage, the one stage only an audit project runs
AUDIT_REPORT_CMD = "recipematch audit-report --metrics-dir metrics --pairs artifacts/pairs --out reports --summary audit.json"
#: the main ``dvc.yaml``'s stages an audit runs, in dependency order (``recordings`` only when
#: the LLM answers are replayed)
AUDIT_STAGES = ("corpus", "evalsets", "gates", "recordings", "llm", "specs", "cells", "validate", "train",
                "evaluate_base", "evaluate_bm25", "evaluate", "stats")


def main_stages() -> dict[str, Any]:
    """The main project's ``dvc.yaml`` stages (unresolved), from the checkout this package runs
    from (:func:`recipematch.pipeline.graph.source_dvc_yaml`).

    Raises:
        RecipematchError: an installed copy without the repository.
    """
    from recipematch.pipeline.graph import source_dvc_yaml  # lazy: the audit CLI stays light

    return yaml.safe_load(source_dvc_yaml().read_text(encoding="utf-8"))["stages"]


def audit_dvc_yaml(params: Mapping[str, Any], main: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The audit's ``dvc.yaml``: the main ``dvc.yaml``'s stages (``main``, default
    :func:`main_stages`) that an audit runs, each with the main stage's command (paths
    included, run as ``recipematch <stage>``), params and outputs. Deps: the main stage's
    deps that an audit stage writes, the main's data deps the audit copies in (the source
    pool through ``${data.path}``, the replayed release rows), and the audit's declared
    evaluation folders in place of the main project's. Code is not a dep here (the project
    holds no source tree): ``audit.json`` records the recipematch version."""
    from recipematch.pipeline.door import STAGE_COMMANDS  # lazy: the audit stays light
    from recipematch.pipeline.graph import under  # lazy: the audit stays light

    main = main_stages() if main is None else main
    cli_name = {module: name for name, module in STAGE_COMMANDS}
    replay = params["llm"]["backend"] == "replay"
    evals = [ev["folder"] for _, ev in sorted(params["evaluations"].items())]
    recipe = [RECIPE_DIR] if params["llm"].get("recipe_prompt") else []
    groups = [g for g in AUDIT_STAGES if replay or g != "recordings"]
    missing = [g for g in groups if g not in main]
    if missing:
        raise RecipematchError(f"the main dvc.yaml has no stage {', '.join(missing)} (the audit runs it)")
    outs = [next(iter(o)) if isinstance(o, Mapping) else o for g in groups
            for key in ("outs", "metrics") for o in main[g].get(key) or []]

    replayed = {f"{REPLAY_DIR}/{f}" for f in RELEASE_FILES.values()}  # what init copies for the recordings stage

    def dep_kept(group: str, d: str) -> bool:
        if d == "${data.path}" or any(under(o, d) or under(d, o) for o in outs):
            return True
        return group == "recordings" and d in replayed

    stages: dict[str, Any] = {}
    for g in groups:
        st = copy.deepcopy(dict(main[g]))
        argv = st["cmd"].split(" ", 2)
        module = argv[1].removeprefix("stages/").removesuffix(".py")
        st["cmd"] = " ".join(["recipematch", cli_name[module], *argv[2:]])
        deps: list[str] = []
        for d in st.get("deps") or []:
            if d.startswith("${evaluations."):
                deps += [e for e in evals if e not in deps]
            elif not d.startswith(("src/", "stages/")) and dep_kept(g, d) and d not in deps:
                deps.append(d)
        if g == "llm":
            deps += recipe
        st["deps"] = deps
        st.pop("plots", None)  # the main plot names the main project's sets
        stages[g] = st
    stages["audit"] = {
        "cmd": AUDIT_REPORT_CMD,
        "deps": ["metrics/stats.json", "metrics/gates.json", "metrics/corpus.json", "artifacts/pairs", *evals,
                 SOURCES_FILE, *recipe],
        "params": _stage_params("audit"),
        "outs": [{"reports": {"cache": False}}], "metrics": [{"audit.json": {"cache": False}}]}
    return {"stages": stages}


# --------------------------------------------------------------------------- init

#: the files of a BEIR folder an audit reads (split ``test``); nothing else is copied
BEIR_FILES = ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv", "qrels/test.jsonl")


def _copy_beir(src: Path, dst: Path) -> None:
    """Copy the BEIR files of ``src`` (:data:`BEIR_FILES` that exist, symlinked files read
    through) into ``dst``; other files and links in the folder are left behind (a link loop, a
    FIFO or an unrelated blob is never followed or tracked)."""
    for rel in BEIR_FILES:
        f = src / rel
        if f.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst / rel)


def _copy_file(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def _copy_sidecar(sidecar: Path, dest: Path) -> Path:
    """Copy a prompt sidecar and the text files it names into ``dest``; returns the copy."""
    spec = load_custom_prompt_spec(sidecar)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(sidecar, dest / sidecar.name)
    for key in ("system", "user"):
        rel = spec.get(key)
        if isinstance(rel, str) and rel:
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                raise RecipematchError(f"{sidecar}: key {key!r} must name a file next to the sidecar, got {rel!r}")
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(sidecar.parent / rel, dest / rel)
    return dest / sidecar.name


def _run(cmd: list[str], cwd: Path) -> None:
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError:
        raise RecipematchError(f"`{cmd[0]}` is not installed or not on PATH (audit init runs git and dvc)") from None
    if r.returncode != 0:
        why = (r.stderr or r.stdout).strip()[:400] or f"exit code {r.returncode}, no message"
        raise RecipematchError(f"`{' '.join(cmd)}` failed in {cwd}: {why}")


def _dvc() -> str:
    cand = Path(sys.executable).with_name("dvc")
    return str(cand) if cand.exists() else "dvc"


def init_audit(workdir: Path, *, benchmark: Path, recipe: str, sources: Path, control: str = "d4_restatement",
               base_url: str = "", model: str | None = None, api_key_env: str = "", replay: Path | None = None,
               real: Path | None = None, base_model: str | None = None, seeds: int | None = None,
               rows: int | None = None, template: Path | None = None, real_rule: str = "plain",
               also: Mapping[str, tuple[Path, str]] | None = None, git: bool = True) -> dict[str, Any]:
    """Write the audit's DVC project into ``workdir`` (see the module docstring).

    Steps: check every input (:func:`check_benchmark`, :func:`check_recipe`,
    :func:`check_sources`), copy them under ``workdir/data``, write ``params.yaml`` (checked)
    and ``dvc.yaml``, then ``git init``, ``dvc init`` and ``dvc add`` each input.

    Args:
        workdir: a new or empty folder.
        benchmark, real: BEIR folders (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``).
        recipe: ``d1_recipe`` or a prompt sidecar (``*.prompt.yaml``).
        sources: organic pool (JSONL with ``id``/``_id`` and ``text``).
        control: the control prompt (a shipped positives prompt; default D4).
        base_url, model, api_key_env: an OpenAI-compatible server, the model it serves (generator
            and judge) and the NAME of the variable holding its key; or ``replay``: a folder of
            released rows (``pairs_d1_recipe.jsonl``, ``pairs_d4_unrelated.jsonl``) to replay.
        base_model: ``train.model`` (a packaged model name or a local sentence-transformers folder).
        seeds, rows: ``train.n_seeds`` and ``budget.rows`` (default: the template's).
        real_rule: the scoring rule of ``real`` (``plain``, ``crosslingual_strict``, ``samelang``).
        also: further BEIR folders to declare, ``{name: (folder, rule)}`` (``role: in_family``:
            scored and kept out of training by the gates, not part of the number).
        template: the params file the audit starts from (default :func:`default_template`).
        git: run ``git init``/``dvc init``/``dvc add`` (False: files only).

    Returns:
        ``{"workdir", "benchmark": counts, "sources": counts, "recipe": name}``.

    Raises:
        RecipematchError: a bad input (named), a non-empty ``workdir``, neither or both of
            ``base_url`` and ``replay``, or a failing git/dvc command.
    """
    workdir = Path(workdir)
    if workdir.is_symlink() or (workdir.exists() and not workdir.is_dir()):
        raise RecipematchError(f"{workdir} is a link or a file: give a new folder")
    if workdir.exists() and any(workdir.iterdir()):
        raise RecipematchError(f"{workdir} is not empty: give a new folder")
    for flag, path in (("--sources", sources), ("--benchmark", benchmark)):
        if not Path(path).exists():
            raise RecipematchError(f"{flag} {path} does not exist")
    if not Path(sources).is_file():
        raise RecipematchError(f"--sources {sources}: give a regular JSONL file (not a folder, pipe or device)")
    if bool(base_url) == bool(replay):
        raise RecipematchError("give either --base-url (with --model) or --replay RECORDINGS, not both or neither")
    if base_url and not model:
        raise RecipematchError("--base-url needs --model (the name the server serves)")
    if replay is not None and recipe != "d1_recipe":
        raise RecipematchError("--replay replays the shipped D1/D4 prompts' recordings; a custom recipe needs a "
                               "server (--base-url)")
    check_workdir_apart(workdir, [benchmark, sources, real, replay, *(f for f, _ in (also or {}).values())])
    if base_url:
        check_base_url(base_url)
    if api_key_env and not ENV_VAR_NAME.fullmatch(api_key_env):
        raise RecipematchError("--api-key-env must be the NAME of an environment variable (letters, digits, _), "
                               "never the key itself (not repeated here)")
    if api_key_env and not os.environ.get(api_key_env):
        raise RecipematchError(f"--api-key-env {api_key_env}: no such environment variable here, or it is empty; "
                               f"set it first (only its name is written, the key is read at request time)")
    if model is not None and (not model.strip() or any(c.isspace() or not c.isprintable() for c in model)):
        raise RecipematchError(f"--model {model!r}: give the model name the server serves (no spaces or "
                               "control characters)")
    if replay is not None and control != "d4_restatement":
        raise RecipematchError(f"--replay holds D1 and D4 rows only: --control {control} needs a server (--base-url)")
    if base_model:
        resolve_model(base_model, key="--base-model")
    tpl = template_params(template or default_template())
    bench = check_benchmark(Path(benchmark))
    real_counts = check_benchmark(Path(real), name="real") if real is not None else None
    if real is not None:
        check_real_apart(Path(real), Path(benchmark), real_rule)
    elif real_rule != "plain":
        raise RecipematchError(f"--real-rule {real_rule} without --real: give the generator-free set it scores")
    also = dict(also or {})
    for name, (folder, rule) in also.items():
        if name in DID_ROLES:  # the audit names its two sets by their role
            raise RecipematchError(f"--also {name}=...: the names benchmark and real are taken")
        check_benchmark(Path(folder), name=name, rule=rule)
        for flag, other in (("--benchmark", benchmark), ("--real", real)):
            if other is not None and Path(folder).resolve() == Path(other).resolve():
                raise RecipematchError(f"--also {name}={folder}: that folder is {flag} already")
    recipe_name, sidecar = check_recipe(recipe)
    rows_eff = rows if rows is not None else int(tpl["budget"]["rows"])
    bound = next(r for r in field_table() if r["key"] == "budget.rows")
    if not (bound["min"] <= rows_eff <= bound["max"]):
        raise RecipematchError(f"--rows {rows_eff}: budget.rows must be in [{bound['min']}, {bound['max']:,}]")
    src_counts = check_sources(Path(sources), Path(benchmark), rows=rows_eff,
                               dev_fraction=float(tpl["budget"]["dev_fraction"]))
    if replay is not None:
        missing = [f for f in RELEASE_FILES.values() if not (Path(replay) / f).is_file()]
        if missing:
            raise RecipematchError(f"--replay {replay}: missing {missing} (released rows the recordings are built from)")
        check_replay_rows(Path(replay), Path(sources), tpl["llm"])
    params = audit_params(tpl, control=control, recipe_sidecar="", backend="replay" if replay else "openai",
                          base_url=base_url or "", model=model, api_key_env=api_key_env, real=real is not None,
                          base_model=base_model, seeds=seeds, rows=rows, real_rule=real_rule,
                          also={n: f"{ALSO_DIR}/{n}:{rule}" for n, (_, rule) in also.items()})
    created = not workdir.exists()
    workdir.mkdir(parents=True, exist_ok=True)
    def _terminated(signum, frame):  # SIGTERM (timeout, kill): clean up as for Ctrl-C
        raise KeyboardInterrupt(f"signal {signum}")

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
    try:
        return _write_project(workdir, benchmark=benchmark, sources=sources, real=real, also=also, sidecar=sidecar,
                              replay=replay, params=params, git=git, bench=bench, real_counts=real_counts,
                              src_counts=src_counts, recipe_name=recipe_name)
    except BaseException:
        # nothing half-written stays behind: the folder is emptied (and removed if init made it)
        for child in list(workdir.iterdir()):
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        if created:
            workdir.rmdir()
        raise
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _write_project(workdir: Path, *, benchmark, sources, real, also, sidecar, replay, params, git, bench,
                   real_counts, src_counts, recipe_name) -> dict[str, Any]:
    """Copy the checked inputs into ``workdir`` and write its params, dvc.yaml and git/DVC state."""
    _copy_beir(Path(benchmark), workdir / BENCHMARK_DIR)
    _copy_file(Path(sources), workdir / SOURCES_FILE)
    tracked = [BENCHMARK_DIR, SOURCES_FILE]
    if real is not None:
        _copy_beir(Path(real), workdir / REAL_DIR)
        tracked.append(REAL_DIR)
    for name, (folder, _) in also.items():
        _copy_beir(Path(folder), workdir / ALSO_DIR / name)
        tracked.append(f"{ALSO_DIR}/{name}")
    if sidecar is not None:
        copy = _copy_sidecar(sidecar, workdir / RECIPE_DIR)
        params["llm"]["recipe_prompt"] = str(copy.relative_to(workdir))
        tracked.append(RECIPE_DIR)
    if replay is not None:
        (workdir / REPLAY_DIR).mkdir(parents=True, exist_ok=True)
        for f in RELEASE_FILES.values():
            shutil.copyfile(Path(replay) / f, workdir / REPLAY_DIR / f)
        tracked.append(REPLAY_DIR)
    parse_params(params)
    _write_yaml(workdir / "params.yaml", params, "# recipematch audit: the main params.yaml's keys, set for an audit "
                                                 "(recipematch params lists them)\n")
    _write_yaml(workdir / "dvc.yaml", audit_dvc_yaml(params), "")
    # reports/ is rebuilt by `dvc repro` (as in the main project) and stays out of git: a stage never writes a
    # path git tracks (recipematch.pipeline.door.check_stage_paths)
    (workdir / ".gitignore").write_text("/artifacts\n/models\n/cache\n/reports\n/mlruns\n/mlflow.db\n/mlflow.db.lock\n",
                                        encoding="utf-8")
    if git:
        _run(["git", "init", "-q"], workdir)
        _run([_dvc(), "init"], workdir)
        _run([_dvc(), "config", "core.analytics", "false"], workdir)
        _run([_dvc(), "add", "-q", *tracked], workdir)
    return {"workdir": str(workdir), "benchmark": bench, "real": real_counts, "sources": src_counts,
            "recipe": recipe_name, "tracked": tracked}


def _write_yaml(path: Path, obj: Any, header: str) -> None:
    path.write_text(header + yaml.safe_dump(obj, sort_keys=False, allow_unicode=True, width=120), encoding="utf-8")
