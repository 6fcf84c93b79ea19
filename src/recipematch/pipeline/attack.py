"""Stage ``attack@<key>``: one MELD attack row set (paper Section 6, Appendix D) replayed from
released rows into the pair file ``artifacts/pairs/<key>.jsonl``, with its counts in
``metrics/attacks/<key>.json``. The arm of the same name (``arms: [..., meld9]``) then
assembles, gates, budgets, validates and trains on it like every cell; the contamination gates
check each row against every declared evaluation's texts (MELD's own when it is declared).
"""

from __future__ import annotations

import click

from recipematch.errors import RecipematchError
from recipematch.io import write_json, write_jsonl
from recipematch.pipeline.door import Layout, stage

PARAMS = ("attacks",)

name_option = click.option("--name", "name", required=True, help="A row set named in params.yaml `attacks`.")


def run(p, lay: Layout, *, name: str) -> dict:
    """Check the released rows of ``name`` and write its pair file (Appendix D)."""
    from recipematch.external.meld_attack import read_attack_rows

    if name not in p.attacks:
        raise RecipematchError(f"--name {name!r}: not declared in params.yaml attacks (declared: {sorted(p.attacks)})")
    a = p.attacks[name]
    rows, counts = read_attack_rows(lay.p(a.rows), name, revision=a.revision)
    write_jsonl(lay.pairs / f"{name}.jsonl", rows)
    counts = {"rows": a.rows, **counts}
    write_json(lay.metrics / "attacks" / f"{name}.json", counts)
    return counts


main = stage("attack", PARAMS, name_option)(lambda p, lay, name: run(p, lay, name=name))
