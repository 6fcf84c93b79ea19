"""Positive and negative edits of one relation (paper, Appendix A: the verified arm).

Positives (each verified):

* **rename** (:func:`rename_latex`): consistent letter substitution inside the problem's
  own math spans; verified by re-parsing every segment that parsed and checking that it
  equals the original object with the symbols renamed (same structure);
* **reformulate** (:func:`reformulations`): move one term, move all terms, expand or
  factor a side, scale by 2 or by 1/2; verified by
  :func:`recipematch.cas.equivalence.check_equivalent` (``rewrite − k·original`` vanishes at
  ≥ 20 points: exact rational points and a symbolic check for rational relations, complex
  points confirmed at 50 digits otherwise; the domain must not change, so a factorisation
  that cancels a removable singularity is not a positive);
* **mirror** (:func:`mirror`): an inequality (or chain) with its sides swapped and every
  direction reversed; verified by the same numeric test.

Negatives (:func:`negative_edits`): a changed constant ``c → c+1`` (all visible
occurrences), an exponent ``e → e+1`` (``2 ≤ |e| ≤ 6``, one base), the sign of one term
of a side, or a flipped inequality; each is kept only with a counterexample
(:func:`recipematch.cas.counterexamples.find_counterexample`).

Reformulated and mirrored positives and all negatives are printed with SymPy's LaTeX
printer (:func:`recipematch.cas.grammar.to_latex`) and kept only when the printed text
re-parses to exactly the relation it was printed from (:func:`print_and_reparse`).
"""

from __future__ import annotations

import re

import sympy as sp

from recipematch.cas.grammar import DEGREE, REL_OPS, Parsed, try_parse, to_latex
from recipematch.cas.relations import Rel

__all__ = [
    "RENAME_SKIP",
    "rename_latex",
    "reformulations",
    "mirror",
    "negative_edits",
    "print_and_reparse",
    "visible_constants",
]

#: Letters never renamed and never used as targets: they read as words or constants
#: (the peer's list: a A I i e o O l).
RENAME_SKIP = frozenset("aAIieoOl")

_WORD_ARG_RE = re.compile(
    r"\\(?:operatorname|mathbb|text|textrm|textit|textbf|mbox|hbox|begin|end|label|mathrm|"
    r"color|hspace|vspace)\s*\{[^{}]*\}")
_CMD_RE = re.compile(r"\\(?:[A-Za-z]+|.)", re.S)


def rename_latex(s: str, mapping: dict[str, str]) -> str:
    """Apply a letter substitution to LaTeX, outside command names and the arguments of
    word commands (``\\text{…}``, ``\\operatorname{…}``, ``\\mathbb{…}``, environment names).

    Args:
        s: LaTeX text (a span's content or a canonical symbol name).
        mapping: single Latin letters to single Latin letters.

    Returns:
        The renamed text, the same length as ``s`` (letters map to letters), so offsets
        into the problem text are unchanged.
    """
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        if s[i] == "\\":
            m = _WORD_ARG_RE.match(s, i) or _CMD_RE.match(s, i)
            if m:
                out.append(m.group(0))
                i = m.end()
                continue
        out.append(mapping.get(s[i], s[i]))
        i += 1
    return "".join(out)


def print_and_reparse(rel: Rel, functions: frozenset[str]) -> str | None:
    """Print a relation with SymPy's LaTeX printer; return the text only when it re-parses
    to exactly the same operators and sides (Appendix A: "used only if it re-parses to
    exactly the relation it came from")."""
    try:
        text = to_latex(rel.obj) if len(rel.ops) == 1 else to_latex((rel.ops, rel.sides))
    except (TypeError, ValueError, RecursionError, AttributeError, NotImplementedError):
        return None
    if len(text) > 800:
        return None
    parsed, _ = try_parse(text, functions=functions)
    if parsed is None or tuple(parsed.ops) != tuple(rel.ops) or tuple(parsed.sides) != tuple(rel.sides):
        return None
    return text


def _is_small(e: sp.Basic, limit: int = 60) -> bool:
    return sp.count_ops(e, visual=False) <= limit


def _add_terms(e: sp.Expr) -> list[sp.Expr]:
    return list(sp.Add.make_args(e))


