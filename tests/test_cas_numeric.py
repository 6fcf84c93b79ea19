"""Numeric rules: evaluation, domains, equivalence and counterexamples (paper, Appendix A: the verified arm).

Counterexamples are checked exactly: the stored point is substituted into the relations
with SymPy's exact arithmetic, and the stored truth values must come out.
"""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
import sympy as sp

from recipematch.cas.compile import Undefined, compile_expr
from recipematch.cas.counterexamples import find_counterexample
from recipematch.cas.domains import Domain, infer_domains
from recipematch.cas.equivalence import check_equivalent
from recipematch.cas.grammar import parse_segment
from recipematch.cas.relations import Rel

x, y = sp.symbols("x y")


def rel(latex: str) -> Rel:
    p = parse_segment(latex)
    return Rel(p.ops, p.sides)


def exact_value(s: str) -> sp.Expr:
    """A stored point value as an exact SymPy number (decimals and p/q are exact)."""
    if s == "E":
        return sp.E
    if "/" in s:
        p, q = s.split("/")
        return sp.Rational(int(p), int(q))
    return sp.Rational(Fraction(s))


def exact_truth(r: Rel, point: dict) -> bool:
    subs = {sym: exact_value(point[sym.name]) for sym in r.obj.free_symbols}
    val = r.obj.subs(subs)
    assert val in (sp.true, sp.false), val
    return bool(val)


@pytest.mark.parametrize("a, b, k", [
    ("x^2+2x+1 = y", "(x+1)^2 - y = 0", "1"),
    (r"a+b \geq 2", r"2a+2b \geq 4", "2"),
    (r"a+b \geq 2", r"2 \leq a+b", "1"),
    (r"\frac{a}{b} + 1 < c", r"\frac{a}{2b} + \frac{1}{2} < \frac{c}{2}", "1/2"),
    (r"-1 \leq x < 1", r"1 > x \geq -1", "1,1"),
    (r"\sqrt{x} + 1", r"1 + \sqrt{x}", "1"),
])
def test_equivalent_pairs(a, b, k):
    ver = check_equivalent(rel(a), rel(b), rng=random.Random(0))
    assert ver["verdict"] == "equivalent"
    assert ver["points_tested"] >= 20
    assert ver["k"] == k


@pytest.mark.parametrize("a, b", [
    (r"a+b \geq 2", r"a+b \leq 2"),        # flipped: k would be negative
    ("x^2 = 1", "x = 1"),
    (r"a + b > 2", r"a + b \geq 2"),       # strictness differs
    ("(x+1)^2", "x^2+1"),
])
def test_not_equivalent_pairs(a, b):
    assert check_equivalent(rel(a), rel(b), rng=random.Random(0))["verdict"] == "not_equivalent"


def test_too_few_valid_points_is_unknown_never_equivalent():
    # log of a product of five factors: sqrt(-...) is never evaluable at these real points
    r = Rel(("=",), (sp.floor(x) + sp.sqrt(-x ** 2 - 1), sp.Integer(0)))
    ver = check_equivalent(r, r, rng=random.Random(0))
    assert ver["verdict"] == "unknown"
    assert "valid points" in ver["reason"]


def test_real_mode_semantics():
    assert compile_expr(x ** sp.Rational(1, 3), "real")({x: -8.0}) == pytest.approx(-2.0)
    with pytest.raises(Undefined):
        compile_expr(sp.sqrt(x), "real")({x: -1.0})
    with pytest.raises(Undefined):
        compile_expr(sp.log(x), "real")({x: 0.0})
    with pytest.raises(Undefined):
        compile_expr(1 / x, "real")({x: 0.0})
    with pytest.raises(Undefined):
        compile_expr(sp.Function("gcd")(x, y), "real")


