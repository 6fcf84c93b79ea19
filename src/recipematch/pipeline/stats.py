"""Stage ``stats``: mean ± sd over seeds, nested-bootstrap gaps and the difference in
differences (paper Appendix A)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from recipematch.errors import RecipematchError
from recipematch.io import write_json
from recipematch.pipeline.door import Layout, stage
from recipematch.pipeline.evaluate import TESTS
from recipematch.rules import CONTRASTS

PARAMS = ("arms", "stats", "evaluate.ks")

log = logging.getLogger("recipematch")

def _hits(ranks, arm: str, test: str, k: int):
    """(n_seeds, n_queries) 0/1 hit matrix of ``arm`` on ``test`` at cut-off ``k``; seeds
    sorted, queries sorted by id (identical query order for every arm)."""
    import numpy as np

    sub = ranks[(ranks["arm"] == arm) & (ranks["test"] == test)]
    piv = sub.pivot(index="seed", columns="query_id", values="rank").sort_index(axis=0).sort_index(axis=1)
    r = piv.to_numpy()
    return ((r >= 0) & (r < k)).astype(np.float64), list(piv.columns)  # rank -1: no gold, a miss


def run(p, lay: Layout) -> dict:
    """Mean ± sd per arm, nested-bootstrap gaps between arms and the difference in
    differences (LLM-built tier gap − probe gap), all in percentage points (Appendix A)."""
    import pandas as pd

    from recipematch.stats import did_bootstrap, mean_sd, nested_bootstrap_gap

    scfg = p.stats
    arms = list(p.arms)
    ranks = pd.concat([pd.read_parquet(lay.eval_dir(a) / "ranks.parquet") for a in ["base", *arms]], ignore_index=True)
    ranks["seed"] = ranks["seed"].astype(str)
    out: dict[str, Any] = {"arms": {}, "gaps": {}, "did": {}, "n_boot": scfg.n_boot, "seed": scfg.seed,
                           "seed_scheme": "paired" if scfg.paired_seeds else "independent"}
    for a in ["base", *arms]:
        out["arms"][a] = {}
        for t in TESTS:
            for k in p.evaluate.ks:
                h, _ = _hits(ranks, a, t, k)
                per_seed = 100.0 * h.mean(axis=1)
                m, sd = mean_sd(per_seed)
                out["arms"][a][f"{t}.R@{k}"] = {"mean": round(float(m), 4), "sd": None if sd != sd else round(float(sd), 4),
                                                 "per_seed": [round(float(x), 4) for x in per_seed]}
    contrasts = [(x, y) for x, y in CONTRASTS if x in arms and y in arms]
    for x, y in contrasts:
        name = f"{x}-{y}"
        for t in TESTS:
            ha, qa = _hits(ranks, x, t, 1)
            hb, qb = _hits(ranks, y, t, 1)
            if qa != qb:
                raise RecipematchError(f"arms {x} and {y} were scored on different {t} queries: rerun evaluate")
            g = nested_bootstrap_gap(100 * ha, 100 * hb, n_boot=scfg.n_boot, seed=scfg.seed, paired_seeds=scfg.paired_seeds)
            out["gaps"][f"{name}.{t}.R@1"] = _as_dict(g)
        ba, _ = _hits(ranks, x, "llm_tier", 1)
        bb, _ = _hits(ranks, y, "llm_tier", 1)
        ra, _ = _hits(ranks, x, "probe", 1)
        rb, _ = _hits(ranks, y, "probe", 1)
        d = did_bootstrap(100 * ba, 100 * bb, 100 * ra, 100 * rb, n_boot=scfg.n_boot, seed=scfg.seed,
                          paired_seeds=scfg.paired_seeds)
        out["did"][f"{name}.llm_tier-probe.R@1"] = _as_dict(d)
    write_json(lay.metrics / "stats.json", out)
    # DVC plot data: one point per trained model
    pts = []
    for a in ["base", *arms]:
        llm = out["arms"][a]["llm_tier.R@1"]["per_seed"]
        prb = out["arms"][a]["probe.R@1"]["per_seed"]
        seeds = sorted(ranks[ranks["arm"] == a]["seed"].unique())
        for s, yv, xv in zip(seeds, llm, prb):
            pts.append({"arm": a, "seed": s, "probe_R@1": xv, "llm_tier_R@1": yv})
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
