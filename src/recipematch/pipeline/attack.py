"""Stage ``attack@<key>``: one MELD or SABER-Math attack row set (paper Section 6, Appendix D)
replayed from released rows into the pair file ``artifacts/pairs/<key>.jsonl``, with its counts
in ``metrics/attacks/<key>.json``. A SABER summary-channel row is anchored on the corpus
problem with its source id (the corpus stage's output). The arm of the same name
(``arms: [..., meld9]``, ``[..., saber_summary]``) then
assembles, gates, budgets, validates and trains on it like every cell; the contamination gates
check each row against every declared evaluation's texts (MELD's own when it is declared).
"""

from __future__ import annotations

import click

from recipematch.errors import RecipematchError
from recipematch.external.meld_attack import read_attack_rows
from recipematch.external.saber_attack import build_document_rows, read_summary_rows
from recipematch.io import write_json, write_jsonl
from recipematch.pipeline.door import StagePaths, stage
from recipematch.pipeline.inputs import corpus_rows
from recipematch.rules import SABER_ATTACKS

PARAMS = ("attacks",)

name_option = click.option("--name", "name", required=True, help="A row set named in params.yaml `attacks`.")


def run(p, lay: StagePaths, *, name: str) -> dict:
    """Check the released rows of ``name`` and write its pair file (Appendix D)."""
    if name not in p.attacks:
        raise RecipematchError(f"--name {name!r}: not declared in params.yaml attacks (declared: {sorted(p.attacks)})")
    a = p.attacks[name]
    if name in SABER_ATTACKS:
        corpus = {str(r["doc_id"]): r["text"] for r in corpus_rows(lay)}
        if name == "saber_document":
            rows, counts = build_document_rows(lay.root / a.rows, name, corpus, seed=a.seed, revision=a.revision)
        else:
            rows, counts = read_summary_rows(lay.root / a.rows, name, corpus, revision=a.revision)
    else:
        rows, counts = read_attack_rows(lay.root / a.rows, name, revision=a.revision)
    write_jsonl(lay.pair_file, rows)
    counts = {"rows": a.rows, **counts}
    write_json(lay.metrics, counts)
    return counts


main = stage("attack", PARAMS, name_option, reads=("corpus",), writes=("pair_file", "metrics"))(run)
