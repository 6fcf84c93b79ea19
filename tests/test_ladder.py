"""The prompt ladder and the factorial (paper Tables 9, 11, 12): own-prompt negatives, the
named cells, declared contrasts (config, stats stage) and the Table 9 / 12 report sections."""

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recipematch.cells import MissingInput, assemble_cell
from recipematch.config import load_yaml, parse_params
from recipematch.errors import RecipematchError
from recipematch.io import read_json, read_jsonl_strict, write_jsonl
from recipematch.pipeline import cells as cells_stage
from recipematch.pipeline import corpus as corpus_stage
from recipematch.pipeline import evalsets as evalsets_stage
from recipematch.pipeline import gates as gates_stage
from recipematch.pipeline import specs as specs_stage
from recipematch.pipeline import stats as stats_stage
from conftest import Outputs
from recipematch.report import factorial_markdown, ladder_markdown, table_markdown
from recipematch.rules import LADDER, NAMED_ARMS, CellSpec, grid_position, parse_contrast

REPO = Path(__file__).resolve().parents[1]
MINI = Path(__file__).parent / "fixtures" / "mini_release"


def _row(sid, pos, negs, gen):
    return {"source_id": sid, "anchor": f"anchor {sid}", "positive": pos,
            "positive_provenance": {"generator": gen, "prompt_sha256": "0" * 64, "model_id": "m"},
            "negatives": [{"text": n, "generator": gen, "prompt_sha256": "0" * 64, "model_id": "m"} for n in negs]}


def _files():
    return {
        "cas": [_row("s1", "cas-1", ["cas-neg-1"], "cas"), _row("s2", "cas-2", ["cas-neg-2"], "cas")],
        "d1_recipe": [_row("s1", "d1-1", ["r1", "r2"], "d1_recipe")],
        "d2_paraphrase": [_row("s2", "d2-2", ["p2a", "p2b", "p2c"], "d2_paraphrase"),
                          _row("s1", "d2-1", ["p1a"], "d2_paraphrase"), _row("s3", "d2-3", [], "d2_paraphrase")],
        "d3_style": [_row("s1", "d3-1", ["st1"], "d3_style")],
        "d4_restatement": [_row("s1", "d4-1", [], "d4_restatement")],
    }


# --------------------------------------------------------------------------- own negatives

def test_own_negatives_name_inputs_and_aliases():
    d2 = CellSpec("d2", "own")
    assert d2.name == "d2xown" and d2.inputs() == ["d2_paraphrase"] and d2.negatives_key == "d2_paraphrase"
    assert CellSpec("d3", "own", "matched").inputs() == ["d3_style"]  # own near-misses have no volume
    # CAS's and D1's own negatives are cells that already have a name: one cell, one name
    assert CellSpec("d1", "own") == NAMED_ARMS["recipe"] and CellSpec("d1", "own").name == "d1xrecipe"
    assert CellSpec("cas", "own") == NAMED_ARMS["verified"]
    for positives in ("d4", "d5", "bt", "bt3"):
        with pytest.raises(RecipematchError, match=f"negatives=own: positives={positives} has no near-misses"):
            CellSpec(positives, "own")


def test_every_ladder_rung_and_grid_cell_is_a_named_arm():
    named = {grid_position(s) for s in NAMED_ARMS.values()}
    for _label, positives, negatives in LADDER:
        assert grid_position(CellSpec(positives, negatives)) in named, (positives, negatives)
    assert NAMED_ARMS["d2_own"] == CellSpec("d2", "own") and NAMED_ARMS["d3_own"] == CellSpec("d3", "own")
    # the paper's grid (Table 11): every positives x {none, cas, unrelated, recipe} at the
    # recipe arm's volume (D4 also matched) has a name
    for positives in ("cas", "bt", "bt3", "d4", "d5", "d1"):
        for neg in ("none", "cas", "unrelated", "recipe"):
            assert grid_position(CellSpec(positives, neg, "full")) in named, (positives, neg)
    assert len({s for s in NAMED_ARMS.values()}) == len(NAMED_ARMS)  # no cell named twice


