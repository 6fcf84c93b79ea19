"""recipematch.llm.pipeline: the arm runner (keep rule, failures, counts, canonical rows,
reruns), the separate-calls variant, two-judge agreement and the worker self-test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import require_real_data
from test_llm_support import (
    FIXTURES,
    MODEL,
    SAMPLING,
    SHARED_RELEASE,
    ScriptedBackend,
    fixture_corpus,
    fixture_d1_rows,
    read_jsonl,
    release_script,
)

from recipematch.llm.backends import GenerationRequest, GenerationResult
from recipematch.llm.prompts import load_prompt
from recipematch.llm.judge2 import judge_agreement
from recipematch.llm.pipeline import (
    build_generation_requests,
    rows_to_jsonl,
    run_llm_pairs,
    run_llm_pairs_detailed,
    run_llm_pairs_separate_calls,
)
from recipematch.llm.selftest import recorded_items_from_store, self_test
from recipematch.llm.recordings import build_recordings, load_corpus_texts
from recipematch.llm.replay import ReplayBackend

KW = dict(model_id=MODEL, judge_model_id=MODEL, sampling=SAMPLING, seed=42, progress=False)
ROW_KEYS = ["source_id", "anchor", "positive", "positive_provenance", "negatives"]
NEG_KEYS = ["text", "generator", "prompt_sha256", "model_id", "judge", "edit", "counterexample"]
JUDGE_KEYS = ["verdict", "confidence", "model_id", "prompt_sha256", "origin"]


@pytest.fixture
def corpus() -> dict[str, str]:
    return fixture_corpus()


@pytest.fixture
def d1_replay(corpus: dict[str, str]) -> ReplayBackend:
    return ReplayBackend(recordings=build_recordings(fixture_d1_rows(), corpus, "d1_recipe", n_pos=1, n_neg=3,
                                                     model_id=MODEL))


def run_d1(corpus, backend, store, judge_backend=None, require_tags=False):
    return run_llm_pairs(sorted(corpus.items()), prompt_name="d1_recipe", n_pos=1, n_neg=3, backend=backend,
                         judge_backend=judge_backend or backend, store_path=store, require_tags=require_tags, **KW)


def test_replay_of_release_rebuilds_the_released_rows(corpus, d1_replay, tmp_path: Path) -> None:
    rows, failures, counts = run_d1(corpus, d1_replay, tmp_path / "store.jsonl")
    release = {r["source_id"]: r for r in fixture_d1_rows()}
    assert [r["source_id"] for r in rows] == sorted(release)
    d1, jt = load_prompt("d1_recipe"), load_prompt("judge")
    for row in rows:
        rel = release[row["source_id"]]
        assert list(row) == ROW_KEYS
        assert row["anchor"] == corpus[row["source_id"]] and row["positive"] == rel["positive_text"]
        distinct = list(dict.fromkeys(n["text"] for n in rel["negatives"]))
        assert [n["text"] for n in row["negatives"]] == distinct
        prov = row["positive_provenance"]
        assert list(prov) == ["generator", "prompt_sha256", "model_id", "judge"]
        assert (prov["generator"], prov["prompt_sha256"], prov["model_id"]) == ("d1_recipe", d1.sha256, MODEL)
        assert list(prov["judge"]) == JUDGE_KEYS
        assert prov["judge"] == {"verdict": "equivalent", "confidence": None, "model_id": MODEL,
                                 "prompt_sha256": jt.sha256, "origin": "implied_by_release"}
        for n in row["negatives"]:
            assert list(n) == NEG_KEYS
            assert (n["generator"], n["edit"], n["counterexample"], n["judge"]["verdict"]) == (
                "d1_recipe", None, None, "not_equivalent")
    assert counts["generate"] == {"requests": 9, "from_store": 0, "sent": 9, "answered": 6,
                                  "failed": {"no_recorded_answer": 3}}
    assert counts["parse"] == {"ok": 6, "rejected": {}, "rejected_total": 0,
                               "item_rejected": {"near_miss:duplicate_variant": 1}, "item_rejected_total": 1}
    assert counts["judge"] == {"requests": 18, "from_store": 0, "sent": 18, "answered": 18, "failed": {},
                               "parse_rejected": {}}
    assert counts["positives"] == {"candidates": 6, "kept": 6, "rejected": 0, "judge_failed": 0}
    assert counts["negatives"] == {"candidates": 12, "kept": 12, "rejected": 0, "judge_failed": 0}
    assert (counts["rows"], counts["rows_without_negatives"], counts["negatives_in_rows"]) == (6, 1, 12)
    assert counts["failures"] == {"generate:no_recorded_answer": 3, "parse:duplicate_variant": 1}
    assert counts["failures_total"] == len(failures) == 4
    assert [f["source_id"] for f in failures] == ["0000", "0001", "0025", "00cz"]
    dup = failures[3]
    assert (dup["stage"], dup["reason"], dup["item"]["role"], dup["item"]["index"]) == (
        "parse", "duplicate_variant", "near_miss", 2)


def test_rerun_answers_from_store_and_is_byte_identical(corpus, d1_replay, tmp_path: Path) -> None:
    first = run_d1(corpus, d1_replay, tmp_path / "store.jsonl")
    calls = d1_replay.calls
    assert calls == 9 + 18
    store_bytes = (tmp_path / "store.jsonl").read_bytes()
    second = run_d1(corpus, d1_replay, tmp_path / "store.jsonl")
    assert d1_replay.calls == calls  # nothing re-sent
    assert (tmp_path / "store.jsonl").read_bytes() == store_bytes  # nothing appended
    assert rows_to_jsonl(second[0]) == rows_to_jsonl(first[0])
    assert json.dumps(second[1]) == json.dumps(first[1])
    assert second[2]["generate"]["from_store"] == 9 and second[2]["judge"]["sent"] == 0
    fresh = run_d1(corpus, d1_replay, tmp_path / "other" / "store.jsonl")
    assert rows_to_jsonl(fresh[0]) == rows_to_jsonl(first[0])


def test_require_tags_on_the_untagged_release_keeps_nothing(corpus, d1_replay, tmp_path: Path) -> None:
    rows, failures, counts = run_d1(corpus, d1_replay, tmp_path / "s.jsonl", require_tags=True)
    assert rows == [] and counts["parse"]["ok"] == 6
    # each item gets the first rule it breaks: 00cz's repeated near-miss fails on its tags first
    assert counts["parse"]["item_rejected"] == {"positive:missing_tags": 6, "near_miss:missing_tags": 13}


def test_d4_replay(corpus, tmp_path: Path) -> None:
    recs = build_recordings(read_jsonl(FIXTURES / "pairs_d4_unrelated.sample.jsonl"), corpus, "d4_restatement",
                            n_pos=1, n_neg=0, model_id=MODEL)
    be = ReplayBackend(recordings=recs)
    rows, failures, counts = run_llm_pairs(sorted(corpus.items()), prompt_name="d4_restatement", n_pos=1, n_neg=0,
                                           backend=be, judge_backend=be, store_path=tmp_path / "s.jsonl",
                                           require_tags=False, **KW)
    assert [r["source_id"] for r in rows] == ["0004", "000d", "0025", "002r"]
    assert all(r["negatives"] == [] and r["positive_provenance"]["generator"] == "d4_restatement" for r in rows)
    assert counts["judge"]["requests"] == 4 and counts["failures"] == {"generate:no_recorded_answer": 5}
    with pytest.raises(ValueError, match="positives only"):
        run_llm_pairs(sorted(corpus.items()), prompt_name="d4_restatement", n_pos=1, n_neg=3, backend=be,
                      judge_backend=be, store_path=tmp_path / "t.jsonl", require_tags=False, **KW)


def test_keep_rule_and_every_failure_recorded(corpus, tmp_path: Path) -> None:
    base = release_script(corpus, fixture_d1_rows())
    rows_by_sid = {r["source_id"]: r for r in fixture_d1_rows()}
    bad_pos = rows_by_sid["000d"]["positive_text"]  # judge says not equivalent -> no row for 000d
    bad_neg = rows_by_sid["0004"]["negatives"][1]["text"]  # judge says equivalent -> near-miss dropped
    timeout_neg = rows_by_sid["000u"]["negatives"][0]["text"]  # judge call times out
    fenced_neg = rows_by_sid["000u"]["negatives"][1]["text"]  # judge answer in a code fence
    live_null = rows_by_sid["002r"]["negatives"][0]["text"]  # null confidence from a live judge

    def script(r: GenerationRequest):
        if r.prompt_name == "judge":
            cand = r.user.split("Problem B:\n", 1)[1][:-1]
            if cand == bad_pos:
                return '{"verdict": "not_equivalent", "confidence": 0.6, "reason": "bound changed"}'
            if cand == bad_neg:
                return '{"verdict": "equivalent", "confidence": 0.7, "reason": "same problem"}'
            if cand == timeout_neg:
                return GenerationResult(None, "timeout", detail="read timed out")
            if cand == fenced_neg:
                return '```json\n{"verdict": "not_equivalent", "confidence": 0.9, "reason": "r"}\n```'
            if cand == live_null:
                return '{"verdict": "not_equivalent", "confidence": null, "reason": "r"}'
        if r.source_id == "01bq" and r.prompt_name == "d1_recipe":
            return "Sure! " + base(r)
        return base(r)

    res = run_llm_pairs_detailed(sorted(corpus.items()), prompt_name="d1_recipe", n_pos=1, n_neg=3,
                                 backend=ScriptedBackend(script), judge_backend=ScriptedBackend(script),
                                 store_path=tmp_path / "s.jsonl", require_tags=False, **KW)
    rows, failures, counts = res.rows, res.failures, res.counts
    assert [r["source_id"] for r in rows] == ["0004", "000u", "002r", "00cz"]
    r0004 = rows[0]
    assert [n["text"] for n in r0004["negatives"]] == [rows_by_sid["0004"]["negatives"][i]["text"] for i in (0, 2)]
    assert r0004["negatives"][0]["judge"] == {"verdict": "not_equivalent", "confidence": 0.8, "model_id": MODEL,
                                              "prompt_sha256": load_prompt("judge").sha256, "origin": "live"}
    assert rows[1]["negatives"] == [] and len(rows[2]["negatives"]) == 1
    assert counts["positives"] == {"candidates": 5, "kept": 4, "rejected": 1, "judge_failed": 0}
    assert counts["negatives"] == {"candidates": 12, "kept": 8, "rejected": 1, "judge_failed": 3}
    assert counts["negatives_in_rows"] == 5
    assert counts["negatives_unused_no_positive"] == 3  # 000d's near-misses, kept but without a positive
    assert counts["parse"]["rejected"] == {"leading_text": 1}
    assert counts["judge"]["failed"] == {"timeout": 1}
    assert counts["judge"]["parse_rejected"] == {"code_fence": 1, "null_confidence_not_allowed": 1}
    assert counts["failures"] == {
        "generate:no_recorded_answer": 3,
        "parse:leading_text": 1,
        "parse:duplicate_variant": 1,
        "judge:judged_not_equivalent": 1,
        "judge:judged_equivalent": 1,
        "judge:timeout": 1,
        "judge:judge_answer_code_fence": 1,
        "judge:judge_answer_null_confidence_not_allowed": 1,
    }
    assert counts["failures_total"] == len(failures) == 10
    assert all(list(f) == ["source_id", "stage", "item", "reason"] for f in failures)
    rej = next(f for f in failures if f["reason"] == "judged_not_equivalent")
    assert (rej["source_id"], rej["item"]["role"], rej["item"]["text"], rej["item"]["detail"]) == (
        "000d", "positive", bad_pos, "bound changed")
    # judgments: one per judged candidate, failed ones with verdict None
    assert len(res.judgments) == 5 + 12
    assert sum(j["verdict"] is None for j in res.judgments) == 3


def test_generation_failures_are_kept_with_their_reason(corpus, tmp_path: Path) -> None:
    def script(r: GenerationRequest):
        if r.prompt_name == "judge":
            return '{"verdict": "equivalent", "confidence": 0.9, "reason": "r"}'
        return GenerationResult(None, "http_429_exhausted", detail="rate limited")

    rows, failures, counts = run_d1(corpus, ScriptedBackend(script), tmp_path / "s.jsonl")
    assert rows == [] and counts["generate"]["failed"] == {"http_429_exhausted": 9}
    assert {(f["stage"], f["reason"], f["item"]["detail"]) for f in failures} == {
        ("generate", "http_429_exhausted", "rate limited")}
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    assert len(lines) == 9 and all(json.loads(ln)["error"] == "http_429_exhausted" for ln in lines)


def test_separate_calls(corpus, tmp_path: Path) -> None:
    rows_by_sid = {r["source_id"]: r for r in fixture_d1_rows()}
    pos_t, neg_t = load_prompt("d1_recipe:positives_only"), load_prompt("d1_recipe:near_misses_only")
    seen: list[GenerationRequest] = []

    def script(r: GenerationRequest):
        seen.append(r)
        row = rows_by_sid.get(r.source_id)
        if r.prompt_name == "judge":
            cand = r.user.split("Problem B:\n", 1)[1][:-1]
            ok = row is not None and cand == row["positive_text"]
            return json.dumps({"verdict": "equivalent" if ok else "not_equivalent", "confidence": 0.9, "reason": "r"})
        if row is None:
            return None
        if r.prompt_name == pos_t.name:
            assert "Exactly 1 equivalent and 0 near-miss variants." in r.system
            return json.dumps({"original_problem": "x", "equivalent_variants": [{"problem": row["positive_text"]}],
                               "near_miss_variants": []})
        assert r.prompt_name == neg_t.name and "Exactly 0 equivalent and 3 near-miss variants." in r.system
        negs = [n["text"] for n in row["negatives"]]
        if r.source_id == "0004":
            negs = negs[:2] + [row["positive_text"]]  # the other call's positive: dropped
        return json.dumps({"original_problem": "x", "equivalent_variants": [],
                           "near_miss_variants": [{"problem": t} for t in negs]})

    rows, failures, counts = run_llm_pairs_separate_calls(
        sorted(corpus.items()), n_pos=1, n_neg=3, backend=ScriptedBackend(script),
        judge_backend=ScriptedBackend(script), store_path=tmp_path / "s.jsonl", require_tags=False, **KW)
    gen = [r for r in seen if r.prompt_name != "judge"]
    assert len(gen) == 18 and {r.prompt_sha256 for r in gen} == {pos_t.sha256, neg_t.sha256}
    assert len(rows) == 6
    r0 = rows[0]
    assert (r0["positive_provenance"]["generator"], r0["positive_provenance"]["prompt_sha256"]) == (
        "d1_recipe:positives_only", pos_t.sha256)
    assert {(n["generator"], n["prompt_sha256"]) for r in rows for n in r["negatives"]} == {
        ("d1_recipe:near_misses_only", neg_t.sha256)}
    assert len(r0["negatives"]) == 2
    assert counts["separate_calls"] is True
    assert counts["parse"]["item_rejected"] == {"near_miss:duplicate_variant": 2}  # 0004 cross-call + 00cz
    assert counts["generate"]["requests"] == 18 and counts["parse"]["ok"] == 12


def test_input_validation(corpus, d1_replay, tmp_path: Path) -> None:
    srcs = sorted(corpus.items())
    common = dict(prompt_name="d1_recipe", n_pos=1, n_neg=3, backend=d1_replay, judge_backend=d1_replay,
                  store_path=tmp_path / "s.jsonl", require_tags=False)
    with pytest.raises(ValueError, match="twice"):
        run_llm_pairs(srcs + srcs[:1], **common, **KW)
    with pytest.raises(ValueError, match="empty"):
        run_llm_pairs([("x", " ")], **common, **KW)
    with pytest.raises(ValueError, match="top_p"):
        run_llm_pairs(srcs, **common, **{**KW, "sampling": {**SAMPLING, "top_p": 2}})
    with pytest.raises(KeyError):
        run_llm_pairs(srcs, **{**common, "prompt_name": "judge"}, **KW)


# ------------------------------------------------------------------ two judges


def judgments(spec: list[tuple[str, str, str | None]]) -> list[dict]:
    return [{"source_id": f"s{i}", "role": role, "candidate_key": f"k{i}", "verdict": v}
            for i, (role, v, _) in enumerate(spec)]


def test_agreement_reproduces_the_papers_positive_table() -> None:
    # paper App. C (R12-a): of 6,414 positives both accept 5,398, only the first 747, only the
    # second 124, neither 145: agreement 0.864, Cohen's kappa 0.198
    groups = ([("equivalent", "equivalent")] * 5398 + [("equivalent", "not_equivalent")] * 647
              + [("equivalent", None)] * 100 + [("not_equivalent", "equivalent")] * 124
              + [("not_equivalent", "not_equivalent")] * 145)
    first = [{"source_id": f"s{i}", "role": "positive", "candidate_key": "k", "verdict": a}
             for i, (a, _) in enumerate(groups)]
    second = [{"source_id": f"s{i}", "role": "positive", "candidate_key": "k", "verdict": b}
              for i, (_, b) in enumerate(groups)]
    t = judge_agreement(first, second)
    p = t["positive"]
    assert (p["n"], p["both_accept"], p["only_first_accepts"], p["only_second_accepts"], p["neither"]) == (
        6414, 5398, 747, 124, 145)
    assert round(p["agreement"], 3) == 0.864 and round(p["cohen_kappa"], 3) == 0.198
    assert round(p["accept_rate_first"], 4) == round(6145 / 6414, 4) and round(p["accept_rate_second"], 4) == round(
        5522 / 6414, 4)
    assert (p["opposite_verdicts"], p["one_missing"], p["missing_first"], p["missing_second"]) == (771, 100, 0, 100)
    assert p["exact_verdict_agreement"] == (5398 + 145) / 6414
    assert t["near_miss"]["n"] == 0 and t["near_miss"]["agreement"] is None and t["all"]["n"] == 6414


def test_agreement_near_miss_accept_is_not_equivalent_and_unmatched_counted() -> None:
    first = [
        {"source_id": "a", "role": "near_miss", "candidate_key": "1", "verdict": "not_equivalent"},
        {"source_id": "a", "role": "near_miss", "candidate_key": "2", "verdict": "not_equivalent"},
        {"source_id": "a", "role": "near_miss", "candidate_key": "3", "verdict": "equivalent"},
        {"source_id": "b", "role": "near_miss", "candidate_key": "4", "verdict": None},
        {"source_id": "c", "role": "positive", "candidate_key": "5", "verdict": "equivalent"},
    ]
    second = [
        {"source_id": "a", "role": "near_miss", "candidate_key": "1", "verdict": "not_equivalent"},
        {"source_id": "a", "role": "near_miss", "candidate_key": "2", "verdict": "equivalent"},
        {"source_id": "a", "role": "near_miss", "candidate_key": "3", "verdict": "equivalent"},
        {"source_id": "b", "role": "near_miss", "candidate_key": "4", "verdict": None},
        {"source_id": "d", "role": "positive", "candidate_key": "6", "verdict": "equivalent"},
    ]
    t = judge_agreement(first, second)
    n = t["near_miss"]
    assert (n["n"], n["both_accept"], n["only_first_accepts"], n["only_second_accepts"], n["neither"]) == (4, 1, 1, 0, 2)
    assert n["agreement"] == 0.75 and n["exact_verdict_agreement"] == 0.75 and n["opposite_verdicts"] == 1
    # 2x2 [[1, 1], [0, 2]]: po = 0.75, pe = 0.5*0.25 + 0.5*0.75 = 0.5, kappa = 0.5
    assert n["cohen_kappa"] == pytest.approx(0.5)
    assert (t["only_in_first"], t["only_in_second"]) == (1, 1)
    with pytest.raises(ValueError, match="twice"):
        judge_agreement(first + first[:1], second)
    with pytest.raises(ValueError, match="bad verdict"):
        judge_agreement([{**first[0], "verdict": "maybe"}], second)


def test_agreement_from_two_runs(corpus, d1_replay, tmp_path: Path) -> None:
    first = run_llm_pairs_detailed(sorted(corpus.items()), prompt_name="d1_recipe", n_pos=1, n_neg=3,
                                   backend=d1_replay, judge_backend=d1_replay, store_path=tmp_path / "a.jsonl",
                                   require_tags=False, **KW)
    harsh = ScriptedBackend(lambda r: '{"verdict": "not_equivalent", "confidence": 0.5, "reason": "r"}')
    second = run_llm_pairs_detailed(sorted(corpus.items()), prompt_name="d1_recipe", n_pos=1, n_neg=3,
                                    backend=d1_replay, judge_backend=harsh, store_path=tmp_path / "b.jsonl",
                                    require_tags=False, **{**KW, "judge_model_id": "mistral/second"})
    t = judge_agreement(first.judgments, second.judgments)
    assert (t["positive"]["n"], t["positive"]["only_first_accepts"], t["positive"]["accept_rate_second"]) == (6, 6, 0.0)
    assert (t["near_miss"]["both_accept"], t["near_miss"]["agreement"]) == (12, 1.0)
    assert second.rows == [] and {j["model_id"] for j in second.judgments} == {"mistral/second"}


# ------------------------------------------------------------------ worker self-test


def test_self_test_gate(corpus, d1_replay, tmp_path: Path) -> None:
    run_d1(corpus, d1_replay, tmp_path / "s.jsonl")
    reqs = build_generation_requests(sorted(corpus.items()), prompt_name="d1_recipe", n_pos=1, n_neg=3,
                                     model_id=MODEL, sampling=SAMPLING, seed=42)
    items = recorded_items_from_store(reqs, tmp_path / "s.jsonl", limit=4)
    assert [r.source_id for r, _ in items] == ["0004", "000d", "000u", "002r"]
    assert self_test(d1_replay, items) == (True, [])
    drifting = ScriptedBackend(lambda r: next(t for q, t in items if q.key == r.key).replace("$", "$ ", 1)
                               if r.source_id == "000d" else next(t for q, t in items if q.key == r.key))
    ok, mismatches = self_test(drifting, items)
    assert not ok and [m["source_id"] for m in mismatches] == ["000d"]
    assert mismatches[0]["got"] != mismatches[0]["expected"]
    ok, mismatches = self_test(ScriptedBackend(lambda r: None), items[:1])
    assert not ok and mismatches[0]["error"] == "no_recorded_answer"
    with pytest.raises(ValueError):
        self_test(d1_replay, [])


# ------------------------------------------------------------------ the full released samples


@pytest.mark.parametrize(
    ("fname", "prompt", "n_neg", "answered", "judge_requests", "item_rejected", "neg_kept", "no_neg_rows"),
    [
        ("pairs_d1_recipe.jsonl", "d1_recipe", 3, 412, 1522, {"near_miss:duplicate_variant": 1}, 1110, 2),
        ("pairs_d4_unrelated.jsonl", "d4_restatement", 0, 450, 450, {}, 0, 450),
    ],
)
def test_replay_full_release_over_the_2500_sources(tmp_path, fname, prompt, n_neg, answered, judge_requests,
                                                   item_rejected, neg_kept, no_neg_rows) -> None:
    require_real_data(SHARED_RELEASE)  # the repo's data/ (dvc pull); skipped locally, fails under CI
    corpus = load_corpus_texts(SHARED_RELEASE / "corpus.jsonl")
    release = read_jsonl(SHARED_RELEASE / fname)
    be = ReplayBackend(recordings=build_recordings(release, corpus, prompt, n_pos=1, n_neg=n_neg, model_id=MODEL))
    rows, failures, counts = run_llm_pairs(sorted(corpus.items()), prompt_name=prompt, n_pos=1, n_neg=n_neg,
                                           backend=be, judge_backend=be, store_path=tmp_path / "s.jsonl",
                                           require_tags=False, **KW)
    assert counts["sources"] == 2500
    assert counts["generate"]["answered"] == answered == len(release)
    assert counts["generate"]["failed"] == {"no_recorded_answer": 2500 - answered}
    assert counts["parse"]["ok"] == answered and counts["parse"]["rejected"] == {}
    assert counts["parse"]["item_rejected"] == item_rejected
    assert counts["judge"]["requests"] == counts["judge"]["answered"] == judge_requests
    assert counts["positives"]["kept"] == answered and counts["positives"]["rejected"] == 0
    assert counts["negatives"]["kept"] == neg_kept and counts["negatives"]["rejected"] == 0
    assert counts["rows"] == answered and counts["rows_without_negatives"] == no_neg_rows
    for row, rel in zip(rows, release):  # release files are sorted by source id
        assert (row["source_id"], row["positive"]) == (rel["source_id"], rel["positive_text"])
        assert [n["text"] for n in row["negatives"]] == list(dict.fromkeys(n["text"] for n in rel["negatives"]))


# ------------------------------------------------------------------ one bad answer never takes the stage down

DEEP_TAIL = "[" * 5000 + "]" * 5000
LONG_INT_TAIL = "9" * 5000


def hostile_answers(corpus: dict[str, str]) -> dict[str, str]:
    """Generation answers, by source, that used to crash the stage: deep nesting
    (RecursionError), a 5,000-digit integer (ValueError), a positive holding the JSON escape
    of a lone surrogate (UnicodeEncodeError later, in candidate_key)."""
    def answer(sid: str, extra: str) -> str:
        return ('{"original_problem": ' + json.dumps(corpus[sid]) + ', "equivalent_variants": [{"problem": "q"}], '
                '"near_miss_variants": []' + extra + "}")

    return {"0004": answer("0004", ', "x": ' + DEEP_TAIL),
            "000d": answer("000d", ', "x": ' + LONG_INT_TAIL),
            "000u": answer("000u", "").replace('"q"', '"q \\ud800 r"')}


def _hostile_replay(corpus: dict[str, str]) -> ReplayBackend:
    recs = build_recordings(fixture_d1_rows(), corpus, "d1_recipe", n_pos=1, n_neg=3, model_id=MODEL)
    bad = hostile_answers(corpus)
    for r in recs:
        if r["kind"] == "generation" and r["source_id"] in bad:
            r["raw_text"] = bad[r["source_id"]]
    return ReplayBackend(recordings=recs)


def _assert_hostile_outcome(rows, failures, counts, store_path: Path, corpus) -> None:
    assert counts["parse"]["rejected"] == {"invalid_json": 2, "invalid_text": 1}
    by_sid = {f["source_id"]: f for f in failures if f["stage"] == "parse"}
    assert by_sid["0004"]["reason"] == "invalid_json" and by_sid["0004"]["item"]["detail"].startswith("nesting too deep")
    assert by_sid["000d"]["item"]["detail"].startswith("integer literal too long")
    assert by_sid["000u"]["reason"] == "invalid_text" and by_sid["000u"]["item"]["detail"].startswith("lone surrogate")
    assert [r["source_id"] for r in rows] == ["002r", "00cz", "01bq"]  # the others still make rows
    stored = {(r["source_id"], r["prompt_name"]): r for r in read_jsonl(store_path)}
    bad = hostile_answers(corpus)
    for sid, text in bad.items():  # the paid answers are in the store, with their parse outcome
        rec = stored[(sid, "d1_recipe")]
        assert rec["raw_text"] == text and rec["parse"]["ok"] is False
    assert stored[("0004", "d1_recipe")]["parse"]["reason"] == "invalid_json"
    assert stored[("000u", "d1_recipe")]["parse"]["reason"] == "invalid_text"
    json.dumps(failures, ensure_ascii=False).encode("utf-8")  # failures can be written as UTF-8


def test_hostile_answers_are_rejections_and_stored_replay(corpus, tmp_path: Path) -> None:
    be = _hostile_replay(corpus)
    store = tmp_path / "s.jsonl"
    first = run_d1(corpus, be, store)
    _assert_hostile_outcome(*first, store, corpus)
    calls = be.calls
    second = run_d1(corpus, be, store)  # the rerun answers everything from the store, no crash
    assert be.calls == calls and second[2]["generate"]["sent"] == 0 and second[2]["judge"]["sent"] == 0
    assert rows_to_jsonl(second[0]) == rows_to_jsonl(first[0])


def test_hostile_answers_over_http_keep_every_in_flight_result(corpus, tmp_path: Path) -> None:
    from test_llm_support import ChatServer

    from recipematch.llm.http_backend import OpenAICompatibleBackend

    script = release_script(corpus, fixture_d1_rows())
    bad = hostile_answers(corpus)
    bad["000u"] = bad["000u"].replace("\\ud800", "\ud800")  # over HTTP: a literal lone surrogate in the content
    seen: dict[str, GenerationRequest] = {}

    def capture(r: GenerationRequest) -> str | None:
        seen[r.key] = r
        return script(r)

    run_d1(corpus, ScriptedBackend(capture), tmp_path / "ref.jsonl")  # learn the requests
    table = {}
    for r in seen.values():
        text = bad.get(r.source_id) if r.prompt_name == "d1_recipe" else None
        text = text or script(r)
        if text is not None:
            table[(r.system, r.user)] = text
    store = tmp_path / "s.jsonl"
    with ChatServer(table) as srv:
        be = OpenAICompatibleBackend(srv.base_url, MODEL, concurrency=3, max_retries=0, timeout_s=30)
        rows, _failures, counts = run_d1(corpus, be, store)
        assert counts["generate"] == {"requests": 9, "from_store": 0, "sent": 9, "answered": 6,
                                      "failed": {"http_400": 3}}
        assert counts["parse"]["rejected"] == {"invalid_json": 2, "invalid_text": 1}
        assert [r["source_id"] for r in rows] == ["002r", "00cz", "01bq"]
        raw = {json.loads(ln)["source_id"]: json.loads(ln) for ln in store.read_text("utf-8").splitlines()
               if json.loads(ln)["prompt_name"] == "d1_recipe"}
        assert len(raw) == 9 and raw["000u"]["raw_text"] == bad["000u"] and raw["0004"]["raw_text"] == bad["0004"]
        hits = sum(srv.hits.values())
        again = run_d1(corpus, be, store)  # nothing re-sent, nothing crashes
        assert sum(srv.hits.values()) == hits and again[2]["generate"]["sent"] == 0
        assert rows_to_jsonl(again[0]) == rows_to_jsonl(rows)


def test_parser_exception_is_recorded_and_the_answer_stored(corpus, d1_replay, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import recipematch.llm.pipeline as pl

    real = pl.parse_answer

    def flaky(prompt, raw, **kw):
        if kw["anchor"] == corpus["000d"]:
            raise RuntimeError("parser bug")
        return real(prompt, raw, **kw)

    monkeypatch.setattr(pl, "parse_answer", flaky)
    rows, failures, counts = run_d1(corpus, d1_replay, tmp_path / "s.jsonl")
    assert counts["parse"]["rejected"] == {"parser_exception": 1} and counts["parse"]["ok"] == 5
    f = next(f for f in failures if f["reason"] == "parser_exception")
    assert (f["source_id"], f["stage"], f["item"]["detail"]) == ("000d", "parse", "RuntimeError: parser bug")
    stored = {r["source_id"]: r for r in read_jsonl(tmp_path / "s.jsonl") if r["prompt_name"] == "d1_recipe"}
    assert stored["000d"]["raw_text"] is not None
    p = stored["000d"]["parse"]
    assert (p["ok"], p["reason"], p["detail"]) == (False, "parser_exception", "RuntimeError: parser bug")
    assert [r["source_id"] for r in rows] == ["0004", "000u", "002r", "00cz", "01bq"]


def parse_judge_real(raw, **kw):
    from recipematch.llm.parsing import parse_judge

    return parse_judge(raw, **kw)


def test_judge_parser_exception_fails_only_that_judgment(corpus, tmp_path: Path, monkeypatch) -> None:
    import recipematch.llm.pipeline as pl

    base = release_script(corpus, fixture_d1_rows())
    bad_pos = fixture_d1_rows()[0]["positive_text"]  # source 0004

    def script(r: GenerationRequest):
        if r.prompt_name == "judge" and r.user.split("Problem B:\n", 1)[1][:-1] == bad_pos:
            return '{"verdict": "equivalent", "confidence": 0.5, "reason": "BOOM"}'
        return base(r)

    def flaky(raw, **kw):
        if "BOOM" in raw:
            raise RuntimeError("judge parser bug")
        return parse_judge_real(raw, **kw)

    monkeypatch.setattr(pl, "parse_judge", flaky)
    rows, _failures, counts = run_d1(corpus, ScriptedBackend(script), tmp_path / "s.jsonl")
    assert counts["judge"]["parse_rejected"] == {"parser_exception": 1}
    assert counts["failures"]["judge:judge_answer_parser_exception"] == 1
    assert [r["source_id"] for r in rows] == ["000d", "000u", "002r", "00cz", "01bq"]
    stored = [r for r in read_jsonl(tmp_path / "s.jsonl") if r["prompt_name"] == "judge" and "BOOM" in r["raw_text"]]
    assert len(stored) == 1 and stored[0]["parse"]["reason"] == "parser_exception"


def test_a_record_that_cannot_be_stored_fails_alone(corpus, d1_replay, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import recipematch.llm.pipeline as pl

    real = pl.make_record

    def flaky(req, res, parse):
        if req.source_id == "000d" and req.prompt_name == "d1_recipe":
            raise OSError("disk full")
        return real(req, res, parse)

    monkeypatch.setattr(pl, "make_record", flaky)
    store = tmp_path / "s.jsonl"
    rows, failures, counts = run_d1(corpus, d1_replay, store)
    assert counts["generate"]["failed"] == {"no_recorded_answer": 3, "store_failed": 1}
    f = next(f for f in failures if f["reason"] == "store_failed")
    assert (f["source_id"], f["stage"], f["item"]["detail"]) == ("000d", "generate", "OSError: disk full")
    assert [r["source_id"] for r in rows] == ["0004", "000u", "002r", "00cz", "01bq"]
    assert len([r for r in read_jsonl(store) if r["prompt_name"] == "d1_recipe"]) == 8  # all but 000d stored
    monkeypatch.setattr(pl, "make_record", real)
    calls = d1_replay.calls
    rows2, _, counts2 = run_d1(corpus, d1_replay, store)  # the next run sends only what was lost
    assert counts2["generate"]["sent"] == 1 and d1_replay.calls - calls == 1 + counts2["judge"]["sent"]
    assert [r["source_id"] for r in rows2] == ["0004", "000d", "000u", "002r", "00cz", "01bq"]


def test_a_judge_request_that_cannot_be_built_fails_alone(corpus, d1_replay, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import recipematch.llm.pipeline as pl

    bad = fixture_d1_rows()[0]["positive_text"]  # source 0004
    real = pl.candidate_key
    monkeypatch.setattr(pl, "candidate_key", lambda t: (_ for _ in ()).throw(RuntimeError("hash bug")) if t == bad
                        else real(t))
    rows, failures, counts = run_d1(corpus, d1_replay, tmp_path / "s.jsonl")
    f = next(f for f in failures if f["reason"] == "judge_request_failed")
    assert (f["source_id"], f["stage"], f["item"]["role"], f["item"]["detail"]) == (
        "0004", "judge", "positive", "RuntimeError: hash bug")
    assert counts["positives"] == {"candidates": 6, "kept": 5, "rejected": 0, "judge_failed": 1}
    assert counts["judge"]["failed"] == {"judge_request_failed": 1} and counts["judge"]["requests"] == 17
    assert [r["source_id"] for r in rows] == ["000d", "000u", "002r", "00cz", "01bq"]
