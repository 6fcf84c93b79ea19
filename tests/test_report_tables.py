"""The report's Tables 16 and 17, the resampling-scheme statement of Table 1's gaps, the
three-scale DiD and the hit accounting (paper Appendix A, Appendix D, Section 7), rendered
from hand-made stats."""

from __future__ import annotations

from recipematch.report import (
    hits_markdown,
    recall_markdown,
    schemes_markdown,
    seed_markdown,
    three_scales_markdown,
)


def _cell(vals, seeds):
    m = sum(vals) / len(vals)
    return {"mean": m, "sd": None if len(vals) < 2 else 1.0, "per_seed": vals, "seeds": seeds}


def _gap(est, lo, hi, seeds="independent", scheme="query"):
    return {"estimate": est, "low": lo, "high": hi, "seeds": seeds, "scheme": scheme}


EVALS = {"tier": {"label": "tier", "role": "benchmark", "report_ks": [1]},
         "xl": {"label": "cross-language", "role": "real", "report_ks": [1]}}


def _stats():
    arms = {}
    for a, single in (("base", True), ("recipe", False), ("verified", False)):
        seeds = ["run"] if single else ["42", "43"]
        arms[a] = {}
        for n in EVALS:
            for k in (1, 5, 10):
                vals = [10.0 * k] if single else [10.0 * k + 1, 10.0 * k + 3]
                if a == "verified":
                    vals = [v - 5 for v in vals]
                arms[a][f"{n}.R@{k}"] = _cell(vals, seeds)
    return {"evaluations": EVALS, "arms": arms, "contrasts": ["recipe-verified", "recipe-base"],
            "gaps": {"recipe-verified.tier.R@1": _gap(5.0, 1.0, 9.0),
                     "recipe-verified.xl.R@1": _gap(5.0, -1.0, 11.0, scheme="cluster"),
                     "recipe-base.tier.R@1": _gap(2.0, 0.5, 3.5)},
            "gaps_other_scheme": {"recipe-verified.tier.R@1": _gap(5.0, 1.0, 9.0, seeds="paired"),
                                  "recipe-verified.xl.R@1": _gap(5.0, 2.0, 8.0, seeds="paired", scheme="cluster")},
            "seed_gaps_seed": "42",
            "seed_gaps": {"recipe-verified.tier.R@1": _gap(5.0, 2.0, 8.0, seeds="single_run")},
            "did_three_scales": {"recipe-verified.tier-xl.R@1": {
                s: {"did": {"estimate": 0.5, "low": 0.1, "high": 0.9}, "n_seeds_did_positive": 2, "n_seeds": 2}
                for s in ("points", "log_odds", "error_reduction")}},
            "did_three_scales_skipped": [{"key": "recipe-base.tier-xl.R@1",
                                          "reason": "a baseline is one run: no seeds to pair"}]}


def test_schemes_say_which_draw_each_gap_used_and_flag_differences():
    md = schemes_markdown(_stats())
    rows = [r for r in md.splitlines() if r.startswith("| recipe")]
    assert len(rows) == 3
    assert "query bootstrap, seeds drawn per arm" in rows[0] and "(same)" in rows[0]
    assert "cluster bootstrap, one seed draw shared by both arms" in rows[1] and "(differs)" in rows[1]
    assert "does not apply" in rows[2]
    assert md.endswith("1 gap interval(s) differ between the two seed schemes.")


def test_table16_and_table17_shapes():
    s = _stats()
    md = recall_markdown(s)
    assert "| model | tier R@1 | cross-language R@1 / R@5 / R@10 |" in md
    assert "| recipe | 12.00 ± 1.00 | 12.00 ± 1.00 / 52.00 ± 1.00 / 102.00 ± 1.00 |" in md
    md = seed_markdown(s)
    assert "Training seed 42" in md
    assert "| recipe | 11.00 / 51.00 / 101.00 |" in md  # seed 42's own values, not the mean
    assert "| base | 10.00 / 50.00 / 100.00 |" in md  # a baseline: its one run
    assert "| recipe − verified | +5.00 [+2.00, +8.00] |" in md
    assert seed_markdown({**s, "seed_gaps": {}}) == ""


