"""recipematch.llm.parsing: strict schema checks, rejection reasons, item-level keeps."""

from __future__ import annotations

import json

import pytest

from recipematch.llm.parsing import json_schema_for, normalise_for_compare, normalise_ws, parse_answer, parse_judge

ANCHOR = "Find all real $x$ with $x^2 = 4$."


def variant(problem: str, tags: list[str] | None = None, justification: str = "Same equation.") -> dict:
    return {"problem": problem, "justification": justification, "tags": ["Variable rename"] if tags is None else tags}


def d1_answer(pos: list[dict], neg: list[dict]) -> str:
    return json.dumps({"original_problem": ANCHOR, "equivalent_variants": pos, "near_miss_variants": neg})


GOOD = d1_answer(
    [variant("Determine every real $y$ such that $y^2 = 4$.")],
    [variant("Find all real $x$ with $x^3 = 4$.", ["Exponent shift"]),
     variant("Find all real $x$ with $x^2 = -4$.", ["Sign flip"]),
     variant("Find all integers $x$ with $x^2 \\equiv 4 \\pmod 5$.", ["Modulus change"])],
)


def parse(raw: str, **kw):
    args = {"n_pos": 1, "n_neg": 3, "anchor": ANCHOR, "require_tags": True} | kw
    return parse_answer("d1_recipe", raw, **args)


def test_good_answer() -> None:
    out = parse(GOOD)
    assert out.ok and out.reason is None and not out.item_rejections
    assert [p.text for p in out.positives] == ["Determine every real $y$ such that $y^2 = 4$."]
    assert [n.index for n in out.negatives] == [0, 1, 2]
    assert out.negatives[1].annotations == {"justification": "Same equation.", "tags": ["Sign flip"]}
    assert out.summary()["n_negatives"] == 3


def test_fewer_near_misses_accepted_more_rejected() -> None:
    pos = [variant("Determine every real $y$ such that $y^2 = 4$.")]
    assert parse(d1_answer(pos, [])).ok
    four = [variant(f"Find all real $x$ with $x^{k} = 4$.") for k in range(3, 7)]
    out = parse(d1_answer(pos, four))
    assert (out.ok, out.reason) == (False, "too_many_near_misses")
    out = parse(d1_answer(pos * 2, []))
    assert (out.ok, out.reason) == (False, "wrong_positive_count")
    out = parse(d1_answer([], []))
    assert out.reason == "wrong_positive_count"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty_answer"),
        ("   \n", "empty_answer"),
        ("```json\n" + GOOD + "\n```", "code_fence"),
        (GOOD + "\nHope this helps!", "trailing_text"),
        ("Here is the JSON:\n" + GOOD, "leading_text"),
        (GOOD[:-40], "truncated"),
        (GOOD.replace('"near_miss_variants"', "'near_miss_variants'"), "invalid_json"),
        (GOOD[:-1] + ",}", "invalid_json"),
        ('{"original_problem": NaN, "equivalent_variants": [], "near_miss_variants": []}', "invalid_json"),
        ('{"original_problem": "a", "original_problem": "b", "equivalent_variants": [], "near_miss_variants": []}',
         "duplicate_key"),
        ("[1, 2]", "not_an_object"),
        ('{"original_problem": "a", "equivalent_variants": []}', "missing_field"),
        ('{"original_problem": "a", "equivalent_variants": [], "near_miss_variants": [], "notes": "x"}',
         "unexpected_field"),
        ('{"original_problem": "a", "equivalent_variants": {}, "near_miss_variants": []}', "wrong_type"),
        ('{"original_problem": 3, "equivalent_variants": [], "near_miss_variants": []}', "wrong_type"),
    ],
)
def test_whole_answer_rejections(raw: str, reason: str) -> None:
    out = parse(raw)
    assert (out.ok, out.reason) == (False, reason)
    assert out.detail and not out.positives and not out.negatives


def test_surrounding_whitespace_is_not_prose() -> None:
    assert parse("\n  " + GOOD + "\n").ok


