"""Stage 3: exclusion lists v1 and v2."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from recipematch.config import GatesConfig, section
from recipematch.io import read_json, write_json
from recipematch.pipeline.common import Layout, corpus_rows, write_run_record

log = logging.getLogger("recipematch")

def run_gates(params: Mapping[str, Any], lay: Layout) -> dict:
    """Exclusion lists v1 and v2 (SPEC §4) over every evaluation text; both always built."""
    from recipematch.beir import load_beir
    from recipematch.evalsets import evaluation_texts
    from recipematch.gates import build_exclusion_list

    cfg = section(params, "gates", GatesConfig)
    corpus = corpus_rows(lay)
    ids = {r["doc_id"] for r in corpus}
    beirs = [load_beir(lay.evalsets / name) for name in ("llm_tier", "probe")]
    texts = evaluation_texts(*[(c, q, r) for c, q, r in beirs], corpus_ids=ids)
    heldout = read_json(lay.evalsets / "heldout.json")["heldout_sources"]
    pairs = [(r["doc_id"], r["text"]) for r in corpus]
    counts: dict[str, Any] = {"active": cfg.active, "evaluation_texts": len(texts)}
    for v in ("v1", "v2"):
        ex = build_exclusion_list(pairs, texts, v, extra_ids=heldout)
        write_json(lay.gates / f"exclusion_{v}.json", ex.to_json())
        by_reason: dict[str, int] = {}
        for reason in ex.reasons.values():
            by_reason[reason] = by_reason.get(reason, 0) + 1
        counts[v] = {"ids_excluded": len(ex.ids), "text_hashes": len(ex.text_hashes), **{f"ids.{k}": n for k, n in sorted(by_reason.items())}}
    write_json(lay.metrics / "gates.json", counts)
    write_run_record(lay.gates, lay, "gates", asdict(cfg), {"corpus": lay.corpus / "corpus.parquet", "evalsets": lay.evalsets}, counts)
    return counts
