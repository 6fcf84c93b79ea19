"""The LLM-written arms: generate, parse, judge, keep (paper Sections 3 and 5; Appendix C for
the controls, Appendix F for the prompts).

:func:`run_llm_pairs` runs one arm (one prompt of D1–D5, the unrelated near-miss prompt, or a
user's own prompt) over a list of sources; :func:`run_llm_pairs_separate_calls` is the
separate-calls variant of D1; :func:`run_second_judge` re-judges an arm's candidates with a
second judge and :func:`judge_agreement` tabulates the two judges (Appendix C, the two-judge
control); :func:`self_test` is the worker gate.

Keep rule (Section 3; our reading of the paper's keep rule): a positive is kept when the
judge says ``equivalent``; a near-miss is kept when the judge says ``not_equivalent``. A
judge call that fails or whose answer does not parse keeps nothing. A source whose
positive is not kept yields no row (its kept near-misses are then unused and counted).

Every call goes through the :class:`~recipematch.llm.store.CallStore`: a request already
stored is never sent again, so a rerun (or a resumed, killed run) answers from the store
and gives byte-identical rows. A stored failure that no model answered (a connection error,
a time-out, an exhausted 429/5xx, a refused key: ``is_retry_later``) is sent again by the
next run; nothing answered is ever paid twice.

One item never takes the stage down: every answer is stored whatever its parse does (a
parser that raises is recorded as the outcome ``parser_exception``); an answer that cannot
be stored becomes a ``generate``/``judge`` failure ``store_failed`` (sent again next run);
a candidate whose judge request cannot be built is a ``judge`` failure
``judge_request_failed``. Each is counted and kept in ``failures`` with the exception text.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError
from recipematch.llm.backends import GenerationBackend, GenerationRequest, GenerationResult, normalise_sampling
from recipematch.llm.parsing import (
    JudgeOutcome,
    ParsedItem,
    ParseOutcome,
    PromptSchema,
    json_schema_for,
    normalise_for_compare,
    parse_answer,
    parse_judge,
    schema_for,
)
from recipematch.llm.prompts import CustomPrompt, PromptTemplate, load_prompt, split_d1_prompt
from recipematch.llm.recordings import ORIGIN_IMPLIED_JUDGE, candidate_key
from recipematch.llm.store import CallStore, make_record

__all__ = [
    "ArmResult",
    "run_llm_pairs",
    "run_llm_pairs_detailed",
    "run_llm_pairs_separate_calls",
    "build_generation_requests",
    "judge_agreement",
    "run_second_judge",
    "TwoJudgeResult",
    "arm_candidates",
    "self_test",
    "recorded_items_from_store",
    "rows_to_jsonl",
]


@dataclass
class ArmResult:
    """Everything one arm run produced.

    Attributes:
        rows: canonical rows (see :func:`run_llm_pairs`), sorted by ``source_id``.
        failures: ``{source_id, stage, item, reason}`` records, one per failed thing.
        counts: per-reason and total counts (see :func:`run_llm_pairs`).
        judgments: one record per judged candidate ``{source_id, role, index, prompt_name,
            candidate_key, text, verdict, confidence, origin, model_id, prompt_sha256, error}``
            (``verdict`` ``None`` when the call failed or did not parse); the input of
            :func:`judge_agreement` and :func:`run_second_judge`.
    """

    rows: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    counts: dict[str, Any]
    judgments: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class _Call:
    template: PromptTemplate
    schema_name: str
    n_pos: int
    n_neg: int
    schema: PromptSchema | None = None  # a user's prompt; None = SCHEMAS[schema_name]


def _validate_sources(sources: Sequence[tuple[str, str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for sid, text in sources:
        if not isinstance(sid, str) or not sid:
            raise ValueError(f"bad source id {sid!r}")
        if sid in out:
            raise ValueError(f"source id {sid!r} appears twice")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"source {sid!r} has an empty text")
        out[sid] = text
    return out


def _render_slots(t: PromptTemplate, n_pos: int, n_neg: int, problem: str) -> dict[str, Any]:
    available = {"n_pos": n_pos, "n_neg": n_neg, "problem": problem}
    unknown = t.slots - available.keys()
    if unknown:
        raise ValueError(f"prompt {t.name!r} has slots {sorted(unknown)} that an arm run cannot fill")
    return {k: available[k] for k in t.slots}


def build_generation_requests(
    sources: Sequence[tuple[str, str]],
    *,
    prompt_name: str,
    n_pos: int,
    n_neg: int,
    model_id: str,
    sampling: Mapping[str, Any],
    seed: int,
    variant: int = 0,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    custom_prompt: CustomPrompt | None = None,
) -> list[GenerationRequest]:
    """The generation requests of an arm, one per source, in input order.

    The prompt is rendered with ``n_pos``, ``n_neg`` and ``problem`` (only the slots the
    template has); ``response_schema`` is :func:`~recipematch.llm.parsing.json_schema_for`;
    ``chat_template_kwargs`` (e.g. ``{"enable_thinking": False}``) ride on every request.
    ``custom_prompt`` replaces the shipped prompt (its name must equal ``prompt_name``).
    """
    call = _arm_call(prompt_name, n_pos, n_neg, custom_prompt)
    return [_gen_request(call, sid, text, model_id, sampling, seed, variant, chat_template_kwargs)
            for sid, text in sources]


def _arm_call(prompt_name: str, n_pos: int, n_neg: int, custom_prompt: CustomPrompt | None) -> _Call:
    if custom_prompt is None:
        return _Call(load_prompt(prompt_name), prompt_name, n_pos, n_neg)
    if custom_prompt.role != "generator" or custom_prompt.schema is None:
        raise RecipematchError(f"{custom_prompt.sidecar}: prompt {custom_prompt.name!r} is a {custom_prompt.role} "
                               "prompt, not a generator prompt")
    if custom_prompt.name != prompt_name:
        raise RecipematchError(f"prompt_name {prompt_name!r} differs from the custom prompt's name "
                               f"{custom_prompt.name!r} ({custom_prompt.sidecar})")
    return _Call(custom_prompt.template, prompt_name, n_pos, n_neg, custom_prompt.schema)


def _gen_request(
    call: _Call, sid: str, text: str, model_id: str, sampling: Mapping[str, Any], seed: int, variant: int = 0,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> GenerationRequest:
    system, user = call.template.render(**_render_slots(call.template, call.n_pos, call.n_neg, text))
    return GenerationRequest(
        prompt_name=call.template.name,
        prompt_sha256=call.template.sha256,
        system=system,
        user=user,
        source_id=sid,
        variant=variant,
        sampling=sampling,
        seed=seed,
        model_id=model_id,
        response_schema=json_schema_for(call.schema_name, call.n_pos, call.n_neg, schema=call.schema),
        chat_template_kwargs=chat_template_kwargs,
    )


class _Progress:
    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.bar = None
        if enabled and total:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False)

    def update(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _through_store(
    store: CallStore,
    backend: GenerationBackend,
    requests: Sequence[GenerationRequest],
    parse_summary: Callable[[GenerationRequest, GenerationResult], Mapping[str, Any] | None],
    *,
    progress: bool,
    desc: str,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Answer each request from the store, sending only the unstored ones; each answer is
    written to the store as soon as it arrives. Returns the store records aligned with
    ``requests`` and ``{requests, from_store, sent}``.

    Nothing one answer does can cost the others: the parse summary stored with an answer
    comes from :func:`_safe_summary` (a parser that raises is recorded as a
    ``parser_exception`` outcome and the raw answer is stored all the same), and if building
    or appending one record fails anyway, that request gets an unstored stand-in record
    (``raw_text`` ``None``, error ``store_failed``, the exception in ``detail``) so the
    caller records it as a failure, while every other result is still stored; the failed
    request is sent again by the next run."""
    todo: list[GenerationRequest] = []
    queued: set[str] = set()
    for r in requests:
        k = r.key
        if (k not in store or store.supersedable(k)) and k not in queued:
            todo.append(r)
            queued.add(k)
    bar = _Progress(len(todo), desc, progress)
    done = [False] * len(todo)
    unstored: dict[str, dict[str, Any]] = {}

    def on_result(i: int, res: GenerationResult) -> None:
        if done[i]:
            return
        done[i] = True
        req = todo[i]
        try:
            store.append(make_record(req, res, _safe_summary(parse_summary, req, res)))
        except Exception as e:  # noqa: BLE001 - one record must not discard the other results
            unstored[req.key] = _stand_in_record(req, res, e)
        bar.update()

    try:
        results = backend.generate(todo, on_result=on_result) if todo else []
        if len(results) != len(todo):
            raise RuntimeError(f"backend returned {len(results)} results for {len(todo)} requests")
        for i, res in enumerate(results):  # a backend that never called on_result
            on_result(i, res)
    finally:
        bar.close()
    records = [unstored.get(r.key) or store.get(r.key) for r in requests]
    assert all(rec is not None for rec in records)
    return records, {"requests": len(requests), "from_store": len(requests) - len(todo), "sent": len(todo)}  # type: ignore[return-value]