def reformulations(rel: Rel) -> list[tuple[str, Rel, sp.Expr]]:
    """Candidate reformulations of a single-link relation, in a fixed order.

    Returns:
        ``(transform name, rewritten relation, k)`` with ``k`` the constant such that the
        rewrite's residual is ``k`` times the original's (1 for moves, expand, factor; 2
        and 1/2 for the scalings). Names follow the peer: ``move_term``,
        ``move_all_terms``, ``expand_lhs``/``expand_rhs``, ``factor_lhs``/``factor_rhs``,
        ``scale_x2``, ``scale_div2``. Candidates that do not change the relation are left out.
    """
    if len(rel.ops) != 1 or rel.ops[0] == "!=":
        return []
    op = rel.ops[0]
    lhs, rhs = rel.sides
    out: list[tuple[str, Rel, sp.Expr]] = []

    def add(name: str, a: sp.Expr, b: sp.Expr, k: sp.Expr) -> None:
        new = Rel((op,), (a, b))
        try:
            o = REL_OPS[op](a, b)
        except TypeError:
            return
        if o in (sp.true, sp.false):
            return
        if (a, b) != (lhs, rhs):
            out.append((name, new, k))

    lt = _add_terms(lhs)
    rt = _add_terms(rhs)
    # move one term off a side that has several (the last in SymPy's order, a non-number
    # when there is one)
    for terms in (lt, rt):
        if len(terms) >= 2:
            movable = [t for t in terms if not t.is_Number] or terms
            t = sorted(movable, key=sp.default_sort_key)[-1]
            add("move_term", lhs - t, rhs - t, sp.Integer(1))
            break
    if rhs != 0:
        add("move_all_terms", lhs - rhs, sp.Integer(0), sp.Integer(1))
    for side_name, side, other, first in (("lhs", lhs, rhs, True), ("rhs", rhs, lhs, False)):
        if not _is_small(side, 40) or _has_big_power(side):
            continue
        ex = sp.expand(side)
        if ex != side and _is_small(ex, 80):
            add("expand_" + side_name, ex if first else other, other if first else ex, sp.Integer(1))
        if _factorable(side):
            try:
                fa = sp.factor(side)
            except (sp.PolynomialError, NotImplementedError, RecursionError):
                fa = side
            if fa != side and _is_small(fa, 60):
                add("factor_" + side_name, fa if first else other, other if first else fa, sp.Integer(1))
    add("scale_x2", 2 * lhs, 2 * rhs, sp.Integer(2))
    add("scale_div2", lhs / 2, rhs / 2, sp.Rational(1, 2))
    return out


def _has_big_power(e: sp.Expr, limit: int = 6) -> bool:
    """True when a power of a non-number has an exponent that is not a small integer
    (``|n| > limit``, or a non-integer number, or a large unevaluated number): expanding
    or factoring it could take unbounded time (``(a+b)^{2010}``)."""
    for p in e.atoms(sp.Pow):
        if p.base.is_number:
            continue
        ex = p.exp
        if ex.is_Integer:
            if abs(int(ex)) > limit:
                return True
        elif ex.is_number and not ex.is_Rational:
            return True
        elif ex.is_Rational and (abs(int(ex.p)) > limit or int(ex.q) > limit):
            return True
    return False


def _factorable(e: sp.Expr) -> bool:
    syms = e.free_symbols - {DEGREE}
    if not syms or len(syms) > 3 or not _is_small(e, 40) or _has_big_power(e):
        return False
    if not e.is_polynomial(*syms):
        return False
    try:
        return sp.Poly(e, *sorted(syms, key=sp.default_sort_key)).total_degree() <= 6
    except (sp.PolynomialError, sp.GeneratorsNeeded):
        return False


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def mirror(rel: Rel) -> Rel | None:
    """Swap the sides of an inequality (or chain) and reverse every direction:
    ``a < b`` → ``b > a``, ``-1 \\leq x < 1`` → ``1 > x \\geq -1``. ``None`` when a link
    is an equation or ``≠`` (mirror is for inequalities only)."""
    if not rel.ops or any(o not in _FLIP for o in rel.ops):
        return None
    return Rel(tuple(_FLIP[o] for o in reversed(rel.ops)), tuple(reversed(rel.sides)))


# --------------------------------------------------------------------------- negatives

def _visible_ints(e: sp.Basic, ctx: str, out: set[int]) -> None:
    """Collect integers a reader sees in the printed relation (``ctx``: where ``e`` sits)."""
    if e.is_Integer:
        n = abs(int(e))
        if ctx == "mulcoef" and n == 1:
            return
        if ctx == "exp" and int(e) == -1:
            return
        out.add(n)
        return
    if e.is_Rational:
        p, q = abs(int(e.p)), int(e.q)
        if ctx == "exp" and p == 1 and q == 2:
            return
        if p != 1:
            out.add(p)
        out.add(q)
        return
    if e.is_Pow:
        _visible_ints(e.base, "base", out)
        _visible_ints(e.exp, "exp", out)
        return
    if e.is_Mul:
        for a in e.args:
            _visible_ints(a, "mulcoef" if a.is_Number else "factor", out)
        return
    for a in e.args:
        _visible_ints(a, "arg", out)


