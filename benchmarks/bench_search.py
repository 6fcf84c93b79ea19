"""Exact top-10 search: recipematch.retrieval.search_topk against a reference.

Workload (issue "Speed and memory"): 15,000 random unit queries against 117,088 x 1,024
random unit documents, float32, top-10 by inner product. The reference is faiss-cpu's
``IndexFlatIP`` when faiss is importable (install it into the venv for the benchmark only:
``pip install faiss-cpu``), otherwise a plain ``torch.topk`` over the full score matrix.
Goals: our time <= 1.2 x the reference's, our peak RSS <= 2 GB.

Every method runs in its own subprocess (clean peak RSS from ``getrusage``), ``--repeats``
times alternately; the best time of each is kept (the machine is shared). The last line
printed is one JSON object: ``ratio_vs_reference``, ``peak_rss_gb``, ``reference`` and the
raw figures. Run by hand: ``.venv/bin/python benchmarks/bench_search.py``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d), dtype=np.float32)
    for s in range(0, n, 8192):  # normalise in place, no float64 copy
        blk = x[s:s + 8192]
        blk /= np.linalg.norm(blk, axis=1, keepdims=True)
    return x


def _data(n_queries: int, n_docs: int, dim: int):
    rng = np.random.default_rng(0)
    return _unit(rng, n_queries, dim), _unit(rng, n_docs, dim)


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2  # KiB -> GiB


def worker(method: str, n_queries: int, n_docs: int, dim: int, k: int, out_path: str) -> None:
    q, d = _data(n_queries, n_docs, dim)
    rss_data = _peak_rss_gb()
    if method == "ours":
        from recipematch.retrieval import search_topk

        qids = [f"q{i}" for i in range(n_queries)]
        dids = [f"d{i}" for i in range(n_docs)]
        t = time.perf_counter()
        idx, _ = search_topk(q, d, k, query_ids=qids, doc_ids=dids, self_mask=True)
        secs = time.perf_counter() - t
    elif method == "faiss":
        import faiss

        t = time.perf_counter()
        index = faiss.IndexFlatIP(dim)
        index.add(d)
        _, idx = index.search(q, k)
        secs = time.perf_counter() - t
    elif method == "torch":
        import torch

        t = time.perf_counter()
        scores = torch.from_numpy(q) @ torch.from_numpy(d).T  # the full score matrix
        idx = torch.topk(scores, k, dim=1).indices.numpy()
        secs = time.perf_counter() - t
    else:
        raise ValueError(method)
    np.save(out_path, np.asarray(idx, dtype=np.int64))
    print(json.dumps({"method": method, "seconds": secs, "peak_rss_gb": _peak_rss_gb(),
                      "rss_after_data_gb": rss_data}))


def _run(method: str, args, out_path: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", method, "--n-queries", str(args.n_queries),
           "--n-docs", str(args.n_docs), "--dim", str(args.dim), "--k", str(args.k),
           "--out", out_path]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-queries", type=int, default=15_000)
    ap.add_argument("--n-docs", type=int, default=117_088)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--worker", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.n_queries, args.n_docs, args.dim, args.k, args.out)
        return
    try:
        import faiss  # noqa: F401

        reference = "faiss"
    except ImportError:
        reference = "torch"
    import tempfile

    tmp = tempfile.mkdtemp(prefix="bench_search_")
    runs: dict[str, list[dict]] = {"ours": [], reference: []}
    for _ in range(args.repeats):
        for m in ("ours", reference):
            runs[m].append(_run(m, args, f"{tmp}/{m}.npy"))
    best = {m: min(r["seconds"] for r in rs) for m, rs in runs.items()}
    rss = {m: max(r["peak_rss_gb"] for r in rs) for m, rs in runs.items()}
    ours_idx, ref_idx = np.load(f"{tmp}/ours.npy"), np.load(f"{tmp}/{reference}.npy")
    same_rows = float(np.mean(np.all(np.sort(ours_idx, 1) == np.sort(ref_idx, 1), axis=1)))
    ratio = best["ours"] / best[reference]
    print(f"exact top-{args.k}: {args.n_queries} queries x {args.n_docs} docs x {args.dim} dims,"
          f" float32, best of {args.repeats}")
    print(f"{'method':<28}{'seconds':>10}{'peak RSS GB':>14}")
    names = {"ours": "recipematch.search_topk", "faiss": "faiss IndexFlatIP",
             "torch": "torch.topk (full matrix)"}
    for m in ("ours", reference):
        print(f"{names[m]:<28}{best[m]:>10.2f}{rss[m]:>14.2f}")
    print(f"{'ratio ours / reference':<28}{ratio:>10.3f}   (goal <= 1.2)")
    print(f"{'same top-k sets':<28}{same_rows:>10.4f}")
    print(json.dumps({
        "ratio_vs_reference": round(ratio, 4),
        "peak_rss_gb": round(rss["ours"], 3),
        "reference": names[reference],
        "seconds_ours": round(best["ours"], 3),
        "seconds_reference": round(best[reference], 3),
        "peak_rss_gb_reference": round(rss[reference], 3),
        "same_topk_sets": same_rows,
        "n_queries": args.n_queries, "n_docs": args.n_docs, "dim": args.dim, "k": args.k,
        "repeats": args.repeats,
    }))


if __name__ == "__main__":
    main()