def _exc_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".encode("utf-8", "backslashreplace").decode("utf-8")[:500]


def _safe_summary(
    parse_summary: Callable[[GenerationRequest, GenerationResult], Mapping[str, Any] | None],
    req: GenerationRequest,
    res: GenerationResult,
) -> Mapping[str, Any] | None:
    """The parse summary to store with an answer; an exception becomes a
    ``parser_exception`` outcome instead of stopping the answer from being stored."""
    try:
        return parse_summary(req, res)
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "reason": "parser_exception", "detail": _exc_text(e)}


def _stand_in_record(req: GenerationRequest, res: GenerationResult, e: BaseException) -> dict[str, Any]:
    """What the pipeline sees for an answer that could not be stored (never written)."""
    return {"key": req.key, "prompt_name": req.prompt_name, "prompt_sha256": req.prompt_sha256,
            "model_id": req.model_id, "source_id": req.source_id, "variant": req.variant,
            "raw_text": None, "error": "store_failed", "origin": res.origin, "attempts": res.attempts,
            "finish_reason": res.finish_reason, "detail": _exc_text(e), "parse": None}


def _safe_parse_answer(call: _Call, raw: str, anchor: str, require_tags: bool, preamble: bool = False) -> ParseOutcome:
    try:
        return parse_answer(call.schema_name, raw, n_pos=call.n_pos, n_neg=call.n_neg, anchor=anchor,
                            require_tags=require_tags, allow_reasoning_preamble=preamble, schema=call.schema)
    except Exception as e:  # noqa: BLE001 - a parser bug fails this answer, not the stage
        return ParseOutcome(ok=False, reason="parser_exception", detail=_exc_text(e))


def _safe_parse_judge(raw: str, origin: str | None, preamble: bool = False) -> JudgeOutcome:
    try:
        return parse_judge(raw, allow_null_confidence=origin == ORIGIN_IMPLIED_JUDGE,
                           allow_reasoning_preamble=preamble)
    except Exception as e:  # noqa: BLE001 - a parser bug fails this judgment, not the stage
        return JudgeOutcome(ok=False, reason="parser_exception", detail=_exc_text(e))


def _judge_block(rec: Mapping[str, Any], judge_t: PromptTemplate) -> dict[str, Any]:
    return {"verdict": None, "confidence": None, "model_id": rec["model_id"], "prompt_sha256": judge_t.sha256,
            "origin": rec["origin"]}


def _judge_template(judge_prompt: CustomPrompt | None) -> PromptTemplate:
    if judge_prompt is None:
        return load_prompt("judge")
    if judge_prompt.role != "judge":
        raise RecipematchError(f"{judge_prompt.sidecar}: prompt {judge_prompt.name!r} is a {judge_prompt.role} "
                               "prompt, not a judge prompt")
    return judge_prompt.template


