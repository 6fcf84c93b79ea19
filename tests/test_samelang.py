"""Same-language reprints (paper Appendix A, Table 5) as a declared `real` evaluation: the
four slices scored per model, each model's gap to the base per slice (numbers worked out by
hand on the samelang_mini fixture), and the clear message when the set's folder is missing."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest
from test_benchmarks_data import OneHot
from test_pipeline_e2e import PARAMS as E2E_PARAMS

from recipematch.benchmarks_data import load_samelang, load_set
from recipematch.config import parse_params
from recipematch.errors import RecipematchError
from recipematch.scoring import score
from recipematch.slices import slice_table

FIX = Path(__file__).parent / "fixtures" / "beir" / "samelang_mini"


def _frames():
    """The one-hot encoder's frame (every query's gold at rank 0) for two seeds, and a base
    frame with hand-set ranks: s1 (primary, English) 3, s2 (primary) 0, s3 (leaked) 1, s4 (exact) 0."""
    bset = load_samelang(FIX)
    _, pq = score(bset, OneHot(), ks=(1, 5))
    assert pq["rank"].tolist() == [0, 0, 0, 0]
    trained = pd.concat([pq.assign(seed="42"), pq.assign(seed="43")], ignore_index=True)
    base = pq.assign(seed="0", rank=[3, 0, 1, 0])
    return {"base": base, "trained": trained}


def test_four_slices_and_gaps_to_base_worked_by_hand():
    t = slice_table(_frames(), base="base", k=1, n_boot=500, seed=0)
    assert t["slices"] == ["primary", "english", "leaked", "exact"]
    assert t["n"] == {"primary": 2, "english": 1, "leaked": 1, "exact": 1}
    # base: primary 1 hit of 2 = 50; English s1 missed = 0; leaked s3 at rank 1 = 0; exact 100
    assert {s: v["mean"] for s, v in t["models"]["base"].items()} == {
        "primary": 50.0, "english": 0.0, "leaked": 0.0, "exact": 100.0}
    assert {s: v["mean"] for s, v in t["models"]["trained"].items()} == {
        "primary": 100.0, "english": 100.0, "leaked": 100.0, "exact": 100.0}
    assert t["models"]["trained"]["primary"]["per_seed"] == [100.0, 100.0]
    gaps = t["gap_to_base"]["trained"]
    assert {s: g["estimate"] for s, g in gaps.items()} == {"primary": 50.0, "english": 100.0, "leaked": 100.0,
                                                           "exact": 0.0}
    assert gaps["primary"]["scheme"] == "cluster" and gaps["primary"]["n_clusters"] == 2
    for g in gaps.values():
        assert g["low"] <= g["estimate"] <= g["high"]
    assert (gaps["exact"]["low"], gaps["exact"]["high"]) == (0.0, 0.0)  # both always hit: no spread
    assert "base" not in t["gap_to_base"]


def test_models_on_other_queries_or_slices_are_refused():
    f = _frames()
    with pytest.raises(RecipematchError, match="other queries"):
        slice_table({**f, "trained": f["trained"][f["trained"]["query_id"] != "s4"]}, base="base", k=1, n_boot=100,
                    seed=0)
    relabelled = f["trained"].assign(slice_exact=False)
    with pytest.raises(RecipematchError, match="labels slice 'exact' differently"):
        slice_table({**f, "trained": relabelled}, base="base", k=1, n_boot=100, seed=0)
    with pytest.raises(RecipematchError, match="no slice 'primery'"):
        slice_table(f, base="base", k=1, n_boot=100, seed=0, slices=["primery"])


def test_declared_real_evaluation_and_missing_folder_message(tmp_path):
    p = copy.deepcopy(E2E_PARAMS)
    p["evaluations"]["samelang"] = {"folder": "data/samelang_eval", "rule": "samelang", "role": "real"}
    ev = parse_params(p).evaluations["samelang"]
    assert (ev.rule, ev.role) == ("samelang", "real")
    with pytest.raises(RecipematchError, match=r"folder .*data/samelang_eval does not exist: the same-language "
                                               r"reprint set .* is not in the shipped sample"):
        load_set(tmp_path / ev.folder, ev.rule, name="samelang")
    assert load_set(FIX, "samelang", name="samelang").rule == "samelang"


def test_stats_stage_reports_the_slices_of_a_declared_samelang_set(tmp_path):
    """The stats stage over per-query frames of base, BM25 and two arms: Table 5's slices
    land in stats.json beside the usual gaps (the easy set here is the same fixture read
    under the plain rule, standing in for a benchmark)."""
    from recipematch.pipeline import stats as stats_stage
    from conftest import Outputs

    p = copy.deepcopy(E2E_PARAMS)
    p["arms"] = ["verified", "recipe"]
    p["stats"]["n_boot"] = 200
    p["evaluations"] = {
        "easy": {"folder": "x/easy", "rule": "plain", "role": "benchmark"},
        "samelang": {"folder": "x/samelang", "rule": "samelang", "role": "real"}}
    p["style"] = {**p["style"], "tracking_set": "easy"}
    lay = Outputs(tmp_path, p)
    f = _frames()
    _, easy = score(load_set(FIX, "plain", name="easy"), OneHot(), ks=(1, 5))
    for model, frame in (("base", f["base"]), ("bm25", f["base"]), ("verified", f["base"].assign(seed="42")),
                         ("recipe", f["trained"])):
        d = lay.eval_dir(model)
        d.mkdir(parents=True)
        frame.to_parquet(d / "samelang.parquet", index=False)
        pd.concat([easy.assign(seed=s) for s in sorted(frame["seed"].unique())],
                  ignore_index=True).to_parquet(d / "easy.parquet", index=False)
    out = stats_stage.run(parse_params(p).view(stats_stage.PARAMS), lay.stage("stats"))
    t = out["slices"]["samelang"]
    assert t["models"]["recipe"]["primary"]["mean"] == 100.0 and t["models"]["verified"]["primary"]["mean"] == 50.0
    assert t["gap_to_base"]["recipe"]["english"]["estimate"] == 100.0
    assert t["gap_to_base"]["verified"]["primary"]["estimate"] == 0.0
    # Table 1's same-language row is the primary slice (s1, s2): recipe 100, verified 50
    assert out["arms"]["recipe"]["samelang.R@1"]["mean"] == 100.0
    assert out["arms"]["verified"]["samelang.R@1"]["mean"] == 50.0
    assert out["arms"]["base"]["samelang.R@5"]["mean"] == 100.0
    g = out["gaps"]["recipe-verified.samelang.R@1"]
    assert g["estimate"] == pytest.approx(100.0 - 50.0) and g["n_queries"] == 2 and g["n_clusters"] == 2
    assert out["did"]["recipe-verified.easy-samelang.R@1"]["gap_real"]["n_queries"] == 2
    # ... and the report renders Table 5 from it
    from recipematch.report import write_report
    from recipematch.config import ReportRowConfig
    from recipematch.report_common import with_report_rows

    rows = {"easy": ReportRowConfig("easy", (1,)), "samelang": ReportRowConfig("same-language", (1,))}
    path = write_report(with_report_rows(out, rows), {}, {}, tmp_path / "reports", params={})
    text = path.read_text(encoding="utf-8")
    assert "## Same-language reprints by slice (Table 5)" in text and "**same-language**" in text
    assert ("| model | primary R@1 (n=2) | english R@1 (n=1) | leaked R@1 (n=1) | exact R@1 (n=1) | "
            "gap to base, primary [95%] |") in text
    table5 = text[text.index("## Same-language reprints by slice (Table 5)"):].splitlines()
    row = next(line for line in table5 if line.startswith("| recipe |"))
    assert row.startswith("| recipe | 100.00 ± 0.00 | 100.00 ± 0.00 | 100.00 ± 0.00 | 100.00 ± 0.00 | +50.00 [")
    assert next(line for line in table5 if line.startswith("| base |")).endswith("| 100.00 |  |")


def _release_with_samelang(tmp_path, edit):
    """The mini release's same-language set, with ``edit(metadata)`` applied to its first query."""
    import json
    import shutil

    mini = Path(__file__).parent / "fixtures" / "mini_release"
    rel = tmp_path / "release"
    shutil.copytree(mini, rel)
    path = rel / "samelang_eval" / "queries.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    edit(rows[0]["metadata"])
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return rel


