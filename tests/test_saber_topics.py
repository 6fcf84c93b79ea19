"""SABER-Math's topic assignment (Section 3.2.2), the vectorised similarity pass and the
stratified query draw (Section 3.4): issue 22, item 5's last pieces.

The walk is tested against a deterministic scorer that knows each problem's true topics: the
walk must recover them exactly, stop early where the parent outscores its children, and turn a
broken answer into a counted record. The vectorised similarities must equal the per-pair
reference (:func:`topic_similarity`, :func:`jaccard`) on a random corpus. The stage test runs
the walk through a local OpenAI-compatible server and checks the labels equal those of the same
run given the true topics as a file.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_llm_support import ChatServer
from test_saber_stage import JUDGE, TREE, _project, _table, _with_url

from recipematch.errors import RecipematchError
from recipematch.llm.prompts import fill_slots
from recipematch.saber import (
    Ontology, SimilarityIndex, information_content, jaccard, stratified_draw, summary_tokens, topic_similarity)
from recipematch.saber_topics import TopicTraversal, kept_children, most_specific, parse_topic_scores

BIG = {"math": None, "algebra": "math", "geometry": "math", "number theory": "math",
       "quadratics": "algebra", "linear": "algebra", "vieta": "quadratics", "discriminant": "quadratics",
       "circles": "geometry", "triangles": "geometry", "similar triangles": "triangles",
       "primes": "number theory", "modular": "number theory"}


def _scorer(ont: Ontology, truth: set[str], parent_score: float = 0.5):
    """A judge that scores a tag 1.0 when it is a true topic or above one, 0.1 otherwise, and
    the node itself ``parent_score``."""
    above = {a for t in truth for a in ont.ancestors(t)}

    def score(node: str, tags: list[str]) -> dict[str, float]:
        return {t: (parent_score if t == node else 1.0 if t in above else 0.1) for t in tags}
    return score


def _walk(ont, truths, answer=None):
    walk = TopicTraversal(ont, sorted(truths))
    while calls := walk.next_calls():
        for pid, node, tags in calls:
            raw = answer(pid, node, tags) if answer else json.dumps(_scorer(ont, truths[pid])(node, tags))
            walk.record(pid, node, *parse_topic_scores(raw, tags))
    return walk


def test_the_walk_recovers_known_topics_and_keeps_the_most_specific() -> None:
    ont = Ontology.from_parents(BIG)
    truths = {"p1": {"vieta"}, "p2": {"similar triangles", "primes"}, "p3": {"circles"}, "p4": {"linear", "vieta"}}
    walk = _walk(ont, truths)
    assert walk.topics() == {p: sorted(t) for p, t in truths.items()}
    assert walk.failures == []
    # p1 visits math, algebra, quadratics (vieta is a leaf): 3 calls; p2 math, geometry, triangles, number theory: 4;
    # p3 math, geometry (circles is a leaf): 2; p4 math, algebra, quadratics: 3
    assert walk.calls_made == 12


def test_the_walk_stops_where_the_parent_outscores_its_children() -> None:
    """A problem about triangles in general: at 'triangles' the parent scores 1.0 and its one
    child 0.5, so the walk ends there and the topic is 'triangles', not a leaf."""
    ont = Ontology.from_parents(BIG)

    def answer(pid, node, tags):
        if node == "triangles":
            return json.dumps({"triangles": 1.0, "similar triangles": 0.5})
        return json.dumps(_scorer(ont, {"triangles"})(node, tags))
    assert _walk(ont, {"p": {"triangles"}}, answer).topics() == {"p": ["triangles"]}
    assert kept_children({"a": 1.0, "b": 0.86, "c": 0.85}, "a", ["b", "c"], 0.85) == ["b"]  # 'exceeds': strict
    assert kept_children({"a": 0.0, "b": 0.0}, "a", ["b"]) == []
    assert most_specific(ont, ["math", "algebra", "vieta", "circles"]) == ["circles", "vieta"]


@pytest.mark.parametrize("raw, reason", [
    (None, "no_answer_text"), ("nope", "no_json_after_preamble"), ("[1]", "no_json_after_preamble"),
    ('{"math": 1, "algebra": 0.1, "algebra": 0.95, "geometry": 0, "number theory": 0}', "duplicate_key"),
    ('{"math": 1, "algebra": ' + "1" * 5000 + ', "geometry": 0, "number theory": 0}', "invalid_json"),
    ('{"math": 1, "algebra": 1' + "0" * 400 + ', "geometry": 0, "number theory": 0}', "invalid_json"),
    ('{"math": 1, "algebra": 1e999, "geometry": 0, "number theory": 0}', "schema: the score of 'algebra'"),
    ('{"math": 1.0, "algebra": 0.2}', "schema: tags not scored"),
    ('{"math": 1, "algebra": 0, "geometry": 0, "number theory": 0, "x": 1}', "schema: tags not offered"),
    ('{"math": 1, "algebra": 1.5, "geometry": 0, "number theory": 0}', "schema: the score of 'algebra'"),
    ('{"math": 1, "algebra": true, "geometry": 0, "number theory": 0}', "schema: the score of 'algebra'"),
    ('{"math": 1, "algebra": NaN, "geometry": 0, "number theory": 0}', "invalid_json"),
])
def test_an_answer_outside_the_schema_is_a_counted_record_and_stops_that_branch(raw, reason) -> None:
    ont = Ontology.from_parents(BIG)
    tags = ["math", "algebra", "geometry", "number theory"]
    assert parse_topic_scores(raw, tags)[0] is None and parse_topic_scores(raw, tags)[1].startswith(reason)

    def answer(pid, node, tg):
        return raw if (pid, node) == ("bad", "math") else json.dumps(_scorer(ont, {"vieta"})(node, tg))
    walk = _walk(ont, {"bad": {"vieta"}, "good": {"vieta"}}, answer)
    assert walk.topics() == {"good": ["vieta"]}
    assert [(f["_id"], f["node"]) for f in walk.failures] == [("bad", "math")]
    assert walk.failures[0]["reason"].startswith(reason)
    for wrapped in ('```json\n{"math": 1, "algebra": 0, "geometry": 0.5, "number theory": 0}\n```',
                    '```JSON\n{"math": 1, "algebra": 0, "geometry": 0.5, "number theory": 0}\n```',
                    '<think>which?</think>\n{"math": 1, "algebra": 0, "geometry": 0.5, "number theory": 0}'):
        assert parse_topic_scores(wrapped, tags)[0] == {"math": 1.0, "algebra": 0.0, "geometry": 0.5,
                                                        "number theory": 0.0}


def test_a_problem_that_keeps_nothing_is_recorded() -> None:
    ont = Ontology.from_parents(BIG)
    walk = _walk(ont, {"p": set()}, lambda pid, node, tags: json.dumps(dict.fromkeys(tags, 0.0)))
    assert walk.topics() == {}
    assert walk.failures == [{"step": "topics", "_id": "p", "node": "math", "reason": "no topic below the root"}]
    with pytest.raises(ValueError, match="tau must lie in"):
        TopicTraversal(ont, ["p"], tau=1.0)


def test_the_vectorised_similarities_equal_the_per_pair_reference() -> None:
    rng = np.random.default_rng(7)
    ont = Ontology.from_parents(BIG)
    nodes = sorted(BIG)
    words = ["factor", "quadratic", "angle", "chase", "parity", "modulo", "induction", "the", "a", "sum", "telescoping"]
    ids = [f"d{i:03d}" for i in range(120)]
    topics = {d: rng.choice(nodes, size=rng.integers(0, 4), replace=True).tolist() for d in ids}
    summaries = {d: " ".join(rng.choice(words, size=rng.integers(0, 6))) for d in ids if rng.random() > 0.1}
    ic = information_content(ont, topics)
    toks = {d: summary_tokens(s) for d, s in summaries.items()}
    index = SimilarityIndex(ont, ic, ids, topics, toks)
    for q in ids[:40]:
        ts, ss = index.topic_row_of(q), index.summary_row(q)
        ref_t = [topic_similarity(ont, ic, topics[q], topics[d]) for d in ids]
        ref_s = [jaccard(toks[q], toks[d]) if q in toks and d in toks else 0.0 for d in ids]
        np.testing.assert_allclose(ts, ref_t, rtol=0, atol=1e-12)
        np.testing.assert_allclose(ss, ref_s, rtol=0, atol=1e-12)
    assert np.isclose(index.topic_row_of(next(d for d in ids if topics[d]))[ids.index(next(d for d in ids if topics[d]))],
                      1.0)
    with pytest.raises(RecipematchError, match="are not ontology nodes"):
        SimilarityIndex(ont, ic, ["x"], {"x": ["nosuch"]}, {})


def test_the_stratified_draw_spreads_queries_evenly_over_the_top_level_topics() -> None:
    eligible = [f"a{i}" for i in range(30)] + [f"g{i}" for i in range(4)] + [f"n{i}" for i in range(10)]
    strata = {q: ["algebra"] if q[0] == "a" else ["geometry"] if q[0] == "g" else ["number theory"] for q in eligible}
    strata["a0"] = ["algebra", "geometry"]
    drawn = stratified_draw(eligible, strata, 15, np.random.default_rng(1))
    by = pd.Series([("algebra" if q[0] == "a" else "geometry" if q[0] == "g" else "number theory") for q in drawn])
    # geometry has 5 members (g0-g3 and a0): at most 5; the others fill its turns evenly
    assert len(drawn) == 15 and len(set(drawn)) == 15
    assert sorted(by.value_counts().tolist()) in ([4, 5, 6], [5, 5, 5])
    assert drawn == stratified_draw(eligible, strata, 15, np.random.default_rng(1))
    assert len(stratified_draw(eligible, strata, 100, np.random.default_rng(1))) == len(eligible)
    assert stratified_draw(eligible, strata, 0, np.random.default_rng(1)) == []
    uneven = stratified_draw(eligible, strata, 12, np.random.default_rng(3))
    assert sum(q[0] == "g" or q == "a0" for q in uneven) >= 3  # a small stratum is not crowded out
    assert Ontology.from_parents(BIG).domains(["vieta", "circles", "math"]) == ["algebra", "geometry"]


TOPIC_PROMPT = "Text:\n{{text}}\n\nTags: {{tags}}\nScore each tag; JSON only.\n"


def test_the_stage_assigns_topics_through_the_llm_and_labels_as_with_the_true_topics(tmp_path: Path) -> None:
    """Two runs of one corpus: topics from the file, and topics from the walk against a local
    server that knows the same topics. The walk's topics equal the file's, so the candidates,
    the judgments and the grades are the same."""
    from recipematch.pipeline import saber

    quality = {f"b{i}": 10 + i for i in range(6)} | {"s0": 5, "s1": 4, "t0": 3, "t1": 2}
    p, lay, rows = _project(tmp_path / "file")
    with ChatServer(_table(rows, quality), model=JUDGE) as srv:
        given = saber.run(_with_url(p, srv.base_url), lay.stage("saber@tiny"), name="tiny", progress=False)
    p2, lay2, _ = _project(tmp_path / "walk", topics="", topic_prompt="in/topic_prompt.txt")
    (tmp_path / "walk" / "in" / "topic_prompt.txt").write_text(TOPIC_PROMPT)
    ont = Ontology.from_parents(TREE)
    table = _table(rows, quality)
    for d, (text, sol, truth) in rows.items():
        score = _scorer(ont, set(truth))
        for node in ("math", "algebra", "geometry"):
            tags = [node, *ont.children(node)]
            user = fill_slots(TOPIC_PROMPT, {"text": f"{text}\n\nSolution:\n{sol}", "tags": ", ".join(tags)}, 'x')
            table[("", user)] = json.dumps(score(node, tags))
    with ChatServer(table, model=JUDGE) as srv:
        walked = saber.run(_with_url(p2, srv.base_url), lay2.stage("saber@tiny"), name="tiny", progress=False)
    out, out2 = (tmp_path / x / "artifacts" / "saber" / "tiny" for x in ("file", "walk"))
    assigned = {json.loads(x)["_id"]: json.loads(x)["topics"] for x in (out2 / "topics.jsonl").read_text().splitlines()}
    assert assigned == {d: t for d, (_x, _s, t) in rows.items()}
    for f in ("candidates.parquet", "grades.parquet"):
        assert pd.read_parquet(out / f).equals(pd.read_parquet(out2 / f))
    assert (out / "qrels.jsonl").read_bytes() == (out2 / "qrels.jsonl").read_bytes()
    # every problem visits math and one area (each area's children are leaves): 2 calls each
    assert walked["topic_calls"] == 2 * len(rows) and given["topic_calls"] == 0
    assert walked["queries_by_top_level_topic"] == {"algebra": 1}
    assert {k: v for k, v in walked.items() if k != "topic_calls"} == {k: v for k, v in given.items() if k != "topic_calls"}


def test_a_run_whose_walk_assigns_nothing_stops_in_one_line(tmp_path: Path) -> None:
    from recipematch.pipeline import saber

    p, lay, rows = _project(tmp_path, topics="", topic_prompt="in/topic_prompt.txt")
    (tmp_path / "in" / "topic_prompt.txt").write_text(TOPIC_PROMPT)
    with ChatServer(_table(rows, {}), model=JUDGE) as srv:  # no topic answers: every call fails
        with pytest.raises(RecipematchError, match=r"^saber.tiny: no problem has a topic \(the walk's failures: "):
            saber.run(_with_url(p, srv.base_url), lay.stage("saber@tiny"), name="tiny", progress=False)
    (tmp_path / "in" / "topic_prompt.txt").write_text("no slots here")
    with pytest.raises(RecipematchError, match=r"^saber.tiny.topic_prompt: the template lacks the slots"):
        saber.run(p, lay.stage("saber@tiny"), name="tiny", progress=False)


def test_params_need_topics_or_a_topic_prompt_and_files_inside_the_folder(tmp_path: Path) -> None:
    from recipematch.config import load_yaml, parse_params
    from conftest import REPO

    raw = load_yaml(REPO / "params.yaml")
    base = {"folder": "in", "corpus": "in/c.jsonl", "ontology": "in/o.json", "judge_prompt": "in/j.txt",
            "model_id": "m", "backend": "replay", "recordings": "in/r.jsonl"}
    raw["saber"] = {"x": base}
    with pytest.raises(RecipematchError, match=r"saber.x: give topics \(a file\) or topic_prompt"):
        parse_params(raw)
    raw["saber"] = {"x": {**base, "topics": "other/t.jsonl"}}
    with pytest.raises(RecipematchError, match=r"saber.x.topics must lie inside saber.x.folder 'in'"):
        parse_params(raw)
    raw["saber"] = {"x": {**base, "folder": ".", "topics": "t.jsonl"}}
    with pytest.raises(RecipematchError, match=r"saber.x.folder must name a folder below the project root"):
        parse_params(raw)
    raw["saber"] = {"x": {**base, "topics": "in/t.jsonl"}}
    assert dataclasses.asdict(parse_params(raw).saber["x"])["stratify"] is True


def test_a_node_that_cannot_be_a_tag_and_problems_without_text() -> None:
    """A comma or a control character in a node name would make the comma-separated tag list
    ambiguous: the walk refuses the tree in one line naming the node."""
    for bad in ("sums, products", "a\nb", " padded"):
        ont = Ontology.from_parents({"math": None, bad: "math"})
        with pytest.raises(RecipematchError, match=r"^ontology: node .* cannot be offered as a tag"):
            TopicTraversal(ont, ["p"])
    with pytest.raises(ValueError, match="n must be an integer >= 0"):
        stratified_draw(["a"], {}, -1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="n must be an integer >= 0"):
        stratified_draw(["a"], {}, 2.5, np.random.default_rng(0))


def test_the_stage_records_a_problem_without_text_and_names_bad_input_files(tmp_path: Path) -> None:
    from recipematch.pipeline import saber

    p, lay, rows = _project(tmp_path, topics="", topic_prompt="in/topic_prompt.txt")
    (tmp_path / "in" / "topic_prompt.txt").write_text(TOPIC_PROMPT)
    with open(tmp_path / "in" / "corpus.jsonl", "a") as fh:
        fh.write(json.dumps({"_id": "blank", "title": "", "text": "   ", "solution": ""}) + "\n")
    ont = Ontology.from_parents(TREE)
    table = _table(rows, {f"b{i}": 10 + i for i in range(6)} | {"s0": 5, "s1": 4, "t0": 3, "t1": 2})
    for d, (text, sol, truth) in rows.items():
        for node in ("math", "algebra", "geometry"):
            tags = [node, *ont.children(node)]
            table[("", fill_slots(TOPIC_PROMPT, {"text": f"{text}\n\nSolution:\n{sol}", "tags": ", ".join(tags)}, 'x'))] = \
                json.dumps(_scorer(ont, set(truth))(node, tags))
    with ChatServer(table, model=JUDGE) as srv:
        counts = saber.run(_with_url(p, srv.base_url), lay.stage("saber@tiny"), name="tiny", progress=False)
        asked = [b["messages"][-1]["content"] for b in srv.bodies]
    assert not any("Text:\n   " in a or a.startswith("Text:\n\n") for a in asked)  # never asked with no text
    assert counts["failures"]["topics: no text"] == 1
    (tmp_path / "in" / "ontology.json").write_text('{"math": null, "algebra": "math", "algebra": "math"}')
    with pytest.raises(RecipematchError, match=r"^saber.tiny.ontology: .*ontology.json: not a JSON object .*duplicate_key"):
        saber.run(p, lay.stage("saber@tiny"), name="tiny", progress=False)
    (tmp_path / "in" / "ontology.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RecipematchError, match=r"^saber.tiny.ontology: .*not a JSON object"):
        saber.run(p, lay.stage("saber@tiny"), name="tiny", progress=False)
    (tmp_path / "in" / "ontology.json").write_text(json.dumps(TREE))
    p2, lay2, _ = _project(tmp_path / "t")
    with open(tmp_path / "t" / "in" / "topics.jsonl", "a") as fh:
        fh.write(json.dumps({"_id": "c0x", "topics": []}) + "\n")
    (tmp_path / "t" / "in" / "topics.jsonl").write_text(json.dumps({"_id": "q0", "topics": ["nosuch"]}) + "\n")
    with pytest.raises(RecipematchError, match=r"^saber.tiny.topics: .*topics.jsonl: problem 'q0': topics \['nosuch'\]"):
        saber.run(p2, lay2.stage("saber@tiny"), name="tiny", progress=False)


@pytest.mark.parametrize("folder", ["artifacts", "artifacts/saber/x", "metrics", "cache", "reports/x", "~", "in ",
                                    "a$b", "src/recipematch"])
def test_a_folder_that_holds_outputs_caches_or_code_is_refused(folder) -> None:
    from recipematch.config import load_yaml, parse_params
    from conftest import REPO

    raw = load_yaml(REPO / "params.yaml")
    raw["saber"] = {"x": {"folder": folder, "corpus": f"{folder}/c.jsonl", "ontology": f"{folder}/o.json",
                          "topics": f"{folder}/t.jsonl", "judge_prompt": f"{folder}/j.txt", "model_id": "m",
                          "backend": "openai", "base_url": "http://127.0.0.1:9"}}
    with pytest.raises(RecipematchError, match=r"saber.x.folder"):
        parse_params(raw)


def test_a_run_where_no_query_is_eligible_says_so(tmp_path: Path) -> None:
    from recipematch.pipeline import saber

    p, lay, rows = _project(tmp_path, k=50)
    with ChatServer(_table(rows, {}), model=JUDGE) as srv:
        with pytest.raises(RecipematchError, match=r"^saber.tiny: 0 of 1 queries eligible: each needs k=50 candidates "
                                                   r"in every category \(topic_only, summary_only, both\)"):
            saber.run(_with_url(p, srv.base_url), lay.stage("saber@tiny"), name="tiny", progress=False)
    summaries = (tmp_path / "artifacts" / "saber" / "tiny" / "summaries.jsonl").read_text().splitlines()
    assert len(summaries) == len(rows) and json.loads(summaries[0])["_id"] == "q0"