def _judge_request(
    judge_t: PromptTemplate, sid: str, anchor: str, candidate: str, sampling: Mapping[str, Any], seed: int,
    model_id: str, schema: Mapping[str, Any], chat_template_kwargs: Mapping[str, Any] | None,
) -> GenerationRequest:
    system, user = judge_t.render(anchor=anchor, candidate=candidate)
    return GenerationRequest(
        prompt_name=judge_t.name, prompt_sha256=judge_t.sha256,
        system=system, user=user, source_id=sid, variant=candidate_key(candidate), sampling=sampling, seed=seed,
        model_id=model_id, response_schema=schema, chat_template_kwargs=chat_template_kwargs)


def run_llm_pairs_detailed(
    sources: Sequence[tuple[str, str]],
    *,
    prompt_name: str,
    n_pos: int,
    n_neg: int,
    backend: GenerationBackend,
    judge_backend: GenerationBackend,
    store_path: str | Path,
    model_id: str,
    judge_model_id: str,
    sampling: Mapping[str, Any],
    seed: int,
    require_tags: bool,
    progress: bool = True,
    judge_sampling: Mapping[str, Any] | None = None,
    separate_calls: bool = False,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    judge_chat_template_kwargs: Mapping[str, Any] | None = None,
    allow_reasoning_preamble: bool = False,
    custom_prompt: CustomPrompt | None = None,
    judge_prompt: CustomPrompt | None = None,
) -> ArmResult:
    """:func:`run_llm_pairs` that also returns the per-candidate judgments.

    ``separate_calls=True`` (``prompt_name`` must be ``"d1_recipe"``) makes two calls per
    source, the positives-only and the near-misses-only cut of D1
    (:func:`~recipematch.llm.prompts.split_d1_prompt`), rendered with ``n_neg=0`` and
    ``n_pos=0`` respectively; each row item then carries its own call's prompt name and hash.

    Serving options (Section 3's generator and judge run behind a server at scale):
    ``chat_template_kwargs`` / ``judge_chat_template_kwargs`` ride on every generation /
    judge request (e.g. Qwen3's ``{"enable_thinking": False}``; part of each request's key);
    ``allow_reasoning_preamble`` lets both parsers skip a ``<think>`` block or other text
    before the JSON (the JSON is checked as strictly as ever). A user's own prompts:
    ``custom_prompt`` (role generator; its name must equal ``prompt_name``) and
    ``judge_prompt`` (role judge) from :func:`~recipematch.llm.prompts.load_custom_prompt`.

    Raises:
        RecipematchError: a custom prompt of the wrong role or name.
    """
    texts = _validate_sources(sources)
    if n_pos < 1 or n_neg < 0:
        raise ValueError("need n_pos >= 1 and n_neg >= 0")
    sampling = normalise_sampling(sampling)
    judge_sampling = sampling if judge_sampling is None else normalise_sampling(judge_sampling)
    if separate_calls:
        if prompt_name != "d1_recipe":
            raise ValueError("the separate-calls variant is defined for d1_recipe only")
        pos_t, neg_t = split_d1_prompt(load_prompt("d1_recipe"))
        calls = [_Call(pos_t, pos_t.name, n_pos, 0)] + ([_Call(neg_t, neg_t.name, 0, n_neg)] if n_neg else [])
    else:
        call0 = _arm_call(prompt_name, n_pos, n_neg, custom_prompt)
        sch = call0.schema if call0.schema is not None else schema_for(prompt_name)
        if sch.negatives_key is None and n_neg:
            raise ValueError(f"{prompt_name} writes positives only; n_neg must be 0")
        calls = [call0]
    judge_t = _judge_template(judge_prompt)
    sids = sorted(texts)

    failures: list[dict[str, Any]] = []
    gen_counts: dict[str, Any] = {"requests": 0, "from_store": 0, "sent": 0, "answered": 0}
    gen_failed: Counter = Counter()
    parse_ok = 0
    parse_rejected: Counter = Counter()
    item_rejected: Counter = Counter()
    # per source: list of (call, parsed item) for positives and near-misses, and generator model
    pos_items: dict[str, list[tuple[_Call, ParsedItem, str]]] = {s: [] for s in sids}
    neg_items: dict[str, list[tuple[_Call, ParsedItem, str]]] = {s: [] for s in sids}

    with CallStore(store_path) as store:
        for call in calls:
            reqs = [_gen_request(call, s, texts[s], model_id, sampling, seed, 0, chat_template_kwargs) for s in sids]

            def gen_summary(req: GenerationRequest, res: GenerationResult, _c: _Call = call) -> dict[str, Any] | None:
                if res.raw_text is None:
                    return None
                return _safe_parse_answer(_c, res.raw_text, texts[req.source_id], require_tags,
                                          allow_reasoning_preamble).summary()

            recs, c = _through_store(store, backend, reqs, gen_summary, progress=progress,
                                     desc=f"generate {call.template.name}")
            for k in ("requests", "from_store", "sent"):
                gen_counts[k] += c[k]
            for sid, rec in zip(sids, recs):
                if rec["raw_text"] is None:
                    gen_failed[rec["error"]] += 1
                    failures.append({"source_id": sid, "stage": "generate",
                                     "item": {"role": "answer", "prompt_name": call.template.name,
                                              "detail": rec["detail"]},
                                     "reason": rec["error"]})
                    continue
                gen_counts["answered"] += 1
                out: ParseOutcome = _safe_parse_answer(call, rec["raw_text"], texts[sid], require_tags,
                                                       allow_reasoning_preamble)
                if not out.ok:
                    parse_rejected[out.reason] += 1
                    failures.append({"source_id": sid, "stage": "parse",
                                     "item": {"role": "answer", "prompt_name": call.template.name,
                                              "detail": out.detail},
                                     "reason": out.reason})
                    continue
                parse_ok += 1
                for rj in out.item_rejections:
                    item_rejected[f"{rj.role}:{rj.reason}"] += 1
                    failures.append({"source_id": sid, "stage": "parse",
                                     "item": {"role": rj.role, "index": rj.index, "prompt_name": call.template.name,
                                              "detail": rj.detail, "text": rj.text},
                                     "reason": rj.reason})
                for it in out.positives:
                    pos_items[sid].append((call, it, rec["model_id"]))
                for it in out.negatives:
                    neg_items[sid].append((call, it, rec["model_id"]))

        if separate_calls:  # the two calls cannot see each other: drop a near-miss equal to a positive
            for sid in sids:
                pos_norm = {normalise_for_compare(it.text) for _, it, _ in pos_items[sid]}
                kept = []
                for entry in neg_items[sid]:
                    call, it, _m = entry
                    if normalise_for_compare(it.text) in pos_norm:
                        item_rejected["near_miss:duplicate_variant"] += 1
                        failures.append({"source_id": sid, "stage": "parse",
                                         "item": {"role": "near_miss", "index": it.index,
                                                  "prompt_name": call.template.name,
                                                  "detail": "same text as a positive of the other call", "text": it.text},
                                         "reason": "duplicate_variant"})
                    else:
                        kept.append(entry)
                neg_items[sid] = kept

        # ---- judge every valid positive and near-miss
        judge_failed: Counter = Counter()
        tallies = {role: Counter() for role in ("positive", "near_miss")}
        judge_reqs: list[GenerationRequest] = []
        judge_meta: list[tuple[str, str, _Call, ParsedItem, str]] = []
        jschema = json_schema_for("judge", 0, 0)
        for sid in sids:
            for role, items in (("positive", pos_items[sid]), ("near_miss", neg_items[sid])):
                for call, it, gen_model in items:
                    try:
                        jreq = _judge_request(judge_t, sid, texts[sid], it.text, judge_sampling, seed, judge_model_id,
                                              jschema, judge_chat_template_kwargs)
                    except Exception as e:  # noqa: BLE001 - one bad candidate must not stop the stage
                        tallies[role]["candidates"] += 1
                        tallies[role]["judge_failed"] += 1
                        judge_failed["judge_request_failed"] += 1
                        failures.append({"source_id": sid, "stage": "judge",
                                         "item": {"role": role, "index": it.index, "prompt_name": call.template.name,
                                                  "candidate_key": None, "text": it.text, "detail": _exc_text(e)},
                                         "reason": "judge_request_failed"})
                        continue
                    judge_reqs.append(jreq)
                    judge_meta.append((sid, role, call, it, gen_model))

        def judge_summary(req: GenerationRequest, res: GenerationResult) -> dict[str, Any] | None:
            if res.raw_text is None:
                return None
            return _safe_parse_judge(res.raw_text, res.origin, allow_reasoning_preamble).summary()

        jrecs, jc = _through_store(store, judge_backend, judge_reqs, judge_summary, progress=progress, desc="judge")

    judge_parse_rejected: Counter = Counter()
    judge_answered = 0
    judgments: list[dict[str, Any]] = []
    kept_pos: dict[str, list[dict[str, Any]]] = {s: [] for s in sids}
    kept_neg: dict[str, list[dict[str, Any]]] = {s: [] for s in sids}
    for (sid, role, call, it, gen_model), req, rec in zip(judge_meta, judge_reqs, jrecs):
        tally = tallies[role]
        tally["candidates"] += 1
        jblock = _judge_block(rec, judge_t)
        judgment = {"source_id": sid, "role": role, "index": it.index, "prompt_name": call.template.name,
                    "candidate_key": req.variant, "text": it.text, "verdict": None, "confidence": None,
                    "origin": rec["origin"], "model_id": rec["model_id"], "prompt_sha256": judge_t.sha256,
                    "error": None}
        item_ref = {"role": role, "index": it.index, "prompt_name": call.template.name,
                    "candidate_key": req.variant, "text": it.text}
        if rec["raw_text"] is None:
            judge_failed[rec["error"]] += 1
            tally["judge_failed"] += 1
            judgment["error"] = rec["error"]
            failures.append({"source_id": sid, "stage": "judge", "item": {**item_ref, "detail": rec["detail"]},
                             "reason": rec["error"]})
            judgments.append(judgment)
            continue
        judge_answered += 1
        jo = _safe_parse_judge(rec["raw_text"], rec["origin"], allow_reasoning_preamble)
        if not jo.ok:
            judge_parse_rejected[jo.reason] += 1
            tally["judge_failed"] += 1
            judgment["error"] = f"parse:{jo.reason}"
            failures.append({"source_id": sid, "stage": "judge", "item": {**item_ref, "detail": jo.detail},
                             "reason": f"judge_answer_{jo.reason}"})
            judgments.append(judgment)
            continue
        judgment["verdict"], judgment["confidence"] = jo.verdict, jo.confidence
        judgments.append(judgment)
        jblock["verdict"], jblock["confidence"] = jo.verdict, jo.confidence
        keep_verdict = "equivalent" if role == "positive" else "not_equivalent"
        if jo.verdict != keep_verdict:
            tally["rejected"] += 1
            failures.append({"source_id": sid, "stage": "judge", "item": {**item_ref, "detail": jo.reason_text},
                             "reason": f"judged_{jo.verdict}"})
            continue
        tally["kept"] += 1
        entry = {"text": it.text, "call": call, "model_id": gen_model, "judge": jblock, "index": it.index}
        (kept_pos if role == "positive" else kept_neg)[sid].append(entry)

    rows: list[dict[str, Any]] = []
    unused_negatives = 0
    for sid in sids:
        if not kept_pos[sid]:
            unused_negatives += len(kept_neg[sid])
            continue
        negs = [
            {"text": e["text"], "generator": e["call"].template.name, "prompt_sha256": e["call"].template.sha256,
             "model_id": e["model_id"], "judge": e["judge"], "edit": None, "counterexample": None}
            for e in kept_neg[sid]
        ]
        for p in kept_pos[sid]:
            rows.append({
                "source_id": sid,
                "anchor": texts[sid],
                "positive": p["text"],
                "positive_provenance": {"generator": p["call"].template.name,
                                        "prompt_sha256": p["call"].template.sha256,
                                        "model_id": p["model_id"], "judge": p["judge"]},
                "negatives": [dict(n) for n in negs],
            })

    failure_reasons = Counter(f"{f['stage']}:{f['reason']}" for f in failures)
    counts: dict[str, Any] = {
        "prompt_name": prompt_name,
        "separate_calls": separate_calls,
        "sources": len(sids),
        "generate": {**gen_counts, "failed": dict(sorted(gen_failed.items()))},
        "parse": {"ok": parse_ok, "rejected": dict(sorted(parse_rejected.items())),
                  "rejected_total": sum(parse_rejected.values()),
                  "item_rejected": dict(sorted(item_rejected.items())),
                  "item_rejected_total": sum(item_rejected.values())},
        "judge": {**jc, "answered": judge_answered, "failed": dict(sorted(judge_failed.items())),
                  "parse_rejected": dict(sorted(judge_parse_rejected.items()))},
        "positives": {k: tallies["positive"][k] for k in ("candidates", "kept", "rejected", "judge_failed")},
        "negatives": {k: tallies["near_miss"][k] for k in ("candidates", "kept", "rejected", "judge_failed")},
        "negatives_unused_no_positive": unused_negatives,
        "rows": len(rows),
        "rows_without_negatives": sum(1 for r in rows if not r["negatives"]),
        "negatives_in_rows": sum(len(r["negatives"]) for r in rows),
        "failures": dict(sorted(failure_reasons.items())),
        "failures_total": len(failures),
    }
    failures.sort(key=lambda f: (f["source_id"], ["generate", "parse", "judge"].index(f["stage"])))
    return ArmResult(rows=rows, failures=failures, counts=counts, judgments=judgments)


