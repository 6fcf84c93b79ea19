"""Stage ``replay_pool``: the default's replay rows for the mix stages, inverse-cloze pairs
built from the corpus (paper Appendix E, Table 19; :mod:`recipematch.replay` says why they
stand in for the paper's problem → solution rows). Writes ``artifacts/replay/ict.jsonl`` and
its counts to ``metrics/replay.json``. A user's own replay file is named by
``remedies.replay_file`` instead; this stage still runs and costs seconds.
"""

from __future__ import annotations

from recipematch.io import sha256_file, write_json, write_jsonl
from recipematch.pipeline.door import StagePaths, stage
from recipematch.pipeline.inputs import corpus_rows
from recipematch.replay import inverse_cloze_rows

PARAMS: tuple[str, ...] = ("remedies.ict_seed", "remedies.ict_min_chars")


def run(p, lay: StagePaths) -> dict:
    """Build the inverse-cloze replay rows of every corpus problem that has two sentences."""
    rows, counts = inverse_cloze_rows(corpus_rows(lay), seed=p.remedies.ict_seed,
                                      min_chars=p.remedies.ict_min_chars)
    out = lay.out / "ict.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(out, rows)
    summary = {**counts, "file_sha256": sha256_file(out)}
    write_json(lay.metrics, summary)
    return summary


main = stage("replay_pool", PARAMS, reads=("corpus",), writes=("out", "metrics"))(run)
