"""Table 23's shape (issue 23, item 3; paper Section 7): sets grouped by who wrote their
documents, the winner being the arm whose lead's interval excludes 0."""

from __future__ import annotations

from recipematch.report_appendix import who_built_markdown


def _stats():
    ev = {"t": {"role": "benchmark", "label": "tier"}, "p": {"role": "in_family", "label": "probe"},
          "r": {"role": "real", "label": "reprints"}, "x": {"role": "diagnostic", "label": "diag"}}
    arms = {a: {f"{n}.R@1": {"mean": m, "sd": None} for n, m in zip("tprx", ms)}
            for a, ms in {"my-recipe": (20, 70, 40, 1), "verified": (10, 75, 50, 1)}.items()}
    gaps = {"my-recipe-verified.t.R@1": {"estimate": 10.0, "low": 4.0, "high": 16.0},
            "my-recipe-verified.p.R@1": {"estimate": -5.0, "low": -12.0, "high": 1.0},
            "my-recipe-verified.r.R@1": {"estimate": -10.0, "low": -15.0, "high": -5.0},
            "my-recipe-verified.x.R@1": {"estimate": 0.0, "low": -1.0, "high": 1.0}}
    return {"evaluations": ev, "arms": arms, "gaps": gaps, "contrasts": ["my-recipe-verified"]}


def test_each_set_is_grouped_by_its_builder_with_the_winner_whose_interval_excludes_zero() -> None:
    md = who_built_markdown(_stats())
    rows = [r for r in md.splitlines() if r.startswith("| the") or r.startswith("| nobody")]
    assert rows == [
        "| the benchmark's LLM generator | tier | 20.00 | 10.00 | +10.00 [+4.00, +16.00] | my-recipe |",
        "| the computer-algebra generator | probe | 70.00 | 75.00 | -5.00 [-12.00, +1.00] | neither (interval spans 0) |",
        "| nobody (real duplicates) | reprints | 40.00 | 50.00 | -10.00 [-15.00, -5.00] | verified |"]
    assert "diag" not in md  # a diagnostic set is no one's test
    assert "my-recipe R@1 | verified R@1" in md  # an arm name holding '-' splits where both halves are arms


def test_no_contrast_no_table() -> None:
    assert who_built_markdown({**_stats(), "contrasts": []}) == ""
