"""Paper scale (issue 11): the full-data path (``data`` params: sample, MathNet folder, JSONL
pool; MathNet-Retrieve tiers materialised by the evalsets stage), the DVC dependency on
``${data.path}``, and the dense-search memory bound at 117,088 x 1,024. Every input is a small
local fixture shaped like the real files; nothing downloads."""

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from recipematch.config import parse_params
from recipematch.errors import RecipematchError
from recipematch.io import read_json
from recipematch.pipeline import corpus as corpus_stage
from recipematch.pipeline import deps
from recipematch.pipeline import evalsets as evalsets_stage
from conftest import Outputs, stage_paths

REPO = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures"
MINI = FIX / "mini_release"
MR = FIX / "beir" / "mathnet_mini"

sys.path.insert(0, str(Path(__file__).parent))
from test_pipeline_e2e import PARAMS  # noqa: E402  (the tiny project's params)


def _project(tmp: Path) -> Outputs:
    rel = tmp / "data" / "peer_release"
    rel.mkdir(parents=True)
    for f in MINI.glob("*.jsonl"):
        shutil.copy(f, rel / f.name)
    for sub in ("crosslingual_eval", "samelang_eval"):
        shutil.copytree(MINI / sub, rel / sub)
    return Outputs(tmp)


def _run(module, params, lay):
    return module.run(parse_params(params).view(module.PARAMS), stage_paths(lay.root, module.main.name, params))


def _mathnet_folder(dest: Path) -> Path:
    """The Hugging Face MathNet layout (parquet shards under data/) built from the fixture
    corpus: same ids as the release, MathNet's column names, one unusable row."""
    rows = [json.loads(line) for line in (MINI / "corpus.jsonl").read_text().splitlines()]
    df = pd.DataFrame({"id": [r["_id"] for r in rows] + ["zz_empty"],
                       "problem_markdown": [r["text"] for r in rows] + ["   "],
                       "solution": ["..."] * (len(rows) + 1),
                       "language": ["en"] * (len(rows) + 1), "topic": ["Algebra"] * (len(rows) + 1)})
    (dest / "data").mkdir(parents=True)
    half = len(df) // 2
    df.iloc[:half].to_parquet(dest / "data" / "train-00000-of-00002.parquet", index=False)
    df.iloc[half:].to_parquet(dest / "data" / "train-00001-of-00002.parquet", index=False)
    return dest


def test_default_and_paper_params_declare_the_data_section():
    for name in ("params.yaml", "params-paper.yaml"):
        r = subprocess.run([sys.executable, "-m", "recipematch", "params", "--check", name], cwd=REPO,
                           capture_output=True, text=True, timeout=120,
                           env={**__import__("os").environ, "PYTHONPATH": str(REPO / "src")})
        assert r.returncode == 0 and "valid" in r.stdout, r.stderr
    from recipematch.config import load_params

    default, paper = load_params(REPO / "params.yaml"), load_params(REPO / "params-paper.yaml")
    assert (default.data.source, default.data.path, default.data.retrieve) == (
        "sample", "data/peer_release/corpus.jsonl", "")
    assert paper.data.source == "mathnet" and paper.data.retrieve
    tiers = {ev.folder for ev in paper.evaluations.values() if "mathnet_retrieve" in ev.folder}
    assert tiers == {f"artifacts/evalsets/mathnet_retrieve/{t}" for t in ("easy", "medium", "hard")}


@pytest.mark.parametrize("edit, message", [
    ({"source": "hub"}, "data.source must be one of"),
    ({"path": "/abs/corpus.jsonl"}, "data.path must be a file or folder inside the project"),
    ({"path": "../elsewhere.jsonl"}, "data.path must be a file or folder inside the project"),
    ({"retrieve": "../mr"}, "data.retrieve must be a file or folder inside the project"),
    ({"path": ""}, "data.path must not be empty"),
])
def test_bad_data_params_are_refused_naming_the_key(edit, message):
    p = copy.deepcopy(PARAMS)
    p["data"].update(edit)
    with pytest.raises(RecipematchError, match=message):
        parse_params(p)


def test_missing_data_section_is_named():
    p = copy.deepcopy(PARAMS)
    del p["data"]
    with pytest.raises(RecipematchError, match="data: missing"):
        parse_params(p)


