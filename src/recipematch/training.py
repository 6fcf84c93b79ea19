"""Contrastive training of one (arm, seed) (the paper: Section 3, Eq. 1 and Table 2).

``SentenceTransformerTrainer`` with ``CachedMultipleNegativesRankingLoss`` (scale 20,
gradient caching with a mini-batch), the ``NO_DUPLICATES`` batch sampler (never two examples
sharing any text in one batch), warm-up, ``drop_last``, the dev split scored every
``eval_steps`` steps by triplet accuracy on up to ``max_dev_triplets`` dev triplets and the
best checkpoint restored at the end.

Examples (the paper, Section 3 and Appendix A): a row with k ≥ 1 negatives gives k triplets ``(anchor, positive,
negative_i)``; a row with none gives one pair ``(anchor, positive)``. When a cell has both
kinds, they train as two datasets (the trainer draws each batch from one of them).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainSettings:
    """How one seed trains (paper Section 3, Table 2, Eq. 1). The stage builds it from
    ``params.yaml`` ``train``; the library never sees the params mapping.

    Attributes:
        lr: learning rate (> 0; paper 2e-5).
        epochs: passes over the training split (≥ 1; paper 3).
        batch_size: examples per batch (≥ 1; paper 256), also the dev scoring batch.
        mini_batch_size: gradient-cache mini-batch (≥ 1; paper 16).
        scale: contrastive loss scale (> 0; paper 20).
        warmup_ratio: share of steps warmed up, in [0, 1) (paper 0.05).
        max_seq_length: tokens per text (≥ 1).
        eval_steps: steps between dev evaluations (≥ 1; paper 100).
        max_dev_triplets: dev triplets scored (≥ 1; paper 2,000).
        device: ``cpu``, ``cuda`` or ``mps``.
        bf16: bf16 mixed precision.
    """

    lr: float
    epochs: int
    batch_size: int
    mini_batch_size: int
    scale: float
    warmup_ratio: float
    max_seq_length: int
    eval_steps: int
    max_dev_triplets: int
    device: str
    bf16: bool

    @classmethod
    def pick(cls, obj: Any) -> "TrainSettings":
        """The fields of this class read off any object that has them (the params section)."""
        import dataclasses

        return cls(**{f.name: getattr(obj, f.name) for f in dataclasses.fields(cls)})


def training_examples(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Split rows into triplet columns and pair columns (a row weighs ``max(k, 1)`` examples,
    Appendix A)."""
    trip = {"anchor": [], "positive": [], "negative": []}
    pair = {"anchor": [], "positive": []}
    for r in rows:
        negs = r.get("negatives") or []
        if negs:
            for n in negs:
                trip["anchor"].append(r["anchor"])
                trip["positive"].append(r["positive"])
                trip["negative"].append(n["text"])
        else:
            pair["anchor"].append(r["anchor"])
            pair["positive"].append(r["positive"])
    return trip, pair


def dev_triplets(rows: Sequence[Mapping[str, Any]], *, seed: int, limit: int,
                 fallback: Sequence[Mapping[str, Any]] = ()) -> dict[str, list[str]]:
    """Dev triplets for checkpoint selection (Table 2: up to 2,000).

    A dev row's own negatives are used; a row without negatives takes as negative the
    positive of another source, drawn with ``seed`` from the other dev rows and ``fallback``
    (the cell's train rows), so positives-only cells and a single dev source still get a dev
    score. The list is cut at ``limit`` after a seeded shuffle.
    """
    rng = np.random.default_rng(seed)
    trip = {"anchor": [], "positive": [], "negative": []}
    pool = [*rows, *fallback]
    srcs = [r["source_id"] for r in pool]
    for i, r in enumerate(rows):
        negs = [n["text"] for n in r.get("negatives") or []]
        if not negs:
            others = [j for j, s in enumerate(srcs) if s != r["source_id"]]
            if not others:
                continue
            negs = [pool[int(rng.choice(others))]["positive"]]
        for n in negs:
            trip["anchor"].append(r["anchor"])
            trip["positive"].append(r["positive"])
            trip["negative"].append(n)
    n = len(trip["anchor"])
    if n > limit:
        keep = np.sort(rng.permutation(n)[:limit])
        trip = {k: [v[i] for i in keep] for k, v in trip.items()}
    return trip


