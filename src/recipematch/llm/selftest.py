"""The worker self-test gate (the judging design note): before a worker writes any output it
re-answers a few already-recorded requests, and with greedy or seeded decoding the same model
must reproduce its recorded answers byte for byte. Used by the ``llm@<prompt>`` stage
(:mod:`recipematch.pipeline.llm`) before :func:`~recipematch.llm.pipeline.run_llm_pairs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recipematch.llm.backends import GenerationBackend, GenerationRequest
from recipematch.llm.store import CallStore

__all__ = ["recorded_items_from_store", "self_test"]


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
