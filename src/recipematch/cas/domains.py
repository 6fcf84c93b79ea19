"""Declared and implied variable domains of a problem (paper, Appendix A: the verified arm, domains).

A variable's domain is a :class:`Domain` (bounds and integrality), where the checks
sample it (:func:`recipematch.cas.relations._draw_real`). Sources, strongest first:

* bounds declared in the problem's own math: ``x > 0``, ``0 < x < 1``, ``a \\geq 1``,
  lists ``a, b, c > 0`` (a bound closing a run of bare names in one span applies to each
  of them), memberships ``n \\in \\mathbb{N}``, ``x \\in \\mathbb{R}^+``, ``x \\in [0, 1]``;
* implied integrality: a bare variable inside a factorial or a binomial, a letter used
  in a subscript (an index: ``a_n``, ``x_{k+1}``), and the conventional index letters
  ``i j k m n``;
* implied positivity: geometric names (``AB``, ``A'B'``, ``\\overline{AB}``) are lengths
  (> 0) and ``\\angle ABC`` lies in (0, π);
* words, in the corpus's languages: "positive" makes every single-letter variable
  without a declared lower bound positive.

Restricting a domain can only lose counterexamples, never make a wrong one: a point
inside the declared domain is a valid counterexample for any wider reading. Equivalence
of positives is checked over the complex numbers and does not depend on domains. The
relation being edited is never used as its own domain bound.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from fractions import Fraction

import sympy as sp

from recipematch.cas.grammar import Parsed

__all__ = ["Domain", "infer_domains", "POSITIVE_WORDS", "INTEGER_WORDS"]


@dataclass(frozen=True)
class Domain:
    """Declared or implied domain of one variable.

    Attributes:
        lo, hi: bounds as exact fractions or ``None``.
        lo_strict, hi_strict: whether the bound is excluded.
        integer: sample integers only.
    """

    lo: Fraction | None = None
    lo_strict: bool = False
    hi: Fraction | None = None
    hi_strict: bool = False
    integer: bool = False

    def contains(self, v: float) -> bool:
        """Whether the real value ``v`` lies in the domain (integrality included)."""
        if self.integer and abs(v - round(v)) > 1e-12:
            return False
        if self.lo is not None and (v < self.lo or (self.lo_strict and v <= self.lo)):
            return False
        if self.hi is not None and (v > self.hi or (self.hi_strict and v >= self.hi)):
            return False
        return True

    def contains_exact(self, v: Fraction) -> bool:
        """Exact membership of a rational value."""
        if self.integer and v.denominator != 1:
            return False
        if self.lo is not None and (v < self.lo or (self.lo_strict and v == self.lo)):
            return False
        if self.hi is not None and (v > self.hi or (self.hi_strict and v == self.hi)):
            return False
        return True

    def to_json(self) -> dict:
        """JSON form: bounds as strings."""
        return {"lo": None if self.lo is None else str(self.lo), "lo_strict": self.lo_strict,
                "hi": None if self.hi is None else str(self.hi), "hi_strict": self.hi_strict,
                "integer": self.integer}


#: Words for "positive" (stems), languages of MathNet.
POSITIVE_WORDS = re.compile(
    r"\b(positive|positiv|positif|positifs|positives|positivo|positivos|positiva|positivas|"
    r"pozitiv|pozitív|dodatni|dodatnie|dodatnich|pozytywn|kladn|положительн|додатн|"
    r"pozitivn|dương|正|양의|양수|pozitif|jákvæð)",
    re.IGNORECASE)
NONNEG_WORDS = re.compile(r"(non-?negative|nonnegative|no negativ|non négati|неотрицательн|nicht-?negativ|nenegativ|không âm)",
                          re.IGNORECASE)
#: Words for "integer".
INTEGER_WORDS = re.compile(
    r"(integer|entier|entero|inteiro|intero|ganze|ganzzahl|целы|цілі|całkowit|egész|"
    r"întreg|intreg|số nguyên|整数|정수|tam sayı|celé|cijel|natural|naturel|natürlich|натуральн)",
    re.IGNORECASE)


def _const(e: sp.Basic) -> Fraction | None:
    if e.is_Rational:
        return Fraction(int(e.p), int(e.q))
    return None


def _tighten(dom: Domain, op: str, c: Fraction) -> Domain:
    """Intersect with ``x op c`` (``op`` one of < <= > >= =)."""
    if op in (">", ">="):
        strict = op == ">"
        if dom.lo is None or c > dom.lo or (c == dom.lo and strict):
            dom = replace(dom, lo=c, lo_strict=strict)
    elif op in ("<", "<="):
        strict = op == "<"
        if dom.hi is None or c < dom.hi or (c == dom.hi and strict):
            dom = replace(dom, hi=c, hi_strict=strict)
    return dom


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _bounds_of(parsed: Parsed) -> list[tuple[str, str, Fraction]]:
    """(variable name, op, constant) for every link ``var op const`` or ``const op var``."""
    out = []
    for op, a, b in zip(parsed.ops, parsed.sides, parsed.sides[1:]):
        if op in ("=", "!="):
            continue
        if isinstance(a, sp.Symbol) and _const(b) is not None:
            out.append((a.name, op, _const(b)))
        elif isinstance(b, sp.Symbol) and _const(a) is not None:
            out.append((b.name, _FLIP[op], _const(a)))
    return out


_LIST_GAP = re.compile(r"\s*(?:,|;|and|y|et|und|и|e|és|i|và|ve|oraz|și|a|or|o|ou|или)?\s*,?\s*",
                       re.IGNORECASE)


def infer_domains(segments: list[tuple], text: str, exclude: int | None = None) -> dict[str, Domain]:
    """Domains of the problem's variables.

    Args:
        segments: ``(span_index, segment_index, parsed or None, start, end)`` for every
            segment of the problem, in text order (offsets into ``text``). A run of bare
            names continues across spans separated only by a comma or a conjunction
            (``$a$, $b$ y $c > 0$``).
        text: the problem text (for the positive/integer words).
        exclude: a segment's position in ``segments`` whose own bound is ignored (the
            relation being edited).

    Returns:
        ``{symbol name: Domain}``; a variable without information is absent (sampled over
        both signs).
    """
    doms: dict[str, Domain] = {}
    run: list[str] = []  # bare names waiting for a list bound
    last_span = None
    last_end = 0
    for pos, (span_i, _seg_i, parsed, start, end) in enumerate(segments):
        if span_i != last_span:
            gap = text[last_end:start]
            # the gap holds the closing and opening delimiters too
            gap = gap.replace("$", " ").replace("\\(", " ").replace("\\)", " ")
            if not _LIST_GAP.fullmatch(gap):
                run = []
            last_span = span_i
        last_end = end
        if parsed is None:
            run = []
            continue
        if parsed.kind == "expression" and isinstance(parsed.obj, sp.Symbol):
            run.append(parsed.obj.name)
            continue
        if pos == exclude:
            run = []
            continue
        if parsed.kind in ("relation", "chain"):
            bounds = _bounds_of(parsed)
            for name, op, c in bounds:
                doms[name] = _tighten(doms.get(name, Domain()), op, c)
            if len(bounds) >= 1 and parsed.kind == "relation":
                name, op, c = bounds[0]
                if isinstance(parsed.sides[0], sp.Symbol) and parsed.sides[0].name == name:
                    for other in run:
                        doms[other] = _tighten(doms.get(other, Domain()), op, c)
        elif parsed.kind == "membership" and isinstance(parsed.sides[0], sp.Symbol) and parsed.ops == ("in",):
            s = parsed.sides[1]
            names = run + [parsed.sides[0].name]
            for name in names:
                d = doms.get(name, Domain())
                if s in (sp.S.Integers, sp.S.Naturals, sp.S.Naturals0) or isinstance(s, sp.Range):
                    d = replace(d, integer=True)
                    if s == sp.S.Naturals or (isinstance(s, sp.Range) and s.inf == 1):
                        d = _tighten(d, ">=", Fraction(1))
                elif isinstance(s, sp.Interval):
                    lo, hi = _const(s.start), _const(s.end)
                    if lo is not None:
                        d = _tighten(d, ">" if s.left_open else ">=", lo)
                    if hi is not None:
                        d = _tighten(d, "<" if s.right_open else "<=", hi)
                elif isinstance(s, sp.Intersection) or s == sp.S.Reals:
                    for part in (s.args if isinstance(s, sp.Intersection) else [s]):
                        if part in (sp.S.Integers, sp.S.Naturals):
                            d = replace(d, integer=True)
                        if isinstance(part, sp.Interval) and _const(part.start) is not None:
                            d = _tighten(d, ">" if part.left_open else ">=", _const(part.start))
                doms[name] = d
        run = []
    # implied: factorial / binomial arguments are integers
    for _span_i, _seg_i, parsed, *_ in segments:
        if parsed is None:
            continue
        for f in parsed.obj.atoms(sp.factorial, sp.binomial):
            for arg in f.args:
                if isinstance(arg, sp.Symbol):
                    doms[arg.name] = replace(_tighten(doms.get(arg.name, Domain()), ">=", Fraction(0)), integer=True)
    # implied integrality and positivity, words
    positive = bool(POSITIVE_WORDS.search(text)) and not NONNEG_WORDS.search(text)
    names: set[str] = set()
    index_letters: set[str] = set()
    for _span_i, _seg_i, parsed, *_ in segments:
        if parsed is not None and parsed.kind in ("relation", "chain", "expression"):
            names |= {s.name for s in parsed.unknowns}
            for s in parsed.obj.atoms(sp.Symbol):
                for sub in _SUBSCRIPT.findall(s.name):
                    index_letters |= set(re.sub(r"\\[A-Za-z]+", " ", sub)) & _LATIN
    for name in sorted(names):
        d = doms.get(name, Domain())
        if name in _INDEX_LETTERS or name in index_letters:
            d = replace(d, integer=True)
        if _GEOMETRIC_NAME.fullmatch(name) or name.startswith("\\overline") or name.startswith("\\triangle"):
            d = _tighten(d, ">", Fraction(0))
        elif name.startswith("\\angle"):
            d = _tighten(_tighten(d, ">", Fraction(0)), "<", _PI_BELOW)
        elif positive and d.lo is None and len(name) == 1:
            d = _tighten(d, ">", Fraction(0))
        if d != Domain():
            doms[name] = d
    return doms


_SUBSCRIPT = re.compile(r"_\{([^{}]*)\}")
_LATIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
#: Conventional index letters: always sampled as integers (a subset of any wider reading).
_INDEX_LETTERS = frozenset("ijkmn")
_GEOMETRIC_NAME = re.compile(r"(?:[A-Z]'*(?:_\{[^{}]*\})?'*){2,}")
#: A rational just below pi: angles are sampled in (0, 3.14159).
_PI_BELOW = Fraction(314159, 100000)
