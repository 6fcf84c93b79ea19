"""A prepared GPU check (issue "paper scale", item 6): train the default cells briefly, encode a
paper-sized synthetic corpus, print throughput, and check that device and CPU scores agree.

Made for a lent GPU machine that has torch, sentence-transformers, transformers (and peft)
but no dvc, mlflow or great-expectations, no network, and only what the working tree carries
(64 MiB: no model weights). So:

* the model is **MiniLM-shaped, built from its configuration with a fixed seed** (BERT, 6
  layers, hidden 384, 12 heads, intermediate 1,536, vocabulary 30,522; mean pooling, unit
  norm), with a WordPiece vocabulary written here: its scores mean nothing, its cost is
  all-MiniLM-L6-v2's;
* the training rows are **synthetic rows shaped like the default cells** (``params.yaml``:
  verified = CAS x CAS, recipe = D1 x 3 near-misses, reference = D4 x 1 CAS negative, cell =
  D4 x none; rows of the matched budget, 5% dev), trained with the project's trainer
  (:func:`recipematch.training.train_one`: CachedMultipleNegativesRankingLoss, NO_DUPLICATES,
  bf16 on CUDA) when ``datasets`` and ``accelerate`` are installed, else with a plain loop over
  the same loss (printed);
* the corpus is **117,088 synthetic documents** (MathNet-Retrieve's size, paper Section 3),
  ranked with the project's exact dense search (``recipematch/retrieval/dense.py`` and the
  ranking kernel it imports, ``ranking.py``, loaded from their folder without the retrieval
  package's ``__init__``, so its BM25 and cache modules are not imported).

Only ``recipematch.training``, ``recipematch.beir``, ``recipematch.io`` and
``recipematch.errors`` are imported; the check fails if dvc, mlflow or great_expectations got
imported anyway.

Agreement (printed with the tolerances): query-document cosine scores on a subset, device
fp32 vs CPU fp32 within ``--tol-fp32`` (default 1e-3: kernels differ in summation order),
device bf16 vs CPU fp32 within ``--tol-bf16`` (default 5e-2: bf16 keeps 8 bits of mantissa),
and the same top-1 document wherever the CPU's top-1 leads the runner-up by more than twice
the tolerance (there a score error within the tolerance cannot reorder them; an untrained
model's near-ties are reported, not judged). Each compared query's gold is among the compared
documents.

    bash benchmarks/gpu_check.sh                       # on the GPU machine
    bash benchmarks/gpu_check.sh --device cpu --docs 3000 --queries 100 --rows 40   # rehearsal
"""

from __future__ import annotations

import argparse
import copy
import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("dvc", "mlflow", "great_expectations")

