"""Stage ``corpus``: BEIR ``corpus.jsonl`` → normalised parquet, bad rows recorded with their reason."""

from __future__ import annotations

from recipematch.io import write_json, write_jsonl
from recipematch.pipeline.door import Layout, stage, write_run_record

#: params keys this stage reads (its dvc.yaml entry lists the same)
PARAMS: tuple[str, ...] = ()


def run(p, lay: Layout) -> dict:
    """Stage 1: load and normalise the corpus (BEIR jsonl → parquet)."""
    from recipematch.corpus import load_beir_corpus

    src = lay.release / "corpus.jsonl"
    loaded = load_beir_corpus(src)
    lay.corpus.mkdir(parents=True, exist_ok=True)
    loaded.table.to_parquet(lay.corpus / "corpus.parquet", index=False)
    write_jsonl(lay.corpus / "failures.jsonl", loaded.failures)
    counts = loaded.counts()
    write_json(lay.metrics / "corpus.json", counts)
    write_run_record(lay.corpus, "corpus", {"source": str(src.relative_to(lay.root))}, {"corpus": src}, counts)
    return counts


main = stage("corpus", PARAMS)(run)