def test_braces_inside_strings_do_not_fool_truncation_check() -> None:
    raw = d1_answer([variant("Let $S=\\{1,2\\}$ and \"}\" be a symbol; find $|S|$.")], [])
    assert parse(raw).ok
    assert parse(raw[:-3]).reason == "truncated"


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        (variant("Find all real $x$ with $x^3 = 4$.", tags=[]), "empty_tags"),
        (variant("Find all real $x$ with $x^3 = 4$.", tags=["  "]), "empty_tags"),
        (variant("Find all real $x$ with $x^3 = 4$.", tags=["a", "b", "c", "d", "e"]), "too_many_tags"),
        ({"problem": "Find all real $x$ with $x^3 = 4$.", "justification": "j"}, "missing_tags"),
        ({"problem": "Find all real $x$ with $x^3 = 4$.", "tags": ["t"]}, "missing_annotation"),
        (variant("Find all real $x$ with $x^3 = 4$.", justification=" "), "missing_annotation"),
        (variant("   "), "empty_problem"),
        ({"justification": "j", "tags": ["t"]}, "missing_field"),
        ({"problem": ["x"], "justification": "j", "tags": ["t"]}, "wrong_type"),
        ({**variant("Find all real $x$ with $x^3 = 4$."), "difficulty": 3}, "unexpected_field"),
        ("Find all real $x$ with $x^3 = 4$.", "not_an_object"),
        (variant("Find  all real $x$\nwith $x^2 = 4$. "), "near_miss_identical_to_anchor"),
    ],
)
def test_item_rejections_keep_the_rest(item: object, reason: str) -> None:
    good_neg = variant("Find all real $x$ with $x^2 = -4$.", ["Sign flip"])
    out = parse(d1_answer([variant("Determine every real $y$ such that $y^2 = 4$.")], [good_neg, item]))
    assert out.ok
    assert [(r.role, r.index, r.reason) for r in out.item_rejections] == [("near_miss", 1, reason)]
    assert [n.text for n in out.negatives] == [good_neg["problem"]] and len(out.positives) == 1


def test_require_tags_switch_for_the_untagged_release() -> None:
    raw = d1_answer([{"problem": "Determine every real $y$ such that $y^2 = 4$."}],
                    [{"problem": "Find all real $x$ with $x^3 = 4$."}])
    strict = parse(raw)
    assert strict.ok and [r.reason for r in strict.item_rejections] == ["missing_tags", "missing_tags"]
    assert not strict.positives
    loose = parse(raw, require_tags=False)
    assert loose.ok and not loose.item_rejections and len(loose.positives) == len(loose.negatives) == 1
    # present annotations are still type-checked without require_tags
    bad = d1_answer([{"problem": "Determine every real $y$.", "tags": "Variable rename"}], [])
    assert parse(bad, require_tags=False).item_rejections[0].reason == "wrong_type"


def test_positive_identical_to_anchor_after_whitespace_normalisation() -> None:
    out = parse(d1_answer([variant("  Find all real $x$ with\n\t$x^2 = 4$.")], []))
    assert out.ok and not out.positives
    assert out.item_rejections[0].reason == "positive_identical_to_anchor"
    assert out.item_rejections[0].text == "  Find all real $x$ with\n\t$x^2 = 4$."


def test_duplicated_variants() -> None:
    a = "Find all real $x$ with $x^3 = 4$."
    out = parse(d1_answer([variant("Determine every real $y$ such that $y^2 = 4$.")],
                          [variant(a), variant(a.replace(" ", "  ")), variant("Determine every real $y$ such that $y^2 = 4$.")]))
    assert [(r.index, r.reason) for r in out.item_rejections] == [(1, "duplicate_variant"), (2, "duplicate_variant")]
    assert "near_miss 0" in out.item_rejections[0].detail and "positive 0" in out.item_rejections[1].detail
    assert [n.index for n in out.negatives] == [0]


