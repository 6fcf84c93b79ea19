"""The regeneration defence (paper Appendix E, Tables 24-25): a version of a benchmark whose
golds are rewritten another way, from released rows or through the LLM pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from recipematch.beir import read_beir, write_beir
from recipematch.config import parse_params
from recipematch.errors import RecipematchError
from recipematch.regen import read_release_rows, regenerate

REPO = Path(__file__).resolve().parents[1]

CORPUS = {"q1": {"text": "find x"}, "q2": {"text": "prove y"}, "g1": {"text": "old gold one"},
          "g2": {"text": "old gold two"}, "e1": {"text": "NEW ONE "}, "n1": {"text": "a near miss"}}
QUERIES = {"q1": "find x", "q2": "prove y"}
GOLDS = {"q1": ["g1"], "q2": ["g2"]}


def test_golds_replaced_duplicates_removed_rest_kept():
    v = regenerate(CORPUS, QUERIES, GOLDS, {"q1": "new one", "q2": "old gold two"})
    assert v.corpus["g1"]["text"] == "new one" and v.corpus["g2"]["text"] == "old gold two"
    # e1 is not removed: the comparison strips whitespace only, it is not case-folded
    assert set(v.corpus) == set(CORPUS)
    v = regenerate(CORPUS, QUERIES, GOLDS, {"q1": "NEW ONE", "q2": "fresh two"})
    assert "e1" not in v.corpus and v.counts["duplicates_of_new_golds_removed"] == 1
    assert v.qrels == {"q1": {"g1": 1}, "q2": {"g2": 1}} and v.queries == QUERIES
    assert v.counts["golds_unchanged_text"] == 0 and v.counts["corpus_out"] == len(CORPUS) - 1
    assert CORPUS["g1"]["text"] == "old gold one"  # the input is not modified


def test_fewer_golds_than_queries_stops_or_drops_with_reasons():
    with pytest.raises(RecipematchError, match=r"1 of 2 queries got no regenerated gold \(first: q2 \(judge:rejected\)\)"):
        regenerate(CORPUS, QUERIES, GOLDS, {"q1": "fresh"}, reasons={"q2": "judge:rejected"})
    v = regenerate(CORPUS, QUERIES, GOLDS, {"q1": "fresh", "q2": "   "}, missing="drop")
    assert v.queries == {"q1": "find x"} and v.dropped == [{"query_id": "q2", "reason": "empty"}]
    assert v.counts["dropped_by_reason"] == {"empty": 1} and "g2" in v.corpus


def test_ambiguous_golds_are_refused():
    with pytest.raises(RecipematchError, match="has 2 golds"):
        regenerate(CORPUS, QUERIES, {"q1": ["g1", "g2"], "q2": ["g2"]}, {"q1": "a", "q2": "b"})
    with pytest.raises(RecipematchError, match="belongs to queries 'q1' and 'q2'"):
        regenerate(CORPUS, QUERIES, {"q1": ["g1"], "q2": ["g1"]}, {"q1": "a", "q2": "b"})
    with pytest.raises(RecipematchError, match="not in the corpus"):
        regenerate(CORPUS, QUERIES, {"q1": ["zz"], "q2": ["g2"]}, {"q1": "a", "q2": "b"})


def test_release_rows(tmp_path):
    path = tmp_path / "regen_manifest.json"
    path.write_text(json.dumps({"config": {"model": "m"}, "queries": {
        "q1": {"style": {"text": "styled one", "verified": True}, "exact": {"text": "", "verified": False}},
        "q2": {"style": {"text": "styled two", "verified": False}},
        "q3": {"exact": {"text": "x", "verified": True}}}}))
    texts, missing, config = read_release_rows(path, "style")
    assert texts == {"q1": "styled one"} and missing == {"q2": "unverified", "q3": "no_variant"}
    assert config == {"model": "m"}
    with pytest.raises(RecipematchError, match="no query has variant 'nope'"):
        read_release_rows(path, "nope")
    path.write_text('{"queries": {"q1": {"style": {"text": 3, "verified": true}}}}')
    with pytest.raises(RecipematchError, match=r"queries\['q1'\]\['style'\] needs a string text"):
        read_release_rows(path, "style")
    path.write_text("{not json")
    with pytest.raises(RecipematchError, match="not a JSON file"):
        read_release_rows(path, "style")


def _params(tmp: Path, regen: dict, version: dict | None = None) -> dict:
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["evaluations"] = {"tier": {"folder": "sets/tier", "rule": "plain", "role": "benchmark"}}
    if version:
        raw["evaluations"]["tier_v"] = version
    raw["style"]["tracking_set"] = "tier"
    raw["hits"] = {"contrasts": ["recipe - verified"], "k": 1, "probe": ""}
    for key in ("external", "attacks", "pooling", "judging", "saber"):
        raw[key] = {}
    raw["regen"] = regen
    return raw


def test_regen_stage_from_rows_writes_a_version_whole(tmp_path):
    from recipematch.pipeline import regen
    from conftest import Outputs

    write_beir(tmp_path / "sets" / "tier", CORPUS, QUERIES, {"q1": {"g1": 1}, "q2": {"g2": 1}})
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rows.json").write_text(json.dumps({"config": {}, "queries": {
        "q1": {"style": {"text": "NEW ONE", "verified": True}}, "q2": {"style": {"text": "fresh", "verified": False}}}}))
    raw = _params(tmp_path, {"v": {"of": "nope", "source": "rows", "rows": "data/rows.json", "variant": "style"}})
    lay = Outputs(tmp_path, raw)
    with pytest.raises(RecipematchError, match=r"regen.v.of: 'nope' is not a declared benchmark evaluation"):
        regen.run(parse_params(raw).view(regen.PARAMS), lay.stage("regen@v"), "v", progress=False)
    raw["regen"]["v"]["of"] = "tier"
    with pytest.raises(RecipematchError, match=r"1 of 2 queries got no regenerated gold \(first: q2 \(unverified\)\)"):
        regen.run(parse_params(raw).view(regen.PARAMS), lay.stage("regen@v"), "v", progress=False)
    assert not (tmp_path / "artifacts" / "regen").exists() or not any((tmp_path / "artifacts" / "regen").iterdir())
    raw["regen"]["v"]["missing"] = "drop"
    counts = regen.run(parse_params(raw).view(regen.PARAMS), lay.stage("regen@v"), "v", progress=False)
    assert (counts["kept"], counts["dropped"], counts["duplicates_of_new_golds_removed"]) == (1, 1, 1)
    ds = read_beir(tmp_path / "artifacts" / "regen" / "v")
    assert ds.corpus["g1"]["text"] == "NEW ONE" and "e1" not in ds.corpus and list(ds.queries) == ["q1"]
    man = json.loads((tmp_path / "artifacts" / "regen" / "v" / "MANIFEST.json").read_text())
    assert man["provenance"]["variant"] == "style" and man["texts_changed"] == 1
    first = (tmp_path / "artifacts" / "regen" / "v" / "corpus.jsonl").read_bytes()
    regen.run(parse_params(raw).view(regen.PARAMS), lay.stage("regen@v"), "v", progress=False)
    assert (tmp_path / "artifacts" / "regen" / "v" / "corpus.jsonl").read_bytes() == first


def test_regen_params_are_checked(tmp_path):
    ok = {"of": "tier", "source": "rows", "rows": "data/rows.json", "variant": "style"}
    for bad, msg in (({**ok, "rows": "../x.json"}, "inside the project"),
                     ({**ok, "rows": "elsewhere/x.json"}, "must lie under data/"),
                     ({**ok, "variant": ""}, "needs both rows"),
                     ({"of": "tier", "source": "llm", "prompt": "d3_style"}, "is not in llm.prompts"),
                     ({"of": "tier", "source": "llm", "prompt": "d4_restatement", "rows": "data/x"}, "belong to source rows")):
        with pytest.raises(RecipematchError, match=msg):
            parse_params(_params(tmp_path, {"v": bad}))
    with pytest.raises(RecipematchError, match="letters, digits"):
        parse_params(_params(tmp_path, {"a/b": ok}))
    version = {"folder": "artifacts/regen/v", "rule": "plain", "role": "benchmark",
               "version_of": "missing"}
    with pytest.raises(RecipematchError, match="version_of"):
        parse_params(_params(tmp_path, {"v": ok}, version))
    assert parse_params(_params(tmp_path, {"v": ok}, {**version, "version_of": "tier"})).regen["v"].variant == "style"


def test_two_queries_given_one_regenerated_text_keep_a_gold_each_and_are_counted():
    """Breaker: the corpus then holds the new text twice, each copy another query's gold. The sample
    has such a pair (01op and 01or: one problem printed twice, so one D4 restatement), so the
    version keeps both and counts them instead of refusing."""
    from recipematch.regen import regenerate

    corpus = {"g1": {"text": "old one"}, "g2": {"text": "old two"}, "x": {"text": "other"}}
    out = regenerate(corpus, {"q1": "a", "q2": "b", "q3": "c"}, {"q1": ["g1"], "q2": ["g2"], "q3": ["x"]},
                     {"q1": "same", "q2": "same ", "q3": "new"})
    assert out.counts["queries_sharing_a_new_gold_text"] == 2
    assert out.qrels == {"q1": {"g1": 1}, "q2": {"g2": 1}, "q3": {"x": 1}}
