"""Strict parsing of LLM answers against each prompt's own JSON schema (paper Section 3 and
Appendix C: a malformed answer is kept as a failure record with its reason, never silently
dropped; the answer formats are the ones the Appendix-F prompts print).

Schemas (read from the prompt files in ``recipematch/prompts/``):

===========================  ====================================================================
prompt                       answer object (all keys required unless noted)
===========================  ====================================================================
d1_recipe, d2_paraphrase,    ``{"original_problem": str, "equivalent_variants": [V...],
d3_style (+ D1 split         "near_miss_variants": [V...]}``, V = ``{"problem", "justification",
prompts)                     "tags": [str, 1-4]}``
d4_restatement               ``{"original_problem", "restatements": [{"problem", "audience",
                             "justification"}]}``
d5_survey                    ``{"original_problem", "restatements": [{"problem", "context",
                             "justification"}]}``
unrelated_negatives          ``{"original_problem", "restatements": [{"problem", "audience",
                             "justification"}], "companions": [{"problem", "what_changed"}]}``
judge                        ``{"verdict": "equivalent"|"not_equivalent", "confidence": float in
                             [0, 1], "reason": str}``
===========================  ====================================================================

Counts. Positives (equivalent variants / restatements): exactly ``n_pos``. Near-misses
(near-miss variants / companions): at most ``n_neg``. The D1–D3 prompt text says "Exactly
{n_pos} equivalent and {n_neg} near-miss variants", but the paper (Sections 3 and 5)
describes the output as "one positive and up to three near-misses", and the peer's released
D1 rows carry 0–3 near-misses; we follow the paper: fewer than ``n_neg`` is accepted, more
is a wrong count.

Whole-answer rejections (``ParseOutcome.reason``): ``empty_answer``, ``code_fence``,
``leading_text``, ``trailing_text``, ``truncated``, ``invalid_json``, ``duplicate_key``,
``not_an_object``, ``missing_field``, ``unexpected_field``, ``wrong_type``,
``wrong_positive_count``, ``too_many_near_misses``, ``answer_too_long``, ``invalid_text``,
``parser_exception``; with ``allow_reasoning_preamble`` also ``reasoning_unclosed`` and
``no_json_after_preamble``; judge only: ``bad_verdict``, ``bad_confidence``,
``null_confidence_not_allowed``.

Reasoning preamble (Qwen3's thinking mode). With ``allow_reasoning_preamble=True`` an answer
may open with reasoning before its JSON: a ``<think>…</think>`` block, other text, or both.
The JSON object is then the one that *ends the answer* (only whitespace after it), found by a
string-aware scan backwards from the final ``}``; everything before it is the preamble and is
ignored, and the object itself goes through exactly the same strict checks as an answer
without a preamble (duplicate keys, constants, nesting, schema, counts). A ``<think>`` that
never closes before the JSON is ``reasoning_unclosed`` (typically a thinking run cut off by
``max_tokens``); a preamble with no JSON object ending the answer is
``no_json_after_preamble`` (``code_fence`` when the answer ends in a Markdown fence). The
preamble's length is kept in the outcome (``preamble_chars``). Without the switch any text
before the object is ``leading_text``, as before.

Hostile or broken answers never make the parsers raise: an answer longer than
:data:`~recipematch.llm.answer_json.MAX_ANSWER_CHARS` is ``answer_too_long``; nesting deeper than :data:`~recipematch.llm.answer_json.MAX_NESTING`
(``invalid_json``, detail ``nesting too deep ...``) and integer literals longer than
:data:`~recipematch.llm.answer_json.MAX_INT_DIGITS` digits (``invalid_json``, detail ``integer literal too long ...``) are
refused before Python's own limits (``RecursionError``, the 4,300-digit ``int`` limit) can
trip; any other exception while decoding is ``invalid_json`` with the exception named; a
string holding a lone UTF-16 surrogate (e.g. the JSON escape ``"\\ud800"``), which cannot be
encoded as UTF-8 and would break hashing and writing downstream, is ``invalid_text`` (detail
``lone surrogate ...``); and an unexpected exception anywhere else in the parser becomes
``parser_exception`` with the exception in ``detail``.

Item rejections (``ItemRejection.reason``; the rest of the answer is kept):
``not_an_object``, ``missing_field`` (no ``problem``), ``unexpected_field``, ``wrong_type``,
``empty_problem``, ``missing_tags``, ``empty_tags``, ``too_many_tags``,
``missing_annotation`` (another annotation absent or empty under ``require_tags``),
``positive_identical_to_anchor``, ``near_miss_identical_to_anchor``,
``duplicate_variant``.

Texts are compared (identical-to-anchor and duplicate checks) after
:func:`normalise_for_compare`: invisible characters (Unicode format characters, category
``Cf``, such as the zero-width space U+200B, joiners, U+FEFF and the soft hyphen, plus the
other default-ignorable code points: variation selectors, the combining grapheme joiner,
Hangul fillers) are removed, then runs of Unicode whitespace (NBSP and the other Unicode
spaces included) become one space and the ends are stripped (:func:`normalise_ws`). Item texts are returned exactly as the model
wrote them. JSON is read with :func:`json.loads` only (never ``eval``); ``NaN``/``Infinity``
and duplicate keys are refused.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from recipematch.llm.answer_json import Reject, load_json_object

__all__ = [
    "SCHEMAS",
    "PromptSchema",
    "ParsedItem",
    "ItemRejection",
    "ParseOutcome",
    "JudgeOutcome",
    "parse_answer",
    "parse_judge",
    "schema_for",
    "json_schema_for",
    "normalise_ws",
    "normalise_for_compare",
    "JUDGE_VERDICTS",
]

JUDGE_VERDICTS = ("equivalent", "not_equivalent")

# Default-ignorable code points that are not in category Cf (variation selectors, the
# combining grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian selectors).
_IGNORABLE_EXTRA = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]"
)


def normalise_ws(text: str) -> str:
    """Collapse every run of whitespace (``str.split()`` semantics) to one space; strip ends."""
    return " ".join(text.split())


def normalise_for_compare(text: str) -> str:
    """The form in which item texts are compared with the anchor and with each other:
    invisible characters (category ``Cf``: zero-width space/joiners, U+FEFF, soft hyphen,
    bidi marks, ...; and the other default-ignorable code points) removed, then
    :func:`normalise_ws` (which also folds NBSP and the other Unicode spaces)."""
    text = _IGNORABLE_EXTRA.sub("", text)
    if any(unicodedata.category(c) == "Cf" for c in text):
        text = "".join(c for c in text if unicodedata.category(c) != "Cf")
    return normalise_ws(text)


@dataclass(frozen=True)
class PromptSchema:
    """Field names of one answer schema.

    Attributes:
        positives_key: list of positives (``equivalent_variants`` or ``restatements``).
        negatives_key: list of near-misses (``near_miss_variants``, ``companions``) or
            ``None`` for positives-only prompts.
        positive_fields / negative_fields: item keys besides ``problem``; ``tags`` is a list
            of strings, every other one a string.
        top_fields: required top-level string fields besides the lists (every shipped
            prompt's answer has ``original_problem``; a user's own prompt may declare others
            or none, see :func:`recipematch.llm.prompts.load_custom_prompt`).
    """

    positives_key: str
    negatives_key: str | None
    positive_fields: tuple[str, ...]
    negative_fields: tuple[str, ...] = ()
    top_fields: tuple[str, ...] = ("original_problem",)


_VARIANTS = PromptSchema("equivalent_variants", "near_miss_variants", ("justification", "tags"), ("justification", "tags"))

#: Prompt name → answer schema. The D1 split prompts share D1's schema.
SCHEMAS: dict[str, PromptSchema] = {
    "d1_recipe": _VARIANTS,
    "d2_paraphrase": _VARIANTS,
    "d3_style": _VARIANTS,
    "d1_recipe:positives_only": _VARIANTS,
    "d1_recipe:near_misses_only": _VARIANTS,
    "d4_restatement": PromptSchema("restatements", None, ("audience", "justification")),
    "d5_survey": PromptSchema("restatements", None, ("context", "justification")),
    "unrelated_negatives": PromptSchema("restatements", "companions", ("audience", "justification"), ("what_changed",)),
}


def schema_for(prompt_name: str) -> PromptSchema:
    """The answer schema of a generation prompt.

    Raises:
        KeyError: not a generation prompt (the judge has :func:`parse_judge`).
    """
    try:
        return SCHEMAS[prompt_name]
    except KeyError:
        raise KeyError(f"no answer schema for prompt {prompt_name!r}; known: {sorted(SCHEMAS)}") from None


def json_schema_for(prompt_name: str, n_pos: int, n_neg: int, *, schema: PromptSchema | None = None) -> dict[str, Any]:
    """A JSON Schema (draft 2020-12 subset that vLLM/xgrammar accept) for structured
    decoding of a prompt's answer; the judge's is returned for ``"judge"``. The strict
    parser still checks every answer (structured decoding is a help, not a guarantee).
    ``schema`` gives the answer schema of a prompt outside :data:`SCHEMAS` (a user's own)."""
    if prompt_name == "judge" and schema is None:
        return {
            "type": "object",
            "properties": {
                "verdict": {"type": "string", "enum": list(JUDGE_VERDICTS)},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "reason": {"type": "string"},
            },
            "required": ["verdict", "confidence", "reason"],
            "additionalProperties": False,
        }
    sch = schema if schema is not None else schema_for(prompt_name)

    def item(fields: tuple[str, ...]) -> dict[str, Any]:
        props: dict[str, Any] = {"problem": {"type": "string", "minLength": 1}}
        for f in fields:
            props[f] = (
                {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": 4}
                if f == "tags"
                else {"type": "string"}
            )
        return {"type": "object", "properties": props, "required": ["problem", *fields], "additionalProperties": False}

    props: dict[str, Any] = {
        **{f: {"type": "string"} for f in sch.top_fields},
        sch.positives_key: {"type": "array", "items": item(sch.positive_fields), "minItems": n_pos, "maxItems": n_pos},
    }
    if sch.negatives_key is not None:
        props[sch.negatives_key] = {"type": "array", "items": item(sch.negative_fields), "maxItems": n_neg}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


@dataclass(frozen=True)
class ParsedItem:
    """One valid item: ``role`` ``"positive"`` or ``"near_miss"``, its 0-based ``index`` in
    the answer's list, ``text`` exactly as written, and its other fields (``annotations``)."""

    role: str
    index: int
    text: str
    annotations: Mapping[str, Any]


@dataclass(frozen=True)
class ItemRejection:
    """One rejected item: ``role``, ``index``, ``reason`` code, ``detail`` text, and the
    item's text when it had one (``None`` otherwise)."""

    role: str
    index: int
    reason: str
    detail: str
    text: str | None = None


@dataclass(frozen=True)
class ParseOutcome:
    """Result of :func:`parse_answer`.

    ``ok`` is false when the whole answer was rejected (``reason`` and ``detail`` say why;
    no items). When ``ok``, ``positives`` and ``negatives`` hold the valid items and
    ``item_rejections`` every item that was dropped. ``preamble_chars``: length of the
    reasoning preamble that was skipped (0 when none; see the module docstring).
    """

    ok: bool
    reason: str | None = None
    detail: str | None = None
    positives: tuple[ParsedItem, ...] = ()
    negatives: tuple[ParsedItem, ...] = ()
    item_rejections: tuple[ItemRejection, ...] = ()
    preamble_chars: int = 0

    def summary(self) -> dict[str, Any]:
        """The short form kept in the call store."""
        return {
            "ok": self.ok,
            "reason": self.reason,
            "detail": self.detail,
            **({"preamble_chars": self.preamble_chars} if self.preamble_chars else {}),
            "n_positives": len(self.positives),
            "n_negatives": len(self.negatives),
            "item_rejections": [
                {"role": r.role, "index": r.index, "reason": r.reason, "detail": r.detail}
                for r in self.item_rejections
            ],
        }




def _check_keys(obj: Mapping[str, Any], required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    missing = [k for k in required if k not in obj]
    if missing:
        raise Reject("missing_field", f"missing {missing}")
    extra = sorted(set(obj) - set(required) - set(optional))
    if extra:
        raise Reject("unexpected_field", f"unexpected {extra}")


def _check_item(
    item: Any, fields: tuple[str, ...], require_tags: bool
) -> tuple[str, dict[str, Any]]:
    """Validate one item; returns (problem text, annotations). Raises :class:`Reject`."""
    if not isinstance(item, dict):
        raise Reject("not_an_object", f"item is {type(item).__name__}")
    _check_keys(item, ("problem",), fields)
    if require_tags:
        absent = [f for f in fields if f not in item]
        if "tags" in absent:
            raise Reject("missing_tags", "no tags")
        if absent:
            raise Reject("missing_annotation", f"missing {absent}")
    problem = item["problem"]
    if not isinstance(problem, str):
        raise Reject("wrong_type", f"problem is {type(problem).__name__}")
    if not problem.strip():
        raise Reject("empty_problem", "problem text is empty")
    ann: dict[str, Any] = {}
    for f in fields:
        if f not in item:
            continue
        v = item[f]
        if f == "tags":
            if not isinstance(v, list) or not all(isinstance(t, str) for t in v):
                raise Reject("wrong_type", "tags must be a list of strings")
            if require_tags and (not v or not all(t.strip() for t in v)):
                raise Reject("empty_tags", "tags empty or holding an empty label")
            if len(v) > 4:
                raise Reject("too_many_tags", f"{len(v)} tags (the prompts ask for 1-4)")
        else:
            if not isinstance(v, str):
                raise Reject("wrong_type", f"{f} is {type(v).__name__}")
            if require_tags and not v.strip():
                raise Reject("missing_annotation", f"{f} is empty")
        ann[f] = v
    return problem, ann


def parse_answer(
    prompt_name: str,
    raw_text: str | None,
    *,
    n_pos: int,
    n_neg: int,
    anchor: str,
    require_tags: bool = True,
    allow_reasoning_preamble: bool = False,
    schema: PromptSchema | None = None,
) -> ParseOutcome:
    """Parse a generation answer strictly against the prompt's schema.

    Args:
        prompt_name: a key of :data:`SCHEMAS`, or any name when ``schema`` is given.
        raw_text: the answer exactly as received.
        n_pos: positives asked for; the list must hold exactly this many (≥ 0).
        n_neg: near-misses asked for; at most this many (≥ 0; must be 0 for a
            positives-only prompt).
        anchor: the source problem text; a positive (or near-miss) equal to it after
            :func:`normalise_for_compare` (invisible characters removed, whitespace
            normalised) is rejected.
        require_tags: require every per-item annotation field of the schema (``tags``
            non-empty with 1–4 non-empty labels, ``justification``, ``audience``,
            ``context``, ``what_changed`` non-empty). Switch it off for the peer's
            released rows, which carry none of them. Annotations that are present are
            type-checked either way.
        allow_reasoning_preamble: skip a reasoning preamble before the JSON (Qwen3's
            ``<think>`` block or other text; see the module docstring). The JSON itself is
            checked exactly as strictly.
        schema: the answer schema of a prompt outside :data:`SCHEMAS` (a user's own prompt,
            :func:`recipematch.llm.prompts.load_custom_prompt`).

    Returns:
        A :class:`ParseOutcome`; never raises for a bad answer.

    Raises:
        KeyError: unknown prompt. ValueError: negative counts, or ``n_neg > 0`` for a
            positives-only prompt.
    """
    sch = schema if schema is not None else schema_for(prompt_name)
    if n_pos < 0 or n_neg < 0:
        raise ValueError("n_pos and n_neg must be >= 0")
    if sch.negatives_key is None and n_neg:
        raise ValueError(f"{prompt_name} writes positives only; n_neg must be 0")
    try:
        return _parse_answer(sch, raw_text, n_pos=n_pos, n_neg=n_neg, anchor=anchor, require_tags=require_tags,
                             allow_preamble=allow_reasoning_preamble)
    except Exception as e:  # noqa: BLE001 - documented never to raise for a bad answer
        return ParseOutcome(ok=False, reason="parser_exception", detail=f"{type(e).__name__}: {e}"[:500])


def _parse_answer(
    sch: PromptSchema, raw_text: str | None, *, n_pos: int, n_neg: int, anchor: str, require_tags: bool,
    allow_preamble: bool = False,
) -> ParseOutcome:
    preamble = 0
    try:
        obj, preamble = load_json_object(raw_text, allow_preamble=allow_preamble)  # type: ignore[arg-type]
        required = (*sch.top_fields, sch.positives_key) + ((sch.negatives_key,) if sch.negatives_key else ())
        _check_keys(obj, required)
        for f in sch.top_fields:
            if not isinstance(obj[f], str):
                raise Reject("wrong_type", f"{f} is not a string")
        pos_list = obj[sch.positives_key]
        neg_list = obj[sch.negatives_key] if sch.negatives_key else []
        for k, v in ((sch.positives_key, pos_list), (sch.negatives_key, neg_list)):
            if not isinstance(v, list):
                raise Reject("wrong_type", f"{k} is not a list")
        if len(pos_list) != n_pos:
            raise Reject("wrong_positive_count", f"{len(pos_list)} positives, expected exactly {n_pos}")
        if len(neg_list) > n_neg:
            raise Reject("too_many_near_misses", f"{len(neg_list)} near-misses, expected at most {n_neg}")
    except Reject as r:
        return ParseOutcome(ok=False, reason=r.reason, detail=r.detail, preamble_chars=preamble)

    anchor_n = normalise_for_compare(anchor)
    seen: dict[str, tuple[str, int]] = {}
    positives: list[ParsedItem] = []
    negatives: list[ParsedItem] = []
    rejections: list[ItemRejection] = []
    for role, items, fields in (
        ("positive", pos_list, sch.positive_fields),
        ("near_miss", neg_list, sch.negative_fields),
    ):
        for i, item in enumerate(items):
            text = item.get("problem") if isinstance(item, dict) and isinstance(item.get("problem"), str) else None
            try:
                problem, ann = _check_item(item, fields, require_tags)
                norm = normalise_for_compare(problem)
                if norm == anchor_n:
                    raise Reject(f"{role}_identical_to_anchor",
                                  "identical to the source problem after removing invisible characters and "
                                  "normalising whitespace")
                if norm in seen:
                    r0, i0 = seen[norm]
                    raise Reject("duplicate_variant", f"same text as {r0} {i0}")
                seen[norm] = (role, i)
            except Reject as r:
                rejections.append(ItemRejection(role, i, r.reason, r.detail, text))
                continue
            (positives if role == "positive" else negatives).append(ParsedItem(role, i, problem, ann))
    return ParseOutcome(
        ok=True, positives=tuple(positives), negatives=tuple(negatives), item_rejections=tuple(rejections),
        preamble_chars=preamble,
    )


@dataclass(frozen=True)
class JudgeOutcome:
    """Result of :func:`parse_judge`: ``ok``; ``verdict`` (``"equivalent"`` /
    ``"not_equivalent"``); ``confidence`` (float in [0, 1], or ``None`` = not recorded);
    ``reason_text`` (the judge's sentence); on failure ``reason``/``detail``;
    ``preamble_chars`` as in :class:`ParseOutcome`."""

    ok: bool
    verdict: str | None = None
    confidence: float | None = None
    reason_text: str | None = None
    reason: str | None = None
    detail: str | None = None
    preamble_chars: int = 0

    def summary(self) -> dict[str, Any]:
        """The short form kept in the call store (``preamble_chars`` only when non-zero)."""
        d = asdict(self)
        if not d["preamble_chars"]:
            del d["preamble_chars"]
        return d


def parse_judge(
    raw_text: str | None, *, allow_null_confidence: bool = False, allow_reasoning_preamble: bool = False
) -> JudgeOutcome:
    """Parse a judge answer ``{"verdict", "confidence", "reason"}`` strictly.

    ``confidence`` must be a number in [0, 1] (``true``/``false`` refused). A ``null``
    confidence is accepted only with ``allow_null_confidence=True``, which the pipeline
    sets only for recordings whose origin is ``"implied_by_release"`` (verdicts implied by
    the peer's post-judge release, which recorded no confidence); it is returned as ``None``
    meaning "not recorded", never as a number. ``allow_reasoning_preamble`` skips a
    reasoning preamble before the JSON exactly as :func:`parse_answer` does.

    Returns:
        A :class:`JudgeOutcome`; never raises for a bad answer (an unexpected exception
        inside the parser is returned as ``parser_exception``).
    """
    try:
        return _parse_judge(raw_text, allow_null_confidence=allow_null_confidence,
                            allow_preamble=allow_reasoning_preamble)
    except Exception as e:  # noqa: BLE001 - documented never to raise for a bad answer
        return JudgeOutcome(ok=False, reason="parser_exception", detail=f"{type(e).__name__}: {e}"[:500])


def _parse_judge(raw_text: str | None, *, allow_null_confidence: bool, allow_preamble: bool = False) -> JudgeOutcome:
    preamble = 0
    try:
        obj, preamble = load_json_object(raw_text, allow_preamble=allow_preamble)  # type: ignore[arg-type]
        _check_keys(obj, ("verdict", "confidence", "reason"))
        verdict, conf, reason = obj["verdict"], obj["confidence"], obj["reason"]
        if verdict not in JUDGE_VERDICTS:
            raise Reject("bad_verdict", f"verdict {verdict!r}")
        if conf is None:
            if not allow_null_confidence:
                raise Reject("null_confidence_not_allowed", "confidence is null")
        elif isinstance(conf, bool) or not isinstance(conf, (int, float)) or not math.isfinite(conf) or not 0 <= conf <= 1:
            raise Reject("bad_confidence", f"confidence {conf!r} is not a number in [0, 1]")
        if not isinstance(reason, str):
            raise Reject("wrong_type", "reason is not a string")
    except Reject as r:
        return JudgeOutcome(ok=False, reason=r.reason, detail=r.detail, preamble_chars=preamble)
    return JudgeOutcome(ok=True, verdict=verdict, confidence=None if conf is None else float(conf), reason_text=reason,
                        preamble_chars=preamble)

