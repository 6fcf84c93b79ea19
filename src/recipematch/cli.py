"""The ``recipematch`` command line (click): one subcommand per pipeline stage, plus
``report``, ``cas`` (generator debugging) and ``evaluate`` (any BEIR folder).

Stage subcommands read ``--params`` (default ``params.yaml``) and write under ``--root``
(default ``.``), the same paths ``dvc.yaml`` declares; ``dvc repro`` runs them through the
thin ``stages/*.py`` entry points.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click

_root_opt = click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True,
                         help="Project root; every stage path is relative to it.")
_params_opt = click.option("--params", "params_path", type=click.Path(dir_okay=False, path_type=Path),
                           default=Path("params.yaml"), show_default=True, help="Parameters file.")
_progress_opt = click.option("--progress/--no-progress", default=True, show_default=True, help="Progress bars on stderr.")


def _offline_env() -> None:
    """Quiet, offline runs (ENVIRONMENT.md): no hub lookups, no telemetry."""
    for k, v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true",
                 "DVC_NO_ANALYTICS": "1", "TOKENIZERS_PARALLELISM": "false", "GX_ANALYTICS_ENABLED": "false",
                 "DO_NOT_TRACK": "1"}.items():
        os.environ.setdefault(k, v)


def _load(params_path: Path, root: Path):
    from recipematch.config import load_yaml
    from recipematch.stages import Layout

    from recipematch.config import check_params

    p = params_path if params_path.is_absolute() else root / params_path
    if not p.exists():
        raise click.UsageError(f"parameters file {p} does not exist (--params is relative to --root)")
    try:
        params = load_yaml(p)
        check_params(params)
    except (ValueError, TypeError, KeyError) as e:
        raise click.UsageError(f"{p}: {e}") from None
    return params, Layout(root.resolve())


def _echo_json(obj) -> None:
    import json

    click.echo(json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False, default=str))


@click.group()
@click.version_option(package_name="recipematch")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """recipematch: how much of a benchmark score is bought by recipe-matching."""
    _offline_env()
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")


@main.command("corpus")
@_params_opt
@_root_opt
def corpus_cmd(params_path: Path, root: Path) -> None:
    """Stage 1: load and normalise the corpus (BEIR jsonl → parquet)."""
    from recipematch.stages import run_corpus

    _echo_json(run_corpus(*_load(params_path, root)))


@main.command("evalsets")
@_params_opt
@_root_opt
def evalsets_cmd(params_path: Path, root: Path) -> None:
    """Stage 2: hold out evaluation sources; write the LLM-built tier and the probe."""
    from recipematch.stages import run_evalsets

    _echo_json(run_evalsets(*_load(params_path, root)))


@main.command("gates")
@_params_opt
@_root_opt
def gates_cmd(params_path: Path, root: Path) -> None:
    """Stage 3: exclusion lists v1 and v2."""
    from recipematch.stages import run_gates

    _echo_json(run_gates(*_load(params_path, root)))


@main.command("verified")
@_params_opt
@_root_opt
@_progress_opt
def verified_cmd(params_path: Path, root: Path, progress: bool) -> None:
    """Stage 4a: computer-algebra (verified) pairs."""
    from recipematch.stages import run_verified

    _echo_json(run_verified(*_load(params_path, root), progress=progress))


@main.command("recordings")
@_params_opt
@_root_opt
def recordings_cmd(params_path: Path, root: Path) -> None:
    """Stage 4b: replay recordings from the peer's released LLM rows."""
    from recipematch.stages import run_recordings

    _echo_json(run_recordings(*_load(params_path, root)))


@main.command("llm")
@_params_opt
@_root_opt
@click.option("--prompt", required=True, help="Prompt name, e.g. d1_recipe or d4_restatement.")
@_progress_opt
def llm_cmd(params_path: Path, root: Path, prompt: str, progress: bool) -> None:
    """Stage 4c: LLM-written pairs for one prompt (backend + judge)."""
    from recipematch.stages import run_llm

    _echo_json(run_llm(*_load(params_path, root), prompt, progress=progress))


@main.command("specs")
@_params_opt
@_root_opt
def specs_cmd(params_path: Path, root: Path) -> None:
    """Stage 5a: write one cell spec per arm (the cell under test from positives/negatives)."""
    from recipematch.stages import run_specs

    _echo_json(run_specs(*_load(params_path, root)))


@main.command("cells")
@_params_opt
@_root_opt
@click.option("--arm", required=True, help="verified | recipe | reference | d4 | cell")
def cells_cmd(params_path: Path, root: Path, arm: str) -> None:
    """Stage 5: assemble one arm, gate it, draw each seed's matched budget."""
    from recipematch.stages import run_cells

    _echo_json(run_cells(*_load(params_path, root), arm))


@main.command("validate")
@_params_opt
@_root_opt
@click.option("--arm", required=True)
def validate_cmd(params_path: Path, root: Path, arm: str) -> None:
    """Stage 6: Great Expectations suites; a failure stops the pipeline before training."""
    from recipematch.stages import run_validate

    _echo_json(run_validate(*_load(params_path, root), arm))


@main.command("train")
@_params_opt
@_root_opt
@click.option("--arm", required=True)
@_progress_opt
def train_cmd(params_path: Path, root: Path, arm: str, progress: bool) -> None:
    """Stage 7: train every seed of one arm (one MLflow run per seed)."""
    from recipematch.stages import run_train

    _echo_json(run_train(*_load(params_path, root), arm, progress=progress))


@main.command("evaluate-arm")
@_params_opt
@_root_opt
@click.option("--arm", required=True, help="an arm, or 'base' for the untrained model")
@_progress_opt
def evaluate_arm_cmd(params_path: Path, root: Path, arm: str, progress: bool) -> None:
    """Stage 8: score every seed of one arm on the LLM-built tier and the probe."""
    from recipematch.stages import run_evaluate

    _echo_json(run_evaluate(*_load(params_path, root), arm, progress=progress))


def _arms(params) -> list[str]:
    from recipematch.config import top

    return list(top(params, "arms", list[str]))


@main.command("stats")
@_params_opt
@_root_opt
def stats_cmd(params_path: Path, root: Path) -> None:
    """Stage 9: mean ± sd, nested-bootstrap gaps and the DiD."""
    from recipematch.stages import run_stats

    params, lay = _load(params_path, root)
    out = run_stats(params, lay, _arms(params))
    _echo_json({"gaps": {k: {kk: v[kk] for kk in ("estimate", "low", "high") if kk in v} for k, v in out["gaps"].items()}})


@main.command("report")
@_params_opt
@_root_opt
def report_cmd(params_path: Path, root: Path) -> None:
    """Stage 10: the Markdown report with the Table-1 table and the Figure-1 scatter."""
    from recipematch.stages import run_report

    params, lay = _load(params_path, root)
    click.echo(str(run_report(params, lay, _arms(params))))


def _register() -> None:
    from recipematch.cas.cli import cas
    from recipematch.eval_cli import evaluate

    main.add_command(cas)
    main.add_command(evaluate)


try:
    _register()
except ImportError as _e:  # a partial install must still run the stage commands
    print(f"recipematch: optional commands unavailable: {_e}", file=sys.stderr)


if __name__ == "__main__":
    main()
