"""The two-judge control (paper Appendix C): a second judge with its own backend re-judges
every candidate of an arm (every kept pair among them), replayable from recordings; the
two-judge row set; the agreement table (exact agreement, 0-vs-2 disagreements, Cohen's kappa)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_llm_support import (
    MODEL,
    SAMPLING,
    ChatServer,
    ScriptedBackend,
    fixture_corpus,
    fixture_d1_rows,
    release_script,
)

from recipematch.errors import RecipematchError
from recipematch.llm.backends import GenerationRequest
from recipematch.llm.judge2 import arm_candidates, judge_agreement, run_second_judge
from recipematch.llm.pipeline import rows_to_jsonl, run_llm_pairs_detailed
from recipematch.llm.prompts import load_prompt
from recipematch.llm.recordings import candidate_key, recordings_from_store
from recipematch.llm.replay import ReplayBackend
from recipematch.llm.serving import ServerSpec, open_server

JUDGE2 = "mistralai/Mistral-Small-24B-Instruct-2501"
JUDGE_T = load_prompt("judge")


def candidate_of(req: GenerationRequest) -> str:
    return req.user.split("Problem B:\n", 1)[1][:-1]


def verdict_text(verdict: str) -> str:
    return json.dumps({"verdict": verdict, "confidence": 0.7, "reason": "scripted"})


@pytest.fixture
def arm(tmp_path: Path):
    """One D1 arm whose first judge rejects one positive and one near-miss."""
    corpus = fixture_corpus()
    rows = fixture_d1_rows()
    script = release_script(corpus, rows)
    flip1 = {rows[1]["positive_text"], rows[0]["negatives"][0]["text"]}

    def first(r: GenerationRequest) -> str | None:
        if r.prompt_name == "judge" and candidate_of(r) in flip1:
            cand = candidate_of(r)
            return verdict_text("not_equivalent" if cand == rows[1]["positive_text"] else "equivalent")
        return script(r)

    res = run_llm_pairs_detailed(sorted(corpus.items()), prompt_name="d1_recipe", n_pos=1, n_neg=3,
                                 backend=ScriptedBackend(first), judge_backend=ScriptedBackend(first),
                                 store_path=tmp_path / "first.jsonl", model_id=MODEL, judge_model_id=MODEL,
                                 sampling=SAMPLING, seed=42, require_tags=False, progress=False)
    return corpus, rows, res


def second_verdicts(res) -> dict[tuple[str, str, str], str | None]:
    """The second judge's designed verdicts: the keep verdict everywhere except the first
    two positives (both rejected) and the last near-miss (accepted as equivalent); the third
    positive's judgment is left unrecorded (None)."""
    out: dict[tuple[str, str, str], str | None] = {}
    pos = [j for j in res.judgments if j["role"] == "positive"]
    neg = [j for j in res.judgments if j["role"] == "near_miss"]
    for j in res.judgments:
        out[(j["source_id"], j["role"], j["candidate_key"])] = "equivalent" if j["role"] == "positive" else "not_equivalent"
    for j in pos[:2]:
        out[(j["source_id"], "positive", j["candidate_key"])] = "not_equivalent"
    out[(neg[-1]["source_id"], "near_miss", neg[-1]["candidate_key"])] = "equivalent"
    out[(pos[2]["source_id"], "positive", pos[2]["candidate_key"])] = None
    return out


def recordings_for(res, verdicts) -> list[dict]:
    return [{"prompt_sha256": JUDGE_T.sha256, "source_id": sid, "variant": key, "raw_text": verdict_text(v),
             "model_id": JUDGE2, "origin": "recorded_second_judge"}
            for (sid, _role, key), v in sorted(verdicts.items()) if v is not None]