def no_duplicates_report(dataset, batch_size: int, seed: int) -> dict[str, int]:
    """What the NO_DUPLICATES sampler really yields for one epoch.

    When many rows share an anchor (one row per negative), one pass can fill fewer batches
    than the sampler's ``len()`` promises; sentence-transformers then re-draws samples. This
    counts the advertised and yielded batches, the examples never placed in the first epoch
    (``examples_dropped``) and re-drawn repeats, so the loss of data is logged, not silent.
    """
    from sentence_transformers.sampler import NoDuplicatesBatchSampler

    import torch

    sampler = NoDuplicatesBatchSampler(dataset, batch_size=batch_size, drop_last=True, generator=torch.Generator(), seed=seed)
    advertised = len(sampler)
    batches = list(iter(sampler))
    flat = [i for b in batches for i in b]
    covered = set(flat)
    return {"examples": len(dataset), "batches_advertised": advertised, "batches_yielded": len(batches),
            "examples_dropped": len(dataset) - len(covered), "examples_repeated": len(flat) - len(covered)}


#: Prefix of the temporary folders that hold a run's intermediate checkpoints.
TMP_PREFIX = "rm-train-"
#: Files a model save may write that hold wall-clock times or other run-to-run noise; a
#: checkpoint folder never keeps them (the model card: training times, dates).
NONDETERMINISTIC_FILES = ("README.md",)


def clear_stale_work(work_dir: Path) -> list[Path]:
    """Remove what a killed run left in ``work_dir`` (its ``rm-train-*`` folders) and create
    ``work_dir``; returns the removed paths.

    ``work_dir`` must belong to one (arm, seed) alone: a run still going in another folder is
    never touched.
    """
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    stale = sorted(p for p in work_dir.glob(f"{TMP_PREFIX}*") if p.is_dir())
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
        log.info("removed %s, left by a training run that was killed", p)
    return stale


def save_checkpoint(model, out_dir: Path) -> None:
    """Save a sentence-transformers model to ``out_dir`` (replaced) with deterministic bytes.

    No model card is written (sentence-transformers' ``README.md`` records wall-clock
    training times, so identical weights would hash differently on every retrain), and any
    file of :data:`NONDETERMINISTIC_FILES` is removed: two saves of identical weights give
    identical folders (:func:`recipematch.io.sha256_tree`). Weights are safetensors.
    """
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    model.save(str(out_dir), create_model_card=False, safe_serialization=True)
    for name in NONDETERMINISTIC_FILES:
        for f in out_dir.rglob(name):
            f.unlink()


