"""Relations, their unknowns and their sample points: what the equivalence test
(:mod:`recipematch.cas.equivalence`) and the counterexample search
(:mod:`recipematch.cas.counterexamples`) share (paper, Appendix A: the verified arm).

Notation: two-point names are unsigned lengths (``PC`` is ``CP``) unless the problem
declares vectors or directed segments (the rule in :mod:`recipematch.cas.grammar`;
:func:`unsigned_lengths`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import mpmath
import sympy as sp
from sympy.core.function import AppliedUndef

from recipematch.cas.compile import Undefined, compile_expr
from recipematch.cas.domains import Domain
from recipematch.cas.grammar import DEGREE, REL_OPS, segment_points, unsigned_segment_name

__all__ = ["Rel", "relation_variables", "unsigned_lengths"]


@dataclass(frozen=True)
class Rel:
    """A relation or chain as operators and sides (``len(sides) == len(ops) + 1``), or an
    expression (``ops == ()``)."""

    ops: tuple[str, ...]
    sides: tuple[sp.Expr, ...]

    @property
    def obj(self) -> sp.Basic:
        """The SymPy object (``And`` of links for a chain)."""
        if not self.ops:
            return self.sides[0]
        links = [REL_OPS[o](a, b) for o, a, b in zip(self.ops, self.sides, self.sides[1:])]
        return links[0] if len(links) == 1 else sp.And(*links, evaluate=False)


# --------------------------------------------------------------------------- variables

_KEY_CACHE: dict[sp.Basic, str] = {}


def _sort_key(b: sp.Basic) -> str:
    key = _KEY_CACHE.get(b)
    if key is None:
        if len(_KEY_CACHE) > 4096:
            _KEY_CACHE.clear()
        key = _KEY_CACHE[b] = sp.srepr(b)
    return key


def relation_variables(rel: Rel) -> list[sp.Basic]:
    """Unknowns of a relation in a fixed order: free symbols (degree sign excluded) and
    applied undefined functions (``f(x)``, each treated as its own unknown value)."""
    syms: set[sp.Basic] = set()
    for s in rel.sides:
        syms |= {x for x in s.free_symbols if x is not DEGREE}
        syms |= set(s.atoms(AppliedUndef))
    return sorted(syms, key=_sort_key)


_ATOM_CHECKERS: dict[tuple, Callable[[dict], bool] | None] = {}


def _atoms_consistent(rel_list: list[Rel], env: dict) -> bool:
    """Two applications of one function whose arguments coincide at the point must not get
    independent values: such a point is skipped. (Compiled once per relation pair.)"""
    key = tuple((r.ops, r.sides) for r in rel_list)
    checker = _ATOM_CHECKERS.get(key, False)
    if checker is False:
        checker = _make_atom_checker(rel_list)
        if len(_ATOM_CHECKERS) > 256:
            _ATOM_CHECKERS.clear()
        _ATOM_CHECKERS[key] = checker
    return True if checker is None else checker(env)


def _make_atom_checker(rel_list: list[Rel]) -> Callable[[dict], bool] | None:
    apps: set[AppliedUndef] = set()
    for rel in rel_list:
        for s in rel.sides:
            apps |= s.atoms(AppliedUndef)
    if len(apps) < 2:
        return None
    try:
        compiled = [(a, a.func.__name__, [compile_expr(x, "complex") for x in a.args])
                    for a in sorted(apps, key=_sort_key)]
    except Undefined:
        return lambda env: False

    def check(env: dict) -> bool:
        seen: dict[tuple, sp.Basic] = {}
        for a, name, fargs in compiled:
            try:
                vals = [complex(f(env)) for f in fargs]
            except (Undefined, ZeroDivisionError, OverflowError, ValueError, TypeError):
                return False
            k = (name,) + tuple((round(v.real, 9), round(v.imag, 9)) for v in vals)
            if k in seen and seen[k] != a:
                return False
            seen[k] = a
        return True
    return check


def _is_real_only(rel_list: list[Rel]) -> bool:
    for rel in rel_list:
        for s in rel.sides:
            if s.has(sp.floor, sp.ceiling, sp.frac, sp.Max, sp.Min, sp.factorial, sp.binomial):
                return True
    return False


# --------------------------------------------------------------------------- sampling

def _draw_real(rng: random.Random, dom: Domain | None) -> Fraction:
    """A real sample over the domain: a decimal with one (80%) or two digits after the
    point; magnitude in [0, 3.5] (70%) or [0, 12]; both signs equally likely when the
    domain allows, so sign changes are always exercised. Integers for integer domains.

    Raises:
        Undefined: when the domain holds no sample (e.g. no integer in it).
    """
    dom = dom or Domain()
    if dom.integer:
        lo = None if dom.lo is None else math.ceil(dom.lo) + (1 if dom.lo_strict and dom.lo == math.ceil(dom.lo) else 0)
        hi = None if dom.hi is None else math.floor(dom.hi) - (1 if dom.hi_strict and dom.hi == math.floor(dom.hi) else 0)
        if lo is None and hi is None:
            lo, hi = -10, 10
        elif lo is None:
            lo = hi - 20
        elif hi is None:
            hi = lo + 20
        if lo > hi:
            raise Undefined("empty integer domain")
        return Fraction(rng.randint(lo, min(hi, lo + 40)))
    for _ in range(40):
        mag = rng.uniform(0, 3.5) if rng.random() < 0.7 else rng.uniform(0, 12)
        if dom.lo is not None and dom.hi is not None:
            v = rng.uniform(float(dom.lo), float(dom.hi))
        elif dom.lo is not None:
            v = float(dom.lo) + mag
        elif dom.hi is not None:
            v = float(dom.hi) - mag
        else:
            v = mag if rng.random() < 0.5 else -mag
        step = 10 if rng.random() < 0.8 else 100
        f = Fraction(round(v * step), step)
        if dom.contains(float(f)) and dom.contains_exact(f):
            return f
    if dom.lo is not None and dom.hi is not None:
        f = (dom.lo + dom.hi) / 2
    elif dom.lo is not None:
        f = dom.lo + 1
    elif dom.hi is not None:
        f = dom.hi - 1
    else:
        f = Fraction(1, 2)
    if not dom.contains_exact(f):
        raise Undefined("empty domain")
    return f


def _fmt(v: Fraction | float | complex) -> str:
    if isinstance(v, Fraction):
        if max(abs(v.numerator).bit_length(), v.denominator.bit_length()) > 3000:
            # about 900 digits and more: a 17-digit decimal (exact output would be unreadable
            # and Python refuses int-to-str above 4,300 digits)
            with mpmath.workdps(30):
                return mpmath.nstr(mpmath.mpf(v.numerator) / v.denominator, 17)
        if v.denominator == 1:
            return str(v.numerator)
        # exact decimal when the denominator divides a power of ten
        d = v.denominator
        k = 0
        while d % 10 == 0 or d % 2 == 0 or d % 5 == 0:
            if d % 10 == 0:
                d //= 10
            elif d % 2 == 0:
                d //= 2
            else:
                d //= 5
            k += 1
        if d == 1 and k <= 12:
            # exact: the denominator divides 10^k
            scaled = abs(v.numerator) * 10 ** k // v.denominator
            whole, frac = divmod(scaled, 10 ** k)
            text = f"{whole}.{frac:0{k}d}".rstrip("0").rstrip(".")
            return ("-" if v < 0 else "") + text
        return f"{v.numerator}/{v.denominator}"
    if isinstance(v, complex):
        if v.imag == 0:
            return repr(v.real)
        return f"{v.real!r}{'+' if v.imag >= 0 else '-'}{abs(v.imag)!r}j"
    return repr(float(v))


def _oriented_links(rel: Rel) -> list[tuple[str, sp.Expr, sp.Expr]]:
    """Each link as (kind, P, Q) read as ``P − Q`` = 0 (``eq``), ≠ 0 (``ne``), > 0 (``gt``)
    or ≥ 0 (``ge``)."""
    out = []
    for op, a, b in zip(rel.ops, rel.sides, rel.sides[1:]):
        if op == "=":
            out.append(("eq", a, b))
        elif op == "!=":
            out.append(("ne", a, b))
        elif op == "<":
            out.append(("gt", b, a))
        elif op == "<=":
            out.append(("ge", b, a))
        elif op == ">":
            out.append(("gt", a, b))
        else:
            out.append(("ge", a, b))
    return out


def _residual_forms(rel: Rel) -> list[tuple[str, sp.Expr]]:
    """Each link as (kind, g) with ``g = P − Q`` (see :func:`_oriented_links`)."""
    return [(k, p - q) for k, p, q in _oriented_links(rel)]


def _complex_point(rng: random.Random, variables: list[sp.Basic], real: bool,
                   domains: dict[str, Domain] | None) -> dict:
    env = {}
    for v in variables:
        dom = (domains or {}).get(_var_name(v))
        if real or (dom is not None and dom.integer):
            env[v] = float(_draw_real(rng, dom))
        else:
            env[v] = complex(rng.uniform(-2.5, 2.5), rng.uniform(-2.5, 2.5))
    return env


_NAME_CACHE: dict[sp.Basic, str] = {}


def _var_name(v: sp.Basic) -> str:
    """A variable's name in a stored point: the symbol name, or ``f(x + y)`` for an
    applied function (cached: printing is slow)."""
    if v.is_Symbol:
        return v.name
    name = _NAME_CACHE.get(v)
    if name is None:
        if len(_NAME_CACHE) > 4096:
            _NAME_CACHE.clear()
        name = _NAME_CACHE[v] = sp.sstr(v)
    return name


def unsigned_lengths(rel: Rel) -> Rel:
    """``rel`` with every two-point segment name replaced by its unsigned name
    (:func:`recipematch.cas.grammar.unsigned_segment_name`: ``PC`` → ``CP``), the notation
    rule of :mod:`recipematch.cas.grammar` for problems that declare no vectors or
    directed segments: ``AB = PC`` and ``A B - C P = 0`` are then the same relation."""
    sub = {}
    for side in rel.sides:
        for x in side.free_symbols:
            if isinstance(x, sp.Symbol) and x not in sub:
                name = unsigned_segment_name(x.name)
                if name != x.name:
                    sub[x] = sp.Symbol(name)
    if not sub:
        return rel
    return Rel(rel.ops, tuple(side.xreplace(sub) for side in rel.sides))


def _unsigned_domains(domains: dict[str, Domain] | None) -> dict[str, Domain] | None:
    """Domains keyed by unsigned segment names too (the written name's domain is kept
    for the unsigned one when that has none of its own)."""
    if not domains:
        return domains
    out = dict(domains)
    for name, dom in domains.items():
        if segment_points(name) is not None:
            out.setdefault(unsigned_segment_name(name), dom)
    return out


# --------------------------------------------------------------------------- symbolic guards

def _big_power(e: sp.Basic, limit: int = 12) -> bool:
    """A power of a non-number whose exponent is not a small integer (expanding it could
    take unbounded time), or a numeric power kept unevaluated by the grammar."""
    for p in e.atoms(sp.Pow):
        ex = p.exp
        if p.base.is_number:
            if ex.is_number and p.base.is_Rational and ex.is_Rational and abs(ex) > 64:
                return True
            continue
        if ex.is_Integer:
            if abs(int(ex)) > limit:
                return True
        elif not (ex.is_Rational and abs(int(ex.p)) <= limit and int(ex.q) <= limit):
            return True
    return False


_SYMBOLIC_ERRORS = (sp.PolynomialError, NotImplementedError, RecursionError, TypeError, ValueError,
                    ZeroDivisionError, AttributeError, OverflowError)
