"""What every table and figure of the report shares: the arms' and the sets' order, the colours
of paper Figure 1, and how a score or a gap with its interval is printed."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipematch.config import report_row
from recipematch.rules import EVAL_ROLES

ARM_ORDER = ("base", "bm25", "verified", "reference", "recipe", "cell")


#: colour = the arm's positives (paper Figure 1)
COLOURS = {"cas": "tab:blue", "d4": "tab:green", "d1": "tab:red", "d5": "tab:orange", "bt": "tab:brown",
           "bt3": "tab:pink", "d2": "tab:olive", "d3": "tab:cyan"}


ROLE_ORDER = tuple(EVAL_ROLES)  # the registry's order


def fmt_cell(cell: Mapping[str, Any] | None, *, mark: str = "") -> str:
    if not cell:
        return ""
    sd = cell.get("sd")
    return f"{cell['mean']:.2f}" + (f" ± {sd:.2f}" if sd is not None else "") + mark


def fmt_gap(g: Mapping[str, Any] | None) -> str:
    if not g:
        return ""
    est, lo, hi = g.get("estimate"), g.get("low"), g.get("high")
    return f"{est:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def remedy_rows(stats: Mapping[str, Any]) -> set[str]:
    """The remedies' soup and mix rows (Appendix E), which Table 19 and the forgetting table show."""
    return {lab for r in (stats.get("remedies") or {}).values() for kind in ("soups", "mixes")
            for lab in r[kind].values()}


def ordered_arms(stats: Mapping[str, Any]) -> list[str]:
    """Base, BM25 and the arms in report order; the remedies' soups and mixes (Appendix E) are
    left to Table 19 and the forgetting table."""
    remedy = remedy_rows(stats)
    known = [a for a in ARM_ORDER if a in stats["arms"]]
    return known + sorted(a for a in stats["arms"] if a not in known and a not in remedy)


def with_report_rows(stats: Mapping[str, Any], rows: Mapping[str, Any]) -> dict[str, Any]:
    """``stats`` (``metrics/stats.json``) with each evaluation given its report row, Table 1's
    ``label`` and cut-offs ``report_ks``, from params ``report`` (``rows``: evaluation name ->
    :class:`~recipematch.config.ReportRowConfig`; a set without one is shown under its own name
    at R@1, :func:`~recipematch.config.report_row`). The rows are the report's alone: the
    statistics never read them, so a label edit reruns only the report."""
    evals = {}
    for n, ev in stats["evaluations"].items():
        row = report_row(rows, n)
        evals[n] = {**ev, "label": row.label, "report_ks": list(row.ks)}
    return {**stats, "evaluations": evals}


UNRUN = "—"


def ordered_evals(stats: Mapping[str, Any]) -> list[str]:
    evals = stats["evaluations"]
    return sorted(evals, key=lambda n: (ROLE_ORDER.index(evals[n]["role"]), list(evals).index(n)))


def report_ks(stats: Mapping[str, Any], name: str) -> list[int]:
    """The cut-offs scored on ``name`` (from the keys of ``stats["arms"]["base"]``), ascending."""
    base = stats["arms"].get("base", {})
    return sorted(int(k.split("R@")[1]) for k in base if k.startswith(f"{name}.R@"))


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only, no display), loaded when a figure
    is drawn: matplotlib stays out of every run that writes no figure."""
    import matplotlib  # lazy: matplotlib loads only when a figure is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: after the backend is set

    return plt


def save_figure(fig, path: Path, *, title: str | None = None, dpi: int | None = None) -> None:
    """Lay out ``fig`` (under ``title``), write it to ``path`` (its folder made) with no
    ``Software`` stamp, so the same figure gives the same bytes, and close it."""
    if title is not None:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, **({"dpi": dpi} if dpi is not None else {}), metadata={"Software": None})
    pyplot().close(fig)
