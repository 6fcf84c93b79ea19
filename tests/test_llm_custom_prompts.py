"""A user's own prompts (recipematch.llm.prompts.load_custom_prompt): slots and answer schema
declared in a sidecar, clear errors when either is missing, byte-exact rendering, and an arm
run end to end with such a prompt against a local server on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_llm_support import MODEL, SAMPLING, ChatServer, fixture_corpus, learn_answers

from recipematch.errors import RecipematchError
from recipematch.llm.backends import GenerationRequest
from recipematch.llm.parsing import json_schema_for, parse_answer
from recipematch.llm.pipeline import build_generation_requests, rows_to_jsonl, run_llm_pairs
from recipematch.llm.prompts import load_custom_prompt, load_prompt, verify_shipped_prompts
from recipematch.llm.serving import ServerSpec, open_server

SYSTEM = ("You write exam variants. Return JSON {{\"rewrites\": [{{\"problem\": ..., \"why\": ...}}], "
          "\"distractors\": [{{\"problem\": ...}}]}} with exactly {n_pos} rewrite(s) and up to {n_neg} "
          "distractor(s). Keep $\\frac{{a}}{{b}}$ as it is.\n")
USER = "Problem:\n{problem}\n"
SIDECAR = """\
name: exam_rewriter
system: exam.system.txt
user: exam.user.txt
slots: [problem, n_pos, n_neg]
answer:
  positives: {key: rewrites, fields: [why]}
  near_misses: {key: distractors}
