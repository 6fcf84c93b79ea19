"""Stage ``corpus``: the organic source problems (``data.source`` / ``data.path``) → normalised
parquet, bad rows recorded with their reason (paper Section 3).

``dvc.yaml`` lists ``${data.path}`` among the stage's deps, so DVC hashes whichever file or
folder the params name (:mod:`recipematch.pipeline.deps` checks that entry).
"""

from __future__ import annotations

from recipematch.io import write_json, write_jsonl
from recipematch.pipeline.door import StagePaths, stage, write_run_record

#: params keys this stage reads (its dvc.yaml entry lists the same)
PARAMS: tuple[str, ...] = ("data.source", "data.path")

#: dependencies dvc.yaml must list for this stage besides its code (DVC interpolates them
#: from params.yaml; :mod:`recipematch.pipeline.deps` checks and writes them)
DATA_DEPS: tuple[str, ...] = ("${data.path}",)


def run(p, lay: StagePaths) -> dict:
    """Stage 1: load and normalise the organic source problems (sample, MathNet or a JSONL pool)."""
    from recipematch.corpus import load_source  # lazy: recipematch.corpus pulls in pandas

    src = lay.root / p.data.path
    loaded = load_source(p.data.source, src)
    lay.out.mkdir(parents=True, exist_ok=True)
    loaded.table.to_parquet(lay.out / "corpus.parquet", index=False)
    write_jsonl(lay.out / "failures.jsonl", loaded.failures)
    counts = loaded.counts()
    write_json(lay.metrics, counts)
    write_run_record(lay.out, "corpus", {"data.source": p.data.source, "data.path": p.data.path},
                     {"corpus": src}, counts)
    return counts


main = stage("corpus", PARAMS, reads=(), writes=("out", "metrics"))(run)