#: all-MiniLM-L6-v2's shape (its config.json)
MINILM = {"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
          "intermediate_size": 1536, "hidden_act": "gelu", "max_position_embeddings": 512, "type_vocab_size": 2,
          "layer_norm_eps": 1e-12, "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}

#: The default cells (params.yaml arms): negatives per synthetic row, the matched budget's shape
ARM_NEGATIVES = {"verified": 2, "recipe": 3, "reference": 1, "cell": 0}
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SYMBOLS = list("$+-=()^_{}\\,.:;<>0123456789abcdefghijklmnopqrstuvwxyz")


def _words(n_words: int) -> list[str]:
    return [f"w{i}" for i in range(n_words)]


def build_model(work: Path, seed: int, max_seq_length: int, device: str):
    """A MiniLM-shaped sentence-transformers model from its configuration (seeded)."""
    import torch
    import warnings

    from sentence_transformers import SentenceTransformer
    from transformers import BertConfig, BertModel, BertTokenizerFast

    with warnings.catch_warnings():  # the old module path still works in sentence-transformers 6.x
        warnings.simplefilter("ignore", DeprecationWarning)
        from sentence_transformers import models
    vocab = SPECIAL + SYMBOLS + [f"##{c}" for c in SYMBOLS]
    vocab += _words(MINILM["vocab_size"] - len(vocab))
    raw = work / "minilm_shaped"
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = BertTokenizerFast(vocab_file=str(raw / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(seed)
    BertModel(BertConfig(**MINILM)).save_pretrained(raw)
    tok.save_pretrained(raw)
    transformer = models.Transformer(str(raw), max_seq_length=max_seq_length)
    dim = getattr(transformer, "get_embedding_dimension", None) or transformer.get_word_embedding_dimension
    pooling = models.Pooling(dim(), pooling_mode="mean")
    model = SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device=device)
    st_dir = work / "minilm_shaped_st"
    model.save(str(st_dir))
    return st_dir


def synthetic_text(rng, vocab_words: int, lo: int, hi: int) -> str:
    n = int(rng.integers(lo, hi + 1))
    ids = rng.integers(0, vocab_words, size=n)
    return " ".join(f"w{i}" if i % 7 else f"$ w{i} + {i % 10} = {i % 13} $" for i in ids)


def perturb(rng, text: str, rate: float) -> str:
    words = text.split(" ")
    keep = rng.random(len(words)) >= rate
    return " ".join(w for w, k in zip(words, keep) if k) or words[0]


def synthetic_rows(arm: str, rows: int, seed: int, vocab_words: int, dev_fraction: float = 0.05) -> list[dict]:
    """Rows shaped like the default cell ``arm``: ``{source_id, anchor, positive, negatives,
    split}``; 5% of sources are dev (the default's ``budget.dev_fraction``)."""
    import numpy as np

    rng = np.random.default_rng([seed, sum(map(ord, arm))])
    n_dev = max(2, round(rows * dev_fraction))
    out = []
    for i in range(rows):
        anchor = synthetic_text(rng, vocab_words, 30, 90)
        out.append({"source_id": f"{arm}-{i}", "anchor": anchor, "positive": perturb(rng, anchor, 0.3),
                    "negatives": [{"text": perturb(rng, anchor, 0.6) + f" w{int(rng.integers(vocab_words))}"}
                                  for _ in range(ARM_NEGATIVES[arm])],
                    "split": "dev" if i < n_dev else "train"})
    return out


def _plain_loop(rows, st_dir: Path, out_dir: Path, *, seed: int, device: str, bf16: bool, batch_size: int,
                mini_batch_size: int, lr: float, max_seq_length: int) -> dict:
    """Fallback trainer (no ``datasets``/``accelerate``): one epoch of the same loss."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.losses import CachedMultipleNegativesRankingLoss

    from recipematch.training import training_examples

    torch.manual_seed(seed)
    model = SentenceTransformer(str(st_dir), device=device)
    model.max_seq_length = max_seq_length
    loss = CachedMultipleNegativesRankingLoss(model, scale=20.0, mini_batch_size=mini_batch_size)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    trip, pair = training_examples([r for r in rows if r["split"] == "train"])
    steps = 0
    model.train()
    for cols in (trip, pair):
        n = len(cols["anchor"])
        for start in range(0, n - batch_size + 1, batch_size):
            feats = [model.tokenize(cols[k][start:start + batch_size]) for k in cols]
            feats = [{k: v.to(device) for k, v in f.items()} for f in feats]
            with torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu", dtype=torch.bfloat16,
                                enabled=bf16):
                value = loss(feats, None)
            value.backward()
            opt.step()
            opt.zero_grad()
            steps += 1
    model.save(str(out_dir))
    n_train = len(trip["anchor"]) + len(pair["anchor"])
    return {"train_examples": n_train, "steps": steps, "trainer": "plain loop"}


_T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:6.1f} s wall, {time.process_time():6.1f} s cpu] {msg}", flush=True)


def train_arms(args, st_dir: Path, work: Path) -> dict:
    import torch

    from recipematch.training import TrainSettings, train_one

    project_trainer = all(importlib.util.find_spec(m) is not None for m in ("datasets", "accelerate"))
    out = {}
    for arm in args.arms:
        rows = synthetic_rows(arm, args.rows, args.seed, args.vocab_words)
        dest = work / "models" / arm
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        if project_trainer:
            cfg = TrainSettings(lr=args.lr, epochs=1, batch_size=args.batch_size, mini_batch_size=args.mini_batch_size,
                                scale=20.0, warmup_ratio=0.05, max_seq_length=args.max_seq_length, eval_steps=100,
                                max_dev_triplets=2000, device=args.device, bf16=args.bf16)
            rec = train_one(rows, base_model=str(st_dir), out_dir=dest, seed=args.seed, cfg=cfg, progress=False,
                            work_dir=work / "train-tmp")
            rec["trainer"] = "recipematch.training.train_one"
        else:
            rec = _plain_loop(rows, st_dir, dest, seed=args.seed, device=args.device, bf16=args.bf16,
                              batch_size=args.batch_size, mini_batch_size=args.mini_batch_size, lr=args.lr,
                              max_seq_length=args.max_seq_length)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
        out[arm] = {"rows": args.rows, "train_examples": rec["train_examples"], "steps": rec["steps"],
                    "seconds": round(secs, 2), "examples_per_s": round(rec["train_examples"] / secs, 2),
                    "trainer": rec["trainer"]}
        log(f"train {arm}: {json.dumps(out[arm])}")
    return out


#: the retrieval folder as a bare package (its ``__init__`` not run) under this name
DENSE_ONLY = "recipematch_dense_only"


def _load_dense():
    """``recipematch/retrieval/dense.py`` (and ``ranking.py``, which it imports relatively)
    without the retrieval package's ``__init__``: the folder is mounted as the bare package
    :data:`DENSE_ONLY`, whose ``dense`` module is returned."""
    if DENSE_ONLY not in sys.modules:
        spec = importlib.machinery.ModuleSpec(DENSE_ONLY, None, is_package=True)
        spec.submodule_search_locations = [str(ROOT / "src" / "recipematch" / "retrieval")]
        sys.modules[DENSE_ONLY] = importlib.util.module_from_spec(spec)
    return importlib.import_module(f"{DENSE_ONLY}.dense")


def encode_and_compare(args, model_dir: Path) -> dict:
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    rng = np.random.default_rng([args.seed, 117])
    docs = [synthetic_text(rng, args.vocab_words, 20, 120) for _ in range(args.docs)]
    gold = rng.choice(args.docs, size=args.queries, replace=False)
    queries = [perturb(rng, docs[g], 0.4) for g in gold]
    model = SentenceTransformer(str(model_dir), device=args.device)
    model.max_seq_length = args.max_seq_length
    dtype = torch.bfloat16 if args.encode_bf16 else torch.float32
    enc_model = copy.deepcopy(model).to(dtype) if args.encode_bf16 else model

    def encode(m, texts):
        return m.encode(texts, batch_size=args.encode_batch_size, convert_to_numpy=False, convert_to_tensor=True,
                        normalize_embeddings=True, show_progress_bar=False).float().cpu().numpy()

    log(f"encoding {args.docs:,} synthetic documents and {args.queries} queries")
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    encode(enc_model, docs[:256])  # warm-up (kernels, tokenizer)
    sync()
    t0 = time.perf_counter()
    d_emb = encode(enc_model, docs)
    sync()
    enc_s = time.perf_counter() - t0
    q_emb = encode(enc_model, queries)
    dense = _load_dense()
    t0 = time.perf_counter()
    ranks = dense.rank_of_gold(q_emb, d_emb, [f"q{i}" for i in range(args.queries)],
                               [f"d{i}" for i in range(args.docs)], {f"q{i}": {f"d{g}": 1} for i, g in enumerate(gold)},
                               self_mask=True)
    rank_s = time.perf_counter() - t0
    log(f"encoded in {enc_s:.1f} s, ranked in {rank_s:.1f} s; comparing scores with the CPU")
    # agreement on a subset: device fp32 and bf16 against CPU fp32
    sub_q = queries[:args.compare_queries]
    golds = [int(g) for g in gold[:args.compare_queries]]
    sub_idx = golds + [i for i in range(args.compare_docs) if i not in set(golds)][:max(0, args.compare_docs - len(golds))]
    sub_d = [docs[i] for i in sub_idx]  # each compared query's gold is among the compared documents
    cpu = copy.deepcopy(model).to("cpu").float()
    s_cpu = encode(cpu, sub_q) @ encode(cpu, sub_d).T
    s_32 = encode(model, sub_q) @ encode(model, sub_d).T
    bf = copy.deepcopy(model).to(torch.bfloat16)
    s_16 = encode(bf, sub_q) @ encode(bf, sub_d).T
    top_cpu = s_cpu.argmax(1)
    srt = np.sort(s_cpu, axis=1)
    margin = srt[:, -1] - srt[:, -2]  # CPU's top-1 lead over the runner-up
    res = {
        "docs": args.docs, "queries": args.queries, "encode_dtype": str(dtype).replace("torch.", ""),
        "encode_seconds": round(enc_s, 2), "documents_per_s": round(args.docs / enc_s, 1),
        "rank_seconds": round(rank_s, 2), "synthetic_R@1": round(float((ranks == 0).mean()) * 100, 2),
        "synthetic_R@10": round(float((ranks < 10).mean()) * 100, 2),
        "compare": {"queries": len(sub_q), "docs": len(sub_d),
                    "fp32_max_abs_diff": float(np.abs(s_32 - s_cpu).max()),
                    "bf16_max_abs_diff": float(np.abs(s_16 - s_cpu).max()),
                    "fp32_top1_same": float((s_32.argmax(1) == top_cpu).mean()),
                    "bf16_top1_same": float((s_16.argmax(1) == top_cpu).mean()),
                    # where the CPU's lead exceeds twice the tolerance, a score error within the
                    # tolerance cannot change the top-1: there it must agree
                    "bf16_clear_queries": int((margin > 2 * args.tol_bf16).sum()),
                    "bf16_top1_same_where_clear": float((s_16.argmax(1) == top_cpu)[margin > 2 * args.tol_bf16].mean())
                    if (margin > 2 * args.tol_bf16).any() else None,
                    "fp32_top1_same_where_clear": float((s_32.argmax(1) == top_cpu)[margin > 2 * args.tol_fp32].mean())
                    if (margin > 2 * args.tol_fp32).any() else None},
    }
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda (the check) or cpu (the rehearsal)")
    ap.add_argument("--arms", default="verified,recipe,reference,cell", help="default cells to train")
    ap.add_argument("--rows", type=int, default=120, help="rows per arm (params.yaml budget.rows)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--mini-batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--bf16", dest="bf16", action="store_true", default=None, help="bf16 training (default on CUDA)")
    ap.add_argument("--no-bf16", dest="bf16", action="store_false")
    ap.add_argument("--docs", type=int, default=117_088)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--encode-batch-size", type=int, default=256)
    ap.add_argument("--compare-docs", type=int, default=2000)
    ap.add_argument("--compare-queries", type=int, default=200)
    ap.add_argument("--tol-fp32", type=float, default=1e-3)
    ap.add_argument("--tol-bf16", type=float, default=5e-2)
    ap.add_argument("--vocab-words", type=int, default=30_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--imports-only", action="store_true",
                    help="import the project modules the check uses, print which of dvc/mlflow/great_expectations "
                         "that pulled in (JSON), and exit")
    args = ap.parse_args(argv)
    if args.imports_only:
        sys.path.insert(0, str(ROOT / "src"))
        import recipematch.training  # noqa: F401

        _load_dense()
        mods = sorted(m for m in sys.modules if m.split(".")[0] in ("recipematch", DENSE_ONLY))
        print(json.dumps({"recipematch_modules": mods,
                          "forbidden_imported": [m for m in FORBIDDEN if m in sys.modules]}))
        return 0
    args.arms = [a for a in args.arms.split(",") if a]
    bad = [a for a in args.arms if a not in ARM_NEGATIVES]
    if bad:
        ap.error(f"unknown arms {bad}; choose from {sorted(ARM_NEGATIVES)}")
    for k, v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
        os.environ.setdefault(k, v)
    sys.path.insert(0, str(ROOT / "src"))
    import torch
    import transformers

    import sentence_transformers

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: --device cuda but torch sees no CUDA device (use --device cpu to rehearse)", file=sys.stderr)
        return 2
    if args.bf16 is None:
        args.bf16 = args.device.startswith("cuda")
    args.encode_bf16 = args.device.startswith("cuda")
    t_all = time.perf_counter()
    dev_name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    print(f"gpu_check: device {args.device} ({dev_name}); torch {torch.__version__}, transformers "
          f"{transformers.__version__}, sentence-transformers {sentence_transformers.__version__}; "
          f"torch threads {torch.get_num_threads()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        work = args.work or Path(tmp)
        st_dir = build_model(work, args.seed, args.max_seq_length, "cpu")
        log(f"MiniLM-shaped model built from its configuration (seed {args.seed})")
        train = train_arms(args, st_dir, work)
        enc = encode_and_compare(args, work / "models" / args.arms[0])
    leaked = [m for m in FORBIDDEN if m in sys.modules]
    c = enc["compare"]
    ok_32 = c["fp32_max_abs_diff"] <= args.tol_fp32 and c["fp32_top1_same_where_clear"] in (None, 1.0)
    ok_16 = c["bf16_max_abs_diff"] <= args.tol_bf16 and c["bf16_top1_same_where_clear"] in (None, 1.0)
    ex_s = [t["examples_per_s"] for t in train.values()]
    print(json.dumps({"train": train, "encode": enc}, indent=1))
    print(f"throughput: training {min(ex_s):.1f}-{max(ex_s):.1f} examples/s (bf16 {args.bf16}, batch "
          f"{args.batch_size}, {args.max_seq_length} tokens); encoding {enc['documents_per_s']:.0f} documents/s "
          f"({enc['encode_dtype']}, {enc['docs']:,} documents); exact ranking of {enc['queries']} queries "
          f"{enc['rank_seconds']} s")
    print(f"agreement vs CPU fp32 on {c['queries']} x {c['docs']} scores: fp32 max |diff| {c['fp32_max_abs_diff']:.2e} "
          f"(tolerance {args.tol_fp32:g}), top-1 same {c['fp32_top1_same']:.3f}; bf16 max |diff| "
          f"{c['bf16_max_abs_diff']:.2e} (tolerance {args.tol_bf16:g}), top-1 same {c['bf16_top1_same']:.3f} "
          f"overall and {c['bf16_top1_same_where_clear']} on the {c['bf16_clear_queries']} queries whose CPU top-1 "
          f"leads by more than twice the tolerance (must be 1.0)")
    print(f"modules: dvc/mlflow/great_expectations imported: {leaked or 'none'}")
    status = 0 if ok_32 and ok_16 and not leaked else 1
    print(f"gpu_check: {'PASS' if status == 0 else 'FAIL'} in {time.perf_counter() - t_all:.0f} s wall "
          f"({time.process_time():.0f} s CPU time of this process)")
    return status


if __name__ == "__main__":
    sys.exit(main())
