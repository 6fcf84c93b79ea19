"""Numeric evaluation, domains, equivalence checks and counterexamples (SPEC §3.1).

No ``lambdify`` (it ``exec``s generated code): a SymPy tree is compiled into nested
Python closures over a fixed set of node types, evaluated in one of two modes:

* ``complex``: principal branches (``cmath``), used for the equivalence of positives
  ("original − rewrite is zero at ≥ 20 random complex points", Appendix A);
* ``real``: real-valued semantics for truth values of inequalities and counterexamples
  (odd roots of negatives are real, even roots and logarithms of non-positives are
  undefined, factorial and binomial need non-negative integers).

Explicit skip rule: a sample point where any side of either relation is undefined,
non-finite, or (for counterexamples) too close to its boundary to decide, is skipped and
not counted. Too few valid points gives ``unknown``/"not verified", never "equivalent".

Constants: the degree sign is ``pi/180``; a bare ``e`` is sampled freely for
equivalence (an identity in ``e`` holds at Euler's number too) and pinned to Euler's
number for counterexamples (valid under both readings); ``\\log`` without a base must
give the counterexample under both the natural and the base-10 reading.
"""

from __future__ import annotations

import cmath
import math
import random
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import sympy as sp
from sympy.core.function import AppliedUndef

from recipematch.cas.grammar import _OPAQUE_FUNCS, DEGREE, REL_OPS

__all__ = [
    "Undefined",
    "Domain",
    "Rel",
    "compile_expr",
    "relation_variables",
    "check_equivalent",
    "find_counterexample",
    "EQUIV_POINTS",
    "EQUIV_MAX_DRAWS",
    "EQUIV_MIN_NONTRIVIAL",
    "CX_REAL_POINTS",
]

#: Appendix A / peer: 20 complex points, at most 80 draws, at least 5 non-trivial.
EQUIV_POINTS = 20
EQUIV_MAX_DRAWS = 80
EQUIV_MIN_NONTRIVIAL = 5
#: Peer: up to 300 real points for an inequality counterexample.
CX_REAL_POINTS = 300
_TOL = 1e-9
_MARGIN = 1e-7


class Undefined(Exception):
    """A value is undefined or non-finite at the sample point."""


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


# --------------------------------------------------------------------------- compiler

def _finite(v: complex | float) -> complex | float:
    if isinstance(v, complex):
        if not (math.isfinite(v.real) and math.isfinite(v.imag)):
            raise Undefined("non-finite")
    elif not math.isfinite(v):
        raise Undefined("non-finite")
    return v


def _num(x: sp.Basic) -> float:
    try:
        if x.is_Integer:
            return float(int(x))
        if x.is_Rational:
            return float(Fraction(int(x.p), int(x.q)))
        return float(x)
    except OverflowError as exc:
        raise Undefined("number too large") from exc


def _real_pow(b: float, e: sp.Basic, ev: float) -> float:
    if e.is_Integer:
        n = int(e)
        if b == 0 and n < 0:
            raise Undefined("0 to a negative power")
        return b ** n
    if e.is_Rational:
        p, q = int(e.p), int(e.q)
        if b >= 0:
            if b == 0 and p < 0:
                raise Undefined("0 to a negative power")
            return b ** (p / q)
        if q % 2 == 1:
            r = (-b) ** (p / q)
            return -r if p % 2 else r
        raise Undefined("even root of a negative number")
    if b > 0:
        return b ** ev
    if b == 0 and ev > 0:
        return 0.0
    if abs(ev - round(ev)) < 1e-12:
        n = int(round(ev))
        if b == 0 and n < 0:
            raise Undefined("0 to a negative power")
        return b ** n
    raise Undefined("non-integer power of a non-positive number")


_REAL_F = {
    sp.sin: math.sin, sp.cos: math.cos, sp.tan: math.tan, sp.sinh: math.sinh,
    sp.cosh: math.cosh, sp.tanh: math.tanh, sp.atan: math.atan, sp.exp: math.exp,
}
_CPLX_F = {
    sp.sin: cmath.sin, sp.cos: cmath.cos, sp.tan: cmath.tan, sp.sinh: cmath.sinh,
    sp.cosh: cmath.cosh, sp.tanh: cmath.tanh, sp.atan: cmath.atan, sp.exp: cmath.exp,
    sp.asin: cmath.asin, sp.acos: cmath.acos,
}


