"""LaTeX normaliser: rewrite what the parser cannot read into what it can (Appendix A).

The paper's normaliser "first cleans each source so that SymPy can parse more of it,
lifting its unique-expression coverage from 86.61% to 92.29%" (paper, Appendix A: the verified arm). Ours maps
the many spellings found in the corpus onto the canonical vocabulary of
:mod:`recipematch.cas.grammar`; :func:`normalize_latex` is a pure ``str -> str``
function, so the census can parse every span twice, raw and normalised.

Rewrites, in order (each is a rule, not a special case of one input):

* unicode: minus signs and dashes, ``≤ ≥ ≠ ⩽ ⩾``, ``× · ⋅ ÷``, superscript digits,
  primes, Greek letters, ``π``, ``°``, ``∞``, non-breaking and thin spaces;
* sizing and style: ``\\left``/``\\right`` (``\\left.`` deleted), ``\\big…``/``\\Big…``,
  ``\\displaystyle``, ``\\limits``, alignment ``&``, ``\\nonumber``, ``\\label{…}``;
* spacing: ``\\,  \\;  \\:  \\!  \\ `` ``~``, ``\\quad``, ``\\hspace{…}``, ``\\phantom{…}``;
* aliases: ``\\dfrac``/``\\tfrac``/``\\cfrac`` → ``\\frac``; ``\\le``, ``\\leqslant``,
  ``\\leqq`` → ``\\leq`` (and ``\\ge`` likewise); ``\\ne``, ``\\not=`` → ``\\neq``;
  ``\\lt``/``\\gt``; ``\\times``, ``\\cdotp`` → ``\\cdot``; ``\\ast`` → ``*`` (kept: a
  bare ``*`` is usually a problem's own operation); ``\\div`` →
  ``/``; ``\\lvert``/``\\rvert``/``\\vert`` → ``|``; ``\\lbrace`` → ``\\{``; ``\\dots``,
  ``\\cdots`` … → ``\\ldots``; ``\\dbinom`` → ``\\binom``; Russian and French function
  names (``\\tg``, ``\\ctg``, ``\\arctg``, ``\\cosec``, ``\\sh``, ``\\ch``); ``\\lg`` →
  ``\\log_{10}``; ``\\operatorname{lcm}`` → ``\\lcm``; ``\\prime`` → ``'``;
  ``^\\circ``/``\\degree``/``°`` → ``^{\\circ}``;
* ``\\text{…}``/``\\mathrm{…}``: a unit or blank is deleted, one roman letter becomes
  the letter (``\\mathrm{d}``); words were already a segment separator
  (:func:`recipematch.cas.spans.split_segments`);
* braces-free arguments: ``\\frac12`` → ``\\frac{1}{2}``, ``\\frac1x``, ``\\sqrt2`` →
  ``\\sqrt{2}``, ``\\binom nk``;
* decimal comma ``{,}`` → ``.``;
* trailing sentence punctuation.

Chained relations (``-1 \\leq x < 1``) are split into their links by the parser, which
needs the parsed middle term (:func:`recipematch.cas.grammar.parse_segment`).
"""

from __future__ import annotations

import re

__all__ = ["normalize_latex", "UNICODE_MAP"]

#: Single characters rewritten to LaTeX (unicode that appears in MathNet spans).
UNICODE_MAP: dict[str, str] = {
    "\u2212": "-", "\u2013": "-", "\u2014": "-", "\u2010": "-", "\u2011": "-", "\ufe63": "-",
    "\uff0d": "-", "\u2264": r"\leq ", "\u2265": r"\geq ", "\u2a7d": r"\leq ", "\u2a7e": r"\geq ",
    "\u2266": r"\leq ", "\u2267": r"\geq ", "\u2260": r"\neq ", "\u00d7": r"\cdot ",
    "\u00b7": r"\cdot ", "\u22c5": r"\cdot ", "\u2219": r"\cdot ", "\u00f7": "/", "\u2215": "/",
    "\u00b2": "^{2}", "\u00b3": "^{3}", "\u00b9": "^{1}", "\u2074": "^{4}",
    "\u2032": "'", "\u2033": "''", "\u00b0": r"^{\circ}", "\u221e": r"\infty ",
    "\u03c0": r"\pi ", "\u03b1": r"\alpha ", "\u03b2": r"\beta ", "\u03b3": r"\gamma ",
    "\u03b4": r"\delta ", "\u03b5": r"\varepsilon ", "\u03b8": r"\theta ", "\u03bb": r"\lambda ",
    "\u03bc": r"\mu ", "\u03c3": r"\sigma ", "\u03c6": r"\varphi ", "\u03c9": r"\omega ",
    "\u0394": r"\Delta ", "\u03a9": r"\Omega ", "\u2026": r"\ldots ", "\u22ef": r"\ldots ",
    "\u00a0": " ", "\u2009": " ", "\u202f": " ", "\u2002": " ", "\u2003": " ", "\u3000": " ",
    "\uff1d": "=", "\uff0b": "+", "\uff08": "(", "\uff09": ")", "\uff1c": "<", "\uff1e": ">",
    "\u2217": "*", "\u2236": ":",
}

