"""The ``recipematch`` command line (click): one subcommand per pipeline stage, plus
``report``, ``cas`` (generator debugging) and ``evaluate`` (any BEIR folder)."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="recipematch")
def main() -> None:
    """recipematch: how much of a benchmark score is bought by recipe-matching."""


def _register() -> None:
    from recipematch.cas.cli import cas
    from recipematch.eval_cli import evaluate

    main.add_command(cas)
    main.add_command(evaluate)


_register()
