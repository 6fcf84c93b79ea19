"""Stage ``saber@<name>``: SABER-Math's labels for one problem corpus (:mod:`recipematch.saber`;
SABER-Math Sections 3.2-3.5, Appendix B).

1. **Summaries**: read from the ``summaries`` file, or asked of the LLM with the shipped
   ``saber_core_idea`` prompt (its ``{{statement}}`` and ``{{solution}}`` slots filled from each
   row's text and ``solution`` field); ``noCoreIdea: true`` gives an empty summary; an answer
   that is not the prompt's JSON is a failure record, and that problem has no summary.
2. **Similarities**: information content over the ontology from every problem's topics; Lin
   similarity with the best-match average; summary Jaccard without stop words.
3. **Candidates**: per query, K documents from each of topic-only, summary-only and both; a
   query short of K in a category is skipped with its counts; ``max_queries`` of the eligible
   are drawn uniformly.
4. **Tournaments**: one Swiss tournament per query, R rounds; each round's judgments of every
   query go to the LLM together (one batch per round) through the call store
   ``cache/saber/<name>/calls.jsonl`` (replay: ``replay-<recordings hash>.jsonl``), so an interrupted run resumes without paying twice.
5. **Grades**: Bradley-Terry strengths (``choix``) rescaled to [0, 5] per query.

Writes ``artifacts/saber/<name>/`` (``topics.jsonl`` and ``summaries.jsonl``, reusable as the
``topics`` and ``summaries`` files; ``candidates.parquet``, ``judgments.jsonl``,
``grades.parquet``, ``qrels.jsonl`` with real-valued grades, ``failures.jsonl``,
``MANIFEST.json``) and ``metrics/saber/<name>.json``, which adds BM25's nDCG@10 (exponential
gain) reranking each query's candidates as a reference.
"""

from __future__ import annotations

import hashlib
import json
import re

import click
import numpy as np
import pandas as pd

from recipematch.beir import doc_text, read_corpus
from recipematch.errors import RecipematchError
from recipematch.io import building_dir, iter_jsonl_strict, write_json, write_jsonl
from recipematch.llm.backends import GenerationRequest
from recipematch.llm.asker import failure_counts, StoredAsker, top_counts
from recipematch.llm.answer_json import load_answer_object
from recipematch.llm.prompts import fill_slots
from recipematch.llm.serving import check_recordings
from recipematch.pipeline.door import StagePaths, progress_option, stage
from recipematch.saber import (
    bradley_terry,
    combine_orders,
    information_content,
    ndcg_exponential,
    Ontology,
    rescale,
    select_candidates,
    SimilarityIndex,
    stratified_draw,
    summary_tokens,
    SwissTournament,
)
from recipematch.saber_topics import parse_topic_scores, TopicTraversal

PARAMS = ("saber",)
CORE_IDEA_PROMPT = "saber_core_idea.txt"

name_option = click.option("--name", "name", required=True, help="A run of params.yaml `saber`.")


def _file(lay: StagePaths, rel: str, what: str):
    path = lay.root / rel
    if not path.is_file():
        raise RecipematchError(f"{what}: {path} does not exist")
    return path


def _jsonl(path, what: str, key: str, typ) -> dict:
    out = {}
    try:
        for lineno, obj in iter_jsonl_strict(path):
            if not isinstance(obj, dict) or not isinstance(obj.get("_id"), str) or not isinstance(obj.get(key), typ):
                raise RecipematchError(f"{what}: {path}:{lineno}: a row is {{\"_id\": string, \"{key}\": "
                                       f"{typ.__name__}}}")
            if obj["_id"] in out:
                raise RecipematchError(f"{what}: {path}:{lineno}: _id {obj['_id']!r} appears twice")
            out[obj["_id"]] = obj[key]
    except (ValueError, OSError) as e:
        if isinstance(e, RecipematchError):
            raise
        raise RecipematchError(f"{what}: {path}: {e}") from None
    return out


def parse_core_idea(raw: str | None) -> tuple[str | None, str]:
    """The summary in one ``saber_core_idea`` answer: ``coreIdea`` plus its supporting ideas,
    ``""`` for ``noCoreIdea: true``; ``(None, reason)`` for an answer outside that schema."""
    obj, why = load_answer_object(raw)
    if obj is None:
        return None, why
    if not isinstance(obj.get("noCoreIdea"), bool):
        return None, "schema: noCoreIdea must be true or false"
    if obj["noCoreIdea"]:
        return "", ""
    core = obj.get("coreIdea")
    support = obj.get("supporingIdeas", obj.get("supportingIdeas", []))  # the prompt spells it 'supporingIdeas'
    if not isinstance(core, str) or not core.strip():
        return None, "schema: coreIdea must be a non-empty string"
    if not isinstance(support, list) or not all(isinstance(x, str) for x in support):
        return None, "schema: supporting ideas must be a list of strings"
    return " ".join([core, *support]), ""


