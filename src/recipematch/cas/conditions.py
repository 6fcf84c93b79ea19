"""Domain conditions of a relation: where its sides are defined (paper, Appendix A: the
verified arm). Two relations are equivalent only when these coincide
(:func:`domain_difference`), so a rewrite that drops or adds a restriction (a removable
singularity such as ``x = 1`` in ``\\frac{x^2-1}{x-1}``) is never a positive.

Not to be confused with :mod:`recipematch.cas.domains`, the declared and implied domains
of a problem's variables (where they are sampled).
"""

from __future__ import annotations

import sympy as sp
from sympy.core.function import AppliedUndef

from recipematch.cas.relations import _SYMBOLIC_ERRORS, Rel, _big_power

__all__ = ["domain_conditions", "domain_difference"]


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
