"""The report's later tables: regenerated golds (Appendix E, Table 24), the remedies and their
frontier (Appendix E, Table 19), forgetting, style tracking (Appendix C), the external benchmarks
(Section 6, Tables 20 and 22), the Table-5 slice counts and who built the test (Table 23)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipematch.metrics import metric_key
from recipematch.report_common import (
    fmt_cell,
    fmt_gap,
    ordered_arms,
    ordered_evals,
    pyplot,
    remedy_rows,
    report_ks,
    save_figure,
)


def regen_markdown(stats: Mapping[str, Any]) -> str:
    """Table 24's shape (paper Appendix E, the regeneration defence): for each benchmark set
    with regenerated versions (evaluations whose ``version_of`` names it), rows = the original
    golds and each version, columns = every model's R@1 (mean ± sd over seeds) and the recipe
    arm's lead over each other model in the declared contrasts (95% interval; every declared
    contrast when none starts with the recipe arm). ``""`` when no set has a version."""
    evals = stats["evaluations"]
    arms = ordered_arms(stats)
    contrasts = list(stats.get("contrasts", []))
    leads = [c for c in contrasts if c.startswith("recipe-")] or contrasts
    out = []
    for orig in ordered_evals(stats):
        versions = [n for n in ordered_evals(stats) if evals[n].get("version_of") == orig]
        if not versions:
            continue
        head = ["gold documents", *arms, *(c.replace("-", " − ") for c in leads)]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for n in [orig, *versions]:
            row = [evals[n]["label"] + (" (original)" if n == orig else "")]
            row += [fmt_cell(stats["arms"][a].get(metric_key(n, 1))) for a in arms]
            row += [fmt_gap(stats["gaps"].get(metric_key(n, 1, c))) for c in leads]
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out).rstrip()


def _remedy_lines(stats: Mapping[str, Any], arm: str) -> tuple[list[tuple[str, str, float]], list[tuple[str, str, float]]]:
    """One remedied arm's two lines of Table 19 (Appendix E), each a list of ``(label, what,
    share of the arm)`` from the untrained end to the arm: weight space = base (α 0), the soups
    by α, the arm (α 1); data space = the arm (no replay), then its mixes by replay fraction
    (the arm's share of training rows, 1 − f). Rows not scored are left out."""
    rem = stats["remedies"][arm]
    have = stats["arms"]
    soups = sorted(((float(x), lab) for x, lab in rem["soups"].items() if lab in have), key=lambda t: t[0])
    mixes = sorted(((float(x), lab) for x, lab in rem["mixes"].items() if lab in have), key=lambda t: t[0])
    weight = [("base", "untrained base", 0.0), *((lab, f"soup α = {a:g}", a) for a, lab in soups if 0 < a < 1),
              (arm, "the arm", 1.0)]
    data = [(arm, "the arm, no replay", 1.0), *((lab, f"replay {f:.0%} of rows", 1 - f) for f, lab in mixes)]
    return weight, data


def remedies_markdown(stats: Mapping[str, Any]) -> str:
    """Table 19's shape (paper Appendix E): for each arm of ``remedies.arms``, the untrained
    base, the arm, its WiSE-FT soups (mixing in weight space) and its replay mixes (mixing in
    data space); columns = R@1 / R@5 / R@10 on each benchmark set (no regenerated versions)
    and R@1 on each real set with the points lost against the base (95% interval, Table 19's
    retention side). Means over seeds, percent. ``""`` when no arm is remedied."""
    rem = stats.get("remedies") or {}
    if not rem:
        return ""
    evals = stats["evaluations"]
    bench = [n for n in ordered_evals(stats) if evals[n]["role"] == "benchmark" and not evals[n].get("version_of")]
    real = [n for n in ordered_evals(stats) if evals[n]["role"] == "real"]
    head = ["model", "remedy", *(f"{evals[n]['label']} R@{'/'.join(map(str, report_ks(stats, n)))}" for n in bench),
            *(f"{evals[n]['label']} R@1 | lost vs base [95%]" for n in real)]
    ncol = 2 + len(bench) + 2 * len(real)
    out = []
    for arm in rem:
        weight, data = _remedy_lines(stats, arm)
        out += [f"Remedied arm: **{arm}**.", "", "| " + " | ".join(head) + " |", "|" + "---|" * ncol]
        seen = set()
        for label, what, _share in [*weight, *data]:
            if label in seen:
                continue
            seen.add(label)
            a = stats["arms"][label]
            cells = [label, what]
            cells += [" / ".join(f"{a[metric_key(n, k)]['mean']:.2f}" for k in report_ks(stats, n)) for n in bench]
            for n in real:
                g = (stats.get("forgetting") or {}).get(metric_key(n, 1, label))
                cells += [fmt_cell(a.get(metric_key(n, 1))), fmt_gap(g) if label != "base" else "—"]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    out.append("A soup blends the arm's trained weights with the base's (θ = α·θ_arm + (1 − α)·θ_base); a mix "
               "retrains the arm's own cell with replay rows making up the stated share of its training split.")
    return "\n".join(out)


def frontier_rows(stats: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The mixing frontier's points (paper Appendix E, Table 19): one per (remedied arm, line,
    model, real set): ``{arm, remedy: "weight space" | "data space", model, share, real_set,
    retention, benchmark_set, benchmark}`` with the R@1 means in percent; ``benchmark`` is the
    headline (first) benchmark set. ``[]`` when no arm is remedied or no set of either role."""
    rem = stats.get("remedies") or {}
    evals = stats["evaluations"]
    bench = [n for n in ordered_evals(stats) if evals[n]["role"] == "benchmark" and not evals[n].get("version_of")]
    real = [n for n in ordered_evals(stats) if evals[n]["role"] == "real"]
    if not rem or not bench or not real:
        return []
    rows = []
    for arm in rem:
        for remedy, line in zip(("weight space", "data space"), _remedy_lines(stats, arm)):
            for label, _what, share in line:
                a = stats["arms"][label]
                for r in real:
                    rows.append({"arm": arm, "remedy": remedy, "model": label, "share": round(share, 6), "real_set": r,
                                 "retention": round(a[metric_key(r, 1)]["mean"], 4), "benchmark_set": bench[0],
                                 "benchmark": round(a[metric_key(bench[0], 1)]["mean"], 4)})
    return rows


def frontier_png(stats: Mapping[str, Any], path: Path) -> None:
    """The mixing frontier (paper Appendix E, Table 19): one panel per real set, the headline
    benchmark's R@1 against the real set's R@1 (retention), one line per remedy and remedied
    arm from the base or the arm outward, the base marked with a star. Nothing is written
    without frontier points."""
    rows = frontier_rows(stats)
    if not rows:
        return
    plt = pyplot()

    evals = stats["evaluations"]
    real = list(dict.fromkeys(r["real_set"] for r in rows))
    fig, axes = plt.subplots(1, len(real), figsize=(5.4 * len(real), 4.4), dpi=110, squeeze=False)
    for ax, r in zip(axes.flat, real):
        pts = [x for x in rows if x["real_set"] == r]
        for (arm, remedy) in dict.fromkeys((x["arm"], x["remedy"]) for x in pts):
            line = [x for x in pts if x["arm"] == arm and x["remedy"] == remedy]
            ax.plot([x["retention"] for x in line], [x["benchmark"] for x in line], marker="o",
                    linestyle="-" if remedy == "weight space" else "--", label=f"{arm}: {remedy}")
            for x in line:
                if x["model"] not in ("base", arm):
                    ax.annotate(x["model"].split("@", 1)[1], (x["retention"], x["benchmark"]), fontsize=7,
                                xytext=(4, 4), textcoords="offset points")
        b = next(x for x in pts if x["model"] == "base")
        ax.scatter([b["retention"]], [b["benchmark"]], marker="*", s=180, color="black", zorder=5, label="base")
        ax.set_xlabel(textwrap.fill(f"{evals[r]['label']} R@1 (%)", 70))  # wrapped: a long label is not clipped
        ax.set_ylabel(textwrap.fill(f"{evals[pts[0]['benchmark_set']]['label']} R@1 (%)", 40))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    save_figure(fig, path, title="Mixing frontier: benchmark score against real retrieval kept")


def forgetting_markdown(stats: Mapping[str, Any]) -> str:
    """The forgetting table (paper Appendix E, Table 19's retention side): rows = every
    trained model (arms, then soups), columns = each real set: the model's R@1 and the points
    lost against the untrained base (base − model) with its 95% interval; a loss whose
    interval excludes 0 is marked *. ``""`` without such rows."""
    f = stats.get("forgetting") or {}
    if not f:
        return ""
    evals = stats["evaluations"]
    real = [n for n in ordered_evals(stats) if evals[n]["role"] == "real"]
    rows = list(dict.fromkeys(k.rsplit(".", 2)[0] for k in f))
    head = [f"{evals[r]['label']} R@1 (base {fmt_cell(stats['arms']['base'].get(metric_key(r, 1)))}) | lost vs base [95%]" for r in real]
    lines = ["| model | " + " | ".join(head) + " |", "|" + "---|" * (2 * len(real) + 1)]
    for a in rows:
        cells = []
        for r in real:
            g = f.get(metric_key(r, 1, a))
            mark = " *" if g and (g["low"] > 0 or g["high"] < 0) else ""
            cells += [fmt_cell(stats["arms"][a].get(metric_key(r, 1))), fmt_gap(g) + mark]
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    lines += ["", "* the interval excludes 0."]
    return "\n".join(lines)


def style_markdown(style: Mapping[str, Any]) -> str:
    """Tables 13 and 14 (paper Appendix C): the style probe's AUC per prompt (stripped, with
    its 95% bootstrap interval over held-out sources, and unstripped), and each model's style
    tracking (mean per-query Spearman ρ between similarity and style, top-k style percentile)."""
    probe = style["probe"]
    prompts = sorted({k.split(".")[0] for k in probe if k.endswith(".auc") and "." in k})
    lines = [f"Detector trained on `{probe.get('train_prompt')}` rewrites; held-out sources scored.", "",
             "| rewrites | AUC, stripped [95%] | AUC, unstripped [95%] |", "|---|---|---|"]
    for pr in prompts:
        lines.append(f"| {pr} | {probe[f'{pr}.auc']:.3f} [{probe[f'{pr}.auc_low']:.3f}, {probe[f'{pr}.auc_high']:.3f}] | "
                     f"{probe[f'{pr}.unstripped.auc']:.3f} [{probe[f'{pr}.unstripped.auc_low']:.3f}, "
                     f"{probe[f'{pr}.unstripped.auc_high']:.3f}] |")
    lines += ["", "| model | style tracking ρ | top-k style percentile |", "|---|---|---|"]
    for m, t in style["tracking"].items():
        lines.append(f"| {m} | {t['rho_mean']:+.4f} | {t['top_k_percentile_mean']:.2f} |")
    return "\n".join(lines)


def external_markdown(stats: Mapping[str, Any]) -> str:
    """Table 20's shape (paper Section 6): external and other graded sets, each by its first
    graded measure as the library names it (x 100, mean ± sd over seeds), and each group's
    macro-average; rows = models. Below, the gaps with 95% nested-bootstrap intervals
    (queries resampled; a group's sets each on their own). Empty when no set is graded."""
    graded = stats.get("graded") or {}
    measures = graded.get("measures") or {}
    if not measures:
        return ""
    evals = stats["evaluations"]
    cols = [(n, f"{n}.measure.{ms[0]}", f"{evals[n]['label']} {ms[0]}", f"{n}.{ms[0]}") for n, ms in measures.items()]
    for g, members in (graded.get("groups") or {}).items():
        m = measures[members[0]][0]
        cols.append((g, f"group:{g}.measure.{m}", f"{g} (macro over {len(members)} set{'s' * (len(members) > 1)}) {m}",
                     f"group:{g}.{m}"))
    lines = ["| model | " + " | ".join(c[2] for c in cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for a in ordered_arms(stats):
        lines.append(f"| {a} | " + " | ".join(fmt_cell(stats["arms"][a].get(c[1])) for c in cols) + " |")
    lines += ["", "| gap | " + " | ".join(c[2] for c in cols) + " |", "|" + "---|" * (len(cols) + 1)]
    remedy = remedy_rows(stats)  # their rows are Table 19's, so are their gaps
    for pair in graded.get("pairs") or []:
        if any(side in remedy for side in pair.split("-", 1)):
            continue
        lines.append(f"| {pair.replace('-', ' − ')} | " + " | ".join(fmt_gap(stats["gaps"].get(f"{pair}.{c[3]}"))
                                                                   for c in cols) + " |")
    return "\n".join(lines)


def table5_lines(stats: Mapping[str, Any]) -> list[str]:
    """Table 5 (paper Appendix A): same-language reprints per slice, from ``stats["slices"]``."""
    from recipematch.slices import slices_markdown  # lazy: recipematch.slices pulls in pandas

    labels = {n: e["label"] for n, e in stats["evaluations"].items()}
    return ["## Same-language reprints by slice (Table 5)", "", slices_markdown(stats["slices"], labels), ""]


#: who wrote each role's documents (paper Table 23): the LLM-built tiers, the computer-algebra
#: probe, the real duplicates no generator touched
BUILDERS = {"benchmark": "the benchmark's LLM generator", "in_family": "the computer-algebra generator",
            "real": "nobody (real duplicates)"}


def who_built_markdown(stats: Mapping[str, Any], k: int = 1) -> str:
    """Table 23's shape (paper Section 7): for every contrast a − b, each set grouped by who
    wrote its documents, both arms' R@k, the gap with its interval, and the winner: the arm
    whose lead's interval excludes 0, else neither. ``""`` when no contrast has a gap."""
    evals = stats["evaluations"]
    order = [n for role in BUILDERS for n in ordered_evals(stats) if evals[n]["role"] == role]
    out = []
    for c in stats.get("contrasts", []):
        splits = [(c[:i], c[i + 1:]) for i, ch in enumerate(c) if ch == "-"]
        known = [(x, y) for x, y in splits if x in stats["arms"] and y in stats["arms"]]
        if not known:
            continue
        a, b = known[0]
        rows = []
        for n in order:
            g = stats["gaps"].get(metric_key(n, k, c))
            if not g:
                continue
            win = a if g["low"] > 0 else b if g["high"] < 0 else "neither (interval spans 0)"
            rows.append(f"| {BUILDERS[evals[n]['role']]} | {evals[n]['label']} | "
                        f"{fmt_cell(stats['arms'].get(a, {}).get(metric_key(n, k)))} | "
                        f"{fmt_cell(stats['arms'].get(b, {}).get(metric_key(n, k)))} | {fmt_gap(g)} | {win} |")
        if rows:
            out += [f"| documents written by | set | {a} R@{k} | {b} R@{k} | {a} − {b} [95%] | winner |",
                    "|---|---|---|---|---|---|", *rows, ""]
    return "\n".join(out).rstrip()