def run_llm_pairs(
    sources: list[tuple[str, str]],
    *,
    prompt_name: str,
    n_pos: int,
    n_neg: int,
    backend: GenerationBackend,
    judge_backend: GenerationBackend,
    store_path: str | Path,
    model_id: str,
    judge_model_id: str,
    sampling: dict,
    seed: int,
    require_tags: bool,
    progress: bool = True,
    **serving: Any,
) -> tuple[list[dict], list[dict], dict]:
    """Build one LLM-written arm (paper Sections 3 and 5): render, generate, parse, judge, keep.

    Args:
        sources: ``(source_id, problem text)`` pairs; ids unique, texts non-empty.
        prompt_name: ``d1_recipe``, ``d2_paraphrase``, ``d3_style``, ``d4_restatement``,
            ``d5_survey`` or ``unrelated_negatives``.
        n_pos: positives per source (the paper: 1). n_neg: near-misses asked for (the
            paper: 3 for D1–D3 and the unrelated prompt; 0 for D4/D5); an answer may hold
            fewer (see :mod:`recipematch.llm.parsing`).
        backend / judge_backend: :class:`~recipematch.llm.backends.GenerationBackend` s.
        store_path: the run's call store (created if absent; reused on rerun/resume).
        model_id / judge_model_id: recorded with every call; backends refuse a mismatch.
        sampling: ``{temperature, top_p, max_tokens}`` for generation and judging.
        seed: sampling seed sent with every call.
        require_tags: parse per-item annotations strictly (False for the peer's release).
        progress: progress bars on stderr.
        **serving: ``judge_sampling``, ``chat_template_kwargs``,
            ``judge_chat_template_kwargs``, ``allow_reasoning_preamble``, ``custom_prompt``,
            ``judge_prompt`` as in :func:`run_llm_pairs_detailed`.

    Returns:
        ``(rows, failures, counts)``:

        * rows, sorted by ``source_id`` (then positive order), each exactly::

            {"source_id", "anchor", "positive",
             "positive_provenance": {"generator", "prompt_sha256", "model_id",
                                     "judge": {"verdict", "confidence", "model_id",
                                               "prompt_sha256", "origin"}},
             "negatives": [{"text", "generator", "prompt_sha256", "model_id", "judge",
                            "edit": None, "counterexample": None}]}

          ``confidence`` is ``None`` when the judge's confidence was not recorded
          (origin ``implied_by_release``). The same inputs and store give byte-identical
          rows (:func:`rows_to_jsonl`).
        * failures: ``{"source_id", "stage": "generate"|"parse"|"judge", "item", "reason"}``
          one per failed call, rejected answer, rejected item, failed judge call, and
          judge rejection (``judged_not_equivalent`` for a positive, ``judged_equivalent``
          for a near-miss); ``item`` says which (role, index, prompt, candidate key, text,
          detail).
        * counts: ``generate`` {requests, from_store, sent, answered, failed by code},
          ``parse`` {ok, rejected by reason, item_rejected by role:reason}, ``judge``
          {requests, from_store, sent, answered, failed, parse_rejected}, ``positives`` and
          ``negatives`` {candidates, kept, rejected, judge_failed}, ``rows``,
          ``rows_without_negatives``, ``negatives_in_rows``, ``failures`` by
          ``stage:reason`` and ``failures_total``.

    Raises:
        ValueError: bad sources, counts, sampling, or ``n_neg > 0`` for D4/D5.
        StoreCorruptError: the store is damaged beyond a torn last line.
    """
    res = run_llm_pairs_detailed(
        sources, prompt_name=prompt_name, n_pos=n_pos, n_neg=n_neg, backend=backend,
        judge_backend=judge_backend, store_path=store_path, model_id=model_id, judge_model_id=judge_model_id,
        sampling=sampling, seed=seed, require_tags=require_tags, progress=progress, **serving,
    )
    return res.rows, res.failures, res.counts


