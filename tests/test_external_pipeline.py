"""External benchmarks declared like every other set (issue 21, item 3; paper Section 6, Table 20):
the params that declare them, the external@<name> stage, graded measures in the scoring stages,
their bootstrap gaps and group macro-averages in the stats stage, and the report's table."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, stage_paths

from recipematch.config import load_yaml, parse_params
from recipematch.errors import RecipematchError
from conftest import Outputs

FIX = Path(__file__).parent / "fixtures" / "impliret_mini"
SET = {"folder": "artifacts/external/impliret/unispeaker__arithmetic", "rule": "plain", "role": "external",
       "measures": ["nDCG@10", "R@10"], "group": "impliret"}


def _raw(**evaluation) -> dict:
    raw = load_yaml(REPO / "params.yaml")
    raw["evaluations"]["impliret_ua"] = {**SET, **evaluation}
    return raw


@pytest.mark.parametrize("change, message", [
    ({"measures": []}, r"evaluations.impliret_ua.measures: role external needs at least one graded measure"),
    ({"grade_scale": [2, 1]}, r"evaluations.impliret_ua.grade_scale: \[lowest, highest\]"),
    ({"grade_scale": [0, 1, 2]}, r"evaluations.impliret_ua.grade_scale"),
    ({"measures": [], "role": "real", "gain": "exponential"}, r"gain and grade_scale apply to graded measures"),
    ({"group": "a b"}, r"evaluations.impliret_ua.group: letters, digits"),
    ({"gain": "cubic"}, r"gain"),
])
def test_bad_graded_fields_are_refused_with_their_key(change, message) -> None:
    with pytest.raises(RecipematchError, match=message):
        parse_params(_raw(**change))


@pytest.mark.parametrize("change, message", [
    ({"copy": "/abs/path"}, r"external.impliret.copy must be a folder inside the project"),
    ({"copy": "../elsewhere"}, r"external.impliret.copy must be a folder inside the project"),
    ({"subsets": ["unispeaker__poetry"]}, r"external.impliret.subsets: unknown impliret subsets \['unispeaker__poetry'\]"),
    ({"subsets": ["unispeaker__wknow", "unispeaker__wknow"]}, r"names a subset twice"),
    ({"loader": "bright", "subsets": ["aops"], "max_rows": 5}, r"external.impliret.max_rows: the bright loader"),
    ({"loader": "mteb"}, r"loader"),
])
def test_bad_external_sources_are_refused_with_their_key(change, message) -> None:
    raw = load_yaml(REPO / "params.yaml")
    raw["external"]["impliret"].update(change)
    with pytest.raises(RecipematchError, match=message):
        parse_params(raw)


def test_a_measure_the_library_does_not_know_is_named_with_its_evaluation() -> None:
    from recipematch.graded import check_declared_measures

    p = parse_params(_raw(measures=["nDCG@ten"]))  # the library's names are checked where it is imported
    with pytest.raises(RecipematchError, match=r"evaluations.impliret_ua.measures: measure 'nDCG@ten'"):
        check_declared_measures(p)
    check_declared_measures(parse_params(_raw()))


def _project(tmp_path: Path, raw: dict | None = None) -> tuple:
    (tmp_path / "data" / "impliret").mkdir(parents=True)
    for f in FIX.glob("*.jsonl"):
        shutil.copy(f, tmp_path / "data" / "impliret" / f.name)
    raw = raw or _raw()
    return parse_params(raw), Outputs(tmp_path, raw)


def test_the_external_stage_builds_each_subset_and_counts_it(tmp_path: Path) -> None:
    from recipematch.pipeline import external

    raw = _raw()
    raw["external"]["impliret"]["subsets"] = ["unispeaker__arithmetic", "multispeaker__temporal"]
    p, lay = _project(tmp_path, raw)
    counts = external.run(p.view(external.PARAMS), stage_paths(lay.root, "external@impliret"), name="impliret")
    assert sorted(counts["subsets"]) == ["multispeaker__temporal", "unispeaker__arithmetic"]
    assert counts["subsets"]["unispeaker__arithmetic"]["n_queries"] == 4
    assert json.loads((lay.metrics / "external" / "impliret.json").read_text()) == counts
    m = json.loads((lay.external("impliret") / "unispeaker__arithmetic" / "MANIFEST.json").read_text())
    assert m["revision"] == raw["external"]["impliret"]["revision"] and m["n_docs"] == 4
    with pytest.raises(RecipematchError, match=r"--name 'bright': not declared in params.yaml external"):
        external.run(p.view(external.PARAMS), stage_paths(lay.root, "external@impliret"), name="bright")


def test_a_missing_copy_or_bad_row_stops_the_stage_and_keeps_the_last_build(tmp_path: Path) -> None:
    from recipematch.pipeline import external

    p, lay = _project(tmp_path)
    external.run(p.view(external.PARAMS), stage_paths(lay.root, "external@impliret"), name="impliret")
    before = (lay.external("impliret") / "unispeaker__arithmetic" / "corpus.jsonl").read_bytes()
    bad = tmp_path / "data" / "impliret" / "unispeaker__arithmetic.jsonl"
    bad.write_text(bad.read_text() + '{"question": "q"}\n')
    with pytest.raises(RecipematchError, match=r"unispeaker__arithmetic.jsonl:5: field 'pos_document'"):
        external.run(p.view(external.PARAMS), stage_paths(lay.root, "external@impliret"), name="impliret")
    assert (lay.external("impliret") / "unispeaker__arithmetic" / "corpus.jsonl").read_bytes() == before
    assert not list(lay.p("artifacts", "external").glob("*.partial"))
    shutil.rmtree(tmp_path / "data" / "impliret")
    with pytest.raises(RecipematchError, match=r"external.impliret.copy: .* does not exist .*nothing downloads"):
        external.run(p.view(external.PARAMS), stage_paths(lay.root, "external@impliret"), name="impliret")


def _scored(tmp_path: Path, raw: dict | None = None):
    from recipematch.pipeline import external
    from recipematch.pipeline.evaluate import load_graded, score_models
    from recipematch.benchmarks_data import load_set
    from recipematch.scoring import BM25

    p, lay = _project(tmp_path, raw)
    external.run(p.view(external.PARAMS), stage_paths(lay.root, "external@impliret"), name="impliret")
    ev = p.evaluations["impliret_ua"]
    sets = {"impliret_ua": load_set(lay.p(ev.folder), ev.rule, name="impliret_ua")}
    graded = load_graded(p, lay, sets)
    frames, per_model = score_models([("bm25", BM25, None)], sets, arm="bm25", ks=(1, 10), lay=lay,
                                     bm25=(1.5, 0.75), graded=graded)
    return p, lay, sets, graded, frames, per_model


def test_scoring_stages_add_the_librarys_per_query_measures(tmp_path: Path) -> None:
    import ir_measures

    from recipematch.graded import topk_run
    from recipematch.pipeline.evaluate import write_results
    from recipematch.scoring import BM25, scored_qrels

    p, lay, sets, graded, frames, per_model = _scored(tmp_path)
    df = frames["impliret_ua"][0]
    assert {"measure:nDCG@10", "measure:R@10", "rank", "hit@1"} <= set(df.columns) and len(df) == 4
    bset = sets["impliret_ua"]
    run = topk_run(bset, BM25, 100, bm25_k1=1.5, bm25_b=0.75)
    want = {m.query_id: m.value for m in ir_measures.iter_calc([ir_measures.nDCG @ 10], scored_qrels(bset),
                                                               run.for_library())}
    assert df.set_index("query_id")["measure:nDCG@10"].to_dict() == pytest.approx(want)
    # single-gold qrels: the library's R@10 is our hit@10, query by query
    assert (df["measure:R@10"].to_numpy() == df["hit@10"].to_numpy().astype(float)).all()
    r = per_model["bm25"]["impliret_ua"]
    assert r["measures"]["nDCG@10"] == pytest.approx(float(np.mean(list(want.values()))))
    assert r["graded"]["measure_names"] == {"nDCG@10": "nDCG@10", "R@10": "R@10"} and r["graded"]["run_depth"] == 4
    agg = write_results(lay.stage("evaluate_bm25"), "bm25", frames, per_model, ks=(1, 10))
    assert agg["impliret_ua.measure.nDCG@10.mean"] == pytest.approx(100 * r["measures"]["nDCG@10"], abs=1e-4)
    assert agg["impliret_ua.measure.nDCG@10.sd"] is None  # one run
    back = pd.read_parquet(lay.eval_dir("bm25") / "impliret_ua.parquet")
    assert back["measure:nDCG@10"].tolist() == df["measure:nDCG@10"].tolist()


def test_a_grade_outside_the_declared_scale_stops_before_any_model(tmp_path: Path) -> None:
    from recipematch.benchmarks_data import load_set
    from recipematch.pipeline import external
    from recipematch.pipeline.evaluate import load_graded

    p, lay = _project(tmp_path, _raw(grade_scale=[0, 0]))
    external.run(p.view(external.PARAMS), stage_paths(lay.root, "external@impliret"), name="impliret")
    sets = {"impliret_ua": load_set(lay.p(SET["folder"]), "plain")}
    with pytest.raises(RecipematchError, match=r"qrels/test.tsv:2: field 'score' 1 is outside the declared scale 0..0"):
        load_graded(p, lay, sets)


def _frames(values: dict[str, np.ndarray], name: str, measure: str = "nDCG@10") -> dict:
    """Scored frames for each model from a (n_seeds, n_queries) matrix of fractions."""
    out = {}
    for arm, mat in values.items():
        rows = []
        for s, row in enumerate(mat):
            for q, v in enumerate(row):
                rows.append({"query_id": f"q{q:03d}", "seed": str(s), "rank": 1 if v > 0 else 5,
                             f"measure:{measure}": float(v)})
        out[arm] = {name: pd.DataFrame(rows)}
    return out


def test_stats_give_each_model_its_measure_the_gaps_and_the_groups_macro_average() -> None:
    from recipematch.config import EvaluationConfig
    from recipematch.pipeline.stats import _graded_gaps
    from recipematch.stats import nested_bootstrap_gap

    rng = np.random.default_rng(7)
    a = {m: rng.random((1 if m in ("base", "bm25") else 2, 30)) for m in ("base", "bm25", "recipe")}
    b = {m: rng.random((1 if m in ("base", "bm25") else 2, 20)) for m in ("base", "bm25", "recipe")}
    ranks = {m: {**_frames({m: a[m]}, "s1")[m], **_frames({m: b[m]}, "s2")[m]} for m in a}
    evals = {n: EvaluationConfig(folder=f"x/{n}", rule="plain", role="external",
                                 measures=("nDCG@10",), group="g") for n in ("s1", "s2")}
    out = {"arms": {m: {} for m in a}, "gaps": {}}
    scfg = type("S", (), {"n_boot": 500, "seed": 3, "paired_seeds": False})()
    _graded_gaps(out, evals, ranks, list(a), [("recipe", "base")], scfg)
    assert out["arms"]["recipe"]["s1.measure.nDCG@10"]["mean"] == pytest.approx(100 * a["recipe"].mean(), abs=1e-4)
    macro = out["arms"]["recipe"]["group:g.measure.nDCG@10"]
    assert macro["mean"] == pytest.approx(50 * (a["recipe"].mean() + b["recipe"].mean()), abs=1e-3)
    assert macro["sets"] == ["s1", "s2"]
    own = nested_bootstrap_gap(100 * a["recipe"], 100 * a["base"], n_boot=500, seed=3)
    g1 = out["gaps"]["recipe-base.s1.nDCG@10"]
    assert (g1["estimate"], g1["low"], g1["high"]) == pytest.approx((own.estimate, own.low, own.high))
    gg = out["gaps"]["recipe-base.group:g.nDCG@10"]
    g2 = out["gaps"]["recipe-base.s2.nDCG@10"]
    assert gg["estimate"] == pytest.approx((g1["estimate"] + g2["estimate"]) / 2)
    assert gg["low"] < gg["estimate"] < gg["high"]
    assert out["graded"]["groups"] == {"g": ["s1", "s2"]}


def test_a_group_whose_sets_lead_with_different_measures_is_refused() -> None:
    from recipematch.config import EvaluationConfig
    from recipematch.pipeline.stats import _graded_gaps

    ranks = {"base": {**_frames({"base": np.ones((1, 3))}, "s1")["base"],
                      **_frames({"base": np.ones((1, 3))}, "s2", "AP@100")["base"]}}
    evals = {"s1": EvaluationConfig("x", "plain", "external", "s1", (1,), measures=("nDCG@10",), group="g"),
             "s2": EvaluationConfig("y", "plain", "external", "s2", (1,), measures=("AP@100",), group="g")}
    with pytest.raises(RecipematchError, match=r"group 'g' lead with different measures"):
        _graded_gaps({"arms": {"base": {}}, "gaps": {}}, evals, ranks, ["base"], [],
                     type("S", (), {"n_boot": 100, "seed": 0, "paired_seeds": False})())


def test_the_report_renders_table_20_and_keeps_external_sets_out_of_table_1() -> None:
    from recipematch.report import table_markdown
    from recipematch.report_appendix import external_markdown

    stats = {"evaluations": {"tier": {"label": "tier", "role": "benchmark", "report_ks": [1]},
                             "imp": {"label": "ImpliRet ua", "role": "external", "report_ks": [1]}},
             "arms": {"base": {"tier.R@1": {"mean": 50.0, "sd": None}, "imp.R@1": {"mean": 9.0, "sd": None},
                               "imp.measure.nDCG@10": {"mean": 16.03, "sd": None},
                               "group:impliret.measure.nDCG@10": {"mean": 16.03, "sd": None}},
                      "recipe": {"tier.R@1": {"mean": 60.0, "sd": 1.0}, "imp.measure.nDCG@10": {"mean": 9.23, "sd": 0.5},
                                 "group:impliret.measure.nDCG@10": {"mean": 9.23, "sd": 0.5}}},
             "gaps": {"recipe-base.imp.nDCG@10": {"estimate": -6.8, "low": -8.0, "high": -5.5}},
             "did": {}, "contrasts": [],
             "graded": {"measures": {"imp": ["nDCG@10"]}, "groups": {"impliret": ["imp"]}, "pairs": ["recipe-base"]}}
    md = external_markdown(stats)
    assert "| ImpliRet ua nDCG@10 | impliret (macro over 1 set) nDCG@10 |" in md
    assert "| recipe | 9.23 ± 0.50 | 9.23 ± 0.50 |" in md and "| base | 16.03 | 16.03 |" in md
    assert "| recipe − base | -6.80 [-8.00, -5.50] |" in md
    assert "ImpliRet" not in table_markdown(stats, {})
    assert external_markdown({**stats, "graded": {}}) == ""
    # a remedy row (Appendix E) is Table 19's: neither its row nor its gap shows here
    soup = {"imp.measure.nDCG@10": {"mean": 12.0, "sd": None}, "group:impliret.measure.nDCG@10": {"mean": 12.0, "sd": None}}
    with_soup = {**stats, "arms": {**stats["arms"], "recipe@soup0.3": soup},
                 "remedies": {"recipe": {"soups": {"0.3": "recipe@soup0.3"}, "mixes": {}}},
                 "gaps": {**stats["gaps"], "recipe@soup0.3-base.imp.nDCG@10": {"estimate": -4.0, "low": -5.0, "high": -3.0}},
                 "graded": {**stats["graded"], "pairs": ["recipe-base", "recipe@soup0.3-base"]}}
    md = external_markdown(with_soup)
    assert "soup" not in md and "| recipe − base | -6.80 [-8.00, -5.50] |" in md


def test_plan_names_a_missing_external_copy(tmp_path: Path) -> None:
    from recipematch.plan import build_plan

    raw = copy.deepcopy(load_yaml(REPO / "params-paper.yaml"))
    inputs = {i["input"]: i for i in build_plan(parse_params(raw), tmp_path)["inputs"]}
    assert inputs["external.impliret.copy"]["status"] == "missing"
    assert inputs["external.bright.copy"]["status"] == "missing"
    (tmp_path / "data" / "external" / "bright" / "documents").mkdir(parents=True)
    (tmp_path / "data" / "external" / "bright" / "documents" / "aops-00000-of-00001.parquet").write_bytes(b"")
    inputs = {i["input"]: i for i in build_plan(parse_params(raw), tmp_path)["inputs"]}
    assert inputs["external.bright.copy"]["status"] == "bad"
    assert "examples/aops-*.parquet" in inputs["external.bright.copy"]["detail"]
    assert "documents/theoremqa_theorems-*.parquet" in inputs["external.bright.copy"]["detail"]
    inputs = {i["input"]: i for i in build_plan(parse_params(load_yaml(REPO / "params.yaml")), REPO)["inputs"]}
    assert inputs["external.impliret.copy"]["status"] == "ok"
