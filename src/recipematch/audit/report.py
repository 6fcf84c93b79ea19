"""The audit's report (:mod:`recipematch.audit`): the one-page markdown of an ``audit.json``
and its figure (benchmark R@1 per model, the recipe-sensitivity gap with its interval)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipematch.metrics import metric_key
from recipematch.report_common import pyplot, save_figure

#: the schema tag of ``audit.json`` (fields: :mod:`recipematch.audit`)
SCHEMA = "recipematch.audit/1"


def render_report(audit: Mapping[str, Any], png_name: str) -> str:
    """The one-page markdown report of an ``audit.json``."""
    rs = audit["recipe_sensitivity"]
    lines = ["# Recipe-sensitivity audit", "",
             f"**Recipe sensitivity** ({rs['contrast']}, {rs['evaluation']} {rs['metric']}): "
             f"**{rs['estimate']:+.2f} points** [{rs['low']:+.2f}, {rs['high']:+.2f}] "
             f"({int(rs['level'] * 100)}% nested bootstrap, B = {rs['n_boot']}, {rs['n_seeds_a']} seed(s), "
             f"{rs['n_queries']} queries).", ""]
    if audit.get("did"):
        d = audit["did"]
        lines += [f"**Difference in differences** against the generator-free set `{d['real']}`: "
                  f"{d['estimate']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] (gap there: "
                  f"{d['gap_real']['estimate']:+.2f} [{d['gap_real']['low']:+.2f}, {d['gap_real']['high']:+.2f}]).", ""]
    sp = audit["style_probe"]
    lines += [f"**Style probe** (organic queries vs the benchmark's golds, held-out sources, artefacts stripped): "
              f"AUC {sp['auc']:.3f} [{sp['low']:.3f}, {sp['high']:.3f}]; unstripped {sp['auc_unstripped']:.3f}.", "",
              "| model | " + " | ".join(k for k in next(iter(audit["scores"].values()))) + " |",
              "|---|" + "---|" * len(next(iter(audit["scores"].values())))]
    for m, sc in audit["scores"].items():
        lines.append(f"| {m} | " + " | ".join(f"{v['mean']:.2f}" for v in sc.values()) + " |")
    a = audit["arms"]
    lines += ["", f"Arms: recipe = {a['recipe']['cell']} ({a['recipe']['prompt']}), control = {a['cell']['cell']} "
              f"({a['cell']['prompt']} positives with the recipe's near-misses). Budget {audit['budget']['rows']} rows, "
              f"seeds {audit['seeds']}, base model {audit['model']['base_model']}, generator "
              f"{audit['model']['generator']} ({audit['model']['backend']}).",
              f"Sources: {audit['gates']['sources']} in the pool, {audit['gates']['sources_removed']} removed by the "
              f"gates against the benchmark.", "", f"![scores]({png_name})", ""]
    return "\n".join(lines)


def plot_audit(audit: Mapping[str, Any], path: Path) -> None:
    """Bar chart of benchmark R@1 per model (mean over seeds) and the gap with its interval."""
    plt = pyplot()

    ev = audit["recipe_sensitivity"]["evaluation"]
    models = list(audit["scores"])
    vals = [audit["scores"][m][metric_key(ev, 1)]["mean"] for m in models]
    names = {"cell": "control (cell)"}
    rs = audit["recipe_sensitivity"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3.2), gridspec_kw={"width_ratios": [3, 1]})
    ax1.bar([names.get(m, m) for m in models], vals, color=["#999", "#bbb", "#c0392b", "#2980b9"][: len(models)])
    ax1.set_ylabel(f"{ev} R@1 (%)")
    ax1.set_title("benchmark score per model")
    ax2.errorbar([0], [rs["estimate"]], yerr=[[rs["estimate"] - rs["low"]], [rs["high"] - rs["estimate"]]], fmt="o",
                 color="k", capsize=6)
    ax2.axhline(0, color="#888", lw=0.8)
    ax2.set_xticks([0], ["recipe − control"])
    ax2.set_ylabel("points")
    ax2.set_title("recipe sensitivity")
    save_figure(fig, path, dpi=120)


def json_dumps(obj: Any) -> str:
    """``obj`` as indented JSON, keys sorted, non-ASCII kept."""
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False)
