"""recipematch.llm.recordings: replay recordings rebuilt from the peer's post-judge release."""

from __future__ import annotations

import hashlib
import json

import pytest
from test_llm_support import FIXTURES, MODEL, fixture_corpus, fixture_d1_rows, read_jsonl

from recipematch.llm.replay import ReplayBackend
from recipematch.llm.parsing import parse_answer, parse_judge
from recipematch.llm.prompts import load_prompt
from recipematch.llm.recordings import (
    ORIGIN_IMPLIED_JUDGE,
    ORIGIN_RELEASE,
    build_recordings,
    candidate_key,
    load_corpus_texts,
    write_recordings,
)
from recipematch.llm.recordings import read_jsonl as read_jsonl_strict


@pytest.fixture
def corpus() -> dict[str, str]:
    return fixture_corpus()


def test_candidate_key() -> None:
    assert candidate_key("abc") == hashlib.sha256(b"abc").hexdigest()[:16] == "ba7816bf8f01cfea"
    assert candidate_key("caf\u00e9") == hashlib.sha256("caf\u00e9".encode()).hexdigest()[:16]


def test_d1_recordings(corpus: dict[str, str]) -> None:
    rows = fixture_d1_rows()
    recs = build_recordings(rows, corpus, "d1_recipe", n_pos=1, n_neg=3, model_id=MODEL)
    gen = [r for r in recs if r["kind"] == "generation"]
    judge = [r for r in recs if r["kind"] == "judge"]
    assert recs == gen + judge  # generation records first
    assert [r["source_id"] for r in gen] == ["0004", "000d", "000u", "002r", "00cz", "01bq"]
    # 6 positives + 13 released near-misses of which 12 distinct (00cz repeats one)
    assert len(judge) == 6 + 12
    assert [(r["source_id"], r["variant"]) for r in judge] == sorted((r["source_id"], r["variant"]) for r in judge)
    d1, jt = load_prompt("d1_recipe"), load_prompt("judge")
    by_sid = {r["source_id"]: r for r in rows}
    for g in gen:
        assert (g["prompt_sha256"], g["variant"], g["model_id"], g["origin"], g["role"]) == (
            d1.sha256, 0, MODEL, ORIGIN_RELEASE, None)
        answer = json.loads(g["raw_text"])
        assert list(answer) == ["original_problem", "equivalent_variants", "near_miss_variants"]
        assert answer["original_problem"] == corpus[g["source_id"]]
        row = by_sid[g["source_id"]]
        assert answer["equivalent_variants"] == [{"problem": row["positive_text"]}]  # no justification, no tags
        assert [v["problem"] for v in answer["near_miss_variants"]] == [n["text"] for n in row["negatives"]]
        loose = parse_answer("d1_recipe", g["raw_text"], n_pos=1, n_neg=3, anchor=corpus[g["source_id"]],
                             require_tags=False)
        assert loose.ok and loose.positives[0].text == row["positive_text"]
        strict = parse_answer("d1_recipe", g["raw_text"], n_pos=1, n_neg=3, anchor=corpus[g["source_id"]])
        assert strict.ok and not strict.positives and strict.item_rejections[0].reason == "missing_tags"
    for j in judge:
        assert (j["prompt_sha256"], j["model_id"], j["origin"]) == (jt.sha256, MODEL, ORIGIN_IMPLIED_JUDGE)
        row = by_sid[j["source_id"]]
        role = "positive" if j["variant"] == candidate_key(row["positive_text"]) else "near_miss"
        assert j["role"] == role
        assert parse_judge(j["raw_text"]).reason == "null_confidence_not_allowed"
        out = parse_judge(j["raw_text"], allow_null_confidence=True)
        assert out.verdict == ("equivalent" if role == "positive" else "not_equivalent") and out.confidence is None


def test_d4_recordings_map_to_the_restatement_prompt(corpus: dict[str, str]) -> None:
    rows = read_jsonl(FIXTURES / "pairs_d4_unrelated.sample.jsonl")
    recs = build_recordings(rows, corpus, "d4_restatement", n_pos=1, n_neg=0, model_id=MODEL, judge_model_id="judge/x")
    gen = [r for r in recs if r["kind"] == "generation"]
    assert len(gen) == 4 and len(recs) == 8
    assert {r["prompt_sha256"] for r in gen} == {load_prompt("d4_restatement").sha256}
    assert {r["model_id"] for r in recs if r["kind"] == "judge"} == {"judge/x"}
    answer = json.loads(gen[0]["raw_text"])
    assert list(answer) == ["original_problem", "restatements"]
    assert parse_answer("d4_restatement", gen[0]["raw_text"], n_pos=1, n_neg=0, anchor=corpus["0004"],
                        require_tags=False).ok