@pytest.mark.parametrize("a, b", [
    (r"a+b \geq 2", r"a+b \leq 2"),
    (r"\frac{a}{b+c} \geq \frac{1}{2}", r"\frac{a}{b+c} \geq \frac{1}{3}"),
    (r"x^2 - 5x + 6 = 0", r"x^2 - 5x + 7 = 0"),
    (r"n = 6", r"n = 7"),
    (r"-1 \leq x < 1", r"-2 \leq x < 2"),
    (r"x + 2y = 7", r"x + 2y = 8"),
])
def test_counterexamples_are_exactly_valid(a, b):
    ra, rb = rel(a), rel(b)
    cx = find_counterexample(ra, rb, rng=random.Random(3))
    assert cx is not None
    assert cx["orig"]["holds"] != cx["edited"]["holds"]
    exact = all(v == "E" or "/" in v or len(v.split(".")[-1]) <= 2 for v in cx["point"].values())
    if exact:
        assert exact_truth(ra, cx["point"]) == cx["orig"]["holds"]
        assert exact_truth(rb, cx["point"]) == cx["edited"]["holds"]
    else:  # a solved root: check at 30 digits
        subs = {s: sp.Float(cx["point"][s.name], 30) for s in ra.obj.free_symbols | rb.obj.free_symbols}
        res_a = abs(sp.N((ra.sides[0] - ra.sides[1]).subs(subs), 30))
        res_b = abs(sp.N((rb.sides[0] - rb.sides[1]).subs(subs), 30))
        held, failed = (res_a, res_b) if cx["orig"]["holds"] else (res_b, res_a)
        assert held < 1e-10 and failed > 1e-6


def test_no_counterexample_for_an_equivalent_edit():
    assert find_counterexample(rel(r"2x \geq 2"), rel(r"x \geq 1"), rng=random.Random(0)) is None


def test_counterexample_respects_the_declared_domain():
    text = "Sean $a$, $b$, $c > 0$. Pruebe que $a + b + c \\geq 0$."
    segs = []
    from recipematch.cas.spans import find_spans, split_segments
    for i, sp_ in enumerate(find_spans(text)):
        for j, sg in enumerate(split_segments(text, sp_)):
            segs.append((i, j, parse_segment(text[sg.start:sg.end]), sg.start, sg.end))
    doms = infer_domains(segs, text, exclude=len(segs) - 1)
    assert doms["a"] == Domain(lo=Fraction(0), lo_strict=True)
    assert doms["b"] == doms["c"] == doms["a"]
    # a+b+c >= -1 and a+b+c >= -2 agree wherever a, b, c > 0: no counterexample in the domain
    assert find_counterexample(rel(r"a + b + c \geq -1"), rel(r"a + b + c \geq -2"),
                               rng=random.Random(0), domains=doms) is None
    # over the reals (sampled with both signs) there is one
    assert find_counterexample(rel(r"a + b + c \geq -1"), rel(r"a + b + c \geq -2"), rng=random.Random(0))
    # a counterexample found in the domain lies in it
    cx = find_counterexample(rel(r"a + b + c \geq 0"), rel(r"a + b + c \leq 0"), rng=random.Random(0), domains=doms)
    assert cx is not None and all(exact_value(v) > 0 for v in cx["point"].values())


def test_sampling_exercises_both_signs():
    rng = random.Random(0)
    from recipematch.cas.relations import _draw_real
    vals = [_draw_real(rng, None) for _ in range(200)]
    assert any(v < 0 for v in vals) and any(v > 0 for v in vals)
    assert all(v.denominator in (1, 2, 4, 5, 10, 20, 25, 50, 100) for v in vals)
    ints = [_draw_real(rng, Domain(lo=Fraction(1), integer=True)) for _ in range(50)]
    assert all(v.denominator == 1 and v >= 1 for v in ints)


def test_ambiguous_log_needs_both_readings():
    p = parse_segment(r"\log x > 1")
    q = parse_segment(r"\log x > 2")
    # ln x in (1, 2) needs x in (2.7, 7.4); log10 x in (1, 2) needs x in (10, 100): no common point
    assert find_counterexample(Rel(p.ops, p.sides), Rel(q.ops, q.sides), rng=random.Random(0),
                               flags=p.flags, max_points=300) is None
    p = parse_segment(r"\ln x > 1")
    q = parse_segment(r"\ln x > 2")
    assert find_counterexample(Rel(p.ops, p.sides), Rel(q.ops, q.sides), rng=random.Random(0), flags=p.flags)


def test_euler_e_is_pinned_in_counterexamples():
    p = parse_segment(r"e^x > 1")
    q = parse_segment(r"e^x > 2")
    cx = find_counterexample(Rel(p.ops, p.sides), Rel(q.ops, q.sides), rng=random.Random(0), flags=p.flags)
    assert cx is not None and cx["point"]["e"] == "E"
    xv = float(exact_value(cx["point"]["x"]))
    import math
    assert (math.exp(xv) > 1) == cx["orig"]["holds"] and (math.exp(xv) > 2) == cx["edited"]["holds"]


# --------------------------------------------------------------------------- exact checks