def test_the_released_flags_give_table_5s_slices(tmp_path):
    from recipematch.benchmarks_build import build_crosslingual_folder
    from recipematch.benchmarks_data import load_samelang

    rel = _release_with_samelang(tmp_path, lambda m: None)
    counts = build_crosslingual_folder(rel, tmp_path / "sl", subdir="samelang_eval")
    assert counts["n_queries"] == 6 and counts["n_qrels_rows"] == 6 and counts["n_gold_docs_added"] == 0
    b = load_samelang(tmp_path / "sl")
    got = {k: sorted(q for q, on in zip(b.query_ids, v) if on) for k, v in b.slices.items()}
    assert got == {"primary": ["00ad", "00ak"], "english": ["00ad", "00ak"], "leaked": ["01ly", "01m8"],
                   "exact": ["00as", "00ay"]}
    assert len(set(b.clusters.tolist())) == 3


@pytest.mark.parametrize("edit, match", [
    (lambda m: (m.pop("exact_text_cluster"), m.pop("clean_of_training")),
     r"query '00ad': metadata lacks the slice flags \(paper Table 5\)"),
    (lambda m: m.update(clean_of_training="yes"), r"query '00ad': metadata.clean_of_training must be true or false"),
])
def test_a_queries_file_without_the_slice_flags_is_refused_naming_the_query(tmp_path, edit, match):
    from recipematch.benchmarks_build import build_crosslingual_folder
    from recipematch.benchmarks_data import load_samelang
    from recipematch.errors import RecipematchError

    rel = _release_with_samelang(tmp_path, edit)
    build_crosslingual_folder(rel, tmp_path / "sl", subdir="samelang_eval")
    with pytest.raises(RecipematchError, match=r"set 'samelang': .*queries\.jsonl: " + match):
        load_samelang(tmp_path / "sl")
