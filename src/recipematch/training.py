"""Contrastive training of one (arm, seed) (the paper: Section 3, Eq. 1 and Table 2).

``SentenceTransformerTrainer`` with the in-batch contrastive loss of Eq. 1 at scale 20:
``CachedMultipleNegativesRankingLoss`` (gradient caching) when the mini-batch is smaller than
the batch, else plain ``MultipleNegativesRankingLoss`` (:func:`contrastive_loss`: the same
loss and gradient without the cache's extra forward pass), the ``NO_DUPLICATES`` batch sampler (never two examples
sharing any text in one batch), warm-up, ``drop_last``, the dev split scored every
``eval_steps`` steps by triplet accuracy on up to ``max_dev_triplets`` dev triplets and the
best checkpoint restored at the end.

Examples (the paper, Section 3 and Appendix A): a row with k ≥ 1 negatives gives k triplets ``(anchor, positive,
negative_i)``; a row with none gives one pair ``(anchor, positive)``. When a cell has both
kinds, they train as two datasets (the trainer draws each batch from one of them).

Training variants (Table 2, Appendix E, Table 19), all off unless the settings ask for them:
LoRA adapters instead of all weights (peft; its own learning rate; gradient checkpointing),
a query instruction prefixed to every anchor (V2), and replay rows mixed into the training
split (:func:`mix_replay`). WiSE-FT soups of a trained checkpoint: :mod:`recipematch.soups`.
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

from recipematch.errors import RecipematchError
from recipematch.io import sha256_file
from recipematch.pairs import read_pair_file


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapters in place of full fine-tuning (paper Table 2: the 4B replication uses
    rank 16 and a 1e-4 learning rate).

    Attributes:
        rank: adapter rank r (≥ 1).
        alpha: ``lora_alpha``; the update is scaled by ``alpha / rank`` (> 0).
        dropout: dropout on the adapter input, in [0, 1).
        target_modules: module names that get adapters (empty: peft's default for the
            architecture, e.g. the attention query and value projections).
        lr: learning rate used instead of :attr:`TrainSettings.lr` (> 0).
    """

    rank: int
    alpha: float
    dropout: float
    target_modules: tuple[str, ...]
    lr: float


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
        gradient_checkpointing: recompute activations in the backward pass (Table 2: the 4B
            LoRA run).
        lora: LoRA adapters (:class:`LoraSettings`); ``None`` trains all weights.
        query_instruction: text prefixed to every anchor, in training and dev scoring
            (Appendix E: V2's instruction); ``""`` prefixes nothing.
        max_steps: train exactly this many optimiser steps, cutting ``epochs`` short or
            cycling the data past it (Appendix D: the step-matched SABER summary arm, retrained
            at the document arm's 57 steps); 0 trains ``epochs`` passes.

    The last four default to "off"; with them off a run is the full fine-tuning of Table 2,
    and :meth:`identity` is what it was before they existed.
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
    gradient_checkpointing: bool = False
    lora: LoraSettings | None = None
    query_instruction: str = ""
    max_steps: int = 0

    #: the variant fields and their "off" values
    VARIANTS_OFF = {"gradient_checkpointing": False, "lora": None, "query_instruction": "", "max_steps": 0}

    @classmethod
    def pick(cls, obj: Any, device: str = "cpu") -> "TrainSettings":
        """The fields of this class read off any object that has them (the params section
        ``train``), with ``device`` where it runs (params ``devices.train``); ``obj.lora`` (with ``enabled``, ``rank``, ``alpha``, ``dropout``,
        ``target_modules``, ``lr``) becomes a :class:`LoraSettings` when enabled. Variant fields
        the object lacks stay off."""
        import dataclasses

        kw = {f.name: getattr(obj, f.name) for f in dataclasses.fields(cls)
              if f.name not in cls.VARIANTS_OFF and f.name != "device"}
        kw["device"] = device
        kw["gradient_checkpointing"] = bool(getattr(obj, "gradient_checkpointing", False))
        kw["query_instruction"] = str(getattr(obj, "query_instruction", ""))
        kw["max_steps"] = int(getattr(obj, "max_steps", 0))
        lo = getattr(obj, "lora", None)
        if lo is not None and lo.enabled:
            kw["lora"] = LoraSettings(rank=int(lo.rank), alpha=float(lo.alpha), dropout=float(lo.dropout),
                                      target_modules=tuple(lo.target_modules), lr=float(lo.lr))
        return cls(**kw)

    def identity(self) -> dict[str, Any]:
        """The settings as a plain mapping, variant fields left out while they are off (so a
        run that uses no variant keeps the identity and record it had before they existed)."""
        d = asdict(self)
        return {k: v for k, v in d.items() if not (k in self.VARIANTS_OFF and getattr(self, k) == self.VARIANTS_OFF[k])}

    def mlflow_params(self) -> dict[str, Any]:
        """Flat ``{name: value}`` of every setting, variants included even when off (what a
        run shows in MLflow: ``lora.enabled``, ``lora.rank``, ..., ``query_instruction``)."""
        d = {k: v for k, v in asdict(self).items() if k != "lora"}
        d["lora.enabled"] = self.lora is not None
        if self.lora is not None:
            d.update({f"lora.{k}": (",".join(v) if isinstance(v, tuple) else v) for k, v in asdict(self.lora).items()})
        return d

    @property
    def learning_rate(self) -> float:
        """The learning rate in force: :attr:`LoraSettings.lr` under LoRA, else :attr:`lr`."""
        return self.lora.lr if self.lora is not None else self.lr


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


def with_instruction(columns: Mapping[str, Sequence[str]], instruction: str) -> dict[str, list[str]]:
    """``columns`` with ``instruction`` prefixed to every ``anchor`` (the queries; positives and
    negatives are documents and stay as they are). Appendix E: V2 attaches its instruction to
    queries; the prefix is the same string concatenation sentence-transformers applies for a
    ``prompt`` at encoding time, so training and scoring see identical query texts."""
    out = {k: list(v) for k, v in columns.items()}
    if instruction and "anchor" in out:
        out["anchor"] = [instruction + a for a in out["anchor"]]
    return out


def mix_replay(rows: Sequence[Mapping[str, Any]], replay_rows: Sequence[Mapping[str, Any]], *, fraction: float,
               seed: int, source: str = "the replay file") -> tuple[list[dict[str, Any]], int]:
    """Mix general pairs into a cell's training split (Appendix E, Table 19: V1 and V2 train
    on verified pairs plus problem-to-solution replay rows).

    ``n = round(n_train · fraction / (1 − fraction))`` rows are drawn without replacement from
    ``replay_rows`` with ``numpy.random.default_rng(seed)``, kept in file order and appended
    with ``split = "train"`` and ``replay = True``, so replay rows make up ``fraction`` of the
    mixed training split; the dev split (checkpoint selection) is untouched. The same inputs
    and seed give the same rows.

    Args:
        rows: cell rows with ``split`` in {train, dev}.
        replay_rows: pair rows (``source_id``, ``anchor``, ``positive``, ``negatives``), already
            through the contamination gate.
        fraction: share of the mixed training split, in [0, 1); 0 returns ``rows`` unchanged.
        seed: the training seed.
        source: names the replay file in errors.

    Returns:
        ``(mixed rows, replay rows added)``.

    Raises:
        RecipematchError: ``fraction`` outside [0, 1), or ``source`` holds fewer rows than the
            mix needs.
    """
    if not 0.0 <= fraction < 1.0:
        raise RecipematchError(f"train.replay.fraction must lie in [0, 1), got {fraction!r}")
    out = [dict(r) for r in rows]
    if fraction == 0.0:
        return out, 0
    n_train = sum(1 for r in rows if r.get("split") == "train")
    n = int(round(n_train * fraction / (1.0 - fraction)))
    if n > len(replay_rows):
        raise RecipematchError(f"train.replay.fraction={fraction}: {n} replay rows are needed for {n_train} training "
                               f"rows, but {source} has {len(replay_rows)} usable rows (after the contamination "
                               f"gate); lower the fraction or give a larger file")
    keep = np.sort(np.random.default_rng(seed).choice(len(replay_rows), size=n, replace=False))
    out += [{**replay_rows[int(i)], "split": "train", "replay": True} for i in keep]
    return out, n


@dataclass(frozen=True)
class ReplayPool:
    """The general pairs a run may mix in (:func:`mix_replay`): the rows of the replay file
    that pass the contamination gate, the file's SHA-256 and the gate's drop counts."""

    path: str
    sha256: str
    rows: tuple[dict[str, Any], ...]
    gate_counts: dict[str, int]

    @classmethod
    def load(cls, path: str | os.PathLike, gate, *, key: str = "train.replay.file") -> "ReplayPool":
        """Read a JSONL pair file (:func:`recipematch.pairs.read_pair_file`) and pass its rows
        through ``gate`` (an object with ``apply(rows) -> (rows, counts, drops)``, the one
        contamination gate of Appendix B: replay rows must not touch evaluation data either).

        Raises:
            RecipematchError: the file is missing (naming ``key``) or a line is not a pair row.
        """
        path = Path(path)
        if not path.is_file():
            raise RecipematchError(f"{key}: {path} does not exist (a JSONL pair file of general pairs)")
        rows, counts, _ = gate.apply(read_pair_file(path))
        return cls(str(path), sha256_file(path), tuple(rows), dict(counts))


def add_lora(model, lora: LoraSettings) -> None:
    """Put LoRA adapters (peft) on a sentence-transformers model in place: only the adapter
    weights train from then on, and :func:`save_checkpoint` saves only them (the folder
    reloads with ``SentenceTransformer(folder)``, the base read from the path recorded in
    ``adapter_config.json``). Table 2: the 4B replication."""
    from peft import LoraConfig, TaskType

    model.add_adapter(LoraConfig(task_type=TaskType.FEATURE_EXTRACTION, r=lora.rank, lora_alpha=lora.alpha,
                                 lora_dropout=lora.dropout, target_modules=list(lora.target_modules) or None))


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
    for f in out_dir.rglob("adapter_config.json"):  # peft writes sets (target_modules) in hash order
        _sort_adapter_config(f)


def _sort_adapter_config(path: Path) -> None:
    import json

    cfg = json.loads(path.read_text(encoding="utf-8"))
    for k, v in cfg.items():
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            cfg[k] = sorted(v)
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")



#: The least relative change ||w_after - w_before|| / ||w_before|| over the trainable weights
#: for a run to count as trained: below one part in a million the checkpoint is the base
#: model in all but rounding (a breaker's train.lr 1e-9 run changed no weight by more than
#: 1.9e-9). Each run records its own change (``relative_weight_change`` in its seed record).
MIN_RELATIVE_WEIGHT_CHANGE = 1e-6


def _trainable_snapshot(model) -> list:
    """Copies of every trainable parameter (same device and dtype), to measure the change."""
    return [prm.detach().clone() for prm in model.parameters() if prm.requires_grad]


def relative_weight_change(model, snapshot) -> float:
    """||w - w_0|| / ||w_0|| over the trainable parameters (``snapshot`` from before training),
    in float64; ``inf`` when the snapshot is all zeros and something moved."""
    import torch

    diff = base = 0.0
    for prm, w0 in zip((p for p in model.parameters() if p.requires_grad), snapshot):
        d = (prm.detach() - w0).double()
        diff += float(torch.sum(d * d))
        base += float(torch.sum(w0.double() * w0.double()))
    if base == 0.0:
        return math.inf if diff > 0 else 0.0
    return math.sqrt(diff / base)


def contrastive_loss(model, cfg):
    """The in-batch contrastive loss of paper Eq. 1 (Section 3, Appendix A) at ``cfg.scale``.

    Gradient caching (``CachedMultipleNegativesRankingLoss``) buys memory only when
    ``cfg.mini_batch_size`` < ``cfg.batch_size``; at or above the batch it computes the same
    loss and gradient as plain ``MultipleNegativesRankingLoss`` with an extra forward pass,
    so the plain loss is used there (equal within float32 rounding, and faster: measured in
    ``benchmarks/bench_train_speed.py``). The paper's setting (batch 256, mini-batch 16) keeps
    the cache.
    """
    from sentence_transformers.losses import CachedMultipleNegativesRankingLoss, MultipleNegativesRankingLoss

    if cfg.mini_batch_size >= cfg.batch_size:
        return MultipleNegativesRankingLoss(model, scale=cfg.scale)
    return CachedMultipleNegativesRankingLoss(model, scale=cfg.scale, mini_batch_size=cfg.mini_batch_size)

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
    from sentence_transformers.training_args import BatchSamplers
    from transformers.trainer_callback import TrainerCallback
    from transformers.utils import logging as hf_logging

    from recipematch.retrieval.encoders import set_max_seq_length  # lazy: recipematch.retrieval.encoders pulls in pandas, torch

    hf_logging.set_verbosity_error()
    torch.manual_seed(seed)
    train_rows = [r for r in rows if r.get("split") == "train"]
    dev_rows = [r for r in rows if r.get("split") == "dev"]
    n_replay = sum(1 for r in train_rows if r.get("replay"))
    trip, pair = training_examples(train_rows)
    trip, pair = with_instruction(trip, cfg.query_instruction), with_instruction(pair, cfg.query_instruction)
    datasets = {}
    if trip["anchor"]:
        datasets["triplets"] = Dataset.from_dict(trip)
    if pair["anchor"]:
        datasets["pairs"] = Dataset.from_dict(pair)
    n_train = sum(len(d) for d in datasets.values())
    if n_train < cfg.batch_size:
        raise ValueError(f"{n_train} training examples, fewer than one batch of {cfg.batch_size}: raise budget.rows or lower train.batch_size")
    if "pairs" in datasets and cfg.batch_size < 2:
        # Eq. 1's in-batch softmax over one candidate is constant: loss and gradient are exactly 0
        raise ValueError(f"train.batch_size={cfg.batch_size} with (anchor, positive) pairs gives each anchor one "
                         "candidate: the in-batch loss is constant and nothing trains; use train.batch_size >= 2")
    dev = with_instruction(dev_triplets(dev_rows, seed=seed, limit=cfg.max_dev_triplets, fallback=train_rows),
                           cfg.query_instruction)
    if not dev["anchor"]:
        raise ValueError("no dev triplets: the dev split is empty")

    sampler_reports = {name: no_duplicates_report(ds, cfg.batch_size, seed) for name, ds in datasets.items()}
    if not any(r["batches_yielded"] for r in sampler_reports.values()):
        raise ValueError(f"the NO_DUPLICATES sampler cannot form one batch of {cfg.batch_size} examples without a "
                         f"repeated text ({sampler_reports}); too few distinct anchors: raise budget.rows, lower "
                         "train.batch_size or cap budget.max_rows_per_source")
    model = SentenceTransformer(base_model, device=cfg.device)
    set_max_seq_length(model, cfg.max_seq_length, base_model)
    if "triplets" in datasets and cfg.batch_size < 2:
        # a negative the model cannot tell from its positive (the same token ids once tokenised and cut
        # to max_seq_length: equal text, a trailing space, case under a lower-casing tokenizer, a
        # difference past the cut) is the same candidate twice: one distinct input per softmax
        tok = model.tokenizer
        cut = {"truncation": True, "max_length": model.max_seq_length}
        same = sum(a == b for a, b in zip(tok(trip["positive"], **cut)["input_ids"],
                                          tok(trip["negative"], **cut)["input_ids"]))
        if same:
            raise ValueError(f"train.batch_size={cfg.batch_size}: {same} triplet(s) have a negative the model reads "
                             f"as its positive (the same tokens within max_seq_length={model.max_seq_length}), so "
                             "their anchor sees one distinct candidate and nothing trains; use train.batch_size >= 2")
    if cfg.lora is not None:
        add_lora(model, cfg.lora)
    loss = contrastive_loss(model, cfg)
    evaluator = TripletEvaluator(dev["anchor"], dev["positive"], dev["negative"], name="dev", batch_size=cfg.batch_size,
                                 write_csv=False)
    before = evaluator(model)
    steps_per_epoch = sum(r["batches_advertised"] for r in sampler_reports.values())
    total_steps = max(1, cfg.max_steps or steps_per_epoch * cfg.epochs)
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
            per_device_eval_batch_size=cfg.batch_size, learning_rate=cfg.learning_rate, warmup_steps=float(cfg.warmup_ratio),
            seed=seed, data_seed=seed, batch_sampler=BatchSamplers.NO_DUPLICATES, dataloader_drop_last=True,
            eval_strategy="steps", eval_steps=eval_steps, save_strategy="steps", save_steps=eval_steps,
            save_total_limit=2, load_best_model_at_end=True, metric_for_best_model="eval_dev_cosine_accuracy",
            greater_is_better=True, logging_steps=max(1, eval_steps // 2), use_cpu=cfg.device == "cpu", bf16=cfg.bf16, report_to="none",
            disable_tqdm=not progress, save_only_model=True,
            **({"activation_checkpointing": True} if cfg.gradient_checkpointing else {}),  # transformers 5 name
            **({"max_steps": cfg.max_steps} if cfg.max_steps else {}),  # the step-matched arms (Appendix D)
        )
        train_ds = datasets if len(datasets) > 1 else next(iter(datasets.values()))
        trainer = SentenceTransformerTrainer(
            model=model, args=args, train_dataset=DatasetDict(train_ds) if isinstance(train_ds, dict) else train_ds,
            loss={k: loss for k in datasets} if len(datasets) > 1 else loss, evaluator=evaluator,
            callbacks=[_History()],
        )
        before_w = _trainable_snapshot(model)
        result = trainer.train()
        moved = relative_weight_change(model, before_w)
        del before_w
        if moved < MIN_RELATIVE_WEIGHT_CHANGE:
            what = "no weight moved" if moved == 0 else f"the weights moved by {moved:.2g} (relative)"
            raise ValueError(f"training ran {int(result.global_step)} steps but {what}, under "
                             f"{MIN_RELATIVE_WEIGHT_CHANGE:g} (loss {float(result.training_loss):.3g}); the checkpoint "
                             "would be the base model: raise train.lr or check the batch (the run keeps its best "
                             "checkpoint by the dev metric: with a dev metric flat from the start, that is an early "
                             "step, perhaps inside the warm-up; raise train.eval_steps)")
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
        "train_loss": float(result.training_loss), "relative_weight_change": moved, "history": history,
        "config": cfg.identity(),
        **({"replay_rows": n_replay} if n_replay else {}),
    }