def test_three_scales_rows_and_skips():
    md = three_scales_markdown(_stats())
    assert "| recipe − verified | tier − cross-language | +0.500 [+0.100, +0.900] |" in md
    assert "| 2 / 2 |" in md
    assert "- recipe-base.tier-xl.R@1: a baseline is one run" in md
    assert three_scales_markdown({**_stats(), "did_three_scales": {}, "did_three_scales_skipped": []}) == ""


def test_hit_accounting_section():
    feats = {"word_jaccard": {"auc": 0.639, "mean_wins": 0.21, "mean_rest": 0.17, "p_mannwhitney": 0.001,
                              "top_share": 0.178, "below_median_share": 0.308, "n_wins": 10, "n_rest": 90},
             "latex_jaccard": {"auc": None, "reason": "no sole wins"}}
    hits = {"seed": 42, "k": 1, "skipped": [{"pair": "cell-verified", "reason": "['cell'] not run"}],
            "sets": {"tier": {"recipe-verified": {"counts": {"a_alone": 10, "b_alone": 2, "both": 3, "neither": 85},
                                                  "n_queries": 100, "missing_gold_text": 0, "features": feats,
                                                  "probe": {"n_probe_queries_in_set": 0, "n_wins_on_probe": 0}}}}}
    md = hits_markdown(hits, _stats())
    assert "recipe alone 10, verified alone 2, both 3, neither 85 (of 100 queries)" in md
    assert "| word_jaccard | 0.639 | 0.210 | 0.170 | 0.001 | 17.8% | 30.8% |" in md
    assert "| latex_jaccard | — (no sole wins)" in md
    assert "cannot be split here" in md and "- cell-verified skipped" in md
    assert hits_markdown(None, _stats()) == "" and hits_markdown({"sets": {}}, _stats()) == ""


def test_table24_sets_each_version_beside_the_original():
    from recipematch.report_appendix import regen_markdown

    s = _stats()
    s["evaluations"] = {**EVALS, "tier_v": {"label": "tier, D4 golds", "role": "benchmark", "report_ks": [1],
                                            "version_of": "tier"}}
    for a in s["arms"]:
        s["arms"][a]["tier_v.R@1"] = _cell([3.0], ["run"])
    s["gaps"]["recipe-verified.tier_v.R@1"] = _gap(1.0, -2.0, 4.0)
    md = regen_markdown(s)
    rows = md.splitlines()
    assert rows[0] == "| gold documents | base | verified | recipe | recipe − verified | recipe − base |"
    assert rows[2].startswith("| tier (original) | 10.00 |") and "+5.00 [+1.00, +9.00]" in rows[2]
    assert rows[3].startswith("| tier, D4 golds | 3.00 |") and "+1.00 [-2.00, +4.00]" in rows[3]
    assert regen_markdown(_stats()) == ""


def test_forgetting_table_marks_losses_whose_interval_excludes_zero():
    from recipematch.report_appendix import forgetting_markdown

    s = _stats()
    s["forgetting"] = {"recipe.xl.R@1": _gap(-1.0, -3.0, 1.0, scheme="cluster"),
                       "verified.xl.R@1": _gap(4.0, 1.0, 7.0, scheme="cluster")}
    md = forgetting_markdown(s)
    assert "| model | cross-language R@1 (base 10.00) | lost vs base [95%] |" in md
    assert "| recipe | 12.00 ± 1.00 | -1.00 [-3.00, +1.00] |" in md
    assert "| verified | 7.00 ± 1.00 | +4.00 [+1.00, +7.00] * |" in md
    assert forgetting_markdown(_stats()) == ""
