"""Stage ``corpus``: the organic source pool (``data.path``: the shipped sample, a BEIR
``corpus.jsonl``, or any JSONL pool with ``id``/``_id`` and ``text``) → normalised parquet, bad
rows recorded with their reason (paper Section 3)."""

from __future__ import annotations

from recipematch.io import write_json, write_jsonl
from recipematch.pipeline.door import Layout, stage, write_run_record

#: params keys this stage reads (its dvc.yaml entry lists the same)
PARAMS: tuple[str, ...] = ("data",)


def run(p, lay: Layout) -> dict:
    """Stage 1: load and normalise the corpus (BEIR jsonl → parquet)."""
    from recipematch.corpus import load_beir_corpus
    from recipematch.errors import RecipematchError

    if p.data.source == "mathnet":
        raise RecipematchError("data.source: mathnet is not wired into the corpus stage in this build; "
                               "use sample or jsonl")
    src = lay.p(p.data.path)
    loaded = load_beir_corpus(src, id_keys=("_id", "id") if p.data.source == "jsonl" else ("_id",))
    lay.corpus.mkdir(parents=True, exist_ok=True)
    loaded.table.to_parquet(lay.corpus / "corpus.parquet", index=False)
    write_jsonl(lay.corpus / "failures.jsonl", loaded.failures)
    counts = loaded.counts()
    write_json(lay.metrics / "corpus.json", counts)
    write_run_record(lay.corpus, "corpus", {"source": str(src.relative_to(lay.root))}, {"corpus": src}, counts)
    return counts


main = stage("corpus", PARAMS)(run)