def test_corpus_stage_reads_each_source(tmp_path):
    lay = _project(tmp_path)
    # sample: today's behaviour, the BEIR sample
    p = copy.deepcopy(PARAMS)
    sample = _run(corpus_stage, p, lay)
    sample_ids = pd.read_parquet(lay.corpus / "corpus.parquet")["doc_id"].tolist()
    assert sample["rows_ok"] == 39 == len(sample_ids)
    # mathnet: a local folder in the Hugging Face layout, read with the MathNet loader
    _mathnet_folder(tmp_path / "data" / "mathnet")
    p["data"] = {"source": "mathnet", "path": "data/mathnet"}
    counts = _run(corpus_stage, p, lay)
    table = pd.read_parquet(lay.corpus / "corpus.parquet")
    assert counts["rows_ok"] == 39 and counts["failed.empty_text"] == 1
    assert table["doc_id"].tolist() == sample_ids and set(table["domain"]) == {"Algebra"}
    record = read_json(lay.corpus / "run_record.json")
    assert record["config"] == {"data.source": "mathnet", "data.path": "data/mathnet"}
    # jsonl: any organic pool with id and text
    pool = tmp_path / "data" / "pool.jsonl"
    pool.write_text(json.dumps({"id": "p1", "text": "Find $x$."}) + "\n" + json.dumps({"id": 2, "text": "Prove."})
                    + "\n" + json.dumps({"text": "no id"}) + "\n")
    p["data"] = {"source": "jsonl", "path": "data/pool.jsonl"}
    counts = _run(corpus_stage, p, lay)
    assert pd.read_parquet(lay.corpus / "corpus.parquet")["doc_id"].tolist() == ["p1", "2"]
    assert counts["failed.missing_id"] == 1


@pytest.mark.parametrize("source, path, message", [
    ("mathnet", "data/nothere", "data.path: .*nothere does not exist .*huggingface-cli download ShadenA/MathNet"),
    ("mathnet", "data/peer_release/corpus.jsonl", "must be a folder of the MathNet dataset"),
    ("jsonl", "data/peer_release", "is a folder; data.source jsonl reads one JSON-lines file"),
    ("sample", "data/nothere.jsonl", "does not exist .*dvc pull data.dvc"),
    ("mathnet", "data/empty_mathnet", "no parquet or JSON files"),
    ("jsonl", "data/peer_release/crosslingual_eval/qrels/test.tsv", "holds no usable problem"),
])
def test_corpus_stage_refuses_a_bad_source_with_one_clear_error(tmp_path, source, path, message):
    lay = _project(tmp_path)
    (tmp_path / "data" / "empty_mathnet").mkdir()
    p = copy.deepcopy(PARAMS)
    p["data"] = {"source": source, "path": path}
    with pytest.raises(RecipematchError, match=message):
        _run(corpus_stage, p, lay)


def test_mathnet_folder_without_a_text_column_is_named(tmp_path):
    lay = _project(tmp_path)
    (tmp_path / "data" / "mn").mkdir()
    pd.DataFrame({"id": ["a"], "solution": ["x"]}).to_parquet(tmp_path / "data" / "mn" / "t.parquet")
    p = copy.deepcopy(PARAMS)
    p["data"] = {"source": "mathnet", "path": "data/mn"}
    with pytest.raises(RecipematchError, match="data.path: .*no text column"):
        _run(corpus_stage, p, lay)


def test_evalsets_materialises_mathnet_retrieve_tiers_as_declared_evaluations(tmp_path):
    from recipematch.benchmarks_data import load_mathnet_retrieve, load_set

    lay = _project(tmp_path)
    shutil.copytree(MR, tmp_path / "data" / "mathnet_retrieve")
    p = copy.deepcopy(PARAMS)
    p["data"] = {"source": "sample", "path": "data/peer_release/corpus.jsonl", "retrieve": "data/mathnet_retrieve"}
    for tier in ("easy", "medium", "hard"):
        p["evaluations"][f"mr_{tier}"] = {"folder": f"artifacts/evalsets/mathnet_retrieve/{tier}", "rule": "plain",
                                          "role": "benchmark"}
    _run(corpus_stage, p, lay)
    counts = _run(evalsets_stage, p, lay)
    assert counts["mathnet_retrieve.tiers"] == 3
    for tier in ("easy", "medium", "hard"):
        src = load_mathnet_retrieve(MR, tier)
        got = load_set(lay.root / p["evaluations"][f"mr_{tier}"]["folder"], "plain")
        assert got.corpus.keys() == src.corpus.keys() and got.query_ids == src.query_ids
        assert got.qrels == src.qrels
        assert got.near_misses == src.near_misses and got.near_misses  # near_misses.tsv carried over
        assert {q: m.get("domain") for q, m in got.query_meta.items()} == {
            q: m.get("domain") for q, m in src.query_meta.items()}
        assert counts[f"mathnet_retrieve.{tier}.n_docs"] == len(src.corpus)
    # the declared tiers feed the exclusion lists like every declared evaluation
    from recipematch.pipeline import gates as gates_stage

    _run(gates_stage, p, lay)
    ids = set(read_json(lay.gates / "exclusion_v2.json")["ids"])
    assert {"m1", "m2"} <= ids
    # same inputs, same bytes
    first = (lay.evalsets / "mathnet_retrieve" / "hard" / "queries.jsonl").read_bytes()
    _run(evalsets_stage, p, lay)
    assert (lay.evalsets / "mathnet_retrieve" / "hard" / "queries.jsonl").read_bytes() == first


