"""The second judge (paper Appendix C, the two-judge control): re-judge an arm's candidates
with a judge of another vendor and tabulate how the two judges agree.

:func:`arm_candidates` rebuilds the first judge's judgments from an arm's written rows and
failures; :func:`run_second_judge` re-judges every candidate through its own call store (same
judge prompt, same keep rule as :mod:`recipematch.llm.pipeline`) and keeps the rows both judges
admit; :func:`judge_agreement` is the agreement table (counts, agreement, Cohen's kappa).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError
from recipematch.llm.backends import GenerationBackend, GenerationRequest, GenerationResult, normalise_sampling
from recipematch.llm.parsing import json_schema_for
from recipematch.llm.pipeline import _judge_request, _judge_template, _safe_parse_judge, through_store
from recipematch.llm.prompts import CustomPrompt, PromptTemplate
from recipematch.llm.recordings import candidate_key
from recipematch.llm.store import CallStore

__all__ = ["TwoJudgeResult", "arm_candidates", "judge_agreement", "run_second_judge"]


def arm_candidates(rows: Sequence[Mapping[str, Any]], failures: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The first judge's judgments, rebuilt from an arm's written rows and failures (for
    when :attr:`~recipematch.llm.pipeline.ArmResult.judgments` was not kept).

    Kept positives and near-misses come from ``rows`` (with the verdict in their ``judge``
    block), rejected candidates from the ``judge``-stage failures ``judged_equivalent`` /
    ``judged_not_equivalent``, and candidates whose judge call failed or did not parse from
    the other ``judge``-stage failures (verdict ``None``). Not recoverable from these files:
    near-misses the first judge kept for a source whose positive it rejected (they are
    counted as ``negatives_unused_no_positive`` and written nowhere); pass
    :attr:`~recipematch.llm.pipeline.ArmResult.judgments` to :func:`run_second_judge` to
    include them.

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
        judgments_second: one record per candidate, as
            :attr:`~recipematch.llm.pipeline.ArmResult.judgments`.
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
        candidates: the first judge's judgments with their texts:
            :attr:`~recipematch.llm.pipeline.ArmResult.judgments` or :func:`arm_candidates`.
            Each ``{source_id, role, candidate_key, text, verdict}``; ``candidate_key`` must
            be :func:`~recipematch.llm.recordings.candidate_key` of ``text``.
        sources: source id → anchor text (the corpus problems), for every candidate.
        judge_backend: the second judge's backend (its own server, model and key: an
            :class:`~recipematch.llm.http_backend.OpenAICompatibleBackend`; or a
            :class:`~recipematch.llm.replay.ReplayBackend` over recordings of the second
            judge, e.g. :func:`recipematch.llm.recordings.recordings_from_store` of a live run).
        store_path: the second judge's own call store (resumable; nothing paid twice).
        judge_model_id: the second judge's model id (recorded; the backend refuses others).
        sampling: ``{temperature, top_p, max_tokens}``. seed: sent with every call.
        chat_template_kwargs / allow_reasoning_preamble / judge_prompt: as in
            :func:`~recipematch.llm.pipeline.run_llm_pairs_detailed` (``judge_prompt``
            defaults to the shipped judge).
        progress: a progress bar on stderr.

    Returns:
        A :class:`TwoJudgeResult`; ``rows`` are byte-identical across reruns.

    Raises:
        RecipematchError: a candidate without text, with a key that does not match its
            text, listed twice, or whose source has no anchor text.
    """
    judge_t = _judge_template(judge_prompt)
    sampling = normalise_sampling(sampling)
    reqs = _second_judge_requests(candidates, sources, judge_t, sampling, seed, judge_model_id, chat_template_kwargs)

    def summary(req: GenerationRequest, res: GenerationResult) -> dict[str, Any] | None:
        if res.raw_text is None:
            return None
        return _safe_parse_judge(res.raw_text, res.origin, allow_reasoning_preamble).summary()

    with CallStore(store_path) as store:
        recs, c = through_store(store, judge_backend, reqs, summary, progress=progress, desc="second judge")

    second, failures, failed, rejected, answered = _second_verdicts(candidates, reqs, recs, judge_t,
                                                                   allow_reasoning_preamble)
    verdicts = {(j["source_id"], j["role"], j["candidate_key"]): j for j in second}
    out_rows, neg_in, neg_out = _rows_both_judges_admit(rows, verdicts)
    counts = {"candidates": len(reqs), **c, "answered": answered, "failed": dict(sorted(failed.items())),
              "parse_rejected": dict(sorted(rejected.items())), "rows_in": len(rows), "rows": len(out_rows),
              "negatives_in": neg_in, "negatives": neg_out}
    agreement = judge_agreement(
        [{"source_id": x["source_id"], "role": x["role"], "candidate_key": x["candidate_key"],
          "verdict": x.get("verdict")} for x in candidates], second)
    return TwoJudgeResult(rows=out_rows, judgments_second=second, agreement=agreement, failures=failures,
                          counts=counts)