def run_llm_pairs_separate_calls(
    sources: list[tuple[str, str]],
    *,
    n_pos: int,
    n_neg: int,
    backend: GenerationBackend,
    judge_backend: GenerationBackend,
    store_path: str | Path,
    model_id: str,
    judge_model_id: str,
    sampling: dict,
    seed: int,
    require_tags: bool,
    progress: bool = True,
    **serving: Any,
) -> tuple[list[dict], list[dict], dict]:
    """The separate-calls variant of the recipe arm (paper Appendix C, "exact_split"):
    D1 cut into a positives-only call and a near-misses-only call per source (see
    :func:`~recipematch.llm.prompts.split_d1_prompt`); same judge and keep rule. Rows and
    failures as :func:`run_llm_pairs`; the positive's ``generator`` is
    ``"d1_recipe:positives_only"`` and each negative's ``"d1_recipe:near_misses_only"``. A
    near-miss equal to the positive (after :func:`~recipematch.llm.parsing.normalise_for_compare`) is dropped as
    ``duplicate_variant``."""
    res = run_llm_pairs_detailed(
        sources, prompt_name="d1_recipe", n_pos=n_pos, n_neg=n_neg, backend=backend,
        judge_backend=judge_backend, store_path=store_path, model_id=model_id, judge_model_id=judge_model_id,
        sampling=sampling, seed=seed, require_tags=require_tags, progress=progress, separate_calls=True, **serving,
    )
    return res.rows, res.failures, res.counts


