"""Stage ``hits``: the hit accounting of paper Section 7 on every benchmark set.

For each pair ``a - b`` of ``hits.contrasts`` whose models ran, at the first training seed
(``train.seed``; the paper reads seed 42): how many queries a alone, b alone, both and neither
rank a gold within the top ``hits.k``, and how a's sole wins differ from the rest by the
query–gold word overlap, LaTeX-span overlap, length ratio, paraphrase depth and the gold's
style percentile (the style stage's scores of its tracking set), with probe discrimination
where the set's queries are also ``hits.probe`` queries (:mod:`recipematch.hits`).

Writes ``metrics/hits.json``: ``{"seed", "k", "sets": {set: {pair: accounting}}, "skipped": [...]}``.
"""

from __future__ import annotations

import logging

from recipematch.benchmarks_data import load_set
from recipematch.beir import doc_text
from recipematch.errors import RecipematchError
from recipematch.hits import hit_accounting
from recipematch.io import write_json
from recipematch.metrics import rule_qrels
from recipematch.pipeline.door import StagePaths, stage
from recipematch.pipeline.scored import scored_frame
from recipematch.rules import BASELINES, parse_contrast

log = logging.getLogger("recipematch")

PARAMS = ("hits", "arms", "train.seed", "evaluations", "style.tracking_set")
#: the evaluation folders it reads (dvc.yaml lists them: recipematch.pipeline.deps): the benchmark sets'
EVAL_DEPS = "role:benchmark"


def _ranks_at_seed(lay: StagePaths, model: str, name: str, seed: int):
    """``{query_id: rank}`` of ``model`` on set ``name`` at ``seed`` (a baseline is its one run)."""
    import pandas as pd

    path = scored_frame(lay.evals, model, name)
    df = pd.read_parquet(path, columns=["seed", "query_id", "rank"])
    if model not in BASELINES:
        df = df[df["seed"].astype(str) == str(seed)]
        if df.empty:
            raise RecipematchError(f"{path} has no rows at seed {seed}: rerun the evaluate stage of {model!r}")
    return dict(zip(df["query_id"].astype(str), df["rank"].astype(int)))


def run(p, lay: StagePaths) -> dict:
    """Sole wins per benchmark set and model pair, and what separates them (Section 7)."""
    import pandas as pd

    cfg = p.hits
    if cfg.probe and cfg.probe not in p.evaluations:
        raise RecipematchError(f"hits.probe {cfg.probe!r} is not a declared evaluation {sorted(p.evaluations)} "
                               "('' = none)")
    seed = p.train.seed
    models = {*BASELINES, *p.arms}
    out: dict = {"seed": seed, "k": cfg.k, "sets": {}, "skipped": []}
    pairs = []
    for text in cfg.contrasts:
        a, b = parse_contrast(text)
        if a in models and b in models:
            pairs.append((a, b))
        else:
            out["skipped"].append({"pair": f"{a}-{b}", "reason": f"{sorted({a, b} - models)} not run"})
    style = None
    scores = lay.style / "scores.parquet"
    if scores.exists():
        df = pd.read_parquet(scores)
        style = dict(zip(df["doc_id"].astype(str), df["style_percentile"].astype(float)))
    probe_hits: dict[str, dict[str, bool]] = {}
    bench = sorted(n for n, ev in p.evaluations.items() if ev.role == "benchmark")
    for name in bench:
        ev = p.evaluations[name]
        bset = load_set(lay.root / ev.folder, ev.rule, name=name, self_mask=ev.self_mask)
        golds = rule_qrels(ev.rule, bset.qrels, query_lang=bset.query_lang or None,
                           gold_tags=bset.gold_tags or None)
        golds = {q: sorted(g) for q, g in golds.items()}
        texts = {d: doc_text(row) for d, row in bset.corpus.items()}
        set_style = style if name == p.style.tracking_set else None
        out["sets"][name] = {}
        for a, b in pairs:
            ra, rb = _ranks_at_seed(lay, a, name, seed), _ranks_at_seed(lay, b, name, seed)
            qids = [q for q in bset.query_ids if q in ra]
            if set(qids) != set(rb) or len(qids) != len(ra):
                raise RecipematchError(f"{a} and {b} were scored on different {name} queries: rerun evaluate")
            probe = None
            if cfg.probe:
                if a not in probe_hits:
                    pr = _ranks_at_seed(lay, a, cfg.probe, seed)
                    probe_hits[a] = {q: r == 0 for q, r in pr.items()}  # probe R@1: the gold ranked first (0-based)
                probe = probe_hits[a]
            acc = hit_accounting(qids, [ra[q] for q in qids], [rb[q] for q in qids], queries=bset.queries,
                                 golds=golds, corpus_text=texts, k=cfg.k, style_percentile=set_style,
                                 probe_hits_a=probe)
            out["sets"][name][f"{a}-{b}"] = acc
            log.info("%s %s-%s at seed %s: %s", name, a, b, seed, acc["counts"])
    write_json(lay.metrics, out)
    return {n: {pr: v["counts"] for pr, v in per.items()} for n, per in out["sets"].items()}


main = stage("hits", PARAMS, reads=("evals", "style"), writes=("metrics",))(run)