def test_item_text_returned_verbatim() -> None:
    text = "  Determine every real $y$:\n $y^2=4$  "
    out = parse(d1_answer([variant(text)], []))
    assert out.positives[0].text == text
    assert normalise_ws(text) == "Determine every real $y$: $y^2=4$"


def test_d4_d5_unrelated_schemas() -> None:
    d4 = json.dumps({"original_problem": ANCHOR, "restatements": [
        {"problem": "A younger student's version: which real numbers squared give 4?",
         "audience": "middle-school student", "justification": "Same equation."}]})
    out = parse_answer("d4_restatement", d4, n_pos=1, n_neg=0, anchor=ANCHOR)
    assert out.ok and out.positives[0].annotations["audience"] == "middle-school student"
    assert parse_answer("d5_survey", d4, n_pos=1, n_neg=0, anchor=ANCHOR).item_rejections[0].reason == "unexpected_field"
    with_negs = json.dumps({"original_problem": ANCHOR, "restatements": [], "near_miss_variants": []})
    assert parse_answer("d4_restatement", with_negs, n_pos=1, n_neg=0, anchor=ANCHOR).reason == "unexpected_field"
    with pytest.raises(ValueError, match="positives only"):
        parse_answer("d4_restatement", d4, n_pos=1, n_neg=3, anchor=ANCHOR)
    d5 = json.dumps({"original_problem": ANCHOR, "restatements": [
        {"problem": "Survey: the real solutions of $t^2=4$.", "context": "quadratics", "justification": "j"}]})
    assert parse_answer("d5_survey", d5, n_pos=1, n_neg=0, anchor=ANCHOR).ok
    un = json.dumps({"original_problem": ANCHOR,
                     "restatements": [{"problem": "Which reals square to 4?", "audience": "a", "justification": "j"}],
                     "companions": [{"problem": "Which reals square to 5?", "what_changed": "4 became 5"},
                                    {"problem": "Which reals cube to 4?"}]})
    out = parse_answer("unrelated_negatives", un, n_pos=1, n_neg=3, anchor=ANCHOR)
    assert [n.text for n in out.negatives] == ["Which reals square to 5?"]
    assert [(r.index, r.reason) for r in out.item_rejections] == [(1, "missing_annotation")]


def test_unknown_prompt_and_bad_counts() -> None:
    with pytest.raises(KeyError):
        parse_answer("judge", GOOD, n_pos=1, n_neg=3, anchor=ANCHOR)
    with pytest.raises(ValueError):
        parse_answer("d1_recipe", GOOD, n_pos=-1, n_neg=3, anchor=ANCHOR)


def test_python_literals_are_not_evaluated() -> None:
    raw = "{'original_problem': __import__('os').getcwd(), 'equivalent_variants': [], 'near_miss_variants': []}"
    assert parse(raw).reason == "invalid_json"


# ---- judge


@pytest.mark.parametrize(
    ("raw", "verdict", "confidence"),
    [
        ('{"verdict": "equivalent", "confidence": 0.93, "reason": "Renaming only."}', "equivalent", 0.93),
        ('{"verdict": "not_equivalent", "confidence": 1, "reason": "Sign flip."}', "not_equivalent", 1.0),
        ('  {"reason": "r", "confidence": 0, "verdict": "not_equivalent"}\n', "not_equivalent", 0.0),
    ],
)
def test_judge_valid(raw: str, verdict: str, confidence: float) -> None:
    out = parse_judge(raw)
    assert (out.ok, out.verdict, out.confidence) == (True, verdict, confidence)
    assert isinstance(out.confidence, float)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ('{"verdict": "Equivalent", "confidence": 0.9, "reason": "r"}', "bad_verdict"),
        ('{"verdict": "equivalent", "confidence": 1.5, "reason": "r"}', "bad_confidence"),
        ('{"verdict": "equivalent", "confidence": true, "reason": "r"}', "bad_confidence"),
        ('{"verdict": "equivalent", "confidence": "high", "reason": "r"}', "bad_confidence"),
        ('{"verdict": "equivalent", "confidence": null, "reason": "r"}', "null_confidence_not_allowed"),
        ('{"verdict": "equivalent", "confidence": 0.9}', "missing_field"),
        ('{"verdict": "equivalent", "confidence": 0.9, "reason": 3}', "wrong_type"),
        ('```\n{"verdict": "equivalent", "confidence": 0.9, "reason": "r"}\n```', "code_fence"),
        ('{"verdict": "equivalent", "confidence": 0.9, "reason": "r"} Final answer.', "trailing_text"),
        ('{"verdict": "equivalent", "confidence": 0.9, "reason": "r"', "truncated"),
    ],
)
def test_judge_rejections(raw: str, reason: str) -> None:
    out = parse_judge(raw)
    assert (out.ok, out.reason, out.verdict) == (False, reason, None)


