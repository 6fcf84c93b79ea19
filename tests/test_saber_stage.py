"""The ``saber@<name>`` stage (issue 22, item 5; SABER-Math Sections 3.2-3.5): summaries through
the LLM with the shipped core-idea prompt, selection, one batch of pairwise judgments per
round on a local OpenAI-compatible server, Bradley-Terry grades, failures counted, resume."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO
from test_llm_support import ChatServer

from recipematch.config import load_yaml, parse_params
from recipematch.errors import RecipematchError
from conftest import Outputs
from recipematch.llm.prompts import fill_slots
from recipematch.pipeline.saber import parse_core_idea, parse_preference

JUDGE = "local/pairwise"
PAIRWISE = "Query:\n{{query}}\n\nA:\n{{first}}\n\nB:\n{{second}}\n\nWhich helps more? Answer A or B.\n"
TREE = {"math": None, "algebra": "math", "quadratics": "algebra", "linear": "algebra", "geometry": "math",
        "circles": "geometry"}


def _corpus():
    # q0 and six quadratics problems sharing its method (topic and summary relevant: 'both'),
    # two linear ones with the same summary (summary-only), two quadratics with other summaries (topic-only)
    rows = {"q0": ("solve x^2 - 5x + 6 = 0", "factor the quadratic into two linear factors", ["quadratics"])}
    for i in range(6):
        rows[f"b{i}"] = (f"solve x^2 - {i + 3}x + {i + 2} = 0 " + "!" * i, "factor the quadratic into linear factors",
                         ["quadratics"])
    for i in range(2):
        rows[f"s{i}"] = (f"solve {i + 2}x + 1 = 0 by factoring", "factor the quadratic into linear factors", ["linear"])
    for i in range(2):
        rows[f"t{i}"] = (f"complete the square for x^2 + {i}x", "use the discriminant formula directly", ["quadratics"])
    rows["c0"] = ("area of a circle of radius 2", "use pi r squared", ["circles"])
    return rows


def _project(tmp_path: Path, **saber):
    rows = _corpus()
    (tmp_path / "in").mkdir(parents=True)
    with open(tmp_path / "in" / "corpus.jsonl", "w") as fh:
        for d, (text, sol, _t) in rows.items():
            fh.write(json.dumps({"_id": d, "title": "", "text": text, "solution": sol}) + "\n")
    with open(tmp_path / "in" / "topics.jsonl", "w") as fh:
        for d, (_x, _s, t) in rows.items():
            fh.write(json.dumps({"_id": d, "topics": t}) + "\n")
    (tmp_path / "in" / "queries.jsonl").write_text(json.dumps({"_id": "q0"}) + "\n")
    (tmp_path / "in" / "ontology.json").write_text(json.dumps(TREE))
    (tmp_path / "in" / "pairwise.txt").write_text(PAIRWISE)
    raw = load_yaml(REPO / "params.yaml")
    raw["saber"] = {"tiny": {"folder": "in", "corpus": "in/corpus.jsonl", "queries": "in/queries.jsonl", "ontology": "in/ontology.json",
                             "topics": "in/topics.jsonl", "judge_prompt": "in/pairwise.txt", "backend": "openai",
                             "base_url": "http://127.0.0.1:9", "model_id": JUDGE, "max_retries": 0, "k": 2,
                             "rounds": 20, "tau_topic": 0.5, "tau_summ": 0.5, **saber}}
    return parse_params(raw), Outputs(tmp_path, raw), rows


def _table(rows, quality, bad_pair=None, bad_doc=None):
    core = resources.files("recipematch").joinpath("prompts", "saber_core_idea.txt").read_bytes().decode()
    table = {}
    for d, (text, sol, _t) in rows.items():
        ans = {"noCoreIdea": False, "coreIdea": sol, "supporingIdeas": [], "keywords": ["x"], "confidence": 0.9}
        if d == "c0":
            ans = {"noCoreIdea": True, "coreIdea": None, "supporingIdeas": [], "keywords": [], "confidence": 0.1}
        table[("", fill_slots(core, {"statement": text, "solution": sol}, 'x'))] = json.dumps(ans)
    for a in rows:
        for b in rows:
            if a != b:
                user = fill_slots(PAIRWISE, {"query": rows["q0"][0], "first": rows[a][0], "second": rows[b][0]}, 'x')
                pick = "A" if quality.get(a, 0) > quality.get(b, 0) else "B"
                bad = bad_pair == (a, b) or bad_doc in (a, b)
                table[("", user)] = "maybe" if bad else json.dumps({"preferred": pick})
    return table


def _with_url(p, url):
    return dataclasses.replace(p, saber={"tiny": dataclasses.replace(p.saber["tiny"], base_url=url)})


def test_the_saber_stage_selects_runs_the_tournament_and_recovers_the_judges_order(tmp_path: Path) -> None:
    from recipematch.pipeline import saber

    p, lay, rows = _project(tmp_path)
    quality = {f"b{i}": 10 + i for i in range(6)} | {"s0": 5, "s1": 4, "t0": 3, "t1": 2}
    with ChatServer(_table(rows, quality), model=JUDGE) as srv:
        counts = saber.run(_with_url(p, srv.base_url), lay.stage("saber@tiny"), name="tiny", progress=False)
    out = tmp_path / "artifacts" / "saber" / "tiny"
    cands = pd.read_parquet(out / "candidates.parquet")
    assert cands.groupby("category").size().to_dict() == {"both": 2, "summary_only": 2, "topic_only": 2}
    assert set(cands[cands["category"] == "summary_only"]["doc_id"]) == {"s0", "s1"}
    assert set(cands[cands["category"] == "topic_only"]["doc_id"]) == {"t0", "t1"}
    grades = pd.read_parquet(out / "grades.parquet").set_index("doc_id")
    # six candidates, up to 20 rounds: the tournament stops once every pair has met, so the order is the judge's, exactly
    assert counts["judgments"] == 15 and counts["n_failures"] == 0
    assert counts["n_summaries"] == len(rows)  # c0 has no core idea: an empty summary, not a failure
    order = grades.sort_values("grade", ascending=False).index.tolist()
    assert order == sorted(grades.index, key=lambda d: -quality[d])
    assert grades["grade"].max() == 5.0 and grades["grade"].min() == 0.0
    q = [json.loads(line) for line in (out / "qrels.jsonl").read_text().splitlines()]
    assert len(q) == 6 and all(0.0 <= r["score"] <= 5.0 for r in q)
    assert 0.0 <= counts["bm25_rerank_ndcg10_exponential"] <= 1.0
    # a rerun answers from the call store without the server
    again = saber.run(p, lay.stage("saber@tiny"), name="tiny", progress=False)
    assert again == counts
    assert pd.read_parquet(out / "grades.parquet").set_index("doc_id").equals(grades)


def test_a_broken_pairwise_answer_is_a_counted_failure_not_a_win(tmp_path: Path) -> None:
    from recipematch.pipeline import saber

    p, lay, rows = _project(tmp_path, both_orders=True)
    quality = {f"b{i}": 10 + i for i in range(6)} | {"s0": 5, "s1": 4, "t0": 3, "t1": 2}
    with ChatServer(_table(rows, quality, bad_pair=("t0", "t1")), model=JUDGE) as srv:
        counts = saber.run(_with_url(p, srv.base_url), lay.stage("saber@tiny"), name="tiny", progress=False)
    judged = [json.loads(x) for x in (tmp_path / "artifacts/saber/tiny/judgments.jsonl").read_text().splitlines()]
    broken = [j for j in judged if {j["first"], j["second"]} == {"t0", "t1"}]
    assert len(broken) == 1 and broken[0]["winner"] is None and broken[0]["reason"] == "answer outside A/B"
    assert counts["failures"].get("judgment: answer outside A/B") == 1


def test_a_candidate_whose_every_game_failed_gets_no_grade(tmp_path: Path) -> None:
    """No valid game is no evidence: t1 is left out of the qrels and flagged, never given an
    invented grade, and the others' grades are rescaled over the candidates that played."""
    from recipematch.pipeline import saber

    p, lay, rows = _project(tmp_path)
    quality = {f"b{i}": 10 + i for i in range(6)} | {"s0": 5, "s1": 4, "t0": 3, "t1": 2}
    with ChatServer(_table(rows, quality, bad_doc="t1"), model=JUDGE) as srv:
        counts = saber.run(_with_url(p, srv.base_url), lay.stage("saber@tiny"), name="tiny", progress=False)
    out = tmp_path / "artifacts" / "saber" / "tiny"
    grades = pd.read_parquet(out / "grades.parquet").set_index("doc_id")
    assert grades.loc["t1", "games"] == 0 and pd.isna(grades.loc["t1", "grade"])
    played = grades.drop(index="t1")
    assert played["grade"].max() == 5.0 and played["grade"].min() == 0.0
    assert played.sort_values("grade", ascending=False).index.tolist() == sorted(played.index, key=lambda d: -quality[d])
    q = [json.loads(line) for line in (out / "qrels.jsonl").read_text().splitlines()]
    assert {r["corpus-id"] for r in q} == set(played.index)
    assert counts["ungraded_candidates"] == 1 and counts["queries_without_grades"] == 0
    assert counts["failures"]["judgment: answer outside A/B"] == counts["n_failures"] > 0