def train_one(rows: Sequence[Mapping[str, Any]], *, base_model: str, out_dir: Path, seed: int, cfg: TrainSettings,
              progress: bool = True, work_dir: Path | None = None) -> dict[str, Any]:
    """Train one checkpoint and save it to ``out_dir``.

    Args:
        rows: budgeted, validated rows with ``split`` in {train, dev}.
        base_model: local path of the base sentence-transformers model.
        out_dir: where the chosen checkpoint is saved (overwritten, see :func:`save_checkpoint`).
        seed: training seed (model init of heads, shuffling, sampler).
        cfg: training hyper-parameters.
        work_dir: folder for intermediate checkpoints, one per (arm, seed); leftovers of a
            killed run there are removed first (:func:`clear_stale_work`). ``None``: the
            system temporary folder.

    Returns:
        A record with example counts, steps, sampler report, dev scores (before/best) and
        the training loss history.

    Raises:
        ValueError: fewer training examples than one batch (nothing to train on), or no
        dev triplets.
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from datasets import Dataset, DatasetDict
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.evaluation import TripletEvaluator
    from sentence_transformers.losses import CachedMultipleNegativesRankingLoss
    from sentence_transformers.training_args import BatchSamplers
    from transformers.trainer_callback import TrainerCallback
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.manual_seed(seed)
    train_rows = [r for r in rows if r.get("split") == "train"]
    dev_rows = [r for r in rows if r.get("split") == "dev"]
    trip, pair = training_examples(train_rows)
    datasets = {}
    if trip["anchor"]:
        datasets["triplets"] = Dataset.from_dict(trip)
    if pair["anchor"]:
        datasets["pairs"] = Dataset.from_dict(pair)
    n_train = sum(len(d) for d in datasets.values())
    if n_train < cfg.batch_size:
        raise ValueError(f"{n_train} training examples, fewer than one batch of {cfg.batch_size}: raise budget.rows or lower train.batch_size")
    dev = dev_triplets(dev_rows, seed=seed, limit=cfg.max_dev_triplets, fallback=train_rows)
    if not dev["anchor"]:
        raise ValueError("no dev triplets: the dev split is empty")

    sampler_reports = {name: no_duplicates_report(ds, cfg.batch_size, seed) for name, ds in datasets.items()}
    if not any(r["batches_yielded"] for r in sampler_reports.values()):
        raise ValueError(f"the NO_DUPLICATES sampler cannot form one batch of {cfg.batch_size} examples without a "
                         f"repeated text ({sampler_reports}); too few distinct anchors: raise budget.rows, lower "
                         "train.batch_size or cap budget.max_rows_per_source")
    model = SentenceTransformer(base_model, device=cfg.device)
    model.max_seq_length = cfg.max_seq_length
    loss = CachedMultipleNegativesRankingLoss(model, scale=cfg.scale, mini_batch_size=cfg.mini_batch_size)
    evaluator = TripletEvaluator(dev["anchor"], dev["positive"], dev["negative"], name="dev", batch_size=cfg.batch_size,
                                 write_csv=False)
    before = evaluator(model)
    steps_per_epoch = sum(r["batches_advertised"] for r in sampler_reports.values())
    total_steps = max(1, steps_per_epoch * cfg.epochs)
    eval_steps = max(1, min(cfg.eval_steps, total_steps))
    history: list[dict[str, float]] = []

    class _History(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):  # noqa: D401
            if logs:
                history.append({"step": int(state.global_step), **{k: float(v) for k, v in logs.items()
                                                                  if isinstance(v, (int, float))}})

    # intermediate checkpoints live outside the DVC output folder (a kill must not leave
    # them inside it); ``work_dir`` (one per arm and seed) defaults to the system temporary
    # folder. What a killed run of this (arm, seed) left there is removed first.
    if work_dir is not None:
        clear_stale_work(work_dir)
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=work_dir))
    try:
        args = SentenceTransformerTrainingArguments(
            output_dir=str(tmp), num_train_epochs=cfg.epochs, per_device_train_batch_size=cfg.batch_size,
            per_device_eval_batch_size=cfg.batch_size, learning_rate=cfg.lr, warmup_steps=float(cfg.warmup_ratio),
            seed=seed, data_seed=seed, batch_sampler=BatchSamplers.NO_DUPLICATES, dataloader_drop_last=True,
            eval_strategy="steps", eval_steps=eval_steps, save_strategy="steps", save_steps=eval_steps,
            save_total_limit=2, load_best_model_at_end=True, metric_for_best_model="eval_dev_cosine_accuracy",
            greater_is_better=True, logging_steps=max(1, eval_steps // 2), use_cpu=cfg.device == "cpu", bf16=cfg.bf16, report_to="none",
            disable_tqdm=not progress, save_only_model=True,
        )
        train_ds = datasets if len(datasets) > 1 else next(iter(datasets.values()))
        trainer = SentenceTransformerTrainer(
            model=model, args=args, train_dataset=DatasetDict(train_ds) if isinstance(train_ds, dict) else train_ds,
            loss={k: loss for k in datasets} if len(datasets) > 1 else loss, evaluator=evaluator,
            callbacks=[_History()],
        )
        result = trainer.train()
        best = evaluator(model)
        save_checkpoint(model, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if int(result.global_step) == 0:
        raise ValueError("training ran 0 optimisation steps; the checkpoint would be the base model")
    return {
        "seed": seed, "train_examples": n_train, "train_rows": len(train_rows), "dev_rows": len(dev_rows),
        "dev_triplets": len(dev["anchor"]), "steps": int(result.global_step), "eval_steps": eval_steps,
        "sampler": sampler_reports, "dev_accuracy_before": float(before.get("dev_cosine_accuracy", math.nan)),
        "dev_accuracy_best": float(best.get("dev_cosine_accuracy", math.nan)),
        "train_loss": float(result.training_loss), "history": history, "config": asdict(cfg),
    }