def _second_judge_requests(
    candidates: Sequence[Mapping[str, Any]], sources: Mapping[str, str], judge_t: PromptTemplate,
    sampling: Mapping[str, Any], seed: int, judge_model_id: str, chat_template_kwargs: Mapping[str, Any] | None,
) -> list[GenerationRequest]:
    """One judge request per candidate, in candidate order.

    Raises:
        RecipematchError: a candidate without text, with a key that does not match its
            text, listed twice, or whose source has no anchor text.
    """
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
    return reqs


def _second_verdicts(
    candidates: Sequence[Mapping[str, Any]], reqs: Sequence[GenerationRequest], recs: Sequence[Mapping[str, Any]],
    judge_t: PromptTemplate, allow_reasoning_preamble: bool,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Counter, Counter, int]:
    """The second judge's judgment of each candidate (as
    :attr:`~recipematch.llm.pipeline.ArmResult.judgments`), the ``judge_2`` failures, the
    failed calls by code, the unparsed answers by reason, and the number of answered calls."""
    failed: Counter = Counter()
    rejected: Counter = Counter()
    failures: list[dict[str, Any]] = []
    second: list[dict[str, Any]] = []
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
    return second, failures, failed, rejected, answered


def _judge2_block(j: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if j is None:
        return None
    return {"verdict": j["verdict"], "confidence": j["confidence"], "model_id": j["model_id"],
            "prompt_sha256": j["prompt_sha256"], "origin": j["origin"]}


def _rows_both_judges_admit(
    rows: Sequence[Mapping[str, Any]], verdicts: Mapping[tuple[str, str, str], Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], int, int]:
    """The rows whose positive the second judge also accepts, each with only the near-misses
    it also accepts and its verdicts as ``judge_2`` blocks; with the near-miss counts before
    and after."""
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
                negs.append({**n, "judge_2": _judge2_block(nj)})
        neg_out += len(negs)
        out_rows.append({**r, "positive_provenance": {**r["positive_provenance"], "judge_2": _judge2_block(pj)},
                         "negatives": negs})
    return out_rows, neg_in, neg_out


def _kappa(labels_a: list[int], labels_b: list[int]) -> float | None:
    """Cohen's kappa of two label lists (:func:`sklearn.metrics.cohen_kappa_score`);
    ``None`` when it is undefined (no items, or chance agreement 1: both judges gave one
    and the same label to everything)."""
    if not labels_a:
        return None
    if len(set(labels_a) | set(labels_b)) == 1:
        return None
    from sklearn.metrics import cohen_kappa_score  # lazy: slow to import, and only this table needs it

    k = float(cohen_kappa_score(labels_a, labels_b))
    return None if math.isnan(k) else k


def judge_agreement(first: Sequence[Mapping[str, Any]], second: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Agreement table of two judges over the same candidates (paper Appendix C, the
    two-judge control R12-a).

    Args:
        first, second: judgment records ``{source_id, role, candidate_key, verdict}``
            (``role`` ``"positive"``/``"near_miss"``; ``verdict`` ``"equivalent"``,
            ``"not_equivalent"`` or ``None`` = the call failed or did not parse), e.g.
            :attr:`~recipematch.llm.pipeline.ArmResult.judgments`. Candidates are matched on
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
