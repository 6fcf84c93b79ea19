"""Stage ``judge2@<prompt>``: the two-judge control (paper Section 3 and Appendix C).

A second judge, another vendor's model behind its own backend, re-judges every candidate
of one LLM arm under the same judge prompt: every kept pair, and the candidates the first
judge rejected (the agreement table needs them). Writes, in ``artifacts/judge2/<prompt>/``:

* ``pairs.jsonl``: the two-judge file, the rows whose positive both judges accept, with
  only the near-misses both accept (copied to ``artifacts/judge2_cells/<prompt>.jsonl`` for
  the cells under ``judge2.cells: both``; that file is empty under ``first``, so measuring
  agreement alone reruns no cell);
* ``judgments.jsonl`` (one second-judge record per candidate), ``failures.jsonl``,
  ``calls.jsonl`` (the second judge's call store: a rerun pays nothing twice),
  ``recordings.jsonl`` (the store's answers as replay recordings: copy it to
  ``recordings/judge2/<prompt>.jsonl`` to replay the run), ``status.json``;

and the agreement table to ``metrics/judge2_<prompt>.json``: per role and overall, exact
agreement on the keep decision, Cohen's kappa (scikit-learn), the 0-vs-2 disagreements
(both judged, opposite verdicts) and the accept rates (the paper: the second judge accepted
86% of the recipe arm's positives; the two-judge file has 5,398 rows).

With ``judge2.enabled: false`` (the default) the stage only writes ``status.json``, the
empty cells file and the metrics file saying so, in well under a second of work. With ``backend: replay`` the answers
come from ``recordings/judge2/<prompt>.jsonl``, recordings keyed like the first judge's
(judge-prompt SHA-256, source id, candidate key) and carrying the second judge's model id;
the sample ships none, and the stage says so.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click

from recipematch.errors import RecipematchError
from recipematch.io import atomic_write_text, read_jsonl_strict, write_json, write_jsonl
from recipematch.llm.serving import open_server, ServerSpec
from recipematch.llm.replay import ReplayBackend
from recipematch.llm.recordings import recordings_from_store
from recipematch.llm.judge2 import arm_candidates, run_second_judge
from recipematch.pipeline.door import StagePaths, progress_option, stage, write_run_record
from recipematch.pipeline.inputs import corpus_rows

PARAMS = ("seed", "llm.prompts", "judge2")

#: Derived files rewritten on every run (the call store is kept: it is what makes reruns free).
_DERIVED = ("pairs.jsonl", "judgments.jsonl", "failures.jsonl", "recordings.jsonl")


def recordings_path(lay: StagePaths, prompt: str) -> Path:
    """Where replay recordings of the second judge for ``prompt`` are read from (``--judge-recordings``)."""
    return lay.judge_recordings / f"{prompt}.jsonl"


def _backend(cfg, lay: StagePaths, prompt: str):
    """The second judge's backend.

    Raises:
        RecipematchError: replay without recordings (naming the file), or a server that
            cannot be reached or does not serve ``judge2.model_id``.
    """
    if cfg.backend == "replay":
        path = recordings_path(lay, prompt)
        if not path.is_file():
            raise RecipematchError(
                f"judge2.enabled with judge2.backend: replay, but {path} does not exist: the sample ships no "
                f"second-judge recordings. Run the second judge live once (judge2.backend: openai, judge2.base_url) "
                f"and copy {lay.rel(lay.out / 'recordings.jsonl')} there, or set judge2.enabled: false")
        try:
            return ReplayBackend(path)
        except ValueError as e:
            raise RecipematchError(f"judge2 recordings: {e}") from None

    spec = ServerSpec(cfg.base_url, cfg.model_id, api_key_env=cfg.api_key_env, concurrency=cfg.concurrency,
                      max_retries=cfg.max_retries, timeout_s=cfg.timeout_s, deadline_s=cfg.deadline_s,
                      max_response_bytes=cfg.max_response_bytes,
                      chat_template_kwargs=dict(cfg.chat_template_kwargs) or None)
    return open_server(spec, probe=True)


def _cells_file(lay: StagePaths, prompt: str, text: str) -> None:
    atomic_write_text(lay.cells_file, text)


def _off(lay: StagePaths, prompt: str, reason: str) -> dict:
    out = lay.out
    out.mkdir(parents=True, exist_ok=True)
    for name in _DERIVED:
        (out / name).unlink(missing_ok=True)
    _cells_file(lay, prompt, "")
    status = {"enabled": False, "prompt": prompt, "reason": reason, "cells": "first"}
    write_json(out / "status.json", status)
    write_json(lay.metrics, status)
    return status


def run(p, lay: StagePaths, prompt: str, *, progress: bool = True) -> dict:
    """Stage 4d: a second judge re-judges one LLM arm; the two-judge file and the agreement table."""
    cfg = p.judge2
    if prompt not in p.llm.prompts:
        raise RecipematchError(f"--prompt {prompt!r} is not in llm.prompts {list(p.llm.prompts)}")
    if not cfg.enabled:
        return _off(lay, prompt, "judge2.enabled is false: no second judge ran (set judge2.enabled: true)")

    rows_path = lay.pair_file
    fail_path = lay.llm / "failures.jsonl"
    rows = read_jsonl_strict(rows_path)
    failures = read_jsonl_strict(fail_path)
    candidates = arm_candidates(rows, failures)
    sources = {r["doc_id"]: r["text"] for r in corpus_rows(lay)}
    backend = _backend(cfg, lay, prompt)
    out = lay.out
    out.mkdir(parents=True, exist_ok=True)
    for name in _DERIVED:
        (out / name).unlink(missing_ok=True)
    lay.cells_file.unlink(missing_ok=True)
    store = out / "calls.jsonl"
    if cfg.backend == "replay":
        # replay costs nothing: a fresh store, so recordings added later are read (a stored
        # "no recorded answer" would otherwise stand for good)
        store.unlink(missing_ok=True)
    res = run_second_judge(
        rows, candidates, sources, judge_backend=backend, store_path=store, judge_model_id=cfg.model_id,
        sampling={"temperature": cfg.temperature, "top_p": cfg.top_p, "max_tokens": cfg.max_tokens}, seed=p.seed,
        chat_template_kwargs=dict(cfg.chat_template_kwargs) or None,
        allow_reasoning_preamble=cfg.allow_reasoning_preamble, progress=progress)
    if candidates and res.counts["answered"] == 0:
        raise RecipematchError(f"judge2@{prompt}: the second judge answered none of {len(candidates)} candidates "
                               f"(failures by reason: {res.counts['failed']}); with replay, do the recordings hold "
                               f"model {cfg.model_id!r}? No two-judge file written")
    write_jsonl(out / "pairs.jsonl", res.rows)
    write_jsonl(out / "judgments.jsonl", res.judgments_second)
    write_jsonl(out / "failures.jsonl", res.failures)
    write_jsonl(out / "recordings.jsonl", recordings_from_store(store))
    # how many answers came from the store depends on whether this run resumed: not metrics
    this_run = {k: res.counts.pop(k) for k in ("from_store", "sent") if k in res.counts}
    metrics = {"enabled": True, "prompt": prompt, "model_id": cfg.model_id, "backend": cfg.backend,
               "counts": res.counts, "agreement": res.agreement}
    # the cells' copy: the rows under judge2.cells: both, else empty (measuring agreement alone
    # must not rerun the cells and everything trained on them)
    _cells_file(lay, prompt, (out / "pairs.jsonl").read_text(encoding="utf-8") if cfg.cells == "both" else "")
    status = {"enabled": True, "prompt": prompt, "reason": None, "rows": len(res.rows), "cells": cfg.cells}
    write_json(out / "status.json", status)
    write_json(lay.metrics, metrics)
    inputs = {"pairs": rows_path, "failures": fail_path, "corpus": lay.corpus / "corpus.parquet"}
    if cfg.backend == "replay":
        inputs["recordings"] = recordings_path(lay, prompt)
    write_run_record(out, f"judge2:{prompt}", asdict(cfg), inputs, {"rows": len(res.rows)})
    write_json(lay.scratch / f"{prompt}.this_run.json", this_run)
    return {**metrics, "this_run": this_run}


main = stage("judge2", PARAMS, click.option("--prompt", required=True, help="Prompt name, e.g. d1_recipe."),
             progress_option, reads=("corpus", "llm", "pair_file", "judge_recordings"), writes=("out", "cells_file", "metrics", "scratch"))(run)