"""


def write(folder: Path, sidecar: str = SIDECAR, system: str | None = SYSTEM, user: str = USER,
          name: str = "exam.prompt.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if system is not None:
        (folder / "exam.system.txt").write_bytes(system.encode("utf-8"))
    (folder / "exam.user.txt").write_bytes(user.encode("utf-8"))
    (folder / name).write_text(sidecar, encoding="utf-8")
    return folder / name


def test_load_render_and_parse_a_custom_prompt(tmp_path: Path) -> None:
    p = load_custom_prompt(write(tmp_path))
    assert (p.name, p.role, p.has_near_misses) == ("exam_rewriter", "generator", True)
    t = p.template
    assert t.system.encode() == SYSTEM.encode() and t.user.encode() == USER.encode()  # byte for byte
    assert t.slots == {"problem", "n_pos", "n_neg"} and len(t.sha256) == 64
    system, user = t.render(n_pos=1, n_neg=2, problem="Find {x} with $x^{2}=4$.")
    assert system == SYSTEM.replace("{n_pos}", "1").replace("{n_neg}", "2").replace("{{", "{").replace("}}", "}")
    assert user == "Problem:\nFind {x} with $x^{2}=4$.\n"
    answer = json.dumps({"rewrites": [{"problem": "Determine $y$ with $y^2=4$.", "why": "rename"}],
                         "distractors": [{"problem": "Find $x$ with $x^3=4$."}]})
    out = parse_answer(p.name, answer, n_pos=1, n_neg=2, anchor="Find $x$ with $x^2=4$.", schema=p.schema)
    assert out.ok and [i.text for i in out.positives] == ["Determine $y$ with $y^2=4$."]
    assert [i.annotations for i in out.positives] == [{"why": "rename"}] and len(out.negatives) == 1
    # the same strict checks as for the shipped schemas
    bad = parse_answer(p.name, answer[:-1] + ', "original_problem": "x"}', n_pos=1, n_neg=2, anchor="a",
                       schema=p.schema)
    assert bad.reason == "unexpected_field"
    js = json_schema_for(p.name, 1, 2, schema=p.schema)
    assert js["required"] == ["rewrites", "distractors"]
    assert js["properties"]["rewrites"]["items"]["required"] == ["problem", "why"]


def test_positives_only_prompt_without_system_file(tmp_path: Path) -> None:
    sidecar = "user: exam.user.txt\nslots: [problem]\nanswer:\n  top_fields: [source]\n  positives: {key: versions}\n"
    p = load_custom_prompt(write(tmp_path, sidecar, system=None, name="plain.prompt.yml"))
    assert p.name == "plain" and p.template.system == "" and not p.has_near_misses
    assert p.schema.top_fields == ("source",)
    reqs = build_generation_requests([("s1", "A problem.")], prompt_name="plain", n_pos=1, n_neg=0, model_id=MODEL,
                                     sampling=SAMPLING, seed=1, custom_prompt=p)
    assert reqs[0].system == "" and reqs[0].user == "Problem:\nA problem.\n"
    assert reqs[0].prompt_sha256 == p.template.sha256


@pytest.mark.parametrize(
    ("sidecar", "user", "message"),
    [
        (SIDECAR.replace("slots: [problem, n_pos, n_neg]\n", ""), USER, "key 'slots' is missing"),
        (SIDECAR.replace("[problem, n_pos, n_neg]", "[n_pos, n_neg]"), USER.replace("{problem}", "x"),
         r"needs slot\(s\) \['problem'\]"),
        (SIDECAR.replace("[problem, n_pos, n_neg]", "[problem, n_pos, n_neg, anchor]"), USER,
         r"slot\(s\) \['anchor'\] cannot be filled"),
        (SIDECAR, "Problem:\n{problem} in {topic}\n", r"uses \{topic\}, which is not a declared slot"),
        (SIDECAR.replace("[problem, n_pos, n_neg]", "[problem, n_pos]"), USER,
         r"uses \{n_neg\}, which is not a declared slot"),
        (SIDECAR, "Problem:\n", r"declared slot\(s\) \['problem'\] appear in neither"),
        (SIDECAR.split("answer:")[0], USER, "key 'answer' \\(the answer schema\\) is missing"),
        (SIDECAR.replace("  positives: {key: rewrites, fields: [why]}\n", ""), USER, "answer.positives' is missing"),
        (SIDECAR.replace("  near_misses: {key: distractors}\n", ""), USER, "declares slot n_neg but its answer has "
                                                                           "no near_misses"),
        (SIDECAR.replace("{key: rewrites, fields: [why]}", "{key: rewrites, fields: why}"), USER,
         "must be a list of field names"),
        (SIDECAR.replace("{key: distractors}", "{key: rewrites}"), USER, "one field name twice"),
        (SIDECAR.replace("name: exam_rewriter", "name: d1_recipe"), USER, "is a shipped prompt's"),
        (SIDECAR.replace("user: exam.user.txt", "user: nowhere.txt"), USER, "nowhere.txt, which does not exist"),
        (SIDECAR + "temperature: 0.2\n", USER, r"unknown key\(s\) \['temperature'\]"),
        ("- just a list\n", USER, "must hold a mapping"),
        (SIDECAR.replace("slots:", "slots: [\n"), USER, "not valid YAML"),
    ],
)
def test_missing_slot_or_schema_is_a_clear_error(tmp_path: Path, sidecar: str, user: str, message: str) -> None:
    path = write(tmp_path, sidecar, user=user)
    with pytest.raises(RecipematchError, match=message) as ei:
        load_custom_prompt(path)
    assert str(path.parent) in str(ei.value)  # the message names the file


def test_custom_judge_prompt(tmp_path: Path) -> None:
    (tmp_path / "j.system.txt").write_text('Answer {"verdict": ..., "confidence": ..., "reason": ...}\n')
    (tmp_path / "j.user.txt").write_text("A: {anchor}\nB: {candidate}\n")
    (tmp_path / "j.prompt.yaml").write_text("role: judge\nsystem: j.system.txt\nuser: j.user.txt\n"
                                            "slots: [anchor, candidate]\n")
    j = load_custom_prompt(tmp_path / "j.prompt.yaml")
    assert j.role == "judge" and j.schema is None and j.template.system_slots is None  # literal braces kept
    (tmp_path / "k.prompt.yaml").write_text("role: judge\nuser: j.user.txt\nslots: [anchor]\n")
    with pytest.raises(RecipematchError, match=r"needs slot\(s\) \['candidate'\]"):
        load_custom_prompt(tmp_path / "k.prompt.yaml")


def test_arm_with_a_custom_prompt_against_a_local_server(tmp_path: Path) -> None:
    corpus = fixture_corpus()
    sources = sorted(corpus.items())[:4]
    gen = load_custom_prompt(write(tmp_path / "prompts"))
    (tmp_path / "prompts" / "j.user.txt").write_text("Same problem?\nA: {anchor}\nB: {candidate}\n")
    (tmp_path / "prompts" / "j.prompt.yaml").write_text("name: strict_judge\nrole: judge\nuser: j.user.txt\n"
                                                        "slots: [anchor, candidate]\n")
    judge = load_custom_prompt(tmp_path / "prompts" / "j.prompt.yaml")

    def script(r: GenerationRequest) -> str:
        if r.prompt_name == "strict_judge":
            cand = r.user.split("\nB: ", 1)[1][:-1]
            verdict = "equivalent" if cand.startswith("Rewritten") else "not_equivalent"
            return json.dumps({"verdict": verdict, "confidence": 0.9, "reason": "scripted"})
        return json.dumps({"rewrites": [{"problem": f"Rewritten {r.source_id}", "why": "w"}],
                           "distractors": [{"problem": f"Distractor {r.source_id}"},
                                           {"problem": f"Rewritten twin {r.source_id}"}]})

    kw = dict(prompt_name="exam_rewriter", n_pos=1, n_neg=2, model_id=MODEL, judge_model_id=MODEL,
              sampling=SAMPLING, seed=7, require_tags=True, progress=False, custom_prompt=gen, judge_prompt=judge)
    table, reqs, (ref_rows, _f, _c) = learn_answers(sources, script, tmp_path / "ref.jsonl", **kw)
    with ChatServer(table) as srv:
        be = open_server(ServerSpec(srv.base_url, MODEL, max_retries=0), sleep=lambda s: None)
        rows, failures, counts = run_llm_pairs(sources, backend=be, judge_backend=be,
                                               store_path=tmp_path / "s.jsonl", **kw)
        assert len(srv.bodies) == 4 + 4 * 3
    assert rows_to_jsonl(rows) == rows_to_jsonl(ref_rows) and len(rows) == 4
    r0 = rows[0]
    assert r0["positive"] == f"Rewritten {r0['source_id']}"
    assert r0["positive_provenance"]["generator"] == "exam_rewriter"
    assert r0["positive_provenance"]["prompt_sha256"] == gen.template.sha256
    assert r0["positive_provenance"]["judge"]["prompt_sha256"] == judge.template.sha256
    assert [n["text"] for n in r0["negatives"]] == [f"Distractor {r0['source_id']}"]  # the twin was judged equivalent
    assert counts["negatives"] == {"candidates": 8, "kept": 4, "rejected": 4, "judge_failed": 0}
    with pytest.raises(RecipematchError, match="differs from the custom prompt's name"):
        run_llm_pairs(sources, backend=be, judge_backend=be, store_path=tmp_path / "x.jsonl",
                      **{**kw, "prompt_name": "d1_recipe"})
    with pytest.raises(RecipematchError, match="not a judge prompt"):
        run_llm_pairs(sources, backend=be, judge_backend=be, store_path=tmp_path / "x.jsonl",
                      **{**kw, "judge_prompt": gen})


def test_shipped_prompts_untouched() -> None:
    assert verify_shipped_prompts() == {}
    assert load_prompt("d1_recipe").sha256.startswith("567223324562")
