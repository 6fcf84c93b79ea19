"""A params file checked whole, as ``recipematch params --check`` checks it: every key, type
and bound (the stage door's :func:`~recipematch.pipeline.door.check_params_file`), then what
needs more than the file. Its own module so that no stage imports it (stages check params at
their door): ``deps --write`` and the CLI do.
"""

from __future__ import annotations

from pathlib import Path

from recipematch.config import check_arm_inputs, check_regen_targets
from recipematch.errors import RecipematchError
from recipematch.graded import check_declared_measures
from recipematch.pipeline.backtranslate import check_model_dep
from recipematch.pipeline.door import check_params_file
from recipematch.pipeline.models import check_lengths


def check_params_whole(path: Path):
    """What ``recipematch params --check`` checks (and ``deps --write`` before it writes): every
    key (:func:`check_params_file`), then what needs more than the file: each arm's inputs, each
    regen entry's benchmark, the declared graded measures, the sequence lengths the models allow
    and a translation model folder ``dvc.yaml`` hashes.

    Raises:
        RecipematchError: naming the file.
    """
    if not Path(path).is_file():
        raise RecipematchError(f"parameters file {path} is not a file")
    p = check_params_file(path)
    try:
        check_arm_inputs(p)
        check_regen_targets(p)
        check_declared_measures(p)
        check_lengths(p)
        project = next((d for d in Path(path).resolve().parents if (d / "dvc.yaml").is_file()), None)
        if project is not None:  # the project the file lies in (``configs/p.yaml`` too)
            check_model_dep(project, p.backtranslate.model_dir)
    except RecipematchError as e:  # the file is named as the schema check names it
        raise RecipematchError(f"{path}: {e}") from None
    return p
