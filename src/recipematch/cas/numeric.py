"""Numeric evaluation, domains, equivalence checks and counterexamples (paper, Appendix A: the verified arm).

No ``lambdify`` (it ``exec``s generated code): one compiler (:func:`_compile`) turns a
SymPy tree into nested Python closures over a fixed set of node types, in a number domain
(:class:`_Numbers`): floats (:func:`compile_expr`), exact rationals (:func:`exact_compile`,
rational functions only) or ``mpmath`` at 50 digits (:func:`_mp_compile`), each in one of
two modes:

* ``complex``: principal branches (``cmath``), used for the equivalence of positives
  ("original − rewrite is zero at ≥ 20 random complex points", Appendix A) when the
  relations are not rational functions (rational ones are checked in exact arithmetic),
  each pass re-checked at 50 digits;
* ``real``: real-valued semantics for truth values of inequalities and counterexamples
  (odd roots of negatives are real, even roots and logarithms of non-positives are
  undefined, factorial and binomial need non-negative integers). Every counterexample is
  re-checked exactly or at 50 digits before it is kept (:func:`recheck_counterexample`).

Notation: two-point names are unsigned lengths (``PC`` is ``CP``) unless the problem
declares vectors or directed segments (the rule in :mod:`recipematch.cas.grammar`).

Explicit skip rule: a sample point where any side of either relation is undefined,
non-finite, or (for counterexamples) too close to its boundary to decide, is skipped and
not counted. Too few valid points gives ``unknown``/"not verified", never "equivalent".

Constants: the degree sign is ``pi/180``; a bare ``e`` is sampled freely for
equivalence (an identity in ``e`` holds at Euler's number too) and pinned to Euler's
number for counterexamples (valid under both readings); ``\\log`` without a base must
give the counterexample under both the natural and the base-10 reading.
"""

from __future__ import annotations

import abc
import cmath
import math
import random
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import mpmath
import sympy as sp
from mpmath.libmp.libhyper import NoConvergence
from sympy.core.function import AppliedUndef

from recipematch.cas.grammar import _OPAQUE_FUNCS, DEGREE, REL_OPS, segment_points, unsigned_segment_name

