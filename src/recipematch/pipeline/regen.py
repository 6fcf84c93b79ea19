"""Stage ``regen@<name>``: one regenerated gold version of a declared benchmark (paper
Appendix E, the regeneration defence; :mod:`recipematch.regen`).

Source ``llm``: every scored query's source problem goes through the LLM pipeline under the
entry's prompt with the ``llm`` section's backend, models, sampling and judge (replay: the
recordings; openai: any OpenAI-compatible server), with its own call store
(``artifacts/regen_calls/<name>/calls.jsonl``, kept across runs, so an interrupted run resumes
without resending answered calls) and its failures recorded with their reasons; a query's
regenerated gold is its first judge-kept positive. Source ``rows``: released regenerated golds
(:func:`recipematch.regen.read_release_rows`).

Writes ``artifacts/regen/<name>/`` (a BEIR folder: the version's corpus, queries and qrels, plus
``MANIFEST.json`` with provenance and counts, and ``dropped.jsonl``), written whole or not at
all, and ``metrics/regen/<name>.json``.
"""

from __future__ import annotations

import logging

import click

from recipematch.benchmarks_data import load_set
from recipematch.beir import corpus_sha256, doc_text, queries_sha256, write_beir
from recipematch.config import regen_benchmark
from recipematch.errors import RecipematchError
from recipematch.io import building_dir, sha256_file, write_json, write_jsonl
from recipematch.llm.pipeline import run_llm_pairs
from recipematch.pipeline.door import StagePaths, progress_option, stage
from recipematch.pipeline.llm import _backends, _serving
from recipematch.regen import read_release_rows, regenerate
from recipematch.rules import negatives_for_prompt

log = logging.getLogger("recipematch")

PARAMS = ("regen", "evaluations", "llm", "seed")
#: the evaluation folder it reads (dvc.yaml lists them: recipematch.pipeline.deps): the entry's `of` set
EVAL_DEPS = "param:regen.${key}.of"


def _llm_texts(p, lay: StagePaths, name: str, rc, queries: dict[str, str], progress: bool):
    """Query id → first kept positive, query id → reason for the rest, and the run's counts."""
    cfg = p.llm
    backend, judge_backend = _backends(cfg, lay)
    store = lay.calls
    store.mkdir(parents=True, exist_ok=True)
    sampling = {"temperature": cfg.temperature, "top_p": cfg.top_p, "max_tokens": cfg.max_tokens}
    rows, failures, counts = run_llm_pairs(
        sorted(queries.items()), prompt_name=rc.prompt, n_pos=cfg.n_pos, n_neg=negatives_for_prompt(rc.prompt, cfg.n_neg),
        backend=backend, judge_backend=judge_backend, store_path=store / "calls.jsonl", model_id=cfg.model_id,
        judge_model_id=cfg.judge_model_id, sampling=sampling, seed=p.seed, require_tags=cfg.require_tags,
        progress=progress, **_serving(cfg))
    texts: dict[str, str] = {}
    provenance: dict[str, dict] = {}
    for r in rows:  # sorted by source id, then positive order: the first kept positive wins
        if r["source_id"] not in texts:
            texts[r["source_id"]] = r["positive"]
            provenance[r["source_id"]] = r["positive_provenance"]
    reasons = {}
    for f in failures:
        q = f["source_id"]
        if q not in texts and q not in reasons:
            reasons[q] = f"{f['stage']}:{f['reason']}"
    write_jsonl(store / "failures.jsonl", failures)
    for k in ("from_store", "sent"):  # facts of this run, not of the version
        for part in ("generate", "judge"):
            counts.get(part, {}).pop(k, None)
    return texts, reasons, {"llm": counts, "provenance": provenance}


def run(p, lay: StagePaths, name: str, *, progress: bool = True) -> dict:
    """Stage: regenerate one declared benchmark's golds another way (Appendix E)."""
    from recipematch.scoring import scored_qrels  # lazy: recipematch.scoring pulls in pandas, torch

    if name not in p.regen:
        raise RecipematchError(f"--name {name!r} is not a regen entry (declared: {sorted(p.regen)})")
    rc = p.regen[name]
    ev = regen_benchmark(p, name)
    bset = load_set(lay.root / ev.folder, ev.rule, name=rc.of, self_mask=ev.self_mask)
    queries = {q: bset.queries[q] for q in bset.query_ids}
    golds = {q: sorted(g) for q, g in scored_qrels(bset).items()}
    extra: dict = {}
    if rc.source == "rows":
        path = lay.root / rc.rows
        texts, reasons, config = read_release_rows(path, rc.variant)
        provenance = {"source": "rows", "rows": rc.rows, "rows_sha256": sha256_file(path), "variant": rc.variant,
                      "release_config": config}
        unknown = sorted(set(texts) - set(queries))
        extra["rows_for_other_queries"] = len(unknown)
    else:
        texts, reasons, info = _llm_texts(p, lay, name, rc, queries, progress)
        provenance = {"source": "llm", "prompt": rc.prompt, "backend": p.llm.backend, "model_id": p.llm.model_id,
                      "judge_model_id": p.llm.judge_model_id, "seed": p.seed, "per_query": info["provenance"]}
        extra["llm"] = info["llm"]
    version = regenerate(bset.corpus, queries, golds, {q: t for q, t in texts.items() if q in queries},
                         missing=rc.missing, reasons=reasons, query_meta=bset.query_meta, where=f"regen.{name}")
    counts = {**version.counts, **extra, "of": rc.of, "source": rc.source}
    with building_dir(lay.out) as tmp:
        write_beir(tmp, version.corpus, version.queries, version.qrels, query_meta=version.query_meta)
        write_jsonl(tmp / "dropped.jsonl", version.dropped)
        write_json(tmp / "MANIFEST.json", {
            "of": rc.of, "of_folder": ev.folder, "provenance": provenance, "counts": counts,
            "corpus_sha256": corpus_sha256(version.corpus), "queries_sha256": queries_sha256(version.queries),
            "original_corpus_sha256": corpus_sha256(bset.corpus),
            "texts_changed": sum(1 for q in version.queries
                                 if doc_text(bset.corpus[golds[q][0]]).strip() != version.corpus[golds[q][0]]["text"].strip()),
        })
    write_json(lay.metrics, counts)
    log.info("regen@%s: %s of %s queries with a regenerated gold (%s dropped), %s duplicates removed", name,
             counts["kept"], counts["queries"], counts["dropped"], counts["duplicates_of_new_golds_removed"])
    return counts


main = stage("regen", PARAMS, click.option("--name", required=True, help="The regen entry."), progress_option,
             reads=("recordings",), writes=("calls", "out", "metrics"))(run)
