"""The MELD attack generated through the LLM backends (issue 21, item 4; paper Section 6 and
Appendix D): the reconstructed procedure's rounds (the first user turn, then the later one with
the topics already written), MELD's screen, the rows in the release's schema, a local
OpenAI-compatible server, resume from the call store and replay from its copy."""

from __future__ import annotations

import dataclasses
import json
import shutil
from importlib import resources
from pathlib import Path

import pytest
from conftest import REPO
from test_llm_support import ChatServer

from recipematch.config import load_yaml, parse_params
from recipematch.errors import RecipematchError
from recipematch.external.meld_attack import read_attack_rows
from recipematch.external.meld_generate import (
    build_rows, parse_generation, parse_screen, read_domains, repair_latex_escapes)
from recipematch.llm.prompts import PromptTemplate, load_prompt, load_prompt_parts
from conftest import Outputs

MODEL = "local/generator"
DOMAINS = [{"domain": "algebra", "field_1": "vector spaces", "field_2": "module theory",
            "connection": "A vector space is a module over a field."},
           {"domain": "probability", "field_1": "probability", "field_2": "measure theory",
            "connection": "A probability space is a measure space of mass one."}]


def _pair(topic, d, s1, s2, f1=None):
    return {"topic": topic, "entry_1": {"framing": f1 or d["field_1"], "statement": s1},
            "entry_2": {"framing": d["field_2"], "statement": s2}}


def _answers(n_pairs=3):
    """Round 1 and round 2 answers per domain pair, and the screen's verdicts (by statement_1)."""
    out = {}
    for i, d in enumerate(DOMAINS):
        r1 = [_pair(f"t{i}{k}", d, f"S{i}{k} in {d['field_1']} with $\\frac{{a}}{{b}}$ and \\mathbb{{R}}",
                    f"T{i}{k} in {d['field_2']}") for k in range(n_pairs)]
        r2 = [_pair(f"u{i}0", d, f"S{i}0 in {d['field_1']} with $\\frac{{a}}{{b}}$ and \\mathbb{{R}}", "a repeat"),
              _pair(f"u{i}1", d, f"V{i}1 misframed", f"W{i}1", f1="wrong field"),
              _pair(f"u{i}2", d, f"V{i}2 in {d['field_1']}", f"W{i}2 in {d['field_2']}")]
        # the JSON text the model writes: LaTeX backslashes left bare, as LLMs write them
        out[(i, 1)] = json.dumps({"pairs": r1}).replace("\\\\", "\\")
        out[(i, 2)] = json.dumps({"pairs": r2}).replace("\\\\", "\\")
    return out


