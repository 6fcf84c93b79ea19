"""Stage ``style``: the style probe and style tracking (paper Appendix C, Tables 13–15).

The probe: logistic regression over word 1–2-gram tf-idf, organic problems against each
prompt's rewrites, split by source, artefacts ("Problem:" header, image placeholders)
stripped, the unstripped AUC beside it, AUCs with a bootstrap interval over held-out source
ids. Tracking: for the base model and every trained model, the per-query Spearman ρ between
the model's similarity and the stripped detector's style score over a declared evaluation's
corpus, and the top-k style percentile. Embeddings come from the evaluate stages' cache
(same encoder settings), so tracking re-encodes nothing that was scored.

Besides ``metrics/style.json`` it keeps every tracked document's stripped style score and its
percentile in the corpus's style distribution (``artifacts/style/scores.parquet``: doc_id,
style_score, style_percentile), which the Section 7 hit accounting reads.
"""

from __future__ import annotations

from recipematch.benchmarks_data import load_set
from recipematch.beir import doc_text
from recipematch.errors import RecipematchError
from recipematch.io import write_json
from recipematch.pipeline.door import StagePaths, check_device, stage
from recipematch.pipeline.inputs import corpus_rows, read_pairs, train_seeds
from recipematch.pipeline.models import resolve_model

PARAMS = ("style", "arms", "train.seed", "train.n_seeds", "train.model", "evaluate", "evaluations")
#: the evaluation folder it reads (dvc.yaml lists it: recipematch.pipeline.deps): the tracking set's
EVAL_DEPS = "param:style.tracking_set"


def run(p, lay: StagePaths) -> dict:
    """Stage 11: style probe AUCs (stripped and unstripped) and style tracking per model."""
    import numpy as np

    from recipematch.retrieval import encode_cached  # lazy: recipematch.retrieval pulls in pandas, torch
    from recipematch.style import run_style_probe  # lazy: recipematch.style pulls in sklearn
    from recipematch.style_tracking import style_tracking  # lazy: recipematch.style_tracking pulls in scipy

    from recipematch.pipeline.evaluate import encoder_for  # lazy: tests monkeypatch recipematch.pipeline.evaluate.encoder_for

    cfg = p.style
    check_device("devices.evaluate", p.devices.evaluate)
    organic = {r["doc_id"]: r["text"] for r in corpus_rows(lay)}
    rewrites = {}
    for prompt in cfg.score_prompts:
        rows = read_pairs(lay, prompt)
        if rows is None:
            raise RecipematchError(f"style.score_prompts: no pair file for {prompt!r} (is it in llm.prompts?)")
        rewrites[prompt] = [(r["source_id"], r["positive"]) for r in rows]
    report, stripped, _ = run_style_probe(organic, rewrites, train_prompt=cfg.train_prompt,
                                          test_fraction=cfg.test_fraction, seed=cfg.seed, n_boot=cfg.n_boot,
                                          level=cfg.level, ngram_range=(1, 2), C=cfg.C, max_iter=cfg.max_iter)
    out = {"probe": report.to_metrics(), "tracking": {}}
    if cfg.tracking_set not in p.evaluations:
        raise RecipematchError(f"style.tracking_set {cfg.tracking_set!r} is not a declared evaluation "
                               f"{sorted(p.evaluations)}")
    ev = p.evaluations[cfg.tracking_set]
    bset = load_set(lay.root / ev.folder, ev.rule, name=cfg.tracking_set)
    doc_ids = list(bset.corpus)
    doc_texts = [doc_text(bset.corpus[d]) for d in doc_ids]
    style = stripped.decision_function(doc_texts)
    _write_scores(lay, doc_ids, style)
    pos = {d: i for i, d in enumerate(doc_ids)}
    qids = list(bset.query_ids)
    exclude = np.array([pos.get(q, -1) for q in qids], dtype=np.int64)
    models = [("base", resolve_model(p.train.model))]
    for a in p.arms:
        models += [(f"{a}.seed{s}", str(lay.models_root / a / f"seed_{s}"))
                   for s in train_seeds(p.train.seed, p.train.n_seeds)]
    for label, path in models:
        enc = encoder_for(path, p)
        d_emb = encode_cached(enc, doc_texts, lay.cache, role="document")
        q_emb = encode_cached(enc, [bset.queries[q] for q in qids], lay.cache, role="query")
        t = style_tracking(q_emb, d_emb, style, n_queries=cfg.tracking_queries, seed=cfg.seed, top_k=cfg.top_k,
                           exclude_doc=exclude)
        out["tracking"][label] = {k: (round(v, 4) if isinstance(v, float) else v)
                                  for k, v in t.to_metrics().items()}
    write_json(lay.metrics, out)
    return {"probe": {k: v for k, v in out["probe"].items() if k.endswith(".auc")},
            "tracking": {m: t.get("rho_mean") for m, t in out["tracking"].items()}}


def _write_scores(lay: StagePaths, doc_ids: list[str], style) -> None:
    """``artifacts/style/scores.parquet``: one row per tracked document, written whole or not at all."""
    import os

    import pandas as pd

    from recipematch.style_tracking import style_percentiles  # lazy: recipematch.style_tracking pulls in scipy

    out = lay.out / "scores.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    pd.DataFrame({"doc_id": doc_ids, "style_score": style, "style_percentile": style_percentiles(style)}
                 ).to_parquet(tmp, index=False)
    os.replace(tmp, out)


main = stage("style", PARAMS, reads=("corpus", "pairs", "models_root", "cache"), writes=("out", "metrics"))(run)
