"""Readers of other stages' outputs, shared by several stages."""

from __future__ import annotations

import logging
from pathlib import Path

from recipematch.errors import RecipematchError
from recipematch.io import read_json
from recipematch.pipeline.door import Layout

log = logging.getLogger("recipematch")

#: The release files the replay recordings are built from (prompt → file in data/peer_release).
RELEASE_FILES = {"d1_recipe": "pairs_d1_recipe.jsonl", "d4_restatement": "pairs_d4_unrelated.jsonl"}



def train_seeds(seed: int, n_seeds: int) -> list[int]:
    """Training seeds ``seed, seed+1, …`` (``n_seeds`` of them; the paper: 42–49)."""
    return [seed + i for i in range(n_seeds)]


def corpus_rows(lay: Layout) -> list[dict]:
    """The corpus stage's rows ``{doc_id, text, ...}``."""
    from recipematch.corpus import read_corpus

    return read_corpus(lay.corpus / "corpus.parquet").to_dict("records")


def load_exclusion(lay: Layout, active: str):
    """The active exclusion list and its path."""
    from recipematch.gates import ExclusionList

    path = lay.gates / f"exclusion_{active}.json"
    return ExclusionList.from_json(read_json(path)), path


def heldout_sources(lay: Layout) -> list[str]:
    return list(read_json(lay.evalsets / "heldout.json")["heldout_sources"])


def arm_spec_from_file(lay: Layout, arm: str):
    """The cell spec the specs stage wrote for ``arm``."""
    from recipematch.rules import CellSpec

    path = lay.specs(arm)
    if not path.exists():
        raise RecipematchError(f"{path} does not exist: is {arm!r} in params.yaml arms? (run the specs stage)")
    d = read_json(path)
    return CellSpec(d["positives"], d["negatives"], d["volume"])


def read_pairs(lay: Layout, key: str) -> list[dict] | None:
    """A pair file by key (``None`` when this configuration does not produce it); every row
    checked (a malformed row names file, line and field)."""
    from recipematch.pairs import read_pair_file

    path = lay.pairs / f"{key}.jsonl"
    return read_pair_file(path) if path.exists() else None


def mlflow_uri(tracking_uri: str, lay: Layout) -> str:
    """A relative ``sqlite:///`` path resolved against the project root."""
    if tracking_uri.startswith("sqlite:///") and not tracking_uri.startswith("sqlite:////"):
        return "sqlite:///" + str((lay.root / tracking_uri[len("sqlite:///"):]).resolve())
    return tracking_uri


def mlflow_artifacts(lay: Layout) -> str:
    """Where MLflow runs of this project keep their artifacts (``mlruns/`` of the root)."""
    return (lay.root / "mlruns").resolve().as_uri()


def git_rev(root: Path) -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
