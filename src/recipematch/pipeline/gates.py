"""Stage ``gates``: exclusion lists v1 and v2 over every declared evaluation (paper Section 3,
Appendix B), and the evaluation texts the n-gram and cosine gates compare against."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from recipematch.gates import build_exclusion_list
from recipematch.evalsets import set_texts
from recipematch.benchmarks_data import load_set, member_ids
from recipematch.io import write_json
from recipematch.pipeline.door import StagePaths, stage, write_run_record
from recipematch.pipeline.inputs import corpus_rows, heldout_sources

PARAMS = ("gates.active", "evaluations")  # both lists are always built; the gate thresholds are the cells'
#: the evaluation folders it reads (dvc.yaml lists them: recipematch.pipeline.deps): every declared set
EVAL_DEPS = "all"
#: read besides them: artifacts/evalsets/heldout.json, and the whole folder's hash in the run record
KEEP_DEPS: tuple[str, ...] = ("artifacts/evalsets",)


def run(p, lay: StagePaths) -> dict:
    """Stage 3: exclusion lists v1 and v2 (both always built; ``gates.active`` picks one)."""
    cfg = p.gates
    corpus = corpus_rows(lay)
    ids = {r["doc_id"] for r in corpus}
    texts: set[str] = set()
    named = set(heldout_sources(lay))
    per_set: dict[str, Any] = {}
    for name, ev in sorted(p.evaluations.items()):
        bset = load_set(lay.root / ev.folder, ev.rule, name=name)
        # an external set's ids are its own namespace (ImpliRet's d00000 is no corpus problem): its texts only
        t, m = set_texts(bset, ids), ([] if ev.role == "external" else member_ids(bset))
        texts.update(t)
        named.update(m)
        per_set[name] = {"texts": len(t), "query_and_gold_ids": len(m)}
    texts_sorted = sorted(texts)
    write_json(lay.out / "eval_texts.json", {"texts": texts_sorted})
    pairs = [(r["doc_id"], r["text"]) for r in corpus]
    counts: dict[str, Any] = {"active": cfg.active, "evaluation_texts": len(texts_sorted),
                              "named_ids": len(named), "sets": per_set}
    for v in ("v1", "v2"):
        ex = build_exclusion_list(pairs, texts_sorted, v, extra_ids=sorted(named))
        write_json(lay.out / f"exclusion_{v}.json", ex.to_json())
        by_reason: dict[str, int] = {}
        for reason in ex.reasons.values():
            by_reason[reason] = by_reason.get(reason, 0) + 1
        counts[v] = {"ids_excluded": len(ex.ids), "corpus_ids_excluded": len(set(ex.ids) & ids),
                     "text_hashes": len(ex.text_hashes), **{f"ids.{k}": n for k, n in sorted(by_reason.items())}}
    write_json(lay.metrics, counts)
    write_run_record(lay.out, "gates", {"gates": {"active": cfg.active}, "evaluations": {k: asdict(v) for k, v in
                                                                               sorted(p.evaluations.items())}},
                     {"corpus": lay.corpus / "corpus.parquet", "evalsets": lay.evalsets}, counts)
    return counts


main = stage("gates", PARAMS, reads=("corpus", "evalsets"), writes=("out", "metrics"))(run)