def test_judge_null_confidence_only_when_allowed() -> None:
    raw = '{"verdict": "equivalent", "confidence": null, "reason": "Not recorded."}'
    out = parse_judge(raw, allow_null_confidence=True)
    assert (out.ok, out.verdict, out.confidence) == (True, "equivalent", None)


def test_json_schemas() -> None:
    s = json_schema_for("d1_recipe", 1, 3)
    assert s["properties"]["equivalent_variants"]["minItems"] == 1
    assert s["properties"]["near_miss_variants"]["maxItems"] == 3
    assert set(s["required"]) == {"original_problem", "equivalent_variants", "near_miss_variants"}
    assert "near_miss_variants" not in json_schema_for("d4_restatement", 1, 0)["properties"]
    assert json_schema_for("judge", 0, 0)["properties"]["verdict"]["enum"] == ["equivalent", "not_equivalent"]


# ---- hostile answers never make the parsers raise (regression: RecursionError / ValueError)

DEEP = ('{"original_problem":"p","equivalent_variants":[{"problem":"q"}],"near_miss_variants":[],"x":'
        + "[" * 5000 + "]" * 5000 + "}")
LONG_INT = ('{"original_problem":"p","equivalent_variants":[{"problem":"q"}],"near_miss_variants":[],"x":'
            + "9" * 5000 + "}")


@pytest.mark.parametrize(("raw", "detail"), [(DEEP, "nesting too deep"), (LONG_INT, "integer literal too long")])
def test_deep_nesting_and_huge_integers_are_rejections(raw: str, detail: str) -> None:
    out = parse(raw, require_tags=False)
    assert (out.ok, out.reason) == (False, "invalid_json") and out.detail.startswith(detail)
    judge = '{"verdict": "equivalent", "confidence": 0.9, "reason": "r", "x": ' + raw[raw.index('"x":') + 4:]
    jo = parse_judge(judge)
    assert (jo.ok, jo.reason) == (False, "invalid_json") and jo.detail.startswith(detail)
    jo = parse_judge('{"verdict": "equivalent", "confidence": 1' + "0" * 5000 + ', "reason": "r"}')
    assert (jo.ok, jo.reason) == (False, "invalid_json") and jo.detail.startswith("integer literal too long")


def test_nesting_within_the_limit_is_judged_by_the_schema() -> None:
    from recipematch.llm.answer_json import MAX_NESTING

    ok_depth = MAX_NESTING - 1  # the top-level object is the first level
    raw = GOOD[:-1] + ', "x": ' + "[" * ok_depth + "]" * ok_depth + "}"
    assert parse(raw).reason == "unexpected_field"
    raw = GOOD[:-1] + ', "x": ' + "[" * (ok_depth + 1) + "]" * (ok_depth + 1) + "}"
    assert parse(raw).reason == "invalid_json"
    assert parse(GOOD[:-1] + ', "x": 1' + "0" * 99 + "}").reason == "unexpected_field"  # 100 digits: fine


def test_overlong_answer_is_refused_unread() -> None:
    from recipematch.llm.answer_json import MAX_ANSWER_CHARS

    out = parse(GOOD + " " * MAX_ANSWER_CHARS)
    assert (out.ok, out.reason) == (False, "answer_too_long")
    assert parse_judge("{" + " " * MAX_ANSWER_CHARS + "}").reason == "answer_too_long"


