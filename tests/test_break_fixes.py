"""Regression tests for what a hostile user broke in the stage layer and the evaluate command
(each failed with a traceback or a silently wrong number before)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import stage_args
from click.testing import CliRunner

from recipematch.beir import write_beir
from recipematch.errors import RecipematchError

FIX = Path(__file__).parent / "fixtures" / "beir"


def _evaluate(*args):
    from recipematch.eval_cli import evaluate

    return CliRunner().invoke(evaluate, [str(a) for a in args])


def _plain(tmp_path, corpus, queries=None, qrels=None, meta=None):
    queries = queries or {"q1": "alpha beta", "q2": "gamma delta"}
    qrels = qrels or {"q1": {"d1": 1}, "q2": {"d2": 1}}
    write_beir(tmp_path / "set", corpus, queries, qrels, query_meta=meta)
    return tmp_path / "set"


def test_yaml_complex_key_is_a_clear_error(tmp_path):
    from recipematch.config import load_yaml

    p = tmp_path / "params.yaml"
    p.write_text("seed: 1\n? [a, b]\n: 1\n")
    with pytest.raises(RecipematchError, match="a key must be a plain scalar"):
        load_yaml(p)


def test_missing_upstream_file_is_one_line_naming_it(tmp_path, repo_root):
    (tmp_path / "params.yaml").write_text((repo_root / "params.yaml").read_text())
    r = subprocess.run([sys.executable, "-m", "recipematch", "corpus", "--root", str(tmp_path), *stage_args("corpus")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "data/peer_release/corpus.jsonl does not exist (fetch the raw inputs with `dvc pull data.dvc`" in r.stderr
    r = subprocess.run([sys.executable, "-m", "recipematch", "gates", "--root", str(tmp_path), *stage_args("gates")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "corpus.parquet does not exist: run the stage that writes it first" in r.stderr


def test_bm25_parameters_must_be_finite(tmp_path):
    folder = _plain(tmp_path, {"d1": {"text": "alpha beta"}, "d2": {"text": "gamma delta"}})
    res = _evaluate(folder, "--model", "bm25", "--bm25-k1", "nan", "--out", tmp_path / "o.json")
    assert res.exit_code == 2 and "--bm25-k1 must be a finite number" in res.output
    assert not (tmp_path / "o.json").exists()


def test_all_blank_corpus_is_refused_for_bm25(tmp_path):
    folder = _plain(tmp_path, {"d1": {"text": " "}, "d2": {"text": ""}})
    res = _evaluate(folder, "--model", "bm25", "--out", tmp_path / "o.json")
    assert res.exit_code == 2 and "every corpus document is blank" in res.output


def test_mixed_type_metadata_is_written_as_text(tmp_path):
    folder = _plain(tmp_path, {"d1": {"text": "alpha beta"}, "d2": {"text": "gamma delta"}},
                    meta={"q1": {"country": 5, "big": 2**70}, "q2": {"country": "x", "big": 1}})
    res = _evaluate(folder, "--model", "bm25", "--out", tmp_path / "o.json", "--per-query", tmp_path / "p.parquet")
    assert res.exit_code == 0, res.output
    import pandas as pd

    df = pd.read_parquet(tmp_path / "p.parquet")
    assert list(df["country"]) == ["5", "x"] and list(df["big"]) == [str(2**70), "1"]


def test_conflicting_language_tags_of_one_gold_are_refused(tmp_path):
    corpus = {"q1": {"text": "eins"}, "d3": {"text": "un"}}
    meta = {"q1": {"lang": "de", "cluster_id": "c", "gold_ids": ["d3", "d3"], "gold_langs": ["fr", "en"]}}
    folder = _plain(tmp_path, corpus, {"q1": "eins"}, {"q1": {"d3": 1}}, meta)
    res = _evaluate(folder, "--model", "bm25", "--rule", "crosslingual_strict", "--out", tmp_path / "o.json")
    assert res.exit_code == 2 and "lists 'd3' twice with different language tags" in res.output


def test_qrels_that_is_a_folder_is_refused(tmp_path):
    folder = _plain(tmp_path, {"d1": {"text": "alpha beta"}, "d2": {"text": "gamma delta"}})
    (folder / "qrels" / "test.tsv").unlink()
    (folder / "qrels" / "test.tsv").mkdir()
    res = _evaluate(folder, "--model", "bm25", "--out", tmp_path / "o.json")
    assert res.exit_code == 2 and "is a folder" in res.output


def test_unit_norm_is_required_of_cached_embeddings(tmp_path):
    import numpy as np

    from recipematch.retrieval.cache import EmbeddingCache

    cache = EmbeddingCache(tmp_path)
    np.save(tmp_path / "k.npy", np.zeros((5, 384), dtype=np.float32))
    with pytest.warns(UserWarning, match="not unit vectors"):
        assert cache.load("k", 5) is None
    (tmp_path / "d.npy").mkdir()
    with pytest.warns(UserWarning, match="is a folder"):
        assert cache.load("d", 5) is None
    assert not (tmp_path / "d.npy").exists()


@pytest.mark.parametrize("edit, needle", [
    (lambda p: p.update(arms=[]), "arms must be distinct names"),
    (lambda p: p["llm"].update(prompts=[]), "llm.prompts must be distinct names"),
    (lambda p: p["report"]["tier_d1"].update(ks=[]), "report.tier_d1.ks: list at least one"),
    (lambda p: p["report"]["tier_d1"].update(ks=[1, 7]), "report.tier_d1.ks [7] are not in evaluate.ks"),
    (lambda p: p["evaluations"]["tier_d1"].update(label="x"), "evaluations.tier_d1.label: the report's rows moved to `report`"),
    # breaker: a label is a Markdown cell and a matplotlib title
    (lambda p: p["report"]["tier_d1"].update(label="tier | one"), "report.tier_d1.label 'tier | one': a label is shown"),
    (lambda p: p["report"]["tier_d1"].update(label="tier\nsecond line"), "holds no '|', '$' or control characters"),
    (lambda p: p["report"]["tier_d1"].update(label="cost $\\foo$ set"), "(found ['$'])"),
    (lambda p: p["report"]["tier_d1"].update(label="   "), "and not only blanks"),
    (lambda p: p["report"]["tier_d1"].update(ks=[5, 1]), "report.tier_d1.ks [5, 1]: list each cut-off once, ascending"),
    (lambda p: p["report"]["tier_d1"].update(ks=[1, 1]), "report.tier_d1.ks [1, 1]: list each cut-off once"),
    (lambda p: p["evaluate"].update(ks=[1, 1, 5]), "lists a cut-off twice"),
    (lambda p: p["budget"].update(shared_sources=["recipe"]), "two or more distinct named arms"),
    (lambda p: p["llm"].update(api_key_env="sk-123 secret"), "must be the NAME of an environment variable"),
    (lambda p: p["mlflow"].update(tracking_uri="http://host port"), "must not contain blanks"),
    (lambda p: p["evaluations"]["tier_d1"].update(folder="."), "must be a folder inside the project"),
])
def test_list_and_name_bounds(repo_root, edit, needle):
    import re

    from recipematch.config import load_yaml, parse_params

    params = load_yaml(repo_root / "params.yaml")
    edit(params)
    with pytest.raises(RecipematchError, match=re.escape(needle)):
        parse_params(params)


def test_train_model_must_be_a_model_folder_or_cached(tmp_path):
    from recipematch.pipeline.models import resolve_model

    assert resolve_model("All-MiniLM-L6-v2").endswith("model") or Path(resolve_model("All-MiniLM-L6-v2")).is_dir()
    with pytest.raises(RecipematchError, match="is not a sentence-transformers model folder"):
        resolve_model(str(tmp_path))
    with pytest.raises(RecipematchError, match="neither a local model folder nor a model in the local"):
        resolve_model("nobody/no-such-model")
