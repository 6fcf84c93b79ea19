"""The strict JSON layer under every parser of LLM answers (paper Section 3 and Appendix F:
answers are JSON, checked before any row is kept): one JSON object read with
:func:`json.loads` only, duplicate keys, ``NaN``/``Infinity``, lone surrogates, over-deep
nesting and over-long integers refused before Python's own limits trip, and an optional
reasoning preamble (a ``<think>`` block or text) skipped before the object that ends the
answer. The schemas of each prompt's answer are checked on top, in
:mod:`recipematch.llm.parsing`."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MAX_ANSWER_CHARS", "MAX_INT_DIGITS", "MAX_NESTING", "Reject", "load_answer_object", "load_json_object",
           "split_reasoning_preamble"]

#: Longest answer (characters) the parsers read; longer ones are ``answer_too_long``. Far
#: above any answer a ``max_tokens`` setting of this project can produce.
MAX_ANSWER_CHARS = 1_000_000
#: Deepest nesting of JSON objects/arrays accepted (the schemas need 4 levels).
MAX_NESTING = 64
#: Longest integer literal (digits) accepted; no field of any schema needs more than a few.
MAX_INT_DIGITS = 100

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class Reject(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail


def _no_dup_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise Reject("duplicate_key", f"key {k!r} appears twice in one object")
        seen[k] = v
    return seen


def _refuse_constant(name: str) -> None:
    raise Reject("invalid_json", f"non-standard JSON constant {name}")


def _scan_object_end(text: str, max_depth: int = MAX_NESTING) -> int | None:
    """Index just past the top-level JSON object starting at ``text[0] == '{'``, or
    ``None`` when the text ends before the object closes (string-aware brace count).

    Raises :class:`Reject` (``invalid_json``, nesting too deep) as soon as the nesting
    passes ``max_depth``, so the decoder never recurses deeper than that."""
    depth = 0
    in_str = False
    esc = False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
            if depth > max_depth:
                raise Reject("invalid_json", f"nesting too deep (more than {max_depth} levels at character {i})")
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def _json_start_backwards(text: str) -> int | None:
    """Index of the ``{`` that opens the JSON object ending at ``text[-1] == '}'``, by a
    string-aware bracket count from the end (a ``"`` preceded by an odd number of
    backslashes is inside a string); ``None`` when the brackets never balance."""
    depth = 0
    in_str = False
    i = len(text) - 1
    while i >= 0:
        ch = text[i]
        if ch == '"':
            j = i - 1
            while j >= 0 and text[j] == "\\":
                j -= 1
            if (i - 1 - j) % 2 == 0:
                in_str = not in_str
        elif not in_str:
            if ch in "}]":
                depth += 1
                if depth > MAX_NESTING:
                    raise Reject("invalid_json", f"nesting too deep (more than {MAX_NESTING} levels)")
            elif ch in "{[":
                depth -= 1
                if depth == 0:
                    return i if ch == "{" else None
        i -= 1
    return None


def split_reasoning_preamble(raw: str) -> tuple[str, str]:
    """Split an answer into ``(preamble, json_text)`` where ``json_text`` is the JSON object
    that ends the answer (see the module docstring, "Reasoning preamble"). An answer that
    starts with ``{`` has no preamble. Never loosens the checks on ``json_text``.

    Raises:
        ValueError: with the rejection code as its first argument (``reasoning_unclosed``,
            ``no_json_after_preamble``, ``code_fence``, ``invalid_json``) and a detail second.
    """
    try:
        return _split_preamble(raw)
    except Reject as r:
        raise ValueError(r.reason, r.detail) from None


def _split_preamble(raw: str) -> tuple[str, str]:
    text = raw.strip()
    if text.startswith("{"):
        return "", text
    body = text.rstrip()
    if not body.endswith("}"):
        if _THINK_OPEN in text and _THINK_CLOSE not in text:
            raise Reject("reasoning_unclosed", f"<think> never closes ({len(text)} characters)")
        if "```" in text[-200:]:
            raise Reject("code_fence", "the answer ends in a Markdown code fence")
        raise Reject("no_json_after_preamble", f"no JSON object ends the answer: ...{body[-80:]!r}")
    start = _json_start_backwards(body)
    if start is None:
        raise Reject("no_json_after_preamble", "the closing brace at the end matches no opening brace")
    preamble = text[:start]
    if preamble.count(_THINK_OPEN) > preamble.count(_THINK_CLOSE):
        raise Reject("reasoning_unclosed", "the JSON object sits inside an unclosed <think> block")
    return preamble, body[start:]


def load_json_object(raw: str, *, allow_preamble: bool = False) -> tuple[dict[str, Any], int]:
    """Strictly read one JSON object that makes up the whole answer (surrounding
    whitespace allowed), or with ``allow_preamble`` the object that ends it. Returns the
    object and the preamble length in characters. Raises :class:`Reject`."""
    if allow_preamble and isinstance(raw, str) and raw.strip() and len(raw) <= MAX_ANSWER_CHARS:
        preamble, body = _split_preamble(raw)
        return load_json_object(body)[0], len(preamble)
    return _load_strict(raw), 0


def _load_strict(raw: str) -> dict[str, Any]:
    if raw is None or not isinstance(raw, str) or not raw.strip():
        raise Reject("empty_answer", "the answer is empty" if raw is None or isinstance(raw, str) else
                      f"the answer is a {type(raw).__name__}, not text")
    if len(raw) > MAX_ANSWER_CHARS:
        raise Reject("answer_too_long", f"{len(raw)} characters (limit {MAX_ANSWER_CHARS})")
    text = raw.strip()
    if "```" in text:
        raise Reject("code_fence", "the answer contains a Markdown code fence")
    if not text.startswith("{"):
        if "{" in text:
            raise Reject("leading_text", f"text before the JSON object: {text[: text.index('{')][:80]!r}")
        raise Reject("not_an_object" if text[0] in '["-0123456789tfn' else "invalid_json", "no JSON object")
    end = _scan_object_end(text)
    if end is None:
        raise Reject("truncated", f"the JSON object never closes ({len(text)} characters)")
    if text[end:].strip():
        raise Reject("trailing_text", f"text after the JSON object: {text[end:].strip()[:80]!r}")
    try:
        obj = json.loads(text, object_pairs_hook=_no_dup_keys, parse_constant=_refuse_constant,
                         parse_int=_bounded_int)
    except Reject:
        raise
    except json.JSONDecodeError as e:
        raise Reject("invalid_json", f"{e.msg} at character {e.pos}") from None
    except RecursionError:
        raise Reject("invalid_json", "nesting too deep (decoder recursion limit)") from None
    except Exception as e:  # noqa: BLE001 - the parser must never raise for a bad answer
        raise Reject("invalid_json", f"{type(e).__name__}: {e}"[:300]) from None
    if not isinstance(obj, dict):
        raise Reject("not_an_object", f"top level is {type(obj).__name__}")
    _refuse_lone_surrogates(obj)
    return obj


def load_answer_object(raw: str | None, *, repair: Any = None) -> tuple[dict[str, Any] | None, str]:
    """One JSON object from a labelling answer (SABER-Math's summaries, topic scores and
    pairwise verdicts, the candidate design's judge, the MELD generation and screen), read as
    strictly as the pair prompts' answers: no duplicate key, no NaN, no integer literal over
    :data:`MAX_INT_DIGITS` digits, no lone surrogate; a ``<think>`` preamble is allowed and one
    fenced block (```` ```json ````, any case) around the whole answer is unwrapped.

    Args:
        raw: the answer text (``None``: no text).
        repair: an optional ``str -> str`` applied to the unwrapped text before parsing
            (the MELD answers' LaTeX escapes).

    Returns:
        ``(object, "")`` or ``(None, reason)`` with one of the module's reason codes
        (``empty_answer``, ``invalid_json``, ``duplicate_key``, ``not_an_object``, ...); never raises.
    """
    if raw is None:
        return None, "no_answer_text"
    if not isinstance(raw, str):
        return None, "empty_answer"
    try:
        fence = re.fullmatch(r"\s*```[A-Za-z]*[ \t]*\n?(.*?)\n?[ \t]*```\s*", raw, re.S) \
            if len(raw) <= MAX_ANSWER_CHARS else None
        text = fence.group(1) if fence else raw
        if text.strip() and len(text) <= MAX_ANSWER_CHARS and not text.strip().startswith("{"):
            text = _split_preamble(text)[1]
        if repair is not None:
            text = repair(text)
        return _load_strict(text), ""
    except Reject as e:
        return None, e.reason


def _bounded_int(literal: str) -> int:
    digits = len(literal.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise Reject("invalid_json", f"integer literal too long ({digits} digits, limit {MAX_INT_DIGITS})")
    return int(literal)


def _refuse_lone_surrogates(obj: Any) -> None:
    """Raise ``invalid_text`` when any key or string value holds a lone UTF-16 surrogate
    (a valid escaped pair such as ``"\\ud83d\\ude00"`` is decoded to one code point and passes)."""
    stack: list[tuple[Any, str]] = [(obj, "$")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                m = _LONE_SURROGATE.search(k)
                if m:
                    raise Reject("invalid_text", f"lone surrogate U+{ord(m.group()):04X} in a key at {where}")
                stack.append((v, f"{where}.{k}"))
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
        elif isinstance(node, str):
            m = _LONE_SURROGATE.search(node)
            if m:
                raise Reject("invalid_text", f"lone surrogate U+{ord(m.group()):04X} in {where}"[:300])
