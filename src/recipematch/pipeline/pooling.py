"""Stage ``pooling@<name>``: the candidate pool of one declared evaluation (the candidate
design of :mod:`recipematch.pooling`): a dense route per named model (``base`` = ``train.model``;
an arm = every trained seed), the BM25 route and the word n-gram route, fused by weighted
reciprocal rank fusion.

Writes ``artifacts/pooling/<name>/candidates.parquet`` (every pair some route retrieved, each
route's rank, the fused score and rank, the v1 / v2 flags, whether the evaluation scores it as
a gold) with a ``MANIFEST.json`` (routes, settings, input hashes), and the counts to
``metrics/pooling/<name>.json``. Needs no LLM: the judging stages read these candidates.
"""

from __future__ import annotations

from pathlib import Path

import click

from recipematch.config import pool_models
from recipematch.benchmarks_data import load_set
from recipematch.beir import corpus_sha256, doc_text, queries_sha256
from recipematch.errors import RecipematchError
from recipematch.io import building_dir, write_json
from recipematch.pipeline.door import StagePaths, check_device, progress_option, stage
from recipematch.pipeline.inputs import train_seeds
from recipematch.pipeline.models import resolve_model

PARAMS = ("pooling", "arms", "train.model", "train.seed", "train.n_seeds", "train.query_instruction",
          "evaluate.max_seq_length", "evaluate.batch_size", "evaluate.dtype", "evaluations")
#: the evaluation folder it reads (dvc.yaml lists them: recipematch.pipeline.deps): the entry's evaluation
EVAL_DEPS = "param:pooling.${key}.evaluation"

name_option = click.option("--name", "name", required=True, help="A pool named in params.yaml `pooling`.")


def _dense_models(p, lay: StagePaths, models) -> list[tuple[str, str, str, str]]:
    """``(route name, checkpoint path, query prompt, identity)`` per dense route, in declared
    order. The identity is what the MANIFEST records, the same in every clone: the base model
    by its ``train.model`` name (its folder lies wherever the package was installed, inside
    the project's ``.venv/`` or not), a trained checkpoint by its path relative to the root."""
    out = []

    for m in pool_models(models, p.arms):
        if m == "base":
            out.append(("dense_base", resolve_model(p.train.model), "", p.train.model))
            continue
        for s in train_seeds(p.train.seed, p.train.n_seeds):
            ckpt = lay.models_root / m / f"seed_{s}"
            if not ckpt.is_dir():
                raise RecipematchError(f"{ckpt} does not exist: train@{m} has not trained seed {s} (run it first)")
            out.append((f"dense_{m}_s{s}", str(ckpt), p.train.query_instruction, lay.rel(ckpt)))
    return out


def run(p, lay: StagePaths, *, name: str, progress: bool = True) -> dict:
    """Pool the candidates of one declared evaluation over dense, BM25 and n-gram routes."""
    from recipematch.pipeline.evaluate import encoder_for  # lazy: tests monkeypatch recipematch.pipeline.evaluate.encoder_for
    from recipematch.pooling import Route, bm25_route, fuse, ngram_topk, pool_counts  # lazy: recipematch.pooling pulls in pandas, torch
    from recipematch.retrieval import encode_cached, search_topk  # lazy: recipematch.retrieval pulls in pandas, torch
    from recipematch.retrieval.selfmask import own_entries  # lazy: recipematch.retrieval.selfmask pulls in pandas, torch
    from recipematch.scoring import scored_qrels  # lazy: recipematch.scoring pulls in pandas, torch

    if name not in p.pooling:
        raise RecipematchError(f"--name {name!r}: not declared in params.yaml pooling (declared: {sorted(p.pooling)})")
    pc = p.pooling[name]
    ev = p.evaluations[pc.evaluation]
    folder = lay.root / ev.folder
    if not folder.is_dir():
        raise RecipematchError(f"evaluations.{pc.evaluation}.folder: {folder} does not exist "
                               "(run the stage that writes it, or `dvc pull` it)")
    bset = load_set(folder, ev.rule, name=pc.evaluation, self_mask=ev.self_mask)
    dense = _dense_models(p, lay, pc.dense)  # every checkpoint found before any encodes
    check_device("devices.evaluate", p.devices.evaluate)
    qids = list(bset.query_ids)
    doc_ids = list(bset.corpus)
    q_texts = [bset.queries[q] for q in qids]
    d_texts = [doc_text(bset.corpus[d]) for d in doc_ids]
    own = own_entries(qids, q_texts, doc_ids, [bset.corpus[d] for d in doc_ids], bset.self_mask)
    gold = scored_qrels(bset)
    depth = min(pc.route_depth, len(doc_ids))
    routes = []
    for rname, path, prompt, _ in dense:
        enc = encoder_for(path, p, prompt)
        d_emb = encode_cached(enc, d_texts, lay.cache, role="document")
        q_emb = encode_cached(enc, q_texts, lay.cache, role="query")
        idx, _ = search_topk(q_emb, d_emb, depth, query_ids=qids, doc_ids=doc_ids, self_mask=own.index)
        routes.append(Route(rname, "dense", pc.weight_dense, idx))
        if progress:
            click.echo(f"pooling@{name}: route {rname} done", err=True)
    idx, _ = bm25_route(bset.corpus, bset.queries, qids, depth, k1=pc.bm25_k1, b=pc.bm25_b,
                        token_pattern=pc.token_pattern, self_idx=own.index)
    routes.append(Route("bm25", "bm25", pc.weight_bm25, idx))
    idx, _ = ngram_topk(d_texts, q_texts, depth, doc_ids=doc_ids, n=pc.ngram_n, token_pattern=pc.token_pattern,
                        self_idx=own.index)
    routes.append(Route(f"ngram{pc.ngram_n}", "ngram", pc.weight_ngram, idx))
    cands = fuse(routes, qids, doc_ids, rrf_k=pc.rrf_k, judge_depth=pc.judge_depth, gold=gold)
    counts = pool_counts(cands, routes, qids, mode=pc.mode, judge_depth=pc.judge_depth, gold=gold)
    counts.update(evaluation=pc.evaluation, n_docs=len(doc_ids), self_mask=own.rule, n_queries_self_masked=own.n_masked)
    with building_dir(lay.out) as tmp:
        cands.to_parquet(tmp / "candidates.parquet", index=False)
        write_json(tmp / "MANIFEST.json", {
            "evaluation": pc.evaluation, "folder": ev.folder, "rule": ev.rule,
            "corpus_sha256": corpus_sha256(bset.corpus), "queries_sha256": queries_sha256(bset.queries),
            "routes": [{"name": r.name, "kind": r.kind, "weight": r.weight} for r in routes],
            "dense_models": {r: identity for r, _, _, identity in dense},
            "settings": {"route_depth": pc.route_depth, "judge_depth": pc.judge_depth, "mode": pc.mode,
                         "rrf_k": pc.rrf_k, "bm25_k1": pc.bm25_k1, "bm25_b": pc.bm25_b,
                         "token_pattern": pc.token_pattern, "ngram_n": pc.ngram_n},
            "columns": list(cands.columns), "n_rows": int(len(cands)),
        })
    write_json(lay.metrics, counts)
    return counts


main = stage("pooling", PARAMS, name_option, progress_option,
             reads=("models_root", "cache"), writes=("out", "metrics"))(run)
