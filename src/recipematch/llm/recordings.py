"""Replay recordings built from the peer's released pair files (the only recorded LLM
outputs we have; ``data/peer_release/MANIFEST.md``).

The release is *post-judge*: it holds, per source, the positive and near-misses that the
peer's judge kept. The generator's full answers (justification, tags, audience, ...), the
items the judge rejected and the judge's own answers were not released. So the recordings
built here are reconstructions, and every record says so in its ``origin``:

* a **generation recording** (origin ``"peer_release_post_judge"``) is a JSON answer in the
  prompt's own schema that holds exactly the released texts: ``original_problem`` is the
  corpus problem, the positive goes into the positives list, the near-misses into the
  near-miss list, and *no* annotation fields (no ``justification``/``tags``), so replaying
  it needs ``require_tags=False``. Keyed by the prompt's template SHA-256, the source id and
  variant 0;
* a **judge recording** (origin ``"implied_by_release"``) for every released item: the
  release is the judge's keep set, so each released positive gets the verdict
  ``"equivalent"`` and each released near-miss ``"not_equivalent"``, with
  ``"confidence": null`` (not recorded; :func:`recipematch.llm.parsing.parse_judge` accepts
  null only for this origin). Keyed by the judge template's SHA-256, the source id and the
  candidate key (first 16 hex characters of the SHA-256 of the candidate text's UTF-8 bytes,
  :func:`candidate_key`).

Replaying these through :func:`recipematch.llm.pipeline.run_llm_pairs` therefore re-derives
the released rows; its counts measure our pipeline's plumbing on real LLM text (and our
parser's verdict on it), not the peer's generator or judge acceptance rates.

The D4 file: the peer's D4 restatements sit in a folder named ``llm_pairs_unrelated``
(``data/llm_pairs_unrelated/pairs.jsonl``, shipped here as ``pairs_d4_unrelated.jsonl``),
but they are positives-only D4 rows (every ``negatives`` list is empty), so they map to
the ``d4_restatement`` prompt, not to ``unrelated_negatives``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from recipematch.errors import short_repr
from recipematch.io import BadLine, iter_jsonl_strict
from recipematch.llm.parsing import schema_for
from recipematch.llm.prompts import load_prompt
from recipematch.llm.store import CallStore

__all__ = [
    "ORIGIN_RELEASE",
    "ORIGIN_IMPLIED_JUDGE",
    "candidate_key",
    "build_recordings",
    "write_recordings",
    "read_jsonl",
    "read_jsonl_located",
    "load_corpus_texts",
    "recordings_from_store",
    "ORIGIN_LIVE_STORE",
]

ORIGIN_RELEASE = "peer_release_post_judge"
ORIGIN_IMPLIED_JUDGE = "implied_by_release"
ORIGIN_LIVE_STORE = "recorded_from_call_store"

_IMPLIED_REASON = (
    "Not recorded: verdict implied by the peer's post-judge release, which keeps only the "
    "items its judge accepted."
)


def candidate_key(text: str) -> str:
    """First 16 hex characters of ``sha256(text.encode("utf-8"))`` (exact text, no
    normalisation). The judge request's ``variant``. A text holding a lone surrogate (which
    UTF-8 cannot encode; the parser refuses such answers) is encoded with ``surrogatepass``
    instead of raising; every other text gets exactly the plain UTF-8 key."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _located_error(bad: BadLine) -> ValueError:
    """The LLM layer's wording of a line :func:`recipematch.io.iter_jsonl_strict` refused:
    ``"<path>, line <n>: not UTF-8 (...)"`` or ``"<path>, line <n>: not valid JSON: ..."``."""
    where = f"{bad.path}, line {bad.line_no}"
    e = bad.error
    if isinstance(e, UnicodeDecodeError):
        return ValueError(f"{where}: not UTF-8 ({e.reason} at byte {e.start})")
    if isinstance(e, json.JSONDecodeError):
        return ValueError(f"{where}: not valid JSON: {e.msg} (column {e.colno})")
    return ValueError(f"{where}: not valid JSON: {type(e).__name__}: {e}"[:500])


