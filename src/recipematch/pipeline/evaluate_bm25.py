"""Stage ``evaluate_bm25``: the BM25 baseline (bm25s; paper Appendix A: k1 1.5, b 0.75) on every
declared evaluation."""

from __future__ import annotations

from recipematch.pipeline.door import StagePaths, stage
from recipematch.pipeline.evaluate import load_evaluations, load_graded, score_models, write_results

PARAMS = ("evaluate.ks", "evaluate.bm25_k1", "evaluate.bm25_b", "evaluations")
#: the evaluation folders it reads (dvc.yaml lists them: recipematch.pipeline.deps): every declared set
EVAL_DEPS = "all"


def run(p, lay: StagePaths) -> dict:
    """Stage 8: score BM25 on every declared evaluation."""
    from recipematch.scoring import BM25  # lazy: recipematch.scoring pulls in pandas, torch

    e = p.evaluate
    sets = load_evaluations(p, lay)
    graded = load_graded(p, lay, sets)  # every graded check before any model
    frames, per_model = score_models([("bm25", BM25, None)], sets, arm="bm25", ks=e.ks, lay=lay,
                                     bm25=(e.bm25_k1, e.bm25_b), graded=graded)
    return write_results(lay, "bm25", frames, per_model, ks=e.ks)


main = stage("evaluate_bm25", PARAMS,
             reads=("cache",), writes=("eval", "eval_metrics"))(run)
