"""Graded judging (issue 22, items 2-4; the candidate design): the rubric's schema, and the
chain pooling -> LLM judge on a local OpenAI-compatible server -> distilled judge -> graded
qrels -> nDCG@10, end to end on a tiny fixture with numbers worked by hand."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import Outputs, REPO
from test_llm_support import ChatServer
from test_pooling import _tiny_project

from recipematch.config import load_yaml, parse_params
from recipematch.errors import RecipematchError
from recipematch.judging import (
    agreement, answer_schema, cut_scores, load_rubric, parse_answer, render_prompt, task_id, within_query_r2)

TEMPLATE = "Task {{task_id}}.\nQuery:\n{{query}}\n\nDocument:\n{{document}}\n\nAnswer in JSON.\n"
JUDGE = "local/judge-model"


def _answer(tid: str, score, codes, validity="correct", evaluable=True) -> str:
    return json.dumps({"task_id": tid, "guideline_version": "strict-math-retrieval-v1", "query_evaluable": evaluable,
                       "score": score, "answer_validity": validity, "reason_codes": codes, "confidence": 0.8,
                       "rationale": "because"})


@pytest.mark.parametrize("change, reason", [
    ({"score": 3}, r"schema: score: .*3 is not one of"),
    ({"reason_codes": ["made_up"]}, r"schema: reason_codes/0: .*'made_up' is not one of"),
    ({"reason_codes": ["wrong_problem"]}, r"schema: reason_codes/0"),                   # a 0-code with score 2
    ({"query_evaluable": False}, r"schema: score: .*None was expected"),                # a score on an unevaluable query
    ({"score": None}, r"schema: score"),                                                 # null on an evaluable one
    ({"confidence": 1.5}, r"schema: confidence"),
    ({"guideline_version": "v2"}, r"schema: guideline_version"),
    ({"extra": 1}, r"schema: \(answer\): .*Additional properties"),
    ({"task_id": "0" * 16}, r"^task_id_mismatch$"),
])
def test_an_answer_outside_the_rubric_is_a_failure_with_its_reason(change, reason) -> None:
    rubric = load_rubric()
    tid = task_id("q", "d")
    good = json.loads(_answer(tid, 2, ["full_solution"]))
    assert parse_answer(json.dumps(good), rubric, tid) == (good, "")
    ans, why = parse_answer(json.dumps({**good, **change}), rubric, tid)
    assert ans is None and re.search(reason, why), why


def test_the_rubric_and_prompt_edges() -> None:
    rubric = load_rubric()
    assert len(rubric.reason_codes) == 18 and rubric.scores == (0, 1, 2)
    tid = task_id("q", "d")
    null = _answer(tid, None, ["missing_figure"], "not_applicable", evaluable=False)
    assert parse_answer(null, rubric, tid)[0]["score"] is None  # never a forced 0
    assert parse_answer("```json\n" + _answer(tid, 0, ["topic_only"]) + "\n```", rubric, tid)[1] == ""
    assert parse_answer("I think 2", rubric, tid) == (None, "invalid_json")
    assert set(answer_schema(rubric)["required"]) == {"task_id", "guideline_version", "query_evaluable", "score",
                                                      "answer_validity", "reason_codes", "confidence", "rationale"}
    # one pass: a query holding a slot's text is sent as it is
    out = render_prompt(TEMPLATE, task="t1", query="what is {{document}}?", document="abcdef", max_chars=3)
    assert "what is {{document}}?" in out and "abc\n" in out and "abcd" not in out
    with pytest.raises(RecipematchError, match=r"lacks the slots \['\{\{task_id\}\}'\]"):
        render_prompt("{{query}} {{document}}", task="t", query="q", document="d", max_chars=10)


def test_cuts_agreement_and_within_query_r2_by_hand() -> None:
    assert cut_scores(np.array([-0.2, 0.49, 0.5, 1.49, 1.5, 2.7])).tolist() == [0, 0, 1, 1, 2, 2]
    llm = np.array([0, 2, 1, 2])
    raw = np.array([0.1, 1.6, 1.6, 0.2])        # cut: 0, 2, 2, 0
    a = agreement(llm, raw, ["a", "a", "b", "b"])
    assert a["exact"] == 0.5 and a["zero_two_flips"] == 0.25 and a["n_queries"] == 2
    assert a["confusion"]["2"] == {"0": 1, "1": 0, "2": 1}
    # within-query: a: y (0, 2) -> (-1, 1), pred (0.1, 1.6) -> (-0.75, 0.75); b: y (-0.5, 0.5), pred (0.7, -0.7)
    res = (0.25 ** 2) * 2 + (1.2 ** 2) * 2
    assert a["within_query_r2"] == pytest.approx(1 - res / (1 + 1 + 0.25 + 0.25), abs=1e-6)
    assert within_query_r2([1, 1], [0, 2], ["a", "a"]) is None  # no variation within a query
    assert agreement(np.array([], dtype=int), np.array([]), [])["exact"] is None


def _judging_project(tmp_path: Path, monkeypatch, devices=None, **judging):
    from recipematch.beir import write_beir

    p, lay = _tiny_project(tmp_path, monkeypatch)
    # the same six documents, a third query whose figure is missing, and every document in the pool
    folder = tmp_path / "artifacts" / "evalsets" / "tiny"
    from recipematch.beir import load_beir
    corpus, queries, qrels = load_beir(folder)
    queries["q2"] = "as shown in the figure, find the angle"
    qrels["q2"] = {"d3": 1}
    write_beir(folder, corpus, queries, qrels)
    (tmp_path / "judge").mkdir(exist_ok=True)
    (tmp_path / "judge" / "judge_prompt.txt").write_text(TEMPLATE, encoding="utf-8")
    raw = load_yaml(REPO / "params.yaml")
    raw["evaluations"] = {"tiny": {"folder": "artifacts/evalsets/tiny", "rule": "plain", "role": "benchmark"}}
    raw["style"]["tracking_set"] = "tiny"
    raw["pooling"] = {"tiny": {**raw["pooling"]["crosslingual"], "evaluation": "tiny", "dense": ["base"],
                               "route_depth": 6, "judge_depth": 6, "ngram_n": 3}}
    raw["judging"] = {"tiny": {"pool": "tiny", "folder": "judge", "prompt": "judge/judge_prompt.txt", "backend": "openai",
                               "base_url": "http://127.0.0.1:9", "model_id": JUDGE, "max_retries": 0,
                               "distilled_epochs": 1, "distilled_batch_size": 4, "distilled_max_length": 64,
                               **judging}}
    raw["devices"] = {**raw["devices"], **(devices or {})}
    return parse_params(raw), Outputs(lay.root, raw), corpus, queries


def _verdict(q: str, d: str, query: str, doc: str, gold: dict) -> str:
    """The local judge's rule: the gold is 2, a shared 'squared' is 1, the rest 0; q2 unevaluable; (q1, d4) breaks."""
    tid = task_id(q, d)
    if q == "q2":
        return _answer(tid, None, ["missing_figure"], "not_applicable", evaluable=False)
    if (q, d) == ("q1", "d4"):
        return _answer(tid, 3, ["full_solution"])
    if gold.get(q) == d:
        return _answer(tid, 2, ["full_solution"])
    if "squared" in query and "squared" in doc:
        return _answer(tid, 1, ["correct_method"])
    return _answer(tid, 0, ["topic_only"])