def parse_preference(raw: str | None) -> tuple[str | None, str]:
    """``"A"`` or ``"B"`` from a pairwise answer: the bare letter or JSON ``{"preferred": ...}``."""
    if raw is None:
        return None, "no_answer_text"
    text = raw.strip()
    fence = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.S)  # a fenced answer, as judging accepts
    if (fence.group(1) if fence else text) in ("A", "B"):
        return (fence.group(1) if fence else text), ""
    obj, _why = load_answer_object(raw)
    if obj is not None and obj.get("preferred") in ("A", "B"):
        return obj["preferred"], ""
    return None, "answer outside A/B"


def _assign_topics(sc, ont, ids, corpus, texts, template, system, sampling, ask, failures, name):
    """Each problem's topics by SABER-Math's top-down walk (:mod:`recipematch.saber_topics`):
    the scorer reads the problem's text and solution and the comma-separated node and children
    (``{{text}}``, ``{{tags}}``); one batch of calls per level. Returns ``(topics, calls)``;
    a failed call or a problem left without topics is appended to ``failures``."""
    sha = hashlib.sha256((system + "\x00" + template).encode("utf-8")).hexdigest()
    blank = [d for d in ids if not texts[d].strip()]
    failures.extend({"step": "topics", "_id": d, "node": ont.root, "reason": "no text"} for d in blank)
    walk = TopicTraversal(ont, [d for d in ids if texts[d].strip()], sc.tau_assign)
    level = 0
    while calls := walk.next_calls():
        level += 1
        reqs = []
        for pid, node, tags in calls:
            sol = corpus[pid].get("solution")
            text = texts[pid] + (f"\n\nSolution:\n{sol}" if isinstance(sol, str) and sol.strip() else "")
            reqs.append(GenerationRequest(
                prompt_name=f"saber_{name}_topics", prompt_sha256=sha, system=system,
                user=fill_slots(template, {"text": text[: sc.max_doc_chars], "tags": ", ".join(tags)}, "topic prompt"), source_id=pid,
                variant=hashlib.sha256(json.dumps([pid, node]).encode()).hexdigest()[:16], sampling=sampling,
                seed=sc.seed, model_id=sc.model_id))
        for (pid, node, tags), rec in zip(calls, ask(reqs, f"saber@{name} topics, level {level}")):
            scores, why = (None, f"call_failed: {rec['error']}") if rec.get("error") else \
                parse_topic_scores(rec["raw_text"], tags)
            walk.record(pid, node, scores, why)
    out = walk.topics()
    failures.extend(walk.failures)
    return out, walk.calls_made


