"""The generated report: a Table-1-shaped table (paper Table 1) and a Figure-1-style scatter
(benchmark score against real retrieval kept, one point per trained model; paper Figure 1).

In the embedded default the "benchmark" is the LLM-built tier (query = source problem, gold
= its recorded D1 rewrite) and the "real retrieval" axis is the generator-free near-miss
probe (no LLM wrote it); at paper scale the same code reads MathNet-Retrieve tiers and the
cross-language duplicate set.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipematch.io import atomic_write_text

ARM_ORDER = ("base", "verified", "reference", "recipe", "cell")
TEST_LABELS = {"llm_tier": "LLM-built tier", "probe": "near-miss probe (corpus + probe)", "probe_only": "near-miss probe (probe only)"}
COLOURS = {"base": "black", "verified": "tab:blue", "reference": "tab:green", "recipe": "tab:red", "cell": "tab:purple"}


def _fmt(cell: Mapping[str, Any] | None) -> str:
    if not cell:
        return ""
    sd = cell.get("sd")
    return f"{cell['mean']:.2f}" + (f" ± {sd:.2f}" if sd is not None else "")


def _gap(g: Mapping[str, Any] | None) -> str:
    if not g:
        return ""
    est, lo, hi = g.get("estimate"), g.get("low"), g.get("high")
    return f"{est:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def table_markdown(stats: Mapping[str, Any], cells: Mapping[str, str], ks=(1, 5, 10)) -> str:
    """The Table-1-shaped Markdown table: rows = evaluation × R@k, columns = arms (mean ± sd
    over seeds, percent) then gaps with 95% nested-bootstrap intervals (points)."""
    arms = [a for a in ARM_ORDER if a in stats["arms"]]
    gaps = [g for g in ("recipe-verified", "recipe-reference", "cell-verified", "cell-reference")
            if any(k.startswith(g + ".") for k in stats["gaps"])]
    head = ["evaluation"] + [a if a not in cells or a == cells.get(a) else f"{a} ({cells[a]})" for a in arms] + [g.replace("-", " − ") for g in gaps]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t, label in TEST_LABELS.items():
        for k in ks:
            row = [f"{label} R@{k}"] + [_fmt(stats["arms"][a].get(f"{t}.R@{k}")) for a in arms]
            row += [_gap(stats["gaps"].get(f"{g}.{t}.R@{k}")) for g in gaps]
            lines.append("| " + " | ".join(row) + " |")
    row = ["DiD LLM tier − probe R@1"] + [""] * len(arms)
    row += [_gap((stats["did"].get(f"{g}.llm_tier-probe.R@1") or {}).get("did")) for g in gaps]
    lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def scatter_png(stats: Mapping[str, Any], cells: Mapping[str, str], path: Path) -> None:
    """Figure-1-style scatter: x = probe R@1 (real retrieval), y = LLM-built tier R@1; one
    point per trained (arm, seed), the base as ×, a dashed line at the base's x, hollow
    markers for cells trained without negatives (paper Figure 1 conventions)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=120)
    base = stats["arms"].get("base")
    for a in ARM_ORDER:
        if a not in stats["arms"]:
            continue
        xs = stats["arms"][a]["probe.R@1"]["per_seed"]
        ys = stats["arms"][a]["llm_tier.R@1"]["per_seed"]
        label = a if a not in cells else f"{a} ({cells[a]})"
        if a == "base":
            ax.scatter(xs, ys, marker="x", s=80, color="black", label="base (untrained)", zorder=3)
        else:
            hollow = "xnone" in cells.get(a, "")  # paper Figure 1: hollow = trained without negatives
            colour = COLOURS.get(a, "grey")
            ax.scatter(xs, ys, s=40, facecolors="none" if hollow else colour, edgecolors=colour, label=label,
                       alpha=0.85, zorder=2)
    if base:
        ax.axvline(base["probe.R@1"]["mean"], color="black", linestyle="--", linewidth=1)
    ax.set_xlabel("real retrieval kept: near-miss probe R@1 (%)")
    ax.set_ylabel("benchmark score: LLM-built tier R@1 (%)")
    ax.set_title("Benchmark score against real retrieval, one point per trained model")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def write_report(stats: Mapping[str, Any], cells: Mapping[str, str], counts: Mapping[str, Any], out_dir: Path,
                 *, params: Mapping[str, Any]) -> Path:
    """Write ``report.md`` and ``figure1.png`` under ``out_dir``; returns the report path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    scatter_png(stats, cells, out_dir / "figure1.png")
    lines = ["# recipematch report", "",
             "Recomputed from this run's pipeline outputs (`dvc repro`). Arms are mean ± sample sd over "
             "training seeds (percent); gaps are percentage points with 95% intervals from a nested bootstrap "
             f"over queries and seeds (B = {stats['n_boot']}, seed scheme: {stats['seed_scheme']}); the DiD is "
             "computed inside each replicate (Appendix A).", "",
             "Parameters: " + ", ".join(f"`{k}={v}`" for k, v in params.items()), "",
             "## Table 1 (shape of the paper's Table 1)", "", table_markdown(stats, cells), "",
             "## Figure 1", "", "![benchmark score against real retrieval](figure1.png)", "",
             "## Counts (dropped and failed rows, per stage)", ""]
    for name, c in counts.items():
        lines.append(f"<details><summary>{name}</summary>\n\n```json")
        import json

        lines.append(json.dumps(c, indent=1, sort_keys=True, ensure_ascii=False))
        lines.append("```\n</details>\n")
    path = out_dir / "report.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