def test_evalsets_refuses_a_retrieve_folder_dvc_would_not_hash(tmp_path):
    lay = _project(tmp_path)
    shutil.copytree(MR, tmp_path / "data" / "mathnet_retrieve")
    p = copy.deepcopy(PARAMS)
    p["data"] = {"source": "sample", "path": "data/peer_release/corpus.jsonl", "retrieve": "data/mathnet_retrieve"}
    _run(corpus_stage, p, lay)
    (tmp_path / "dvc.yaml").write_text("stages:\n  evalsets:\n    cmd: python stages/evalsets.py\n"
                                       "    deps:\n      - artifacts/corpus\n")
    with pytest.raises(RecipematchError, match=r"dvc.yaml: stage evalsets reads data/mathnet_retrieve .*"
                                               r"\$\{data.retrieve\}.*deps --write"):
        _run(evalsets_stage, p, lay)
    (tmp_path / "dvc.yaml").write_text("stages:\n  evalsets:\n    cmd: python stages/evalsets.py\n"
                                       "    deps:\n      - artifacts/corpus\n      - ${data.retrieve}\n")
    assert _run(evalsets_stage, p, lay)["mathnet_retrieve.tiers"] == 3
    # a folder without tiers is one clear error
    p["data"]["retrieve"] = "data/peer_release"
    with pytest.raises(RecipematchError, match="holds none of the tier folders"):
        _run(evalsets_stage, p, lay)


def test_full_corpus_becomes_the_cross_language_search_corpus(tmp_path):
    lay = _project(tmp_path)
    pool = tmp_path / "data" / "pool.jsonl"
    extra = [{"id": f"x{i}", "text": f"An extra organic problem number {i}."} for i in range(5)]
    sample = [json.loads(line) for line in (MINI / "corpus.jsonl").read_text().splitlines()]
    pool.write_text("".join(json.dumps({"id": r["_id"], "text": r["text"] + "  \n"}) + "\n"
                            for r in sample + [{"_id": e["id"], "text": e["text"]} for e in extra]))
    p = copy.deepcopy(PARAMS)
    _run(corpus_stage, p, lay)
    base = _run(evalsets_stage, p, lay)
    p["data"] = {"source": "jsonl", "path": "data/pool.jsonl"}
    _run(corpus_stage, p, lay)
    full = _run(evalsets_stage, p, lay)
    # the five extra problems are searched; the golds and queries are added as before
    assert full["crosslingual.n_docs"] == base["crosslingual.n_docs"] + 5
    assert full["crosslingual.n_sample_docs"] == base["crosslingual.n_sample_docs"] + 5
    assert full["crosslingual.n_gold_docs_added"] == base["crosslingual.n_gold_docs_added"]
    docs = [json.loads(line)["_id"] for line in (lay.evalsets / "crosslingual" / "corpus.jsonl").open()]
    assert {"x0", "x4"} <= set(docs)


def test_deps_check_follows_the_data_params(tmp_path):
    """dvc.yaml must list ${data.path} for the corpus stage, and ${data.retrieve} for evalsets
    exactly when params.yaml sets it (DVC cannot hash an empty path)."""
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(REPO / "stages", tmp_path / "stages")
    assert deps.check(tmp_path) == []
    text = (tmp_path / "dvc.yaml").read_text()
    (tmp_path / "dvc.yaml").write_text(text.replace("      - ${data.path}\n",
                                                    "      - data/peer_release/corpus.jsonl\n", 1))
    assert any("stage corpus: data deps [] but" in p and "${data.path}" in p for p in deps.check(tmp_path))
    (tmp_path / "dvc.yaml").write_text(text)
    params = (tmp_path / "params.yaml").read_text()
    (tmp_path / "params.yaml").write_text(params.replace('  retrieve: ""', "  retrieve: data/mathnet_retrieve"))
    problems = deps.check(tmp_path)
    assert any(p.startswith("stage evalsets: data deps [] but") and "${data.retrieve}" in p for p in problems)
    deps.write(tmp_path)
    assert deps.check(tmp_path) == []
    assert "      - ${data.retrieve}\n" in (tmp_path / "dvc.yaml").read_text()


def test_dense_search_at_paper_corpus_size_stays_under_2_gb():
    """Exact dense ranking over 117,088 x 1,024 float32 embeddings (the paper's MathNet-Retrieve
    corpus at Qwen3-Embedding-0.6B's width; paper Section 3), queries in blocks, in a fresh
    process: every planted gold is found at rank 0 and the peak RSS stays under 2 GB."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_scale import memory_check

    m = memory_check(117_088, 1024, 64, seed=3, timeout=300)
    assert m["n_docs"] == 117_088 and m["embeddings_bytes"] == 117_088 * 1024 * 4
    assert m["ranks_all_zero"]
    assert m["peak_rss_bytes"] < 2 * 10**9, m


def test_gpu_check_imports_nothing_the_gpu_machine_lacks():
    """The GPU machine has torch, transformers and sentence-transformers but no dvc, mlflow or
    great-expectations: the project modules gpu_check uses must not import them."""
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--imports-only"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["forbidden_imported"] == []
    assert "recipematch.training" in out["recipematch_modules"] and "recipematch.beir" in out["recipematch_modules"]
    assert not any(m.startswith("recipematch.retrieval") for m in out["recipematch_modules"])
