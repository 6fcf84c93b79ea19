"""Where a model's scored frame of one evaluation set lies, for the stages that read the
evaluate stages' outputs (stats, hits): ``<evals>/<model>/<set>.parquet`` (paper Section 3's
per-query ranks), with the error that names what to fix."""

from __future__ import annotations

from pathlib import Path

from recipematch.errors import RecipematchError, short_repr


def scored_frame(evals: Path, model: str, name: str) -> Path:
    """The per-query frame of ``model`` (an arm, a remedy label or a baseline) on set ``name``.

    Raises:
        RecipematchError: ``evals`` is no folder (a mistyped ``--evals``: the message names the
            option, not a stage); ``evals`` holds no folder of ``model`` (the message names the
            option and lists the folders it does hold, so a wrong folder is told from a model
            not yet scored); or the model's folder lacks the frame (rerun its evaluate stage).
    """
    if Path(evals).exists() and not Path(evals).is_dir():
        raise RecipematchError(f"--evals {evals}: a file, not the folder of evaluation folders; check the path the "
                               "stage's command passes (dvc.yaml cmd)")
    if not Path(evals).is_dir():
        raise RecipematchError(f"--evals {evals}: no such folder; check the path the stage's command passes "
                               "(dvc.yaml cmd), or run the evaluate stages first (`dvc repro`)")
    if (Path(evals) / model).exists() and not (Path(evals) / model).is_dir():
        raise RecipematchError(f"--evals {evals}: {model!r} is a file, not the evaluation folder of {model!r}; move it "
                               f"aside and rerun the evaluate stage of {model!r}")
    if (Path(evals) / model).is_symlink() and not (Path(evals) / model).exists():
        raise RecipematchError(f"--evals {evals}: {model!r} is a symlink to nothing; remove it and rerun the evaluate "
                               f"stage of {model!r}")
    if not (Path(evals) / model).is_dir():
        held = sorted(f.name for f in Path(evals).iterdir() if f.is_dir())
        shown = ", ".join(short_repr(h, 40) for h in held[:12]) + (f" and {len(held) - 12} more" if len(held) > 12 else "")
        raise RecipematchError(f"--evals {evals}: no folder {model!r} (it holds {shown or 'no folders'}); check the "
                               f"path the stage's command passes (dvc.yaml cmd), or rerun the evaluate stage of {model!r}")
    path = Path(evals) / model / f"{name}.parquet"
    if path.is_dir():
        raise RecipematchError(f"{path} is a folder, not a scored frame: rerun the evaluate stage of {model!r}")
    if not path.exists():
        raise RecipematchError(f"{path} does not exist: rerun the evaluate stage of {model!r}")
    return path
