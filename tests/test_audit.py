"""`recipematch audit init` + the stages its dvc.yaml lists, end to end on a tiny benchmark
written on disk, against a local OpenAI-compatible server on 127.0.0.1 that answers
deterministically under the D1 recipe, the D4 control and the judge prompt; then the bad
inputs (unknown qrels ids, a recipe prompt lacking a slot, sources that cannot fill the
budget, an unreachable server) and the API key that must never be written anywhere."""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from recipematch.audit import audit_dvc_yaml, init_audit
from recipematch.cli import main as cli
from recipematch.config import load_yaml, parse_params
from recipematch.errors import RecipematchError

REPO = Path(__file__).resolve().parents[1]
SECRET = "sk-audit-test-3f9c1e77d2b04a"  # the key the server requires; must appear in no written file
KEY_ENV = "RECIPEMATCH_AUDIT_TEST_KEY"
MODEL = "fixture/echo-1"
VOCAB = [f"w{i}" for i in range(400)]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(14)) + f" = {rng.randint(2, 999)}"


def recipe_style(text: str) -> str:
    return f"Consider the following problem carefully. {text} Express your final answer in simplest form."


def near_miss(text: str, k: int) -> str:
    words = text.split()
    words[k] = f"z{k}"
    return recipe_style(" ".join(words))


def control_style(text: str) -> str:
    return f"In other words: {text}"


