"""Targeted counterexample searches (paper, Appendix A: the verified arm): the steps of
:func:`recipematch.cas.counterexamples.find_counterexample` after random sampling.

* simple points (:func:`_simple_points`): small integers and simple fractions, shared,
  one unknown at a time, and random tuples of them;
* ``solve_one_side_check_other`` (:func:`_solve_and_check`): one unknown of an equation
  solved as a univariate polynomial, the other relation checked at the root;
* ``boundary_root_scan`` (:func:`_boundary_scan`): sign changes of each residual along one
  unknown, located by bisection and refined at 60 digits.

Every candidate goes through the caller's ``judge``/``accept`` (truth values, re-check),
so nothing here decides a counterexample on its own.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction
from typing import Callable

import mpmath
import sympy as sp
from mpmath.libmp.libhyper import NoConvergence
from sympy.core.function import AppliedUndef

from recipematch.cas.compile import Undefined, _mp_compile
from recipematch.cas.domains import Domain
from recipematch.cas.grammar import DEGREE
from recipematch.cas.relations import Rel, _draw_real, _oriented_links, _var_name

__all__: list[str] = []  # helpers of find_counterexample only


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
    """Targeted exact points (see
    :func:`recipematch.cas.counterexamples.find_counterexample`), at most a few hundred."""
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
    """``boundary_root_scan`` of
    :func:`recipematch.cas.counterexamples.find_counterexample`."""
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


def _solve_and_check(first: Rel, second: Rel, variables, rng, domains, judge, accept, tries, e_sym):
    """``solve_one_side_check_other`` of
    :func:`recipematch.cas.counterexamples.find_counterexample`: the accepted
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