def compile_expr(expr: sp.Basic, mode: str, log_base: float | None = None) -> Callable[[dict], complex | float]:
    """Compile ``expr`` into a closure ``f(env) -> value``.

    Args:
        expr: a SymPy expression built by :mod:`recipematch.cas.grammar`.
        mode: ``"real"`` or ``"complex"``.
        log_base: ``None`` for natural logarithms; ``10.0`` to read every one-argument
            ``log`` as base 10 (the ambiguous ``\\log`` reading).

    Returns:
        A function of ``env``, a dict from ``Symbol`` (and applied undefined functions) to
        numbers; it raises :class:`Undefined` where the value is undefined or non-finite.

    Raises:
        Undefined: at compile time for node types outside the whitelist (``gcd``, ``Mod``,
            ellipses …), so such relations are never "verified".
    """
    real = mode == "real"

    def comp(e: sp.Basic) -> Callable[[dict], complex | float]:
        if e is DEGREE:
            v = math.pi / 180
            return lambda env: v
        if e.is_Symbol:
            def sym(env, e=e):
                try:
                    return env[e]
                except KeyError as exc:
                    raise Undefined(f"no value for {e}") from exc
            return sym
        if isinstance(e, AppliedUndef):
            if e.func.__name__ in _OPAQUE_FUNCS:
                raise Undefined(f"no numeric rule for {e.func.__name__}")

            def app(env, e=e):
                try:
                    return env[e]
                except KeyError as exc:
                    raise Undefined(f"no value for {e}") from exc
            return app
        if e.is_Number:
            if e in (sp.zoo, sp.nan, sp.oo, -sp.oo):
                raise Undefined("infinite constant")
            v = _num(e)
            return lambda env: v
        if e is sp.pi:
            return lambda env: math.pi
        if e is sp.E:
            return lambda env: math.e
        if e.is_Add:
            fs = [comp(a) for a in e.args]
            return lambda env: _finite(sum(f(env) for f in fs))
        if e.is_Mul:
            fs = [comp(a) for a in e.args]

            def mul(env):
                r = 1.0
                for f in fs:
                    r = r * f(env)
                return _finite(r)
            return mul
        if e.is_Pow:
            fb = comp(e.base)
            ex = e.exp
            fe = comp(ex)
            if real:
                def rpow(env):
                    b = fb(env)
                    try:
                        return _finite(_real_pow(b, ex, fe(env) if not ex.is_Rational else 0.0))
                    except (OverflowError, ZeroDivisionError) as exc:
                        raise Undefined("overflow") from exc
                return rpow

            def cpow(env):
                b = complex(fb(env))
                try:
                    if ex.is_Integer:
                        n = int(ex)
                        if b == 0 and n < 0:
                            raise Undefined("0 to a negative power")
                        return _finite(b ** n)
                    if b == 0:
                        ev = complex(fe(env))
                        if ev.real > 0:
                            return 0j
                        raise Undefined("0 to a non-positive power")
                    return _finite(b ** complex(fe(env)))
                except (OverflowError, ZeroDivisionError) as exc:
                    raise Undefined("overflow") from exc
            return cpow
        if isinstance(e, sp.Abs):
            fa = comp(e.args[0])
            return lambda env: abs(fa(env))
        if isinstance(e, sp.log):
            if len(e.args) != 1:
                raise Undefined("two-argument log")
            fa = comp(e.args[0])
            scale = 1.0 if log_base is None else 1.0 / math.log(log_base)
            if real:
                def rlog(env):
                    x = fa(env)
                    if x <= 0:
                        raise Undefined("log of a non-positive number")
                    return math.log(x) * scale
                return rlog

            def clog(env):
                x = complex(fa(env))
                if x == 0:
                    raise Undefined("log 0")
                return cmath.log(x) * scale
            return clog
        for table in ((_REAL_F if real else _CPLX_F),):
            for cls, fn in table.items():
                if isinstance(e, cls):
                    fa = comp(e.args[0])

                    def f1(env, fa=fa, fn=fn):
                        try:
                            return _finite(fn(fa(env)))
                        except (OverflowError, ValueError, ZeroDivisionError) as exc:
                            raise Undefined("function domain") from exc
                    return f1
        if real and isinstance(e, (sp.asin, sp.acos)):
            fa = comp(e.args[0])
            fn = math.asin if isinstance(e, sp.asin) else math.acos

            def fr(env):
                x = fa(env)
                if not -1 <= x <= 1:
                    raise Undefined("arcsin/arccos domain")
                return fn(x)
            return fr
        if isinstance(e, (sp.cot, sp.sec, sp.csc)):
            fa = comp(e.args[0])
            base = {sp.cot: (math.tan, cmath.tan), sp.sec: (math.cos, cmath.cos),
                    sp.csc: (math.sin, cmath.sin)}[type(e)][0 if real else 1]

            def recip(env):
                d = base(fa(env))
                if abs(d) < 1e-300:
                    raise Undefined("pole")
                return _finite(1 / d)
            return recip
        if isinstance(e, (sp.floor, sp.ceiling, sp.frac, sp.Max, sp.Min)):
            fs = [comp(a) for a in e.args]
            op = {sp.floor: lambda xs: float(math.floor(xs[0])), sp.ceiling: lambda xs: float(math.ceil(xs[0])),
                  sp.frac: lambda xs: xs[0] - math.floor(xs[0]), sp.Max: max, sp.Min: min}[type(e)]

            def realonly(env):
                xs = []
                for f in fs:
                    x = f(env)
                    if isinstance(x, complex):
                        if abs(x.imag) > 1e-12:
                            raise Undefined("real-only function at a complex point")
                        x = x.real
                    xs.append(x)
                return op(xs)
            return realonly
        if isinstance(e, (sp.factorial, sp.binomial)):
            fs = [comp(a) for a in e.args]

            def intfun(env):
                xs = []
                for f in fs:
                    x = f(env)
                    if isinstance(x, complex):
                        if abs(x.imag) > 1e-12:
                            raise Undefined("factorial at a complex point")
                        x = x.real
                    if abs(x - round(x)) > 1e-9 or round(x) < 0 or round(x) > 170:
                        raise Undefined("factorial/binomial needs a small non-negative integer")
                    xs.append(int(round(x)))
                if len(xs) == 1:
                    return float(math.factorial(xs[0]))
                return float(math.comb(xs[0], xs[1])) if xs[1] <= xs[0] else 0.0
            return intfun
        raise Undefined(f"no numeric rule for {type(e).__name__}")

    return comp(expr)


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
            return format(v.numerator / v.denominator, f".{k}f").rstrip("0").rstrip(".") if k else str(v.numerator)
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


