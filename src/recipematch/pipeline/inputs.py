"""Readers of other stages' outputs, shared by several stages."""

from __future__ import annotations

import logging
from pathlib import Path

from recipematch.errors import RecipematchError
from recipematch.gates import ExclusionList
from recipematch.io import canonical_json, read_json, sha256_text
from recipematch.pairs import read_pair_file
from recipematch.pipeline.door import StagePaths
from recipematch.rules import CellSpec

log = logging.getLogger("recipematch")



def train_seeds(seed: int, n_seeds: int) -> list[int]:
    """Training seeds ``seed, seed+1, …`` (``n_seeds`` of them; the paper: 42–49)."""
    return [seed + i for i in range(n_seeds)]


def corpus_rows(lay: StagePaths) -> list[dict]:
    """The corpus stage's rows ``{doc_id, text, ...}``."""
    from recipematch.corpus import read_corpus  # lazy: recipematch.corpus pulls in pandas

    return read_corpus(lay.corpus / "corpus.parquet").to_dict("records")


def load_exclusion(lay: StagePaths, active: str):
    """The active exclusion list and its path."""
    path = lay.gates / f"exclusion_{active}.json"
    return ExclusionList.from_json(read_json(path)), path


def heldout_sources(lay: StagePaths) -> list[str]:
    return list(read_json(lay.evalsets / "heldout.json")["heldout_sources"])


def arm_spec_from_file(lay, arm: str):
    """The cell spec the specs stage wrote for ``arm`` (the stage's ``--spec`` file)."""
    path = lay.spec
    if not path.exists():
        raise RecipematchError(f"{path} does not exist: is {arm!r} in params.yaml arms? (run the specs stage)")
    d = read_json(path)
    return CellSpec(d["positives"], d["negatives"], d["volume"])


def pair_path(folder: Path, key: str) -> Path:
    """Pair file ``key`` in a folder of pair files: ``<key>.jsonl``, the name ``dvc.yaml`` gives
    each writer's ``--pair-file`` (and judge2's ``--cells-file``); readers find a file by key so."""
    return Path(folder) / f"{key}.jsonl"


def read_pairs(lay: StagePaths, key: str) -> list[dict] | None:
    """A pair file by key (``None`` when this configuration does not produce it); every row
    checked (a malformed row names file, line and field)."""
    path = pair_path(lay.pairs, key)
    return read_pair_file(path) if path.exists() else None


def project_root(root: Path) -> Path:
    """The project a stage belongs to. ``dvc exp run --temp`` / ``--queue`` run stages in a
    copy under ``<project>/.dvc/tmp/exps/``; tracking must land in the project itself, or
    the experiment's MLflow runs are lost with the copy."""
    parts = Path(root).resolve().parts
    for i in range(len(parts) - 3):
        if parts[i:i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    return Path(root).resolve()


def mlflow_uri(tracking_uri: str, root: Path) -> str:
    """A relative ``sqlite:///`` path resolved against the project root (the real project,
    also for a stage running in a ``dvc exp`` temporary copy: :func:`project_root`)."""
    if tracking_uri.startswith("sqlite:///") and not tracking_uri.startswith("sqlite:////"):
        return "sqlite:///" + str((project_root(root) / tracking_uri[len("sqlite:///"):]).resolve())
    return tracking_uri


def run_tags(p_declared: dict) -> dict[str, str]:
    """Tags that tell runs of different experiments apart in MLflow: the DVC experiment's
    name (``DVC_EXP_NAME``, set by ``dvc exp run``) and a hash of the params the stage read."""
    import os

    return {"dvc_exp": os.environ.get("DVC_EXP_NAME", ""),
            "params_sha256": sha256_text(canonical_json(p_declared))[:16]}


def mlflow_artifacts(root: Path) -> str:
    """Where MLflow runs of this project keep their artifacts (``mlruns/`` of the project)."""
    return (project_root(root) / "mlruns").resolve().as_uri()


def git_rev(root: Path) -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
