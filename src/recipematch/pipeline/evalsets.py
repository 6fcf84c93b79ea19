"""Stage ``evalsets``: hold out evaluation sources and write the evaluations as BEIR folders."""

from __future__ import annotations

from dataclasses import asdict

from recipematch.errors import RecipematchError
from recipematch.io import read_jsonl_strict, write_json
from recipematch.pipeline.door import Layout, stage, write_run_record
from recipematch.pipeline.inputs import RELEASE_FILES, corpus_rows

PARAMS = ("evalsets",)


def run(p, lay: Layout) -> dict:
    """Stage 2: hold out evaluation sources; write the LLM-built tier and the probe."""
    from recipematch.beir import write_beir
    from recipematch.evalsets import build_llm_tier, build_probe, choose_heldout, sample_search_corpus

    cfg = p.evalsets
    corpus = corpus_rows(lay)
    ids = {r["doc_id"] for r in corpus}
    d1 = read_jsonl_strict(lay.release / RELEASE_FILES["d1_recipe"])
    probe = read_jsonl_strict(lay.release / "probe_sample.jsonl")
    candidates = [r["source_id"] for r in d1 if r["source_id"] in ids]
    if cfg.n_heldout > len(set(candidates)):
        raise RecipematchError(f"evalsets.n_heldout={cfg.n_heldout} exceeds the {len(set(candidates))} corpus sources "
                               f"with a recorded D1 rewrite; lower it")
    heldout = choose_heldout(candidates, cfg.n_heldout, seed=cfg.seed)
    out = lay.evalsets
    search = sample_search_corpus(corpus, cfg.corpus_docs, seed=cfg.seed,
                                  must_include=[*heldout, *(q["source_id"] for q in probe)])
    llm = build_llm_tier(search, d1, heldout)
    write_beir(out / "llm_tier", *llm)
    write_beir(out / "probe", *build_probe(search, probe))
    write_beir(out / "probe_only", *build_probe(None, probe))
    write_json(out / "heldout.json", {"heldout_sources": heldout})
    counts = {"heldout_sources": len(heldout), "search_corpus_docs": len(search), "llm_tier.queries": len(llm[1]),
              "llm_tier.docs": len(llm[0]), "probe.queries": len(probe),
              "probe.negatives": sum(len(q["negatives"]) for q in probe)}
    write_json(lay.metrics / "evalsets.json", counts)
    write_run_record(out, "evalsets", asdict(cfg), {"corpus": lay.corpus / "corpus.parquet",
                                                     "d1": lay.release / RELEASE_FILES["d1_recipe"],
                                                     "probe": lay.release / "probe_sample.jsonl"}, counts)
    return counts


main = stage("evalsets", PARAMS)(run)