def check_equivalent(a: Rel, b: Rel, *, rng: random.Random, domains: dict[str, Domain] | None = None,
                     n_points: int = EQUIV_POINTS, max_draws: int = EQUIV_MAX_DRAWS,
                     min_nontrivial: int = EQUIV_MIN_NONTRIVIAL) -> dict:
    """Numeric equivalence of two relations (or two expressions), Appendix A.

    Rule: links are compared in order, or in reverse order (a mirrored chain). Two
    equations are equivalent when ``g_b = k·g_a`` with one constant ``k ≠ 0`` at every
    point (``g = L − R``); two inequalities when both are strict or both non-strict and
    ``g_b = k·g_a`` with one real ``k > 0`` (``g`` oriented so that the relation reads
    ``g > 0`` or ``g ≥ 0``; a mirrored inequality gives ``k = 1``); two expressions when
    ``k = 1``. The test ``|g_b − k·g_a| ≤ 1e-9·(1 + |g_a| + |g_b|)`` must hold at
    ``n_points`` valid points drawn from at most ``max_draws``, with at least
    ``min_nontrivial`` points where ``g_a ≠ 0``. Points are complex (real and imaginary
    parts in [−2.5, 2.5]) unless a real-only function appears (floor, max, factorial …),
    then real over the domains (integers for integer variables).

    Returns:
        ``{"verdict": "equivalent" | "not_equivalent" | "unknown", "points_tested": int,
        "k": str | None, "max_dev": float | None, "counterexample": dict | None,
        "reason": str | None, "method": str}``. ``not_equivalent`` comes with the point
        where the residuals are not proportional.
    """
    method = "residual_ratio_k"
    if bool(a.ops) != bool(b.ops):
        return _verdict("unknown", 0, None, None, None, "a relation against an expression", method)
    if len(a.ops) != len(b.ops):
        return _verdict("not_equivalent", 0, None, None, None, "different number of links", method)
    if "!=" in a.ops or "!=" in b.ops:
        return _verdict("unknown", 0, None, None, None, "\\neq relations are not compared", method)
    if not a.ops:
        forms_a = [("expr", a.sides[0])]
        orders = [[("expr", b.sides[0])]]
    else:
        forms_a = _residual_forms(a)
        fb = _residual_forms(b)
        orders = [fb] if len(fb) == 1 else [fb, fb[::-1]]
    first = None
    for forms_b in orders:
        if [f[0] for f in forms_a] != [f[0] for f in forms_b]:
            r = _verdict("not_equivalent", 0, None, None, None,
                         "different relation types (strictness or equality)", method)
        else:
            r = _check_forms(a, b, forms_a, forms_b, rng, domains, n_points, max_draws, min_nontrivial)
        if r["verdict"] == "equivalent":
            return r
        if first is None:
            first = r
    return first


