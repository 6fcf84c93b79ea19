"""Stage ``mix@<arm>-<fraction>``: one arm retrained with replay rows mixed into its training
split, then scored on every declared evaluation (paper Appendix E, Table 19: mixing in data
space, V1's recipe).

One stage per (arm, fraction) of ``remedies.arms`` × ``remedies.replay_fractions``. Each seed
trains on the arm's own validated cell file (the same rows, gates and dev split as
``train@<arm>``) plus ``round(n_train · f / (1 − f))`` rows of ``remedies.replay_file`` drawn
with the seed, after the contamination gate (Appendix B); everything else is ``train`` as
the arm trains. The model lands in ``models/<arm>@mix<f>/``, its scores under the label
``<arm>@mix<f>`` in ``artifacts/eval/`` and ``metrics/eval/``, beside the arms' and soups',
and each (label, seed) is one MLflow run tagged ``mix_of``. Resumable per seed like ``train``.
"""

from __future__ import annotations

import math

import click

from recipematch.config import ReplayConfig
from recipematch.errors import RecipematchError
from recipematch.pipeline import evaluate as evaluate_stage
from recipematch.pipeline import train as train_stage
from recipematch.pipeline.door import StagePaths, arm_option, progress_option, stage
from recipematch.rules import mix_label

PARAMS = ("train", "mlflow", "gates", "evaluate", "evaluations", "remedies.arms", "remedies.replay_fractions",
          "remedies.replay_file")
RUNTIME = ("engine",)
#: the replay pair file is data the stage reads from a path a param names
DATA_DEPS: tuple[str, ...] = ("${remedies.replay_file}",)
#: the evaluation folders it reads (dvc.yaml lists them: recipematch.pipeline.deps): every declared set
EVAL_DEPS = "all"
#: read besides them: the held-out sources (artifacts/evalsets/heldout.json) the training gate excludes
KEEP_DEPS: tuple[str, ...] = ("artifacts/evalsets",)

fraction_option = click.option("--fraction", required=True,
                               help="A value of remedies.replay_fractions, as written there (it names the folders).")


def _fraction(text: str, allowed) -> float:
    try:
        f = float(text)
    except ValueError:
        raise RecipematchError(f"--fraction {text!r} is not a number") from None
    if math.isfinite(f) and text != str(f):  # the row's folder name is this text: one spelling per value
        raise RecipematchError(f"--fraction {text}: write it as {f} (the folders are named by the value as Python "
                               f"prints it; in params.yaml write remedies.replay_fractions values as decimals: 1.0, not 1)")
    if not math.isfinite(f) or not any(f == float(x) for x in allowed):
        raise RecipematchError(f"--fraction {text}: not one of remedies.replay_fractions {list(allowed)}")
    return f


def run(p, lay: StagePaths, arm: str, fraction: str, *, progress: bool = True, engine=None) -> dict:
    """Retrain ``arm`` with replay rows at ``fraction`` and score every seed.

    Returns:
        ``{"train": per-seed training summary, "eval": the label's metrics}``.

    Raises:
        RecipematchError: ``--arm`` not in ``remedies.arms``, ``--fraction`` not listed, the
            replay file missing or too small for the fraction (naming the key), or any error
            of the train and evaluate stages.
    """
    if arm not in p.remedies.arms:
        raise RecipematchError(f"--arm {arm!r}: not in remedies.arms {list(p.remedies.arms)}")
    f = _fraction(fraction, p.remedies.replay_fractions)
    label = mix_label(arm, fraction)
    replay = ReplayConfig(file=p.remedies.replay_file, fraction=f)
    summary = train_stage.run(p, lay, arm, progress=progress, engine=engine, label=label, replay_cfg=replay)
    scores = evaluate_stage.run(p, lay, label, progress=progress, engine=engine)
    return {"train": summary, "eval": scores}


main = stage("mix", PARAMS, arm_option, fraction_option, progress_option, runtime=RUNTIME,
             reads=("spec", "cells", "validated", "evalsets", "gates", "cache"), writes=("models", "train_metrics", "scratch", "eval", "eval_metrics"))(run)
