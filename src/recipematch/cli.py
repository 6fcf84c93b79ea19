"""The ``recipematch`` command line (click): one subcommand per pipeline stage (the same
command objects ``stages/*.py`` run for ``dvc repro``), plus ``cas`` (generator debugging)
and ``evaluate`` (any BEIR folder under any scoring rule).

Stage subcommands read ``--params`` (default ``params.yaml``) and write under ``--root``
(default ``.``), the same paths ``dvc.yaml`` declares. A user error (bad params, a bad input
file) prints one line and exits with status 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from recipematch.pipeline.door import offline_env

#: (subcommand name, stage module) — each module's ``main`` is the stage's click command
STAGE_COMMANDS = (
    ("corpus", "corpus"), ("evalsets", "evalsets"), ("gates", "gates"), ("verified", "verified"),
    ("recordings", "recordings"), ("llm", "llm"), ("judge2", "judge2"), ("backtranslate", "backtranslate"), ("specs", "specs"), ("cells", "cells"), ("validate", "validate"),
    ("train", "train"), ("evaluate-arm", "evaluate"), ("evaluate-base", "evaluate_base"),
    ("evaluate-bm25", "evaluate_bm25"), ("soup", "soup"), ("stats", "stats"), ("style", "style"), ("report", "report"),
)


class _LazyGroup(click.Group):
    """Imports a stage module only when its subcommand runs (keeps ``--help`` fast)."""

    def list_commands(self, ctx):
        return sorted([*super().list_commands(ctx), *(n for n, _ in STAGE_COMMANDS)])

    def get_command(self, ctx, name):
        import importlib

        for cmd_name, module in STAGE_COMMANDS:
            if cmd_name == name:
                return importlib.import_module(f"recipematch.pipeline.{module}").main
        return super().get_command(ctx, name)


@click.group(cls=_LazyGroup)
@click.version_option(package_name="recipematch")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """recipematch: how much of a benchmark score is bought by recipe-matching."""
    offline_env()
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")


@main.command("params")
@click.option("--check", "check_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Check this params file (every key, type and bound) and exit 0 if it is valid.")
def params_cmd(check_path: Path | None) -> None:
    """Every params.yaml key with its meaning and bounds (or check a file with --check)."""
    from recipematch.config import field_table
    from recipematch.pipeline.door import check_params_file, run_guarded

    if check_path is not None:
        run_guarded(lambda: check_params_file(check_path), debug=False)
        click.echo(f"{check_path}: valid")
        return
    for row in field_table():
        bounds = []
        if row.get("choices"):
            bounds.append("one of " + ", ".join(map(str, row["choices"])))
        if row.get("min") is not None or row.get("max") is not None:
            bounds.append(f"[{row.get('min', '-inf')}, {row.get('max', 'inf')}]")
        if row.get("non_empty"):
            bounds.append("non-empty")
        if row.get("finite"):
            bounds.append("finite")
        if row.get("max_len"):
            bounds.append(f"at most {row['max_len']} characters")
        click.echo(f"{row['key']:32s} {row['help']}" + (f"  ({'; '.join(bounds)})" if bounds else ""))


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
