"""The ImpliRet loader (issue 21, item 2): BEIR folders and a MANIFEST from files shaped like
the release's, bad rows named by file, line and field, and the real slice (item 5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO, require_real_data

from recipematch.beir import load_beir
from recipematch.errors import RecipematchError
from recipematch.external.impliret import SUBSETS, build_folder, build_folders, read_subset

FIX = Path(__file__).parent / "fixtures" / "impliret_mini"
REAL = REPO / "data" / "impliret"


def test_a_subset_becomes_a_beir_folder_with_its_manifest(tmp_path: Path) -> None:
    got = build_folders(FIX, tmp_path, ["unispeaker__arithmetic", "multispeaker__temporal"], revision="abc")
    corpus, queries, qrels = load_beir(tmp_path / "unispeaker__arithmetic")
    assert list(corpus) == ["d00000", "d00001", "d00002", "d00003"] and list(queries)[0] == "q00000"
    assert qrels == {f"q{i:05d}": {f"d{i:05d}": 1} for i in range(4)}
    assert queries["q00002"] == "What did Ana buy for $450?" and corpus["d00002"]["text"].startswith("2024-05-03")
    m = json.loads((tmp_path / "unispeaker__arithmetic" / "MANIFEST.json").read_text())
    assert m == got["unispeaker__arithmetic"]
    assert (m["n_docs"], m["n_queries"], m["n_qrels"], m["n_duplicate_documents"]) == (4, 4, 4, 1)
    assert m["revision"] == "abc" and m["licence"].startswith("MIT") and len(m["input_sha256"]) == 64
    assert (m["style"], m["category"]) == ("unispeaker", "arithmetic")
    assert got["multispeaker__temporal"]["n_docs"] == 3
    before = (tmp_path / "unispeaker__arithmetic" / "corpus.jsonl").read_bytes()
    build_folders(FIX, tmp_path, ["unispeaker__arithmetic"], revision="abc")
    assert (tmp_path / "unispeaker__arithmetic" / "corpus.jsonl").read_bytes() == before  # deterministic
    sub = build_folder(FIX, tmp_path / "head", "unispeaker__arithmetic", max_rows=2)
    assert (sub["n_rows_in_file"], sub["n_rows_used"], sub["n_docs"]) == (4, 2, 2)


@pytest.mark.parametrize("line, message", [
    ('{"pos_document": "x"}', r"x.jsonl:2: field 'question' must be a non-empty string, got None"),
    ('{"pos_document": "  ", "question": "q"}', r"x.jsonl:2: field 'pos_document' must be a non-empty string"),
    ('{"pos_document": 5, "question": "q"}', r"field 'pos_document' must be a non-empty string, got 5"),
    ('["a", "b"]', r"x.jsonl:2: expected a JSON object"),
    ('{"pos_document": "x", "question": ', r"x.jsonl:2: "),
])
def test_a_bad_row_is_named_and_nothing_is_written(tmp_path: Path, line, message) -> None:
    src = tmp_path / "src"
    src.mkdir()
    good = '{"pos_document": "d", "question": "q"}'
    (src / "unispeaker__wknow.jsonl").write_text(good + "\n" + line + "\n")
    shutil.copy(src / "unispeaker__wknow.jsonl", src / "x.jsonl")
    with pytest.raises(RecipematchError, match=message):
        read_subset(src / "x.jsonl")
    with pytest.raises(RecipematchError, match="unispeaker__wknow.jsonl:2"):
        build_folders(src, tmp_path / "out", ["unispeaker__wknow"])
    assert not (tmp_path / "out").exists()


def test_missing_or_unknown_subsets_are_named_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(RecipematchError, match=r"missing subset files .*unispeaker__wknow.jsonl.*multispeaker__wknow"):
        build_folders(FIX, tmp_path / "out", ["unispeaker__arithmetic", "unispeaker__wknow", "multispeaker__wknow"])
    with pytest.raises(RecipematchError, match="unknown subsets"):
        build_folders(FIX, tmp_path / "out", ["unispeaker__poetry"])
    with pytest.raises(RecipematchError, match="named twice"):
        build_folders(FIX, tmp_path / "out", ["unispeaker__arithmetic"] * 2)
    assert not (tmp_path / "out").exists() and len(SUBSETS) == 6


def test_a_folder_is_scored_by_the_librarys_ndcg(tmp_path: Path) -> None:
    from recipematch.benchmarks_data import load_set
    from recipematch.graded import measure_run, parse_measures, topk_run
    from recipematch.scoring import BM25, scored_qrels

    build_folders(FIX, tmp_path, ["multispeaker__temporal"])
    bset = load_set(tmp_path / "multispeaker__temporal", "plain")
    run = topk_run(bset, BM25, 10, bm25_k1=1.5, bm25_b=0.75)
    values, table = measure_run(scored_qrels(bset), run, parse_measures(["nDCG@10"]))
    assert len(table) == 3 and 0 < values["nDCG@10"] <= 1


def test_the_shipped_slice_is_the_upstream_head_and_builds() -> None:
    """data/impliret: the first rows of one subset, copied from the release (MANIFEST.md)."""
    path = require_real_data(REAL / "unispeaker__arithmetic.jsonl")
    manifest = json.loads((REAL / "copy_check.json").read_text())
    rows = read_subset(path)
    assert len(rows) == manifest["n_rows"] > 0
    assert path.stat().st_size == manifest["n_bytes"]
    import hashlib

    assert hashlib.sha256(path.read_bytes()).hexdigest() == manifest["sha256"]
    assert manifest["rows_rechecked"] == 20 and manifest["rows_rechecked_equal"] == 20


def test_an_output_overlapping_the_source_is_refused_and_the_input_kept(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(FIX, src)
    for out in (src, tmp_path):
        with pytest.raises(RecipematchError, match="overlaps the input"):
            build_folder(src, out, "unispeaker__arithmetic")
    assert (src / "unispeaker__arithmetic.jsonl").exists()
