"""The bookkeeping of one LLM-arm run (paper Section 3's keep rule, as
:func:`~recipematch.llm.pipeline.run_llm_pairs` applies it): failure records and counts as the
run's steps find them, the separate-calls variant's duplicate drop, and the rows built from
the kept candidates.

Nothing here calls a backend, the call store or a parser: :mod:`recipematch.llm.pipeline`
runs the steps and hands their outcomes over.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from recipematch.llm.parsing import ParsedItem, normalise_for_compare

__all__ = ["ArmTally", "Candidate", "arm_counts", "assemble_rows", "drop_duplicate_near_misses"]

#: a candidate awaiting its judge: ``(call, parsed item, generator model id)``; the call is the
#: runner's generation call (its ``template`` gives the prompt name and hash)
Candidate = tuple[Any, ParsedItem, str]

_ROLES = ("positive", "near_miss")
_ROLE_KEYS = ("candidates", "kept", "rejected", "judge_failed")


@dataclass
class ArmTally:
    """What the steps of an arm run count, and every failure record in the order found.

    Attributes:
        failures: ``{source_id, stage, item, reason}`` records (see
            :func:`~recipematch.llm.pipeline.run_llm_pairs`).
        gen_counts: generation ``{requests, from_store, sent, answered}``.
        gen_failed / parse_rejected / item_rejected / judge_failed / judge_parse_rejected:
            counts by code or reason (``item_rejected`` by ``role:reason``).
        parse_ok / judge_answered: answers that parsed; judge calls answered.
        roles: per role (``positive``, ``near_miss``) ``{candidates, kept, rejected, judge_failed}``.
    """

    failures: list[dict[str, Any]] = field(default_factory=list)
    gen_counts: dict[str, Any] = field(
        default_factory=lambda: {"requests": 0, "from_store": 0, "sent": 0, "answered": 0})
    gen_failed: Counter = field(default_factory=Counter)
    parse_ok: int = 0
    parse_rejected: Counter = field(default_factory=Counter)
    item_rejected: Counter = field(default_factory=Counter)
    judge_failed: Counter = field(default_factory=Counter)
    judge_parse_rejected: Counter = field(default_factory=Counter)
    judge_answered: int = 0
    roles: dict[str, Counter] = field(default_factory=lambda: {role: Counter() for role in _ROLES})

    def fail(self, source_id: str, stage: str, item: dict[str, Any], reason: str) -> None:
        """Record one failure (``stage`` ``generate``, ``parse`` or ``judge``)."""
        self.failures.append({"source_id": source_id, "stage": stage, "item": item, "reason": reason})


def drop_duplicate_near_misses(
    sids: Sequence[str], pos_items: Mapping[str, list[Candidate]], neg_items: dict[str, list[Candidate]],
    tally: ArmTally,
) -> None:
    """The separate calls cannot see each other: drop (in place) a near-miss equal to a
    positive of its source (after :func:`~recipematch.llm.parsing.normalise_for_compare`),
    counted and recorded as ``duplicate_variant``."""
    for sid in sids:
        pos_norm = {normalise_for_compare(it.text) for _, it, _ in pos_items[sid]}
        kept = []
        for entry in neg_items[sid]:
            call, it, _m = entry
            if normalise_for_compare(it.text) in pos_norm:
                tally.item_rejected["near_miss:duplicate_variant"] += 1
                tally.fail(sid, "parse", {"role": "near_miss", "index": it.index, "prompt_name": call.template.name,
                                          "detail": "same text as a positive of the other call", "text": it.text},
                           "duplicate_variant")
            else:
                kept.append(entry)
        neg_items[sid] = kept


def assemble_rows(
    sids: Sequence[str], texts: Mapping[str, str], kept_pos: Mapping[str, list[dict[str, Any]]],
    kept_neg: Mapping[str, list[dict[str, Any]]],
) -> tuple[list[dict[str, Any]], int]:
    """One row per kept positive (sources in ``sids`` order), each with every kept near-miss
    of its source; and the number of kept near-misses left unused because their source kept
    no positive. Kept entries are ``{text, call, model_id, judge, index}``."""
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
    return rows, unused_negatives


def arm_counts(
    prompt_name: str, separate_calls: bool, n_sources: int, tally: ArmTally, judge_calls: Mapping[str, int],
    rows: Sequence[Mapping[str, Any]], unused_negatives: int,
) -> dict[str, Any]:
    """The ``counts`` of :func:`~recipematch.llm.pipeline.run_llm_pairs` (``judge_calls``:
    the judge's ``{requests, from_store, sent}``)."""
    failure_reasons = Counter(f"{f['stage']}:{f['reason']}" for f in tally.failures)
    return {
        "prompt_name": prompt_name,
        "separate_calls": separate_calls,
        "sources": n_sources,
        "generate": {**tally.gen_counts, "failed": dict(sorted(tally.gen_failed.items()))},
        "parse": {"ok": tally.parse_ok, "rejected": dict(sorted(tally.parse_rejected.items())),
                  "rejected_total": sum(tally.parse_rejected.values()),
                  "item_rejected": dict(sorted(tally.item_rejected.items())),
                  "item_rejected_total": sum(tally.item_rejected.values())},
        "judge": {**judge_calls, "answered": tally.judge_answered, "failed": dict(sorted(tally.judge_failed.items())),
                  "parse_rejected": dict(sorted(tally.judge_parse_rejected.items()))},
        "positives": {k: tally.roles["positive"][k] for k in _ROLE_KEYS},
        "negatives": {k: tally.roles["near_miss"][k] for k in _ROLE_KEYS},
        "negatives_unused_no_positive": unused_negatives,
        "rows": len(rows),
        "rows_without_negatives": sum(1 for r in rows if not r["negatives"]),
        "negatives_in_rows": sum(len(r["negatives"]) for r in rows),
        "failures": dict(sorted(failure_reasons.items())),
        "failures_total": len(tally.failures),
    }
