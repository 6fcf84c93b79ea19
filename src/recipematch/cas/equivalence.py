"""The equivalence test of positives (paper, Appendix A: the verified arm).

"Original − rewrite is zero at ≥ 20 random complex points" (Appendix A), made exact where
the algebra allows (:func:`check_equivalent`): rational relations are checked in exact
arithmetic, the others at complex points in floating point (principal branches) with each
pass re-checked at 50 digits (:mod:`recipematch.cas.compile`), and both relations must have
the same domain (:func:`recipematch.cas.conditions.domain_difference`).

Explicit skip rule: a sample point where any side of either relation is undefined or
non-finite is skipped and not counted. Too few valid points gives ``unknown``, never
"equivalent".

Constants: a bare ``e`` is sampled freely (an identity in ``e`` holds at Euler's number
too).
"""

from __future__ import annotations

import random
from fractions import Fraction

import mpmath
import sympy as sp
from sympy.core.function import AppliedUndef

from recipematch.cas.compile import _MP_DPS, Undefined, _NotExact, _mp_compile, compile_expr, exact_compile
from recipematch.cas.conditions import domain_difference
from recipematch.cas.domains import Domain
from recipematch.cas.grammar import DEGREE
from recipematch.cas.relations import (
    _SYMBOLIC_ERRORS,
    Rel,
    _atoms_consistent,
    _big_power,
    _complex_point,
    _fmt,
    _is_real_only,
    _residual_forms,
    _sort_key,
    _unsigned_domains,
    _var_name,
    relation_variables,
    unsigned_lengths,
)

__all__ = ["check_equivalent", "EQUIV_POINTS", "EQUIV_MAX_DRAWS", "EQUIV_MIN_NONTRIVIAL"]


#: Appendix A / peer: 20 complex points, at most 80 draws, at least 5 non-trivial.
EQUIV_POINTS = 20
EQUIV_MAX_DRAWS = 80
EQUIV_MIN_NONTRIVIAL = 5
_TOL = 1e-9
#: Relative tolerance of the high-precision confirmation (at :data:`_MP_DPS` digits).
_MP_TOL = mpmath.mpf(10) ** -35


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
    case both must have the same domain
    (:func:`recipematch.cas.conditions.domain_difference`): a rewrite that drops or adds a
    restriction (``\\frac{x^2-1}{x-1} = 2`` against ``x + 1 = 2``, which differ
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
    or directed segments), two-point names are unsigned lengths
    (:func:`recipematch.cas.relations.unsigned_lengths`).

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
