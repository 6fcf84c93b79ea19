"""Stage ``evaluate_base``: the untrained base model on every declared evaluation (the base
row of paper Table 1)."""

from __future__ import annotations

from recipematch.pipeline.door import StagePaths, check_device, progress_option, stage
from recipematch.pipeline.evaluate import encoder_for, load_evaluations, load_graded, score_models, write_results
from recipematch.pipeline.models import resolve_model

PARAMS = ("train.model", "evaluate", "evaluations")
#: the evaluation folders it reads (dvc.yaml lists them: recipematch.pipeline.deps): every declared set
EVAL_DEPS = "all"


def run(p, lay: StagePaths, *, progress: bool = True) -> dict:
    """Stage 8: score the untrained base model."""
    check_device("devices.evaluate", p.devices.evaluate)
    sets = load_evaluations(p, lay)
    graded = load_graded(p, lay, sets)  # every graded check before any model
    models = [("base", encoder_for(resolve_model(p.train.model), p), None)]
    frames, per_model = score_models(models, sets, arm="base", ks=p.evaluate.ks, lay=lay,
                                     graded=graded)
    return write_results(lay, "base", frames, per_model, ks=p.evaluate.ks)


main = stage("evaluate_base", PARAMS, progress_option,
             reads=("cache",), writes=("eval", "eval_metrics"))(run)
