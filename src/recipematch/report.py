"""The generated report: a Table-1-shaped table (paper Table 1), a Figure-1-style scatter
(benchmark score against real retrieval kept, one point per trained model; paper Figure 1),
the prompt ladder (paper Table 9) and the factorial grid (paper Tables 11-12), the last two
filled from whichever cells ran and blank ("—") elsewhere; each gap's resampling scheme and the
three-scale DiD (Appendix A), real retrieval kept with recall curves and one seed's full recall
curves (Tables 16-17, ``recall.png``), who built the test (Table 23) and the hit accounting
(Section 7).

Rows, axes and labels come from the declared evaluations (``params.yaml`` ``evaluations``,
recorded in ``metrics/stats.json``): benchmark sets (LLM-built) on the y axis, the first real
set (no generator) on the x axis.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError
from recipematch.io import atomic_write_text, canonical_json
from recipematch.metrics import metric_key, recall_key
from recipematch.report_appendix import (
    external_markdown,
    forgetting_markdown,
    frontier_png,
    frontier_rows,
    regen_markdown,
    remedies_markdown,
    style_markdown,
    table5_lines,
    who_built_markdown,
)
from recipematch.report_common import (
    COLOURS,
    ROLE_ORDER,
    UNRUN,
    fmt_cell,
    fmt_gap,
    ordered_arms,
    ordered_evals,
    pyplot,
    report_ks,
    save_figure,
)
from recipematch.rules import BASELINES, DID_ROLES, GRID_NEGATIVES, GRID_POSITIVES, LADDER, CellSpec, grid_position


def table_markdown(stats: Mapping[str, Any], cells: Mapping[str, Mapping[str, str]]) -> str:
    """The Table-1-shaped Markdown table (paper Table 1): rows = each declared evaluation at
    its ``report_ks`` (benchmark sets, then real sets, then in-family sets), then the DiD
    rows; columns = base, BM25 and the arms (mean ± sd over seeds, percent), then the gaps
    with 95% nested-bootstrap intervals (points). A score on a set that is in-family for the
    arm (built by the arm's own generator, Table 6) is marked † and not read as evidence.

    The gap columns are the declared contrasts, in their declared order (``stats["contrasts"]``).

    Args:
        stats: ``metrics/stats.json``.
        cells: per arm ``{"name", "positives", "negatives"}``.
    """
    evals = stats["evaluations"]
    arms = ordered_arms(stats)
    gaps = list(stats.get("contrasts") or dict.fromkeys(k.split(".")[0] for k in stats["gaps"]))
    head = ["evaluation"] + [a if a not in cells else f"{a} ({cells[a]['name']})" for a in arms]
    head += [g.replace("-", " − ") for g in gaps]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = sorted((n for n in evals if evals[n]["role"] != "external"),  # Table 20's, not Table 1's
                   key=lambda n: (ROLE_ORDER.index(evals[n]["role"]), list(evals).index(n)))
    for name in order:
        ev = evals[name]
        for k in ev["report_ks"]:
            row = [f"{ev['label']} R@{k} ({ev['role'].replace('_', '-')})"]
            for a in arms:
                in_family = a in cells and cells[a]["positives"] in ev.get("in_family_for", ())
                row.append(fmt_cell(stats["arms"][a].get(metric_key(name, k)), mark=" †" if in_family else ""))
            row += [fmt_gap(stats["gaps"].get(metric_key(name, k, g))) for g in gaps]
            lines.append("| " + " | ".join(row) + " |")
    for key in sorted({k.split(".", 1)[1] for k in stats["did"]}):
        b, r = key.rsplit(".", 1)[0].split("-", 1)
        row = [f"DiD {evals[b]['label']} − {evals[r]['label']} R@1"] + [""] * len(arms)
        row += [fmt_gap((stats["did"].get(f"{g}.{key}") or {}).get("did")) for g in gaps]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append("† in-family: the set was built by this arm's own generator (paper Table 6); not read as evidence.")
    return "\n".join(lines)


def tier_columns(stats: Mapping[str, Any]) -> list[str]:
    """The evaluations Tables 9 and 12 show, by role: every benchmark set (the easy and hard
    tiers), then every real set (cross-language strict), each at R@1; in-family sets are left
    out (paper Table 6: not evidence)."""
    evals = stats["evaluations"]
    return [n for n in ordered_evals(stats) if evals[n]["role"] in DID_ROLES]


def _arm_cells(stats: Mapping[str, Any], cells: Mapping[str, Mapping[str, str]]) -> dict[tuple, str]:
    """Grid position (:func:`recipematch.rules.grid_position`) → the first arm (report order)
    that ran that cell."""
    out: dict[tuple, str] = {}
    for a in ordered_arms(stats):
        c = cells.get(a)
        if not c:
            continue
        pos = grid_position(CellSpec(c["positives"], c["negatives"], c.get("volume", "full")))
        out.setdefault(pos, a)
    return out


def _scores(stats: Mapping[str, Any], arm: str | None, cols: list[str]) -> list[str]:
    if arm is None:
        return [UNRUN] * len(cols)
    return [fmt_cell(stats["arms"][arm].get(metric_key(n, 1))) or UNRUN for n in cols]


def ladder_markdown(stats: Mapping[str, Any], cells: Mapping[str, Mapping[str, str]]) -> str:
    """Table 9 (paper Appendix C), the rewriter-prompt ladder: one row per rung of
    :data:`recipematch.rules.LADDER` (the untrained base first), columns = R@1 on each
    benchmark set and each real set (:func:`tier_columns`: easy, hard, cross-language
    strict), mean ± sd over seeds in percent. A rung whose cell did not run is "—".

    Args:
        stats: ``metrics/stats.json`` (``arms`` and ``evaluations``).
        cells: per arm ``{"name", "positives", "negatives", "volume"}``.
    """
    evals = stats["evaluations"]
    cols = tier_columns(stats)
    ran = _arm_cells(stats, cells)
    head = ["rung", "arm (cell)"] + [f"{evals[n]['label']} R@1" for n in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    if "base" in stats["arms"]:
        lines.append("| " + " | ".join(["untrained base", "base", *_scores(stats, "base", cols)]) + " |")
    for label, positives, negatives in LADDER:
        spec = CellSpec(positives, negatives)
        arm = ran.get(grid_position(spec))
        who = f"{arm} ({spec.name})" if arm else f"{UNRUN} ({spec.name})"
        lines.append("| " + " | ".join([label, who, *_scores(stats, arm, cols)]) + " |")
    return "\n".join(lines)


def factorial_markdown(stats: Mapping[str, Any], cells: Mapping[str, Mapping[str, str]]) -> str:
    """Tables 11-12 (paper Appendix C), the factorial as a grid: rows = positives, columns =
    negatives (with the LLM near-misses' volume), each entry the cell's R@1 on every
    :func:`tier_columns` set (easy / hard / cross-language strict; mean ± sd over seeds,
    percent) and the arm that ran it. A cell that did not run is "—"; ``n/a`` marks a pair
    that is no cell (own near-misses of a generator that writes none), and "= …" an entry
    that is another column's cell (CAS's and D1's own negatives; D1's own near-misses have
    no volume).

    Args:
        stats: ``metrics/stats.json``.
        cells: per arm ``{"name", "positives", "negatives", "volume"}``.
    """
    evals = stats["evaluations"]
    cols = tier_columns(stats)
    ran = _arm_cells(stats, cells)
    neg_labels = dict(GRID_NEGATIVES)
    head = ["positives (rows) × negatives (columns)", *(lbl for _, lbl in GRID_NEGATIVES)]
    lines = ["Each entry: " + " / ".join(f"{evals[n]['label']} R@1" for n in cols) + " (arm).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    shown = set()
    for positives, plabel in GRID_POSITIVES:
        row = [plabel]
        for (neg, vol), _ in GRID_NEGATIVES:
            try:
                spec = CellSpec(positives, neg, vol or "full")
            except RecipematchError:
                row.append("n/a")
                continue
            pos = grid_position(spec)
            if pos[1] != (neg, vol):  # the same cell as another column (own negatives of CAS, D1)
                row.append(f"= {neg_labels[pos[1]]}")
                continue
            arm = ran.get(pos)
            shown.add(pos)
            row.append(UNRUN if arm is None else " / ".join(_scores(stats, arm, cols)) + f" ({arm})")
        lines.append("| " + " | ".join(row) + " |")
    extra = sorted(a for p, a in ran.items() if p not in shown)
    if extra:
        lines += ["", "Cells outside the grid: " + ", ".join(
            f"{a} ({cells[a]['name']}): " + " / ".join(_scores(stats, a, cols)) for a in extra)]
    return "\n".join(lines)


def scatter_png(stats: Mapping[str, Any], cells: Mapping[str, Mapping[str, str]], path: Path) -> None:
    """Figure 1 (paper): one panel per benchmark set (a: the first, b: the second), x = the
    first real set's R@1 (real retrieval kept), y = the benchmark set's R@1; one point per
    trained (arm, seed), the base as ×, a dashed line at the base's x; colour = the arm's
    positives, hollow = trained without negatives."""
    plt = pyplot()

    evals = stats["evaluations"]
    # a regenerated version (version_of) is Table 24's, not a panel of its own
    bench = [n for n, e in evals.items() if e["role"] == "benchmark" and not e.get("version_of")][:2]
    real = [n for n, e in evals.items() if e["role"] == "real"]
    xname = real[0] if real else next(n for n in evals if n not in bench)
    fig, axes = plt.subplots(1, len(bench), figsize=(6.0 * len(bench), 4.8), dpi=110, squeeze=False)
    base = stats["arms"].get("base")
    for ax, yname, tag in zip(axes[0], bench, "ab"):
        for a in ordered_arms(stats):
            if a == "bm25":
                continue
            xs = stats["arms"][a][metric_key(xname, 1)]["per_seed"]
            ys = stats["arms"][a][metric_key(yname, 1)]["per_seed"]
            if a == "base":
                ax.scatter(xs, ys, marker="x", s=80, color="black", label="base (untrained)", zorder=3)
                continue
            c = cells.get(a, {})
            colour = COLOURS.get(c.get("positives", ""), "grey")
            hollow = c.get("negatives") == "none"
            ax.scatter(xs, ys, s=40, facecolors="none" if hollow else colour, edgecolors=colour,
                       label=f"{a} ({c.get('name', a)})", alpha=0.85, zorder=2)
        if base:
            ax.axvline(base[metric_key(xname, 1)]["mean"], color="black", linestyle="--", linewidth=1)
        # a long set label is wrapped: one line taller than the axes would be clipped
        ax.set_xlabel(textwrap.fill(f"real retrieval kept: {evals[xname]['label']} R@1 (%)", 70))
        ax.set_ylabel(textwrap.fill(f"benchmark: {evals[yname]['label']} R@1 (%)", 40))
        ax.set_title(f"({tag}) {evals[yname]['label']}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    save_figure(fig, path, title="Benchmark score against real retrieval, one point per trained model")


def recall_markdown(stats: Mapping[str, Any]) -> str:
    """Table 16's shape (paper Appendix D): each model's R@k at every scored cut-off on each
    real set, beside its R@1 on the headline (first) benchmark set; mean ± sd over seeds,
    percent; rows = models. ``""`` without a benchmark or a real set."""
    evals = stats["evaluations"]
    bench = [n for n in ordered_evals(stats) if evals[n]["role"] == "benchmark"]
    real = [n for n in ordered_evals(stats) if evals[n]["role"] == "real"]
    if not bench or not real:
        return ""
    head = [f"{evals[bench[0]]['label']} R@1"] + [f"{evals[r]['label']} " + " / ".join(recall_key(k) for k in report_ks(stats, r))
                                                  for r in real]
    lines = ["| model | " + " | ".join(head) + " |", "|" + "---|" * (len(head) + 1)]
    for a in ordered_arms(stats):
        row = [fmt_cell(stats["arms"][a].get(metric_key(bench[0], 1)))]
        row += [" / ".join(fmt_cell(stats["arms"][a].get(metric_key(r, k))) for k in report_ks(stats, r)) for r in real]
        lines.append(f"| {a} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def _at_seed(cell: Mapping[str, Any] | None, seed: str, *, single: bool) -> str:
    """One training seed's value of a ``stats["arms"]`` entry; a single run (``single``: a
    baseline) gives its one value; ``UNRUN`` when the seed was not scored."""
    if not cell:
        return UNRUN
    if single:
        return f"{cell['per_seed'][0]:.2f}"
    seeds = [str(s) for s in cell.get("seeds") or []]
    return f"{cell['per_seed'][seeds.index(seed)]:.2f}" if seed in seeds else UNRUN


def seed_markdown(stats: Mapping[str, Any]) -> str:
    """Table 17's shape (paper Appendix D): every model at the first training seed
    (``stats["seed_gaps_seed"]``; baselines: their one run), R@k at every scored cut-off on
    each benchmark set; below, each contrast's single-run gap at that seed with its paired
    query bootstrap interval (:func:`recipematch.stats.paired_query_bootstrap`). ``""`` when
    the stats carry no single-run gaps."""
    seed = stats.get("seed_gaps_seed")
    if seed is None or not stats.get("seed_gaps"):
        return ""
    evals = stats["evaluations"]
    bench = [n for n in ordered_evals(stats) if evals[n]["role"] == "benchmark"]
    head = [f"{evals[b]['label']} " + " / ".join(recall_key(k) for k in report_ks(stats, b)) for b in bench]
    lines = [f"Training seed {seed} (baselines: their one run).", "",
             "| model | " + " | ".join(head) + " |", "|" + "---|" * (len(head) + 1)]
    for a in ordered_arms(stats):
        row = [" / ".join(_at_seed(stats["arms"][a].get(metric_key(b, k)), seed, single=a in BASELINES)
                          for k in report_ks(stats, b)) for b in bench]
        lines.append(f"| {a} | " + " | ".join(row) + " |")
    names = [n for n in ordered_evals(stats) if evals[n]["role"] != "external"]
    lines += ["", f"| gap at seed {seed}, R@1 [95%, queries resampled] | " + " | ".join(evals[n]["label"] for n in names)
              + " |", "|" + "---|" * (len(names) + 1)]
    for c in stats.get("contrasts", []):
        lines.append(f"| {c.replace('-', ' − ')} | " + " | ".join(fmt_gap(stats["seed_gaps"].get(metric_key(n, 1, c)))
                                                                 for n in names) + " |")
    return "\n".join(lines)


def _scheme(g: Mapping[str, Any]) -> str:
    seeds = {"independent": "seeds drawn per arm", "paired": "one seed draw shared by both arms",
             "single_run": "single runs (no seed draw)"}.get(g.get("seeds", ""), g.get("seeds", "?"))
    return f"{g.get('scheme', '?')} bootstrap, {seeds}"


def schemes_markdown(stats: Mapping[str, Any]) -> str:
    """Which resampling scheme each gap of Table 1 used (paper Appendix A; the paper's Table 1
    mixes a shared seed draw and per-arm seed draws): per contrast and set, the scheme, and the
    other seed scheme's interval where both apply (two trained arms with the same two or more
    seeds), flagged when the two intervals differ at two decimals."""
    evals = stats["evaluations"]
    other = stats.get("gaps_other_scheme") or {}
    lines = ["| contrast | set | scheme used | interval | other seed scheme | its interval |", "|---|---|---|---|---|---|"]
    n_diff = 0
    for c in stats.get("contrasts", []):
        for n in ordered_evals(stats):
            g = stats["gaps"].get(metric_key(n, 1, c))
            if not g:
                continue
            o = other.get(metric_key(n, 1, c))
            if o:
                differs = (f"{g['low']:.2f}", f"{g['high']:.2f}") != (f"{o['low']:.2f}", f"{o['high']:.2f}")
                n_diff += differs
                alt = [_scheme(o), fmt_gap(o) + (" (differs)" if differs else " (same)")]
            else:
                alt = ["does not apply (a baseline, or fewer than two shared seeds)", ""]
            lines.append(f"| {c.replace('-', ' − ')} | {evals[n]['label']} | {_scheme(g)} | {fmt_gap(g)} | "
                         + " | ".join(alt) + " |")
    lines += ["", f"{n_diff} gap interval(s) differ between the two seed schemes."]
    return "\n".join(lines)


def three_scales_markdown(stats: Mapping[str, Any]) -> str:
    """The DiD on three scales (paper Appendix A): points, log-odds and error reduction, each
    with its 95% interval over seeds (seed-paired) and the number of seeds with a positive DiD;
    below, the pairs left out and why. ``""`` when nothing was computed or skipped."""
    done = stats.get("did_three_scales") or {}
    skipped = stats.get("did_three_scales_skipped") or []
    if not done and not skipped:
        return ""
    evals = stats["evaluations"]
    lines = ["| contrast | benchmark − real | points | log-odds | error reduction | seeds with DiD > 0 |",
             "|---|---|---|---|---|---|"]
    for key, v in done.items():
        pair, sets = key.split(".")[0], key.split(".")[1]
        b, r = sets.split("-", 1)
        cells = []
        for scale in ("points", "log_odds", "error_reduction"):
            d = v[scale]["did"]
            # one seed: the seed bootstrap has nothing to redraw, so there is no interval to show
            cells.append(f"{d['estimate']:+.3f}" + (f" [{d['low']:+.3f}, {d['high']:+.3f}]" if v["points"]["n_seeds"] > 1
                                                    else " (one seed: no interval)"))
        lines.append(f"| {pair.replace('-', ' − ')} | {evals[b]['label']} − {evals[r]['label']} | " + " | ".join(cells)
                     + f" | {v['points']['n_seeds_did_positive']} / {v['points']['n_seeds']} |")
    if skipped:
        lines += ["", "Not computed:", ""] + [f"- {s['key']}: {s['reason']}" for s in skipped]
    return "\n".join(lines)


def hits_markdown(hits: Mapping[str, Any] | None, stats: Mapping[str, Any]) -> str:
    """Section 7's hit accounting (``metrics/hits.json``): per benchmark set and model pair a − b
    at one training seed, the queries a alone, b alone, both and neither rank a gold within the
    top k; then how each query–gold feature separates a's sole wins from the rest (AUC, means,
    Mann–Whitney p, share of wins among as many top-valued queries, share below the median);
    and probe discrimination where the set's queries are probe queries. ``""`` without hits."""
    if not hits or not hits.get("sets"):
        return ""
    evals = stats["evaluations"]
    lines = [f"At training seed {hits['seed']}, a win is a gold within the top {hits['k']}.", ""]
    for name, per in hits["sets"].items():
        for pair, acc in per.items():
            a, b = pair.split("-", 1)
            c = acc["counts"]
            lines += [f"**{evals[name]['label']}, {a} − {b}**: {a} alone {c['a_alone']}, {b} alone {c['b_alone']}, "
                      f"both {c['both']}, neither {c['neither']} (of {acc['n_queries']} queries"
                      + (f"; {acc['missing_gold_text']} without gold text" if acc["missing_gold_text"] else "") + ").", "",
                      f"| feature | AUC ({a} alone vs rest) | mean, wins | mean, rest | p (Mann–Whitney) | "
                      "wins among top-n | wins below median |", "|---|---|---|---|---|---|---|"]
            for f, s in acc["features"].items():
                if s["auc"] is None:
                    lines.append(f"| {f} | — ({s.get('reason', '')}) | | | | | |")
                    continue
                lines.append(f"| {f} | {s['auc']:.3f} | {s['mean_wins']:.3f} | {s['mean_rest']:.3f} | "
                             f"{s['p_mannwhitney']:.3g} | {100 * s['top_share']:.1f}% | {100 * s['below_median_share']:.1f}% |")
            pr = acc.get("probe")
            if pr is not None:
                if pr["n_wins_on_probe"]:
                    lines += ["", f"Probe: {pr['n_wins_on_probe']} of {a}'s sole wins are probe queries; its probe R@1 "
                              f"there {pr['probe_R@1_on_wins']:.2f} against {pr['probe_R@1_on_rest']:.2f} on the other "
                              f"{pr['n_rest']}."]
                else:
                    lines += ["", f"Probe: none of {a}'s sole wins is a probe query ({pr['n_probe_queries_in_set']} of "
                              "the set's queries are), so probe discrimination cannot be split here."]
            lines.append("")
    for s in hits.get("skipped", []):
        lines.append(f"- {s['pair']} skipped: {s['reason']}")
    return "\n".join(lines).rstrip()


