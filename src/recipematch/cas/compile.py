"""Numeric evaluation of expression trees (paper, Appendix A: the verified arm).

No ``lambdify`` (it ``exec``s generated code): one compiler (:func:`_compile`) turns a
SymPy tree into nested Python closures over a fixed set of node types, in a number domain
(:class:`_Numbers`): floats (:func:`compile_expr`), exact rationals (:func:`exact_compile`,
rational functions only) or ``mpmath`` at 50 digits (:func:`_mp_compile`), each in one of
two modes:

* ``complex``: principal branches (``cmath``), used for the equivalence of positives
  ("original − rewrite is zero at ≥ 20 random complex points", Appendix A) when the
  relations are not rational functions (rational ones are checked in exact arithmetic),
  each pass re-checked at 50 digits (:mod:`recipematch.cas.equivalence`);
* ``real``: real-valued semantics for truth values of inequalities and counterexamples
  (odd roots of negatives are real, even roots and logarithms of non-positives are
  undefined, factorial and binomial need non-negative integers). Every counterexample is
  re-checked exactly or at 50 digits before it is kept
  (:func:`recipematch.cas.counterexamples.recheck_counterexample`).

Constants: the degree sign is ``pi/180``.
"""

from __future__ import annotations

import abc
import cmath
import math
from fractions import Fraction
from typing import Callable

import mpmath
import sympy as sp
from sympy.core.function import AppliedUndef

from recipematch.cas.grammar import _OPAQUE_FUNCS, DEGREE

__all__ = ["Undefined", "compile_expr", "exact_compile"]


class Undefined(Exception):
    """A value is undefined or non-finite at the sample point."""


class _NotExact(Exception):
    """The expression is not a rational function with rational coefficients (or is too big
    to evaluate exactly)."""


#: Exact evaluation refuses integer exponents above this and numeric powers above
#: :data:`_EXACT_MAX_BITS` bits (the grammar already refuses numbers above 100,000 bits).
_EXACT_MAX_EXP = 4096
_EXACT_MAX_BITS = 200_000
#: Working precision (decimal digits) of the high-precision evaluations (the
#: equivalence confirmation, the counterexample re-check).
_MP_DPS = 50


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