def test_own_cell_assembly_keeps_each_rows_own_near_misses():
    rows, counts = assemble_cell(NAMED_ARMS["d2_own"], _files(), seed=0)
    assert [(r["source_id"], r["positive"]) for r in rows] == [("s1", "d2-1"), ("s2", "d2-2"), ("s3", "d2-3")]
    assert [[n["text"] for n in r["negatives"]] for r in rows] == [["p1a"], ["p2a", "p2b", "p2c"], []]
    assert {n["generator"] for r in rows for n in r["negatives"]} == {"d2_paraphrase"}
    assert counts == {"sources_in": 3, "no_partner": 0, "rows_out": 3}
    # the other pair files do not leak in, and the assembly does not depend on the seed
    assert assemble_cell(NAMED_ARMS["d2_own"], _files(), seed=5)[0] == rows
    only = {"d2_paraphrase": _files()["d2_paraphrase"]}
    assert assemble_cell(NAMED_ARMS["d2_own"], only, seed=0)[0] == rows
    # D2 positives with another prompt's near-misses is a different cell
    other, c2 = assemble_cell(CellSpec("d2", "recipe", "full"), _files(), seed=0)
    assert [r["source_id"] for r in other] == ["s1"] and c2["no_partner"] == 2
    assert [n["text"] for n in other[0]["negatives"]] == ["r1", "r2"]


def test_missing_own_pair_file_names_the_prompt():
    files = _files()
    del files["d3_style"]
    with pytest.raises(MissingInput, match=r"positives=d3 of cell d3xown: pair file 'd3_style'.*llm\.prompts"):
        assemble_cell(NAMED_ARMS["d3_own"], files, seed=0)


# --------------------------------------------------------------------------- contrasts in params

def _params(**over):
    raw = load_yaml(REPO / "params.yaml")
    raw.update(over)
    return raw


def test_parse_contrast():
    assert parse_contrast("recipe - verified") == ("recipe", "verified")
    assert parse_contrast("d2_own-base") == ("d2_own", "base")
    for bad in ("recipe", "recipe - ", "a - b - c", "recipe - recipe"):
        with pytest.raises(RecipematchError):
            parse_contrast(bad)


def test_default_contrasts_are_table_1s_plus_the_audit_contrast():
    p = parse_params(load_yaml(REPO / "params.yaml"))
    assert [parse_contrast(c) for c in p.contrasts] == [
        ("recipe", "verified"), ("recipe", "cell"), ("recipe", "reference"), ("cell", "verified"),
        ("cell", "reference"), ("reference", "verified")]
    assert parse_params(load_yaml(REPO / "params-paper.yaml")).contrasts == p.contrasts


def test_contrasts_cross_checks():
    with pytest.raises(RecipematchError, match=r"contrasts\[1\] 'd9_own - recipe' names \['d9_own'\]: not a named arm"):
        parse_params(_params(contrasts=["recipe - verified", "d9_own - recipe"]))
    # a known arm that is not run is accepted here (the stats stage skips and lists it)
    assert parse_params(_params(contrasts=["recipe - verified", "d2_own - recipe"])).contrasts[1] == "d2_own - recipe"
    with pytest.raises(RecipematchError, match=r"contrasts\[0\]: a contrast is 'arm - arm'"):
        parse_params(_params(contrasts=["recipe verified"]))
    with pytest.raises(RecipematchError, match="declared twice"):
        parse_params(_params(contrasts=["recipe - verified", "recipe-verified"]))
    # a baseline may be named; a ladder arm listed in arms may be contrasted
    p = parse_params(_params(arms=["recipe", "d4", "d2_own"], contrasts=["d2_own - d4", "d4 - base"]))
    assert p.contrasts == ("d2_own - d4", "d4 - base")
    with pytest.raises(RecipematchError, match="negatives=own: positives=d4"):
        parse_params(_params(positives="d4", negatives="own"))
    assert parse_params(_params(positives="d3", negatives="own")).negatives == "own"


# --------------------------------------------------------------------------- stats stage

# the report's rows of EVALS (params `report`), as the report stage joins them to stats.json
LABELS = {"easy": "easy tier", "hard": "hard tier", "crosslingual": "cross-language strict"}
EVALS = {
    "easy": {"folder": "artifacts/evalsets/easy", "rule": "plain", "role": "benchmark"},
    "hard": {"folder": "artifacts/evalsets/hard", "rule": "plain", "role": "benchmark"},
    "crosslingual": {"folder": "artifacts/evalsets/crosslingual", "rule": "crosslingual_strict", "role": "real"},
}