def _server_table(p, corpus, queries) -> dict:
    from recipematch.beir import doc_text

    jc = p.judging["tiny"]
    gold = {"q0": "d0", "q1": "d1", "q2": "d3"}
    table = {}
    for q in queries:
        for d, row in corpus.items():
            doc = doc_text(row)
            user = render_prompt(TEMPLATE, task=task_id(q, d), query=queries[q], document=doc,
                                 max_chars=jc.max_doc_chars)
            table[("", user)] = _verdict(q, d, queries[q], doc, gold)
    return table


def test_pool_judge_graded_qrels_and_ndcg_end_to_end(tmp_path: Path, monkeypatch) -> None:
    from recipematch.beir import load_beir
    from recipematch.graded import Run, measure_run, parse_measures
    from recipematch.pipeline import judging, pooling

    p, lay, corpus, queries = _judging_project(tmp_path, monkeypatch, llm_fused_ranks=100)
    pooling.run(p, lay.stage("pooling@tiny"), name="tiny", progress=False)
    with ChatServer(_server_table(p, corpus, queries), model=JUDGE) as srv:
        import dataclasses
        p = dataclasses.replace(p, judging={"tiny": dataclasses.replace(p.judging["tiny"], base_url=srv.base_url)})
        counts = judging.run(p, lay.stage("judging@tiny"), name="tiny", progress=False)
        assert len(srv.bodies) == 18  # 3 queries x 6 documents, every pair routed to the LLM
    out = tmp_path / "artifacts" / "judging" / "tiny"
    labels = pd.read_parquet(out / "labels.parquet")
    assert len(labels) == 18 and counts["calls"]["sent"] == 18
    assert counts["n_failures"] == 1 and list(counts["failures"]) == ["schema: score: 3 is not one of [0, 1, 2, None]"]
    failed = json.loads((out / "failures.jsonl").read_text().strip())
    assert (failed["query_id"], failed["doc_id"], failed["judge"]) == ("q1", "d4", "llm")
    assert counts["query_unevaluable"] == 6 and counts["judged_by"] == {"llm": 17, "unjudged": 1}
    llm = labels[labels["judge"] == "llm"]
    assert set(llm["model"]) == {JUDGE} and llm["prompt_sha256"].str.len().eq(64).all()
    assert llm["routes"].str.contains("dense_base").all()  # the dense route holds every document here
    assert counts["distilled"] == {"status": "not needed: no pair is routed to it"}
    # graded qrels: q2 (unevaluable) has no positive grade and is left out; (q1, d4) failed and is unjudged
    _c, gq, qrels = load_beir(out / "graded")
    assert sorted(gq) == ["q0", "q1"] and counts["graded_queries"] == 2
    assert qrels == {"q0": {"d0": 2, "d1": 0, "d2": 1, "d3": 1, "d4": 0, "d5": 1},
                     "q1": {"d0": 0, "d1": 2, "d2": 0, "d3": 0, "d5": 0}}
    # nDCG@10 (trec_eval: gain = grade, discount log2(rank + 1)) of a fixed run, worked by hand
    run = Run(["q0", "q1"], np.array([["d2", "d0", "d4", "d3"], ["d3", "d4", "d1", None]], dtype=object),
              np.zeros((2, 4), dtype=np.float32), "fixed")
    values, per_q = measure_run(qrels, run, parse_measures(["nDCG@10"]))
    q0 = (1 + 2 / math.log2(3) + 0 + 1 / math.log2(5)) / (2 + 1 / math.log2(3) + 1 / 2 + 1 / math.log2(5))
    q1 = (2 / math.log2(4)) / 2
    assert per_q.set_index("query_id")["nDCG@10"].to_dict() == pytest.approx({"q0": q0, "q1": q1})
    assert q0 == pytest.approx(0.755990, abs=1e-6) and values["nDCG@10"] == pytest.approx((q0 + q1) / 2)
    # the top-1 misses the judge calls the same problem, per route, read back from the labels
    cands = pd.read_parquet(tmp_path / "artifacts" / "pooling" / "tiny" / "candidates.parquet")
    for route, m in counts["top1_misses"].items():
        first = cands[(cands[f"rank_{route}"] == 1) & ~cands["is_gold"]]
        assert m["top1_misses"] == len(first) and m["called_same_problem"] == 0  # only golds are 2 here
    report = (out / "misses.md").read_text()
    for route, m in counts["top1_misses"].items():
        share = "—" if not m["judged"] else "0.0%"
        assert f"| {route} | {m['top1_misses']} | {m['judged']} | 0 | {m['called_partial']} | {share} |" in report
    # a rerun answers from the call store: nothing is sent, the same labels come out
    again = judging.run(p, lay.stage("judging@tiny"), name="tiny", progress=False)
    assert again["calls"]["sent"] == 0 and again["calls"]["from_store"] == 18
    assert pd.read_parquet(out / "labels.parquet").equals(labels)