def _check_forms(a: Rel, b: Rel, forms_a, forms_b, rng, domains, n_points, max_draws, min_nontrivial) -> dict:
    method = "residual_ratio_k"
    rel_list = [a, b]
    variables = sorted(set(relation_variables(a)) | set(relation_variables(b)), key=_sort_key)
    real = _is_real_only(rel_list)
    try:
        fa = [compile_expr(g, "real" if real else "complex") for _, g in forms_a]
        fb = [compile_expr(g, "real" if real else "complex") for _, g in forms_b]
    except Undefined as exc:
        return _verdict("unknown", 0, None, None, None, f"no numeric evaluation: {exc}", method)
    ks: list[complex | None] = [None] * len(fa)
    valid = 0
    nontrivial = 0
    max_dev = 0.0
    draws = 0
    has_atoms = any(isinstance(v, AppliedUndef) for v in variables)
    while valid < n_points and draws < max_draws:
        draws += 1
        try:
            env = _complex_point(rng, variables, real, domains)
        except Undefined as exc:
            return _verdict("unknown", valid, None, None, None, str(exc), method)
        if has_atoms and not _atoms_consistent(rel_list, env):
            continue
        try:
            vals = [(f(env), g(env)) for f, g in zip(fa, fb)]
        except (Undefined, ZeroDivisionError, OverflowError, ValueError, TypeError):
            continue
        point_nontrivial = False
        bad = None
        for idx, (ga, gb) in enumerate(vals):
            scale = 1 + abs(ga) + abs(gb)
            if abs(ga) > _TOL * scale:
                point_nontrivial = True
                if ks[idx] is None:
                    if forms_a[idx][0] == "expr":
                        ks[idx] = 1
                    else:
                        kk = complex(gb / ga)
                        ks[idx] = kk
                        if forms_a[idx][0] in ("gt", "ge") and (abs(kk.imag) > 1e-9 * (1 + abs(kk)) or kk.real <= 0):
                            bad = (env, ga, gb, "inequality residuals are not positively proportional")
                            break
                        if abs(kk) < 1e-12:
                            bad = (env, ga, gb, "rewrite residual vanishes where the original does not")
                            break
            if ks[idx] is None:
                if abs(gb) > _TOL * scale:
                    bad = (env, ga, gb, "rewrite residual nonzero where the original is zero")
                    break
                continue
            dev = abs(gb - ks[idx] * ga) / scale
            if dev > _TOL:
                bad = (env, ga, gb, "residuals not proportional")
                break
            max_dev = max(max_dev, dev)
        if bad is not None:
            env, ga, gb, why = bad
            cx = {"point": {_var_name(v): _fmt(env[v]) for v in variables},
                  "a": _fmt(ga), "b": _fmt(gb), "method": "residual_mismatch"}
            return _verdict("not_equivalent", valid + 1, _k_str(ks), None, cx, why, method)
        valid += 1
        if point_nontrivial:
            nontrivial += 1
    if valid < n_points:
        return _verdict("unknown", valid, _k_str(ks), max_dev, None,
                        f"only {valid} valid points in {draws} draws (need {n_points})", method)
    if nontrivial < min_nontrivial:
        return _verdict("unknown", valid, _k_str(ks), max_dev, None,
                        f"only {nontrivial} non-trivial points (need {min_nontrivial})", method)
    return _verdict("equivalent", valid, _k_str(ks), max_dev, None, None,
                    method + ("_real" if real else "_complex"))


def _k_str(ks: list) -> str | None:
    out = []
    for k in ks:
        if k is None:
            out.append("1")
            continue
        kc = complex(k)
        if abs(kc.imag) < 1e-9 * (1 + abs(kc)):
            r = kc.real
            fr = Fraction(r).limit_denominator(1000)
            out.append(str(fr) if abs(float(fr) - r) < 1e-9 * (1 + abs(r)) else f"{r:.12g}")
        else:
            out.append(_fmt(kc))
    return ",".join(out) if out else None


def _verdict(verdict, points, k, max_dev, cx, reason, method) -> dict:
    return {"verdict": verdict, "points_tested": int(points), "k": k,
            "max_dev": None if max_dev is None else float(f"{max_dev:.3g}"),
            "counterexample": cx, "reason": reason, "method": method}


