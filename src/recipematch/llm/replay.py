"""Replay: answer generation requests from recorded outputs, never inventing text (the
peer's post-judge release rebuilt by :mod:`recipematch.llm.recordings`, or the recordings of a
live run), behind the one backend contract of :mod:`recipematch.llm.backends`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from recipematch.errors import short_repr
from recipematch.io import canonical_json
from recipematch.llm.backends import GenerationBackend, GenerationRequest, GenerationResult, ResultCallback, _Deliver
from recipematch.llm.recordings import read_jsonl_located

__all__ = ["ReplayBackend", "replay_key"]

_RECORDING_FIELDS = ("prompt_sha256", "source_id", "variant", "raw_text", "model_id", "origin")


def _check_recording(where: str, rec: Any) -> None:
    """Raise :class:`ValueError` naming ``where`` unless ``rec`` is a usable recording."""
    if not isinstance(rec, Mapping):
        raise ValueError(f"{where}: a recording must be a JSON object, got {type(rec).__name__}")
    missing = [f for f in _RECORDING_FIELDS if f not in rec]
    if missing:
        raise ValueError(f"{where}: recording lacks {missing}: {short_repr(dict(rec), 200)}")
    ident = f"{where} (source_id {rec['source_id']!r}, variant {rec['variant']!r})"
    for f in ("prompt_sha256", "source_id", "model_id", "origin"):
        if not isinstance(rec[f], str) or not rec[f]:
            raise ValueError(f"{ident}: {f} must be a non-empty string, got {short_repr(rec[f], 80)}")
    v = rec["variant"]
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"{ident}: variant must be an int or a string, got {short_repr(v, 80)}")
    if not isinstance(rec["raw_text"], str):
        got = "null" if rec["raw_text"] is None else type(rec["raw_text"]).__name__
        raise ValueError(f"{ident}: raw_text must be a string (a recording replays an answer), got {got}")


def replay_key(prompt_sha256: str, source_id: str, variant: int | str) -> str:
    """The replay lookup key: canonical JSON of ``[prompt_sha256, source_id, variant]``."""
    return canonical_json([prompt_sha256, source_id, variant])


class ReplayBackend(GenerationBackend):
    """Answers from recorded outputs; never invents text.

    Args:
        recordings_path: JSONL file, one recording per line with at least
            ``prompt_sha256, source_id, variant, raw_text, model_id, origin`` (the format
            :func:`recipematch.llm.recordings.build_recordings` writes).
        recordings: alternatively, the recordings themselves (exactly one of the two).
        check_model: when true (default) a request whose ``model_id`` differs from the
            recording's fails with ``recorded_model_mismatch``: one model's recorded answer
            is never passed off as another's.

    A request is looked up by ``(prompt_sha256, source_id, variant)`` (its system and user
    texts are not compared; the prompt hash and source id fix them). Unrecorded requests
    fail with ``no_recorded_answer``.

    Raises:
        ValueError: a line is not UTF-8 or not JSON, a recording is not an object, lacks a
            field or has one of the wrong type (``raw_text`` must be a string), or two
            recordings share a key but differ in text. The message names the file and line
            (``recording #i`` for in-memory recordings) and the problem.
    """

    def __init__(
        self,
        recordings_path: str | Path | None = None,
        *,
        recordings: Iterable[Mapping[str, Any]] | None = None,
        check_model: bool = True,
    ) -> None:
        if (recordings_path is None) == (recordings is None):
            raise ValueError("give exactly one of recordings_path and recordings")
        located: Iterable[tuple[str, Any]]
        if recordings_path is not None:
            path = Path(recordings_path)
            located = [(f"{path}, line {lineno}", rec) for lineno, rec in read_jsonl_located(path)]
        else:
            located = ((f"recording #{i}", rec) for i, rec in enumerate(recordings))  # type: ignore[arg-type]
        self.check_model = check_model
        self._table: dict[str, Mapping[str, Any]] = {}
        where_of: dict[str, str] = {}
        self.calls = 0  # number of requests answered or refused, for tests and logs
        for where, rec in located:
            _check_recording(where, rec)
            k = replay_key(rec["prompt_sha256"], rec["source_id"], rec["variant"])
            old = self._table.get(k)
            if old is not None and (old["raw_text"], old["model_id"]) != (rec["raw_text"], rec["model_id"]):
                raise ValueError(f"{where}: conflicting recordings for {k} (first at {where_of[k]})")
            self._table[k] = rec
            where_of.setdefault(k, where)

    def __len__(self) -> int:
        return len(self._table)

    def _answer(self, req: GenerationRequest) -> GenerationResult:
        rec = self._table.get(replay_key(req.prompt_sha256, req.source_id, req.variant))
        if rec is None:
            return GenerationResult(None, "no_recorded_answer", origin="replay", attempts=0)
        if self.check_model and rec["model_id"] != req.model_id:
            return GenerationResult(
                None,
                "recorded_model_mismatch",
                origin="replay",
                attempts=0,
                detail=f"recorded {rec['model_id']!r}, requested {req.model_id!r}",
            )
        return GenerationResult(rec["raw_text"], None, origin=rec["origin"], attempts=0)

    def generate(
        self, requests: Sequence[GenerationRequest], on_result: ResultCallback | None = None
    ) -> list[GenerationResult]:
        out = []
        deliver = _Deliver(on_result)
        for i, req in enumerate(requests):
            res = self._answer(req)
            self.calls += 1
            deliver(i, res)
            out.append(res)
        deliver.finish()
        return out