def test_the_parsers_and_bad_inputs(tmp_path: Path) -> None:
    from recipematch.pipeline import saber

    assert parse_preference(" A ") == ("A", "") and parse_preference('{"preferred": "B"}') == ("B", "")
    assert parse_preference("C") == (None, "answer outside A/B") and parse_preference('["A"]')[0] is None
    assert parse_core_idea('{"noCoreIdea": true}') == ("", "")
    assert parse_core_idea('{"noCoreIdea": false, "coreIdea": "use parity", "supportingIdeas": ["mod 2"]}') == \
        ("use parity mod 2", "")
    assert parse_core_idea('{"noCoreIdea": "no"}')[1].startswith("schema")
    assert parse_core_idea("nope") == (None, "no_json_after_preamble")
    assert parse_core_idea('{"noCoreIdea": false, "coreIdea": "x", "coreIdea": "y"}') == (None, "duplicate_key")
    assert parse_core_idea('{"noCoreIdea": ' + "1" * 5000 + "}") == (None, "invalid_json")
    assert parse_preference('{"preferred": "A", "x": ' + "1" * 5000 + "}") == (None, "answer outside A/B")
    p, lay, _rows = _project(tmp_path, backend="replay", base_url="")
    with pytest.raises(RecipematchError, match=r"saber.tiny: backend replay needs recordings"):
        saber.run(p, lay.stage("saber@tiny"), name="tiny", progress=False)
    p, lay, _rows = _project(tmp_path / "again")
    (tmp_path / "again" / "in" / "ontology.json").write_text(json.dumps({**TREE, "math": "circles"}))
    with pytest.raises(RecipematchError, match=r"^saber.tiny.ontology: .*ontology.json: ontology: cycle through node "
                                               r"'(math|geometry|circles)'$"):
        saber.run(p, lay.stage("saber@tiny"), name="tiny", progress=False)
    raw = load_yaml(REPO / "params.yaml")
    raw["saber"] = {"x": {"folder": "in", "corpus": "/etc/c.jsonl", "ontology": "o", "topics": "t", "judge_prompt": "j",
                          "model_id": "m"}}
    with pytest.raises(RecipematchError, match=r"saber.x.corpus must be a path inside the project"):
        parse_params(raw)


def test_a_run_that_grades_nothing_fails_after_recording_why(tmp_path: Path) -> None:
    """Every pairwise answer broken: no grade anywhere. The stage writes its failures and
    counts, then stops with one line (a non-zero exit), never a silent empty benchmark."""
    from recipematch.pipeline import saber

    p, lay, rows = _project(tmp_path)
    table = _table(rows, {})
    for key in list(table):
        if key[1].startswith("Query:"):
            table[key] = "maybe"
    with ChatServer(table, model=JUDGE) as srv:
        with pytest.raises(RecipematchError, match=r"saber.tiny: no query got a single grade \(1 queries, .*"
                                                   r"judgment: answer outside A/B"):
            saber.run(_with_url(p, srv.base_url), lay.stage("saber@tiny"), name="tiny", progress=False)
    out = tmp_path / "artifacts" / "saber" / "tiny"
    assert (out / "failures.jsonl").read_text().count("answer outside A/B") > 0
    counts = json.loads((tmp_path / "metrics" / "saber" / "tiny.json").read_text())
    assert counts["queries_without_grades"] == 1 and (out / "qrels.jsonl").read_text() == ""
