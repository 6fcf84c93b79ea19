"""Stage ``stats``: mean ± sd over seeds on every declared evaluation, nested-bootstrap gaps for
exactly the declared ``contrasts`` (clusters resampled where a set has them), and the
difference in differences of every benchmark set against every real set, computed inside
each replicate (paper Table 1, Appendix A)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from recipematch.errors import RecipematchError
from recipematch.io import write_json
from recipematch.pipeline.door import Layout, stage
from recipematch.rules import BASELINES, parse_contrast, soup_label

log = logging.getLogger("recipematch")

PARAMS = ("arms", "contrasts", "stats", "evaluate.ks", "evaluations", "train.soup_alphas")


def _hits(ranks, k: int):
    """(n_seeds, n_queries) 0/1 hit matrix at cut-off ``k``; seeds sorted, queries sorted by
    id (identical query order for every arm); cluster labels in that query order or None."""
    import numpy as np

    from recipematch.metrics import hits_at_k

    piv = ranks.pivot(index="seed", columns="query_id", values="rank").sort_index(axis=0).sort_index(axis=1)
    r = piv.to_numpy().astype(np.int64)
    clusters = None
    if "cluster" in ranks.columns:
        first = ranks.drop_duplicates("query_id").set_index("query_id")["cluster"]
        clusters = first.reindex(piv.columns).astype(str).to_numpy()
    hits = np.vstack([hits_at_k(row, k) for row in r]).astype(np.float64)  # rank -1: no gold, a miss
    return hits, list(piv.columns), clusters


def run(p, lay: Layout) -> dict:
    """Stage 9: mean ± sd, nested-bootstrap gaps and the DiD (percentage points)."""
    import pandas as pd

    from recipematch.stats import did_bootstrap, mean_sd, nested_bootstrap_gap

    scfg = p.stats
    # WiSE-FT soups (Appendix E) are evaluated rows like the arms: <arm>@soup<alpha>
    arms = [*p.arms, *(soup_label(a, str(al)) for a in p.arms for al in p.train.soup_alphas)]
    evals = dict(sorted(p.evaluations.items()))
    rows = [*BASELINES, *arms]
    ranks: dict[str, dict[str, Any]] = {}
    for a in rows:
        ranks[a] = {}
        for name in evals:
            path = lay.eval_dir(a) / f"{name}.parquet"
            if not path.exists():
                raise RecipematchError(f"{path} does not exist: rerun the evaluate stage of {a!r}")
            df = pd.read_parquet(path)
            df["seed"] = df["seed"].astype(str)
            ranks[a][name] = df
    # a same-language set enters the arm table, the gaps and the DiD on its primary slice (paper
    # Table 1: the 125-query slice no training file touches); every slice is in out["slices"]
    full = {a: dict(per) for a, per in ranks.items()}
    for name, ev in evals.items():
        if ev.rule == "samelang":
            for a in rows:
                df = ranks[a][name]
                if "slice_primary" not in df.columns:
                    raise RecipematchError(f"{lay.eval_dir(a) / (name + '.parquet')} has no slice_primary column: "
                                           f"rerun the evaluate stage of {a!r}")
                ranks[a][name] = df[df["slice_primary"].astype(bool)]
    out: dict[str, Any] = {"arms": {}, "gaps": {}, "did": {}, "n_boot": scfg.n_boot, "seed": scfg.seed,
                           "seed_scheme": "paired" if scfg.paired_seeds else "independent",
                           "evaluations": {k: asdict(v) for k, v in evals.items()}}
    for a in rows:
        out["arms"][a] = {}
        for name in evals:
            for k in p.evaluate.ks:
                h, _, _ = _hits(ranks[a][name], k)
                per_seed = 100.0 * h.mean(axis=1)
                m, sd = mean_sd(per_seed)
                out["arms"][a][f"{name}.R@{k}"] = {"mean": round(float(m), 4),
                                                   "sd": None if sd != sd else round(float(sd), 4),
                                                   "per_seed": [round(float(x), 4) for x in per_seed]}
    bench = [n for n, ev in evals.items() if ev.role == "benchmark"]
    real = [n for n, ev in evals.items() if ev.role == "real"]
    out["contrasts"] = []
    out["contrasts_skipped"] = []
    for x, y in (parse_contrast(c) for c in p.contrasts):
        pair = f"{x}-{y}"
        if not all(a in arms or a in BASELINES for a in (x, y)):
            log.info("contrast %s skipped: %s not among the arms run %s", pair,
                     [a for a in (x, y) if a not in arms and a not in BASELINES], arms)
            out["contrasts_skipped"].append(pair)
            continue
        out["contrasts"].append(pair)
        # seeds are paired only between two trained arms with as many seeds (a baseline is one run)
        paired = scfg.paired_seeds and x not in BASELINES and y not in BASELINES
        hits = {}
        for name in evals:
            ha, qa, ca = _hits(ranks[x][name], 1)
            hb, qb, _ = _hits(ranks[y][name], 1)
            if qa != qb:
                raise RecipematchError(f"arms {x} and {y} were scored on different {name} queries: rerun evaluate")
            if paired and ha.shape[0] != hb.shape[0]:
                raise RecipematchError(f"stats.paired_seeds: arms {x} and {y} have {ha.shape[0]} and {hb.shape[0]} "
                                       f"seeds on {name}: rerun evaluate")
            hits[name] = (100 * ha, 100 * hb, ca)
            g = nested_bootstrap_gap(100 * ha, 100 * hb, n_boot=scfg.n_boot, seed=scfg.seed, clusters=ca,
                                     paired_seeds=paired)
            out["gaps"][f"{pair}.{name}.R@1"] = _as_dict(g)
        for b in bench:
            for r in real:
                d = did_bootstrap(hits[b][0], hits[b][1], hits[r][0], hits[r][1], n_boot=scfg.n_boot, seed=scfg.seed,
                                  real_clusters=hits[r][2], bench_clusters=hits[b][2], paired_seeds=paired)
                out["did"][f"{pair}.{b}-{r}.R@1"] = _as_dict(d)
    # Table 5: same-language reprints, R@1 per slice and each model's gap to the base per slice
    from recipematch.slices import slice_table

    out["slices"] = {name: slice_table({a: full[a][name] for a in rows}, base="base", k=1, n_boot=scfg.n_boot,
                                       seed=scfg.seed, paired_seeds=False)
                     for name, ev in evals.items() if ev.rule == "samelang"}
    write_json(lay.metrics / "stats.json", out)
    # DVC plot data: one point per model, x = the (first) real set, y = each benchmark set
    pts = []
    if real:
        for a in ["base", *arms]:
            xs = out["arms"][a][f"{real[0]}.R@1"]["per_seed"]
            seeds = sorted(ranks[a][real[0]]["seed"].unique())
            for i, (s, xv) in enumerate(zip(seeds, xs)):
                pt = {"arm": a, "seed": s, f"{real[0]}_R@1": xv}
                for b in bench:
                    pt[f"{b}_R@1"] = out["arms"][a][f"{b}.R@1"]["per_seed"][i]
                pts.append(pt)
    write_json(lay.metrics / "plots" / "scatter.json", pts)
    return out


def _as_dict(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "__dataclass_fields__"):
        return {k: _as_dict(v) for k, v in asdict(obj).items()}
    if isinstance(obj, dict):
        return {k: _as_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_as_dict(v) for v in obj]
    if hasattr(obj, "item"):
        return obj.item()
    return obj


def _main(p, lay: Layout) -> dict:
    out = run(p, lay)
    return {"gaps": {k: {kk: v[kk] for kk in ("estimate", "low", "high") if kk in v} for k, v in out["gaps"].items()}}


main = stage("stats", PARAMS)(_main)
