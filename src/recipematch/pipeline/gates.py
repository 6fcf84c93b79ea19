"""Stage ``gates``: exclusion lists v1 and v2 over every evaluation text (paper Section 3, Appendix B)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from recipematch.io import write_json
from recipematch.pipeline.door import Layout, stage, write_run_record
from recipematch.pipeline.inputs import corpus_rows, heldout_sources

PARAMS = ("gates",)


def run(p, lay: Layout) -> dict:
    """Stage 3: exclusion lists v1 and v2 (both always built; ``gates.active`` picks one)."""
    from recipematch.beir import load_beir
    from recipematch.evalsets import evaluation_texts
    from recipematch.gates import build_exclusion_list

    cfg = p.gates
    corpus = corpus_rows(lay)
    ids = {r["doc_id"] for r in corpus}
    beirs = [load_beir(lay.evalsets / name) for name in ("llm_tier", "probe")]
    texts = evaluation_texts(*beirs, corpus_ids=ids)
    heldout = heldout_sources(lay)
    pairs = [(r["doc_id"], r["text"]) for r in corpus]
    counts: dict[str, Any] = {"active": cfg.active, "evaluation_texts": len(texts)}
    for v in ("v1", "v2"):
        ex = build_exclusion_list(pairs, texts, v, extra_ids=heldout)
        write_json(lay.gates / f"exclusion_{v}.json", ex.to_json())
        by_reason: dict[str, int] = {}
        for reason in ex.reasons.values():
            by_reason[reason] = by_reason.get(reason, 0) + 1
        counts[v] = {"ids_excluded": len(ex.ids), "text_hashes": len(ex.text_hashes),
                     **{f"ids.{k}": n for k, n in sorted(by_reason.items())}}
    write_json(lay.metrics / "gates.json", counts)
    write_run_record(lay.gates, "gates", asdict(cfg), {"corpus": lay.corpus / "corpus.parquet",
                                                       "evalsets": lay.evalsets}, counts)
    return counts


main = stage("gates", PARAMS)(run)