# --------------------------------------------------------------------------- counterexamples

def _truth(forms: list[tuple[str, Callable, Callable]], env: dict) -> tuple[bool, list[float]] | None:
    """Truth value of a relation at a real point, or ``None`` when a side is undefined or a
    link is too close to its boundary to decide: ``|P − Q| ≤ 1e-7·(1 + |P| + |Q|)`` counts
    as equality for ``=`` and as undecided for ``<``, ``≤``, ``>``, ``≥`` (margin rule)."""
    vals = []
    truth = True
    for kind, fp, fq in forms:
        try:
            p = fp(env)
            q = fq(env)
        except (Undefined, ZeroDivisionError, OverflowError, ValueError, TypeError):
            return None
        if isinstance(p, complex) or isinstance(q, complex):
            return None
        g = p - q
        vals.append(g)
        if abs(g) <= _MARGIN * (1 + abs(p) + abs(q)):
            if kind == "eq":
                continue
            return None
        if kind == "eq":
            truth = False
        elif kind in ("gt", "ge") and g < 0:
            truth = False
    return truth, vals


def _side_values(rel: Rel, env: dict, log_base: float | None) -> list[str]:
    out = []
    for s in rel.sides:
        try:
            out.append(f"{float(compile_expr(s, 'real', log_base)(env)):.10g}")
        except (Undefined, TypeError, ValueError, OverflowError, ZeroDivisionError):
            out.append("undefined")
    return out


def find_counterexample(orig: Rel, edited: Rel, *, rng: random.Random,
                        domains: dict[str, Domain] | None = None, flags: frozenset[str] = frozenset(),
                        max_points: int = CX_REAL_POINTS, solve_tries: int = 6) -> dict | None:
    """A real point where ``orig`` and ``edited`` have different truth values (SPEC §3.1).

    Methods, in order:

    * ``real_sample_truth_disagreement``: up to ``max_points`` real points over the
      domains; both relations must be defined and decided (no link within the margin
      of its boundary) and their truth values must differ;
    * ``solve_one_side_check_other`` (equations): the other unknowns get sample values,
      one unknown is solved from one relation (a univariate polynomial after clearing
      denominators; real roots in its domain only), and the other relation must fail
      there by a clear margin. Both directions are tried.

    A bare ``e`` is pinned to Euler's number, and a ``\\log`` without a base must give the
    disagreement under both the natural and the base-10 reading. Relations with ``i``
    used as an unknown in an equation are refused (imaginary unit or index?).

    Returns:
        ``{"point": {name: value}, "orig": {"holds": bool, "sides": [...]}, "edited": {...},
        "method": str}`` with exact decimal or rational strings where the point is exact,
        or ``None`` when no counterexample was found (the negative is then dropped).
    """
    if "i_symbol" in flags and "=" in orig.ops:
        return None
    variables = sorted(set(relation_variables(orig)) | set(relation_variables(edited)), key=_sort_key)
    e_sym = sp.Symbol("e")
    bases: list[float | None] = [None, 10.0] if "log_base_ambiguous" in flags else [None]
    try:
        compiled = {lb: (_compile_forms(orig, lb), _compile_forms(edited, lb)) for lb in bases}
    except Undefined:
        return None
    has_atoms = any(isinstance(v, AppliedUndef) for v in variables)

    def judge(env: dict) -> tuple[bool, bool] | None:
        res = None
        for lb in bases:
            fo, fe = compiled[lb]
            to = _truth(fo, env)
            te = _truth(fe, env)
            if to is None or te is None or to[0] == te[0]:
                return None
            if res is not None and res != (to[0], te[0]):
                return None
            res = (to[0], te[0])
        return res

    def pack(env: dict, truths: tuple[bool, bool], method: str, exact: dict) -> dict:
        point = {}
        for v in variables:
            val = exact.get(v, env[v])
            point[_var_name(v)] = _fmt(val) if not isinstance(val, str) else val
        if e_sym in env and e_sym in variables:
            point["e"] = "E"
        return {"point": point,
                "orig": {"holds": truths[0], "sides": _side_values(orig, env, bases[0])},
                "edited": {"holds": truths[1], "sides": _side_values(edited, env, bases[0])},
                "method": method}

    # 1) sampling
    for _ in range(max_points):
        exact: dict = {}
        env: dict = {}
        try:
            for v in variables:
                if v == e_sym:
                    env[v] = math.e
                    continue
                f = _draw_real(rng, (domains or {}).get(_var_name(v)))
                exact[v] = f
                env[v] = float(f)
        except Undefined:
            return None
        if has_atoms and not _atoms_consistent([orig, edited], env):
            continue
        t = judge(env)
        if t is not None:
            return pack(env, t, "real_sample_truth_disagreement", exact)
    # 2) equations: solve one, check the other
    if len(orig.ops) == 1 and orig.ops[0] == "=" and edited.ops == ("=",):
        for first, second in ((orig, edited), (edited, orig)):
            r = _solve_and_check(first, second, variables, rng, domains, judge, solve_tries, e_sym)
            if r is not None:
                env, exact = r
                t = judge(env)
                if t is not None:
                    return pack(env, t, "solve_one_side_check_other", exact)
    return None