def _write_ranks(lay: Outputs, arm: str, seeds: list[str], rng: np.random.Generator) -> None:
    d = lay.eval_dir(arm)
    d.mkdir(parents=True, exist_ok=True)
    for name in EVALS:
        n = 12
        rows = []
        for s in seeds:
            for q in range(n):
                row = {"query_id": f"q{q:02d}", "rank": int(rng.integers(0, 4)), "seed": s}
                if name == "crosslingual":
                    row["cluster"] = f"c{q // 3}"
                rows.append(row)
        pd.DataFrame(rows).to_parquet(d / f"{name}.parquet")


def test_stats_computes_exactly_the_declared_contrasts(tmp_path):
    arms = ["recipe", "d4", "d2_own"]
    raw = _params(arms=arms, contrasts=["d2_own - d4", "recipe - base", "recipe - verified"], evaluations=EVALS,
                  stats={"n_boot": 200, "seed": 0, "paired_seeds": True})
    raw["evaluate"] = {**raw["evaluate"], "ks": [1, 5]}
    raw["style"] = {**raw["style"], "tracking_set": "easy"}
    raw["remedies"] = {**raw["remedies"], "arms": []}  # no soup or replay-mix rows: only the declared contrasts
    lay = Outputs(tmp_path, raw)
    rng = np.random.default_rng(0)
    for a in ("base", "bm25"):
        _write_ranks(lay, a, [a], rng)
    for a in arms:
        _write_ranks(lay, a, ["42", "43"], rng)
    out = stats_stage.run(parse_params(raw).view(stats_stage.PARAMS), lay.stage("stats"))
    assert out["contrasts"] == ["d2_own-d4", "recipe-base"]
    assert out["contrasts_skipped"] == ["recipe-verified"]  # verified is not run: listed, not computed
    assert sorted(out["gaps"]) == sorted(f"{c}.{n}.R@1" for c in out["contrasts"] for n in EVALS)
    assert sorted(out["did"]) == sorted(f"{c}.{b}-crosslingual.R@1" for c in out["contrasts"] for b in ("easy", "hard"))
    # two trained arms pair their seeds; a baseline (one run) is drawn independently
    assert out["gaps"]["d2_own-d4.easy.R@1"]["seeds"] == "paired"
    assert out["gaps"]["recipe-base.easy.R@1"]["seeds"] == "independent"
    assert out["gaps"]["d2_own-d4.crosslingual.R@1"]["scheme"] == "cluster"
    est = out["arms"]["d2_own"]["easy.R@1"]["mean"] - out["arms"]["d4"]["easy.R@1"]["mean"]
    assert out["gaps"]["d2_own-d4.easy.R@1"]["estimate"] == pytest.approx(est, abs=1e-3)
    assert read_json(lay.metrics / "stats.json")["contrasts"] == out["contrasts"]


# --------------------------------------------------------------------------- report

def _cell(stats_arm_mean):
    return {"mean": stats_arm_mean, "sd": 0.5, "per_seed": [stats_arm_mean - 0.5, stats_arm_mean + 0.5]}


def _synthetic_stats(arm_means: dict[str, tuple[float, float, float]], contrasts=()):
    evals = {**{n: {**EVALS[n], "in_family_for": [], "label": LABELS[n], "report_ks": [1]}
                for n in ("crosslingual", "easy", "hard")},
             "probe": {"folder": "x", "rule": "plain", "role": "in_family", "label": "probe", "report_ks": [1],
                       "in_family_for": ["cas"]}}
    arms = {a: {"easy.R@1": _cell(e), "hard.R@1": _cell(h), "crosslingual.R@1": _cell(x), "probe.R@1": _cell(1.0)}
            for a, (e, h, x) in arm_means.items()}
    gaps = {f"{c}.{n}.R@1": {"estimate": 1.0, "low": 0.0, "high": 2.0} for c in contrasts for n in evals}
    return {"arms": arms, "gaps": gaps, "did": {}, "contrasts": list(contrasts), "n_boot": 200,
            "seed_scheme": "independent", "evaluations": evals}


def _cells_for(arms):
    out = {}
    for a in arms:
        s = NAMED_ARMS[a]
        out[a] = {"name": s.name, "positives": s.positives, "negatives": s.negatives, "volume": s.volume}
    return out