def recall_png(stats: Mapping[str, Any], path: Path) -> None:
    """Recall curves (paper Tables 16–17): one panel per declared set that is not external,
    R@k (mean over seeds, percent) against k, one line per model."""
    plt = pyplot()

    evals = stats["evaluations"]
    names = [n for n in ordered_evals(stats) if evals[n]["role"] != "external" and len(report_ks(stats, n)) > 1]
    if not names:
        return
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), dpi=110, squeeze=False)
    for ax, n in zip(axes.flat, names):
        ks = report_ks(stats, n)
        for a in ordered_arms(stats):
            ys = [stats["arms"][a][metric_key(n, k)]["mean"] for k in ks]
            ax.plot(ks, ys, marker="o", label=a, color="black" if a == "base" else None,
                    linestyle="--" if a in ("base", "bm25") else "-")
        ax.set_title(evals[n]["label"], fontsize=8)
        ax.set_xlabel("k")
        ax.set_ylabel("R@k (%)")
        ax.set_xticks(ks)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="best")
    save_figure(fig, path, title="Recall curves, mean over seeds")


def write_report(stats: Mapping[str, Any], cells: Mapping[str, Mapping[str, str]], counts: Mapping[str, Any], out_dir: Path,
                 *, params: Mapping[str, Any], style: Mapping[str, Any] | None = None,
                 hits: Mapping[str, Any] | None = None) -> Path:
    """Write ``report.md``, ``figure1.png``, ``recall.png``, ``frontier.png`` and ``frontier.json``
    (the frontier's points, a DVC plot) under ``out_dir``; returns the
    report path. ``hits`` is ``metrics/hits.json`` (Section 7), or None."""
    out_dir.mkdir(parents=True, exist_ok=True)
    scatter_png(stats, cells, out_dir / "figure1.png")
    recall_png(stats, out_dir / "recall.png")
    frontier_png(stats, out_dir / "frontier.png")
    atomic_write_text(out_dir / "frontier.json", canonical_json(frontier_rows(stats)) + "\n")
    recall, at_seed, scales, sole = (recall_markdown(stats), seed_markdown(stats), three_scales_markdown(stats),
                                     hits_markdown(hits, stats))
    regen, forgetting, remedies = regen_markdown(stats), forgetting_markdown(stats), remedies_markdown(stats)
    lines = ["# recipematch report", "",
             "Recomputed from this run's pipeline outputs (`dvc repro`). Arms are mean ± sample sd over "
             "training seeds (percent); gaps are percentage points with 95% intervals from a nested bootstrap "
             f"over queries and seeds (B = {stats['n_boot']}, seed scheme: {stats['seed_scheme']}); the DiD is "
             "computed inside each replicate (Appendix A); sets with clusters (the cross-language reprints) "
             "resample clusters, then queries within them.", "",
             "Parameters: " + ", ".join(f"`{k}={v}`" for k, v in params.items()), "",
             "## Table 1 (shape of the paper's Table 1)", "", table_markdown(stats, cells), "",
             *([f"Contrasts in params.yaml `contrasts` not shown, an arm of each not run (add it to `arms`): "
                + ", ".join(c.replace("-", " − ", 1) for c in stats["contrasts_skipped"]) + ".", ""]
               if stats.get("contrasts_skipped") else []),
             "### Resampling scheme of each gap", "", schemes_markdown(stats), "",
             *(["### The DiD on three scales (Appendix A)", "", scales, ""] if scales else []),
             "## Figure 1", "", "![benchmark score against real retrieval](figure1.png)", "",
             *(["## Real retrieval kept, with recall curves (Table 16's shape)", "", recall, "",
                "![recall curves](recall.png)", ""] if recall else []),
             *(["## One seed, full recall curves (Table 17's shape)", "", at_seed, ""] if at_seed else []),
             *(["## Forgetting: real retrieval lost against the base (Table 19's retention columns)", "",
                forgetting, ""] if forgetting else []),
             *(["## The two remedies: mixing in weight space and in data space (Table 19's shape)", "", remedies, "",
                "![mixing frontier](frontier.png)", ""] if remedies else []),
             *(["## Hit accounting: sole wins (Section 7)", "", sole, ""] if sole else []),
             *(["## The regeneration defence (Table 24's shape)", "",
                "The same queries with their golds regenerated another way (each version's MANIFEST names how); "
                "R@1, mean ± sd over seeds; the lead columns are gaps with 95% intervals.", "", regen, ""]
               if regen else []),
             "## Table 9 (the prompt ladder; cells not run: —)", "", ladder_markdown(stats, cells), "",
             "## Tables 11-12 (the factorial: positives × negatives; cells not run: —)", "",
             factorial_markdown(stats, cells), "",
             *(["## Style probe and style tracking (Tables 13-14)", "", style_markdown(style), ""] if style else []),
             *(table5_lines(stats) if stats.get("slices") else []),
             *(["## Who built the test decides who wins (Table 23's shape)", "",
                "Each set grouped by who wrote its documents; the winner's lead has a 95% interval that "
                "excludes 0.", "", who_built_markdown(stats), ""] if who_built_markdown(stats) else []),
             *(["## Benchmarks we had no hand in building (Table 20's shape)", "",
                "Graded measures computed by ir_measures (trec_eval's code) on each model's run, x 100; "
                "comparable among this project's models only.", "", external_markdown(stats), ""]
               if external_markdown(stats) else []),
             "## Counts (dropped and failed rows, per stage)", ""]
    for name, c in counts.items():
        lines.append(f"<details><summary>{name}</summary>\n\n```json")
        import json

        lines.append(json.dumps(c, indent=1, sort_keys=True, ensure_ascii=False))
        lines.append("```\n</details>\n")
    path = out_dir / "report.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
