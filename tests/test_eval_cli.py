"""``recipematch evaluate`` under a scoring rule: outputs, and every bad input refused in one
line (exit status 2) before any model is loaded."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import recipematch.retrieval as retrieval
from recipematch.beir import write_beir
from recipematch.benchmarks_build import build_crosslingual_folder
from recipematch.eval_cli import evaluate

FIX = Path(__file__).parent / "fixtures" / "beir"


@pytest.fixture
def cl(tmp_path):
    build_crosslingual_folder(FIX / "crosslingual_release_mini", tmp_path / "cl")
    return tmp_path / "cl"


@pytest.fixture
def no_model(monkeypatch):
    """Any attempt to load a model fails the test."""
    def boom(*a, **k):
        raise AssertionError("a model was loaded")
    monkeypatch.setattr(retrieval, "SentenceTransformerEncoder", boom)


def run(*args):
    return CliRunner().invoke(evaluate, [str(a) for a in args])


def test_bm25_strict_writes_recall_and_ranks_with_normal_permissions(cl, tmp_path):
    old = os.umask(0o022)
    try:
        res = run(cl, "--model", "bm25", "--rule", "crosslingual_strict", "--out",
                  tmp_path / "res.json", "--per-query", tmp_path / "pq.parquet")
    finally:
        os.umask(old)
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "res.json").read_text())
    assert set(s) >= {"R@1", "R@5", "R@10", "ranks", "slices", "n_queries_no_gold"}
    assert s["rule"] == "crosslingual_strict" and s["n_queries"] == 5 and s["n_docs"] == 9
    # q3's only gold is tagged with its own language: a miss under the strict rule
    assert s["ranks"]["q3"] == -1 and s["n_queries_no_gold"] == 1
    assert s["encoder"]["k1"] == 1.5 and s["encoder"]["b"] == 0.75
    pq = pd.read_parquet(tmp_path / "pq.parquet")
    assert dict(zip(pq["query_id"], pq["rank"])) == s["ranks"]
    for f in ("res.json", "pq.parquet"):
        assert stat.S_IMODE((tmp_path / f).stat().st_mode) == 0o644
    assert not list(tmp_path.glob(".*.tmp"))


def test_minilm_strict_on_the_mini_set(cl, tmp_path):
    res = run(cl, "--model", "all-MiniLM-L6-v2", "--rule", "crosslingual_strict",
              "--max-seq-length", "128", "--out", tmp_path / "res.json")
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "res.json").read_text())
    assert s["encoder"]["max_seq_length"] == 128 and s["ranks"]["q3"] == -1
    assert 0.0 <= s["R@1"] <= s["R@5"] <= s["R@10"] <= 80.0  # one of five is a miss


def _one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    out = res.output.strip()
    assert "\n" not in out and out.startswith("Error: ") and "Traceback" not in out, out
    for n in needles:
        assert n in out, out


def test_missing_folder(no_model, tmp_path):
    res = run(tmp_path / "nothere", "--model", "all-MiniLM-L6-v2", "--out", tmp_path / "o.json")
    _one_line_error(res, "'nothere'", "does not exist")
    assert not (tmp_path / "o.json").exists()


def test_strict_rule_without_language_tags(no_model, tmp_path):
    write_beir(tmp_path / "untagged", {"q": {"text": "x"}, "d": {"text": "y"}}, {"q": "x"},
               {"q": {"d": 1}}, query_meta={"q": {"cluster_id": "k"}})
    res = run(tmp_path / "untagged", "--model", "all-MiniLM-L6-v2", "--rule",
              "crosslingual_strict", "--out", tmp_path / "o.json")
    _one_line_error(res, "'untagged'", "queries.jsonl", "'q'", "metadata.lang")
    assert not (tmp_path / "o.json").exists()


def test_qrels_naming_an_unknown_id(no_model, tmp_path):
    write_beir(tmp_path / "s", {"q": {"text": "x"}}, {"q": "x"}, {"q": {"ghost": 1}})
    res = run(tmp_path / "s", "--model", "all-MiniLM-L6-v2", "--out", tmp_path / "o.json")
    _one_line_error(res, "qrels/test.tsv", "corpus-id 'ghost'")
    assert not (tmp_path / "o.json").exists()


def test_device_cuda_without_cuda(no_model, monkeypatch, cl, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    res = run(cl, "--model", "all-MiniLM-L6-v2", "--device", "cuda", "--out", tmp_path / "o.json")
    _one_line_error(res, "--device 'cuda'", "CUDA is not available")
    res = run(cl, "--model", "all-MiniLM-L6-v2", "--device", "gpu9", "--out", tmp_path / "o.json")
    _one_line_error(res, "--device 'gpu9'", "not a torch device")
    assert not (tmp_path / "o.json").exists()


def test_failed_per_query_leaves_no_summary(cl, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    res = run(cl, "--model", "bm25", "--out", tmp_path / "res.json",
              "--per-query", blocker / "pq.parquet")
    _one_line_error(res, "cannot write")
    assert not (tmp_path / "res.json").exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_per_query_that_is_a_directory_leaves_no_summary(cl, tmp_path):
    (tmp_path / "adir").mkdir()
    res = run(cl, "--model", "bm25", "--out", tmp_path / "res.json", "--per-query",
              tmp_path / "adir")
    _one_line_error(res, "--per-query", "is a directory")
    assert not (tmp_path / "res.json").exists()
