"""``recipematch evaluate`` refuses outputs that would overwrite its inputs, a split that is a
path, repeated cut-offs and unloadable model folders (one line, exit status 2), and keeps
third-party DEBUG logging quiet unless ``-v``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIX = Path(__file__).parent / "fixtures" / "beir" / "crosslingual_mini"
SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture
def bench(tmp_path):
    """A private copy of a tiny BEIR folder (the test may try to write into it)."""
    dst = tmp_path / "bench"
    shutil.copytree(FIX, dst)
    return dst


sys.path.insert(0, str(Path(__file__).parent))
from test_eval_cli import _one_line_error, no_model, run  # noqa: E402,F401 - shared with the main evaluate tests


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --- 1. outputs inside the input folder -----------------------------------------------------

@pytest.mark.parametrize("flag,rel", [
    ("--out", "corpus.jsonl"),
    ("--per-query", "queries.jsonl"),
    ("--out", "qrels/test.tsv"),
    ("--out", "new_summary.json"),          # a new file inside the folder is refused too
    ("--per-query", "qrels/new.parquet"),
    ("--out", "."),                          # the folder itself
    ("--cache-dir", "cache"),                # the embedding cache too
])
def test_output_inside_the_benchmark_is_refused_and_nothing_written(bench, tmp_path, flag, rel):
    before = _snapshot(bench)
    args = ["--out", tmp_path / "res.json"] if flag in ("--per-query", "--cache-dir") else []
    res = run(bench, "--model", "bm25", flag, bench / rel, *args)
    _one_line_error(res, flag, "inside the input FOLDER")
    assert _snapshot(bench) == before
    assert not (tmp_path / "res.json").exists()


def test_output_reaching_the_benchmark_through_dotdot_or_a_link_is_refused(bench, tmp_path):
    before = _snapshot(bench)
    (tmp_path / "other").mkdir()
    res = run(bench, "--model", "bm25", "--out", tmp_path / "other" / ".." / "bench" / "corpus.jsonl")
    _one_line_error(res, "--out", "inside the input FOLDER")
    (tmp_path / "alias").symlink_to(bench, target_is_directory=True)
    res = run(bench, "--model", "bm25", "--out", tmp_path / "alias" / "corpus.jsonl")
    _one_line_error(res, "--out", "inside the input FOLDER")
    assert _snapshot(bench) == before


def test_output_equal_to_an_input_file_linked_from_outside_is_refused(tmp_path):
    """The folder's corpus.jsonl is a symbolic link to a file elsewhere: that file is an input."""
    real = tmp_path / "shared_corpus.jsonl"
    shutil.copy(FIX / "corpus.jsonl", real)
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "corpus.jsonl").symlink_to(real)
    shutil.copy(FIX / "queries.jsonl", bench / "queries.jsonl")
    shutil.copytree(FIX / "qrels", bench / "qrels")
    before = real.read_bytes()
    res = run(bench, "--model", "bm25", "--out", real)
    _one_line_error(res, "--out", str(real))
    assert real.read_bytes() == before


def test_output_beside_the_benchmark_with_a_shared_name_prefix_is_written(bench, tmp_path):
    """``bench2/`` is not inside ``bench/``: the check compares path parts, not strings."""
    out = tmp_path / "bench2" / "res.json"
    res = run(bench, "--model", "bm25", "--out", out, "--per-query", tmp_path / "bench_pq.parquet")
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["n_queries"] == 4
    assert (tmp_path / "bench_pq.parquet").is_file()


def test_output_inside_the_model_folder_is_refused_before_loading(no_model, bench, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    res = run(bench, "--model", model, "--out", model / "config.json")
    _one_line_error(res, "--out", "inside the input --model")
    assert (model / "config.json").read_text() == "{}"


# --- 2. model folders that cannot be loaded ---------------------------------------------------

def test_model_that_is_a_file_is_refused_before_loading(no_model, bench, tmp_path):
    f = tmp_path / "sources.jsonl"
    f.write_text("{}\n")
    res = run(bench, "--model", f, "--out", tmp_path / "o.json")
    _one_line_error(res, "--model", "sources.jsonl", "is a file")
    assert not (tmp_path / "o.json").exists()


def test_model_folder_without_config_is_refused_before_loading(no_model, bench, tmp_path):
    (tmp_path / "empty").mkdir()
    res = run(bench, "--model", tmp_path / "empty", "--out", tmp_path / "o.json")
    _one_line_error(res, "--model", "empty", "no modules.json or config.json")
    assert res.exit_code == 2 and not (tmp_path / "o.json").exists()


def test_model_folder_that_sentence_transformers_cannot_load(bench, tmp_path):
    """config.json is ``{}``: transformers raises ValueError; shown as one line naming --model
    and the folder, with the first line of the cause."""
    model = tmp_path / "fakemodel"
    model.mkdir()
    (model / "config.json").write_text("{}")
    res = run(bench, "--model", model, "--out", tmp_path / "o.json")
    _one_line_error(res, "--model", str(model), "cannot load", "ValueError")
    assert not (tmp_path / "o.json").exists()


# --- 3. --split is a plain name -------------------------------------------------------------

@pytest.mark.parametrize("split", ["../corpus", "..", "qrels/test", "a\\b", "", "te..st"])
def test_split_that_is_a_path_is_refused(no_model, bench, tmp_path, split):
    res = run(bench, "--model", "bm25", "--split", split, "--out", tmp_path / "o.json")
    _one_line_error(res, "--split", "plain split name")
    assert not (tmp_path / "o.json").exists()


def test_a_plain_split_name_other_than_test_is_read(bench, tmp_path):
    (bench / "qrels" / "test.tsv").rename(bench / "qrels" / "dev.tsv")
    res = run(bench, "--model", "bm25", "--split", "dev", "--out", tmp_path / "o.json")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "o.json").read_text())["split"] == "dev"


# --- 4. repeated cut-offs ---------------------------------------------------------------------

@pytest.mark.parametrize("ks", ["1,1,1", "1,5,1", "10, 10"])
def test_repeated_k_is_refused(no_model, bench, tmp_path, ks):
    res = run(bench, "--model", "bm25", "--k", ks, "--out", tmp_path / "o.json")
    _one_line_error(res, "--k", "more than once")
    assert not (tmp_path / "o.json").exists()


def test_distinct_k_keep_their_order(bench, tmp_path):
    res = run(bench, "--model", "bm25", "--k", "5,1", "--out", tmp_path / "o.json")
    assert res.exit_code == 0, res.output
    assert res.output.index("R@5=") < res.output.index("R@1=")
    assert res.output.count("R@1=") == 1


# --- 5. third-party DEBUG logging only with -v ------------------------------------------------

def _cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "recipematch.cli", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)


def test_bm25s_debug_lines_only_with_verbose(bench, tmp_path):
    quiet = _cli("evaluate", bench, "--model", "bm25", "--out", tmp_path / "q.json", cwd=tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert "DEBUG" not in quiet.stderr + quiet.stdout, quiet.stderr
    loud = _cli("-v", "evaluate", bench, "--model", "bm25", "--out", tmp_path / "v.json",
                cwd=tmp_path)
    assert loud.returncode == 0, loud.stderr
    assert "DEBUG bm25s:" in loud.stderr, loud.stderr  # the filter is what hides it above