def test_ladder_table_fills_the_rungs_that_ran_and_blanks_the_rest():
    stats = _synthetic_stats({"base": (8.32, 0.0, 84.73), "verified": (17.05, 0.16, 56.52),
                              "d4": (30.03, 0.04, 93.81), "d2_own": (67.54, 6.76, 68.02),
                              "recipe": (61.86, 9.90, 66.41)})
    text = ladder_markdown(stats, _cells_for(["verified", "d4", "d2_own", "recipe"]))
    lines = text.splitlines()
    assert lines[0] == "| rung | arm (cell) | easy tier R@1 | hard tier R@1 | cross-language strict R@1 |"
    assert "| untrained base | base | 8.32 ± 0.50 | 0.00 ± 0.50 | 84.73 ± 0.50 |" in lines
    assert "| D2: paraphrase of the benchmark's prompt | d2_own (d2xown) | 67.54 ± 0.50 | 6.76 ± 0.50 | 68.02 ± 0.50 |" in lines
    assert "| D3: rewrite in a different style | — (d3xown) | — | — | — |" in lines
    assert "| D5: survey prompt | — (d5xnone) | — | — | — |" in lines
    assert any(ln.startswith("| D1: the benchmark's prompt (recipe arm) | recipe (d1xrecipe) | 61.86") for ln in lines)
    assert "probe" not in text  # in-family sets are not ladder columns
    assert len(lines) == 2 + 1 + len(LADDER)


def test_ladder_finds_the_cell_under_test_by_its_spec():
    stats = _synthetic_stats({"base": (1, 2, 3), "cell": (40.0, 3.0, 70.0)})
    cells = {"cell": {"name": "d3xown", "positives": "d3", "negatives": "own", "volume": "matched"}}
    assert "| D3: rewrite in a different style | cell (d3xown) | 40.00 ± 0.50 | 3.00 ± 0.50 | 70.00 ± 0.50 |" \
        in ladder_markdown(stats, cells)


def test_factorial_grid_marks_unrun_cells_and_non_cells():
    stats = _synthetic_stats({"base": (1, 2, 3), "verified": (17.0, 0.2, 56.5), "reference": (46.9, 10.3, 78.0),
                              "d4_recipe_matched": (44.6, 20.7, 83.9), "recipe": (61.9, 9.9, 66.4)})
    text = factorial_markdown(stats, _cells_for(["verified", "reference", "d4_recipe_matched", "recipe"]))
    table = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in text.splitlines() if ln.startswith("| ")]
    col = {h: i for i, h in enumerate(table[0])}
    rows = {r[0]: r for r in table[1:]}
    assert text.splitlines()[0] == "Each entry: easy tier R@1 / hard tier R@1 / cross-language strict R@1 (arm)."
    d4 = rows["D4 (recipe-free)"]
    assert d4[col["CAS counterexamples"]] == "46.90 ± 0.50 / 10.30 ± 0.50 / 78.00 ± 0.50 (reference)"
    assert d4[col["recipe-prompt near-misses, matched"]] == "44.60 ± 0.50 / 20.70 ± 0.50 / 83.90 ± 0.50 (d4_recipe_matched)"
    assert d4[col["recipe-prompt near-misses, full"]] == "—" and d4[col["none"]] == "—"
    assert d4[col["own prompt's near-misses"]] == "n/a"
    d1 = rows["D1 (recipe)"]
    assert d1[col["recipe-prompt near-misses, full"]].endswith("(recipe)")
    assert d1[col["own prompt's near-misses"]] == "= recipe-prompt near-misses, full"
    assert rows["CAS near-copies"][col["own prompt's near-misses"]] == "= CAS counterexamples"
    assert rows["D2 (paraphrase)"][col["own prompt's near-misses"]] == "—"
    assert sum(v.endswith(")") and "=" not in v for r in rows.values() for v in r[1:]) == 4  # each run cell once


def test_table_1_gap_columns_follow_the_declared_contrasts():
    stats = _synthetic_stats({"base": (1, 2, 3), "recipe": (5, 6, 7), "verified": (2, 3, 4), "d4": (3, 4, 5)},
                             contrasts=["recipe-verified", "d4-base", "recipe-d4"])
    head = table_markdown(stats, _cells_for(["recipe", "verified", "d4"])).splitlines()[0]
    assert head.endswith("| recipe − verified | d4 − base | recipe − d4 |")