def test_the_distilled_judge_labels_the_rest_and_is_checked_on_held_out_queries(tmp_path: Path, monkeypatch) -> None:
    from recipematch.pipeline import judging, pooling

    p, lay, corpus, queries = _judging_project(tmp_path, monkeypatch, llm_fused_ranks=3, llm_dense_ranks=0,
                                               long_chars=0, heldout_fraction=0.5, min_train_pairs=2)
    pooling.run(p, lay.stage("pooling@tiny"), name="tiny", progress=False)
    with ChatServer(_server_table(p, corpus, queries), model=JUDGE) as srv:
        import dataclasses
        p = dataclasses.replace(p, judging={"tiny": dataclasses.replace(p.judging["tiny"], base_url=srv.base_url)})
        counts = judging.run(p, lay.stage("judging@tiny"), name="tiny", progress=False)
        assert len(srv.bodies) == 9  # fused ranks 1-3 of three queries
    labels = pd.read_parquet(tmp_path / "artifacts" / "judging" / "tiny" / "labels.parquet")
    assert (labels["judge_route"] == "llm").sum() == 9 and (labels["fused_rank"][labels["judge_route"] == "llm"] <= 3).all()
    dist = labels[labels["judge"] == "distilled"]
    assert len(dist) == 9 and dist["distilled_raw"].notna().all()
    assert dist["score"].astype(int).tolist() == cut_scores(dist["distilled_raw"].to_numpy()).tolist()
    assert set(dist["model"]) == {"all-MiniLM-L6-v2"} and dist["prompt_sha256"].isna().all()
    assert counts["distilled"]["status"] == "trained"
    # q0 and q1 have LLM grades (q2's are null); one is held out, the other trains
    llm_graded = labels[(labels["judge"] == "llm") & labels["score"].notna()]
    assert counts["heldout_queries"] == 1 and counts["distilled"]["train_queries"] == 1
    ag = counts["agreement_heldout"]
    assert ag["n"] + counts["distilled"]["train_pairs"] == len(llm_graded) and ag["n_queries"] == 1
    assert 0 <= ag["exact"] <= 1 and sum(sum(r.values()) for r in ag["confusion"].values()) == ag["n"]
    assert (tmp_path / "artifacts" / "judging" / "tiny" / "distilled" / "config.json").is_file()
    # no model card: sentence-transformers' README.md records wall-clock time (not byte-identical)
    assert not (tmp_path / "artifacts" / "judging" / "tiny" / "distilled" / "README.md").exists()
    # the graded qrels carry both judges' labels: every labelled pair of a query with a positive grade
    from recipematch.beir import load_beir

    _c, _q, qrels = load_beir(tmp_path / "artifacts" / "judging" / "tiny" / "graded")
    graded = labels[labels["score"].notna()]
    want: dict = {}
    for q, d, g in zip(graded["query_id"], graded["doc_id"], graded["score"]):
        want.setdefault(q, {})[d] = int(g)
    assert qrels == {q: g for q, g in want.items() if max(g.values()) > 0}
    assert any(d in qrels.get(q, {}) for q, d in zip(dist["query_id"], dist["doc_id"]))


