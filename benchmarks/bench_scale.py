"""How stage wall time grows with the budget, and the memory of exact dense search at the
paper's corpus size (run by hand; issue "paper scale", item 5; not a test).

1. **Rows axis.** For each ``--rows`` value this runs the budget-dependent stages of one arm
   (``cells``, ``validate``, ``train``, ``evaluate``) on the pair files a finished
   ``dvc repro`` left under ``--root`` (the embedded sample), in a scratch project per value
   (``--work``; the project's own outputs are not touched), and prints each stage's wall time
   and its growth exponent: the slope of log(time) against log(rows) (``numpy.polyfit``),
   1.0 = linear, 0.0 = flat. The training and encoding throughputs it measured are printed
   too (they feed the table in :mod:`recipematch.plan`).
2. **Workers axis.** The train and evaluate stages of the arm at ``--workers-rows`` rows and
   ``--workers-seeds`` seeds, the (arm, seed) units run one after another in the stage's
   process, then as Ray tasks (:mod:`recipematch.engine`) on 1 and on 2 workers of one
   thread each; prints each stage's wall time and the speed-up of 2 workers over 1.
3. **Memory.** Exact dense search (:func:`recipematch.retrieval.dense.rank_of_gold`, queries
   in blocks) over ``--docs`` x ``--dim`` synthetic unit float32 embeddings in a fresh child
   process; prints the child's peak RSS (``VmHWM``: the whole process, the
   embeddings included) and the Python-heap peak during the search (``tracemalloc``: numpy
   buffers; torch's own allocator is not traced, the RSS covers it), and whether the peak stays under ``--rss-limit-gb``.

    OMP_NUM_THREADS=1 python benchmarks/bench_scale.py --root /path/to/project --rows 40,120,240
    python benchmarks/bench_scale.py --root . --skip-rows --skip-memory --workers-rows 120 --workers-seeds 2
    python benchmarks/bench_scale.py --memory-only --docs 117088 --dim 1024 --queries 512
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

STAGES = ("cells", "validate", "train", "evaluate")


# --------------------------------------------------------------------------- memory


def memory_child(n_docs: int, dim: int, n_queries: int, seed: int) -> dict:
    """Run in a fresh process: build synthetic unit embeddings, rank every query's planted
    gold, report peak memory. Query i's gold is document ``i * step`` and the query is that
    document's vector plus small noise, so every rank must be 0."""
    import resource
    import tracemalloc

    import numpy as np

    from recipematch.retrieval.dense import default_chunk_size, rank_of_gold

    tracemalloc.start()
    rng = np.random.default_rng(seed)
    docs = rng.standard_normal((n_docs, dim), dtype=np.float32)
    for start in range(0, n_docs, 8192):  # normalised in blocks: no corpus-sized temporary
        block = docs[start:start + 8192]
        block /= np.linalg.norm(block, axis=1, keepdims=True)
    step = max(1, n_docs // max(n_queries, 1))
    gold_idx = (np.arange(n_queries) * step) % n_docs
    q = docs[gold_idx] + 0.01 * rng.standard_normal((n_queries, dim), dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    doc_ids = [f"d{i}" for i in range(n_docs)]
    query_ids = [f"q{i}" for i in range(n_queries)]
    qrels = {f"q{i}": {f"d{g}": 1} for i, g in enumerate(gold_idx)}
    rss_before = _peak_rss_bytes()
    tracemalloc.reset_peak()
    t0 = time.perf_counter()
    ranks = rank_of_gold(q, docs, query_ids, doc_ids, qrels, self_mask=True)
    secs = time.perf_counter() - t0
    _, py_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_peak = _peak_rss_bytes()
    return {"n_docs": n_docs, "dim": dim, "n_queries": n_queries,
            "chunk_queries": default_chunk_size(n_docs), "embeddings_bytes": int(docs.nbytes),
            "peak_rss_bytes": int(rss_peak), "peak_rss_before_search_bytes": int(rss_before),
            "tracemalloc_peak_bytes": int(py_peak),
            "search_seconds": round(secs, 3), "ranks_all_zero": bool((ranks == 0).all())}


def _peak_rss_bytes() -> int:
    """This process's peak resident set in bytes: ``VmHWM`` of /proc/self/status (Linux resets
    it at exec; ``ru_maxrss`` keeps the peak of the process that forked this one), else
    ``ru_maxrss`` (KiB on Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory_check(n_docs: int, dim: int, n_queries: int, seed: int = 0, timeout: float = 600) -> dict:
    """:func:`memory_child` in a fresh interpreter (so the peak is the search's own)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--memory-child", str(n_docs), str(dim),
                        str(n_queries), str(seed)], capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"memory child failed ({r.returncode}): {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- rows axis


def _params(base: dict, *, rows: int, arm: str, seq: int, epochs: int, evaluation: str) -> dict:
    raw = copy.deepcopy(base)
    raw["arms"] = [arm]
    raw["budget"]["rows"] = rows
    raw["budget"]["shared_sources"] = []
    raw["train"].update(n_seeds=1, epochs=epochs, max_seq_length=seq)
    raw["evaluations"] = {evaluation: raw["evaluations"][evaluation]}
    raw["style"]["tracking_set"] = evaluation
    raw["mlflow"]["tracking_uri"] = "sqlite:///mlflow-bench.db"
    raw.setdefault("data", {"source": "sample", "path": "data/peer_release/corpus.jsonl"})
    return raw


def _scratch(src: Path, dst: Path, shared_cache: Path) -> Path:
    """A project that reads ``src``'s inputs and pair files and writes only under ``dst``."""
    if dst.exists():
        shutil.rmtree(dst)
    (dst / "artifacts").mkdir(parents=True)
    (dst / "cache").mkdir()
    (dst / "data").symlink_to((src / "data").resolve())
    for name in ("corpus", "evalsets", "gates", "pairs", "specs", "recordings"):
        (dst / "artifacts" / name).symlink_to((src / "artifacts" / name).resolve())
    (dst / "cache" / "embeddings").symlink_to(shared_cache.resolve())
    return dst


def _run(module, raw, lay, *args, **kw):
    from recipematch.config import parse_params

    return module.run(parse_params(raw).view(module.PARAMS), lay, *args, **kw)


def rows_axis(root: Path, work: Path, rows_list: list[int], *, arm: str, seq: int, epochs: int,
              evaluation: str, params: Path, evaluate_stage: bool = True) -> list[dict]:
    from recipematch.config import load_yaml
    from recipematch.io import read_json
    from recipematch.pipeline import cells, evaluate, train, validate
    from recipematch.pipeline.door import Layout

    base = load_yaml(params)  # read once: the project's params may change while the bench runs
    # imports are paid once per process, not per row value: load them before anything is timed
    import great_expectations  # noqa: F401
    import sentence_transformers  # noqa: F401

    out = []
    for rows in rows_list:
        # each row value starts from a cold embedding cache, as a fresh clone's stages do (a
        # cache shared across values would let the first pay for the texts the others reuse)
        shared = work / f"embeddings_rows_{rows}"
        if shared.exists():
            shutil.rmtree(shared)
        shared.mkdir(parents=True)
        lay = Layout(_scratch(root, work / f"rows_{rows}", shared))
        raw = _params(base, rows=rows, arm=arm, seq=seq, epochs=epochs, evaluation=evaluation)
        times = {}
        for name, fn in (("cells", lambda: _run(cells, raw, lay, arm)),
                         ("validate", lambda: _run(validate, raw, lay, arm)),
                         ("train", lambda: _run(train, raw, lay, arm, progress=False)),
                         ("evaluate", lambda: _run(evaluate, raw, lay, arm, progress=False)))[:4 if evaluate_stage else 3]:
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times[name] = time.perf_counter() - t0
            times[f"{name}_cpu"] = time.process_time() - c0
        if not evaluate_stage:
            out.append({"rows": rows, **{f"{k}_s": round(v, 2) for k, v in times.items()},
                        "train_examples": read_json(lay.metrics / "cells" / f"{arm}.json")["budget"][
                            str(raw["train"]["seed"])]["train_examples"]})
            print(json.dumps(out[-1]), flush=True)
            continue
        info = read_json(lay.metrics / "cells" / f"{arm}.json")["budget"][str(raw["train"]["seed"])]
        ev_dir = lay.root / raw["evaluations"][evaluation]["folder"]
        n_texts = sum(1 for _ in open(ev_dir / "corpus.jsonl", encoding="utf-8")) + sum(
            1 for _ in open(ev_dir / "queries.jsonl", encoding="utf-8"))
        out.append({"rows": rows, "train_examples": info["train_examples"], "eval_texts": n_texts,
                    **{f"{k}_s": round(v, 2) for k, v in times.items()}})
        print(json.dumps(out[-1]), flush=True)
    return out


def growth_exponents(results: list[dict], suffix: str = "_s", stages=STAGES) -> dict[str, float]:
    """Slope of log(seconds) on log(rows) per stage (numpy.polyfit, degree 1); ``suffix``
    ``"_s"`` for wall time, ``"_cpu_s"`` for this process's CPU time."""
    import numpy as np

    x = np.log([r["rows"] for r in results])
    return {s: float(np.polyfit(x, np.log([r[f"{s}{suffix}"] for r in results]), 1)[0]) for s in stages
            if all(f"{s}{suffix}" in r for r in results)}


def workers_axis(root: Path, work: Path, *, rows: int, seeds: int, arm: str, seq: int, epochs: int,
                 evaluation: str, params: Path, evaluate_stage: bool = True) -> list[dict]:
    """Wall time of the train (and evaluate) stage of one arm with ``seeds`` seeds, the
    (arm, seed) units run (a) one after another in the stage's process (``engine.kind:
    local``, torch on its default threads), (b) as Ray tasks on 1 worker and (c) on 2 workers
    (``engine.num_cpus: 1``: each unit on one torch thread). Each engine starts from the same
    cells (built once, not timed) in its own copy of the scratch project; Ray start-up is
    timed apart from the stage. Returns one dict per engine."""
    import ray

    from recipematch import engine as engine_mod
    from recipematch.config import EngineConfig, load_yaml
    from recipematch.pipeline import cells, evaluate, train, validate
    from recipematch.pipeline.door import Layout

    base = load_yaml(params)
    shared = work / "embeddings"
    shared.mkdir(parents=True, exist_ok=True)
    raw = _params(base, rows=rows, arm=arm, seq=seq, epochs=epochs, evaluation=evaluation)
    raw["train"]["n_seeds"] = seeds
    lay0 = Layout(_scratch(root, work / "workers_base", shared))
    _run(cells, raw, lay0, arm)
    _run(validate, raw, lay0, arm)
    out = []
    for name, eng in (("local (sequential)", None),
                      ("ray, 1 worker", EngineConfig(kind="ray", workers=1, num_cpus=1)),
                      ("ray, 2 workers", EngineConfig(kind="ray", workers=2, num_cpus=1))):
        dest = work / ("workers_" + name.split(" ")[0].rstrip(",") + (f"_{eng.workers}" if eng else ""))
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(lay0.root, dest, symlinks=True)
        # its own copy of the embedding cache as the cells left it: the engines train identical
        # models, so a shared cache would let the later engines' evaluate read the first's vectors
        (dest / "cache" / "embeddings").unlink()
        shutil.copytree(shared, dest / "cache" / "embeddings")
        lay = Layout(dest)
        row: dict = {"engine": name, "ray_start_s": 0.0}
        if eng is not None:
            t0 = time.perf_counter()
            ray.init(num_cpus=eng.workers, include_dashboard=False, logging_level=logging.WARNING,
                     runtime_env=engine_mod.same_code_env())
            row["ray_start_s"] = round(time.perf_counter() - t0, 2)
        try:
            stages = [("train", train)] + ([("evaluate", evaluate)] if evaluate_stage else [])
            for stage_name, module in stages:
                t0 = time.perf_counter()
                _run(module, raw, lay, arm, progress=False, engine=eng)
                row[f"{stage_name}_s"] = round(time.perf_counter() - t0, 2)
        finally:
            if eng is not None:
                ray.shutdown()
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path("."), help="project root with a finished dvc repro")
    ap.add_argument("--work", type=Path, default=Path("cache/bench_scale"), help="scratch folder")
    ap.add_argument("--params", type=Path, default=None, help="params file (default: ROOT/params.yaml)")
    ap.add_argument("--rows", default="40,120,240")
    ap.add_argument("--no-evaluate", action="store_true",
                    help="leave the evaluate stage out of the rows axis (its cost does not depend on rows)")
    ap.add_argument("--workers-train-only", action="store_true", help="leave evaluate out of the workers axis")
    ap.add_argument("--prior", type=Path, default=None,
                    help="JSON lines this bench printed for other rows values, merged into the table")
    ap.add_argument("--arm", default="recipe", help="an arm the project's specs stage wrote (params arms)")
    ap.add_argument("--max-seq-length", type=int, default=64, help="training tokens per text")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--evaluation", default="easy", help="the one declared evaluation scored")
    ap.add_argument("--docs", type=int, default=117_088)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--queries", type=int, default=512)
    ap.add_argument("--rss-limit-gb", type=float, default=2.0)
    ap.add_argument("--workers-rows", type=int, default=120, help="rows of the workers axis")
    ap.add_argument("--workers-seeds", type=int, default=2, help="seeds (units) of the workers axis")
    ap.add_argument("--skip-rows", action="store_true", help="leave the rows axis out")
    ap.add_argument("--skip-workers", action="store_true", help="leave the workers axis out")
    ap.add_argument("--memory-only", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--memory-child", nargs=4, type=int, metavar=("DOCS", "DIM", "QUERIES", "SEED"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(*args.memory_child)))
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    status = 0
    if not args.memory_only and not args.skip_rows:
        rows_list = [int(x) for x in args.rows.split(",")]
        t0 = time.perf_counter()
        results = rows_axis(args.root.resolve(), args.work.resolve(), rows_list, arm=args.arm,
                            seq=args.max_seq_length, epochs=args.epochs, evaluation=args.evaluation,
                            params=args.params or args.root / "params.yaml", evaluate_stage=not args.no_evaluate)
        if args.prior:
            prior = [json.loads(x) for x in args.prior.read_text().splitlines() if x.startswith('{"rows"')]
            results = sorted(prior + results, key=lambda r: r["rows"])
        stages = [s for s in STAGES if all(f"{s}_s" in r for r in results)]
        exps, exps_cpu = growth_exponents(results, stages=stages), growth_exponents(results, "_cpu_s", stages)
        import torch

        print(f"\nrows axis: arm {args.arm}, 1 seed, {args.epochs} epoch(s), train max_seq_length "
              f"{args.max_seq_length}, evaluation '{args.evaluation}'; torch threads {torch.get_num_threads()}; "
              f"total {time.perf_counter() - t0:.0f} s")
        print("| rows | train examples | " + " | ".join(f"{s} wall s (cpu s)" for s in STAGES) + " |")
        print("|---|---|" + "---|" * len(STAGES))

        def cell(r, s):
            return f"{r[f'{s}_s']:.1f} ({r[f'{s}_cpu_s']:.1f})" if f"{s}_s" in r else "not run"

        for r in results:
            print(f"| {r['rows']} | {r['train_examples']} | " + " | ".join(cell(r, s) for s in STAGES) + " |")
        print("| growth exponent, wall (cpu) | | "
              + " | ".join(f"{exps[s]:.2f} ({exps_cpu[s]:.2f})" if s in exps else "-" for s in STAGES) + " |")
        ex_s = [r["train_examples"] * args.epochs / r["train_s"] for r in results]
        ex_c = [r["train_examples"] * args.epochs / r["train_cpu_s"] for r in results]
        print(f"training throughput: {min(ex_s):.2f}-{max(ex_s):.2f} examples/s wall "
              f"({min(ex_c):.2f}-{max(ex_c):.2f} per CPU second)")
        scored = [r for r in results if "evaluate_s" in r]
        if scored:
            docs_s = [r["eval_texts"] / r["evaluate_s"] for r in scored]
            docs_c = [r["eval_texts"] / r["evaluate_cpu_s"] for r in scored]
            print(f"scoring throughput (encode + rank, {scored[0]['eval_texts']} texts): {min(docs_s):.1f}-"
                  f"{max(docs_s):.1f} texts/s wall ({min(docs_c):.1f}-{max(docs_c):.1f} per CPU second)")
    if not args.memory_only and not args.skip_workers:
        t0 = time.perf_counter()
        wres = workers_axis(args.root.resolve(), args.work.resolve(), rows=args.workers_rows,
                            seeds=args.workers_seeds, arm=args.arm, seq=args.max_seq_length, epochs=args.epochs,
                            evaluation=args.evaluation, params=args.params or args.root / "params.yaml",
                            evaluate_stage=not args.workers_train_only)
        wst = [s for s in ("train", "evaluate") if all(f"{s}_s" in r for r in wres)]
        one = next(r for r in wres if r["engine"] == "ray, 1 worker")
        loc = next(r for r in wres if r["engine"].startswith("local"))
        print(f"\nworkers axis: arm {args.arm}, {args.workers_rows} rows, {args.workers_seeds} seeds as units; "
              f"total {time.perf_counter() - t0:.0f} s")
        print("| engine | ray start s | " + " | ".join(f"{s} wall s" for s in wst)
              + " | " + " | ".join(f"{s} speed-up vs 1 worker (vs local)" for s in wst) + " |")
        print("|---|---|" + "---|" * (2 * len(wst)))
        for r in wres:
            print(f"| {r['engine']} | {r['ray_start_s']:.1f} | " + " | ".join(f"{r[f'{s}_s']:.1f}" for s in wst)
                  + " | " + " | ".join(f"{one[f'{s}_s'] / r[f'{s}_s']:.2f} ({loc[f'{s}_s'] / r[f'{s}_s']:.2f})"
                                       for s in wst) + " |")
    if not args.skip_memory:
        m = memory_check(args.docs, args.dim, args.queries)
        gb = m["peak_rss_bytes"] / 2**30
        ok = gb < args.rss_limit_gb and m["ranks_all_zero"]
        print(f"\nmemory: dense search {m['n_docs']} x {m['dim']} float32 ({m['embeddings_bytes'] / 2**20:.0f} MiB of "
              f"embeddings), {m['n_queries']} queries in blocks of {m['chunk_queries']}: peak RSS {gb:.2f} GiB, "
              f"(before the search {m['peak_rss_before_search_bytes'] / 2**30:.2f} GiB), Python-heap peak during the "
              f"search {m['tracemalloc_peak_bytes'] / 2**20:.0f} MiB, search {m['search_seconds']} s, "
              f"planted golds all at rank 0: {m['ranks_all_zero']} -> "
              f"{'within' if ok else 'OVER'} {args.rss_limit_gb} GB")
        status = 0 if ok else 1
    return status


if __name__ == "__main__":
    sys.exit(main())