FALSE_EQUIVALENTS = [
    ("x = 1000001", "x = 1000000"),
    ("x = 3.0000000001", "x = 3"),
    ("x + 10^{12} = y", "x + 10^{12} + 1 = y"),
    ("x = y + 10^{-9}", "x = y"),
    ("a^2+b^2=c^2", "a^2+b^2=c^2+10^{-15}"),
    (r"\frac{x^2-1}{x-1} = 2", "x + 1 = 2"),
    # the numeric fallback (functions, roots) must not swallow constant shifts either
    (r"\sin x = 1000001", r"\sin x = 1000000"),
    (r"\sin x + 10^{12} = y", r"\sin x + 10^{12} + 1 = y"),
    (r"\sqrt{x} = y + 10^{-9}", r"\sqrt{x} = y"),
    (r"\cos x = y + 10^{-40}", r"\cos x = y"),
    (r"\frac{\sin x}{x} = 1", r"\sin x = x"),
]


@pytest.mark.parametrize("a, b", FALSE_EQUIVALENTS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_constant_shifts_and_domain_changes_are_never_equivalent(a, b, seed):
    for x_, y_ in ((a, b), (b, a)):
        ver = check_equivalent(rel(x_), rel(y_), rng=random.Random(seed))
        assert ver["verdict"] != "equivalent", (x_, y_, ver)
        assert ver["k"] is None


@pytest.mark.parametrize("a, b", FALSE_EQUIVALENTS[:5])
def test_exact_residual_mismatch_is_a_counterexample(a, b):
    ver = check_equivalent(rel(a), rel(b), rng=random.Random(0))
    assert ver["verdict"] == "not_equivalent" and ver["method"] == "exact_rational"
    cx = ver["counterexample"]
    assert cx["method"] == "residual_mismatch"
    # the stored point is exact and the residuals there really are not proportional
    ra, rb = rel(a), rel(b)
    subs = {s: exact_value(cx["point"][s.name]) for s in ra.obj.free_symbols | rb.obj.free_symbols}
    ga = (ra.sides[0] - ra.sides[1]).subs(subs)
    gb = (rb.sides[0] - rb.sides[1]).subs(subs)
    assert exact_value(cx["a"]) == ga and exact_value(cx["b"]) == gb


def test_removable_singularity_is_a_domain_difference():
    ver = check_equivalent(rel(r"\frac{x^2-1}{x-1} = 2"), rel("x + 1 = 2"), rng=random.Random(0))
    assert ver["verdict"] == "unknown" and "domains differ" in ver["reason"] and "x - 1 = 0" in ver["reason"]
    # the same denominator grouped differently is the same domain
    ver = check_equivalent(rel(r"\frac{1}{x^2-1} = y"), rel(r"\frac{1}{(x-1)(x+1)} = y"), rng=random.Random(0))
    assert ver["verdict"] == "equivalent"


@pytest.mark.parametrize("a, b, k, method", [
    ("x^2+2x+1 = y", "(x+1)^2 - y = 0", "1", "exact_symbolic"),
    (r"\frac{a}{b} + 1 < c", r"\frac{a}{2b} + \frac{1}{2} < \frac{c}{2}", "1/2", "exact_symbolic"),
    (r"x + 10^{12} = y", r"y - x = 10^{12}", "-1", "exact_symbolic"),
    (r"\sin x + 1 = y", r"2 \sin x + 2 = 2y", "2", "residual_ratio_k_complex"),
    (r"\sin^{2} x + \cos^{2} x = y", "1 = y", "1", "residual_ratio_k_complex"),
    (r"\sqrt{x} + 1 = y", r"y - \sqrt{x} = 1", "-1", "residual_ratio_k_complex"),
])
def test_true_equivalences_still_pass(a, b, k, method):
    ver = check_equivalent(rel(a), rel(b), rng=random.Random(0))
    assert ver["verdict"] == "equivalent", ver
    assert ver["k"] == k and ver["method"] == method


def test_k_is_real_or_none():
    ver = check_equivalent(rel("x^2 = 1"), rel("x = 1"), rng=random.Random(0))
    assert ver["verdict"] == "not_equivalent" and ver["k"] is None
    ver = check_equivalent(rel(r"\pi x = 1"), rel(r"x = \frac{1}{\pi}"), rng=random.Random(0))
    assert ver["verdict"] == "equivalent" and isinstance(ver["k"], str)
    assert isinstance(float(Fraction(ver["k"])), float)


def test_exact_truth_values_refute_tiny_shifts():
    cx = find_counterexample(rel("x = 3.0000000001"), rel("x = 3"), rng=random.Random(0))
    assert cx is not None and cx["orig"]["holds"] != cx["edited"]["holds"]
    ra, rb = rel("x = 3.0000000001"), rel("x = 3")
    assert exact_truth(ra, cx["point"]) == cx["orig"]["holds"]
    assert exact_truth(rb, cx["point"]) == cx["edited"]["holds"]


def test_root_finder_non_convergence_is_no_counterexample_not_a_crash(monkeypatch):
    from mpmath.libmp.libhyper import NoConvergence

    def no_convergence(self, *a, **k):
        raise NoConvergence("convergence to root failed")

    monkeypatch.setattr(sp.Poly, "nroots", no_convergence)
    # x^5 = y + y^5 against an edit: the solve step needs nroots (degree 5)
    cx = find_counterexample(rel("x^{5} = y + y^{5}"), rel("x^{5} = y + y^{6}"), rng=random.Random(0),
                             max_points=0)
    assert cx is None or cx["orig"]["holds"] != cx["edited"]["holds"]


# --------------------------------------------------------------------------- issue 9: one compiler

def test_one_compiler_three_number_domains_agree():
    """Float, exact and 50-digit evaluation come from one compiler (issue 9): on a
    rational function they agree, and the exact domain refuses what it cannot do."""
    import mpmath

    from recipematch.cas import compile as nm

    expr = parse_segment(r"\frac{x^3 - 2y}{x + y^2} + \frac{1}{3} x y").obj
    env_q = {sp.Symbol("x"): Fraction(7, 5), sp.Symbol("y"): Fraction(-3, 4)}
    exact = nm.exact_compile(expr)(env_q)
    assert isinstance(exact, Fraction)
    real = nm.compile_expr(expr, "real")({k: float(v) for k, v in env_q.items()})
    cplx = nm.compile_expr(expr, "complex")({k: float(v) for k, v in env_q.items()})
    with mpmath.workdps(50):
        mp = nm._mp_compile(expr, real=True)(env_q)
        assert abs(mp - mpmath.mpf(exact.numerator) / exact.denominator) < mpmath.mpf(10) ** -45
    assert real == pytest.approx(float(exact), rel=1e-14)
    assert cplx == pytest.approx(complex(float(exact)), rel=1e-14)
    with pytest.raises(nm._NotExact):
        nm.exact_compile(parse_segment(r"\sqrt{x} + 1").obj)
    with pytest.raises(Undefined):
        compile_expr(parse_segment(r"\gcd(x, 2)").obj, "real")


# --------------------------------------------------------------------------- issue 13

def _rels(a: str, b: str):
    pa, pb = parse_segment(a), parse_segment(b)
    return Rel(pa.ops, pa.sides), Rel(pb.ops, pb.sides), pa.flags


@pytest.mark.parametrize("a, b", [
    ("2AP = 3AP_1", "2 A P - 3 A P_{1} = 0"),
    ("BB_2 = B_1H", "B B_{2} - B_{1} H = 0"),
    ("A_1C_1 = A_2C_2", "A_{1} C_{1} - A_{2} C_{2} = 0"),
])
def test_spacing_tex_ignores_does_not_change_the_verdict(a, b):
    ra, rb, _ = _rels(a, b)
    assert check_equivalent(ra, rb, rng=random.Random(0))["verdict"] == "equivalent"


def test_notation_rule_two_point_names_are_unsigned_lengths_unless_directed():
    ra, rb, _ = _rels("AB = PC", "A B - C P = 0")
    assert check_equivalent(ra, rb, rng=random.Random(0))["verdict"] == "equivalent"
    directed = check_equivalent(ra, rb, rng=random.Random(0), directed_segments=True)
    assert directed["verdict"] == "not_equivalent"
    # point names are never cancelled as factors: AP/PB = 1/4 is not A/B = 1/4
    ra, rb, _ = _rels(r"\frac{AP}{PB} = \frac{1}{4}", r"\frac{A}{B} - \frac{1}{4} = 0")
    assert check_equivalent(ra, rb, rng=random.Random(0))["verdict"] != "equivalent"
    # and a counterexample search treats PC and CP as one unknown
    from recipematch.cas.counterexamples import recheck_counterexample

    ra, rb, flags = _rels("AB = PC", "AB = 2 CP")
    cx = find_counterexample(ra, rb, rng=random.Random(0), flags=flags)
    assert cx is not None and set(cx["point"]) == {"AB", "PC"}  # named as the original writes it
    assert recheck_counterexample(ra, rb, cx, flags=flags)


def test_declared_notation_detects_vectors_and_directed_segments():
    from recipematch.cas.grammar import declared_notation
    assert "directed_segments" in declared_notation(r"Let $\vec{AB} = \vec{PC}$.")
    assert "directed_segments" in declared_notation("Soit le vecteur $AB$.")
    assert "directed_segments" not in declared_notation("Let $AB = PC$ in triangle $ABC$.")


def test_factorial_of_an_unknown_is_sampled_on_integers_without_caller_domains():
    ra, rb, _ = _rels("n! = 2^a - 2^b", "- 2^{a} + n! = - 2^{b}")
    v = check_equivalent(ra, rb, rng=random.Random(0))
    assert v["verdict"] == "equivalent", v
    # and a true difference is still seen at integer n
    ra, rb, _ = _rels("n! = 2^a - 2^b", "n! = 2^a + 2^b")
    assert check_equivalent(ra, rb, rng=random.Random(0))["verdict"] == "not_equivalent"


@pytest.mark.parametrize("a, b, doms, method", [
    # an exponent equation: a small integer, not a random decimal, makes 2^x = 8 true
    ("2^x = 8", "2^x = 9", None, None),
    # a narrow region: equality only on the diagonal x = y = z
    (r"\frac{1}{x} + \frac{1}{y} + \frac{1}{z} \geq \frac{9}{x+y+z}",
     r"\frac{1}{x} + \frac{1}{y} + \frac{1}{z} > \frac{9}{x+y+z}", "positive", "simple_point_truth_disagreement"),
    # a sum of squares vanishing at one point only
    ("x^2 + y^2 + z^2 = 0", "x^2 + y^2 = z^2", None, None),
    # a sine equation: the root is irrational, found by the root scan and refined
    (r"\sin x = \frac{1}{2}", r"\sin x = \frac{1}{3}", None, "boundary_root_scan"),
    # narrow inequality region around an irrational boundary
    (r"x^2 \leq 2", r"x^2 \leq \frac{1999}{1000}", None, None),
])
def test_stronger_counterexample_search_finds_hard_cases(a, b, doms, method):
    from recipematch.cas.counterexamples import recheck_counterexample

    ra, rb, flags = _rels(a, b)
    domains = None
    if doms == "positive":
        pos = Domain(lo=Fraction(0), lo_strict=True)
        domains = {"x": pos, "y": pos, "z": pos}
    cx = find_counterexample(ra, rb, rng=random.Random(0), domains=domains, flags=flags)
    assert cx is not None
    if method is not None:
        assert cx["method"] == method
    assert cx["orig"]["holds"] != cx["edited"]["holds"]
    assert recheck_counterexample(ra, rb, cx, flags=flags)


def test_recheck_refuses_a_float_margin_refutation():
    """x⁴ = 10⁻⁸ is not zero: a point where only the float margin makes the original hold
    fails the 50-digit re-check; the true point passes."""
    from recipematch.cas.counterexamples import recheck_counterexample

    ra, rb, flags = _rels(r"\sqrt{2} x^4 = 0", r"\sqrt{2} x^4 = 1")
    fake = {"point": {"x": "0.01"}, "orig": {"holds": True}, "edited": {"holds": False}}
    assert not recheck_counterexample(ra, rb, fake, flags=flags)
    true = {"point": {"x": "0"}, "orig": {"holds": True}, "edited": {"holds": False}}
    assert recheck_counterexample(ra, rb, true, flags=flags)
    # exact arithmetic for rational relations: 10^-10 is not 0
    ra, rb, flags = _rels("x^4 = 0", "x^4 = 1")
    assert not recheck_counterexample(ra, rb, {"point": {"x": "0.01"}, "orig": {"holds": True},
                                               "edited": {"holds": False}})


def test_false_refutations_are_discarded_and_counted(monkeypatch):
    """With a float margin so wide that it calls nonzero residuals zero, the search makes
    false refutations; none is returned and each is counted."""
    from recipematch.cas import counterexamples as nm

    monkeypatch.setattr(nm, "_MARGIN", 0.5)
    ra, rb, flags = _rels(r"\sqrt{2} x = 0", r"\sqrt{2} x = 10")
    stats: dict = {}
    cx = nm.find_counterexample(ra, rb, rng=random.Random(3), flags=flags, stats=stats,
                                domains={"x": Domain(lo=Fraction(1, 10))})
    assert stats.get("discarded", 0) >= 1
    assert cx is None or nm.recheck_counterexample(ra, rb, cx, flags=flags)
