"""Stage ``stats``: mean ± sd over seeds on every declared evaluation, nested-bootstrap gaps for
exactly the declared ``contrasts`` (clusters resampled where a set has them), and the
difference in differences of every benchmark set against every real set, computed inside
each replicate (paper Table 1, Appendix A).

Also, for every contrast (Appendix A, Tables 1 and 17):

- ``gaps_other_scheme``: the same gap under the other seed scheme (paired seed draws when
  ``stats.paired_seeds`` is false, independent ones when it is true), for two trained arms with
  the same two or more seeds: Table 1 mixes both schemes, so the report states each gap's and
  gives both where they differ;
- ``seed_gaps``: the single-run gap at the first training seed (``train.seed``; the paper's
  seed 42 of Table 17), by :func:`recipematch.stats.paired_query_bootstrap`;
- ``forgetting``: for every trained row (arms, soups and mixes) and real set, base − row R@1 with its
  nested-bootstrap interval (the points of real retrieval training lost; Appendix E, Table 19);
- ``remedies``: for every arm of ``remedies.arms``, its soup and mix rows by grid value (Table 19);
- ``did_three_scales``: the DiD on points, log-odds and error reduction, seed-paired, over
  seeds (:func:`recipematch.stats.did_three_scales`, B = 10,000), for two trained arms with the
  same seeds; a pair whose per-seed R@1 touches 0 or 100 (undefined on two of the scales) is
  listed in ``did_three_scales_skipped`` with its reason.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from recipematch.errors import RecipematchError
from recipematch.io import write_json
from recipematch.metrics import hits_at_k, metric_key
from recipematch.pipeline.door import StagePaths, stage
from recipematch.pipeline.scored import scored_frame
from recipematch.resample import percentile_interval
from recipematch.rules import BASELINES, MEASURE_PREFIX, mix_label, parse_contrast, remedy_labels, soup_label
from recipematch.stats import (
    did_bootstrap,
    did_three_scales,
    mean_sd,
    nested_bootstrap_gap,
    paired_query_bootstrap,
)

log = logging.getLogger("recipematch")

PARAMS = ("arms", "contrasts", "stats", "evaluate.ks", "evaluations", "remedies.arms", "remedies.soup_alphas",
          "remedies.replay_fractions", "train.seed")


def hit_matrix(ranks, k: int):
    """(n_seeds, n_queries) 0/1 hit matrix at cut-off ``k``; seeds sorted, queries sorted by
    id (identical query order for every arm); cluster labels in that query order or None."""
    import numpy as np

    piv = ranks.pivot(index="seed", columns="query_id", values="rank").sort_index(axis=0).sort_index(axis=1)
    r = piv.to_numpy().astype(np.int64)
    clusters = None
    if "cluster" in ranks.columns:
        first = ranks.drop_duplicates("query_id").set_index("query_id")["cluster"]
        clusters = first.reindex(piv.columns).astype(str).to_numpy()
    hits = np.vstack([hits_at_k(row, k) for row in r]).astype(np.float64)  # rank -1: no gold, a miss
    return hits, list(piv.columns), clusters


def measure_matrix(ranks, column: str):
    """``(n_seeds, n_queries)`` per-query values of graded measure ``column`` (a
    ``measure:<name>`` column of a scored frame, fractions), x 100; seeds and queries sorted
    as :func:`hit_matrix` sorts them; returns ``(matrix, query ids)``.

    Raises:
        RecipematchError: the frame lacks the column (scored before the set named the measure).
    """
    import numpy as np

    if column not in ranks.columns:
        raise RecipematchError(f"no {column} column in the scored frame: rerun the evaluate stages")
    piv = ranks.pivot(index="seed", columns="query_id", values=column).sort_index(axis=0).sort_index(axis=1)
    return 100.0 * piv.to_numpy().astype(np.float64), list(piv.columns)


def _graded_gaps(out, evals, ranks, rows, pairs, scfg) -> None:
    """Table 20's numbers (Section 6): each graded measure of each graded set per model (mean,
    sd, per seed; x 100), and on its first measure the nested-bootstrap gap of every pair in
    ``pairs`` (queries resampled); a ``group`` (ImpliRet's subsets) macro-averages its sets,
    each resampled on its own (set i with bootstrap seed ``stats.seed + i``), into
    ``group:<group>`` entries."""
    import numpy as np

    graded = {n: ev for n, ev in evals.items() if ev.measures}
    libname: dict[str, list[str]] = {}
    for name in graded:  # the library's names, as the scored frames carry them
        cols = [c[len(MEASURE_PREFIX):] for c in ranks["base"][name].columns if c.startswith(MEASURE_PREFIX)]
        libname[name] = cols
        for a in rows:
            for m in cols:
                mat, _ = measure_matrix(ranks[a][name], MEASURE_PREFIX + m)
                per_seed = mat.mean(axis=1)
                mv, sd = mean_sd(per_seed)
                out["arms"][a][f"{name}.measure.{m}"] = {"mean": round(float(mv), 4),
                                                         "sd": None if sd != sd else round(float(sd), 4),
                                                         "per_seed": [round(float(x), 4) for x in per_seed]}
    groups: dict[str, list[str]] = {}
    for name, ev in graded.items():
        if ev.group:
            groups.setdefault(ev.group, []).append(name)
    out["graded"] = {"measures": libname, "groups": groups, "pairs": [f"{x}-{y}" for x, y in pairs]}
    for g, members in groups.items():  # the macro-average of each model over the group's sets
        heads = {libname[n][0] for n in members}
        if len(heads) != 1:
            raise RecipematchError(f"evaluations of group {g!r} lead with different measures {sorted(heads)}: "
                                   "a macro-average needs one")
        m = heads.pop()
        for a in rows:
            per_seed = np.mean([out["arms"][a][f"{n}.measure.{m}"]["per_seed"] for n in members], axis=0)
            mv, sd = mean_sd(per_seed)
            out["arms"][a][f"group:{g}.measure.{m}"] = {"mean": round(float(mv), 4),
                                                        "sd": None if sd != sd else round(float(sd), 4),
                                                        "per_seed": [round(float(x), 4) for x in per_seed],
                                                        "sets": members}
    for x, y in pairs:
        paired = scfg.paired_seeds and x not in BASELINES and y not in BASELINES
        reps: dict[str, tuple] = {}
        for i, name in enumerate(graded):
            m = libname[name][0]
            ha, qa = measure_matrix(ranks[x][name], MEASURE_PREFIX + m)
            hb, qb = measure_matrix(ranks[y][name], MEASURE_PREFIX + m)
            if qa != qb:
                raise RecipematchError(f"arms {x} and {y} were scored on different {name} queries: rerun evaluate")
            gi, r = nested_bootstrap_gap(ha, hb, n_boot=scfg.n_boot, seed=scfg.seed + i, paired_seeds=paired,
                                         return_replicates=True)
            out["gaps"][f"{x}-{y}.{name}.{m}"] = _as_dict(gi)
            reps[name] = (gi, r)
        for g, members in groups.items():
            m = libname[members[0]][0]
            est = float(np.mean([reps[n][0].estimate for n in members]))
            lo, hi = percentile_interval(np.mean([reps[n][1] for n in members], axis=0))
            out["gaps"][f"{x}-{y}.group:{g}.{m}"] = {"estimate": est, "low": lo, "high": hi, "n_boot": scfg.n_boot,
                                                    "scheme": "query, each set of the group on its own",
                                                    "sets": members, "level": 0.95}


def run(p, lay: StagePaths) -> dict:
    """Stage 9: mean ± sd, nested-bootstrap gaps and the DiD (percentage points)."""
    import pandas as pd

    scfg = p.stats
    # the remedies (Appendix E, Table 19) are evaluated rows like the arms: <arm>@soup<alpha>, <arm>@mix<fraction>
    rem = p.remedies
    arms = [*p.arms, *remedy_labels(rem.arms, rem.soup_alphas, rem.replay_fractions)]
    evals = dict(sorted(p.evaluations.items()))
    rows = [*BASELINES, *arms]
    ranks: dict[str, dict[str, Any]] = {}
    for a in rows:
        ranks[a] = {}
        for name in evals:
            path = scored_frame(lay.evals, a, name)
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
                    raise RecipematchError(f"{lay.evals / a / (name + '.parquet')} has no slice_primary column: "
                                           f"rerun the evaluate stage of {a!r}")
                ranks[a][name] = df[df["slice_primary"].astype(bool)]
    out: dict[str, Any] = {"arms": {}, "gaps": {}, "did": {}, "n_boot": scfg.n_boot, "seed": scfg.seed,
                           "seed_scheme": "paired" if scfg.paired_seeds else "independent",
                           "evaluations": {k: asdict(v) for k, v in evals.items()}}
    for a in rows:
        out["arms"][a] = {}
        for name in evals:
            for k in p.evaluate.ks:
                h, _, _ = hit_matrix(ranks[a][name], k)
                per_seed = 100.0 * h.mean(axis=1)
                m, sd = mean_sd(per_seed)
                out["arms"][a][metric_key(name, k)] = {"mean": round(float(m), 4),
                                                   "sd": None if sd != sd else round(float(sd), 4),
                                                   "per_seed": [round(float(x), 4) for x in per_seed],
                                                   "seeds": sorted(ranks[a][name]["seed"].unique())}
    bench = [n for n, ev in evals.items() if ev.role == "benchmark"]
    real = [n for n, ev in evals.items() if ev.role == "real"]
    out["contrasts"] = []
    out["contrasts_skipped"] = []
    out["gaps_other_scheme"] = {}
    out["seed_gaps"] = {}
    out["seed_gaps_seed"] = str(p.train.seed)
    out["did_three_scales"] = {}
    out["did_three_scales_skipped"] = []
    pairs: list[tuple[str, str]] = []  # the contrasts run, as parsed
    for x, y in (parse_contrast(c) for c in p.contrasts):
        pair = f"{x}-{y}"
        if not all(a in arms or a in BASELINES for a in (x, y)):
            log.info("contrast %s skipped: %s not among the arms run %s", pair,
                     [a for a in (x, y) if a not in arms and a not in BASELINES], arms)
            out["contrasts_skipped"].append(pair)
            continue
        out["contrasts"].append(pair)
        pairs.append((x, y))
        # seeds are paired only between two trained arms with as many seeds (a baseline is one run)
        paired = scfg.paired_seeds and x not in BASELINES and y not in BASELINES
        hits = {}
        for name in evals:
            ha, qa, ca = hit_matrix(ranks[x][name], 1)
            hb, qb, _ = hit_matrix(ranks[y][name], 1)
            if qa != qb:
                raise RecipematchError(f"arms {x} and {y} were scored on different {name} queries: rerun evaluate")
            if paired and ha.shape[0] != hb.shape[0]:
                raise RecipematchError(f"stats.paired_seeds: arms {x} and {y} have {ha.shape[0]} and {hb.shape[0]} "
                                       f"seeds on {name}: rerun evaluate")
            hits[name] = (100 * ha, 100 * hb, ca)
            g = nested_bootstrap_gap(100 * ha, 100 * hb, n_boot=scfg.n_boot, seed=scfg.seed, clusters=ca,
                                     paired_seeds=paired)
            out["gaps"][metric_key(name, 1, pair)] = _as_dict(g)
            if _same_seeds(ranks, x, y, name):  # Table 1's other scheme, for the report to set beside it
                o = nested_bootstrap_gap(100 * ha, 100 * hb, n_boot=scfg.n_boot, seed=scfg.seed, clusters=ca,
                                         paired_seeds=not scfg.paired_seeds)
                out["gaps_other_scheme"][metric_key(name, 1, pair)] = _as_dict(o)
            one_a, one_b = _at_seed(ranks[x][name], x, p.train.seed), _at_seed(ranks[y][name], y, p.train.seed)
            if one_a is not None and one_b is not None:
                sa, _, _ = hit_matrix(one_a, 1)
                sb, _, _ = hit_matrix(one_b, 1)
                out["seed_gaps"][metric_key(name, 1, pair)] = _as_dict(paired_query_bootstrap(
                    100 * sa[0], 100 * sb[0], n_boot=scfg.n_boot, seed=scfg.seed, clusters=ca))
        for b in bench:
            for r in real:
                d = did_bootstrap(hits[b][0], hits[b][1], hits[r][0], hits[r][1], n_boot=scfg.n_boot, seed=scfg.seed,
                                  real_clusters=hits[r][2], bench_clusters=hits[b][2], paired_seeds=paired)
                out["did"][f"{pair}.{b}-{r}.R@1"] = _as_dict(d)
                _three_scales(out, pair, x, y, b, r, ranks)
    # Table 19's rows (Appendix E): each remedied arm's soups and mixes, by the grid value as written
    out["remedies"] = {a: {"soups": {str(x): soup_label(a, str(x)) for x in rem.soup_alphas},
                           "mixes": {str(x): mix_label(a, str(x)) for x in rem.replay_fractions}} for a in rem.arms}
    # Table 19's retention columns (Appendix E): each trained row's R@1 loss against the base on every real set
    out["forgetting"] = {}
    for a in arms:
        for r in real:
            ha, qa, ca = hit_matrix(ranks[a][r], 1)
            hb, qb, _ = hit_matrix(ranks["base"][r], 1)
            if qa != qb:
                raise RecipematchError(f"{a} and base were scored on different {r} queries: rerun evaluate")
            g = nested_bootstrap_gap(100 * hb, 100 * ha, n_boot=scfg.n_boot, seed=scfg.seed, clusters=ca)
            out["forgetting"][metric_key(r, 1, a)] = _as_dict(g)  # base - arm: points of real retrieval lost
    # Table 20: the graded measures of external sets; gaps of the declared contrasts and of every row against base
    pairs += [(a, "base") for a in rows if a != "base" and (a, "base") not in pairs]
    _graded_gaps(out, evals, ranks, rows, pairs, scfg)
    # Table 5: same-language reprints, R@1 per slice and each model's gap to the base per slice
    from recipematch.slices import slice_table  # lazy: recipematch.slices pulls in pandas

    out["slices"] = {name: slice_table({a: full[a][name] for a in rows}, base="base", k=1, n_boot=scfg.n_boot,
                                       seed=scfg.seed, paired_seeds=False)
                     for name, ev in evals.items() if ev.rule == "samelang"}
    write_json(lay.metrics, out)
    # DVC plot data: one point per model, x = the (first) real set, y = each benchmark set
    pts = []
    if real:
        for a in ["base", *arms]:
            xs = out["arms"][a][metric_key(real[0], 1)]["per_seed"]
            seeds = sorted(ranks[a][real[0]]["seed"].unique())
            for i, (s, xv) in enumerate(zip(seeds, xs)):
                pt = {"arm": a, "seed": s, f"{real[0]}_R@1": xv}
                for b in bench:
                    pt[f"{b}_R@1"] = out["arms"][a][metric_key(b, 1)]["per_seed"][i]
                pts.append(pt)
    write_json(lay.plot, pts)
    return out


def _same_seeds(ranks, x: str, y: str, name: str) -> bool:
    """Two trained arms scored at the same two or more seeds on ``name`` (both seed schemes apply)."""
    if x in BASELINES or y in BASELINES:
        return False
    sx, sy = set(ranks[x][name]["seed"]), set(ranks[y][name]["seed"])
    return sx == sy and len(sx) >= 2


def _at_seed(df, model: str, seed: int):
    """The rows of ``model`` at training seed ``seed`` (a baseline: its one run), or None when absent."""
    if model in BASELINES:
        return df
    one = df[df["seed"] == str(seed)]
    return None if one.empty else one


def _three_scales(out: dict, pair: str, x: str, y: str, b: str, r: str, ranks) -> None:
    """The seed-paired three-scale DiD (Appendix A) of ``x - y`` on benchmark ``b`` against real ``r``."""
    key = f"{pair}.{b}-{r}.R@1"
    if x in BASELINES or y in BASELINES:
        out["did_three_scales_skipped"].append({"key": key, "reason": "a baseline is one run: no seeds to pair"})
        return
    cols = [out["arms"][m][metric_key(s, 1)] for m in (x, y) for s in (b, r)]
    if len({tuple(c["seeds"]) for c in cols}) != 1:
        out["did_three_scales_skipped"].append({"key": key, "reason": "the two arms were scored at different seeds"})
        return
    vals = [c["per_seed"] for c in cols]
    flat = [v for c in vals for v in c]
    if any(v <= 0 or v >= 100 for v in flat):
        out["did_three_scales_skipped"].append({"key": key, "reason": "a per-seed R@1 is 0 or 100: log-odds and "
                                                "error reduction are undefined there"})
        return
    ba, ra, bb, rb = vals
    out["did_three_scales"][key] = did_three_scales(ba, bb, ra, rb, seed=out["seed"])


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


def _main(p, lay: StagePaths) -> dict:
    """Stage 9: mean ± sd over seeds, nested-bootstrap gaps of the declared contrasts and the DiD
    of every benchmark set against every real set (percentage points; Appendix A)."""
    out = run(p, lay)
    return {"gaps": {k: {kk: v[kk] for kk in ("estimate", "low", "high") if kk in v} for k, v in out["gaps"].items()}}


main = stage("stats", PARAMS, reads=("evals",), writes=("metrics", "plot"))(_main)