def test_second_judge_replayed_from_recordings(arm, tmp_path: Path) -> None:
    corpus, _rows, res = arm
    verdicts = second_verdicts(res)
    replay = ReplayBackend(recordings=recordings_for(res, verdicts))
    kw = dict(judge_backend=replay, judge_model_id=JUDGE2, sampling=SAMPLING, seed=42)
    two = run_second_judge(res.rows, res.judgments, corpus, store_path=tmp_path / "j2.jsonl", **kw)

    # every candidate, every kept pair among them, was sent to the second judge
    kept_keys = {(r["source_id"], "positive", candidate_key(r["positive"])) for r in res.rows}
    kept_keys |= {(r["source_id"], "near_miss", candidate_key(n["text"])) for r in res.rows for n in r["negatives"]}
    judged = {(j["source_id"], j["role"], j["candidate_key"]) for j in two.judgments_second}
    assert kept_keys <= judged and len(judged) == len(res.judgments) == two.counts["candidates"]
    assert two.counts["failed"] == {"no_recorded_answer": 1} and len(two.failures) == 1

    # the two-judge rows: positives both accept, with only the near-misses both accept
    want_rows = []
    for r in res.rows:
        if verdicts[(r["source_id"], "positive", candidate_key(r["positive"]))] != "equivalent":
            continue
        negs = [n["text"] for n in r["negatives"]
                if verdicts[(r["source_id"], "near_miss", candidate_key(n["text"]))] == "not_equivalent"]
        want_rows.append((r["source_id"], r["positive"], negs))
    assert [(r["source_id"], r["positive"], [n["text"] for n in r["negatives"]]) for r in two.rows] == want_rows
    assert 0 < len(two.rows) < len(res.rows)
    for r in two.rows:
        assert r["positive_provenance"]["judge_2"]["model_id"] == JUDGE2
        assert r["positive_provenance"]["judge"]["model_id"] == MODEL  # the first judge's block is kept
        assert all(n["judge_2"]["verdict"] == "not_equivalent" for n in r["negatives"])

    # the agreement table, recounted here from the designed verdicts
    first = {(j["source_id"], j["role"], j["candidate_key"]): j["verdict"] for j in res.judgments}
    for role in ("positive", "near_miss"):
        keep = "equivalent" if role == "positive" else "not_equivalent"
        ks = [k for k in first if k[1] == role]
        a = [first[k] == keep for k in ks]
        b = [verdicts[k] == keep for k in ks]
        n = len(ks)
        both = sum(x and y for x, y in zip(a, b))
        neither = sum(not x and not y for x, y in zip(a, b))
        t = two.agreement[role]
        assert (t["n"], t["both_accept"], t["neither"]) == (n, both, neither)
        assert t["agreement"] == pytest.approx((both + neither) / n)
        pa, pb = sum(a) / n, sum(b) / n
        pe = pa * pb + (1 - pa) * (1 - pb)
        assert t["cohen_kappa"] == pytest.approx(((both + neither) / n - pe) / (1 - pe))
        opposite = sum(first[k] is not None and verdicts[k] is not None and first[k] != verdicts[k] for k in ks)
        assert t["opposite_verdicts"] == opposite and t["missing_second"] == sum(verdicts[k] is None for k in ks)
        exact = sum(first[k] == verdicts[k] for k in ks) / n
        assert t["exact_verdict_agreement"] == pytest.approx(exact)
    assert two.agreement["positive"]["opposite_verdicts"] >= 1 and two.agreement["near_miss"]["opposite_verdicts"] >= 1

    # a rerun answers from the second judge's store and gives the same bytes
    again = run_second_judge(res.rows, res.judgments, corpus, store_path=tmp_path / "j2.jsonl", **kw)
    assert rows_to_jsonl(again.rows) == rows_to_jsonl(two.rows) and again.agreement == two.agreement
    assert again.counts["sent"] == 0 and again.counts["from_store"] == two.counts["candidates"]