def run(p, lay: StagePaths, *, name: str, progress: bool = True) -> dict:
    """Label one problem corpus the SABER-Math way."""
    from recipematch.retrieval.bm25 import score_blocks  # lazy: recipematch.retrieval.bm25 pulls in torch

    if name not in p.saber:
        raise RecipematchError(f"--name {name!r}: not declared in params.yaml saber (declared: {sorted(p.saber)})")
    sc = p.saber[name]
    where = f"saber.{name}"
    corpus = read_corpus(_file(lay, sc.corpus, f"{where}.corpus"))
    ont_path = _file(lay, sc.ontology, f"{where}.ontology")
    try:
        parents, why = load_answer_object(ont_path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        parents, why = None, f"not UTF-8 ({e.reason})"
    if parents is None:  # not JSON, a duplicate node, too deep, not an object: one line
        raise RecipematchError(f"{where}.ontology: {ont_path}: not a JSON object {{node: parent or null}} ({why})")
    try:
        ont = Ontology.from_parents(parents)
    except RecipematchError as e:
        raise RecipematchError(f"{where}.ontology: {ont_path}: {e}") from None
    topics = _jsonl(_file(lay, sc.topics, f"{where}.topics"), f"{where}.topics", "topics", list) if sc.topics else None
    if topics is not None:
        try:
            information_content(ont, {d: t for d, t in topics.items() if t} or {"": [ont.root]})
        except RecipematchError as e:
            raise RecipematchError(f"{where}.topics: {(lay.root / sc.topics)}: {e}") from None
    judge_t = _file(lay, sc.judge_prompt, f"{where}.judge_prompt").read_text(encoding="utf-8")
    fill_slots(judge_t, {"query": "", "first": "", "second": ""}, f"{where}.judge_prompt")  # a template lacking a slot stops here
    if topics is None:
        topic_t = _file(lay, sc.topic_prompt, f"{where}.topic_prompt").read_text(encoding="utf-8")
        fill_slots(topic_t, {"text": "", "tags": ""}, f"{where}.topic_prompt")
        topic_sys = (_file(lay, sc.topic_system_prompt, f"{where}.topic_system_prompt").read_text(encoding="utf-8")
                     if sc.topic_system_prompt else "")
    recordings = (lay.root / sc.recordings) if sc.recordings else None
    check_recordings(sc, recordings, where)
    unknown = sorted(set(topics or ()) - set(corpus))[:3]
    if unknown:
        raise RecipematchError(f"{where}.topics: ids {unknown} are not in the corpus")
    ids = list(corpus)
    texts = {d: doc_text(corpus[d])[: sc.max_doc_chars] for d in ids}
    failures: list[dict] = []
    sampling = {"temperature": sc.temperature, "top_p": sc.top_p, "max_tokens": sc.max_tokens}
    asker = StoredAsker(sc, recordings, where, lay.scratch, progress=progress)
    ask = asker.ask

    try:
        # 1. summaries
        if sc.summaries:
            summaries = _jsonl(_file(lay, sc.summaries, f"{where}.summaries"), f"{where}.summaries", "summary", str)
        else:
            from importlib import resources

            core_t = resources.files("recipematch").joinpath("prompts", CORE_IDEA_PROMPT).read_bytes().decode("utf-8")
            core_sha = hashlib.sha256(core_t.encode("utf-8")).hexdigest()
            asked, reqs = [], []
            for d in ids:
                sol = corpus[d].get("solution")
                if not isinstance(sol, str) or not sol.strip():
                    failures.append({"step": "summary", "_id": d, "reason": "no solution field"})
                    continue
                asked.append(d)
                reqs.append(GenerationRequest(
                    prompt_name="saber_core_idea", prompt_sha256=core_sha, system="",
                    user=fill_slots(core_t, {"statement": texts[d], "solution": sol}, CORE_IDEA_PROMPT), source_id=d, variant=0,
                    sampling=sampling, seed=sc.seed, model_id=sc.model_id))
            summaries = {}
            for d, rec in zip(asked, ask(reqs, f"saber@{name} summaries")):
                s, why = (None, f"call_failed: {rec['error']}") if rec.get("error") else parse_core_idea(rec["raw_text"])
                if s is None:
                    failures.append({"step": "summary", "_id": d, "reason": why})
                else:
                    summaries[d] = s
        # 1b. topics: SABER-Math's top-down walk, one LLM batch per ontology level
        topic_calls = 0
        if topics is None:
            topics, topic_calls = _assign_topics(sc, ont, ids, corpus, texts, topic_t, topic_sys, sampling, ask,
                                                 failures, name)
        # 2. similarities
        if not any(topics.values()):
            if sc.topics:
                raise RecipematchError(f"{where}.topics: {(lay.root / sc.topics)}: no problem has a topic")
            top = sorted({f["reason"] for f in failures if f["step"] == "topics"})[:3]
            raise RecipematchError(f"{where}: no problem has a topic (the walk's failures: {top or 'none'}; every "
                                   f"answer is kept in the call store)")
        ic = information_content(ont, topics)
        toks = {d: summary_tokens(summaries[d], sc.extra_stop_words) for d in ids if d in summaries}
        index = SimilarityIndex(ont, ic, ids, topics, toks)
        if sc.queries:
            qids = list(_jsonl(_file(lay, sc.queries, f"{where}.queries"), f"{where}.queries", "_id", str))
            missing = [q for q in qids if q not in corpus][:3]
            if missing:
                raise RecipematchError(f"{where}.queries: ids {missing} are not in the corpus")
        else:
            qids = ids
        rng = np.random.default_rng(sc.selection_seed)
        position, position_of = np.arange(len(ids)), {d: i for i, d in enumerate(ids)}
        selected, skipped = {}, {}
        for q in qids:
            if q not in topics and q not in toks:
                skipped[q] = "no topics and no summary"
                continue
            keep = position != position_of[q]
            others = [d for d, k in zip(ids, keep) if k]
            ts, ss = index.topic_row_of(q)[keep], index.summary_row(q)[keep]
            try:
                cats = select_candidates(others, ts, ss, tau_topic=sc.tau_topic, tau_summ=sc.tau_summ, k=sc.k, rng=rng)
            except RecipematchError as e:
                skipped[q] = str(e)
                continue
            sim = dict(zip(others, zip(ts.tolist(), ss.tolist())))
            selected[q] = [(d, c, *sim[d]) for c in cats for d in cats[c]]
        eligible = sorted(selected)
        if sc.max_queries and len(eligible) > sc.max_queries:
            if sc.stratify:
                drawn = set(stratified_draw(eligible, {q: ont.domains(topics.get(q, [])) for q in eligible},
                                            sc.max_queries, rng))
            else:
                drawn = set(rng.choice(eligible, size=sc.max_queries, replace=False).tolist())
            selected = {q: v for q, v in selected.items() if q in drawn}
        queries = sorted(selected)
        strata: dict[str, int] = {}
        for q in queries:
            for dom in ont.domains(topics.get(q, [])) or [""]:
                strata[dom] = strata.get(dom, 0) + 1
        # 4. tournaments, one LLM batch per round
        judge_sha = hashlib.sha256(judge_t.encode("utf-8")).hexdigest()
        tours = {q: SwissTournament(sorted(d for d, *_ in selected[q]), rounds=sc.rounds,
                                    seed=sc.tournament_seed + i) for i, q in enumerate(queries)}
        judgments = []
        while True:
            todo = [(q, a, b) for q in queries for a, b in tours[q].next_round()]
            if not todo:
                break
            shown = [(q, a, b) for q, a, b in todo] + ([(q, b, a) for q, a, b in todo] if sc.both_orders else [])
            reqs = [GenerationRequest(
                prompt_name=f"saber_{name}_pairwise", prompt_sha256=judge_sha, system="",
                user=fill_slots(judge_t, {"query": texts[q], "first": texts[a], "second": texts[b]}, "pairwise prompt"), source_id=q,
                variant=hashlib.sha256(json.dumps([q, a, b]).encode()).hexdigest()[:16], sampling=sampling,
                seed=sc.seed, model_id=sc.model_id) for q, a, b in shown]
            recs = ask(reqs, f"saber@{name} round {tours[queries[0]].round}")

            def verdict(rec, a, b):
                if rec.get("error"):
                    return None, f"call_failed: {rec['error']}"
                pick, why = parse_preference(rec["raw_text"])
                return (None, why) if pick is None else ((a if pick == "A" else b), "")

            for n, (q, a, b) in enumerate(todo):
                w, why = verdict(recs[n], a, b)
                if sc.both_orders:
                    w, why = combine_orders(a, b, w, why, *verdict(recs[n + len(todo)], b, a))
                tours[q].record(a, b, w, why)
                judgments.append({"query_id": q, "round": tours[q].round, "first": a, "second": b, "winner": w,
                                  "reason": why})
                if w is None:
                    failures.append({"step": "judgment", "_id": q, "first": a, "second": b, "reason": why})
    finally:
        asker.close()
    # 5. grades: a candidate with no valid game has no evidence, so no grade (left out of the
    # qrels and flagged in grades.parquet); the rescale runs over the candidates that played
    grade_rows, qrels, ungraded = [], {}, {"candidates": 0, "queries": 0}
    for q in queries:
        t = tours[q].result()
        games = {d: 0 for d in t.items}
        wins = dict(games)
        for j in t.judgments:
            if j.winner is not None:
                games[j.first] += 1
                games[j.second] += 1
                wins[j.winner] += 1
        try:
            strength = bradley_terry(len(t.items), t.comparisons(), alpha=sc.bt_alpha)
        except RuntimeError as e:  # choix's iteration did not converge
            raise RecipematchError(f"saber.{name}.bt_alpha {sc.bt_alpha}: Bradley-Terry did not converge for query "
                                   f"{q!r} ({e}); raise bt_alpha (every judgment is kept in the call store)") from None
        played = [i for i, d in enumerate(t.items) if games[d] > 0]
        grade = np.full(len(t.items), np.nan)
        if played:
            grade[played] = rescale(strength[played])
        qrels[q] = {}
        for i, (d, s_) in enumerate(zip(t.items, strength)):
            ok = games[d] > 0
            grade_rows.append({"query_id": q, "doc_id": d, "bt_strength": float(s_) if ok else None,
                               "grade": float(grade[i]) if ok else None, "games": games[d], "wins": wins[d]})
            if ok:
                qrels[q][d] = float(grade[i])
            else:
                ungraded["candidates"] += 1
        if not qrels[q]:
            ungraded["queries"] += 1
    # BM25 reranking each query's graded candidates: the reference nDCG@10 (exponential gain)
    ndcg = []
    for q in queries:
        cand = sorted(qrels[q])
        if not cand:
            continue
        sub = {d: corpus[d] for d in cand}
        blocks = list(score_blocks(sub, {q: texts[q]}, [q], 1.2, 0.75, None, None))
        scores = np.concatenate([b.numpy()[0] for _s, _e, b in blocks]) if blocks else np.zeros(len(cand))
        order = [cand[i] for i in sorted(range(len(cand)), key=lambda i: (-scores[i], cand[i]))]
        ndcg.append(ndcg_exponential(qrels[q], order, 10))
    with building_dir(lay.out) as tmp:
        pd.DataFrame([{"query_id": q, "doc_id": d, "category": c, "topic_sim": t, "summary_sim": s}
                      for q in queries for d, c, t, s in selected[q]]).to_parquet(tmp / "candidates.parquet", index=False)
        pd.DataFrame(grade_rows).to_parquet(tmp / "grades.parquet", index=False)
        write_jsonl(tmp / "summaries.jsonl", ({"_id": d, "summary": summaries[d]} for d in ids if d in summaries))
        write_jsonl(tmp / "topics.jsonl", ({"_id": d, "topics": list(topics[d])} for d in ids if topics.get(d)))
        write_jsonl(tmp / "judgments.jsonl", judgments)
        write_jsonl(tmp / "failures.jsonl", failures)
        write_jsonl(tmp / "qrels.jsonl", ({"query-id": q, "corpus-id": d, "score": g}
                                          for q in queries for d, g in qrels[q].items()))
        write_json(tmp / "MANIFEST.json", {"judge_model": sc.model_id, "judge_prompt_sha256": judge_sha,
                                           "n_queries": len(queries), "settings": {
                                               "tau_topic": sc.tau_topic, "tau_summ": sc.tau_summ, "k": sc.k,
                                               "rounds": sc.rounds, "both_orders": sc.both_orders,
                                               "bt_alpha": sc.bt_alpha}})
    reasons = failure_counts(failures)
    skip_kinds: dict[str, int] = {}
    for why in skipped.values():
        k = why.split(" (counts")[0]
        skip_kinds[k] = skip_kinds.get(k, 0) + 1
    counts = {"n_problems": len(ids), "n_summaries": len(summaries), "n_with_topics": sum(1 for d in ids if topics.get(d)),
              "topic_calls": topic_calls, "queries_by_top_level_topic": dict(sorted(strata.items())),
              "queries_considered": len(qids),
              "queries_eligible": len(eligible), "queries": len(queries), "queries_skipped": skip_kinds,
              "judgments": len(judgments), "failures": reasons, "n_failures": len(failures),
              "ungraded_candidates": ungraded["candidates"], "queries_without_grades": ungraded["queries"],
              "rounds_played": {str(k): v for k, v in pd.Series([tours[q].round for q in queries], dtype="int64")
                                .value_counts().sort_index().items()},
              "bm25_rerank_ndcg10_exponential": round(float(np.mean(ndcg)), 6) if ndcg else None}
    write_json(lay.metrics, counts)
    if not queries:  # written first: the metrics count why each query was skipped
        kinds = top_counts(skip_kinds, none="none")
        raise RecipematchError(f"saber.{name}: 0 of {len(qids)} queries eligible: each needs k={sc.k} candidates in "
                               f"every category (topic_only, summary_only, both); skipped: {kinds}; see "
                               f"queries_skipped in {lay.rel(lay.metrics)} (lower k or the thresholds)")
    if not any(qrels[q] for q in queries):  # written first: the failures say why, the call store keeps every answer
        top = top_counts(reasons)
        raise RecipematchError(f"saber.{name}: no query got a single grade ({len(queries)} queries, "
                               f"{len(judgments)} judgments, {len(failures)} failures: {top}); see "
                               f"{lay.rel(lay.out / 'failures.jsonl')} and {lay.rel(lay.metrics)}")
    return counts


main = stage("saber", PARAMS, name_option, progress_option,
             reads=(), writes=("scratch", "out", "metrics"))(run)