def test_deterministic_output(corpus: dict[str, str], tmp_path) -> None:
    rows = fixture_d1_rows()
    a = build_recordings(rows, corpus, "d1_recipe", n_pos=1, n_neg=3, model_id=MODEL)
    b = build_recordings(list(reversed(rows)), corpus, "d1_recipe", n_pos=1, n_neg=3, model_id=MODEL)
    assert a == b
    write_recordings(tmp_path / "a.jsonl", a)
    write_recordings(tmp_path / "b.jsonl", b)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert len(ReplayBackend(tmp_path / "a.jsonl")) == len(a)


def test_refusals(corpus: dict[str, str]) -> None:
    rows = fixture_d1_rows()
    kw = dict(model_id=MODEL)
    with pytest.raises(ValueError, match="n_pos must be 1"):
        build_recordings(rows, corpus, "d1_recipe", n_pos=2, n_neg=3, **kw)
    with pytest.raises(ValueError, match="near-misses but n_neg=2"):
        build_recordings(rows, corpus, "d1_recipe", n_pos=1, n_neg=2, **kw)
    with pytest.raises(ValueError, match="n_neg must be 0"):
        build_recordings(rows, corpus, "d4_restatement", n_pos=1, n_neg=3, **kw)
    with pytest.raises(ValueError, match="n_neg=0"):
        build_recordings(rows, corpus, "d4_restatement", n_pos=1, n_neg=0, **kw)  # D1 rows carry near-misses
    with pytest.raises(ValueError, match="not in the corpus"):
        build_recordings(rows, {}, "d1_recipe", n_pos=1, n_neg=3, **kw)
    with pytest.raises(ValueError, match="twice"):
        build_recordings(rows + rows[:1], corpus, "d1_recipe", n_pos=1, n_neg=3, **kw)
    both = [{"source_id": "0004", "positive_text": "p", "negatives": [{"text": "p"}]}]
    with pytest.raises(ValueError, match="both a positive and a near-miss"):
        build_recordings(both, corpus, "d1_recipe", n_pos=1, n_neg=3, **kw)
    with pytest.raises(ValueError, match="empty"):
        build_recordings([{"source_id": "0004", "positive_text": " ", "negatives": []}], corpus, "d1_recipe",
                         n_pos=1, n_neg=3, **kw)


def test_load_corpus_texts(tmp_path) -> None:
    texts = load_corpus_texts(FIXTURES / "corpus.sample.jsonl")
    assert len(texts) == 9 and texts["0000"].startswith("Determinar todos los pares")
    p = tmp_path / "c.jsonl"
    p.write_text('{"_id": "a", "title": "", "text": "x"}\n{"_id": "a", "title": "", "text": "y"}\n')
    with pytest.raises(ValueError, match="duplicate"):
        load_corpus_texts(p)


# ---- lone surrogates hash instead of raising (regression: UnicodeEncodeError in candidate_key)


def test_candidate_key_of_a_lone_surrogate_does_not_raise() -> None:
    assert candidate_key("a\ud800b") == hashlib.sha256("a\ud800b".encode("utf-8", "surrogatepass")).hexdigest()[:16]
    assert candidate_key("a\ud800b") != candidate_key("a\udc00b")
    assert candidate_key("\U0001F600") == hashlib.sha256("\U0001F600".encode()).hexdigest()[:16]  # unchanged


# ---- errors name the file, the line / row and the problem


def _good_line(corpus: dict[str, str]) -> str:
    rec = build_recordings(fixture_d1_rows()[:1], corpus, "d1_recipe", n_pos=1, n_neg=3, model_id=MODEL)[0]
    return json.dumps(rec, ensure_ascii=False)