def visible_constants(rel: Rel) -> list[int]:
    """Distinct non-negative integers visible in the relation (structural ``-1`` of a
    minus sign or a division, and the hidden 2 of a square root, excluded), sorted."""
    out: set[int] = set()
    for s in rel.sides:
        _visible_ints(s, "side", out)
    return sorted(out)


def _replace_int(e: sp.Basic, c: int, ctx: str) -> sp.Basic:
    if e.is_Integer:
        n = int(e)
        if abs(n) != c or (ctx == "mulcoef" and c == 1) or (ctx == "exp" and n == -1):
            return e
        return sp.Integer((1 if n >= 0 else -1) * (c + 1))
    if e.is_Rational:
        p, q = int(e.p), int(e.q)
        if ctx == "exp" and abs(p) == 1 and q == 2:
            return e
        p2 = (1 if p > 0 else -1) * (c + 1) if abs(p) == c and abs(p) != 1 else p
        q2 = c + 1 if q == c else q
        return sp.Rational(p2, q2)
    if e.is_Pow:
        return sp.Pow(_replace_int(e.base, c, "base"), _replace_int(e.exp, c, "exp"))
    if e.is_Mul:
        return sp.Mul(*[_replace_int(a, c, "mulcoef" if a.is_Number else "factor") for a in e.args])
    if not e.args or e.is_Symbol:
        return e
    return e.func(*[_replace_int(a, c, "arg") for a in e.args])


def negative_edits(rel: Rel) -> list[tuple[str, Rel]]:
    """Candidate minimal edits of a relation, in a fixed order, each ``(edit, relation)``.

    Edit labels follow the peer's release: ``constant:3->4 (all occurrences)``,
    ``exponent:2->3 on x``, ``opswap:sign of term 2 x y flipped``,
    ``ineq_flip_no_swap:<=->>=``. An edit that leaves the relation unchanged, or turns it
    into a truth value, is left out.
    """
    out: list[tuple[str, Rel]] = []
    seen: set[tuple] = set()

    def add(label: str, new: Rel) -> None:
        try:
            obj = new.obj
        except TypeError:
            return
        if obj in (sp.true, sp.false) or any(isinstance(x, sp.logic.boolalg.BooleanAtom) for x in getattr(obj, "args", ())):
            return
        key = (new.ops, new.sides)
        if new.sides == rel.sides and new.ops == rel.ops or key in seen:
            return
        seen.add(key)
        out.append((label, new))

    if len(rel.ops) == 1 and rel.ops[0] in _FLIP:
        add(f"ineq_flip_no_swap:{rel.ops[0]}->{_FLIP[rel.ops[0]]}", Rel((_FLIP[rel.ops[0]],), rel.sides))
    for c in visible_constants(rel):
        if c > 10**6:
            continue
        try:
            sides = tuple(_replace_int(s, c, "side") for s in rel.sides)
        except (TypeError, ValueError, RecursionError):
            continue
        add(f"constant:{c}->{c + 1} (all occurrences)", Rel(rel.ops, sides))
    pows: set[sp.Pow] = set()
    for s in rel.sides:
        pows |= {p for p in s.atoms(sp.Pow) if p.exp.is_Integer and 2 <= abs(int(p.exp)) <= 6}
    for p in sorted(pows, key=sp.default_sort_key):
        e = int(p.exp)
        e2 = e + 1 if e > 0 else e - 1
        sides = tuple(s.xreplace({p: sp.Pow(p.base, e2)}) for s in rel.sides)
        add(f"exponent:{e}->{e2} on {to_latex(p.base)}", Rel(rel.ops, sides))
    for idx, s in enumerate(rel.sides):
        terms = _add_terms(s)
        if len(terms) < 2:
            continue
        for t in sorted(terms, key=sp.default_sort_key):
            sides = list(rel.sides)
            sides[idx] = s - 2 * t
            add(f"opswap:sign of term {to_latex(t)} flipped", Rel(rel.ops, tuple(sides)))
    return out


def rename_symbol_map(parsed: Parsed, mapping: dict[str, str]) -> dict[sp.Symbol, sp.Symbol]:
    """The symbol substitution a letter mapping induces on a parsed object (names are
    canonical LaTeX, so the new name is :func:`rename_latex` of the old one)."""
    return {s: sp.Symbol(rename_latex(s.name, mapping)) for s in parsed.obj.atoms(sp.Symbol) if s is not DEGREE}
