"""Stage 2: held-out sources and the two evaluations as BEIR folders."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from recipematch.config import EvalSetConfig, section
from recipematch.io import read_jsonl_strict, write_json
from recipematch.pipeline.common import (
    RELEASE_FILES,
    Layout,
    corpus_rows,
    write_run_record,
)

log = logging.getLogger("recipematch")

def run_evalsets(params: Mapping[str, Any], lay: Layout) -> dict:
    """Hold out evaluation sources and write the two evaluations as BEIR folders."""
    from recipematch.beir import write_beir
    from recipematch.evalsets import (
        build_llm_tier,
        build_probe,
        choose_heldout,
        sample_search_corpus,
    )

    cfg = section(params, "evalsets", EvalSetConfig)
    corpus = corpus_rows(lay)
    ids = {r["doc_id"] for r in corpus}
    d1 = read_jsonl_strict(lay.release / RELEASE_FILES["d1_recipe"])
    probe = read_jsonl_strict(lay.release / "probe_sample.jsonl")
    heldout = choose_heldout([r["source_id"] for r in d1 if r["source_id"] in ids], cfg.n_heldout, seed=cfg.seed)
    out = lay.evalsets
    search = sample_search_corpus(corpus, cfg.corpus_docs, seed=cfg.seed,
                                  must_include=[*heldout, *(p["source_id"] for p in probe)])
    llm = build_llm_tier(search, d1, heldout)
    write_beir(out / "llm_tier", *llm)
    write_beir(out / "probe", *build_probe(search, probe))
    write_beir(out / "probe_only", *build_probe(None, probe))
    write_json(out / "heldout.json", {"heldout_sources": heldout})
    counts = {"heldout_sources": len(heldout), "search_corpus_docs": len(search), "llm_tier.queries": len(llm[1]), "llm_tier.docs": len(llm[0]),
              "probe.queries": len(probe), "probe.negatives": sum(len(p["negatives"]) for p in probe)}
    write_json(lay.metrics / "evalsets.json", counts)
    write_run_record(out, lay, "evalsets", asdict(cfg), {"corpus": lay.corpus / "corpus.parquet",
                                                          "d1": lay.release / RELEASE_FILES["d1_recipe"],
                                                          "probe": lay.release / "probe_sample.jsonl"}, counts)
    return counts
