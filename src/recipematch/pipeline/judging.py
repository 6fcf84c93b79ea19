"""Stage ``judging@<name>``: graded 0 / 1 / 2 labels for one candidate pool (the candidate
design's judging; :mod:`recipematch.judging`), then graded qrels.

1. The pool's pairs (``artifacts/pooling/<pool>/candidates.parquet``, its mode's flag) are
   routed: the LLM judge for fused ranks 1..``llm_fused_ranks``, dense ranks
   1..``llm_dense_ranks`` and long documents; the distilled judge for the rest.
2. The LLM judge answers through a backend (replay recordings or an OpenAI-compatible server)
   and a call store (``cache/judging/<name>/calls.jsonl``; replay: ``replay-<recordings hash>.jsonl``): an interrupted run resumes without
   paying twice. Each answer is checked against the rubric's schema; a failure is a record with
   its reason (``failures.jsonl``), counted, never a 0.
3. The distilled judge (a cross-encoder with a regression head) trains on the LLM labels of
   the queries not held out, is checked against the held-out ones (exact agreement, Cohen's
   kappa, 0-vs-2 flips, within-query R^2), and labels the distilled pairs, its raw score kept.
4. ``labels.parquet`` holds one row per pool pair: its judge (``llm`` / ``distilled`` / none),
   the model, the prompt's SHA-256, the routes that brought the pair, the label, the answer
   fields and the raw distilled score. ``graded/`` is a BEIR folder (the evaluation's corpus,
   the queries with a grade above 0, graded qrels) that an ``evaluations`` entry can score.
5. The metrics add, per route of the pool, how many of its top-1 misses on the evaluation's
   golds the judge calls the same problem (score 2): the misses that may be unlabelled duplicates.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import click
import numpy as np
import pandas as pd

from recipematch.benchmarks_data import load_set
from recipematch.beir import corpus_sha256, doc_text, queries_sha256, write_beir
from recipematch.errors import RecipematchError
from recipematch.io import building_dir, write_json
from recipematch.llm.store import CallStore
from recipematch.llm.serving import check_recordings, client_store_path, open_client
from recipematch.llm.pipeline import through_store
from recipematch.llm.backends import GenerationRequest
from recipematch.judging import (
    agreement,
    answer_schema,
    cut_scores,
    load_rubric,
    misses_markdown,
    parse_answer,
    render_prompt,
    route_pairs,
    task_id,
    train_distilled,
)
from recipematch.pipeline.door import StagePaths, check_device, progress_option, stage
from recipematch.pipeline.models import resolve_model

PARAMS = ("judging", "pooling", "evaluations")
#: the evaluation folder it reads (dvc.yaml lists them: recipematch.pipeline.deps): its pool's evaluation
EVAL_DEPS = "param:pooling.${item.pool}.evaluation"

name_option = click.option("--name", "name", required=True, help="A judging entry of params.yaml `judging`.")


def _read_text(lay: StagePaths, rel: str, what: str) -> str:
    path = lay.root / rel
    if not path.is_file():
        raise RecipematchError(f"{what}: {path} does not exist")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RecipematchError(f"{what}: cannot read {path} ({e})") from None


def _routes_of(row: pd.Series, rank_cols: list[str]) -> str:
    return ",".join(c[len("rank_"):] for c in rank_cols if not pd.isna(row[c]))


def run(p, lay: StagePaths, *, name: str, progress: bool = True) -> dict:
    """Judge one pool, train and check the distilled judge, write labels and graded qrels."""
    if name not in p.judging:
        raise RecipematchError(f"--name {name!r}: not declared in params.yaml judging (declared: {sorted(p.judging)})")
    jc = p.judging[name]
    where = f"judging.{name}"
    pc = p.pooling[jc.pool]
    ev = p.evaluations[pc.evaluation]
    pool_dir = lay.pools / jc.pool
    if not (pool_dir / "candidates.parquet").is_file():
        raise RecipematchError(f"{where}.pool: {pool_dir}/candidates.parquet does not exist (run pooling@{jc.pool})")
    check_device("devices.distilled_judge", p.devices.distilled_judge)  # before any call is paid for
    template = _read_text(lay, jc.prompt, f"{where}.prompt")
    system = _read_text(lay, jc.system_prompt, f"{where}.system_prompt") if jc.system_prompt else ""
    rubric = load_rubric((lay.root / jc.rubric) if jc.rubric else None)
    schema = answer_schema(rubric)
    recordings = (lay.root / jc.recordings) if jc.recordings else None
    check_recordings(jc, recordings, where)  # before any work: a missing recording file stops here, in one line
    bset = load_set(lay.root / ev.folder, ev.rule, name=pc.evaluation, self_mask=ev.self_mask)
    try:
        manifest = json.loads((pool_dir / "MANIFEST.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecipematchError(f"{where}.pool: {pool_dir}/MANIFEST.json cannot be read ({type(e).__name__}); "
                               f"rerun pooling@{jc.pool}") from None
    if not isinstance(manifest, dict):
        raise RecipematchError(f"{where}.pool: {pool_dir}/MANIFEST.json is not an object; rerun pooling@{jc.pool}")
    if manifest.get("corpus_sha256") != corpus_sha256(bset.corpus):
        raise RecipematchError(f"{where}: the pool was built over another corpus than {ev.folder} holds now "
                               f"(rerun pooling@{jc.pool})")
    if manifest.get("queries_sha256") != queries_sha256(bset.queries):
        raise RecipematchError(f"{where}: the pool was built over other queries than {ev.folder} holds now "
                               f"(rerun pooling@{jc.pool})")
    cands = pd.read_parquet(pool_dir / "candidates.parquet")
    pool = cands[cands["in_v1" if pc.mode == "v1" else "in_v2"]].reset_index(drop=True)
    rank_cols = [c for c in pool.columns if c.startswith("rank_")]
    docs = [doc_text(bset.corpus[d]) for d in pool["doc_id"]]
    chars = np.array([len(t) for t in docs], dtype=np.int64)
    pool["judge_route"] = route_pairs(pool, chars, llm_fused_ranks=jc.llm_fused_ranks,
                                      llm_dense_ranks=jc.llm_dense_ranks, long_chars=jc.long_chars).to_numpy()
    pool["routes"] = [_routes_of(r, rank_cols) for _, r in pool.iterrows()]
    pool["task_id"] = [task_id(q, d) for q, d in zip(pool["query_id"], pool["doc_id"])]
    prompt_sha = hashlib.sha256((system + "\x00" + template).encode("utf-8")).hexdigest()
    sampling = {"temperature": jc.temperature, "top_p": jc.top_p, "max_tokens": jc.max_tokens}

    # -- the LLM judge
    llm_idx = np.flatnonzero(pool["judge_route"].to_numpy() == "llm")
    reqs = []
    for i in llm_idx:
        cap = jc.long_max_doc_chars if chars[i] > jc.long_chars > 0 else jc.max_doc_chars
        user = render_prompt(template, task=pool.at[i, "task_id"], query=bset.queries[pool.at[i, "query_id"]],
                             document=docs[i], max_chars=cap)
        reqs.append(GenerationRequest(prompt_name=f"judging_{name}", prompt_sha256=prompt_sha, system=system,
                                      user=user, source_id=pool.at[i, "query_id"], variant=pool.at[i, "task_id"],
                                      sampling=sampling, seed=jc.seed, model_id=jc.model_id,
                                      response_schema=schema if jc.structured_output else None))
    with CallStore(client_store_path(lay.scratch, jc, recordings)) as store:
        pending = any(r.key not in store or store.supersedable(r.key) for r in reqs)
        backend = open_client(jc, recordings, where, structured_output=jc.structured_output) if pending else None  # a resumed run with every answer stored calls no one
        records, call_counts = through_store(store, backend, reqs, lambda req, res: None, progress=progress,
                                              desc=f"judging@{name}")
    n = len(pool)
    score = pd.array([pd.NA] * n, dtype="Int64")
    judge = np.array([""] * n, dtype=object)
    fields = {k: [None] * n for k in ("query_evaluable", "answer_validity", "reason_codes", "confidence", "rationale")}
    failures = []
    for i, rec in zip(llm_idx, records):
        if rec.get("error"):
            ans, why = None, f"call_failed: {rec['error']}"
        else:
            ans, why = parse_answer(rec.get("raw_text"), rubric, pool.at[i, "task_id"], schema)
        if ans is None:
            failures.append({"query_id": pool.at[i, "query_id"], "doc_id": pool.at[i, "doc_id"],
                             "task_id": pool.at[i, "task_id"], "judge": "llm", "reason": why,
                             "raw_text": rec.get("raw_text")})
            continue
        judge[i] = "llm"
        if ans["score"] is not None:
            score[i] = ans["score"]
        for k in fields:
            fields[k][i] = json.dumps(ans[k]) if k == "reason_codes" else ans[k]

    # -- the distilled judge: trained on the LLM labels of the queries not held out
    labelled = [i for i in llm_idx if judge[i] == "llm" and not pd.isna(score[i])]
    lab_queries = sorted({pool.at[i, "query_id"] for i in labelled})
    rng = np.random.default_rng(jc.split_seed)
    n_held = int(round(jc.heldout_fraction * len(lab_queries)))
    held = set(rng.choice(lab_queries, size=n_held, replace=False).tolist()) if n_held else set()
    train_i = [i for i in labelled if pool.at[i, "query_id"] not in held]
    held_i = [i for i in labelled if pool.at[i, "query_id"] in held]
    dist_i = np.flatnonzero(pool["judge_route"].to_numpy() == "distilled")
    raw = np.full(n, np.nan)
    distilled = {"status": "not needed: no pair is routed to it"} if not len(dist_i) else {}
    check = agreement(np.array([], dtype=np.int64), np.array([]), [])
    with building_dir(lay.out) as tmp:
        if len(dist_i) or held_i:
            if len(train_i) < jc.min_train_pairs:
                distilled = {"status": f"not trained: {len(train_i)} LLM labels outside the held-out queries, "
                                       f"fewer than min_train_pairs {jc.min_train_pairs}"}
            else:
                model = train_distilled(
                    resolve_model(jc.distilled_model, f"{where}.distilled_model"),
                    [bset.queries[pool.at[i, "query_id"]] for i in train_i], [docs[i] for i in train_i],
                    [float(score[i]) for i in train_i], out_dir=tmp / "distilled", epochs=jc.distilled_epochs,
                    batch_size=jc.distilled_batch_size, learning_rate=jc.distilled_learning_rate,
                    max_length=jc.distilled_max_length, seed=jc.train_seed, device=p.devices.distilled_judge)
                shutil.rmtree(tmp / "distilled" / "trainer", ignore_errors=True)
                todo = sorted(set(held_i) | set(dist_i.tolist()))
                if todo:
                    pred = model.predict([(bset.queries[pool.at[i, "query_id"]], docs[i]) for i in todo],
                                         batch_size=jc.distilled_batch_size, show_progress_bar=False)
                    raw[todo] = np.asarray(pred, dtype=np.float64).reshape(-1)
                check = agreement(np.array([int(score[i]) for i in held_i], dtype=np.int64), raw[held_i],
                                  [pool.at[i, "query_id"] for i in held_i], low=jc.cut_low, high=jc.cut_high)
                cut = cut_scores(raw[dist_i], jc.cut_low, jc.cut_high) if len(dist_i) else []
                for i, c in zip(dist_i, cut):
                    judge[i] = "distilled"
                    score[i] = int(c)
                distilled = {"status": "trained", "base_model": jc.distilled_model, "train_pairs": len(train_i),
                             "train_queries": len({pool.at[i, "query_id"] for i in train_i})}
        for i in dist_i:
            if judge[i] != "distilled":
                failures.append({"query_id": pool.at[i, "query_id"], "doc_id": pool.at[i, "doc_id"],
                                 "task_id": pool.at[i, "task_id"], "judge": "distilled",
                                 "reason": distilled["status"], "raw_text": None})
        labels = pd.DataFrame({
            "query_id": pool["query_id"], "doc_id": pool["doc_id"], "task_id": pool["task_id"],
            "routes": pool["routes"], "fused_rank": pool["fused_rank"], "judge_route": pool["judge_route"],
            "judge": judge, "model": [jc.model_id if j == "llm" else (jc.distilled_model if j == "distilled" else None)
                                      for j in judge],
            "prompt_sha256": [prompt_sha if j == "llm" else None for j in judge],
            "score": score, **fields, "distilled_raw": raw, "is_gold": pool["is_gold"]})
        labels.to_parquet(tmp / "labels.parquet", index=False)
        with open(tmp / "failures.jsonl", "w", encoding="utf-8") as fh:
            for f in failures:
                fh.write(json.dumps(f, ensure_ascii=False, sort_keys=True) + "\n")
        graded: dict[str, dict[str, int]] = {}
        for q, d, s in zip(labels["query_id"], labels["doc_id"], labels["score"]):
            if not pd.isna(s):
                graded.setdefault(q, {})[d] = int(s)
        kept = {q: g for q, g in graded.items() if any(v > 0 for v in g.values())}
        write_beir(tmp / "graded", bset.corpus, {q: bset.queries[q] for q in bset.query_ids if q in kept}, kept)
        write_json(tmp / "MANIFEST.json", {
            "pool": jc.pool, "evaluation": pc.evaluation, "judge_model": jc.model_id, "prompt_sha256": prompt_sha,
            "rubric": rubric.guideline_version, "rubric_sha256": rubric.sha256, "backend": jc.backend,
            "n_pairs": n, "columns": list(labels.columns)})

    # -- counts, and the top-1 misses the judge calls the same problem
    misses = {}
    lab = labels.set_index(["query_id", "doc_id"])["score"]
    for col in rank_cols:
        first = cands[cands[col] == 1]
        miss = first[~first["is_gold"]]
        got = [lab.get((q, d), pd.NA) for q, d in zip(miss["query_id"], miss["doc_id"])]
        misses[col[len("rank_"):]] = {
            "top1_misses": int(len(miss)), "judged": int(sum(not pd.isna(g) for g in got)),
            "called_same_problem": int(sum(1 for g in got if not pd.isna(g) and g == 2)),
            "called_partial": int(sum(1 for g in got if not pd.isna(g) and g == 1))}
    by = labels["judge"].replace("", "unjudged")
    counts = {
        "n_pairs": n, "routed": labels["judge_route"].value_counts().sort_index().to_dict(),
        "judged_by": by.value_counts().sort_index().to_dict(), "calls": call_counts,
        "label_mix": {j: {str(k): int(v) for k, v in g["score"].value_counts(dropna=False).sort_index().items()}
                      for j, g in labels[labels["judge"] != ""].groupby("judge")},
        "query_unevaluable": int(sum(1 for v in fields["query_evaluable"] if v is False)),
        "failures": {r: c for r, c in pd.Series([f["reason"] for f in failures], dtype=object)
                     .value_counts().sort_index().items()} if failures else {},
        "n_failures": len(failures), "distilled": distilled, "agreement_heldout": check,
        "heldout_queries": len(held), "graded_queries": len(kept),
        "graded_queries_without_positive": len(graded) - len(kept), "top1_misses": misses,
    }
    counts["label_mix"] = {j: {("null" if k == "<NA>" else k): v for k, v in m.items()} for j, m in
                           counts["label_mix"].items()}
    # the report row per model: beside the labels (the report stage owns reports/)
    (lay.out / "misses.md").write_text(
        misses_markdown(misses, name=name, evaluation=pc.evaluation, judge_model=jc.model_id), encoding="utf-8")
    write_json(lay.metrics, counts)
    return counts


main = stage("judging", PARAMS, name_option, progress_option,
             reads=("pools", "cache"), writes=("scratch", "out", "metrics"))(run)
