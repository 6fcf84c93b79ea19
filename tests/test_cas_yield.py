"""benchmarks/cas_yield.py: its own checks of the peer's rows (issue 13)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("cas_yield", REPO / "benchmarks" / "cas_yield.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rename_check_keeps_indexed_terms_under_a_sum(bench):
    orig = r"Prove $\sum_{i=1}^{n} a_i \geq n$ for $n \geq 1$."
    new = r"Prove $\sum_{i=1}^{m} a_i \geq m$ for $m \geq 1$."
    assert bench._peer_rename_verified(orig, new)[0] is True


def test_rename_check_renames_a_primed_point_while_the_plain_one_stays(bench):
    orig = r"Let $BB' = 2$ and $AB' = AB + 1$."
    new = r"Let $BC' = 2$ and $AC' = AB + 1$."
    assert bench._peer_rename_verified(orig, new)[0] is True


def test_rename_check_rejects_a_partial_rename(bench):
    orig = r"Let $x + y = 3$ and $xy = 2$."
    new = r"Let $w + y = 3$ and $xy = 2$."
    ok, why = bench._peer_rename_verified(orig, new)
    assert ok is False and "partial rename" in why


def test_positive_classes(bench):
    orig = r"Given $AB = PC$ and $x > 1$."
    notation = {"transform_family": "reformulate", "positive_text": r"Given $A B - C P = 0$ and $x > 1$."}
    assert bench._judge_positive(orig, notation)[0] == "notation"
    wrong = {"transform_family": "reformulate", "positive_text": r"Given $AB = PC$ and $x > 2$."}
    cls, why = bench._judge_positive(orig, wrong)
    assert cls == "peer_wrong" and "at {" in why
    listed = {"transform_family": "mirror", "positive_text": r"For all $a, b, 0 < c$."}
    assert bench._judge_positive(r"For all $a, b, c > 0$.", listed)[0] == "peer_wrong"


def test_runs_with_no_arguments_and_names_missing_data(tmp_path):
    """With no --data-dir it reads the repository's data/peer_release; when that is
    missing it says so in one line and exits 2 (no traceback)."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cas_yield.py"), "--data-dir",
                           str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert "dvc pull data.dvc" in proc.stderr and "Traceback" not in proc.stderr
    spec = importlib.util.spec_from_file_location("cas_yield_default", REPO / "benchmarks" / "cas_yield.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod._default_data_dir() == REPO / "data" / "peer_release"