@pytest.mark.parametrize(
    ("bad_line", "problem"),
    [
        ('{"prompt_sha256": "ab", "source_id": ', "not valid JSON"),
        ("[1, 2, 3]", "must be a JSON object, got list"),
        ('"just a string"', "must be a JSON object, got str"),
        ("RAW_TEXT_NULL", "raw_text must be a string.*got null"),
        ("VARIANT_FLOAT", "variant must be an int or a string"),
        ("NO_ORIGIN", r"lacks \['origin'\]"),
    ],
)
def test_replay_file_errors_name_file_line_and_problem(corpus, tmp_path, bad_line: str, problem: str) -> None:
    good = _good_line(corpus)
    rec = json.loads(good)
    bad_line = {
        "RAW_TEXT_NULL": json.dumps({**rec, "raw_text": None}),
        "VARIANT_FLOAT": json.dumps({**rec, "variant": 0.5}),
        "NO_ORIGIN": json.dumps({k: v for k, v in rec.items() if k != "origin"}),
    }.get(bad_line, bad_line)
    path = tmp_path / "recordings.jsonl"
    path.write_text(good + "\n\n" + bad_line + "\n", encoding="utf-8")  # the bad one is on line 3
    with pytest.raises(ValueError, match=problem) as ei:
        ReplayBackend(path)
    msg = str(ei.value)
    assert msg.startswith(f"{path}, line 3")
    if "raw_text" in problem:
        assert msg.startswith(f"{path}, line 3 (source_id '0004', variant 0): ")


def test_in_memory_recording_errors_name_the_recording(corpus) -> None:
    rec = json.loads(_good_line(corpus))
    with pytest.raises(ValueError, match=r"^recording #1 \(source_id '0004', variant 0\): raw_text must be a string"):
        ReplayBackend(recordings=[rec, {**rec, "raw_text": None}])
    with pytest.raises(ValueError, match=r"^recording #2: a recording must be a JSON object, got list"):
        ReplayBackend(recordings=[rec, rec, [1, 2, 3]])


def test_replay_conflict_names_both_lines(corpus, tmp_path) -> None:
    rec = json.loads(_good_line(corpus))
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "raw_text": "other"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2: conflicting recordings .*first at .*line 1"):
        ReplayBackend(path)


def test_read_jsonl_and_corpus_errors_name_file_and_line(tmp_path) -> None:
    p = tmp_path / "x.jsonl"
    p.write_text('{"_id": "a", "text": "x"}\n{"_id": "b", "text": \n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"x\.jsonl, line 2: not valid JSON"):
        read_jsonl_strict(p)
    with pytest.raises(ValueError, match=r"x\.jsonl, line 2: not valid JSON"):
        load_corpus_texts(p)
    p.write_text('{"_id": "a", "text": "x"}\n[1]\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"x\.jsonl, line 2: expected a JSON object, got list"):
        read_jsonl_strict(p)
    p.write_text('{"_id": "a", "text": "x"}\n{"_id": "b"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"x\.jsonl, line 2: field 'text' missing"):
        load_corpus_texts(p)
    p.write_bytes(b'{"_id": "a", "text": "x"}\n{"_id": "\xff"}\n')
    with pytest.raises(ValueError, match=r"x\.jsonl, line 2: not UTF-8"):
        load_corpus_texts(p)


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ({"source_id": "0004", "negatives": []}, r"release row 1 \(source_id '0004'\): missing field 'positive_text'"),
        ({"source_id": "0004", "positive_text": "p", "negatives": None},
         r"release row 1 \(source_id '0004'\): field 'negatives' must be a list, got null"),
        ({"source_id": "0004", "positive_text": None}, r"release row 1 \(source_id '0004'\): field 'positive_text'"),
        ({"source_id": "0004", "positive_text": "p", "negatives": [{"txt": "n"}]},
         r"release row 1 \(source_id '0004'\): negatives\[0\] is not an object with a 'text' field"),
        ({"source_id": "0004", "positive_text": "p", "negatives": ["n"]}, r"release row 1 .*negatives\[0\]"),
        ({"source_id": "0004", "positive_text": "p", "negatives": [{"text": None}]},
         r"release row 1 .*negatives\[0\]\.text is empty or not a string"),
        ({"positive_text": "p", "negatives": []}, r"release row 1: field 'source_id' missing"),
        (["0004", "p"], r"release row 1: expected an object, got list"),
    ],
)
def test_release_row_errors_name_the_row_and_field(corpus, row, problem: str) -> None:
    good = {"source_id": "000d", "positive_text": "q", "negatives": []}
    with pytest.raises(ValueError, match=problem):
        build_recordings([good, row], corpus, "d1_recipe", n_pos=1, n_neg=3, model_id=MODEL)