__all__ = [
    "Undefined",
    "Domain",
    "Rel",
    "compile_expr",
    "exact_compile",
    "relation_variables",
    "check_equivalent",
    "domain_conditions",
    "domain_difference",
    "find_counterexample",
    "recheck_counterexample",
    "unsigned_lengths",
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
#: Solve attempts (one unknown solved, the others fixed) for an equation's counterexample.
CX_SOLVE_TRIES = 12
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

class _NotExact(Exception):
    """The expression is not a rational function with rational coefficients (or is too big
    to evaluate exactly)."""


#: Exact evaluation refuses integer exponents above this and numeric powers above
#: :data:`_EXACT_MAX_BITS` bits (the grammar already refuses numbers above 100,000 bits).
_EXACT_MAX_EXP = 4096
_EXACT_MAX_BITS = 200_000
#: Working precision (decimal digits) of the high-precision confirmation and its
#: relative tolerance.
_MP_DPS = 50
_MP_TOL = mpmath.mpf(10) ** -35


def _bits(q: Fraction) -> int:
    return max(abs(q.numerator).bit_length(), q.denominator.bit_length(), 1)


def _finite(v: complex | float) -> complex | float:
    if isinstance(v, complex):
        if not (math.isfinite(v.real) and math.isfinite(v.imag)):
            raise Undefined("non-finite")
    elif not math.isfinite(v):
        raise Undefined("non-finite")
    return v


def _mp_finite(v):
    if not mpmath.isfinite(v):
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


class _Numbers(abc.ABC):
    """A number domain of the expression compiler (:func:`_compile`): how its values are
    made, checked and combined. Three domains share the one compiler:

    * :class:`_FloatNumbers`: Python floats (``real``) or complex numbers (principal
      branches, ``cmath``);
    * :class:`_MpNumbers`: ``mpmath`` numbers at the caller's working precision (call the
      closure inside ``mpmath.workdps``), with the same real/complex semantics;
    * :class:`_ExactNumbers`: exact ``Fraction`` values for rational functions with
      rational coefficients; every other node raises :class:`_NotExact` at compile time.

    Attributes every domain sets: ``real`` (real-valued semantics), ``one``, ``zero``,
    ``nint_tol`` (how close to an integer counts as one), ``imag_tol`` (how small an
    imaginary part a real-only function ignores), ``pole_tol`` (``|d|`` below which ``1/d``
    is a pole), ``funcs`` (SymPy function class → numeric function).
    """

    real = True
    exact = False

    def admit(self, e: sp.Basic) -> None:
        """Raise :class:`_NotExact` for a node the domain cannot evaluate (exact only)."""

    def finite(self, v):
        return v

    @abc.abstractmethod
    def fsum(self, vals):
        """Sum of domain values (each domain's own exact or compensated rule)."""

    def value(self, v):
        """An ``env`` value converted into the domain."""
        return v


class _FloatNumbers(_Numbers):
    def __init__(self, real: bool, log_base: float | None):
        self.real = real
        self.one, self.zero, self.czero = 1.0, 0.0, 0j
        self.nint_tol, self.imag_tol, self.int_tol, self.pole_tol = 1e-12, 1e-12, 1e-9, 1e-300
        self.log_scale = 1.0 if log_base is None else 1.0 / math.log(log_base)
        self.funcs = _REAL_F if real else _CPLX_F
        self.recip_base = {sp.cot: math.tan, sp.sec: math.cos, sp.csc: math.sin} if real else \
            {sp.cot: cmath.tan, sp.sec: cmath.cos, sp.csc: cmath.sin}
        self.asin, self.acos = math.asin, math.acos
        self.floor, self.ceil = (lambda x: float(math.floor(x))), (lambda x: float(math.ceil(x)))
        self.to_complex = complex
        self.rlog, self.clog = math.log, cmath.log

    finite = staticmethod(_finite)
    fsum = staticmethod(sum)

    def is_complex(self, v) -> bool:
        return isinstance(v, complex)

    def number(self, e: sp.Basic):
        v = _num(e)
        return lambda env: v

    def degree(self):
        v = math.pi / 180
        return lambda env: v

    def pi(self):
        return lambda env: math.pi

    def euler(self):
        return lambda env: math.e

    def ratio(self, p: int, q: int):
        return p / q

    def nint(self, x) -> int:
        return int(round(x))

    def from_int(self, n: int):
        return float(n)


class _MpNumbers(_Numbers):
    def __init__(self, real: bool, log_base: float | None = None):
        self.real = real
        self.one, self.zero, self.czero = mpmath.mpf(1), mpmath.mpf(0), mpmath.mpc(0)
        self.nint_tol = mpmath.mpf(10) ** -40
        self.imag_tol = self.int_tol = mpmath.mpf(10) ** -30
        self.pole_tol = mpmath.mpf(10) ** -300
        self.log_scale = None
        self.funcs = _MP_REAL_F if real else _MP_CPLX_F
        self.recip_base = {sp.cot: mpmath.tan, sp.sec: mpmath.cos, sp.csc: mpmath.sin}
        self.asin, self.acos = mpmath.asin, mpmath.acos
        self.floor, self.ceil = mpmath.floor, mpmath.ceil
        self.to_complex = mpmath.mpc
        if log_base is None:
            self.rlog = self.clog = mpmath.log
        else:
            self.rlog = self.clog = lambda x: mpmath.log(x) / mpmath.log(log_base)

    finite = staticmethod(_mp_finite)

    def fsum(self, vals):
        return mpmath.fsum(vals)

    def is_complex(self, v) -> bool:
        return isinstance(v, mpmath.mpc)

    def value(self, v):
        if isinstance(v, complex):
            return mpmath.mpc(v.real, v.imag)
        if isinstance(v, Fraction):
            return mpmath.mpf(v.numerator) / v.denominator
        return mpmath.mpf(v)

    def number(self, e: sp.Basic):
        if e.is_Rational:
            p, q = int(e.p), int(e.q)
            if max(p.bit_length(), q.bit_length()) > _EXACT_MAX_BITS:
                raise Undefined("number too large")
            return lambda env: mpmath.mpf(p) / q
        return lambda env: mpmath.mpf(str(e))

    def degree(self):
        return lambda env: mpmath.pi / 180

    def pi(self):
        return lambda env: +mpmath.pi

    def euler(self):
        return lambda env: +mpmath.e

    def ratio(self, p: int, q: int):
        return mpmath.mpf(p) / q

    def nint(self, x) -> int:
        return int(mpmath.nint(x))

    def from_int(self, n: int):
        return mpmath.mpf(n)


class _ExactNumbers(_Numbers):
    exact = True
    one, zero = Fraction(1), Fraction(0)

    def admit(self, e: sp.Basic) -> None:
        if e.is_Symbol:
            if e is DEGREE or e.name.startswith("\\ldots"):
                raise _NotExact("constant symbol")
            return
        if e.is_Rational or e.is_Add or e.is_Mul:
            return
        if e.is_Pow and e.exp.is_Integer:
            if abs(int(e.exp)) > _EXACT_MAX_EXP:
                raise _NotExact("exponent too large")
            return
        raise _NotExact(type(e).__name__)

    def fsum(self, vals):
        return sum(vals, Fraction(0))

    def number(self, e: sp.Basic):
        v = Fraction(int(e.p), int(e.q))
        return lambda env: v


def _real_pow(ar: _Numbers, b, e: sp.Basic, ev):
    """``b ** e`` with real semantics: odd roots of negatives are real, even roots of
    negatives and non-integer powers of non-positive numbers are undefined."""
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
            return b ** ar.ratio(p, q)
        if q % 2 == 1:
            r = (-b) ** ar.ratio(p, q)
            return -r if p % 2 else r
        raise Undefined("even root of a negative number")
    if b > 0:
        return b ** ev
    if b == 0 and ev > 0:
        return ar.zero
    if abs(ev - ar.nint(ev)) < ar.nint_tol:
        n = ar.nint(ev)
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
_MP_REAL_F = {
    sp.sin: mpmath.sin, sp.cos: mpmath.cos, sp.tan: mpmath.tan, sp.sinh: mpmath.sinh,
    sp.cosh: mpmath.cosh, sp.tanh: mpmath.tanh, sp.atan: mpmath.atan, sp.exp: mpmath.exp,
}
_MP_CPLX_F = {**_MP_REAL_F, sp.asin: mpmath.asin, sp.acos: mpmath.acos}
_ARITH_ERRORS = (OverflowError, ValueError, ZeroDivisionError)


def _compile(expr: sp.Basic, ar: _Numbers) -> Callable[[dict], object]:
    """The one expression compiler: ``expr`` becomes nested closures ``f(env) -> value``
    computed in the number domain ``ar`` (:class:`_Numbers`). The node whitelist, the
    real/complex semantics and the errors are those of :func:`compile_expr`; the exact
    domain admits only its subset (:func:`exact_compile`)."""
    fin = ar.finite
    fsum = ar.fsum
    conv = ar.value
    real = ar.real

    plain = type(ar).value is _Numbers.value  # env values are already in the domain

    def lookup(e):
        if plain:
            def sym(env, e=e):
                try:
                    return env[e]
                except KeyError as exc:
                    raise Undefined(f"no value for {e}") from exc
            return sym

        def conv_sym(env, e=e):
            try:
                v = env[e]
            except KeyError as exc:
                raise Undefined(f"no value for {e}") from exc
            return conv(v)
        return conv_sym

    def comp(e: sp.Basic):
        ar.admit(e)
        if e is DEGREE:
            return ar.degree()
        if e.is_Symbol:
            return lookup(e)
        if isinstance(e, AppliedUndef):
            if e.func.__name__ in _OPAQUE_FUNCS:
                raise Undefined(f"no numeric rule for {e.func.__name__}")
            return lookup(e)
        if e.is_Number:
            if e in (sp.zoo, sp.nan, sp.oo, -sp.oo):
                raise Undefined("infinite constant")
            return ar.number(e)
        if e is sp.pi:
            return ar.pi()
        if e is sp.E:
            return ar.euler()
        if e.is_Add:
            fs = [comp(a) for a in e.args]
            return lambda env: fin(fsum(f(env) for f in fs))
        if e.is_Mul:
            fs = [comp(a) for a in e.args]
            one = ar.one

            def mul(env):
                r = one
                for f in fs:
                    r = r * f(env)
                return fin(r)
            return mul
        if e.is_Pow:
            return power(e)
        if isinstance(e, sp.Abs):
            fa = comp(e.args[0])
            return lambda env: abs(fa(env))
        if isinstance(e, sp.log):
            return logarithm(e)
        for cls, fn in ar.funcs.items():
            if isinstance(e, cls):
                fa = comp(e.args[0])

                def f1(env, fa=fa, fn=fn):
                    try:
                        return fin(fn(fa(env)))
                    except _ARITH_ERRORS as exc:
                        raise Undefined("function domain") from exc
                return f1
        if real and isinstance(e, (sp.asin, sp.acos)):
            fa = comp(e.args[0])
            fn = ar.asin if isinstance(e, sp.asin) else ar.acos

            def fr(env):
                x = fa(env)
                if ar.is_complex(x) or not -1 <= x <= 1:
                    raise Undefined("arcsin/arccos domain")
                return fn(x)
            return fr
        if isinstance(e, (sp.cot, sp.sec, sp.csc)):
            fa = comp(e.args[0])
            base = ar.recip_base[type(e)]
            tol = ar.pole_tol

            def recip(env):
                d = base(fa(env))
                if abs(d) < tol:
                    raise Undefined("pole")
                return fin(1 / d)
            return recip
        if isinstance(e, (sp.floor, sp.ceiling, sp.frac, sp.Max, sp.Min)):
            fs = [comp(a) for a in e.args]
            op = {sp.floor: lambda xs: ar.floor(xs[0]), sp.ceiling: lambda xs: ar.ceil(xs[0]),
                  sp.frac: lambda xs: xs[0] - ar.floor(xs[0]), sp.Max: max, sp.Min: min}[type(e)]

            def realonly(env):
                return op([real_value(f(env), "real-only function at a complex point") for f in fs])
            return realonly
        if isinstance(e, (sp.factorial, sp.binomial)):
            fs = [comp(a) for a in e.args]

            def intfun(env):
                xs = []
                for f in fs:
                    x = real_value(f(env), "factorial at a complex point")
                    n = ar.nint(x)
                    if abs(x - n) > ar.int_tol or n < 0 or n > 170:
                        raise Undefined("factorial/binomial needs a small non-negative integer")
                    xs.append(n)
                if len(xs) == 1:
                    return ar.from_int(math.factorial(xs[0]))
                return ar.from_int(math.comb(xs[0], xs[1]) if xs[1] <= xs[0] else 0)
            return intfun
        raise Undefined(f"no numeric rule for {type(e).__name__}")

    def real_value(x, why: str):
        if ar.is_complex(x):
            if abs(x.imag) > ar.imag_tol:
                raise Undefined(why)
            x = x.real
        return x

    def power(e: sp.Basic):
        ex = e.exp
        if ar.exact:
            n = int(ex)
            if e.base.is_Rational:
                b = Fraction(int(e.base.p), int(e.base.q))
                if abs(n) * _bits(b) > _EXACT_MAX_BITS:
                    raise _NotExact("number too large")
                if b == 0 and n < 0:
                    raise Undefined("0 to a negative power")
                v = b ** n
                return lambda env: v
            fb = comp(e.base)

            def pw(env):
                b = fb(env)
                if b == 0 and n < 0:
                    raise Undefined("0 to a negative power")
                return b ** n
            return pw
        if isinstance(ar, _MpNumbers) and ex.is_Rational and abs(int(ex.p)) > _EXACT_MAX_EXP * 16:
            raise Undefined("exponent too large")
        fb = comp(e.base)
        fe = comp(ex)
        to_c = ar.to_complex
        if real:
            def rpow(env):
                b = fb(env)
                if ar.is_complex(b):
                    raise Undefined("complex value in real mode")
                try:
                    return fin(_real_pow(ar, b, ex, fe(env) if not ex.is_Rational else None))
                except (OverflowError, ZeroDivisionError) as exc:
                    raise Undefined("overflow") from exc
            return rpow

        def cpow(env):
            b = to_c(fb(env))
            try:
                if ex.is_Integer:
                    n = int(ex)
                    if b == 0 and n < 0:
                        raise Undefined("0 to a negative power")
                    return fin(b ** n)
                ev = to_c(fe(env))
                if b == 0:
                    if ev.real > 0:
                        return ar.czero
                    raise Undefined("0 to a non-positive power")
                return fin(b ** ev)
            except (OverflowError, ZeroDivisionError) as exc:
                raise Undefined("overflow") from exc
        return cpow

    def logarithm(e: sp.Basic):
        if len(e.args) != 1:
            raise Undefined("two-argument log")
        fa = comp(e.args[0])
        scale = ar.log_scale
        if real:
            rlog = ar.rlog

            def rl(env):
                x = fa(env)
                if ar.is_complex(x) or x <= 0:
                    raise Undefined("log of a non-positive number")
                return rlog(x) if scale is None else rlog(x) * scale
            return rl
        clog, to_c = ar.clog, ar.to_complex

        def cl(env):
            x = to_c(fa(env))
            if x == 0:
                raise Undefined("log 0")
            return clog(x) if scale is None else clog(x) * scale
        return cl

    return comp(expr)


def compile_expr(expr: sp.Basic, mode: str, log_base: float | None = None) -> Callable[[dict], complex | float]:
    """Compile ``expr`` into a closure ``f(env) -> value`` in floating point.

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
    return _compile(expr, _FloatNumbers(mode == "real", log_base))


def exact_compile(expr: sp.Basic) -> Callable[[dict], Fraction]:
    """Compile a rational function with rational coefficients into a closure
    ``f(env) -> Fraction`` over exact rational values (``env``: Symbol -> Fraction).

    Only ``Integer``/``Rational`` numbers, plain symbols (not the degree sign, not an
    ellipsis), ``Add``, ``Mul`` and ``Pow`` with an integer exponent of at most
    :data:`_EXACT_MAX_EXP` in absolute value are accepted.

    Raises:
        _NotExact: at compile time for anything else (functions, ``pi``, roots, applied
            functions …).
        Undefined: at evaluation time for a division by zero or a missing value.
    """
    return _compile(expr, _ExactNumbers())


def _mp_compile(expr: sp.Basic, real: bool, log_base: float | None = None) -> Callable[[dict], object]:
    """:func:`compile_expr` with ``mpmath`` numbers (same node types and the same
    real/complex semantics); call the closure inside ``mpmath.workdps``. Numeric powers
    and exponents whose exact value would be huge raise :class:`Undefined` at compile
    time (nothing is expanded)."""
    return _compile(expr, _MpNumbers(real, log_base))


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


def _implied_domains(rels: list[Rel], domains: dict[str, Domain] | None) -> dict[str, Domain] | None:
    """``domains`` plus what the relations themselves imply: a bare unknown under a
    factorial or a binomial coefficient is a non-negative integer (the only values where
    the expression is defined), so it is sampled there whatever the caller passed."""
    out = dict(domains or {})
    changed = False
    for rel in rels:
        for side in rel.sides:
            for f in side.atoms(sp.factorial, sp.binomial):
                for arg in f.args:
                    if isinstance(arg, sp.Symbol) and arg is not DEGREE:
                        d = out.get(arg.name, Domain())
                        if d.integer and d.lo is not None and d.lo >= 0:
                            continue
                        lo = Fraction(0) if d.lo is None or d.lo < 0 else d.lo
                        out[arg.name] = Domain(lo=lo, lo_strict=d.lo_strict and d.lo == lo,
                                               hi=d.hi, hi_strict=d.hi_strict, integer=True)
                        changed = True
    return out if (changed or domains) else domains


def check_equivalent(a: Rel, b: Rel, *, rng: random.Random, domains: dict[str, Domain] | None = None,
                     n_points: int = EQUIV_POINTS, max_draws: int = EQUIV_MAX_DRAWS,
                     min_nontrivial: int = EQUIV_MIN_NONTRIVIAL, directed_segments: bool = False) -> dict:
    """Equivalence of two relations (or two expressions), Appendix A, made exact where
    the algebra allows.

    Rule: links are compared in order, or in reverse order (a mirrored chain). Two
    equations are equivalent when ``g_b = k·g_a`` with one constant ``k ≠ 0`` (``g = L −
    R``); two inequalities when both are strict or both non-strict and ``g_b = k·g_a`` with
    one real ``k > 0`` (``g`` oriented so that the relation reads ``g > 0`` or ``g ≥ 0``; a
    mirrored inequality gives ``k = 1``); two expressions when ``k = 1``. And in every
    case both must have the same domain (:func:`domain_difference`): a rewrite that drops
    or adds a restriction (``\\frac{x^2-1}{x-1} = 2`` against ``x + 1 = 2``, which differ
    at ``x = 1``) is ``unknown``, never ``equivalent``.

    How the proportionality is tested:

    1. **Exact** (every residual a rational function with rational coefficients, the
       grammar's constants being exact rationals): ``n_points`` exact rational points
       (three decimals, |v| ≤ 12, no domain restriction: an identity of rational functions
       holds everywhere or almost nowhere) with exact ``Fraction`` arithmetic; ``k`` is the
       exact ratio at the first point where ``g_a ≠ 0`` and any point with ``g_b ≠ k·g_a``
       is a counterexample (``not_equivalent``; a constant shift of ``10^{-15}`` is as
       visible as one of 1). When all points agree, ``cancel(together(g_b − k·g_a)) = 0``
       proves it for small residuals (method ``exact_symbolic``); larger ones rest on the
       points (``exact_rational_points``; a nonzero rational function vanishes at 20
       random points of a 24,001-value grid with negligible probability).
    2. **Numeric fallback** (functions, roots, ``π``, applied functions): floating point at
       ``n_points`` valid points drawn from at most ``max_draws`` with the test
       ``|g_b − k·g_a| ≤ 1e-9·(1 + |g_a| + |g_b|)`` and at least ``min_nontrivial`` points
       where ``g_a ≠ 0``; points are complex (real and imaginary parts in [−2.5, 2.5])
       unless a real-only function appears (floor, max, factorial …), then real over the
       domains. A pass is then confirmed, not trusted: when ``k`` is a simple rational
       ``k_q``, ``expand(g_b − k_q·g_a)`` that is a nonzero constant is a counterexample
       (a constant shift the float test cannot see next to large terms), and the
       proportionality is re-checked at up to 8 of the points at 50 significant digits
       (``|g_b − k·g_a| ≤ 1e-35·(1 + |g_a| + |g_b|)``, ``k`` re-estimated at that precision);
       fewer than 3 confirmed points give ``unknown``.

    Too few valid points gives ``unknown``, never ``equivalent``.

    Domains: each unknown is sampled in its domain where the check samples reals (the
    caller's ``domains``, e.g. the problem's, plus the non-negative integers for a bare
    unknown under a factorial or binomial, :func:`_implied_domains`, so ``n! = 2^a - 2^b``
    is tested at integer ``n``). Unless ``directed_segments`` (the problem declares vectors
    or directed segments), two-point names are unsigned lengths (:func:`unsigned_lengths`).

    Returns:
        ``{"verdict": "equivalent" | "not_equivalent" | "unknown", "points_tested": int,
        "k": str | None, "max_dev": float | None, "counterexample": dict | None,
        "reason": str | None, "method": str}``. ``k`` (one real value per link,
        comma-separated: an exact fraction such as ``"1/2"`` or a decimal) is given only
        with ``equivalent`` and is ``None`` otherwise (there is no constant when the
        residuals are not proportional). ``not_equivalent`` comes with the point where the
        residuals are not proportional (``method`` of the counterexample:
        ``residual_mismatch``, or ``constant_shift`` without a point).
    """
    method = "residual_ratio_k"
    if not directed_segments:
        a, b, domains = unsigned_lengths(a), unsigned_lengths(b), _unsigned_domains(domains)
    domains = _implied_domains([a, b], domains)
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
            why = domain_difference(a, b)
            if why is not None:
                return _verdict("unknown", r["points_tested"], None, None, None,
                                "residuals proportional but " + why, r["method"])
            return r
        if first is None:
            first = r
    return first


def _check_forms(a: Rel, b: Rel, forms_a, forms_b, rng, domains, n_points, max_draws, min_nontrivial) -> dict:
    variables = sorted(set(relation_variables(a)) | set(relation_variables(b)), key=_sort_key)
    if all(v.is_Symbol for v in variables):
        try:
            ea = [exact_compile(g) for _, g in forms_a]
            eb = [exact_compile(g) for _, g in forms_b]
        except _NotExact:
            pass
        else:
            return _check_forms_exact(forms_a, forms_b, ea, eb, variables, rng, n_points, max_draws,
                                      min_nontrivial)
    return _check_forms_numeric(a, b, forms_a, forms_b, variables, rng, domains, n_points, max_draws,
                                min_nontrivial)


def _draw_exact(rng: random.Random) -> Fraction:
    """An exact sample for identity testing: three decimals, |v| ≤ 3.5 (70%) or ≤ 12."""
    scale = 3500 if rng.random() < 0.7 else 12000
    return Fraction(rng.randint(-scale, scale), 1000)


def _check_forms_exact(forms_a, forms_b, ea, eb, variables, rng, n_points, max_draws, min_nontrivial) -> dict:
    method = "exact_rational"
    ks: list[Fraction | None] = [Fraction(1) if kind == "expr" else None for kind, _ in forms_a]
    valid = nontrivial = draws = 0
    while valid < n_points and draws < max_draws:
        draws += 1
        env = {v: _draw_exact(rng) for v in variables}
        try:
            vals = [(f(env), g(env)) for f, g in zip(ea, eb)]
        except (Undefined, ZeroDivisionError):
            continue
        bad = None
        point_nontrivial = False
        for idx, (ga, gb) in enumerate(vals):
            kind = forms_a[idx][0]
            if ga != 0:
                point_nontrivial = True
                if ks[idx] is None:
                    kk = gb / ga
                    if kind in ("gt", "ge") and kk <= 0:
                        bad = (ga, gb, "inequality residuals are not positively proportional")
                        break
                    if kk == 0:
                        bad = (ga, gb, "rewrite residual vanishes where the original does not")
                        break
                    ks[idx] = kk
            if ks[idx] is None:
                if gb != 0:
                    bad = (ga, gb, "rewrite residual nonzero where the original is zero")
                    break
                continue
            if gb != ks[idx] * ga:
                bad = (ga, gb, "residuals not proportional (exact rational arithmetic)")
                break
        if bad is not None:
            ga, gb, why = bad
            cx = {"point": {_var_name(v): _fmt(env[v]) for v in variables},
                  "a": _fmt(ga), "b": _fmt(gb), "method": "residual_mismatch"}
            return _verdict("not_equivalent", valid + 1, None, None, cx, why, method)
        valid += 1
        nontrivial += point_nontrivial
    if valid < n_points:
        return _verdict("unknown", valid, None, None, None,
                        f"only {valid} valid points in {draws} draws (need {n_points})", method)
    if nontrivial < min_nontrivial:
        return _verdict("unknown", valid, None, None, None,
                        f"only {nontrivial} non-trivial points (need {min_nontrivial})", method)
    proof = _symbolic_proportional(forms_a, forms_b, ks)
    if proof is False:
        return _verdict("unknown", valid, None, None, None,
                        "exact points agree but the symbolic difference is not zero", method)
    return _verdict("equivalent", valid, _k_str(ks), 0.0, None, None,
                    "exact_symbolic" if proof else "exact_rational_points")


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


def _symbolic_proportional(forms_a, forms_b, ks) -> bool | None:
    """``cancel(together(g_b − k·g_a)) == 0`` for every link: True (proved), False (a
    nonzero difference) or None (too large to try)."""
    diffs = []
    for (_, ga), (_, gb), k in zip(forms_a, forms_b, ks):
        kk = sp.Integer(1) if k is None else sp.Rational(k.numerator, k.denominator)
        diff = gb - kk * ga
        if sp.count_ops(diff) > 60 or _big_power(diff):
            return None
        diffs.append(diff)
    for diff in diffs:
        try:
            if sp.cancel(sp.together(diff)) != 0:
                return False
        except _SYMBOLIC_ERRORS:
            return None
    return True


def _nice_rational(k: complex | None) -> Fraction | None:
    """``k`` as a fraction with a denominator ≤ 1000 when it is one to 1e-9, else None."""
    if k is None:
        return Fraction(1)
    kc = complex(k)
    if abs(kc.imag) > 1e-9 * (1 + abs(kc)):
        return None
    fr = Fraction(kc.real).limit_denominator(1000)
    return fr if abs(float(fr) - kc.real) <= 1e-9 * (1 + abs(kc.real)) else None


def _constant_shift(forms_a, forms_b, ks) -> str | None:
    """When every ``k`` is a simple rational ``k_q`` and some ``expand(g_b − k_q·g_a)`` is a
    nonzero constant, the residuals differ by that constant: its description, else None."""
    kq = [_nice_rational(k) for k in ks]
    if any(k is None for k in kq):
        return None
    for (_, ga), (_, gb), k in zip(forms_a, forms_b, kq):
        diff = (gb - sp.Rational(k.numerator, k.denominator) * ga).xreplace({DEGREE: sp.pi / 180})
        if sp.count_ops(diff) > 80 or _big_power(diff):
            continue
        try:
            d = sp.expand(diff)
        except _SYMBOLIC_ERRORS:
            continue
        if d == 0 or d.free_symbols or d.atoms(AppliedUndef):
            continue
        try:
            with mpmath.workdps(_MP_DPS):
                v = _mp_compile(d, real=False)({})
                nonzero = abs(v) > mpmath.mpf(10) ** -(_MP_DPS - 5)
        except (Undefined, ValueError, TypeError, ZeroDivisionError):
            continue
        if nonzero:
            return f"residuals differ by the constant {sp.sstr(d)[:60]} (k = {k})"
    return None


def _check_forms_numeric(a: Rel, b: Rel, forms_a, forms_b, variables, rng, domains, n_points, max_draws,
                         min_nontrivial) -> dict:
    method = "residual_ratio_k"
    rel_list = [a, b]
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
    envs: list[dict] = []
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
            return _verdict("not_equivalent", valid + 1, None, None, cx, why, method)
        valid += 1
        envs.append(env)
        if point_nontrivial:
            nontrivial += 1
    if valid < n_points:
        return _verdict("unknown", valid, None, max_dev, None,
                        f"only {valid} valid points in {draws} draws (need {n_points})", method)
    if nontrivial < min_nontrivial:
        return _verdict("unknown", valid, None, max_dev, None,
                        f"only {nontrivial} non-trivial points (need {min_nontrivial})", method)
    shift = _constant_shift(forms_a, forms_b, ks)
    if shift is not None:
        return _verdict("not_equivalent", valid, None, max_dev,
                        {"point": None, "a": None, "b": None, "method": "constant_shift"}, shift, method)
    confirm = _confirm_high_precision(forms_a, forms_b, variables, envs, real, method, valid)
    if confirm is not None:
        return confirm
    if _k_str(ks) is None:
        return _verdict("unknown", valid, None, max_dev, None, "the constant k is not real", method)
    return _verdict("equivalent", valid, _k_str(ks), max_dev, None, None,
                    method + ("_real" if real else "_complex"))


#: Points re-checked at high precision, and how many must be usable.
_MP_POINTS = 8
_MP_MIN_POINTS = 3


def _confirm_high_precision(forms_a, forms_b, variables, envs, real, method, valid) -> dict | None:
    """Re-check proportionality at :data:`_MP_DPS` digits at up to :data:`_MP_POINTS` of
    the float test's points; None when confirmed, else the verdict to return."""
    with mpmath.workdps(_MP_DPS):
        try:
            ma = [_mp_compile(g, real) for _, g in forms_a]
            mb = [_mp_compile(g, real) for _, g in forms_b]
        except Undefined as exc:
            return _verdict("unknown", valid, None, None, None,
                            f"no high-precision evaluation: {exc}", method)
        ks: list = [mpmath.mpf(1) if kind == "expr" else None for kind, _ in forms_a]
        tiny = mpmath.mpf(10) ** -(_MP_DPS - 10)
        confirmed = 0
        for env in envs[:_MP_POINTS]:
            try:
                vals = [(f(env), g(env)) for f, g in zip(ma, mb)]
            except (Undefined, ZeroDivisionError, ValueError, TypeError, OverflowError):
                continue
            for idx, (ga, gb) in enumerate(vals):
                scale = 1 + abs(ga) + abs(gb)
                if ks[idx] is None and abs(ga) > tiny * scale:
                    ks[idx] = gb / ga
                if ks[idx] is None:
                    dev = abs(gb) / scale
                else:
                    dev = abs(gb - ks[idx] * ga) / scale
                if dev > _MP_TOL:
                    cx = {"point": {_var_name(v): _fmt(env[v]) for v in variables},
                          "a": mpmath.nstr(ga, 17), "b": mpmath.nstr(gb, 17), "method": "residual_mismatch"}
                    return _verdict("not_equivalent", valid, None, None, cx,
                                    f"residuals not proportional at {_MP_DPS} digits "
                                    f"(deviation {mpmath.nstr(dev, 3)})", method)
            confirmed += 1
    if confirmed < _MP_MIN_POINTS:
        return _verdict("unknown", valid, None, None, None,
                        f"only {confirmed} points confirmed at {_MP_DPS} digits (need {_MP_MIN_POINTS})", method)
    return None


def _k_str(ks: list) -> str | None:
    """The constants as a comma-separated string of real values (exact fractions where
    known), or None when one of them is not real."""
    out = []
    for k in ks:
        if k is None:
            out.append("1")
            continue
        if isinstance(k, Fraction):
            out.append(str(k))
            continue
        kc = complex(k)
        if abs(kc.imag) > 1e-9 * (1 + abs(kc)):
            return None
        r = kc.real
        fr = Fraction(r).limit_denominator(1000)
        out.append(str(fr) if abs(float(fr) - r) < 1e-9 * (1 + abs(r)) else f"{r:.12g}")
    return ",".join(out) if out else None


def _verdict(verdict, points, k, max_dev, cx, reason, method) -> dict:
    return {"verdict": verdict, "points_tested": int(points), "k": k,
            "max_dev": None if max_dev is None else float(f"{max_dev:.3g}"),
            "counterexample": cx, "reason": reason, "method": method}


# --------------------------------------------------------------------------- domains

def _rebuild(e: sp.Basic) -> sp.Basic:
    """The same tree rebuilt with evaluation, so that a non-canonical tree SymPy can produce
    (``Abs(Abs(x))``) compares equal to its canonical form."""
    if not e.args or isinstance(e, AppliedUndef):
        return e
    return e.func(*[_rebuild(a) for a in e.args])


def _canon(e: sp.Basic) -> sp.Basic:
    try:
        if sp.count_ops(e) <= 60 and not _big_power(e):
            return sp.expand(_rebuild(e))
    except _SYMBOLIC_ERRORS:
        pass
    return e


def _zero_factors(base: sp.Basic) -> set[sp.Basic]:
    """The irreducible factors of ``base`` (sign and content removed): its zero set is the
    union of theirs, whatever the grouping (``x^2 - 1`` against ``(x-1)(x+1)``, ``|x+1|``
    or ``\\sqrt{x+1}`` against ``x+1``)."""
    if base.is_number:
        return set()
    if base.is_Mul:
        return set().union(*(_zero_factors(a) for a in base.args))
    if isinstance(base, sp.Abs):
        return _zero_factors(base.args[0])
    if base.is_Pow and base.exp.is_number and base.exp.is_extended_positive:
        return _zero_factors(base.base)
    try:
        if sp.count_ops(base) <= 60 and not _big_power(base):
            # a rational function vanishes where its numerator does (the poles of its
            # denominator are conditions of their own, from the inner negative powers)
            num = sp.together(base).as_numer_denom()[0]
            _, facs = sp.factor_list(num)
            out = set()
            for f, m in facs:
                if f.is_number or m <= 0:
                    continue
                out.add(-f if f.could_extract_minus_sign() else f)
            return out
    except _SYMBOLIC_ERRORS:
        pass
    return {_canon(base)}


def domain_conditions(rel: Rel) -> frozenset:
    """Where the sides of a relation are defined, as a set of conditions: ``("nonzero",
    f)`` for every irreducible factor of a denominator, ``("power", base, kind)`` for a
    root or a real power of a non-constant base, ``("log", arg)``, ``("cos_pole", arg)``
    (``\\tan``, ``\\sec``), ``("sin_pole", arg)`` (``\\cot``, ``\\csc``), ``("arc", arg)``
    and ``("integer", args)`` (factorial, binomial); arguments in expanded form."""
    conds: set = set()
    for side in rel.sides:
        for node in sp.preorder_traversal(side):
            if node.is_Pow:
                base, ex = node.args
                if base.is_number:
                    continue
                if ex.is_number:
                    if ex.is_extended_negative:
                        conds |= {("nonzero", f) for f in _zero_factors(base)}
                    if not ex.is_Integer and not base.is_extended_nonnegative:
                        kind = ("even_root" if int(ex.q) % 2 == 0 else "odd_root") if ex.is_Rational else "real"
                        conds.add(("power", _canon(base), kind))
                else:
                    conds.add(("power", _canon(base), "variable"))
            elif isinstance(node, (sp.log, sp.tan, sp.sec, sp.cot, sp.csc, sp.asin, sp.acos)):
                arg = node.args[0]
                if arg.is_number:
                    continue
                tag = {sp.log: "log", sp.tan: "cos_pole", sp.sec: "cos_pole", sp.cot: "sin_pole",
                       sp.csc: "sin_pole", sp.asin: "arc", sp.acos: "arc"}[type(node)]
                conds.add((tag, _canon(arg)))
            elif isinstance(node, (sp.factorial, sp.binomial)) and not all(x.is_number for x in node.args):
                conds.add(("integer", tuple(_canon(x) for x in node.args)))
    return frozenset(conds)


def _describe_condition(c: tuple) -> str:
    tag = c[0]
    if tag == "nonzero":
        return f"{sp.sstr(c[1])} = 0"
    if tag == "power":
        return f"the base {sp.sstr(c[1])} of a {c[2].replace('_', ' ')} power is out of range"
    if tag == "integer":
        return "a factorial/binomial argument is not a non-negative integer"
    return f"the argument {sp.sstr(c[1])} of {tag.replace('_', ' ')} is out of range"


def domain_difference(a: Rel, b: Rel) -> str | None:
    """None when ``a`` and ``b`` have the same domain conditions
    (:func:`domain_conditions`), else a sentence saying where one is undefined and the
    other is not (a removable singularity such as ``x = 1`` in ``\\frac{x^2-1}{x-1}``)."""
    try:
        ca, cb = domain_conditions(a), domain_conditions(b)
    except _SYMBOLIC_ERRORS:
        return "their domains could not be compared"
    if ca == cb:
        return None
    only_a = sorted(ca - cb, key=str)
    only_b = sorted(cb - ca, key=str)
    if only_a:
        return f"the domains differ: A is undefined where {_describe_condition(only_a[0])}, B is not"
    return f"the domains differ: B is undefined where {_describe_condition(only_b[0])}, A is not"


# --------------------------------------------------------------------------- counterexamples

def _truth(forms: list[tuple[str, Callable, Callable]], env: dict,
           strict: bool = False) -> tuple[bool, list[float]] | None:
    """Truth value of a relation at a real point, or ``None`` when a side is undefined or a
    link is too close to its boundary to decide: ``|P − Q| ≤ 1e-7·(1 + |P| + |Q|)`` counts
    as equality for ``=`` and as undecided for ``<``, ``≤``, ``>``, ``≥`` (margin rule;
    with ``strict``, as undecided for ``=`` too)."""
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
            if kind == "eq" and not strict:
                continue
            return None
        if kind == "eq":
            truth = False
        elif kind in ("gt", "ge") and g < 0:
            truth = False
    return truth, vals


#: Counterexample points are decided exactly only for relations whose powers of unknowns
#: have exponents up to this (``a^{2014}`` at 300 points would cost seconds in fractions).
_CX_EXACT_MAX_EXP = 64


def _truth_exact(forms: list[tuple[str, Callable, Callable]], env: dict) -> bool | None:
    """Exact truth value of a rational relation at an exact rational point (no margin: a
    residual of ``10^{-10}`` is as nonzero as one of 1), or ``None`` where a side is
    undefined."""
    truth = True
    for kind, fp, fq in forms:
        try:
            g = fp(env) - fq(env)
        except (Undefined, ZeroDivisionError):
            return None
        if kind == "eq":
            truth = truth and g == 0
        elif kind == "ne":
            truth = truth and g != 0
        elif kind == "gt":
            truth = truth and g > 0
        else:
            truth = truth and g >= 0
    return truth


def _exact_forms(rel: Rel) -> list[tuple[str, Callable, Callable]] | None:
    try:
        return [(k, exact_compile(p), exact_compile(q)) for k, p, q in _oriented_links(rel)]
    except _NotExact:
        return None


def _side_values_exact(rel: Rel, env: dict) -> list[str]:
    out = []
    for s in rel.sides:
        try:
            out.append(_fmt(exact_compile(s)(env)))
        except (_NotExact, Undefined, ZeroDivisionError):
            out.append("undefined")
    return out


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
                        max_points: int = CX_REAL_POINTS, solve_tries: int = CX_SOLVE_TRIES,
                        directed_segments: bool = False, stats: dict | None = None) -> dict | None:
    """A real point where ``orig`` and ``edited`` have different truth values (paper,
    Appendix A: the verified arm).

    Methods, in order (the first point that survives the re-check below wins):

    * ``real_sample_truth_disagreement``: up to ``max_points`` real points over the
      domains; both relations must be defined and decided (no link within the margin
      of its boundary) and their truth values must differ;
    * ``simple_point_truth_disagreement``: targeted exact points: every unknown at the
      same small integer or simple fraction (``x = y = z = 2/5``), one unknown over the
      simple values with the others at 1, 2, 1/2 or −1, and random tuples of simple values
      (each inside its domain) — narrow regions and exponent equations (``2^x = 8``);
    * ``solve_one_side_check_other`` (equations): the other unknowns get sample values
      (alternately random and simple rationals), one unknown is solved from one relation
      (a univariate polynomial after clearing denominators; real roots in its domain
      only), and the other relation must fail there by a clear margin. Both directions,
      ``solve_tries`` attempts each;
    * ``boundary_root_scan``: with the other unknowns fixed at several rationals, one
      unknown is scanned over its domain for sign changes of each link's residual
      ``P − Q`` (any function, not only polynomials: ``\\sin``, exponents); each root
      (at most :data:`_SCAN_MAX_ROOTS` per search) is located by bisection; an inequality
      is tested at exact rationals just on either side of it (the boundary of its
      solution set), an equation at a simple fraction near it and at the root itself,
      refined at 60 digits.

    Exact decisions: when both relations are rational functions with rational
    coefficients (no ``e``, no function, no root, exponents of unknowns at most
    :data:`_CX_EXACT_MAX_EXP`) and the point is exact (a sampled
    decimal, or a root of a linear equation), the truth values are computed in exact
    rational arithmetic with no margin, and the sides are printed exactly, so
    ``x = 3.0000000001`` against ``x = 3`` is refuted at ``x = 3``. Otherwise the
    floating-point margin rule of :func:`_truth` applies.

    No false counterexample: every point found is re-checked before it is returned
    (:func:`recheck_counterexample`: exact rational arithmetic, or ``mpmath`` at 50
    digits); a point that fails the re-check is discarded, counted in
    ``stats["discarded"]`` when ``stats`` is given, and the search goes on.

    A bare ``e`` is pinned to Euler's number, and a ``\\log`` without a base must give the
    disagreement under both the natural and the base-10 reading. Relations with ``i``
    used as an unknown in an equation are refused (imaginary unit or index?). Unless
    ``directed_segments``, two-point names are unsigned lengths (:func:`unsigned_lengths`).

    Returns:
        ``{"point": {name: value}, "orig": {"holds": bool, "sides": [...]}, "edited": {...},
        "method": str}`` with exact decimal or rational strings where the point is exact
        (a root refined at 60 digits is written with 40 significant digits; a segment is
        named as ``orig`` writes it, ``PC`` even where ``edited`` writes ``CP``), or ``None``
        when no counterexample was found (the negative is then dropped).
    """
    if "i_symbol" in flags and "=" in orig.ops:
        return None
    written: dict[str, str] = {}
    if not directed_segments:
        written = _written_names(orig, edited)
        orig, edited, domains = unsigned_lengths(orig), unsigned_lengths(edited), _unsigned_domains(domains)
    variables = sorted(set(relation_variables(orig)) | set(relation_variables(edited)), key=_sort_key)
    e_sym = sp.Symbol("e")
    bases: list[float | None] = [None, 10.0] if "log_base_ambiguous" in flags else [None]
    has_atoms = any(isinstance(v, AppliedUndef) for v in variables)
    # rational relations at an exact rational point are decided exactly (no margin)
    exact_forms = None
    if all(v.is_Symbol and v != e_sym for v in variables) and not any(
            _big_power(s, _CX_EXACT_MAX_EXP) for r in (orig, edited) for s in r.sides):
        fo_x, fe_x = _exact_forms(orig), _exact_forms(edited)
        if fo_x is not None and fe_x is not None:
            exact_forms = (fo_x, fe_x)
    try:
        compiled = {lb: (_compile_forms(orig, lb), _compile_forms(edited, lb)) for lb in bases}
    except Undefined:
        if exact_forms is None:
            return None
        compiled = None  # a constant too large for a float: exact points only

    def exact_point(exact: dict | None) -> dict | None:
        if exact_forms is None or exact is None:
            return None
        if not all(isinstance(exact.get(v), Fraction) for v in variables):
            return None
        return exact

    def judge(env: dict, exact: dict | None = None) -> tuple[bool, bool] | None:
        xp = exact_point(exact)
        if xp is not None:
            if compiled is not None and len(bases) == 1:
                # floats first (fast): both relations defined and decided with a clear margin
                # and agreeing means no counterexample here; only other points are decided
                # exactly (a float slip can then only lose a counterexample, never make one)
                fo, fe = compiled[bases[0]]
                to_f, te_f = _truth(fo, env, strict=True), _truth(fe, env, strict=True)
                if to_f is not None and te_f is not None and to_f[0] == te_f[0]:
                    return None
            to = _truth_exact(exact_forms[0], xp)
            te = _truth_exact(exact_forms[1], xp)
            if to is None or te is None or to == te:
                return None
            return to, te
        if compiled is None:
            return None
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
            name = _var_name(v)
            point[written.get(name, name)] = _fmt(val) if not isinstance(val, str) else val
        if e_sym in env and e_sym in variables:
            point["e"] = "E"
        xp = exact_point(exact)
        if xp is not None:
            sides_o, sides_e = _side_values_exact(orig, xp), _side_values_exact(edited, xp)
        else:
            sides_o, sides_e = _side_values(orig, env, bases[0]), _side_values(edited, env, bases[0])
        return {"point": point,
                "orig": {"holds": truths[0], "sides": sides_o},
                "edited": {"holds": truths[1], "sides": sides_e},
                "method": method}

    def accept(env: dict, exact: dict, method: str) -> dict | None:
        """The packed counterexample when the point refutes and survives the re-check."""
        if has_atoms and not _atoms_consistent([orig, edited], env):
            return None
        t = judge(env, exact)
        if t is None:
            return None
        cx = pack(env, t, method, exact)
        if _recheck(orig, edited, cx, variables, bases, written):
            return cx
        if stats is not None:
            stats["discarded"] = stats.get("discarded", 0) + 1
        return None

    def from_exact(exact: dict) -> dict:
        env = {v: float(x) for v, x in exact.items()}
        if e_sym in variables:
            env[e_sym] = math.e
        return env

    free = [v for v in variables if v != e_sym]
    doms = [(domains or {}).get(_var_name(v)) for v in free]
    # 1) sampling
    for _ in range(max_points):
        exact: dict = {}
        try:
            for v, dom in zip(free, doms):
                exact[v] = _draw_real(rng, dom)
        except Undefined:
            return None
        cx = accept(from_exact(exact), exact, "real_sample_truth_disagreement")
        if cx is not None:
            return cx
    # 2) targeted simple points
    for exact in _simple_points(free, doms, rng):
        cx = accept(from_exact(exact), exact, "simple_point_truth_disagreement")
        if cx is not None:
            return cx
    # 3) equations: solve one, check the other
    if len(orig.ops) == 1 and orig.ops[0] == "=" and edited.ops == ("=",):
        for first, second in ((orig, edited), (edited, orig)):
            cx = _solve_and_check(first, second, variables, rng, domains, judge, accept, solve_tries, e_sym)
            if cx is not None:
                return cx
    # 4) roots of each residual along one unknown: equations at the root, inequalities
    #    at rationals on either side of it
    if compiled is not None and free and not has_atoms:
        cx = _boundary_scan(orig, edited, free, doms, compiled[bases[0]], judge, accept, e_sym in variables)
        if cx is not None:
            return cx
    return None


#: Simple values for targeted points: small integers and fractions with small denominators.
_SIMPLE = tuple(sorted({Fraction(p, q) for q in (1, 2, 3, 4, 5) for p in range(-4 * q, 4 * q + 1)}
                       | {Fraction(k, 10) for k in range(-10, 11)} | {Fraction(k) for k in range(-10, 11)},
                       key=lambda f: (f.denominator, abs(f), f < 0)))
_ANCHORS = (Fraction(1), Fraction(2), Fraction(1, 2), Fraction(-1))
#: Random tuples of simple values tried per search.
_SIMPLE_RANDOM = 200


def _simple_values(dom: Domain | None) -> list[Fraction]:
    """The simple values inside ``dom`` (shifted onto a bound far from 0 when none is)."""
    vals = [f for f in _SIMPLE if dom is None or dom.contains_exact(f)]
    if not vals and dom is not None:
        for base in (dom.lo, dom.hi):
            if base is not None:
                sign = 1 if base is dom.lo else -1
                vals += [base + sign * f for f in _SIMPLE if f >= 0 and dom.contains_exact(base + sign * f)]
    return vals


def _simple_points(free: list, doms: list, rng: random.Random):
    """Targeted exact points (see :func:`find_counterexample`), at most a few hundred."""
    if not free:
        return
    values = [_simple_values(d) for d in doms]
    if any(not v for v in values):
        return
    seen: set[tuple] = set()

    def emit(vals: tuple):
        if vals in seen:
            return None
        seen.add(vals)
        return dict(zip(free, vals))

    shared = set(values[0]).intersection(*values[1:])
    for c in _SIMPLE:
        if c in shared:
            p = emit((c,) * len(free))
            if p is not None:
                yield p
    if len(free) <= 4:
        for i in range(len(free)):
            for a in _ANCHORS:
                others = [a if a in values[j] else values[j][0] for j in range(len(free))]
                for c in values[i][:40]:
                    others[i] = c
                    p = emit(tuple(others))
                    if p is not None:
                        yield p
    for _ in range(_SIMPLE_RANDOM):
        p = emit(tuple(rng.choice(v) for v in values))
        if p is not None:
            yield p


#: Root scan: grid of the scanned unknown, assignments of the others, significant digits
#: of a stored root.
_SCAN_GRID = tuple(Fraction(k, 4) for k in range(-48, 49))
_SCAN_ASSIGNMENTS = 2
_SCAN_MAX_ROOTS = 12
_ROOT_DIGITS = 40


def _boundary_scan(orig: Rel, edited: Rel, free: list, doms: list, compiled, judge, accept,
                   has_e: bool) -> dict | None:
    """``boundary_root_scan`` of :func:`find_counterexample`."""
    residuals = []
    for rel, forms in ((orig, compiled[0]), (edited, compiled[1])):
        for (kind, p, q), (_k, fp, fq) in zip(_oriented_links(rel), forms):
            residuals.append((kind, p - q, fp, fq))
    values = [_simple_values(d) for d in doms]
    if any(not v for v in values):
        return None
    budget = _SCAN_MAX_ROOTS
    for i, v in enumerate(free):
        dom = doms[i]
        grid = [x for x in _SCAN_GRID if dom is None or dom.contains_exact(x)]
        if dom is not None and dom.integer:
            continue  # integers: the simple points already cover the small ones
        if len(grid) < 2:
            continue
        for a in range(_SCAN_ASSIGNMENTS):
            base = {w: (_ANCHORS[a] if _ANCHORS[a] in values[j] else values[j][min(a, len(values[j]) - 1)])
                    for j, w in enumerate(free) if j != i}
            env = {w: float(x) for w, x in base.items()}
            if has_e:
                env[sp.Symbol("e")] = math.e
            for kind, g, fp, fq in residuals:
                prev = None
                for x in grid:
                    env[v] = float(x)
                    try:
                        y = fp(env) - fq(env)
                    except (Undefined, ZeroDivisionError, OverflowError, ValueError, TypeError):
                        prev = None
                        continue
                    if isinstance(y, complex):
                        prev = None
                        continue
                    if prev is not None and (prev[1] < 0) != (y < 0):
                        budget -= 1
                        if budget < 0:
                            return None
                        cx = _try_root(g, kind, v, prev[0], x, base, dict(env), dom, judge, accept, has_e,
                                       lambda en, fp=fp, fq=fq: fp(en) - fq(en))
                        if cx is not None:
                            return cx
                    prev = (x, y)
    return None


def _try_root(g: sp.Expr, kind: str, v, lo: Fraction, hi: Fraction, base: dict, env: dict, dom,
              judge, accept, has_e: bool, fg: Callable[[dict], float]) -> dict | None:
    """Locate a sign change of ``g`` (compiled: ``fg``) in ``[lo, hi]`` with the others at
    ``base`` by float bisection and test rationals on either side of the root (and, for an
    equation, a simple fraction near it and the root itself, refined at 60 digits only
    when the float root refutes)."""
    a, b = float(lo), float(hi)
    try:
        env[v] = a
        ya = fg(env)
        for _ in range(60):
            m = (a + b) / 2
            env[v] = m
            ym = fg(env)
            if isinstance(ym, complex):
                return None
            if (ym < 0) == (ya < 0):
                a, ya = m, ym
            else:
                b = m
    except (Undefined, ZeroDivisionError, OverflowError, ValueError, TypeError):
        return None
    root = (a + b) / 2
    rq = Fraction(root)
    cands: list[Fraction | str] = [rq.limit_denominator(1000)]
    if kind != "eq":
        for k in range(1, 7):
            step = Fraction(1, 10 ** k)
            below = Fraction(math.floor(rq / step)) * step
            cands += [below, below + step]
    for c in cands:
        if dom is not None and not dom.contains_exact(c):
            continue
        exact = dict(base)
        exact[v] = c
        env2 = dict(env)
        env2[v] = float(c)
        cx = accept(env2, exact, "boundary_root_scan")
        if cx is not None:
            return cx
    if kind != "eq" or (dom is not None and not dom.contains(root)):
        return None
    env2 = dict(env)
    env2[v] = root
    exact = dict(base)
    exact[v] = f"{root:.17g}"
    if judge(env2, exact) is None:
        return None
    precise = _refine_root(g, v, lo, hi, base, has_e)
    if precise is None:
        return None
    exact[v] = precise
    env2[v] = float(Fraction(precise))
    return accept(env2, exact, "boundary_root_scan")


def _refine_root(g: sp.Expr, v, lo: Fraction, hi: Fraction, base: dict, has_e: bool) -> str | None:
    """The root of ``g`` in ``[lo, hi]`` at 60 digits, as :data:`_ROOT_DIGITS`
    significant digits, or None."""
    try:
        with mpmath.workdps(60):
            f = _mp_compile(g.xreplace({DEGREE: sp.pi / 180}), real=True)
            menv = {w: mpmath.mpf(x.numerator) / x.denominator for w, x in base.items()}
            if has_e:
                menv[sp.Symbol("e")] = +mpmath.e

            def h(t):
                menv[v] = t
                return f(menv)
            a = mpmath.mpf(lo.numerator) / lo.denominator
            b = mpmath.mpf(hi.numerator) / hi.denominator
            r = mpmath.findroot(h, (a, b), solver="anderson")
            if isinstance(r, mpmath.mpc) or not a <= r <= b:
                return None
            return mpmath.nstr(r, _ROOT_DIGITS, strip_zeros=True)
    except (Undefined, ZeroDivisionError, ValueError, TypeError, OverflowError, NoConvergence):
        return None


def _precise_root(poly: sp.Poly, approx: float) -> str | None:
    """The real root of ``poly`` nearest ``approx``, to :data:`_ROOT_DIGITS` significant
    digits (a decimal string), or None."""
    try:
        roots = [r for r in poly.nroots(n=_ROOT_DIGITS + 5, maxsteps=200) if abs(sp.im(r)) < 1e-30]
    except (sp.polys.polyerrors.BasePolynomialError, TypeError, ValueError, NotImplementedError,
            RecursionError, NoConvergence):
        return None
    if not roots:
        return None
    best = min(roots, key=lambda r: abs(float(sp.re(r)) - approx))
    return str(sp.N(sp.re(best), _ROOT_DIGITS))


def _truth_mp(rel: Rel, env: dict, log_base: float | None) -> bool | None:
    """Truth value of ``rel`` at 50 digits (call inside ``mpmath.workdps``), or None where a
    side is undefined or an inequality link is within ``1e-30`` (relative) of its boundary.
    An equation holds when ``|P − Q| ≤ 1e-30·(1 + |P| + |Q|)``: a residual such as
    ``x⁴ = 10⁻⁸`` is nonzero here, whatever a float margin said."""
    truth = True
    tol = mpmath.mpf(10) ** -_RECHECK_DIGITS
    for kind, p, q in _oriented_links(rel):
        try:
            pv = _mp_compile(p, True, log_base)(env)
            qv = _mp_compile(q, True, log_base)(env)
        except (Undefined, ZeroDivisionError, OverflowError, ValueError, TypeError):
            return None
        if isinstance(pv, mpmath.mpc) or isinstance(qv, mpmath.mpc):
            return None
        g = pv - qv
        zero = abs(g) <= tol * (1 + abs(pv) + abs(qv))
        if kind == "eq":
            truth = truth and zero
        elif kind == "ne":
            truth = truth and not zero
        else:
            if zero:
                return None
            truth = truth and g > 0
    return truth


#: A 50-digit re-check counts a residual below this many digits (relative) as zero.
_RECHECK_DIGITS = 30


def _written_names(orig: Rel, edited: Rel) -> dict[str, str]:
    """Unsigned segment name → the name as written (in ``orig`` first), so a stored point
    names ``PC`` as the problem does although the check reads it as ``CP``."""
    out: dict[str, str] = {}
    for rel in (orig, edited):
        for side in rel.sides:
            for x in sorted(side.free_symbols, key=_sort_key):
                if isinstance(x, sp.Symbol):
                    u = unsigned_segment_name(x.name)
                    if u != x.name:
                        out.setdefault(u, x.name)
    return out


def _point_values(cx: dict, variables: list, written: dict[str, str]) -> dict | None:
    point = cx.get("point") or {}
    env = {}
    for v in variables:
        name = _var_name(v)
        s = point.get(written.get(name, name), point.get(name))
        if s is None:
            return None
        if s == "E" or (_var_name(v) == "e" and point.get("e") == "E"):
            env[v] = "E"
            continue
        try:
            env[v] = Fraction(s)
        except (ValueError, ZeroDivisionError, TypeError):
            return None
    return env


def _recheck(orig: Rel, edited: Rel, cx: dict, variables: list, bases: list, written: dict[str, str]) -> bool:
    if not cx.get("point"):
        return False
    claimed = (cx["orig"]["holds"], cx["edited"]["holds"])
    if claimed[0] == claimed[1]:
        return False
    env = _point_values(cx, variables, written)
    if env is None:
        return False
    if all(isinstance(x, Fraction) for x in env.values()):
        fo, fe = _exact_forms(orig), _exact_forms(edited)
        if fo is not None and fe is not None:
            if (_truth_exact(fo, env), _truth_exact(fe, env)) == claimed:
                return True
    with mpmath.workdps(_MP_DPS):
        menv = {v: (+mpmath.e if x == "E" else mpmath.mpf(x.numerator) / x.denominator) for v, x in env.items()}
        for lb in bases:
            if (_truth_mp(orig, menv, lb), _truth_mp(edited, menv, lb)) != claimed:
                return False
    return True


def recheck_counterexample(orig: Rel, edited: Rel, cx: dict, *, flags: frozenset[str] = frozenset(),
                           directed_segments: bool = False) -> bool:
    """Whether a stored counterexample really refutes: at its point, ``orig`` and
    ``edited`` have the truth values it claims, and they differ.

    Decided exactly (``Fraction`` arithmetic, no margin) when every coordinate is a
    rational string and both relations are rational functions and that reproduces the
    claim; otherwise at 50 digits with ``mpmath`` (:func:`_truth_mp`: an equation holds
    when its residual is below ``1e-30`` relative; an inequality within that of its
    boundary, or an undefined side, fails the re-check). ``flags``: the parse flags of
    ``orig`` (``log_base_ambiguous``: both readings must reproduce the claim);
    ``directed_segments`` as in :func:`find_counterexample`.

    Args:
        orig, edited: the relations, as passed to :func:`find_counterexample`.
        cx: its result (``{"point", "orig": {"holds"}, "edited": {"holds"}, ...}``).

    Returns:
        True when the claim is confirmed, False otherwise (also for a missing point or
        coordinate).
    """
    written: dict[str, str] = {}
    if not directed_segments:
        written = _written_names(orig, edited)
        orig, edited = unsigned_lengths(orig), unsigned_lengths(edited)
    variables = sorted(set(relation_variables(orig)) | set(relation_variables(edited)), key=_sort_key)
    bases: list[float | None] = [None, 10.0] if "log_base_ambiguous" in flags else [None]
    return _recheck(orig, edited, cx, variables, bases, written)


def _compile_forms(rel: Rel, log_base: float | None) -> list[tuple[str, Callable, Callable]]:
    return [(k, compile_expr(p, "real", log_base), compile_expr(q, "real", log_base))
            for k, p, q in _oriented_links(rel)]


def _solve_and_check(first: Rel, second: Rel, variables, rng, domains, judge, accept, tries, e_sym):
    """``solve_one_side_check_other`` of :func:`find_counterexample`: the accepted
    counterexample or None. Attempts alternate (per round over the candidate unknowns)
    between random samples and simple rationals for the other unknowns; an irrational
    root that refutes in floating point is recomputed to :data:`_ROOT_DIGITS` digits
    before it is accepted."""
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
            dom_w = (domains or {}).get(_var_name(w))
            try:
                if (attempt // len(cand)) % 2:
                    simple = _simple_values(dom_w)
                    if not simple:
                        raise Undefined("empty domain")
                    f = rng.choice(simple[:24])
                else:
                    f = _draw_real(rng, dom_w)
            except Undefined:
                return None
            exact[w] = f
            env[w] = float(f)
            sub_exact[subs_atoms.get(w, w)] = sp.Rational(f.numerator, f.denominator)
        try:
            uni = sp.together(g_sym.xreplace(sub_exact))
            if uni.has(sp.zoo, sp.nan, sp.oo, -sp.oo):
                continue
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
        except (sp.polys.polyerrors.BasePolynomialError, TypeError, ValueError, NotImplementedError,
                ZeroDivisionError, RecursionError, NoConvergence):
            continue
        dom = (domains or {}).get(_var_name(v))
        for r in roots:
            try:
                rv = float(sp.re(r))
            except OverflowError:
                if not r.is_Rational:
                    continue
                rv = math.copysign(math.inf, int(r.p))  # decided exactly below
            except (TypeError, ValueError):
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
                if judge(env2, ex2) is None:
                    continue
                precise = _precise_root(poly, rv)
                if precise is None:
                    continue
                ex2[v] = precise
            cx = accept(env2, ex2, "solve_one_side_check_other")
            if cx is not None:
                return cx
    return None