def read_jsonl_located(path: str | Path) -> list[tuple[int, Any]]:
    """``(line number, parsed value)`` for every non-blank line (1-based), read by
    :func:`recipematch.io.iter_jsonl_strict` (a UTF-8 byte-order mark at the start skipped;
    a lone surrogate escape kept, as recorded answers may hold one).

    Raises:
        ValueError: a line is not UTF-8 or not JSON; the message names the file and the
            line (``"<path>, line <n>: ..."``). A folder: :class:`~recipematch.io.FormatError`.
        FileNotFoundError: ``path`` does not exist.
    """
    return list(iter_jsonl_strict(path, error=_located_error, allow_lone_surrogates=True))


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every non-blank line of a JSONL file, parsed (UTF-8).

    Raises:
        ValueError: a line is not UTF-8, not JSON, or not a JSON object; the message names
            the file and the line number.
    """
    rows = []
    for lineno, row in read_jsonl_located(path):
        if not isinstance(row, dict):
            raise ValueError(f"{path}, line {lineno}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows


def load_corpus_texts(path: str | Path) -> dict[str, str]:
    """``{_id: text}`` from a BEIR ``corpus.jsonl`` (``title`` is ignored; MathNet's is empty).

    Raises:
        ValueError: a line is not a JSON object, lacks ``_id`` or ``text`` (or has a
            non-string one), or an ``_id`` appears twice; the message names file and line.
    """
    out: dict[str, str] = {}
    for lineno, row in read_jsonl_located(path):
        where = f"{path}, line {lineno}"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
        for f in ("_id", "text"):
            if not isinstance(row.get(f), str):
                raise ValueError(f"{where}: field {f!r} missing or not a string")
        if row["_id"] in out:
            raise ValueError(f"{where}: duplicate corpus id {row['_id']!r}")
        out[row["_id"]] = row["text"]
    return out


def release_row(i: int, row: Any) -> tuple[str, str, list[str]]:
    """``(source_id, positive, near-miss texts)`` of release row ``i`` (0-based position in
    the input); raises :class:`ValueError` naming the row and the field at fault."""
    if not isinstance(row, Mapping):
        raise ValueError(f"release row {i}: expected an object, got {type(row).__name__}")
    sid = row.get("source_id")
    if not isinstance(sid, str) or not sid:
        raise ValueError(f"release row {i}: field 'source_id' missing or not a non-empty string (got {short_repr(sid, 80)})")
    where = f"release row {i} (source_id {sid!r})"
    if "positive_text" not in row:
        raise ValueError(f"{where}: missing field 'positive_text'")
    positive = row["positive_text"]
    if not isinstance(positive, str) or not positive.strip():
        raise ValueError(f"{where}: field 'positive_text' is empty or not a string (got {short_repr(positive, 80)})")
    negs = row.get("negatives", [])
    if not isinstance(negs, list):
        got = "null" if negs is None else type(negs).__name__
        raise ValueError(f"{where}: field 'negatives' must be a list, got {got}")
    texts = []
    for j, n in enumerate(negs):
        if not isinstance(n, Mapping) or "text" not in n:
            raise ValueError(f"{where}: negatives[{j}] is not an object with a 'text' field")
        t = n["text"]
        if not isinstance(t, str) or not t.strip():
            raise ValueError(f"{where}: negatives[{j}].text is empty or not a string (got {short_repr(t, 80)})")
        texts.append(t)
    return sid, positive, texts


def build_recordings(
    release_rows: Iterable[Mapping[str, Any]],
    corpus_texts: Mapping[str, str],
    prompt_name: str,
    *,
    n_pos: int,
    n_neg: int,
    model_id: str,
    judge_model_id: str | None = None,
) -> list[dict[str, Any]]:
    """Turn released rows into the recordings :class:`~recipematch.llm.replay.ReplayBackend`
    replays (see the module docstring for what they are and are not).

    Args:
        release_rows: ``{source_id, positive_text, negatives: [{text, ...}]}`` rows.
        corpus_texts: ``{corpus _id: problem text}``; every ``source_id`` must be in it.
        prompt_name: the prompt the rows came from: ``"d1_recipe"`` for
            ``pairs_d1_recipe.jsonl``, ``"d4_restatement"`` for ``pairs_d4_unrelated.jsonl``
            (any prompt of :data:`recipematch.llm.parsing.SCHEMAS` works).
        n_pos: positives the replayed run asks for; must be 1 (a released row has one).
        n_neg: near-misses asked for; a row with more raises. 0 for positives-only prompts.
        model_id: the generator's model id recorded with each answer (e.g.
            ``"Qwen/Qwen3-32B-AWQ"``); a replayed request must carry the same id.
        judge_model_id: the judge's model id (default: ``model_id``; the paper's judge is
            its generator).

    Returns:
        Records ``{kind, prompt_name, prompt_sha256, source_id, variant, model_id, raw_text,
        origin, role}`` (``role`` is ``None`` for generation records), generation records
        first, each group sorted by ``(source_id, variant)``; the same input always gives
        the same list.

    Raises:
        ValueError: ``n_pos != 1``; a row is not an object, lacks ``source_id`` or
            ``positive_text``, has ``negatives`` that is not a list (``null`` included) or a
            near-miss without a ``text``; a row's source id is unknown or repeated; a row has
            more than ``n_neg`` near-misses, a near-miss for a positives-only prompt, or an
            empty or non-string text; one text is both a positive and a near-miss of the
            same source. Every message names the row (``release row <0-based index>`` and
            its ``source_id`` when it has one) and the field at fault.
    """
    if n_pos != 1:
        raise ValueError("a released row holds exactly one positive; n_pos must be 1")
    sch = schema_for(prompt_name)
    if sch.negatives_key is None and n_neg != 0:
        raise ValueError(f"{prompt_name} writes positives only; n_neg must be 0")
    gen_t = load_prompt(prompt_name)
    judge_t = load_prompt("judge")
    judge_model = judge_model_id or model_id
    gen_records: list[dict[str, Any]] = []
    judge_records: dict[tuple[str, str], dict[str, Any]] = {}
    seen_sources: set[str] = set()
    for i, row in enumerate(release_rows):
        sid, positive, negatives = release_row(i, row)
        if sid in seen_sources:
            raise ValueError(f"release row {i}: source id {sid!r} appears twice in the release rows")
        seen_sources.add(sid)
        if sid not in corpus_texts:
            raise ValueError(f"release row {i}: source id {sid!r} is not in the corpus")
        if len(negatives) > n_neg:
            raise ValueError(f"release row {i} (source_id {sid!r}): {len(negatives)} near-misses but n_neg={n_neg}")
        answer: dict[str, Any] = {
            "original_problem": corpus_texts[sid],
            sch.positives_key: [{"problem": positive}],
        }
        if sch.negatives_key is not None:
            answer[sch.negatives_key] = [{"problem": t} for t in negatives]
        gen_records.append(
            {
                "kind": "generation",
                "prompt_name": prompt_name,
                "prompt_sha256": gen_t.sha256,
                "source_id": sid,
                "variant": 0,
                "model_id": model_id,
                "raw_text": json.dumps(answer, ensure_ascii=False),
                "origin": ORIGIN_RELEASE,
                "role": None,
            }
        )
        for role, verdict, texts in (
            ("positive", "equivalent", [positive]),
            ("near_miss", "not_equivalent", negatives),
        ):
            for text in texts:
                ck = candidate_key(text)
                old = judge_records.get((sid, ck))
                if old is not None:
                    if old["role"] != role:
                        raise ValueError(f"release row {i} (source_id {sid!r}): one text is both a positive "
                                         "and a near-miss")
                    continue  # a repeated near-miss: one judge recording serves both copies
                raw = json.dumps({"verdict": verdict, "confidence": None, "reason": _IMPLIED_REASON}, ensure_ascii=False)
                judge_records[(sid, ck)] = {
                    "kind": "judge",
                    "prompt_name": "judge",
                    "prompt_sha256": judge_t.sha256,
                    "source_id": sid,
                    "variant": ck,
                    "model_id": judge_model,
                    "raw_text": raw,
                    "origin": ORIGIN_IMPLIED_JUDGE,
                    "role": role,
                }
    gen_records.sort(key=lambda r: r["source_id"])
    return gen_records + [judge_records[k] for k in sorted(judge_records)]


def write_recordings(path: str | Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Write records as UTF-8 JSONL, one per line, keys in insertion order (deterministic)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", encoding="utf-8", newline="\n") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


def recordings_from_store(store_path: str | Path, *, prompt_names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Replay recordings of every answered call in a live run's call store, so a later run
    (e.g. the second judge of the two-judge control, paper Appendix C) replays it through
    :class:`~recipematch.llm.replay.ReplayBackend` instead of paying again.

    Args:
        store_path: a :class:`~recipematch.llm.store.CallStore` file (opened read-write,
            so no other run may hold it).
        prompt_names: keep only calls of these prompts (default: all).

    Returns:
        Records ``{kind, prompt_name, prompt_sha256, source_id, variant, model_id, raw_text,
        origin, role}`` (``kind`` ``"judge"`` for a judge prompt's calls, else
        ``"generation"``; ``origin`` ``"recorded_from_call_store"``; ``role`` ``None``),
        one per answered call, in store order. Failed calls have no answer to replay and
        are left out. Only answers and identities are copied: no request text, header or key.
    """
    keep = None if prompt_names is None else set(prompt_names)
    out: list[dict[str, Any]] = []
    with CallStore(store_path) as store:
        for rec in store.records():
            if rec["raw_text"] is None or (keep is not None and rec["prompt_name"] not in keep):
                continue
            out.append({"kind": "judge" if rec["prompt_name"] == "judge" else "generation",
                        "prompt_name": rec["prompt_name"], "prompt_sha256": rec["prompt_sha256"],
                        "source_id": rec["source_id"], "variant": rec["variant"], "model_id": rec["model_id"],
                        "raw_text": rec["raw_text"], "origin": ORIGIN_LIVE_STORE, "role": None})
    return out
