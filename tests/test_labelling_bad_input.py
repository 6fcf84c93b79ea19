"""Bad input to the labelling tools (pooling, graded judging, SABER-Math labels) found by a
breaker run: each gets one clear line and loses nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from test_judging import _judging_project

from recipematch.config import load_yaml, parse_params
from recipematch.errors import RecipematchError


@pytest.mark.parametrize("section", ["judging", "saber"])
@pytest.mark.parametrize("url, why", [("http://user:sk-SECRET@127.0.0.1:9/v1", "@"), ("ftp://x", "http"),
                                      ("http://127.0.0.1:9/v1?api_key=sk-1", "")])
def test_a_labelling_server_url_gets_the_llm_url_check(section, url, why):
    raw = load_yaml(REPO / "params.yaml")
    entry = {"model_id": "m", "backend": "openai", "base_url": url}
    raw[section] = {"x": {"pool": "crosslingual", "folder": "in", "prompt": "in/p.txt", **entry} if section == "judging"
                    else {"folder": "in", "corpus": "in/c.jsonl", "ontology": "in/o.json", "topics": "in/t.jsonl",
                          "judge_prompt": "in/j.txt", **entry}}
    with pytest.raises(RecipematchError, match=rf"{section}.base_url .*{why}") as err:
        parse_params(raw)
    assert "SECRET" not in str(err.value) and "sk-1" not in str(err.value)


def test_a_replay_store_is_keyed_by_the_recordings_so_completing_them_is_read(tmp_path):
    from types import SimpleNamespace

    from recipematch.llm.serving import client_store_path

    rec = tmp_path / "rec.jsonl"
    rec.write_text("{}\n")
    cfg = SimpleNamespace(backend="replay")
    first = client_store_path(tmp_path / "store", cfg, rec)
    rec.write_text("{}\n{}\n")
    second = client_store_path(tmp_path / "store", cfg, rec)
    assert first != second and first.name.startswith("replay-") and first.parent == second.parent
    assert client_store_path(tmp_path / "store", cfg, rec) == second  # unchanged recordings resume their store
    assert client_store_path(tmp_path / "store", SimpleNamespace(backend="openai"), None).name == "calls.jsonl"


def test_judging_refuses_a_pool_built_over_other_queries(tmp_path, monkeypatch):
    from recipematch.beir import load_beir, write_beir
    from recipematch.pipeline import judging, pooling

    p, lay, _c, _q = _judging_project(tmp_path, monkeypatch, backend="replay", base_url="",
                                      recordings="judge/rec.jsonl")
    (tmp_path / "judge" / "rec.jsonl").write_text("")
    pooling.run(p, lay.stage("pooling@tiny"), name="tiny", progress=False)
    folder = tmp_path / "artifacts" / "evalsets" / "tiny"
    corpus, queries, qrels = load_beir(folder)
    queries["q1"] = queries["q1"] + " (edited)"
    write_beir(folder, corpus, queries, qrels)
    with pytest.raises(RecipematchError, match=r"^judging.tiny: the pool was built over other queries .*rerun pooling@tiny"):
        judging.run(p, lay.stage("judging@tiny"), name="tiny", progress=False)
    (tmp_path / "artifacts" / "pooling" / "tiny" / "MANIFEST.json").write_text("[]")
    with pytest.raises(RecipematchError, match="MANIFEST.json is not an object"):
        judging.run(p, lay.stage("judging@tiny"), name="tiny", progress=False)
    (tmp_path / "artifacts" / "pooling" / "tiny" / "MANIFEST.json").write_text('{"corpus')
    with pytest.raises(RecipematchError, match="MANIFEST.json cannot be read"):
        judging.run(p, lay.stage("judging@tiny"), name="tiny", progress=False)


def test_judging_refuses_a_bad_device_before_any_call(tmp_path, monkeypatch):
    from recipematch.pipeline import judging, pooling

    p, lay, _c, _q = _judging_project(tmp_path, monkeypatch, devices={"distilled_judge": "banana"})
    pooling.run(p, lay.stage("pooling@tiny"), name="tiny", progress=False)
    with pytest.raises(RecipematchError, match=r"devices.distilled_judge: 'banana' is not a torch device"):
        judging.run(p, lay.stage("judging@tiny"), name="tiny", progress=False)
    assert not (tmp_path / "cache" / "judging").exists()


def test_a_rubric_on_another_scale_is_refused(tmp_path):
    from recipematch.judging import load_rubric

    doc = json.loads((REPO / "src" / "recipematch" / "rubrics" / "strict-math-retrieval-v1.json").read_text())
    doc["scores"] = [0, 1, 2, 3, 4]
    (tmp_path / "r.json").write_text(json.dumps(doc))
    with pytest.raises(RecipematchError, match=r"scores must be \[0, 1, 2\]"):
        load_rubric(tmp_path / "r.json")


def test_the_bm25_route_of_a_corpus_without_tokens_is_empty_not_a_crash():
    from recipematch.pooling import bm25_route

    corpus = {"a": {"text": "求所有实数解"}, "b": {"text": "证明"}}
    idx, sc = bm25_route(corpus, {"q": "求解"}, ["q"], 5, k1=1.2, b=0.75, token_pattern="[a-z0-9]+",
                         self_idx=np.array([-1]))
    assert idx.shape == (1, 5) and (idx == -1).all() and np.isneginf(sc).all()


def test_names_ontology_parents_and_topics_of_the_wrong_kind():
    from recipematch.saber import Ontology, _check_topics

    with pytest.raises(RecipematchError, match="names parent"):
        Ontology.from_parents({"math": None, "linear": ["math"]})
    ont = Ontology.from_parents({"math": None, "linear": "math"})
    with pytest.raises(RecipematchError, match="are not ontology nodes"):
        _check_topics(ont, {"p1": [["linear"]]})
    raw = load_yaml(REPO / "params.yaml")
    raw["pooling"] = {"x" * 65: raw["pooling"]["crosslingual"]}
    with pytest.raises(RecipematchError, match="at most 64"):
        parse_params(raw)


def test_a_damaged_call_store_is_a_user_error(tmp_path):
    from recipematch.llm.store import StoreCorruptError, StoreInUseError

    assert issubclass(StoreCorruptError, RecipematchError) and issubclass(StoreInUseError, RecipematchError)
    assert issubclass(StoreCorruptError, RuntimeError)  # callers catching RuntimeError keep working


def test_nan_is_not_json_and_a_fenced_preference_is_read():
    from recipematch.judging import load_rubric, parse_answer
    from recipematch.pipeline.saber import parse_preference

    assert parse_answer('{"task_id": "t1", "confidence": NaN}', load_rubric(None), "t1") == (None, "invalid_json")
    assert parse_preference('```json {"preferred": "A"}```') == ("A", "")
    assert parse_preference("```\nB\n```") == ("B", "")
    assert parse_preference("```C```") == (None, "answer outside A/B")


def test_second_judge_reliability_by_hand():
    from recipematch.judging import reliability_markdown, second_judge_reliability

    first = [0, 0, 1, 2, 2, 1, 0, 2]
    second = [0, 1, 1, 2, 0, 0, 0, 1]
    rel = second_judge_reliability(first, second)
    # agree on pairs 0, 2, 3, 6; one step apart on 1, 5, 7 (combined: the lower); pair 4 is 2 against 0
    assert rel["n"] == 8 and rel["exact"] == 0.5 and rel["needs_arbitration"] == 1 and rel["zero_two"] == 0.125
    assert rel["distribution"]["first"] == {"0": 0.375, "1": 0.25, "2": 0.375}
    assert rel["distribution"]["combined"] == {"0": round(4 / 7, 6), "1": round(2 / 7, 6), "2": round(1 / 7, 6)}
    assert rel["at_least_partial"] == {"first": 0.625, "second": 0.5, "combined": round(3 / 7, 6)}
    md = reliability_markdown(rel, "a", "b")
    assert "| score 2 | 37.5% | 12.5% | 14.3% |" in md and "1 (12.5%) are a 0 against a 2" in md
    with pytest.raises(RecipematchError, match="0, 1 or 2"):
        second_judge_reliability([3], [0])


def test_the_reliability_command_joins_two_judging_entries(tmp_path):
    import pandas as pd
    from click.testing import CliRunner

    from recipematch.cli import main

    # a project declaring the two entries: their folders are the judging@ stages' outputs in its dvc.yaml
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    (tmp_path / "params.yaml").write_text("judging:\n  a: {}\n  b: {}\n", encoding="utf-8")
    for name, scores, model in (("a", [2, 1, 0, None], "m1"), ("b", [2, 0, 0, 1], "m2")):
        folder = tmp_path / "artifacts" / "judging" / name
        folder.mkdir(parents=True)
        pd.DataFrame({"query_id": ["q0", "q0", "q1", "q1"], "doc_id": ["d0", "d1", "d0", "d2"],
                      "judge": ["llm", "llm", "llm", "llm"], "score": scores, "model": model}
                     ).to_parquet(folder / "labels.parquet", index=False)
    res = CliRunner().invoke(main, ["judging-reliability", "--first", "a", "--second", "b", "--root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    rel = json.loads((tmp_path / "reports" / "judging" / "a-vs-b" / "reliability.json").read_text())
    assert rel["n"] == 3 and rel["exact"] == round(2 / 3, 6) and rel["first_model"] == ["m1"]
    res = CliRunner().invoke(main, ["judging-reliability", "--first", "a", "--second", "zz", "--root", str(tmp_path)])
    assert res.exit_code == 2 and "dvc.yaml has no stage 'judging@zz'" in res.output
