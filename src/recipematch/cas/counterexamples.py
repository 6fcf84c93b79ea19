"""Counterexamples of negatives (paper, Appendix A: the verified arm): a real point where
the original and the edited relation have different truth values
(:func:`find_counterexample`), in the ``real`` semantics of :mod:`recipematch.cas.compile`.
Every counterexample is re-checked exactly or at 50 digits before it is kept
(:func:`recheck_counterexample`). The targeted searches (simple points, solving one
relation, root scans) are in :mod:`recipematch.cas.targeted`.

Explicit skip rule: a sample point where any side of either relation is undefined,
non-finite, or too close to its boundary to decide, is skipped and not counted. No point
found gives "not verified" (the negative is dropped).

Constants: a bare ``e`` is pinned to Euler's number (valid under both readings);
``\\log`` without a base must give the counterexample under both the natural and the
base-10 reading.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction
from typing import Callable

import mpmath
import sympy as sp
from sympy.core.function import AppliedUndef

from recipematch.cas.compile import _MP_DPS, Undefined, _NotExact, _mp_compile, compile_expr, exact_compile
from recipematch.cas.domains import Domain
from recipematch.cas.grammar import unsigned_segment_name
from recipematch.cas.relations import (
    Rel,
    _atoms_consistent,
    _big_power,
    _draw_real,
    _fmt,
    _oriented_links,
    _sort_key,
    _unsigned_domains,
    _var_name,
    relation_variables,
    unsigned_lengths,
)
from recipematch.cas.targeted import _boundary_scan, _simple_points, _solve_and_check

__all__ = ["find_counterexample", "recheck_counterexample", "CX_REAL_POINTS"]


#: Peer: up to 300 real points for an inequality counterexample.
CX_REAL_POINTS = 300
#: Solve attempts (one unknown solved, the others fixed) for an equation's counterexample.
CX_SOLVE_TRIES = 12
_MARGIN = 1e-7


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
      (at most :data:`recipematch.cas.targeted._SCAN_MAX_ROOTS` per search) is located by bisection; an inequality
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
    ``directed_segments``, two-point names are unsigned lengths
    (:func:`recipematch.cas.relations.unsigned_lengths`).

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