def _compile_forms(rel: Rel, log_base: float | None) -> list[tuple[str, Callable, Callable]]:
    return [(k, compile_expr(p, "real", log_base), compile_expr(q, "real", log_base))
            for k, p, q in _oriented_links(rel)]


def _solve_and_check(first: Rel, second: Rel, variables, rng, domains, judge, tries, e_sym):
    g = (first.sides[0] - first.sides[1]).xreplace({DEGREE: sp.pi / 180})
    for p in g.atoms(sp.Pow):
        # a degree above 6 is never solved; a large exponent would be expanded (2010)
        if not p.base.is_number and not (p.exp.is_Rational and abs(int(p.exp.p)) <= 12 and int(p.exp.q) <= 12):
            return None
    subs_atoms = {}
    for v in variables:
        if isinstance(v, AppliedUndef):
            subs_atoms[v] = sp.Symbol("__atom_" + str(len(subs_atoms)))
    g_sym = g.xreplace(subs_atoms) if subs_atoms else g
    cand = []
    for v in variables:
        if v == e_sym:
            continue
        vs = subs_atoms.get(v, v)
        try:
            if not g_sym.has(vs):
                continue
            num = sp.together(g_sym).as_numer_denom()[0] if g_sym.has(sp.Pow) else g_sym
            if not num.is_polynomial(vs):
                continue
            deg = sp.degree(num, vs)
        except (sp.PolynomialError, TypeError, ValueError, NotImplementedError, RecursionError):
            continue
        if deg is None or deg < 1 or deg > 6:
            continue
        cand.append((int(deg), _var_name(v), v, vs))
    cand.sort(key=lambda c: (c[0], c[1]))
    for attempt in range(tries):
        if not cand:
            return None
        deg, _, v, vs = cand[attempt % len(cand)]
        exact: dict = {}
        env: dict = {}
        sub_exact = {}
        for w in variables:
            if w == v:
                continue
            if w == e_sym:
                env[w] = math.e
                sub_exact[subs_atoms.get(w, w)] = sp.E
                continue
            try:
                f = _draw_real(rng, (domains or {}).get(_var_name(w)))
            except Undefined:
                return None
            exact[w] = f
            env[w] = float(f)
            sub_exact[subs_atoms.get(w, w)] = sp.Rational(f.numerator, f.denominator)
        try:
            uni = sp.together(g_sym.xreplace(sub_exact))
            num = uni.as_numer_denom()[0]
            poly = sp.Poly(num, vs)
            if poly.degree() < 1 or poly.degree() > 6:
                continue
            if poly.degree() == 1:
                c1, c0 = poly.all_coeffs()
                if not (c1.is_number and c0.is_number) or c1 == 0:
                    continue
                roots = [(-c0 / c1)]
            else:
                roots = [r for r in poly.nroots(n=15) if abs(sp.im(r)) < 1e-12]
        except (sp.PolynomialError, TypeError, ValueError, NotImplementedError, ZeroDivisionError,
                sp.polys.polyerrors.PolynomialError, RecursionError):
            continue
        dom = (domains or {}).get(_var_name(v))
        for r in roots:
            try:
                rv = float(sp.re(r))
            except (TypeError, ValueError, OverflowError):
                continue
            if dom is not None and not dom.contains(rv):
                continue
            env2 = dict(env)
            env2[v] = rv
            ex2 = dict(exact)
            if r.is_Rational:
                ex2[v] = Fraction(int(r.p), int(r.q))
            else:
                ex2[v] = f"{rv:.15g}"
            if any(isinstance(x, AppliedUndef) for x in variables) and not _atoms_consistent([first, second], env2):
                continue
            if judge(env2) is not None:
                return env2, ex2
    return None