def test_any_decoder_exception_is_a_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    from recipematch.llm import answer_json

    def boom(*a, **k):
        raise MemoryError("out of memory while decoding")

    monkeypatch.setattr(answer_json.json, "loads", boom)
    out = parse(GOOD)
    assert (out.ok, out.reason) == (False, "invalid_json") and "MemoryError" in out.detail
    assert parse_judge('{"verdict": "equivalent", "confidence": 0.9, "reason": "r"}').reason == "invalid_json"


def test_unexpected_parser_exception_is_an_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    from recipematch.llm import parsing

    def broken(*a, **k):
        raise RuntimeError("parser bug")

    monkeypatch.setattr(parsing, "_check_item", broken)
    monkeypatch.setattr(parsing, "_check_keys", broken)
    out = parse(GOOD)
    assert (out.ok, out.reason) == (False, "parser_exception") and out.detail == "RuntimeError: parser bug"
    jo = parse_judge('{"verdict": "equivalent", "confidence": 0.9, "reason": "r"}')
    assert (jo.ok, jo.reason) == (False, "parser_exception")


# ---- lone surrogates (regression: UnicodeEncodeError later, in candidate_key / the store)


@pytest.mark.parametrize("bad", ["Find $y$ \\ud800 with $y^2=4$.", "Find $y$ \\udfff.", "\ud800 literal"])
def test_lone_surrogate_is_invalid_text(bad: str) -> None:
    raw = GOOD.replace("Determine every real $y$ such that $y^2 = 4$.", bad)
    assert raw != GOOD
    out = parse(raw)
    assert (out.ok, out.reason) == (False, "invalid_text") and out.detail.startswith("lone surrogate")
    assert not out.positives
    out.detail.encode("utf-8")  # the reason itself is safe to write anywhere
    jo = parse_judge('{"verdict": "equivalent", "confidence": 0.9, "reason": "' + bad + '"}')
    assert (jo.ok, jo.reason) == (False, "invalid_text") and jo.detail.startswith("lone surrogate")
    key = '{"verdict": "equivalent", "confidence": 0.9, "reason": "r", "\\ud800": 1}'
    assert parse_judge(key).reason == "invalid_text"


def test_escaped_surrogate_pair_is_fine() -> None:
    raw = GOOD.replace("Determine every real $y$", "Determine every real $y$ \\ud83d\\ude00")
    out = parse(raw)
    assert out.ok and out.positives[0].text.startswith("Determine every real $y$ \U0001F600")


# ---- invisible characters (regression: trivial positives accepted)


@pytest.mark.parametrize(
    "positive",
    [
        "Find all real $x$ with $x^2\u200b = 4$.",  # zero-width space
        "\ufeffFind all real $x$ with $x^2 = 4$.",  # BOM / zero-width no-break space
        "Find all re\u00adal $x$ with $x^2 = 4$.",  # soft hyphen
        "Find\u2060 all real $x$ with\u200d $x^2 = 4$.\u200c",  # word joiner, ZWJ, ZWNJ
        "Find\u00a0all\u00a0real $x$ with $x^2 = 4$.",  # NBSP
        "Find all real\u202f$x$ with\u200e $x^2 = 4$.",  # narrow NBSP, LRM
        "Find all\u00a0\u200b real $x$ with $x^2 = 4$.\ufe0f",  # NBSP + ZWSP, variation selector
    ],
)
def test_positive_differing_only_by_invisible_characters_is_the_anchor(positive: str) -> None:
    out = parse(d1_answer([variant(positive)], []))
    assert out.ok and not out.positives
    assert [(r.reason, r.text) for r in out.item_rejections] == [("positive_identical_to_anchor", positive)]
    assert normalise_for_compare(positive) == normalise_for_compare(ANCHOR) == ANCHOR