def rows_to_jsonl(rows: Iterable[Mapping[str, Any]]) -> str:
    """Rows as JSONL text (UTF-8 characters kept, keys in the canonical order, ``\\n``
    line ends): the byte form that must be identical across reruns."""
    import json

    return "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in rows)


def _kappa(labels_a: list[int], labels_b: list[int]) -> float | None:
    """Cohen's kappa of two label lists (:func:`sklearn.metrics.cohen_kappa_score`);
    ``None`` when it is undefined (no items, or chance agreement 1: both judges gave one
    and the same label to everything)."""
    if not labels_a:
        return None
    if len(set(labels_a) | set(labels_b)) == 1:
        return None
    from sklearn.metrics import cohen_kappa_score

    k = float(cohen_kappa_score(labels_a, labels_b))
    return None if math.isnan(k) else k


def judge_agreement(first: Sequence[Mapping[str, Any]], second: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Agreement table of two judges over the same candidates (paper Appendix C, the
    two-judge control R12-a).

    Args:
        first, second: judgment records ``{source_id, role, candidate_key, verdict}``
            (``role`` ``"positive"``/``"near_miss"``; ``verdict`` ``"equivalent"``,
            ``"not_equivalent"`` or ``None`` = the call failed or did not parse), e.g.
            :attr:`ArmResult.judgments`. Candidates are matched on
            ``(source_id, role, candidate_key)``.

    Returns:
        ``{"positive": T, "near_miss": T, "all": T, "only_in_first": int,
        "only_in_second": int}`` where each table ``T`` over the matched candidates has

        * ``n``; ``both_accept``, ``only_first_accepts``, ``only_second_accepts``,
          ``neither`` (accept = the keep verdict: ``equivalent`` for a positive,
          ``not_equivalent`` for a near-miss; a missing verdict is not an accept, as the
          paper counted unparsed second-judge verdicts "as not verified");
        * ``agreement`` = (both_accept + neither) / n (fraction in [0, 1]) and
          ``cohen_kappa`` on that 2x2 table (:func:`sklearn.metrics.cohen_kappa_score` over
          the accept/not-accept labels; ``None`` when undefined);
        * ``accept_rate_first`` / ``accept_rate_second`` (fractions);
        * ``exact_verdict_agreement``: fraction with the same label among
          {equivalent, not_equivalent, missing};
        * ``opposite_verdicts``: both judged and disagree — the "0 against 2" disagreements
          (with a binary judge a disagreement between two verdicts is always the full
          0-vs-2 kind); ``one_missing``: exactly one verdict missing;
          ``missing_first`` / ``missing_second``.
        Fractions are ``None`` when ``n == 0``.

    Raises:
        ValueError: a candidate appears twice in one list, or a verdict is not one of the
            three labels.
    """

    def index(js: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], str | None]:
        out: dict[tuple[str, str, str], str | None] = {}
        for j in js:
            k = (j["source_id"], j["role"], j["candidate_key"])
            if k in out:
                raise ValueError(f"candidate {k} judged twice in one list")
            if j["verdict"] not in ("equivalent", "not_equivalent", None):
                raise ValueError(f"bad verdict {j['verdict']!r}")
            out[k] = j["verdict"]
        return out

    a, b = index(first), index(second)
    common = sorted(a.keys() & b.keys())

    def table(keys: list[tuple[str, str, str]]) -> dict[str, Any]:
        c: Counter = Counter()
        la: list[int] = []
        lb: list[int] = []
        for k in keys:
            role = k[1]
            keep = "equivalent" if role == "positive" else "not_equivalent"
            va, vb = a[k], b[k]
            acc_a, acc_b = va == keep, vb == keep
            la.append(int(acc_a))
            lb.append(int(acc_b))
            c["both_accept" if acc_a and acc_b else "only_first_accepts" if acc_a else
              "only_second_accepts" if acc_b else "neither"] += 1
            c["same_label"] += va == vb
            c["opposite_verdicts"] += va is not None and vb is not None and va != vb
            c["one_missing"] += (va is None) != (vb is None)
            c["missing_first"] += va is None
            c["missing_second"] += vb is None
        n = len(keys)
        ba, of, os_, ne = c["both_accept"], c["only_first_accepts"], c["only_second_accepts"], c["neither"]
        frac = (lambda x: x / n) if n else (lambda x: None)
        return {
            "n": n, "both_accept": ba, "only_first_accepts": of, "only_second_accepts": os_, "neither": ne,
            "agreement": frac(ba + ne), "cohen_kappa": _kappa(la, lb),
            "accept_rate_first": frac(ba + of), "accept_rate_second": frac(ba + os_),
            "exact_verdict_agreement": frac(c["same_label"]), "opposite_verdicts": c["opposite_verdicts"],
            "one_missing": c["one_missing"], "missing_first": c["missing_first"], "missing_second": c["missing_second"],
        }

    return {
        "positive": table([k for k in common if k[1] == "positive"]),
        "near_miss": table([k for k in common if k[1] == "near_miss"]),
        "all": table(common),
        "only_in_first": len(a.keys() - b.keys()),
        "only_in_second": len(b.keys() - a.keys()),
    }


def self_test(
    backend: GenerationBackend, recorded_items: Sequence[tuple[GenerationRequest, str]]
) -> tuple[bool, list[dict[str, Any]]]:
    """Worker self-test gate: re-answer a small recorded set; every answer must match.

    A worker runs this before it writes any output (cf. the judging design's self-test
    gate); with greedy or seeded decoding the same model must reproduce its recorded
    answers byte for byte.

    Args:
        backend: the worker's backend.
        recorded_items: ``(request, expected raw text)`` pairs (see
            :func:`recorded_items_from_store`), at least one.

    Returns:
        ``(ok, mismatches)``: ``ok`` is true iff every answer equals its recording
        exactly; ``mismatches`` lists ``{key, source_id, variant, expected, got, error}``
        for each that does not.

    Raises:
        ValueError: no items (a gate over nothing would pass vacuously).
    """
    if not recorded_items:
        raise ValueError("self_test needs at least one recorded item")
    reqs = [r for r, _ in recorded_items]
    results = backend.generate(reqs)
    mismatches = []
    for (req, expected), res in zip(recorded_items, results):
        if res.raw_text != expected:
            mismatches.append({"key": req.key, "source_id": req.source_id, "variant": req.variant,
                               "expected": expected, "got": res.raw_text, "error": res.error})
    return not mismatches, mismatches


def recorded_items_from_store(
    requests: Sequence[GenerationRequest], store_path: str | Path, limit: int
) -> list[tuple[GenerationRequest, str]]:
    """Up to ``limit`` ``(request, stored raw text)`` pairs for :func:`self_test`, in the
    order of ``requests``, taken from the requests that the store answered with text."""
    out: list[tuple[GenerationRequest, str]] = []
    with CallStore(store_path) as store:
        for r in requests:
            rec = store.get(r.key)
            if rec is not None and rec["raw_text"] is not None:
                out.append((r, rec["raw_text"]))
                if len(out) >= limit:
                    break
    return out


# ------------------------------------------------------------------ the second judge (Appendix C)


def arm_candidates(rows: Sequence[Mapping[str, Any]], failures: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The first judge's judgments, rebuilt from an arm's written rows and failures (for
    when :attr:`ArmResult.judgments` was not kept).

    Kept positives and near-misses come from ``rows`` (with the verdict in their ``judge``
    block), rejected candidates from the ``judge``-stage failures ``judged_equivalent`` /
    ``judged_not_equivalent``, and candidates whose judge call failed or did not parse from
    the other ``judge``-stage failures (verdict ``None``). Not recoverable from these files:
    near-misses the first judge kept for a source whose positive it rejected (they are
    counted as ``negatives_unused_no_positive`` and written nowhere); pass
    :attr:`ArmResult.judgments` to :func:`run_second_judge` to include them.

    Returns:
        Records ``{source_id, role, candidate_key, text, verdict, confidence}``, one per
        candidate, sorted by ``(source_id, role, candidate_key)``.

    Raises:
        RecipematchError: a row or failure lacks the fields named above (the message says
            which, by position).
    """
    out: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add(sid: str, role: str, text: str, verdict: str | None, conf: Any) -> None:
        k = candidate_key(text)
        out.setdefault((sid, role, k), {"source_id": sid, "role": role, "candidate_key": k, "text": text,
                                        "verdict": verdict, "confidence": conf})

    for i, r in enumerate(rows):
        try:
            j = r["positive_provenance"]["judge"] or {}
            add(r["source_id"], "positive", r["positive"], j.get("verdict"), j.get("confidence"))
            for n in r["negatives"]:
                nj = n["judge"] or {}
                add(r["source_id"], "near_miss", n["text"], nj.get("verdict"), nj.get("confidence"))
        except (KeyError, TypeError) as e:
            raise RecipematchError(f"row {i}: not an LLM-arm row (missing {e})") from None
    for i, f in enumerate(failures):
        if f.get("stage") != "judge":
            continue
        item = f.get("item") or {}
        if not isinstance(item.get("text"), str) or item.get("role") not in ("positive", "near_miss"):
            raise RecipematchError(f"failure {i}: a judge failure without the candidate's role and text")
        reason = f.get("reason")
        verdict = {"judged_equivalent": "equivalent", "judged_not_equivalent": "not_equivalent"}.get(reason)
        add(f["source_id"], item["role"], item["text"], verdict, None)
    return [out[k] for k in sorted(out)]


@dataclass
class TwoJudgeResult:
    """What :func:`run_second_judge` produced.

    Attributes:
        rows: the two-judge row set: each first-judge row whose positive the second judge
            also accepts (judged ``equivalent``), with only the near-misses it also accepts
            (judged ``not_equivalent``); every kept item carries the second verdict as
            ``judge_2`` beside its ``judge`` block. Same order as the input rows.
        judgments_second: one record per candidate, as :attr:`ArmResult.judgments`.
        agreement: :func:`judge_agreement` of the first and second judgments.
        failures: ``{source_id, stage: "judge_2", item, reason}`` for each second-judge
            call that failed or did not parse.
        counts: ``candidates``, ``requests``/``from_store``/``sent``, ``answered``,
            ``failed`` by code, ``parse_rejected`` by reason, ``rows_in``, ``rows``,
            ``negatives_in``, ``negatives``.
    """

    rows: list[dict[str, Any]]
    judgments_second: list[dict[str, Any]]
    agreement: dict[str, Any]
    failures: list[dict[str, Any]]
    counts: dict[str, Any]


def run_second_judge(
    rows: Sequence[Mapping[str, Any]],
    candidates: Sequence[Mapping[str, Any]],
    sources: Mapping[str, str],
    *,
    judge_backend: GenerationBackend,
    store_path: str | Path,
    judge_model_id: str,
    sampling: Mapping[str, Any],
    seed: int,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    allow_reasoning_preamble: bool = False,
    judge_prompt: CustomPrompt | None = None,
    progress: bool = False,
) -> TwoJudgeResult:
    """Re-judge every candidate of an arm with a second judge (paper Appendix C, the
    two-judge control: every candidate row of the recipe arm re-judged by a judge of another
    vendor under the same judge prompt; a cell trained on the rows both judges admit).

    Every kept pair is among the candidates, so every kept pair is re-judged; the
    candidates the first judge rejected are re-judged too, which the agreement table needs.

    Args:
        rows: the arm's rows (first judge), e.g. ``pairs/d1_recipe.jsonl``.
        candidates: the first judge's judgments with their texts: :attr:`ArmResult.judgments`
            or :func:`arm_candidates`. Each ``{source_id, role, candidate_key, text,
            verdict}``; ``candidate_key`` must be :func:`candidate_key` of ``text``.
        sources: source id → anchor text (the corpus problems), for every candidate.
        judge_backend: the second judge's backend (its own server, model and key: an
            :class:`~recipematch.llm.backends.OpenAICompatibleBackend`; or a
            :class:`~recipematch.llm.backends.ReplayBackend` over recordings of the second
            judge, e.g. :func:`recipematch.llm.recordings.recordings_from_store` of a live run).
        store_path: the second judge's own call store (resumable; nothing paid twice).
        judge_model_id: the second judge's model id (recorded; the backend refuses others).
        sampling: ``{temperature, top_p, max_tokens}``. seed: sent with every call.
        chat_template_kwargs / allow_reasoning_preamble / judge_prompt: as in
            :func:`run_llm_pairs_detailed` (``judge_prompt`` defaults to the shipped judge).
        progress: a progress bar on stderr.

    Returns:
        A :class:`TwoJudgeResult`; ``rows`` are byte-identical across reruns.

    Raises:
        RecipematchError: a candidate without text, with a key that does not match its
            text, listed twice, or whose source has no anchor text.
    """
    judge_t = _judge_template(judge_prompt)
    sampling = normalise_sampling(sampling)
    jschema = json_schema_for("judge", 0, 0)
    seen: set[tuple[str, str, str]] = set()
    reqs: list[GenerationRequest] = []
    for i, c in enumerate(candidates):
        text, sid, role = c.get("text"), c.get("source_id"), c.get("role")
        if not isinstance(text, str) or role not in ("positive", "near_miss") or not isinstance(sid, str):
            raise RecipematchError(f"candidate {i}: needs source_id, role (positive/near_miss) and text")
        if c.get("candidate_key") != candidate_key(text):
            raise RecipematchError(f"candidate {i} (source {sid}): candidate_key {c.get('candidate_key')!r} is not "
                                   "the key of its text")
        k = (sid, role, c["candidate_key"])
        if k in seen:
            raise RecipematchError(f"candidate {i}: {k} listed twice")
        seen.add(k)
        if sid not in sources:
            raise RecipematchError(f"candidate {i}: source {sid!r} has no anchor text")
        reqs.append(_judge_request(judge_t, sid, sources[sid], text, sampling, seed, judge_model_id, jschema,
                                   chat_template_kwargs))

    def summary(req: GenerationRequest, res: GenerationResult) -> dict[str, Any] | None:
        if res.raw_text is None:
            return None
        return _safe_parse_judge(res.raw_text, res.origin, allow_reasoning_preamble).summary()

    with CallStore(store_path) as store:
        recs, c = _through_store(store, judge_backend, reqs, summary, progress=progress, desc="second judge")

    failed: Counter = Counter()
    rejected: Counter = Counter()
    failures: list[dict[str, Any]] = []
    second: list[dict[str, Any]] = []
    verdicts: dict[tuple[str, str, str], dict[str, Any]] = {}
    answered = 0
    for cand, req, rec in zip(candidates, reqs, recs):
        j = {"source_id": cand["source_id"], "role": cand["role"], "index": cand.get("index"),
             "prompt_name": cand.get("prompt_name"), "candidate_key": req.variant, "text": cand["text"],
             "verdict": None, "confidence": None, "origin": rec["origin"], "model_id": rec["model_id"],
             "prompt_sha256": judge_t.sha256, "error": None}
        item = {"role": cand["role"], "candidate_key": req.variant, "text": cand["text"]}
        if rec["raw_text"] is None:
            failed[rec["error"]] += 1
            j["error"] = rec["error"]
            failures.append({"source_id": cand["source_id"], "stage": "judge_2",
                             "item": {**item, "detail": rec["detail"]}, "reason": rec["error"]})
        else:
            answered += 1
            jo = _safe_parse_judge(rec["raw_text"], rec["origin"], allow_reasoning_preamble)
            if jo.ok:
                j["verdict"], j["confidence"] = jo.verdict, jo.confidence
            else:
                rejected[jo.reason] += 1
                j["error"] = f"parse:{jo.reason}"
                failures.append({"source_id": cand["source_id"], "stage": "judge_2",
                                 "item": {**item, "detail": jo.detail}, "reason": f"judge_answer_{jo.reason}"})
        second.append(j)
        verdicts[(cand["source_id"], cand["role"], req.variant)] = j

    def block(j: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if j is None:
            return None
        return {"verdict": j["verdict"], "confidence": j["confidence"], "model_id": j["model_id"],
                "prompt_sha256": j["prompt_sha256"], "origin": j["origin"]}

    out_rows: list[dict[str, Any]] = []
    neg_in = neg_out = 0
    for r in rows:
        sid = r["source_id"]
        pj = verdicts.get((sid, "positive", candidate_key(r["positive"])))
        neg_in += len(r["negatives"])
        if pj is None or pj["verdict"] != "equivalent":
            continue
        negs = []
        for n in r["negatives"]:
            nj = verdicts.get((sid, "near_miss", candidate_key(n["text"])))
            if nj is not None and nj["verdict"] == "not_equivalent":
                negs.append({**n, "judge_2": block(nj)})
        neg_out += len(negs)
        out_rows.append({**r, "positive_provenance": {**r["positive_provenance"], "judge_2": block(pj)},
                         "negatives": negs})
    counts = {"candidates": len(reqs), **c, "answered": answered, "failed": dict(sorted(failed.items())),
              "parse_rejected": dict(sorted(rejected.items())), "rows_in": len(rows), "rows": len(out_rows),
              "negatives_in": neg_in, "negatives": neg_out}
    agreement = judge_agreement(
        [{"source_id": x["source_id"], "role": x["role"], "candidate_key": x["candidate_key"],
          "verdict": x.get("verdict")} for x in candidates], second)
    return TwoJudgeResult(rows=out_rows, judgments_second=second, agreement=agreement, failures=failures,
                          counts=counts)