_CMD_ALIASES: dict[str, str] = {
    "dfrac": r"\frac", "tfrac": r"\frac", "cfrac": r"\frac",
    "le": r"\leq", "leqslant": r"\leq", "leqq": r"\leq", "leq": r"\leq",
    "ge": r"\geq", "geqslant": r"\geq", "geqq": r"\geq", "geq": r"\geq",
    "ne": r"\neq", "neq": r"\neq", "lt": "<", "gt": ">",
    "times": r"\cdot", "ast": "*", "cdotp": r"\cdot", "centerdot": r"\cdot", "bullet": r"\cdot",
    "div": "/", "lvert": "|", "rvert": "|", "vert": "|",
    "lbrace": r"\{", "rbrace": r"\}",
    "dots": r"\ldots", "cdots": r"\ldots", "dotsb": r"\ldots", "dotsc": r"\ldots",
    "dotsm": r"\ldots", "dotso": r"\ldots", "hdots": r"\ldots",
    "dbinom": r"\binom", "tbinom": r"\binom",
    "tg": r"\tan", "ctg": r"\cot", "cotg": r"\cot", "arctg": r"\arctan", "arcctg": r"\operatorname{arccot}",
    "cosec": r"\csc", "sh": r"\sinh", "ch": r"\cosh", "th": r"\tanh",
    "lg": r"\log_{10}", "prime": "'", "degree": r"^{\circ}", "textdegree": r"^{\circ}",
    "measuredangle": r"\angle", "varnothing": r"\emptyset",
    "lneq": "<", "gneq": ">", "leftrightarrow": r"\iff",
}

_DELETE_CMDS = frozenset({
    "left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr", "biggl",
    "biggr", "Biggl", "Biggr", "bigm", "Bigm", "middle", "displaystyle", "textstyle",
    "scriptstyle", "limits", "nolimits", "nonumber", "notag", "relax", "allowbreak",
})
_SPACE_CMDS = frozenset({"quad", "qquad", "enspace", "thinspace", "medspace", "thickspace",
                         "negthinspace", "space"})
_DROP_ARG_CMDS = frozenset({"label", "hspace", "vspace", "phantom", "hphantom", "vphantom",
                            "tag", "color", "textcolor_first"})
_TEXT_CMDS = frozenset({"text", "textrm", "textit", "textbf", "mbox", "hbox", "textnormal",
                        "mathrm", "operatorname", "mathit", "rm"})
_OPERATOR_NAMES = {
    "lcm": r"\lcm", "gcd": r"\gcd", "max": r"\max", "min": r"\min", "sin": r"\sin",
    "cos": r"\cos", "tan": r"\tan", "cot": r"\cot", "tg": r"\tan", "ctg": r"\cot",
    "log": r"\log", "ln": r"\ln", "exp": r"\exp", "sgn": r"\operatorname{sgn}",
    "arccot": r"\operatorname{arccot}",
}
_UNIT_RE = re.compile(r"\s*(?:cm|mm|km|m|dm|kg|g|s|h|min|ml|l|L|°|deg|km/h|m/s|cm\^2|m\^2|cm\^3|m\^3|units?)?\s*")


def _brace_arg(s: str, i: int) -> tuple[str, int] | None:
    """If ``s[i:]`` (after blanks) opens a brace group, return (body, index after it)."""
    j = i
    while j < len(s) and s[j] == " ":
        j += 1
    if j >= len(s) or s[j] != "{":
        return None
    depth = 0
    k = j
    while k < len(s):
        ch = s[k]
        if ch == "\\":
            k += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return s[j + 1:k], k + 1
        k += 1
    return None


def _rewrite_commands(s: str) -> str:
    """One left-to-right pass over commands: aliases, deletions, text bodies."""
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        ch = s[i]
        if ch != "\\":
            if ch == "&":
                out.append(" ")
            elif ch == "*":
                # a bare * is kept: after ^ it decorates a set (N^*), elsewhere it is
                # usually a custom operation, which the parser rejects
                out.append("*")
            elif ch == "~":
                out.append(" ")
            else:
                out.append(ch)
            i += 1
            continue
        m = re.match(r"\\([A-Za-z]+)", s[i:])
        if not m:
            nxt = s[i + 1:i + 2]
            if nxt in (",", ";", ":", "!", " ", ">", "\n"):
                out.append(" ")
                i += 2
                continue
            out.append(s[i:i + 2])
            i += 2
            continue
        name = m.group(1)
        j = i + m.end()
        if name in _DELETE_CMDS:
            # \left. and \right. are invisible delimiters
            if name in ("left", "right", "bigl", "bigr", "Bigl", "Bigr", "big", "Big") and s[j:j + 1] == ".":
                j += 1
            out.append(" ")
            i = j
            continue
        if name in _SPACE_CMDS:
            out.append(" ")
            i = j
            continue
        if name in _DROP_ARG_CMDS:
            arg = _brace_arg(s, j)
            i = arg[1] if arg else j
            out.append(" ")
            continue
        if name == "not" and s[j:j + 1] == "=":
            out.append(r"\neq ")
            i = j + 1
            continue
        if name in _TEXT_CMDS:
            arg = _brace_arg(s, j)
            if arg is None:
                out.append(s[i:j])
                i = j
                continue
            body, after = arg
            b = body.strip()
            if len(b) > 1 and _UNIT_RE.fullmatch(b):
                out.append(" ")
                i = after
                continue
            if name == "operatorname" or (name == "mathrm" and len(b) > 1):
                if b in _OPERATOR_NAMES:
                    out.append(_OPERATOR_NAMES[b] + " ")
                else:
                    out.append(r"\operatorname{" + b + "}")
                i = after
                continue
            if len(b) == 1 and b.isalpha() and b.isascii():
                out.append(" " + b + " ")
                i = after
                continue
            if _UNIT_RE.fullmatch(b):
                out.append(" ")
                i = after
                continue
            # words left inside a segment: keep, the parser rejects them with a reason
            out.append(r"\text{" + body + "}")
            i = after
            continue
        alias = _CMD_ALIASES.get(name)
        if alias is not None:
            out.append(alias)
            # keep a blank so "\le x" does not become "\leqx"
            if alias.startswith("\\") and alias[-1].isalpha():
                out.append(" ")
            i = j
            continue
        out.append(s[i:j])
        i = j
    return "".join(out)