def test_duplicates_differing_only_by_invisible_characters() -> None:
    a = "Find all real $x$ with $x^3 = 4$."
    pos = "Determine every real $y$ such that $y^2 = 4$."
    out = parse(d1_answer([variant(pos)], [variant(a), variant("\u200b" + a.replace(" ", "\u00a0", 1)),
                                           variant(pos.replace("every", "ev\u200cery"))]))
    assert [(r.index, r.reason) for r in out.item_rejections] == [(1, "duplicate_variant"), (2, "duplicate_variant")]
    assert [n.text for n in out.negatives] == [a]
    # visible differences still count
    assert normalise_for_compare("x\u00b2") != normalise_for_compare("x2")
    assert normalise_for_compare("a\u200bb c") == "ab c"


# ------------------------------------------------------------------ reasoning preamble (Qwen3 thinking mode)

THINK = '<think>\nLet me rename $x$; note \\frac{a}{b} and {"draft": 1} and a stray " quote.\n</think>\n\n'


@pytest.mark.parametrize(
    "raw",
    [THINK + GOOD, "Here is the JSON:\n" + GOOD, THINK + "Final answer:\n" + GOOD + "\n\n", "  " + GOOD],
)
def test_preamble_skipped_and_the_json_parsed_as_strictly(raw: str) -> None:
    out = parse(raw, allow_reasoning_preamble=True)
    ref = parse(GOOD)
    assert out.ok and (out.positives, out.negatives, out.item_rejections) == (ref.positives, ref.negatives, ())
    assert out.preamble_chars == len(raw.strip()) - len(GOOD)
    assert ("preamble_chars" in out.summary()) == (out.preamble_chars > 0)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("<think>\nstill thinking when the tokens ran out {x}", "reasoning_unclosed"),
        ("<think>\n" + GOOD, "reasoning_unclosed"),  # the JSON sits inside the unclosed block
        (THINK + "So the answer is above.", "no_json_after_preamble"),
        (THINK + GOOD + "\nHope this helps!", "no_json_after_preamble"),
        (THINK + "```json\n" + GOOD + "\n```", "code_fence"),
        (THINK + "the set {1, 2}", "invalid_json"),
        (THINK + GOOD[:-40] + "}", "no_json_after_preamble"),  # its closing brace opens nowhere
        # the schema is not loosened behind a preamble
        (THINK + GOOD[:-1] + ', "notes": "x"}', "unexpected_field"),
        (THINK + d1_answer([], []), "wrong_positive_count"),
        (THINK + GOOD.replace('"original_problem": "Find', '"original_problem": "Find', 1)[:-1]
         + ', "original_problem": "again"}', "duplicate_key"),
        (THINK + '{"original_problem": NaN, "equivalent_variants": [], "near_miss_variants": []}', "invalid_json"),
    ],
)
def test_preamble_without_valid_json_is_still_a_failure(raw: str, reason: str) -> None:
    out = parse(raw, allow_reasoning_preamble=True)
    assert (out.ok, out.reason) == (False, reason) and out.detail


def test_preamble_is_leading_text_without_the_switch() -> None:
    assert parse(THINK + GOOD).reason == "leading_text"


def test_judge_preamble() -> None:
    ans = '{"verdict": "equivalent", "confidence": 0.9, "reason": "same"}'
    out = parse_judge(THINK + ans, allow_reasoning_preamble=True)
    assert (out.ok, out.verdict, out.preamble_chars) == (True, "equivalent", len(THINK))
    assert parse_judge(THINK + ans).reason == "leading_text"
    assert parse_judge(THINK + ans[:-1] + ', "x": 1}', allow_reasoning_preamble=True).reason == "unexpected_field"
    assert parse_judge("<think> ...", allow_reasoning_preamble=True).reason == "reasoning_unclosed"


def test_preamble_scan_is_bounded_on_hostile_input() -> None:
    deep = "reasoning " + "[" * 5000 + "]" * 5000 + "}"
    out = parse(deep, allow_reasoning_preamble=True)
    assert not out.ok and out.reason in ("invalid_json", "no_json_after_preamble")