# --------------------------------------------------------------------------- the cells stage

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """corpus → evalsets → gates on the mini release; a D2 pair file written by hand."""
    root = tmp_path_factory.mktemp("ladder")
    (root / "data" / "peer_release").mkdir(parents=True)
    for f in MINI.glob("*.jsonl"):
        shutil.copy(f, root / "data" / "peer_release" / f.name)
    for sub in ("crosslingual_eval", "samelang_eval"):
        shutil.copytree(MINI / sub, root / "data" / "peer_release" / sub)
    raw = _params(arms=["recipe", "d2_own", "d3_own"], contrasts=[])
    # the prompts are declared (their llm stages are not run here): the specs stage checks that
    # every arm's pair file is built in this configuration
    raw["llm"] = {**raw["llm"], "prompts": [*raw["llm"]["prompts"], "d2_paraphrase", "d3_style"]}
    raw["evalsets"] = {"seed": 7, "n_heldout": 5, "corpus_docs": 0}
    raw["budget"] = {"rows": 4, "dev_fraction": 0.05, "max_rows_per_source": 1, "shared_sources": []}
    raw["train"] = {**raw["train"], "n_seeds": 1, "max_seq_length": 32}
    raw["evaluate"] = {**raw["evaluate"], "max_seq_length": 48}
    # this project builds the paper's own sets only (no external copy or regenerated version, no stage for them)
    raw["evaluations"] = {k: v for k, v in raw["evaluations"].items()
                          if v["role"] != "external" and not v.get("version_of")}
    lay = Outputs(root, raw)
    for stage in (corpus_stage, evalsets_stage, gates_stage, specs_stage):
        stage.run(parse_params(raw).view(stage.PARAMS), lay.stage(stage.main.name))
    heldout = set(read_json(lay.evalsets / "heldout.json")["heldout_sources"])
    from recipematch.corpus import read_corpus

    corpus = read_corpus(lay.corpus / "corpus.parquet").to_dict("records")
    free = [r for r in corpus if r["doc_id"] not in heldout][:6]
    rows = [{**_row(r["doc_id"], f"paraphrase number {i} of source {r['doc_id']}",
                    [f"near miss {i}.{j} changes one quantity of source {r['doc_id']}" for j in range(i % 3 + 1)],
                    "d2_paraphrase"), "anchor": r["text"]} for i, r in enumerate(free)]
    lay.pairs.mkdir(parents=True, exist_ok=True)
    write_jsonl(lay.pairs / "d2_paraphrase.jsonl", rows)
    return raw, lay, rows


def test_cells_stage_builds_an_own_negatives_arm(tiny):
    raw, lay, rows = tiny
    counts = cells_stage.run(parse_params(raw).view(cells_stage.PARAMS), lay.stage("cells@d2_own"), "d2_own")
    assert counts["cell"] == "d2xown" and counts["assemble"]["sources_in"] == len(rows)
    assert read_json(lay.cells("d2_own") / "cell.json")["spec"] == {"positives": "d2", "negatives": "own",
                                                                     "volume": "full"}
    by_source = {r["source_id"]: [n["text"] for n in r["negatives"]] for r in rows}
    pool = read_jsonl_strict(lay.cells("d2_own") / "pool.jsonl")
    assert pool
    for r in pool:  # every kept row carries its own prompt's near-misses (those the gate left)
        assert [n["text"] for n in r["negatives"]] == [t for t in by_source[r["source_id"]]
                                                        if t in {n["text"] for n in r["negatives"]}]
        assert set(n["text"] for n in r["negatives"]) <= set(by_source[r["source_id"]])
    assert sum(len(r["negatives"]) for r in pool) > 0
    chosen = read_jsonl_strict(lay.cells("d2_own") / "seed_42.jsonl")
    assert len(chosen) == min(4, len(pool))


def test_cells_stage_stops_naming_the_missing_prompts_pair_file(tiny):
    raw, lay, _ = tiny
    assert not (lay.pairs / "d3_style.jsonl").exists()
    with pytest.raises(RecipematchError, match=r"cells\[d3_own\]: no input for positives=d3 of cell d3xown: "
                                               r"pair file 'd3_style'.*add d3_style to llm\.prompts"):
        cells_stage.run(parse_params(raw).view(cells_stage.PARAMS), lay.stage("cells@d3_own"), "d3_own")
    assert not lay.cells("d3_own").exists()


