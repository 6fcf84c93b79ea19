"""Stage ``llm@<prompt>``: LLM-written pairs for one prompt (backend, judge, self-test gate; paper Section 3,
Appendix F)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click

from recipematch.errors import RecipematchError
from recipematch.io import write_json, write_jsonl
from recipematch.llm.serving import open_server, ServerSpec
from recipematch.llm.selftest import recorded_items_from_store, self_test
from recipematch.llm.replay import ReplayBackend
from recipematch.llm.recordings import read_jsonl
from recipematch.llm.prompts import load_custom_prompt
from recipematch.llm.pipeline import build_generation_requests, run_llm_pairs
from recipematch.pipeline.door import StagePaths, progress_option, stage, write_run_record
from recipematch.depth import paraphrase_depth
from recipematch.pipeline.inputs import corpus_rows, load_exclusion
from recipematch.rules import negatives_for_prompt

PARAMS = ("seed", "llm", "gates.active")


def _backends(cfg, lay: StagePaths):
    """``(generator, judge)`` backends: the replay store, or OpenAI-compatible servers (a
    ``vllm serve`` among them; the judge may live on its own server with its own key).

    Raises:
        RecipematchError: a server that cannot be reached or does not serve the model
            (probed once before any call), or a named key variable that is not set.
    """
    if cfg.backend == "replay":
        b = ReplayBackend(lay.recordings / "recordings.jsonl")
        return b, b

    def spec(url: str, model: str, key_env: str) -> ServerSpec:
        return ServerSpec(url, model, api_key_env=key_env, concurrency=cfg.concurrency, max_retries=cfg.max_retries,
                          timeout_s=cfg.timeout_s, deadline_s=cfg.deadline_s,
                          max_response_bytes=cfg.max_response_bytes, chat_template_kwargs=dict(cfg.chat_template_kwargs) or None)

    gen = open_server(spec(cfg.base_url, cfg.model_id, cfg.api_key_env), probe=True)
    judge = open_server(spec(cfg.judge_base_url or cfg.base_url, cfg.judge_model_id,
                             cfg.judge_api_key_env or cfg.api_key_env), probe=True)
    return gen, judge


def _serving(cfg) -> dict:
    """Request options shared by generation, judging and the self-test (part of each
    request's key in the call store, so they must agree everywhere)."""
    ctk = dict(cfg.chat_template_kwargs) or None
    return {"chat_template_kwargs": ctk, "judge_chat_template_kwargs": ctk,
            "allow_reasoning_preamble": cfg.allow_reasoning_preamble}


def run(p, lay: StagePaths, prompt: str, *, progress: bool = True) -> dict:
    """Stage 4c: LLM-written pairs for one prompt: generate → parse → judge → keep."""
    cfg = p.llm
    if prompt not in cfg.prompts:
        raise RecipematchError(f"--prompt {prompt!r} is not in llm.prompts {list(cfg.prompts)}")
    seed = p.seed
    ex, ex_path = load_exclusion(lay, p.gates.active)
    excluded = set(ex.ids)
    corpus = corpus_rows(lay)
    sources = [(r["doc_id"], r["text"]) for r in corpus if r["doc_id"] not in excluded]
    custom = _recipe_prompt(cfg, lay, prompt)
    backend, judge_backend = _backends(cfg, lay)
    out = lay.out
    out.mkdir(parents=True, exist_ok=True)
    n_neg = cfg.n_neg if custom is not None else negatives_for_prompt(prompt, cfg.n_neg)
    sampling = {"temperature": cfg.temperature, "top_p": cfg.top_p, "max_tokens": cfg.max_tokens}
    self_test = _llm_self_test(cfg, lay, backend, sources, prompt=prompt, n_neg=n_neg, sampling=sampling, seed=seed,
                               store_path=out / "calls.jsonl", custom=custom)
    rows, failures, counts = run_llm_pairs(
        sources, prompt_name=custom.name if custom else prompt, n_pos=cfg.n_pos, n_neg=n_neg, backend=backend,
        judge_backend=judge_backend, store_path=out / "calls.jsonl", model_id=cfg.model_id,
        judge_model_id=cfg.judge_model_id, sampling=sampling, seed=seed, require_tags=cfg.require_tags,
        progress=progress, custom_prompt=custom, **_serving(cfg))
    write_jsonl(lay.pair_file, rows)
    write_jsonl(out / "failures.jsonl", failures)
    # how many answers came from the store on this run depends on whether it resumed: such
    # counts are not metrics, so a resumed run and a fresh one give identical metrics
    this_run = {"self_test": self_test, **{f"{part}.{k}": counts[part].pop(k) for part in ("generate", "judge")
                                          for k in ("from_store", "sent") if k in counts.get(part, {})}}
    counts = {"sources_requested": len(sources), "skipped_excluded": len(corpus) - len(sources),
              "paraphrase_depth_char3_jaccard": paraphrase_depth(rows), **counts}
    write_json(lay.metrics, counts)
    write_run_record(out, f"llm:{prompt}", asdict(cfg),
                     {"corpus": lay.corpus / "corpus.parquet", "exclusion": ex_path,
                      "recordings": lay.recordings / "recordings.jsonl"},
                     {"rows": len(rows), "failures": len(failures)})
    # facts of this run (self-test, answers taken from the store) stay out of the DVC
    # output, so a resumed run and a fresh one hash the same
    write_json(lay.scratch / f"{prompt}.this_run.json", this_run)
    return {**counts, "this_run": this_run}


def _recipe_prompt(cfg, lay: StagePaths, prompt: str):
    """The user's recipe prompt (``llm.recipe_prompt``) when ``prompt`` is the recipe's
    pair key ``d1_recipe``, else ``None`` (the shipped prompt).

    Raises:
        RecipematchError: the sidecar's own errors (missing slot, schema, file), or a
            prompt that writes no near-misses (the recipe arm trains on its own near-misses).
    """
    if prompt != "d1_recipe" or not cfg.recipe_prompt:
        return None

    custom = load_custom_prompt(lay.root / cfg.recipe_prompt)
    if custom.role != "generator" or not custom.has_near_misses:
        raise RecipematchError(f"llm.recipe_prompt: {cfg.recipe_prompt} must be a generator prompt whose answer "
                               "declares near_misses (the recipe arm trains on its own near-misses)")
    return custom


def _llm_self_test(cfg, lay: StagePaths, backend, sources, *, prompt: str, n_neg: int, sampling, seed: int,
                   store_path: Path, limit: int = 3, custom=None) -> dict:
    """Worker self-test gate (the judging design note): before writing any output the
    backend re-answers up to ``limit`` already-recorded requests and must match them byte
    for byte. Recorded answers come from this stage's call store (a resumed or repeated
    run) or, for the replay backend, from its recordings; with neither (a first run against
    a live model) the gate records that it had nothing to check.

    Raises:
        RecipematchError: a mismatch (the worker would write answers unlike its recorded ones).
    """
    reqs = build_generation_requests(sources, prompt_name=custom.name if custom else prompt, n_pos=cfg.n_pos,
                                     n_neg=n_neg, model_id=cfg.model_id, sampling=sampling, seed=seed,
                                     chat_template_kwargs=_serving(cfg)["chat_template_kwargs"], custom_prompt=custom)
    items = recorded_items_from_store(reqs, store_path, limit) if store_path.exists() else []
    origin = "call_store"
    if not items and cfg.backend == "replay":
        recs = {(r["prompt_sha256"], r["source_id"], r["variant"]): r["raw_text"]
                for r in read_jsonl(lay.recordings / "recordings.jsonl")}
        items = [(r, recs[(r.prompt_sha256, r.source_id, r.variant)]) for r in reqs
                 if (r.prompt_sha256, r.source_id, r.variant) in recs][:limit]
        origin = "recordings"
    if not items:
        return {"checked": 0, "ok": None, "origin": "nothing recorded yet"}
    ok, mismatches = self_test(backend, items)
    if not ok:
        raise RecipematchError(f"llm[{prompt}] self-test failed: the backend did not reproduce {len(mismatches)} of "
                               f"{len(items)} recorded answers (first: source {mismatches[0]['source_id']}, "
                               f"error {mismatches[0]['error']}); no output written")
    return {"checked": len(items), "ok": True, "origin": origin}


main = stage("llm", PARAMS, click.option("--prompt", required=True, help="Prompt name, e.g. d1_recipe."),
             progress_option, reads=("corpus", "gates", "recordings"), writes=("out", "pair_file", "metrics", "scratch"))(run)
