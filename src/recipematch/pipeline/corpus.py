"""Stage 1: corpus loading and normalisation."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from recipematch.io import write_json, write_jsonl
from recipematch.pipeline.common import Layout, write_run_record

log = logging.getLogger("recipematch")

def run_corpus(params: Mapping[str, Any], lay: Layout) -> dict:
    """Stage 1: BEIR ``corpus.jsonl`` → ``artifacts/corpus/corpus.parquet`` + failures."""
    from recipematch.corpus import load_beir_corpus

    src = lay.release / "corpus.jsonl"
    loaded = load_beir_corpus(src)
    lay.corpus.mkdir(parents=True, exist_ok=True)
    loaded.table.to_parquet(lay.corpus / "corpus.parquet", index=False)
    write_jsonl(lay.corpus / "failures.jsonl", loaded.failures)
    counts = loaded.counts()
    write_json(lay.metrics / "corpus.json", counts)
    write_run_record(lay.corpus, lay, "corpus", {"source": str(src.relative_to(lay.root))}, {"corpus": src}, counts)
    return counts
