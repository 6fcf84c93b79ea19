"""Stage ``verified``: computer-algebra pairs (paper Appendix A) for every corpus problem not
on the active exclusion list; each problem in a worker process with time and memory limits;
resumable."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from recipematch import cas
from recipematch.io import read_jsonl_strict, sha256_text, sha256_tree, write_json, write_jsonl
from recipematch.pairs import cas_rows_to_pairs, sort_rows
from recipematch.pipeline.door import StagePaths, progress_option, stage, write_run_record
from recipematch.depth import paraphrase_depth
from recipematch.pipeline.inputs import corpus_rows, load_exclusion

PARAMS = ("seed", "cas", "gates.active")


def run(p, lay: StagePaths, *, progress: bool = True) -> dict:
    """Stage 4a: computer-algebra (verified) pairs."""
    import sympy

    cfg = p.cas
    seed = p.seed
    ex, ex_path = load_exclusion(lay, p.gates.active)
    corpus = corpus_rows(lay)
    excluded = set(ex.ids)
    problems = [(r["doc_id"], r["text"]) for r in corpus if r["doc_id"] not in excluded]
    lay.out.mkdir(parents=True, exist_ok=True)
    # the resumable journal and the timings live outside the DVC output (they depend on
    # completion order and wall time); the final, sorted outcomes file is copied in
    # keyed by the generator's source: a journal written by other code is never resumed
    # (records carry the version string only, which an edit need not change)

    code = sha256_text(sha256_tree(Path(cas.__file__).parent))[:16]
    work = lay.scratch / code
    work.mkdir(parents=True, exist_ok=True)
    summary = cas.run_generator(problems, out_path=work / "outcomes.jsonl", seed=seed, timeout_s=cfg.timeout_s,
                                memory_mb=cfg.memory_mb, workers=cfg.workers, progress=progress)
    import shutil

    shutil.copyfile(work / "outcomes.jsonl", lay.out / "outcomes.jsonl")
    texts = dict(problems)
    model_id = f"sympy=={sympy.__version__};recipematch-cas={cas.GENERATOR_VERSION}"
    rows, failures = [], []
    outcomes = read_jsonl_strict(lay.out / "outcomes.jsonl")
    for o in outcomes:
        if o["source_id"] not in texts:
            continue
        if o.get("status") != "ok":
            failures.append({"source_id": o["source_id"], "status": o.get("status"), "reason": o.get("reason")})
        rows.extend(cas_rows_to_pairs(o, texts[o["source_id"]], model_id=model_id))
    rows = sort_rows(rows)
    lay.pair_file.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(lay.pair_file, rows)
    write_jsonl(lay.out / "failures.jsonl", sorted(failures, key=lambda f: f["source_id"]))
    srcs = {r["source_id"] for r in rows}
    counts = {"paraphrase_depth_char3_jaccard": paraphrase_depth(rows), "problems": len(problems),
              "skipped_excluded": len(corpus) - len(problems), "rows": len(rows),
              "sources_with_rows": len(srcs),
              "sources_with_negative": len({r["source_id"] for r in rows if r["negatives"]}),
              "negatives": sum(len(r["negatives"]) for r in rows),
              "families": {f: sum(1 for r in rows if r["positive_provenance"]["transform_family"] == f)
                           for f in sorted({r["positive_provenance"]["transform_family"] for r in rows})},
              "generator": {k: v for k, v in summary.items() if k not in ("census", "resumed") and not k.endswith("_path")},
              "census": summary.get("census", {})}
    write_json(lay.metrics, counts)
    write_run_record(lay.out, "verified", {**asdict(cfg), "seed": seed, "generator_version": cas.GENERATOR_VERSION},
                     {"corpus": lay.corpus / "corpus.parquet", "exclusion": ex_path}, counts)
    # problems taken from an earlier, interrupted run: a fact of this run, kept out of
    # every DVC output so a resumed run and a fresh one hash the same
    this_run = {"resumed": summary.get("resumed")}
    write_json(work / "this_run.json", this_run)
    return {**counts, "this_run": this_run}


main = stage("verified", PARAMS, progress_option, reads=("corpus", "gates"), writes=("out", "pair_file", "scratch", "metrics"))(run)