_ARITY = {"frac": 2, "binom": 2, "sqrt": 1}


def _tex_token(s: str, i: int) -> tuple[str, int] | None:
    """The TeX argument token at ``s[i:]`` after blanks: a brace group, a control
    sequence or one character. Returns (argument text, index after it)."""
    j = i
    while j < len(s) and s[j] == " ":
        j += 1
    if j >= len(s):
        return None
    if s[j] == "{":
        arg = _brace_arg(s, j)
        if arg is None:
            return None
        return "{" + arg[0] + "}", arg[1]
    if s[j] == "\\":
        m = re.match(r"\\([A-Za-z]+|.)", s[j:])
        if not m:
            return None
        return s[j:j + m.end()], j + m.end()
    if s[j] in "}^_&":
        return None
    return s[j], j + 1


def _brace_arguments(s: str) -> str:
    """Wrap braces-free arguments of ``\\frac``, ``\\binom`` and ``\\sqrt`` in braces
    (``\\frac12`` → ``\\frac{1}{2}``, ``\\sqrt2`` → ``\\sqrt{2}``), TeX's own rule:
    an argument is one token."""
    out: list[str] = []
    i = 0
    pat = re.compile(r"\\(frac|binom|sqrt)(?![A-Za-z])")
    while True:
        m = pat.search(s, i)
        if not m:
            out.append(s[i:])
            break
        out.append(s[i:m.end()])
        j = m.end()
        if m.group(1) == "sqrt":
            while j < len(s) and s[j] == " ":
                j += 1
            if j < len(s) and s[j] == "[":
                k = s.find("]", j)
                if k < 0:
                    i = j
                    continue
                out.append(s[j:k + 1])
                j = k + 1
        for _ in range(_ARITY[m.group(1)]):
            tok = _tex_token(s, j)
            if tok is None:
                break
            arg, j = tok
            out.append(arg if arg.startswith("{") else "{" + arg + "}")
        i = j
    return "".join(out)


_DEGREE = re.compile(r"\^\s*\\circ\b|\^\s*\{\s*\\circ\s*\}|\^\s*\{\s*o\s*\}")
_PRIME_SUP = re.compile(r"\^\s*\{\s*((?:'\s*)+)\}|\^\s*(')")


def normalize_latex(s: str) -> str:
    """Rewrite one segment of LaTeX into the parser's canonical vocabulary.

    Args:
        s: raw LaTeX of a math segment (no ``$`` delimiters).

    Returns:
        The normalised LaTeX (whitespace collapsed). Never raises; what it cannot fix is
        left for the parser to reject with a reason.

    Example:
        >>> normalize_latex(r"\\dfrac12 \\leqslant x\\,\\cdot y")
        '\\\\frac{1}{2} \\\\leq x \\\\cdot y'
    """
    t = "".join(UNICODE_MAP.get(c, c) for c in s)
    t = t.replace("{,}", ".")
    # thousands separated by a thin space: 100\,000
    t = re.sub(r"(?<=\d)\\[,;:!]\s*(?=\d{3}(?!\d))", "", t)
    t = re.sub(r"(?<![.])\.\.\.(?![.])", r"\\ldots ", t)
    t = _rewrite_commands(t)
    # a second pass resolves aliases introduced by the first (e.g. \lg -> \log_{10})
    t = _DEGREE.sub(r"^{\\circ}", t)
    t = _PRIME_SUP.sub(lambda m: (m.group(1) or m.group(2)).replace(" ", ""), t)
    t = _brace_arguments(t)
    # "AB || CD" written with two bars between names (and no other bar) is parallelism
    if t.count("|") == 2:
        t = re.sub(r"(?<=[A-Z'])\s*\|\|\s*(?=[A-Z])", r" \\parallel ", t)
    t = re.sub(r"\s+", " ", t).strip()
    t = t.rstrip(" .,;:")
    return t