def _project(tmp_path: Path, **entry):
    (tmp_path / "meld").mkdir(parents=True)
    (tmp_path / "meld" / "domains.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOMAINS))
    raw = load_yaml(REPO / "params.yaml")
    raw["meld_generate"] = {"meld9": {"folder": "meld", "domains": "meld/domains.jsonl", "backend": "openai",
                                      "base_url": "http://127.0.0.1:9", "model_id": MODEL, "max_retries": 0,
                                      "n_pairs": 3, "rounds": 2, "negatives": 2, **entry}}
    return parse_params(raw), Outputs(tmp_path, raw)


def _table(not_equivalent=("T01 in module theory", "T10 in measure theory"), asked=3):
    first = load_prompt_parts("t", "meld_generate.system.txt", "meld_generate.user_first.txt")
    later = load_prompt_parts("t", "meld_generate.system.txt", "meld_generate.user_later.txt")
    screen = load_prompt("meld_screen")
    answers = _answers()
    table = {}
    for i, d in enumerate(DOMAINS):
        slots = {"field_1": d["field_1"], "field_2": d["field_2"], "connection": d["connection"], "n_pairs": asked}
        table[first.render(**slots)] = answers[(i, 1)]
        covered = "\n".join(f"- t{i}{k}" for k in range(3))
        table[later.render(**slots, covered=covered)] = answers[(i, 2)]
        for rnd in (1, 2):
            for p in parse_generation(answers[(i, rnd)], d["field_1"], d["field_2"])[0]:
                ok = p["statement_2"] not in not_equivalent
                key = screen.render(framing_1=d["field_1"], statement_1=p["statement_1"], framing_2=d["field_2"],
                                    statement_2=p["statement_2"])
                table[key] = json.dumps({"entry_1_valid": True, "entry_2_valid": True, "equivalent": ok,
                                         "could_be_less_similar": False, "confidence": 0.9, "reason": "x"})
    return table


def _with_url(p, url):
    return dataclasses.replace(p, meld_generate={"meld9": dataclasses.replace(p.meld_generate["meld9"], base_url=url)})


def test_the_stage_generates_screens_and_writes_rows_the_attack_stage_reads(tmp_path: Path) -> None:
    from recipematch.pipeline import meld_generate

    p, lay = _project(tmp_path)
    with ChatServer(_table(), model=MODEL) as srv:
        counts = meld_generate.run(_with_url(p, srv.base_url), lay.stage("meld_generate@meld9"), name="meld9", progress=False)
        bodies = list(srv.bodies)
    # round 1: 2 generation calls (temperature 0, greedy), 6 pairs, 6 screens; round 2: 2 calls (temperature 1.0),
    # per domain one repeat and one misframed pair rejected, one new pair screened
    assert counts["calls"] == {"generate": 4, "screen": 8} and counts["rounds_run"] == 2
    assert [b["temperature"] for b in bodies if "Produce 3" in b["messages"][-1]["content"]][:2] == [0.0, 0.0]
    assert counts["pairs_parsed"] == 8
    # not kept: T01 and T10, screened not equivalent
    assert counts["pairs_screened_out"] == 2 and counts["pairs_kept"] == 6
    assert counts["failures"] == {"pair: duplicate: a statement already written": 2,
                                  "pair: framing: entry_1 is framed 'wrong field', not 'vector spaces'": 1,
                                  "pair: framing: entry_1 is framed 'wrong field', not 'probability'": 1}
    out = tmp_path / "artifacts" / "meld_generate" / "meld9"
    raw = [json.loads(x) for x in (out / "raw.jsonl").read_text().splitlines()]
    assert raw[0]["statement_1"] == "S00 in vector spaces with $\\frac{a}{b}$ and \\mathbb{R}"  # LaTeX kept as written
    rows, read = read_attack_rows(out / "pairs.jsonl", "meld9")
    assert read["rows_in"] == counts["rows"] == 6 and read["prompt"] == "meld_generate"
    prov = rows[0]["positive_provenance"]  # generated here: never recorded as the release's rows
    assert prov["generated_by"] == "meld_generate@meld9" and "released" not in prov
    assert "released" not in read_attack_rows(out / "pairs.jsonl", "meld9", revision="dc8f067")[0][0]["positive_provenance"]
    for line in (out / "pairs.jsonl").read_text().splitlines():
        r = json.loads(line)
        assert r["meta"]["group"] == "meld9" and len(r["negatives"]) == 2
        own = {r["anchor_text"], r["positive_text"]}
        pool = {x["statement_1" if x["field_1"] == r["meta"]["positive_framing"] else "statement_2"]
                for x in raw if x["kept"] and r["meta"]["positive_framing"] in (x["field_1"], x["field_2"])}
        assert {n["text"] for n in r["negatives"]} <= pool - own  # same-framing statements of other kept pairs
    # a rerun answers from the call store without the server: the same bytes
    first = (out / "pairs.jsonl").read_bytes()
    again = meld_generate.run(p, lay.stage("meld_generate@meld9"), name="meld9", progress=False)
    assert again == counts and (out / "pairs.jsonl").read_bytes() == first
    # replay from a copy of the store in the run's folder: the same rows
    shutil.copy(tmp_path / "cache" / "meld_generate" / "meld9" / "calls.jsonl", tmp_path / "meld" / "calls.jsonl")
    p2, lay2 = _project(tmp_path / "replayed", backend="replay", base_url="", recordings="meld/calls.jsonl")
    shutil.copy(tmp_path / "meld" / "calls.jsonl", tmp_path / "replayed" / "meld" / "calls.jsonl")
    meld_generate.run(p2, lay2.stage("meld_generate@meld9"), name="meld9", progress=False)
    assert (tmp_path / "replayed" / "artifacts" / "meld_generate" / "meld9" / "pairs.jsonl").read_bytes() == first


def test_the_pair_target_stops_after_the_round_that_reaches_it(tmp_path: Path) -> None:
    from recipematch.pipeline import meld_generate

    p, lay = _project(tmp_path, target_pairs=4, negatives=1)
    with ChatServer(_table(), model=MODEL) as srv:
        counts = meld_generate.run(_with_url(p, srv.base_url), lay.stage("meld_generate@meld9"), name="meld9", progress=False)
    assert counts["rounds_run"] == 1 and counts["pairs_kept"] == 4 and counts["calls"]["generate"] == 2


def test_replay_without_recordings_and_a_run_with_no_rows_stop_in_one_line(tmp_path: Path) -> None:
    from recipematch.pipeline import meld_generate

    p, lay = _project(tmp_path, backend="replay", base_url="")
    with pytest.raises(RecipematchError, match=r"^meld_generate.meld9: backend replay needs recordings"):
        meld_generate.run(p, lay.stage("meld_generate@meld9"), name="meld9", progress=False)
    p, lay = _project(tmp_path / "broken")
    with ChatServer({}, model=MODEL) as srv:  # no answer matches: every call fails
        with pytest.raises(RecipematchError, match=r"^meld_generate.meld9: no row came out \(0 pairs parsed"):
            meld_generate.run(_with_url(p, srv.base_url), lay.stage("meld_generate@meld9"), name="meld9", progress=False)
    fails = (tmp_path / "broken" / "artifacts" / "meld_generate" / "meld9" / "failures.jsonl").read_text()
    assert fails.count('"step":"generate"') == 4


def test_the_parsers_and_the_domain_table(tmp_path: Path) -> None:
    assert repair_latex_escapes(r'{"s": "\frac{1}{2} \mathbb{R} \{x\} a\,b \\alpha \n \u00e9"}') == \
        r'{"s": "\\frac{1}{2} \\mathbb{R} \\{x\\} a\\,b \\alpha \n \u00e9"}'
    assert json.loads(repair_latex_escapes(r'{"s": "\nabla f"}'))["s"] == "\\nabla f"  # never a newline
    d = DOMAINS[0]
    pairs, rejects, why = parse_generation('```json\n{"pairs": [{"topic": "x", "entry_1": {"framing": "Vector Spaces", '
                                           '"statement": "a"}, "entry_2": {"framing": "module theory", "statement": '
                                           '"b"}}, {"topic": "", "entry_1": {}}, 7]}\n```', d["field_1"], d["field_2"])
    assert pairs == [{"topic": "x", "statement_1": "a", "statement_2": "b"}] and why == ""
    assert rejects == ["schema: a pair needs a non-empty topic", "schema: a pair must be a JSON object"]
    invisible = parse_generation(json.dumps({"pairs": [_pair("x", d, "\u200b\u200d", "b")]}), d["field_1"], d["field_2"])
    assert invisible[0] == [] and invisible[1] == ["schema: entry_1 needs a non-empty statement"]
    assert json.loads(repair_latex_escapes(r'{"s": "\t{oo} \r{a} \b{o}"}'))["s"] == r"\t{oo} \r{a} \b{o}"  # accents
    assert parse_generation("nope", "a", "b")[2] == "no_json_after_preamble"
    assert parse_generation('{"pairs": [], "pairs": []}', "a", "b")[2] == "duplicate_key"
    assert parse_generation('{"pairs": 3}', "a", "b")[2].startswith("schema")
    assert parse_screen('{"entry_1_valid": true, "entry_2_valid": true, "equivalent": "yes", '
                        '"could_be_less_similar": false, "confidence": 1}')[1] == "schema: equivalent must be true or false"
    assert parse_screen('{"entry_1_valid": true, "entry_2_valid": true, "equivalent": true, '
                        '"could_be_less_similar": false, "confidence": 2}')[1].startswith("schema: confidence")
    # the shipped templates' slots: values are inserted, never re-read
    assert PromptTemplate(name="t", system="", user="{problem} {{b}} {anchor}").render(
        problem="{anchor}", anchor="x")[1] == "{anchor} {b} x"
    with pytest.raises(ValueError, match="slots"):
        PromptTemplate(name="t", system="", user="{problem}").render(anchor=1)
    (tmp_path / "d.jsonl").write_text(json.dumps(DOMAINS[0]) + "\n" + json.dumps({**DOMAINS[0], "domain": "z"}) + "\n")
    with pytest.raises(RecipematchError, match=r"d.jsonl:2: the pair \('vector spaces', 'module theory'\) or the domain"):
        read_domains(tmp_path / "d.jsonl", "meld_generate.x.domains")
    (tmp_path / "d.jsonl").write_text(json.dumps({**DOMAINS[0], "connection": " "}) + "\n")
    with pytest.raises(RecipematchError, match=r"d.jsonl:1: field 'connection' must be a non-empty string"):
        read_domains(tmp_path / "d.jsonl", "meld_generate.x.domains")
    kept = [{"source_id": f"s{i}", "domain": "a", "field_1": "A", "field_2": "B", "topic": "t", "round": 1,
             "statement_1": f"a{i}", "statement_2": f"b{i}"} for i in range(3)]
    rows, c = build_rows(kept, group="meld9", generator_model="m", negatives=2, direction="both", seed=1)
    assert c == {"rows": 6, "rows_short_of_negatives": 0}
    rows, c = build_rows(kept, group="meld9", generator_model="m", negatives=3, direction="random", seed=1)
    assert c == {"rows": 0, "rows_short_of_negatives": 3}
    raw = load_yaml(REPO / "params.yaml")
    raw["meld_generate"] = {"meld7": {"folder": "m", "domains": "m/d.jsonl", "model_id": "x"}}
    with pytest.raises(RecipematchError, match=r"meld_generate.meld7: the name is the row set it writes"):
        parse_params(raw)
    raw["meld_generate"] = {"meld9": {"folder": "m", "domains": "elsewhere/d.jsonl", "model_id": "x"}}
    with pytest.raises(RecipematchError, match=r"meld_generate.meld9.domains must lie inside meld_generate.meld9.folder"):
        parse_params(raw)


def test_a_resumed_or_extended_run_never_asks_a_stored_screen_again_and_extra_pairs_are_not_paid_for(tmp_path: Path) -> None:
    from recipematch.pipeline import meld_generate

    p, lay = _project(tmp_path, rounds=1, negatives=1)
    (tmp_path / "meld" / "domains.jsonl").write_text(json.dumps(DOMAINS[1]) + "\n")
    with ChatServer(_table(), model=MODEL) as srv:
        meld_generate.run(_with_url(p, srv.base_url), lay.stage("meld_generate@meld9"), name="meld9", progress=False)
        first = len(srv.bodies)
    (tmp_path / "meld" / "domains.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOMAINS))
    with ChatServer(_table(), model=MODEL) as srv:  # the new domain comes first: every running id shifts
        counts = meld_generate.run(_with_url(p, srv.base_url), lay.stage("meld_generate@meld9"), name="meld9", progress=False)
        second = len(srv.bodies)
    assert first == 1 + 3 and second == 1 + 3 and counts["calls"] == {"generate": 2, "screen": 6}
    p, lay = _project(tmp_path / "extra", rounds=1, n_pairs=2, negatives=1)
    with ChatServer(_table(not_equivalent=(), asked=2), model=MODEL) as srv:  # the answers carry 3 pairs: one more than asked
        counts = meld_generate.run(_with_url(p, srv.base_url), lay.stage("meld_generate@meld9"), name="meld9", progress=False)
    assert counts["calls"]["screen"] == 4 and counts["failures"]["pair: extra: beyond the n_pairs=2 asked for"] == 2
