"""``recipematch cas parse`` and ``recipematch cas check``: one JSON object, exit 0 on any
verdict, non-zero only on a usage error."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from recipematch.cas import cli as cli_mod
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


# --------------------------------------------------------------------------- hangs and limits

HANGERS = [r"x = 9^{9^{9}}", r"x = 2^{2^{40}}", r"x = 10^{10^{10}}", r"\prod_{i=1}^{10^{7}} i = x",
           r"x = (2^{90000})^{90000}", r"x = \sqrt{2}^{10^{10}}", r"x = (10^{10})!", r"x = 2^{2^{65536}}"]


@pytest.mark.parametrize("latex", HANGERS)
def test_huge_numbers_are_refused_within_the_limit(latex):
    t0 = time.monotonic()
    code, out = _invoke("parse", "--timeout", "10", latex)
    assert code == 0 and out["ok"] is False and out["relation"] is None
    assert "too large" in out["reason"]
    code, out = _invoke("check", "--timeout", "10", latex, "x = 1")
    assert code == 0 and out["verdict"] == "unknown" and "too large" in out["reason"] and out["k"] is None
    assert time.monotonic() - t0 < 10


def _slow(*args, **kwargs):
    time.sleep(60)


@pytest.mark.parametrize("command, args", [("parse", ["x = 1"]), ("check", ["x = 1", "x = 2"])])
def test_work_past_the_timeout_is_a_verdict_not_a_hang(monkeypatch, command, args):
    # the worker is forked, so the replaced function runs there
    monkeypatch.setattr(cli_mod, "parse_report" if command == "parse" else "check_report", _slow)
    t0 = time.monotonic()
    code, out = _invoke(command, "--timeout", "1", *args)
    assert time.monotonic() - t0 < 8
    assert code == 0
    if command == "parse":
        assert out["ok"] is False and out["relation"] is None and out["reason"] == "timeout after 1 s"
    else:
        assert out["verdict"] == "unknown" and out["reason"] == "timeout after 1 s" and out["k"] is None


def test_default_timeout_is_ten_seconds():
    assert cli_mod.DEFAULT_TIMEOUT_S == 10
    assert cli_mod.isolated_report("parse", ("x = 1",))["ok"] is True


def test_cli_process_returns_on_a_huge_power():
    """End to end through the console entry point, in its own process."""
    res = subprocess.run([sys.executable, "-c", "from recipematch.cli import main; main()", "cas", "parse",
                          r"x = 9^{9^{9}}"], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["ok"] is False and "too large" in out["reason"]


def test_k_is_null_or_a_real_number_in_json():
    def strict(text):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))

    res = CliRunner().invoke(cas, ["check", "x^2 = 1", "x = 1"])
    out = strict(res.output)
    assert out["verdict"] == "not_equivalent" and out["k"] is None
    res = CliRunner().invoke(cas, ["check", r"a + b \geq 2", r"2a + 2b \geq 4"])
    out = strict(res.output)
    assert out["verdict"] == "equivalent" and out["k"] == "2"
    res = CliRunner().invoke(cas, ["check", "x^2 = 1", "x^4 = 1"])
    assert strict(res.output)["k"] is None


@pytest.mark.parametrize("a, b", [("x = 1000001", "x = 1000000"), ("x = 3.0000000001", "x = 3"),
                                  ("x + 10^{12} = y", "x + 10^{12} + 1 = y"), ("x = y + 10^{-9}", "x = y"),
                                  ("a^2+b^2=c^2", "a^2+b^2=c^2+10^{-15}"),
                                  (r"\frac{x^2-1}{x-1} = 2", "x + 1 = 2")])
def test_check_never_calls_a_shifted_relation_equivalent(a, b):
    code, out = _invoke("check", a, b)
    assert code == 0 and out["verdict"] in ("not_equivalent", "unknown") and out["k"] is None
    if out["verdict"] == "not_equivalent":
        assert out["counterexample"]["orig"]["holds"] != out["counterexample"]["edited"]["holds"]
