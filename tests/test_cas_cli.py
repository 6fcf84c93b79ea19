"""``recipematch cas parse`` and ``recipematch cas check``: one JSON object, exit 0 on any
verdict, non-zero only on a usage error."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from recipematch.cas.cli import cas


def _invoke(*args):
    res = CliRunner().invoke(cas, list(args))
    return res.exit_code, (json.loads(res.output) if res.exit_code == 0 else res.output)


@pytest.mark.parametrize("latex, relation, symbols", [
    (r"d \cdot k = 6", "Equality(Mul(Symbol('d'), Symbol('k')), Integer(6))", ["d", "k"]),
    ("x^2y = 1", "Equality(Mul(Pow(Symbol('x'), Integer(2)), Symbol('y')), Integer(1))", ["x", "y"]),
    (r"$a \ne b$", "Unequality(Symbol('a'), Symbol('b'))", ["a", "b"]),
])
def test_parse_ok(latex, relation, symbols):
    code, out = _invoke("parse", latex)
    assert code == 0
    assert set(out) >= {"ok", "relation", "free_symbols", "reason"}
    assert out["ok"] is True and out["relation"] == relation and out["free_symbols"] == symbols
    assert out["reason"] is None


def test_parse_chain():
    code, out = _invoke("parse", r"-1 \leq x < 1")
    assert code == 0 and out["ok"] and out["kind"] == "chain"
    assert out["relation"].startswith("And(")


@pytest.mark.parametrize("latex", [r"a \pm b", r"x \text{ and } y", r"\frac{1}{", "__import__('os')"])
def test_parse_rejected_exits_zero(latex):
    code, out = _invoke("parse", latex)
    assert code == 0
    assert out["ok"] is False and out["relation"] is None and out["free_symbols"] == [] and out["reason"]


def test_check_verdicts():
    code, out = _invoke("check", r"a + b \geq 2", r"2 \leq a + b")
    assert code == 0 and out["verdict"] == "equivalent" and out["points_tested"] >= 20 and out["counterexample"] is None
    code, out = _invoke("check", "x^2 = 1", "x = 1")
    assert code == 0 and out["verdict"] == "not_equivalent"
    cx = out["counterexample"]
    assert cx["orig"]["holds"] != cx["edited"]["holds"]
    code, out = _invoke("check", "(x+1)^2", "x^2+2x+1")
    assert out["verdict"] == "equivalent"
    code, out = _invoke("check", "x^2 = 1", "x^4 = 1")  # equivalent over R, not proportional: unknown
    assert code == 0 and out["verdict"] == "unknown" and out["reason"]
    code, out = _invoke("check", r"a \pm b", "x = 1")
    assert code == 0 and out["verdict"] == "unknown" and "does not parse" in out["reason"]


def test_usage_errors_are_nonzero():
    assert CliRunner().invoke(cas, ["check", "x"]).exit_code != 0
    assert CliRunner().invoke(cas, ["parse"]).exit_code != 0
    assert CliRunner().invoke(cas, ["nope"]).exit_code != 0