def test_report_stage_renders_tables_9_and_12_from_the_arms_that_ran(tmp_path):
    from recipematch.io import write_json
    from recipematch.pipeline import report as report_stage

    arms = ["verified", "recipe", "reference", "cell"]
    raw = _params(arms=arms, positives="d4", negatives="recipe", negatives_volume="full")
    lay = Outputs(tmp_path, raw)
    stats = _synthetic_stats({"base": (8.0, 0.0, 80.0), "bm25": (5.0, 0.0, 20.0), "verified": (17.0, 0.2, 56.5),
                              "recipe": (61.9, 9.9, 66.4), "reference": (46.9, 10.3, 78.0),
                              "cell": (37.8, 27.0, 78.9)}, contrasts=["recipe-verified", "cell-reference"])
    write_json(lay.metrics / "stats.json", stats)
    write_json(lay.metrics / "style.json", {"probe": {"train_prompt": "d1_recipe"}, "tracking": {}})
    for name in report_stage.COUNTS_FILES:  # every file the stage declares (dvc.yaml deps)
        write_json(lay.metrics / f"{name}.json", {})
    write_json(lay.metrics / "hits.json", {"seed": 0, "k": 10, "sets": {}, "skipped": []})
    spec = {a: NAMED_ARMS[a] for a in arms[:3]} | {"cell": CellSpec("d4", "recipe", "full")}
    for a, s in spec.items():
        write_json(lay.cells(a) / "cell.json", {"arm": a, "name": s.name, "spec": {"positives": s.positives,
                   "negatives": s.negatives, "volume": s.volume}})
        write_json(lay.metrics / "cells" / f"{a}.json", {"arm": a})
        write_json(lay.metrics / "train" / f"{a}.json", {"arm": a})
    text = Path(report_stage.run(parse_params(raw).view(report_stage.PARAMS), lay.stage("report"))).read_text()
    assert "## Table 9 (the prompt ladder; cells not run: —)" in text
    assert "| D4: restatement, unrelated prompt | — (d4xnone) | — | — | — |" in text
    assert "| D1: the benchmark's prompt (recipe arm) | recipe (d1xrecipe) | 61.90 ± 0.50 |" in text
    grid = text[text.index("## Tables 11-12"):]
    d4 = next(ln for ln in grid.splitlines() if ln.startswith("| D4 (recipe-free)"))
    assert "37.80 ± 0.50 / 27.00 ± 0.50 / 78.90 ± 0.50 (cell)" in d4 and "(reference)" in d4
    assert "| recipe − verified | cell − reference |" in text


def test_stats_reads_the_soup_rows_of_every_arm(tmp_path):
    """A WiSE-FT soup (Appendix E) is an evaluated row ``<arm>@soup<alpha>`` beside its arm."""
    raw = _params(arms=["recipe", "verified"], contrasts=["recipe - verified"], evaluations=EVALS,
                  stats={"n_boot": 200, "seed": 0, "paired_seeds": False})
    raw["remedies"] = {**raw.get("remedies", {}), "arms": ["recipe", "verified"], "soup_alphas": [0.5],
                       "replay_fractions": [0.2], "replay_file": "artifacts/replay/ict.jsonl"}
    raw["evaluate"] = {**raw["evaluate"], "ks": [1]}
    raw["style"] = {**raw["style"], "tracking_set": "easy"}
    lay = Outputs(tmp_path, raw)
    rng = np.random.default_rng(1)
    for a in ("base", "bm25"):
        _write_ranks(lay, a, [a], rng)
    for a in ("recipe", "verified", "recipe@soup0.5", "verified@soup0.5", "recipe@mix0.2", "verified@mix0.2"):
        _write_ranks(lay, a, ["42"], rng)
    out = stats_stage.run(parse_params(raw).view(stats_stage.PARAMS), lay.stage("stats"))
    assert {"recipe@soup0.5", "verified@soup0.5", "recipe@mix0.2", "verified@mix0.2"} <= set(out["arms"])
    assert out["remedies"]["recipe"] == {"soups": {"0.5": "recipe@soup0.5"}, "mixes": {"0.2": "recipe@mix0.2"}}
    ranks = pd.read_parquet(lay.eval_dir("recipe@soup0.5") / "easy.parquet")
    assert out["arms"]["recipe@soup0.5"]["easy.R@1"]["mean"] == pytest.approx(100 * (ranks["rank"] == 0).mean(), abs=1e-3)
