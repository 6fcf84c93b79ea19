"""The judge2@<prompt> stage (paper Section 3, Appendix C: the two-judge control) on a
hand-built arm: the agreement numbers below were worked out by hand for this fixture (see
``HAND``), the two-judge file, replay from recordings, a live second judge on a local
127.0.0.1 server whose exported recordings replay to the same file, and the cells' switch."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from test_llm_support import ChatServer
from test_pipeline_e2e import PARAMS as E2E_PARAMS
from test_pipeline_e2e import _view

from conftest import Outputs, stage_args, stage_paths
from recipematch.config import parse_params
from recipematch.errors import RecipematchError
from recipematch.io import read_json, write_jsonl
from recipematch.llm.prompts import load_prompt
from recipematch.llm.recordings import candidate_key
from recipematch.pipeline import corpus as corpus_stage
from recipematch.pipeline import judge2
from recipematch.pipeline.pair_sources import cell_pairs

MODEL = "Qwen/Qwen3-32B-AWQ"
JUDGE2 = "mistralai/Mistral-Small-24B-Instruct-2501"
JUDGE_T = load_prompt("judge")
GEN_SHA = load_prompt("d1_recipe").sha256

ANCHORS = {"s1": "Find all primes p with p + 2 prime.", "s2": "Solve x^2 = 4 over the reals.",
           "s3": "Show that 2^n > n for every n >= 1.", "s4": "How many divisors does 36 have?"}
P = {"s1": "Determine every prime p such that p + 2 is also prime.", "s2": "Find all real x with x^2 = 4.",
     "s3": "Prove 2^n exceeds n for all positive integers n.", "s4": "Count the positive divisors of 36."}
N = {"N1a": ("s1", "Find all primes p with p + 4 prime."), "N2a": ("s2", "Solve x^2 = 9 over the reals."),
     "N2b": ("s2", "Solve x^3 = 4 over the reals.")}

# The first judge kept P1, P2, P3 and all three near-misses, and rejected P4.
# The second judge: P1 equivalent, P2 not_equivalent (0-vs-2), P3 equivalent, P4 not_equivalent,
# N1a not_equivalent, N2a equivalent (0-vs-2), N2b unanswered (no recording).
SECOND = {("s1", "positive", P["s1"]): "equivalent", ("s2", "positive", P["s2"]): "not_equivalent",
          ("s3", "positive", P["s3"]): "equivalent", ("s4", "positive", P["s4"]): "not_equivalent",
          ("s1", "near_miss", N["N1a"][1]): "not_equivalent", ("s2", "near_miss", N["N2a"][1]): "equivalent"}

# Worked out by hand (accept = equivalent for a positive, not_equivalent for a near-miss):
#  positives (n=4): first accepts P1 P2 P3, second P1 P3 -> both 2, only first 1, neither 1;
#    agreement 3/4; p_e = 3/4*2/4 + 1/4*2/4 = 1/2; kappa = (3/4 - 1/2)/(1 - 1/2) = 1/2;
#    opposite verdicts 1 (P2); same label 3 of 4.
#  near-misses (n=3): first accepts all, second N1a only -> both 1, only first 2;
#    agreement 1/3; p_e = 1*1/3 + 0*2/3 = 1/3; kappa = 0; opposite 1 (N2a); one missing (N2b).
#  all (n=7): both 3, only first 3, neither 1; agreement 4/7;
#    p_e = 6/7*3/7 + 1/7*4/7 = 22/49; kappa = (28/49 - 22/49)/(27/49) = 6/27 = 2/9.
HAND = {
    "positive": {"n": 4, "both_accept": 2, "only_first_accepts": 1, "only_second_accepts": 0, "neither": 1,
                 "agreement": 3 / 4, "cohen_kappa": 1 / 2, "opposite_verdicts": 1, "missing_second": 0,
                 "exact_verdict_agreement": 3 / 4, "accept_rate_first": 3 / 4, "accept_rate_second": 2 / 4},
    "near_miss": {"n": 3, "both_accept": 1, "only_first_accepts": 2, "only_second_accepts": 0, "neither": 0,
                  "agreement": 1 / 3, "cohen_kappa": 0.0, "opposite_verdicts": 1, "missing_second": 1,
                  "one_missing": 1, "exact_verdict_agreement": 1 / 3},
    "all": {"n": 7, "both_accept": 3, "only_first_accepts": 3, "neither": 1, "agreement": 4 / 7,
            "cohen_kappa": 2 / 9, "opposite_verdicts": 2},
}


def _judge_block(verdict: str) -> dict:
    return {"verdict": verdict, "confidence": 0.9, "model_id": MODEL, "prompt_sha256": JUDGE_T.sha256,
            "origin": "live"}


def _neg(text: str) -> dict:
    return {"text": text, "generator": "d1_recipe", "prompt_sha256": GEN_SHA, "model_id": MODEL,
            "judge": _judge_block("not_equivalent"), "edit": None, "counterexample": None}


def _row(sid: str, negs: list[str]) -> dict:
    return {"source_id": sid, "anchor": ANCHORS[sid], "positive": P[sid],
            "positive_provenance": {"generator": "d1_recipe", "prompt_sha256": GEN_SHA, "model_id": MODEL,
                                    "judge": _judge_block("equivalent")},
            "negatives": [_neg(t) for t in negs]}


def _params(**judge2_cfg) -> dict:
    p = copy.deepcopy(E2E_PARAMS)
    p["llm"]["prompts"] = ["d1_recipe"]
    p["style"]["score_prompts"] = ["d1_recipe"]
    p["judge2"] = {"model_id": JUDGE2, **judge2_cfg}
    return p


def _cells(project: Outputs):
    """The paths a cells stage reads pair files from (the first arm's: every arm reads the same)."""
    return project.stage(f"cells@{project.params['arms'][0]}")


@pytest.fixture
def project(tmp_path: Path) -> Outputs:
    """A project holding a corpus and one hand-built D1 arm (rows + the first judge's rejection)."""
    lay = Outputs(tmp_path, _params())
    lay.release.mkdir(parents=True)
    write_jsonl(lay.release / "corpus.jsonl", [{"_id": k, "title": "", "text": v} for k, v in ANCHORS.items()])
    corpus_stage.run(_view(_params(), corpus_stage), stage_paths(tmp_path, "corpus", _params()))
    rows = [_row("s1", [N["N1a"][1]]), _row("s2", [N["N2a"][1], N["N2b"][1]]), _row("s3", [])]
    write_jsonl(lay.pairs / "d1_recipe.jsonl", rows)
    write_jsonl(lay.llm("d1_recipe") / "failures.jsonl", [
        {"source_id": "s4", "stage": "judge", "item": {"role": "positive", "text": P["s4"], "detail": "scripted"},
         "reason": "judged_not_equivalent"}])
    return lay


def _verdict(v: str) -> str:
    return json.dumps({"verdict": v, "confidence": 0.8, "reason": "second judge"})


def _recordings() -> list[dict]:
    return [{"prompt_sha256": JUDGE_T.sha256, "source_id": sid, "variant": candidate_key(text),
             "raw_text": _verdict(v), "model_id": JUDGE2, "origin": "recorded_second_judge"}
            for (sid, _role, text), v in sorted(SECOND.items())]


def _check_hand_numbers(metrics: dict) -> None:
    for role, want in HAND.items():
        got = metrics["agreement"][role]
        for k, v in want.items():
            assert got[k] == pytest.approx(v), (role, k)


def test_disabled_by_default_writes_only_its_status(project: Outputs) -> None:
    out = judge2.run(_view(_params(), judge2), project.stage("judge2@d1_recipe"), "d1_recipe", progress=False)
    assert out["enabled"] is False and "judge2.enabled is false" in out["reason"]
    d = project.p("artifacts", "judge2", "d1_recipe")
    assert sorted(f.name for f in d.iterdir()) == ["status.json"]
    assert read_json(project.metrics / "judge2_d1_recipe.json")["enabled"] is False
    assert project.p("artifacts", "judge2_cells", "d1_recipe.jsonl").read_bytes() == b""


def test_replay_without_recordings_is_a_clear_error(project: Outputs) -> None:
    with pytest.raises(RecipematchError, match=r"recordings/judge2/d1_recipe\.jsonl does not exist.*ships no"):
        judge2.run(_view(_params(enabled=True), judge2), project.stage("judge2@d1_recipe"), "d1_recipe", progress=False)


def test_replayed_second_judge_agreement_table_and_two_judge_file(project: Outputs) -> None:
    write_jsonl(judge2.recordings_path(project.stage("judge2@d1_recipe"), "d1_recipe"), _recordings())
    params = _params(enabled=True)
    out = judge2.run(_view(params, judge2), project.stage("judge2@d1_recipe"), "d1_recipe", progress=False)
    metrics = read_json(project.metrics / "judge2_d1_recipe.json")
    _check_hand_numbers(metrics)
    c = metrics["counts"]
    assert (c["candidates"], c["answered"], c["failed"]) == (7, 6, {"no_recorded_answer": 1})
    assert (c["rows_in"], c["rows"], c["negatives_in"], c["negatives"]) == (3, 2, 3, 1)
    d = project.p("artifacts", "judge2", "d1_recipe")
    pairs = [json.loads(x) for x in (d / "pairs.jsonl").read_text().splitlines()]
    # s1 keeps P1 and N1a; s2 goes (the second judge rejects P2); s3 keeps P3 without near-misses
    assert [(r["source_id"], [n["text"] for n in r["negatives"]]) for r in pairs] == [
        ("s1", [N["N1a"][1]]), ("s3", [])]
    assert all(r["positive_provenance"]["judge_2"]["model_id"] == JUDGE2 for r in pairs)
    assert out["this_run"] == {"from_store": 0, "sent": 7}
    # measuring agreement alone (judge2.cells: first) leaves the cells' copy empty: no cell reruns
    cells_file = project.p("artifacts", "judge2_cells", "d1_recipe.jsonl")
    assert cells_file.read_bytes() == b""
    with pytest.raises(RecipematchError, match="written under judge2.cells: first"):
        cell_pairs(_cells(project), "d1_recipe", judges="both")
    # the cells' switch: `both` reads the two-judge file, `first` the first judge's rows
    judge2.run(_view(_params(enabled=True, cells="both"), judge2), project.stage("judge2@d1_recipe"), "d1_recipe", progress=False)
    assert cells_file.read_bytes() == (d / "pairs.jsonl").read_bytes()
    assert [r["source_id"] for r in cell_pairs(_cells(project), "d1_recipe", judges="both")] == ["s1", "s3"]
    assert [r["source_id"] for r in cell_pairs(_cells(project), "d1_recipe", judges="first")] == ["s1", "s2", "s3"]
    # byte-identical on a rerun
    before = (d / "pairs.jsonl").read_bytes(), (project.metrics / "judge2_d1_recipe.json").read_bytes()
    judge2.run(_view(params, judge2), project.stage("judge2@d1_recipe"), "d1_recipe", progress=False)
    assert ((d / "pairs.jsonl").read_bytes(), (project.metrics / "judge2_d1_recipe.json").read_bytes()) == before
    # switching the judge off again empties the cells' copy, so `both` cannot read a stale one
    judge2.run(_view(_params(), judge2), project.stage("judge2@d1_recipe"), "d1_recipe", progress=False)
    assert cells_file.read_bytes() == b""
    with pytest.raises(RecipematchError, match="judge2.enabled is false"):
        cell_pairs(_cells(project), "d1_recipe", judges="both")


def test_recordings_of_another_model_answer_nothing(project: Outputs) -> None:
    recs = [{**r, "model_id": "someone/else"} for r in _recordings()]
    write_jsonl(judge2.recordings_path(project.stage("judge2@d1_recipe"), "d1_recipe"), recs)
    with pytest.raises(RecipematchError, match="answered none of 7"):
        judge2.run(_view(_params(enabled=True), judge2), project.stage("judge2@d1_recipe"), "d1_recipe", progress=False)
    assert not (project.p("artifacts", "judge2", "d1_recipe") / "pairs.jsonl").exists()


def test_live_second_judge_on_a_local_server_then_replayed(project: Outputs) -> None:
    table = {}
    for (sid, _role, text), v in SECOND.items():
        table[JUDGE_T.render(anchor=ANCHORS[sid], candidate=text)] = _verdict(v)
    # N2b: the server answers with a refusal that does not parse (a failure with its reason)
    table[JUDGE_T.render(anchor=ANCHORS["s2"], candidate=N["N2b"][1])] = "I cannot judge this."
    with ChatServer(table, model=JUDGE2) as srv:
        params = _params(enabled=True, backend="openai", base_url=srv.base_url)
        live = judge2.run(_view(params, judge2), project.stage("judge2@d1_recipe"), "d1_recipe", progress=False)
        assert {b["model"] for b in srv.bodies} == {JUDGE2} and len(srv.bodies) == 7
        again = judge2.run(_view(params, judge2), project.stage("judge2@d1_recipe"), "d1_recipe", progress=False)
        assert again["this_run"] == {"from_store": 7, "sent": 0} and len(srv.bodies) == 7  # nothing paid twice
    _check_hand_numbers(read_json(project.metrics / "judge2_d1_recipe.json"))
    assert live["counts"]["parse_rejected"] == {"invalid_json": 1}
    d = project.p("artifacts", "judge2", "d1_recipe")
    live_pairs = (d / "pairs.jsonl").read_text()
    # the stage's export of its store becomes the replay recordings
    judge2.recordings_path(project.stage("judge2@d1_recipe"), "d1_recipe").parent.mkdir(parents=True)
    shutil.copy(d / "recordings.jsonl", judge2.recordings_path(project.stage("judge2@d1_recipe"), "d1_recipe"))
    judge2.run(_view(_params(enabled=True), judge2), project.stage("judge2@d1_recipe"), "d1_recipe", progress=False)
    _check_hand_numbers(read_json(project.metrics / "judge2_d1_recipe.json"))
    replayed = (d / "pairs.jsonl").read_text()
    assert replayed.replace('"recorded_from_call_store"', '"live"') == live_pairs


def test_params_switches_are_checked() -> None:
    with pytest.raises(RecipematchError, match="judge2.cells: both needs judge2.enabled: true"):
        parse_params(_params(cells="both"))
    with pytest.raises(RecipematchError, match="judge2.base_url"):
        parse_params(_params(enabled=True, backend="openai"))
    with pytest.raises(RecipematchError, match="judge2.api_key_env"):
        parse_params(_params(api_key_env="sk-123 secret"))
    assert parse_params(E2E_PARAMS).judge2.enabled is False  # a params file without the section: off


def test_stage_command_off_is_fast_and_on_without_recordings_exits_2(project: Outputs, repo_root: Path) -> None:
    import subprocess
    import sys
    import time

    import yaml

    (project.root / "params.yaml").write_text(yaml.safe_dump(_params()))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(repo_root / "stages" / "judge2.py"), "--prompt", "d1_recipe",
                        "--root", str(project.root), "--no-progress",
                        *stage_args("judge2@d1_recipe", _params())], capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert took < 20, took  # interpreter start and imports only
    (project.root / "params.yaml").write_text(yaml.safe_dump(_params(enabled=True)))
    r = subprocess.run([sys.executable, str(repo_root / "stages" / "judge2.py"), "--prompt", "d1_recipe",
                        "--root", str(project.root), "--no-progress",
                        *stage_args("judge2@d1_recipe", _params())], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "recordings/judge2/d1_recipe.jsonl does not exist" in r.stderr
