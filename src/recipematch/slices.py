"""Per-slice scores of an evaluation with named query slices, and each model's gap to the
untrained base on every slice (paper Appendix A, Table 5: same-language reprints, R@1 on the
primary / English / leaked / exact slices, the gap to the base on the primary slice with a
95% nested bootstrap over clusters and seeds).

Input is what the evaluate stages write per model (``artifacts/eval/<model>/<set>.parquet``):
one row per (seed, query) with ``rank`` (-1 = no gold), ``cluster`` and a boolean
``slice_<name>`` column per slice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from recipematch.errors import RecipematchError
from recipematch.metrics import hits_at_k
from recipematch.stats import mean_sd, nested_bootstrap_gap

__all__ = ["slice_names", "slice_table", "slices_markdown"]


def slice_names(frame: pd.DataFrame) -> list[str]:
    """The slice names of a per-query frame (its ``slice_<name>`` columns, in column order)."""
    return [c[len("slice_"):] for c in frame.columns if c.startswith("slice_")]


def _matrix(frame: pd.DataFrame, k: int, where: str) -> tuple[np.ndarray, list[str], pd.DataFrame]:
    """``(n_seeds, n_queries)`` hits at ``k`` (seeds and query ids sorted), the query ids, and
    one row of per-query columns per query in that order."""
    piv = frame.pivot(index="seed", columns="query_id", values="rank").sort_index(axis=0).sort_index(axis=1)
    if piv.isna().any().any():
        raise RecipematchError(f"{where}: some seed lacks some query (rerun its evaluate stage)")
    hits = np.vstack([hits_at_k(row, k) for row in piv.to_numpy().astype(np.int64)]).astype(np.float64)
    per_query = frame.drop_duplicates("query_id").set_index("query_id").reindex(piv.columns)
    return hits, list(piv.columns), per_query


def slice_table(ranks: Mapping[str, pd.DataFrame], *, base: str, k: int, n_boot: int, seed: int,
                level: float = 0.95, paired_seeds: bool = False,
                slices: Sequence[str] | None = None) -> dict[str, Any]:
    """R@k on each slice for every model, and every model's gap to ``base`` on each slice.

    Args:
        ranks: model name -> its per-query frame on one evaluation (columns ``seed``,
            ``query_id``, ``rank``, ``slice_<name>`` booleans; ``cluster`` optional). Every
            model must hold the same queries.
        base: the model every gap is taken against (the untrained base in Table 5).
        k: the cut-off (Table 5: 1).
        n_boot, seed, level, paired_seeds: the nested bootstrap
            (:func:`recipematch.stats.nested_bootstrap_gap`; clusters, then queries within
            each drawn cluster, when the frames have ``cluster``; the paper: B = 5,000).
        slices: slice names (default: every ``slice_<name>`` column of ``base``'s frame).

    Returns:
        ``{"k", "slices", "n": {slice: queries}, "models": {model: {slice: {"mean", "sd",
        "per_seed"}}}, "gap_to_base": {model: {slice: interval dict}}}``; R@k and gaps in
        percentage points (0-100). A slice with no query has ``mean`` ``None`` and no gap.
        ``base`` has no gap entry.

    Raises:
        RecipematchError: ``base`` missing, a model scored on other queries or with other
            slice labels, an unknown slice, or a frame without the columns named above.
    """
    if base not in ranks:
        raise RecipematchError(f"slice table: no frame for the base model {base!r}")
    need = {"seed", "query_id", "rank"}
    for name, f in ranks.items():
        if not need <= set(f.columns):
            raise RecipematchError(f"slice table: model {name!r}: frame lacks columns {sorted(need - set(f.columns))}")
    names = list(slices) if slices is not None else slice_names(ranks[base])
    mats = {m: _matrix(f, k, f"model {m!r}") for m, f in ranks.items()}
    hb, qids, pq = mats[base]
    for name in names:
        if f"slice_{name}" not in pq.columns:
            raise RecipematchError(f"slice table: the base's frame has no slice {name!r} (column slice_{name})")
    masks = {s: pq[f"slice_{s}"].to_numpy().astype(bool) for s in names}
    clusters = pq["cluster"].astype(str).to_numpy() if "cluster" in pq.columns else None
    out: dict[str, Any] = {"k": k, "slices": names, "n": {s: int(masks[s].sum()) for s in names},
                           "models": {}, "gap_to_base": {}}
    for m, (h, q, pqm) in mats.items():
        if q != qids:
            raise RecipematchError(f"slice table: model {m!r} was scored on other queries than {base!r}")
        for s in names:
            if f"slice_{s}" not in pqm.columns or not np.array_equal(pqm[f"slice_{s}"].to_numpy().astype(bool),
                                                                     masks[s]):
                raise RecipematchError(f"slice table: model {m!r} labels slice {s!r} differently from {base!r}")
        out["models"][m] = {}
        for s in names:
            if not masks[s].any():
                out["models"][m][s] = {"mean": None, "sd": None, "per_seed": []}
                continue
            per_seed = 100.0 * h[:, masks[s]].mean(axis=1)
            mu, sd = mean_sd(per_seed)
            out["models"][m][s] = {"mean": round(float(mu), 4), "sd": None if sd != sd else round(float(sd), 4),
                                   "per_seed": [round(float(x), 4) for x in per_seed]}
        if m == base:
            continue
        out["gap_to_base"][m] = {}
        for s in names:
            if not masks[s].any():
                continue
            g = nested_bootstrap_gap(100.0 * h[:, masks[s]], 100.0 * hb[:, masks[s]], n_boot=n_boot, seed=seed,
                                     clusters=None if clusters is None else clusters[masks[s]],
                                     paired_seeds=paired_seeds, level=level)
            out["gap_to_base"][m][s] = g.to_dict()
    return out


def slices_markdown(tables: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str] | None = None) -> str:
    """Table 5 (paper Appendix A) as Markdown, one table per set of :func:`slice_table`
    results: a row per model, R@k (mean ± sd over seeds, percent) on each slice, then the
    model's gap to the base on the first slice (the primary slice) with its interval (points).

    Args:
        tables: set name -> :func:`slice_table` result (``metrics/stats.json`` ``slices``).
        labels: set name -> heading label (default: the set name).
    """
    out: list[str] = []
    for name, t in tables.items():
        names, k = t["slices"], t["k"]
        first = names[0] if names else None
        head = ["model"] + [f"{s} R@{k} (n={t['n'][s]})" for s in names]
        head += [f"gap to base, {first} [95%]"] if first else []
        out += [f"**{(labels or {}).get(name, name)}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for m, per in t["models"].items():
            row = [m]
            for s in names:
                c = per[s]
                row.append("" if c["mean"] is None else f"{c['mean']:.2f}" + (f" ± {c['sd']:.2f}" if c["sd"] is not None
                                                                              else ""))
            if first:
                g = t["gap_to_base"].get(m, {}).get(first)
                row.append("" if not g else f"{g['estimate']:+.2f} [{g['low']:+.2f}, {g['high']:+.2f}]")
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out).rstrip("\n")
