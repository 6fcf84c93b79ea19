"""``recipematch cas``: debug the computer-algebra generator from the command line.

* ``recipematch cas parse "LATEX"`` prints one JSON object
  ``{"ok", "relation", "free_symbols", "reason", "kind", "normalized"}``: the SymPy
  ``srepr`` of what the whitelist grammar built (``null`` when rejected) and why not.
* ``recipematch cas check "LATEX_A" "LATEX_B"`` prints ``{"verdict": "equivalent" |
  "not_equivalent" | "unknown", "counterexample", "points_tested", "reason", "method",
  "k"}`` with the generator's rules: "equivalent" needs proportional residuals at ≥ 20
  valid points (:func:`recipematch.cas.numeric.check_equivalent`), "not_equivalent" needs
  a counterexample (a real point where the truth values differ, or for two expressions a
  point where their values differ); anything else is "unknown".

Both exit 0 on a verdict (including "unknown" and a rejected parse) and non-zero only on
a usage error (click's exit code 2).
"""

from __future__ import annotations

import json
import random

import click
import sympy as sp

from recipematch.cas.grammar import function_letters, try_parse
from recipematch.cas.normalize import normalize_latex
from recipematch.cas.numeric import Rel, check_equivalent, find_counterexample

__all__ = ["cas", "parse_report", "check_report"]


def _strip_delims(s: str) -> str:
    t = s.strip()
    for a, b in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if t.startswith(a) and t.endswith(b) and len(t) >= len(a) + len(b):
            return t[len(a):len(t) - len(b)].strip()
    return t


def parse_report(latex: str) -> dict:
    """The JSON object of ``recipematch cas parse`` for one LaTeX string."""
    body = _strip_delims(latex)
    functions = function_letters([body])
    parsed, reason = try_parse(body, functions=functions)
    if parsed is None:
        return {"ok": False, "relation": None, "free_symbols": [], "reason": reason, "kind": None,
                "normalized": normalize_latex(body)}
    return {"ok": True, "relation": sp.srepr(parsed.obj),
            "free_symbols": sorted(s.name for s in parsed.unknowns), "reason": None, "kind": parsed.kind,
            "normalized": normalize_latex(body)}


def check_report(latex_a: str, latex_b: str, *, seed: int = 0) -> dict:
    """The JSON object of ``recipematch cas check`` for two relations or expressions."""
    a_body, b_body = _strip_delims(latex_a), _strip_delims(latex_b)
    functions = function_letters([a_body, b_body])
    pa, ra = try_parse(a_body, functions=functions)
    pb, rb = try_parse(b_body, functions=functions)
    base = {"verdict": "unknown", "counterexample": None, "points_tested": 0, "reason": None,
            "method": None, "k": None}
    if pa is None or pb is None:
        base["reason"] = "; ".join(x for x in (f"A does not parse: {ra}" if pa is None else "",
                                              f"B does not parse: {rb}" if pb is None else "") if x)
        return base
    usable = ("relation", "chain", "expression")
    if pa.kind not in usable or pb.kind not in usable:
        base["reason"] = f"only relations and expressions are compared (got {pa.kind}, {pb.kind})"
        return base
    a = Rel(pa.ops, pa.sides)
    b = Rel(pb.ops, pb.sides)
    rng = random.Random(seed)
    ver = check_equivalent(a, b, rng=rng)
    out = dict(base)
    out.update({"points_tested": ver["points_tested"], "method": ver["method"], "k": ver["k"]})
    if ver["verdict"] == "equivalent":
        out["verdict"] = "equivalent"
        return out
    if not a.ops and not b.ops and ver["verdict"] == "not_equivalent" and ver["counterexample"]:
        out.update({"verdict": "not_equivalent", "counterexample": ver["counterexample"],
                    "reason": ver["reason"]})
        return out
    if a.ops and b.ops and "!=" not in a.ops + b.ops:
        cx = find_counterexample(a, b, rng=rng, flags=pa.flags | pb.flags)
        if cx is not None:
            out.update({"verdict": "not_equivalent", "counterexample": cx, "method": cx["method"],
                        "reason": "the relations disagree at the counterexample"})
            return out
    out["k"] = None
    out["reason"] = ("equivalence not shown (" + (ver["reason"] or "no reason") + ") and no counterexample found")
    return out


@click.group(name="cas")
def cas() -> None:
    """Debug the computer-algebra (verified) pair generator."""


_ARGS = {"ignore_unknown_options": True}  # "-1 \\leq x < 1" is LaTeX, not an option


@cas.command("parse", context_settings=_ARGS)
@click.argument("latex", nargs=-1, type=click.UNPROCESSED)
def parse_cmd(latex: tuple[str, ...]) -> None:
    """Parse LATEX with the whitelist grammar and print one JSON object."""
    if len(latex) != 1:
        raise click.UsageError("expected exactly one LATEX argument (quote it)")
    click.echo(json.dumps(parse_report(latex[0]), ensure_ascii=False))


@cas.command("check", context_settings=_ARGS)
@click.argument("latex", nargs=-1, type=click.UNPROCESSED)
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed.")
def check_cmd(latex: tuple[str, ...], seed: int) -> None:
    """Check whether two relations (or expressions) LATEX_A LATEX_B are equivalent; print one
    JSON object."""
    if len(latex) != 2:
        raise click.UsageError("expected exactly two arguments LATEX_A LATEX_B (quote them)")
    click.echo(json.dumps(check_report(latex[0], latex[1], seed=seed), ensure_ascii=False))