def test_live_second_judge_on_its_own_server_then_replayed(arm, tmp_path: Path) -> None:
    corpus, _rows, res = arm
    verdicts = second_verdicts(res)
    table = {}
    for j in res.judgments:
        system, user = JUDGE_T.render(anchor=corpus[j["source_id"]], candidate=j["text"])
        v = verdicts[(j["source_id"], j["role"], j["candidate_key"])]
        table[(system, user)] = verdict_text(v) if v is not None else "Sorry, I cannot judge this."
    with ChatServer(table, model=JUDGE2) as srv:
        live = open_server(ServerSpec(srv.base_url, JUDGE2, max_retries=0), probe=True)
        two = run_second_judge(res.rows, res.judgments, corpus, judge_backend=live, judge_model_id=JUDGE2,
                               store_path=tmp_path / "live.jsonl", sampling=SAMPLING, seed=42)
        assert {b["model"] for b in srv.bodies} == {JUDGE2} and len(srv.bodies) == len(res.judgments)
    assert two.counts["parse_rejected"] == {"invalid_json": 1}  # a refusal is a failure record with its reason
    assert [f["reason"] for f in two.failures] == ["judge_answer_invalid_json"]
    # the live run's store becomes the second judge's recordings: a replay reproduces it
    replay = ReplayBackend(recordings=recordings_from_store(tmp_path / "live.jsonl"))
    replayed = run_second_judge(res.rows, res.judgments, corpus, judge_backend=replay, judge_model_id=JUDGE2,
                                store_path=tmp_path / "replayed.jsonl", sampling=SAMPLING, seed=42)
    def without_origin(rows: list[dict]) -> str:  # "live" there, "recorded_from_call_store" here
        rows = json.loads(json.dumps(rows))
        for r in rows:
            for item in [r["positive_provenance"], *r["negatives"]]:
                assert item["judge_2"]["origin"] in ("live", "recorded_from_call_store")
                item["judge_2"]["origin"] = None
        return rows_to_jsonl(rows)

    assert without_origin(replayed.rows) == without_origin(two.rows) and replayed.agreement == two.agreement
    assert replayed.counts["sent"] == len(res.judgments)


def test_arm_candidates_rebuild_the_first_judgments_from_the_written_files(arm) -> None:
    _corpus, _rows, res = arm
    rebuilt = arm_candidates(res.rows, res.failures)
    full = {(j["source_id"], j["role"], j["candidate_key"]): (j["text"], j["verdict"]) for j in res.judgments}
    got = {(c["source_id"], c["role"], c["candidate_key"]): (c["text"], c["verdict"]) for c in rebuilt}
    assert got.items() <= full.items()
    # only the near-misses the first judge kept for a source whose positive it rejected are not in the files
    lost = set(full) - set(got)
    rejected_sources = {k[0] for k, (_t, v) in full.items() if k[1] == "positive" and v != "equivalent"}
    assert lost == {k for k, (_t, v) in full.items()
                    if k[0] in rejected_sources and k[1] == "near_miss" and v == "not_equivalent"}
    assert res.counts["negatives_unused_no_positive"] == len(lost) > 0


def test_bad_candidates_are_clear_errors(arm, tmp_path: Path) -> None:
    corpus, _rows, res = arm
    kw = dict(judge_backend=ScriptedBackend(lambda r: None), judge_model_id=JUDGE2, sampling=SAMPLING, seed=1,
              store_path=tmp_path / "x.jsonl")
    bad_key = [{**res.judgments[0], "candidate_key": "0" * 16}]
    with pytest.raises(RecipematchError, match="is not the key of its text"):
        run_second_judge(res.rows, bad_key, corpus, **kw)
    with pytest.raises(RecipematchError, match="listed twice"):
        run_second_judge(res.rows, res.judgments[:1] * 2, corpus, **kw)
    with pytest.raises(RecipematchError, match="has no anchor text"):
        run_second_judge(res.rows, res.judgments[:1], {}, **kw)


def test_kappa_undefined_when_everything_agrees_on_one_label() -> None:
    js = [{"source_id": f"s{i}", "role": "positive", "candidate_key": f"k{i}", "verdict": "equivalent"}
          for i in range(4)]
    t = judge_agreement(js, js)["positive"]
    assert (t["agreement"], t["cohen_kappa"], t["opposite_verdicts"]) == (1.0, None, 0)