def test_judging_without_recordings_stops_in_one_line_and_bad_params_are_named(tmp_path: Path, monkeypatch) -> None:
    from recipematch.pipeline import judging, pooling

    p, lay, _c, _q = _judging_project(tmp_path, monkeypatch, backend="replay", base_url="")
    pooling.run(p, lay.stage("pooling@tiny"), name="tiny", progress=False)
    with pytest.raises(RecipematchError, match=r"^judging.tiny: backend replay needs recordings, and "
                                               r"judging.tiny.recordings = '' is no file") as err:
        judging.run(p, lay.stage("judging@tiny"), name="tiny", progress=False)
    assert "\n" not in str(err.value) and not (tmp_path / "artifacts" / "judging" / "tiny").exists()
    raw = load_yaml(REPO / "params.yaml")
    raw["judging"] = {"x": {"pool": "nosuch", "folder": "j", "prompt": "j/p.txt", "model_id": "m"}}
    with pytest.raises(RecipematchError, match=r"judging.x.pool: 'nosuch' is not a pooling entry"):
        parse_params(raw)
    raw["judging"] = {"x": {"pool": "crosslingual", "folder": "j", "prompt": "../p.txt", "model_id": "m"}}
    with pytest.raises(RecipematchError, match=r"judging.x.prompt must be a path inside the project"):
        parse_params(raw)
    raw["judging"] = {"x": {"pool": "crosslingual", "folder": "j", "prompt": "j/p.txt", "model_id": "m", "cut_low": 2.0}}
    with pytest.raises(RecipematchError, match=r"cut_low 2.0 must be below cut_high 1.5"):
        parse_params(raw)
    raw["judging"] = {"x": {"pool": "crosslingual", "folder": "j", "prompt": "j/p.txt", "model_id": "m", "backend": "openai"}}
    with pytest.raises(RecipematchError, match=r"backend openai needs base_url"):
        parse_params(raw)


def test_the_misses_report_row_counts_and_shares_by_hand() -> None:
    from recipematch.judging import misses_markdown

    md = misses_markdown({"dense_base": {"top1_misses": 4, "judged": 3, "called_same_problem": 2, "called_partial": 1},
                          "bm25": {"top1_misses": 2, "judged": 0, "called_same_problem": 0, "called_partial": 0}},
                         name="cl", evaluation="crosslingual", judge_model="m")
    assert "| dense_base | 4 | 3 | 2 | 1 | 66.7% |" in md and "| bm25 | 2 | 0 | 0 | 0 | — |" in md
    assert md.startswith("## Top-1 misses the judge calls the same problem: judging@cl (crosslingual; judge m)")