class EchoServer:
    """/v1/chat/completions: a D1 answer (one recipe-style positive, three recipe-style
    near-misses), a D4 answer (one restatement) or a judge verdict, each a function of the
    request's text; /v1/models lists MODEL. Every request must carry ``Bearer SECRET``."""

    def __init__(self) -> None:
        self.near: set[str] = set()
        self.requests = 0
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _send(self, code, obj):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                if self.headers.get("Authorization") != f"Bearer {SECRET}":
                    return self._send(401, {"error": "no key"})
                self._send(200, {"object": "list", "data": [{"id": MODEL}]})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.headers.get("Authorization") != f"Bearer {SECRET}":
                    return self._send(401, {"error": "no key"})
                outer.requests += 1
                text = outer.answer(body["messages"][0]["content"], body["messages"][-1]["content"])
                self._send(200, {"id": "x", "object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def answer(self, system: str, user: str) -> str:
        if user.startswith("Problem A:\n"):
            cand = user.split("Problem B:\n", 1)[1].rstrip("\n")
            ok = cand not in self.near
            return json.dumps({"verdict": "equivalent" if ok else "not_equivalent", "confidence": 0.9,
                               "reason": "fixture"})
        if user.startswith("Original problem:\n"):
            prob = user[len("Original problem:\n"):]
            nms = [near_miss(prob, k) for k in range(3)]
            self.near.update(nms)
            return json.dumps({"original_problem": prob,
                               "equivalent_variants": [{"problem": recipe_style(prob), "justification": "j",
                                                        "tags": ["t"]}],
                               "near_miss_variants": [{"problem": n, "justification": "j", "tags": ["t"]}
                                                      for n in nms]})
        prob = user[len("Problem to adapt:\n"):]
        return json.dumps({"original_problem": prob, "restatements": [
            {"problem": control_style(prob), "audience": "a", "justification": "j"}]})

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def write_inputs(root: Path, *, n_sources: int = 40) -> dict[str, Path]:
    """A 12-query benchmark (golds: recipe-style rewrites of the queries; 20 recipe-style
    distractors), an organic pool of ``n_sources`` problems plus 3 that overlap the benchmark
    (two repeat a query's text, one reuses a query id), and a small params template."""
    rng = random.Random(5)
    bench = root / "bench"
    (bench / "qrels").mkdir(parents=True)
    queries = {f"b{i:03d}": _text(rng) for i in range(12)}
    corpus = [{"_id": f"g{i:03d}", "title": "", "text": recipe_style(t)} for i, t in enumerate(queries.values())]
    corpus += [{"_id": f"d{i:03d}", "title": "", "text": recipe_style(_text(rng))} for i in range(20)]
    (bench / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (bench / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (bench / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"b{i:03d}\tg{i:03d}\t1\n" for i in range(12)))
    pool = [{"id": f"s{i:03d}", "text": _text(rng)} for i in range(n_sources)]
    pool += [{"id": "dup0", "text": queries["b000"]}, {"id": "dup1", "text": queries["b001"]},
             {"id": "b002", "text": _text(rng)}]
    (root / "sources.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pool))
    tpl = load_yaml(REPO / "params.yaml")
    tpl["train"].update({"batch_size": 4, "mini_batch_size": 4, "max_seq_length": 32, "max_dev_triplets": 50})
    tpl["evaluate"].update({"max_seq_length": 48})
    tpl["stats"]["n_boot"] = 200
    tpl["budget"]["rows"] = 8
    tpl["style"]["n_boot"] = 200
    (root / "template.yaml").write_text(yaml.safe_dump(tpl))
    return {"benchmark": bench, "sources": root / "sources.jsonl", "template": root / "template.yaml"}


def stage_commands(wd: Path) -> list[list[str]]:
    """The commands of the project's dvc.yaml, matrices expanded from its params.yaml, in
    file order (which is dependency order)."""
    doc = yaml.safe_load((wd / "dvc.yaml").read_text())
    params = yaml.safe_load((wd / "params.yaml").read_text())
    out = []
    for st in doc["stages"].values():
        m = st.get("matrix")
        if not m:
            out.append(shlex.split(st["cmd"]))
            continue
        (var, ref), = m.items()
        path = ref[2:-1].split(".")
        values = params
        for part in path:
            values = values[part]
        for v in values:
            out.append(shlex.split(st["cmd"].replace(f"${{item.{var}}}", v)))
    return out


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    root = tmp_path_factory.mktemp("audit")
    inp = write_inputs(root)
    wd = root / "project"
    os.environ[KEY_ENV] = SECRET
    runner = CliRunner()
    logs = []
    try:
        with EchoServer() as server:
            r = runner.invoke(cli, ["audit", "init", str(wd), "--benchmark", str(inp["benchmark"]), "--recipe",
                                    "d1_recipe", "--sources", str(inp["sources"]), "--base-url", server.base_url,
                                    "--model", MODEL, "--api-key-env", KEY_ENV, "--seeds", "1", "--rows", "8",
                                    "--template", str(inp["template"])])
            assert r.exit_code == 0, r.output
            init_out = json.loads(r.stdout.split("\nnext:")[0]) if "\nnext:" in r.stdout else json.loads(r.stdout)
            logs.append(r.output)
            for cmd in stage_commands(wd):
                assert cmd[0] == "recipematch"
                r = runner.invoke(cli, [*cmd[1:2], "--root", str(wd), *cmd[2:]])
                logs.append(r.output)
                assert r.exit_code == 0, f"{cmd}: {r.output}"
    finally:
        os.environ.pop(KEY_ENV, None)
    return {"wd": wd, "inputs": inp, "init": init_out, "logs": logs, "requests": server.requests}


def test_init_writes_a_dvc_project_over_recipematch_stages(audited):
    wd = audited["wd"]
    assert (wd / ".dvc").is_dir() and (wd / ".git").is_dir()
    for tracked in ("data/benchmark.dvc", "data/sources.jsonl.dvc"):
        assert (wd / tracked).is_file()
    p = parse_params(load_yaml(wd / "params.yaml"))
    assert p.arms == ("recipe", "cell") and (p.positives, p.negatives, p.negatives_volume) == ("d4", "recipe", "full")
    assert p.data.source == "jsonl" and p.data.path == "data/sources.jsonl"
    assert p.evaluations["benchmark"].role == "benchmark" and p.evaluations["benchmark"].folder == "data/benchmark"
    assert p.llm.api_key_env == KEY_ENV and p.llm.backend == "openai"
    # the same stages as the main dvc.yaml: each audit stage declares the params the main one does
    main = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    audit = yaml.safe_load((wd / "dvc.yaml").read_text())["stages"]
    for name, st in audit.items():
        if name == "audit":
            continue
        assert sorted(map(str, st.get("params", []))) == sorted(map(str, main[name].get("params", []))), name
        outs = lambda s: sorted(o if isinstance(o, str) else next(iter(o)) for o in s.get("outs", []))  # noqa: E731
        assert outs(st) == outs(main[name]), name
    assert audited["init"]["sources"] == {"sources": 43, "overlapping": 3, "remaining": 40}


def _ranks(wd: Path, arm: str):
    import pandas as pd

    return pd.read_parquet(wd / "artifacts" / "eval" / arm / "benchmark.parquet")


def test_audit_json_matches_the_rank_files(audited):
    wd = audited["wd"]
    a = json.loads((wd / "audit.json").read_text())
    rs = a["recipe_sensitivity"]
    # recomputed here from the per-query ranks (rank 1 = the gold found first)
    hit = {arm: 100.0 * (_ranks(wd, arm)["rank"] == 1).mean() for arm in ("recipe", "cell", "base", "bm25")}
    assert rs["estimate"] == pytest.approx(hit["recipe"] - hit["cell"], abs=1e-9)
    assert rs["low"] <= rs["estimate"] <= rs["high"]
    assert rs["n_queries"] == 12 and rs["n_seeds_a"] == 1 and rs["n_boot"] == 200 and rs["level"] == 0.95
    for arm in ("recipe", "cell", "base", "bm25"):
        assert a["scores"][arm]["benchmark.R@1"]["mean"] == pytest.approx(hit[arm], abs=1e-3)
    assert a["did"] is None
    assert a["arms"] == {"recipe": {"cell": "d1xrecipe", "prompt": "d1_recipe"},
                         "cell": {"cell": "d4xrecipe-full", "prompt": "d4_restatement"}}
    # the gates removed exactly the three planted overlaps; every kept source got a recipe pair
    assert a["gates"] == {"active": "v2", "sources": 43, "sources_removed": 3, "sources_kept": 40}
    assert a["pairs"] == {"d1_recipe": 40, "d4_restatement": 40}
    assert a["seeds"] == [42] and a["budget"]["rows"] == 8
    from recipematch.llm.prompts import load_prompt

    assert a["prompts"]["recipe"]["sha256"] == load_prompt("d1_recipe").sha256
    assert a["data"]["benchmark"]["queries"] == 12 and a["data"]["benchmark"]["documents"] == 32
    # the golds are written in one recognisable style: the probe separates them from the queries
    assert a["style_probe"]["auc"] > 0.9
    assert (wd / "reports" / "audit.png").stat().st_size > 1000
    md = (wd / "reports" / "audit.md").read_text()
    assert f"{rs['estimate']:+.2f} points" in md


def test_the_key_lands_nowhere(audited):
    wd = audited["wd"]
    assert audited["requests"] > 0  # the server refused every request without the key
    hits = []
    for f in wd.rglob("*"):
        if f.is_file() and SECRET.encode() in f.read_bytes():
            hits.append(str(f))
    assert hits == []
    assert not any(SECRET in log for log in audited["logs"])
    assert KEY_ENV in (wd / "params.yaml").read_text()


def test_unknown_qrels_id_is_refused(tmp_path):
    inp = write_inputs(tmp_path)
    with open(inp["benchmark"] / "qrels" / "test.tsv", "a") as f:
        f.write("b003\tg999\t1\n")
    with pytest.raises(RecipematchError, match=r"corpus-id 'g999' is not in corpus.jsonl"):
        init_audit(tmp_path / "wd", benchmark=inp["benchmark"], recipe="d1_recipe", sources=inp["sources"],
                   base_url="http://127.0.0.1:9/v1", model=MODEL, template=inp["template"], git=False)
    assert not (tmp_path / "wd").exists()


def test_recipe_prompt_without_a_needed_slot_is_refused(tmp_path):
    inp = write_inputs(tmp_path)
    (tmp_path / "mine.user.txt").write_text("Rewrite it, {n_pos} times.\n")
    (tmp_path / "mine.prompt.yaml").write_text(yaml.safe_dump({
        "user": "mine.user.txt", "slots": ["n_pos"],
        "answer": {"positives": {"key": "variants"}, "near_misses": {"key": "misses"}}}))
    with pytest.raises(RecipematchError, match=r"needs slot\(s\) \['problem'\]"):
        init_audit(tmp_path / "wd", benchmark=inp["benchmark"], recipe=str(tmp_path / "mine.prompt.yaml"),
                   sources=inp["sources"], base_url="http://127.0.0.1:9/v1", model=MODEL, template=inp["template"],
                   git=False)


def test_a_custom_recipe_is_copied_and_named_in_params(tmp_path):
    inp = write_inputs(tmp_path)
    (tmp_path / "mine.user.txt").write_text("Rewrite:\n{problem}\n")
    (tmp_path / "mine.prompt.yaml").write_text(yaml.safe_dump({
        "user": "mine.user.txt", "slots": ["problem"],
        "answer": {"positives": {"key": "variants"}, "near_misses": {"key": "misses"}}}))
    init_audit(tmp_path / "wd", benchmark=inp["benchmark"], recipe=str(tmp_path / "mine.prompt.yaml"),
               sources=inp["sources"], base_url="http://127.0.0.1:9/v1", model=MODEL, template=inp["template"],
               git=False)
    p = parse_params(load_yaml(tmp_path / "wd" / "params.yaml"))
    assert p.llm.recipe_prompt == "data/recipe/mine.prompt.yaml"
    assert (tmp_path / "wd" / "data" / "recipe" / "mine.user.txt").read_text() == "Rewrite:\n{problem}\n"
    assert "data/recipe" in yaml.safe_load((tmp_path / "wd" / "dvc.yaml").read_text())["stages"]["llm"]["deps"]


def test_too_few_sources_for_the_budget_stop_at_init(tmp_path):
    inp = write_inputs(tmp_path, n_sources=5)
    with pytest.raises(RecipematchError, match=r"3 of 8 sources overlap the benchmark; the 5 left cannot fill "
                                               r"budget.rows=8"):
        init_audit(tmp_path / "wd", benchmark=inp["benchmark"], recipe="d1_recipe", sources=inp["sources"],
                   base_url="http://127.0.0.1:9/v1", model=MODEL, rows=8, template=inp["template"], git=False)


def test_unreachable_server_names_the_url(tmp_path):
    inp = write_inputs(tmp_path)
    wd = tmp_path / "wd"
    url = "http://127.0.0.1:9/v1"  # discard port: nothing listens
    init_audit(wd, benchmark=inp["benchmark"], recipe="d1_recipe", sources=inp["sources"], base_url=url, model=MODEL,
               rows=8, template=inp["template"], git=False)
    runner = CliRunner()
    for cmd in stage_commands(wd):
        r = runner.invoke(cli, [*cmd[1:2], "--root", str(wd), *cmd[2:]])
        if cmd[1] == "llm":
            assert r.exit_code == 2
            assert url in r.output or "127.0.0.1:9" in r.output
            return
        assert r.exit_code == 0, r.output
    raise AssertionError("no llm stage in the audit's dvc.yaml")


def test_the_embedded_default_is_one_audit_configuration(tmp_path):
    """The main params.yaml, read as an audit of its own easy tier with the D1 recipe (replay):
    every experiment key is the main one's; what differs is what makes it an audit (the arms
    recipe and cell = D4 x recipe near-misses, the declared benchmark folder, the source pool
    key, no embedded tier built)."""
    from recipematch.audit import audit_params

    main = load_yaml(REPO / "params.yaml")
    a = audit_params(main, control="d4_restatement", recipe_sidecar="", backend="replay", base_url="", model=None,
                     api_key_env="", real=True, base_model=None, seeds=None, rows=None)
    audit_keys = {"arms", "positives", "negatives", "negatives_volume", "evaluations", "data", "evalsets", "llm",
                  "style", "budget"}
    for k in set(main) - audit_keys:
        assert a[k] == main[k], k
    assert {k: v for k, v in a["llm"].items() if k not in ("api_key_env", "recipe_prompt")} == main["llm"]
    assert a["budget"] == main["budget"]  # shared_sources is [] in both
    assert {k: v for k, v in a["style"].items() if k != "tracking_set"} == {
        k: v for k, v in main["style"].items() if k != "tracking_set"}
    assert a["evalsets"] == {**main["evalsets"], "n_heldout": 0}
    assert a["arms"] == ["recipe", "cell"] and a["negatives"] == "recipe" and a["negatives_volume"] == "full"
    doc = audit_dvc_yaml(a)
    assert "recordings" in doc["stages"] and "artifacts/recordings" in doc["stages"]["llm"]["deps"]
