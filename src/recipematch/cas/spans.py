"""Math-span extraction from problem texts in any language (paper, Appendix A: the verified arm).

A *span* is the LaTeX between math delimiters: ``$…$``, ``$$…$$``, ``\\(…\\)``, ``\\[…\\]``
and the display environments listed in :data:`DISPLAY_ENVIRONMENTS` when they stand
outside any other span. Extraction only looks at delimiters, so it works the same for
every language of the corpus (Spanish, Russian, Vietnamese, Chinese, …).

A span is later split into *segments* (:func:`split_segments`): the pieces between
top-level separators such as commas, ``\\quad``, ``\\text{and}`` or ``\\\\``. A segment
is the unit the parser reads and the unit an edit replaces in place, so every offset
here indexes the original problem text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "DISPLAY_ENVIRONMENTS",
    "Span",
    "Segment",
    "find_spans",
    "split_segments",
]

#: Environments that open a display-math span on their own (outside ``$…$``).
DISPLAY_ENVIRONMENTS: tuple[str, ...] = (
    "equation", "equation*", "align", "align*", "eqnarray", "eqnarray*",
    "gather", "gather*", "multline", "multline*", "displaymath", "math",
    "flalign", "flalign*",
)

_ENV_OPEN = re.compile(r"\\begin\{(" + "|".join(re.escape(e) for e in DISPLAY_ENVIRONMENTS) + r")\}")


@dataclass(frozen=True)
class Span:
    """One math span of a problem text.

    Attributes:
        start, end: offsets of the whole span, delimiters included (``text[start:end]``).
        inner_start, inner_end: offsets of the LaTeX between the delimiters.
        kind: ``"inline"`` (``$``, ``\\(``), ``"display"`` (``$$``, ``\\[``) or
            ``"env:<name>"`` for a display environment.
    """

    start: int
    end: int
    inner_start: int
    inner_end: int
    kind: str

    def content(self, text: str) -> str:
        """The LaTeX between the delimiters."""
        return text[self.inner_start:self.inner_end]


@dataclass(frozen=True)
class Segment:
    """A top-level piece of a span: ``text[start:end]`` with surrounding blanks and
    trailing sentence punctuation already trimmed off (so a replacement keeps them)."""

    start: int
    end: int


def _is_escaped(text: str, i: int) -> bool:
    """True when ``text[i]`` is preceded by an odd number of backslashes."""
    n = 0
    j = i - 1
    while j >= 0 and text[j] == "\\":
        n += 1
        j -= 1
    return n % 2 == 1


def find_spans(text: str) -> list[Span]:
    """All math spans of ``text`` in order of appearance.

    Rules: ``\\$`` is a literal dollar; ``$$`` opens display math and is closed by the
    next unescaped ``$$``; a lone ``$`` is closed by the next unescaped lone ``$``; an
    unclosed opener ends extraction (the rest of the text is prose). Environments are
    recognised only outside other spans. Empty spans are dropped.

    Args:
        text: a problem statement (any language).

    Returns:
        Spans sorted by ``start``; they never overlap.
    """
    spans: list[Span] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "$" and not _is_escaped(text, i):
            if text.startswith("$$", i):
                j = i + 2
                while True:
                    j = text.find("$$", j)
                    if j < 0 or not _is_escaped(text, j):
                        break
                    j += 1
                if j < 0:
                    break
                if text[i + 2:j].strip():
                    spans.append(Span(i, j + 2, i + 2, j, "display"))
                i = j + 2
                continue
            j = i + 1
            while j < n:
                if text[j] == "$" and not _is_escaped(text, j):
                    break
                j += 1
            if j >= n:
                break
            if text[i + 1:j].strip():
                spans.append(Span(i, j + 1, i + 1, j, "inline"))
            i = j + 1
            continue
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt in "([" :
                close = "\\)" if nxt == "(" else "\\]"
                j = text.find(close, i + 2)
                if j < 0:
                    i += 2
                    continue
                if text[i + 2:j].strip():
                    spans.append(Span(i, j + 2, i + 2, j, "inline" if nxt == "(" else "display"))
                i = j + 2
                continue
            m = _ENV_OPEN.match(text, i)
            if m:
                name = m.group(1)
                end_tag = "\\end{" + name + "}"
                j = text.find(end_tag, m.end())
                if j < 0:
                    i = m.end()
                    continue
                if text[m.end():j].strip():
                    spans.append(Span(i, j + len(end_tag), m.end(), j, "env:" + name))
                i = j + len(end_tag)
                continue
            if nxt == "\\" or nxt == "$":
                i += 2
                continue
        i += 1
    return spans


# --------------------------------------------------------------------------- segments

# Commands that separate independent statements inside one span.
_SEPARATOR_COMMANDS = frozenset({
    "quad", "qquad", "iff", "Leftrightarrow", "Rightarrow", "implies", "Longrightarrow",
    "Longleftrightarrow", "land", "wedge", "lor", "vee", "forall", "exists", "text", "textrm",
    "textit", "textbf", "mbox", "hbox", "mathrm_word", "begin", "end", "hline", "colon",
    "and", "or", "Leftarrow", "Longleftarrow", "hfill", "newline",
})
_TEXT_COMMANDS = frozenset({"text", "textrm", "textit", "textbf", "mbox", "hbox", "textnormal"})
_CMD_RE = re.compile(r"\\([A-Za-z]+|.)", re.S)
_TRAIL = " \t\n\r.,;:~?"
_LIST_ENVS = frozenset({"cases", "array", "matrix", "pmatrix", "bmatrix", "tabular", "dcases", "rcases"})
_LABEL = re.compile(r"(?:[a-hA-H1-9]\)|\\bullet)\s+")
_DIGIT_LIST = re.compile(r"\d+(?:,\d+)+")


def _brace_group_end(s: str, i: int) -> int:
    """Index just past the brace group that opens at ``s[i] == '{'`` (or len(s))."""
    depth = 0
    j = i
    while j < len(s):
        ch = s[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(s)


def _text_is_unit_or_blank(body: str) -> bool:
    """A ``\\text{…}`` body that can be deleted without joining two statements:
    blanks, or a short unit such as ``cm``, ``m^2``, ``km/h``, ``kg``, ``°``."""
    b = body.strip()
    if not b:
        return True
    return bool(re.fullmatch(r"(?:cm|mm|km|m|dm|kg|g|s|h|min|ml|l|L|°|deg|km/h|m/s|cm\^2|m\^2|cm\^3|m\^3|units?)", b))


def split_segments(text: str, span: Span) -> list[Segment]:
    """Split a span into top-level segments (offsets into ``text``).

    Separators at brace and bracket depth 0: ``,`` and ``;`` (except a comma directly
    between two digits, left to the parser to reject as ambiguous), ``\\\\``, ``&``
    is *not* a separator (alignment), and the commands in ``_SEPARATOR_COMMANDS``, including
    any ``\\text{…}`` that holds words (``\\text{ and }``, ``\\text{si}``), because
    deleting it would glue two statements into one product (``x \\text{ and } y``).
    ``\\text{…}`` holding blanks or a unit stays inside its segment (the normaliser
    deletes it). Segments are trimmed of blanks and trailing ``.,;:`` so an in-place
    replacement keeps the sentence punctuation.

    Returns:
        Non-empty segments in order.
    """
    s = text
    lo, hi = span.inner_start, span.inner_end
    cuts: list[tuple[int, int]] = []  # (cut_start, cut_end) separator extents
    # digit lists: "0,1,2" is a list, "1,000,000" a number, "0,5" ambiguous (kept whole)
    list_commas: set[int] = set()
    for m in _DIGIT_LIST.finditer(s, lo, hi):
        groups = m.group(0).split(",")
        if len(groups) > 2 and not all(len(g) == 3 for g in groups[1:]):
            k = m.start()
            for g in groups[:-1]:
                k += len(g)
                list_commas.add(k)
                k += 1
    env_stack: list[str] = []
    depth = 0
    i = lo
    while i < hi:
        ch = s[i]
        if ch == "\\":
            m = _CMD_RE.match(s, i, hi)
            if not m:
                i += 1
                continue
            name = m.group(1)
            j = m.end()
            if name == "left":
                m2 = re.match(r"\s*(?:\\\{|\\lbrace|\.)\s*(?=\\begin)", s[j:hi])
                if m2:
                    cuts.append((i, j + m2.end()))
                    i = j + m2.end()
                    continue
            if name == "right":
                m2 = re.match(r"\s*(?:\\\}|\\rbrace|\.)", s[j:hi])
                if m2 and re.search(r"\\end\{[a-z*]+\}\s*$", s[lo:i]):
                    cuts.append((i, j + m2.end()))
                    i = j + m2.end()
                    continue
            if name in ("{", "langle", "lfloor", "lceil", "lbrace"):
                depth += 1
            elif name in ("}", "rangle", "rfloor", "rceil", "rbrace"):
                depth = max(0, depth - 1)
            elif name == "\\" and depth == 0:
                cuts.append((i, j))
            elif depth == 0 and name in _TEXT_COMMANDS:
                k = j
                while k < hi and s[k] == " ":
                    k += 1
                if k < hi and s[k] == "{":
                    e = min(_brace_group_end(s, k), hi)
                    if not _text_is_unit_or_blank(s[k + 1:e - 1]):
                        cuts.append((i, e))
                    i = e
                    continue
            elif depth == 0 and name in ("begin", "end"):
                k = j
                if k < hi and s[k] == "{":
                    e = min(_brace_group_end(s, k), hi)
                    env = s[k + 1:e - 1].strip()
                    if name == "begin":
                        env_stack.append(env)
                        # column specification of array/tabular
                        if env in ("array", "tabular") and e < hi and s[e] == "{":
                            e = min(_brace_group_end(s, e), hi)
                    elif env_stack:
                        env_stack.pop()
                    cuts.append((i, e))
                    i = e
                    continue
            elif depth == 0 and name in _SEPARATOR_COMMANDS:
                cuts.append((i, j))
            i = j
            continue
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth = max(0, depth - 1)
        elif depth == 0 and ch == "&" and env_stack and env_stack[-1] in _LIST_ENVS:
            cuts.append((i, i + 1))
        elif depth == 0 and ch in ",;":
            if (ch == "," and 0 < i and i + 1 < hi and s[i - 1].isdigit() and s[i + 1].isdigit()
                    and i not in list_commas):
                i += 1
                continue
            cuts.append((i, i + 1))
        i += 1
    pieces: list[tuple[int, int]] = []
    prev = lo
    for a, b in cuts:
        pieces.append((prev, a))
        prev = b
    pieces.append((prev, hi))
    out: list[Segment] = []
    for a, b in pieces:
        while a < b and s[a] in " \t\n\r~":
            a += 1
        while b > a and s[b - 1] in _TRAIL and not _is_escaped(s, b - 1):
            b -= 1
        # a trailing "\," / "\;" spacing command before the period
        while b - a >= 2 and s[b - 2] == "\\" and s[b - 1] in ",;: " and not _is_escaped(s, b - 2):
            b -= 2
            while b > a and s[b - 1] in _TRAIL:
                b -= 1
        # an enumeration label ("a)", "1)", "\\bullet") opening a segment is not math
        m = _LABEL.match(s, a, b)
        if m and m.end() < b:
            a = m.end()
        if b > a:
            out.append(Segment(a, b))
    return out
