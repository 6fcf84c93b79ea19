"""The LLM-written arms: generate, parse, judge, keep (paper Sections 3 and 5; Appendix C for
the controls, Appendix F for the prompts).

:func:`run_llm_pairs` runs one arm (one prompt of D1–D5, the unrelated near-miss prompt, or a
user's own prompt) over a list of sources; :func:`run_llm_pairs_separate_calls` is the
separate-calls variant of D1. Its failure records, counts and rows are kept by
:mod:`~recipematch.llm.arm_rows`. The second judge (Appendix C, the two-judge control) lives in
:mod:`~recipematch.llm.judge2`, the worker gate in :mod:`~recipematch.llm.selftest`.

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

import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError
from recipematch.llm.arm_rows import ArmTally, Candidate, arm_counts, assemble_rows, drop_duplicate_near_misses
from recipematch.llm.backends import GenerationBackend, GenerationRequest, GenerationResult, normalise_sampling
from recipematch.llm.parsing import (
    JudgeOutcome,
    ParsedItem,
    ParseOutcome,
    PromptSchema,
    json_schema_for,
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
            :func:`~recipematch.llm.judge2.judge_agreement` and
            :func:`~recipematch.llm.judge2.run_second_judge`.
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
            from tqdm import tqdm  # lazy: only a run that shows progress bars needs it

            self.bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False)

    def update(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def through_store(
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
    calls = _arm_calls(prompt_name, n_pos, n_neg, separate_calls, custom_prompt)
    arm = _Arm(texts=texts, sids=sorted(texts), model_id=model_id, judge_model_id=judge_model_id, sampling=sampling,
               judge_sampling=judge_sampling, seed=seed, require_tags=require_tags,
               chat_template_kwargs=chat_template_kwargs, judge_chat_template_kwargs=judge_chat_template_kwargs,
               preamble=allow_reasoning_preamble, progress=progress, judge_t=_judge_template(judge_prompt))
    tally = ArmTally()
    with CallStore(store_path) as store:
        pos_items, neg_items = _generate(store, backend, arm, calls, tally)
        if separate_calls:
            drop_duplicate_near_misses(arm.sids, pos_items, neg_items, tally)
        judge_reqs, judge_meta = _judge_requests(arm, pos_items, neg_items, tally)
        jrecs, jc = through_store(store, judge_backend, judge_reqs, _judge_summary(arm.preamble),
                                   progress=progress, desc="judge")
    judgments, kept_pos, kept_neg = _apply_judgments(arm, judge_meta, judge_reqs, jrecs, tally)
    rows, unused_negatives = assemble_rows(arm.sids, texts, kept_pos, kept_neg)
    counts = arm_counts(prompt_name, separate_calls, len(arm.sids), tally, jc, rows, unused_negatives)
    failures = tally.failures
    failures.sort(key=lambda f: (f["source_id"], ["generate", "parse", "judge"].index(f["stage"])))
    return ArmResult(rows=rows, failures=failures, counts=counts, judgments=judgments)


# ------------------------------------------------------------------ the steps of an arm run


@dataclass(frozen=True)
class _Arm:
    """The settled inputs of one arm run, shared by its steps."""

    texts: dict[str, str]
    sids: list[str]
    model_id: str
    judge_model_id: str
    sampling: Mapping[str, Any]
    judge_sampling: Mapping[str, Any]
    seed: int
    require_tags: bool
    chat_template_kwargs: Mapping[str, Any] | None
    judge_chat_template_kwargs: Mapping[str, Any] | None
    preamble: bool
    progress: bool
    judge_t: PromptTemplate


def _arm_calls(
    prompt_name: str, n_pos: int, n_neg: int, separate_calls: bool, custom_prompt: CustomPrompt | None,
) -> list[_Call]:
    """The generation calls made per source: one, or D1's two cuts for ``separate_calls``.

    Raises:
        ValueError: ``separate_calls`` for a prompt other than D1, or ``n_neg > 0`` for a
            prompt that writes positives only.
        RecipematchError: a custom prompt of the wrong role or name.
    """
    if separate_calls:
        if prompt_name != "d1_recipe":
            raise ValueError("the separate-calls variant is defined for d1_recipe only")
        pos_t, neg_t = split_d1_prompt(load_prompt("d1_recipe"))
        return [_Call(pos_t, pos_t.name, n_pos, 0)] + ([_Call(neg_t, neg_t.name, 0, n_neg)] if n_neg else [])
    call0 = _arm_call(prompt_name, n_pos, n_neg, custom_prompt)
    sch = call0.schema if call0.schema is not None else schema_for(prompt_name)
    if sch.negatives_key is None and n_neg:
        raise ValueError(f"{prompt_name} writes positives only; n_neg must be 0")
    return [call0]


def _generate(
    store: CallStore, backend: GenerationBackend, arm: _Arm, calls: Sequence[_Call], tally: ArmTally,
) -> tuple[dict[str, list[Candidate]], dict[str, list[Candidate]]]:
    """Generate (or answer from the store) every call for every source and parse the answers;
    returns the valid positives and near-misses per source, in call then item order."""
    pos_items: dict[str, list[Candidate]] = {s: [] for s in arm.sids}
    neg_items: dict[str, list[Candidate]] = {s: [] for s in arm.sids}
    for call in calls:
        reqs = [_gen_request(call, s, arm.texts[s], arm.model_id, arm.sampling, arm.seed, 0, arm.chat_template_kwargs)
                for s in arm.sids]

        def gen_summary(req: GenerationRequest, res: GenerationResult, _c: _Call = call) -> dict[str, Any] | None:
            if res.raw_text is None:
                return None
            return _safe_parse_answer(_c, res.raw_text, arm.texts[req.source_id], arm.require_tags,
                                      arm.preamble).summary()

        recs, c = through_store(store, backend, reqs, gen_summary, progress=arm.progress,
                                 desc=f"generate {call.template.name}")
        for k in ("requests", "from_store", "sent"):
            tally.gen_counts[k] += c[k]
        for sid, rec in zip(arm.sids, recs):
            out = _take_answer(arm, call, sid, rec, tally)
            if out is not None:
                pos_items[sid].extend((call, it, rec["model_id"]) for it in out.positives)
                neg_items[sid].extend((call, it, rec["model_id"]) for it in out.negatives)
    return pos_items, neg_items


def _take_answer(arm: _Arm, call: _Call, sid: str, rec: Mapping[str, Any], tally: ArmTally) -> ParseOutcome | None:
    """The parse of one generation record, with its failed call, rejected answer and
    rejected items counted and recorded; ``None`` when there is no answer or it did not parse."""
    name = call.template.name
    if rec["raw_text"] is None:
        tally.gen_failed[rec["error"]] += 1
        tally.fail(sid, "generate", {"role": "answer", "prompt_name": name, "detail": rec["detail"]}, rec["error"])
        return None
    tally.gen_counts["answered"] += 1
    out = _safe_parse_answer(call, rec["raw_text"], arm.texts[sid], arm.require_tags, arm.preamble)
    if not out.ok:
        tally.parse_rejected[out.reason] += 1
        tally.fail(sid, "parse", {"role": "answer", "prompt_name": name, "detail": out.detail}, out.reason)
        return None
    tally.parse_ok += 1
    for rj in out.item_rejections:
        tally.item_rejected[f"{rj.role}:{rj.reason}"] += 1
        tally.fail(sid, "parse", {"role": rj.role, "index": rj.index, "prompt_name": name, "detail": rj.detail,
                                  "text": rj.text}, rj.reason)
    return out


def _judge_requests(
    arm: _Arm, pos_items: Mapping[str, list[Candidate]], neg_items: Mapping[str, list[Candidate]], tally: ArmTally,
) -> tuple[list[GenerationRequest], list[tuple[str, str, _Call, ParsedItem, str]]]:
    """A judge request for every valid positive and near-miss (by source, positives first),
    with ``(source_id, role, call, item, generator model)`` beside each; a candidate whose
    request cannot be built is a ``judge_request_failed`` failure."""
    judge_reqs: list[GenerationRequest] = []
    judge_meta: list[tuple[str, str, _Call, ParsedItem, str]] = []
    jschema = json_schema_for("judge", 0, 0)
    for sid in arm.sids:
        for role, items in (("positive", pos_items[sid]), ("near_miss", neg_items[sid])):
            for call, it, gen_model in items:
                try:
                    jreq = _judge_request(arm.judge_t, sid, arm.texts[sid], it.text, arm.judge_sampling, arm.seed,
                                          arm.judge_model_id, jschema, arm.judge_chat_template_kwargs)
                except Exception as e:  # noqa: BLE001 - one bad candidate must not stop the stage
                    tally.roles[role]["candidates"] += 1
                    tally.roles[role]["judge_failed"] += 1
                    tally.judge_failed["judge_request_failed"] += 1
                    tally.fail(sid, "judge", {"role": role, "index": it.index, "prompt_name": call.template.name,
                                              "candidate_key": None, "text": it.text, "detail": _exc_text(e)},
                               "judge_request_failed")
                    continue
                judge_reqs.append(jreq)
                judge_meta.append((sid, role, call, it, gen_model))
    return judge_reqs, judge_meta


def _judge_summary(preamble: bool) -> Callable[[GenerationRequest, GenerationResult], dict[str, Any] | None]:
    """The parse summary stored with each judge answer."""

    def judge_summary(req: GenerationRequest, res: GenerationResult) -> dict[str, Any] | None:
        if res.raw_text is None:
            return None
        return _safe_parse_judge(res.raw_text, res.origin, preamble).summary()

    return judge_summary


def _apply_judgments(
    arm: _Arm,
    judge_meta: Sequence[tuple[str, str, _Call, ParsedItem, str]],
    judge_reqs: Sequence[GenerationRequest],
    jrecs: Sequence[Mapping[str, Any]],
    tally: ArmTally,
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """The keep rule over the judge's answers: one judgment record per judged candidate, and
    the kept positives and near-misses per source (``{text, call, model_id, judge, index}``)."""
    judgments: list[dict[str, Any]] = []
    kept_pos: dict[str, list[dict[str, Any]]] = {s: [] for s in arm.sids}
    kept_neg: dict[str, list[dict[str, Any]]] = {s: [] for s in arm.sids}
    for (sid, role, call, it, gen_model), req, rec in zip(judge_meta, judge_reqs, jrecs):
        tally.roles[role]["candidates"] += 1
        judgment = {"source_id": sid, "role": role, "index": it.index, "prompt_name": call.template.name,
                    "candidate_key": req.variant, "text": it.text, "verdict": None, "confidence": None,
                    "origin": rec["origin"], "model_id": rec["model_id"], "prompt_sha256": arm.judge_t.sha256,
                    "error": None}
        judgments.append(judgment)
        item_ref = {"role": role, "index": it.index, "prompt_name": call.template.name,
                    "candidate_key": req.variant, "text": it.text}
        jblock = _judge_verdict(arm, sid, role, item_ref, rec, judgment, tally)
        if jblock is not None:
            entry = {"text": it.text, "call": call, "model_id": gen_model, "judge": jblock, "index": it.index}
            (kept_pos if role == "positive" else kept_neg)[sid].append(entry)
    return judgments, kept_pos, kept_neg


def _judge_verdict(
    arm: _Arm, sid: str, role: str, item_ref: Mapping[str, Any], rec: Mapping[str, Any], judgment: dict[str, Any],
    tally: ArmTally,
) -> dict[str, Any] | None:
    """Fill ``judgment`` from one judge record; the row's ``judge`` block when the verdict
    keeps the candidate (``equivalent`` for a positive, ``not_equivalent`` for a
    near-miss), else ``None`` with the failure or rejection counted and recorded."""
    counts = tally.roles[role]
    if rec["raw_text"] is None:
        tally.judge_failed[rec["error"]] += 1
        counts["judge_failed"] += 1
        judgment["error"] = rec["error"]
        tally.fail(sid, "judge", {**item_ref, "detail": rec["detail"]}, rec["error"])
        return None
    tally.judge_answered += 1
    jo = _safe_parse_judge(rec["raw_text"], rec["origin"], arm.preamble)
    if not jo.ok:
        tally.judge_parse_rejected[jo.reason] += 1
        counts["judge_failed"] += 1
        judgment["error"] = f"parse:{jo.reason}"
        tally.fail(sid, "judge", {**item_ref, "detail": jo.detail}, f"judge_answer_{jo.reason}")
        return None
    judgment["verdict"], judgment["confidence"] = jo.verdict, jo.confidence
    if jo.verdict != ("equivalent" if role == "positive" else "not_equivalent"):
        counts["rejected"] += 1
        tally.fail(sid, "judge", {**item_ref, "detail": jo.reason_text}, f"judged_{jo.verdict}")
        return None
    counts["kept"] += 1
    return {**_judge_block(rec, arm.judge_t), "verdict": jo.verdict, "confidence": jo.confidence}


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
    return "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in rows)
