"""``recipematch cas``: debug the computer-algebra generator from the command line.

* ``recipematch cas parse "LATEX"`` prints one JSON object
  ``{"ok", "relation", "free_symbols", "reason", "kind", "normalized"}``: the SymPy
  ``srepr`` of what the whitelist grammar built (``null`` when rejected) and why not.
* ``recipematch cas check "LATEX_A" "LATEX_B"`` prints ``{"verdict": "equivalent" |
  "not_equivalent" | "unknown", "counterexample", "points_tested", "reason", "method",
  "k"}`` with the generator's rules: "equivalent" needs proportional residuals (exactly,
  for rational relations) at ≥ 20 valid points and the same domain
  (:func:`recipematch.cas.equivalence.check_equivalent`), "not_equivalent" needs a
  counterexample (a real point where the truth values differ, or for two expressions a
  point where their values differ); anything else is "unknown".

  ``k`` is the constant with ``g_B = k·g_A`` (``g = L − R``; one value per link,
  comma-separated), printed as a JSON string holding a real number, an exact fraction
  where known (``"2"``, ``"1/2"``, ``"-1"``), and only with ``"equivalent"``: with
  ``"not_equivalent"`` or ``"unknown"`` it is ``null`` (the residuals are not
  proportional, so there is no such constant).

Both commands do their work in a forked worker process under a wall-clock limit
(``--timeout``, default 10 s) and an address-space cap (``--memory-mb``, default 2048 MiB
on top of the interpreter): a formula that would take longer prints
``{"ok": false, "reason": "timeout after 10 s", ...}`` (parse) or ``{"verdict": "unknown",
"reason": "timeout after 10 s", ...}`` (check), and a worker that dies prints the same
shape with ``"worker crashed: ..."``. The grammar itself refuses numbers above
:data:`recipematch.cas.grammar.MAX_NUMBER_BITS` bits (``x = 9^{9^{9}}``) with a reason.

Both exit 0 on a verdict (including "unknown", a rejected parse and a timeout) and
non-zero only on a usage error (click's exit code 2).
"""

from __future__ import annotations

import json
import random
import sys

import click
import sympy as sp

from recipematch.cas.counterexamples import find_counterexample
from recipematch.cas.equivalence import check_equivalent
from recipematch.cas.grammar import function_letters, try_parse
from recipematch.cas.isolation import run_isolated
from recipematch.cas.normalize import normalize_latex
from recipematch.cas.relations import Rel

__all__ = ["cas", "parse_report", "check_report", "isolated_report", "DEFAULT_TIMEOUT_S", "DEFAULT_MEMORY_MB"]

#: Wall-clock limit of one command's work, seconds.
DEFAULT_TIMEOUT_S = 10.0
#: Address-space cap of the worker, MiB on top of the interpreter's mapping.
DEFAULT_MEMORY_MB = 2048


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
    return {"ok": True, "relation": _srepr(parsed.obj),
            "free_symbols": sorted(s.name for s in parsed.unknowns), "reason": None, "kind": parsed.kind,
            "normalized": normalize_latex(body)}


def _srepr(obj: sp.Basic) -> str:
    """``srepr`` that also prints integers of up to the grammar's 30,000 digits (Python
    refuses int-to-str conversions above 4,300 digits by default)."""
    get = getattr(sys, "get_int_max_str_digits", None)
    if get is None:
        return sp.srepr(obj)
    old = get()
    try:
        if old:
            sys.set_int_max_str_digits(max(old, 40_000))
        return sp.srepr(obj)
    finally:
        sys.set_int_max_str_digits(old)


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
    out.update({"points_tested": ver["points_tested"], "method": ver["method"]})
    if ver["verdict"] == "equivalent":
        out["verdict"] = "equivalent"
        out["k"] = ver["k"]  # a real constant (JSON string); null with every other verdict
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
    out["reason"] = ("equivalence not shown (" + (ver["reason"] or "no reason") + ") and no counterexample found")
    return out


def _check_positional(latex_a: str, latex_b: str, seed: int = 0) -> dict:
    return check_report(latex_a, latex_b, seed=seed)


def _timeout_text(timeout_s: float) -> str:
    return f"timeout after {timeout_s:g} s"


def isolated_report(command: str, args: tuple, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                    memory_mb: int | None = DEFAULT_MEMORY_MB) -> dict:
    """:func:`parse_report` (``command == "parse"``, ``args = (latex,)``) or
    :func:`check_report` (``"check"``, ``args = (latex_a, latex_b[, seed])``) in a forked worker under ``timeout_s`` and ``memory_mb``; a timeout or a dead worker
    gives the command's JSON shape with the reason (``ok`` false, or verdict "unknown")."""
    fn = parse_report if command == "parse" else _check_positional
    status, result = run_isolated(fn, args, timeout_s=timeout_s, memory_mb=memory_mb)
    if status == "ok":
        return result
    reason = _timeout_text(timeout_s) if status == "timeout" else f"worker crashed: {result}"
    if command == "parse":
        return {"ok": False, "relation": None, "free_symbols": [], "reason": reason, "kind": None,
                "normalized": None}
    return {"verdict": "unknown", "counterexample": None, "points_tested": 0, "reason": reason,
            "method": None, "k": None}


def _echo(obj: dict) -> None:
    click.echo(json.dumps(obj, ensure_ascii=False, allow_nan=False))


_TIMEOUT_OPT = click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True),
                            default=DEFAULT_TIMEOUT_S, show_default=True,
                            help="Wall-clock limit in seconds; past it the verdict is a timeout (exit 0).")
_MEMORY_OPT = click.option("--memory-mb", type=click.IntRange(min=1), default=DEFAULT_MEMORY_MB, show_default=True,
                           help="Address-space cap of the worker, MiB.")


@click.group(name="cas")
def cas() -> None:
    """Debug the computer-algebra (verified) pair generator."""


_ARGS = {"ignore_unknown_options": True}  # "-1 \\leq x < 1" is LaTeX, not an option


@cas.command("parse", context_settings=_ARGS)
@click.argument("latex", nargs=-1, type=click.UNPROCESSED)
@_TIMEOUT_OPT
@_MEMORY_OPT
def parse_cmd(latex: tuple[str, ...], timeout_s: float, memory_mb: int) -> None:
    """Parse LATEX with the whitelist grammar and print one JSON object."""
    if len(latex) != 1:
        raise click.UsageError("expected exactly one LATEX argument (quote it)")
    _echo(isolated_report("parse", (latex[0],), timeout_s=timeout_s, memory_mb=memory_mb))


@cas.command("check", context_settings=_ARGS)
@click.argument("latex", nargs=-1, type=click.UNPROCESSED)
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed.")
@_TIMEOUT_OPT
@_MEMORY_OPT
def check_cmd(latex: tuple[str, ...], seed: int, timeout_s: float, memory_mb: int) -> None:
    """Check whether two relations (or expressions) LATEX_A LATEX_B are equivalent; print one
    JSON object."""
    if len(latex) != 2:
        raise click.UsageError("expected exactly two arguments LATEX_A LATEX_B (quote them)")
    _echo(isolated_report("check", (latex[0], latex[1], seed), timeout_s=timeout_s, memory_mb=memory_mb))
