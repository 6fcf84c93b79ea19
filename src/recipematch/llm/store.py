"""Append-only, content-addressed JSONL store of LLM calls (paper Section 3 and Appendix C:
every call's prompt hash, model, sampling settings and seed are recorded; a malformed answer
is kept as a failure record with its reason).

One line per finished call, written and flushed as soon as the answer arrives (with the
outcome of a parse that cannot raise; a parse that fails anyway is recorded as a
``parser_exception`` outcome, never a reason not to store the answer)::

    {"key": <GenerationRequest.key>, "record_sha256": <sha256 of the line without this field>,
     "prompt_name", "prompt_sha256", "model_id", "source_id", "variant", "sampling", "seed",
     "raw_text", "error", "origin", "attempts", "finish_reason", "detail", "parse": {...}}

``key`` is the request's content address, so a rerun looks every request up before sending
it and never repeats a stored answer. The one exception is a stored failure that no model
answered (:func:`recipematch.llm.backends.is_retry_later`: connection error, time-out,
exhausted 429/5xx, refused key, ...): nothing was paid for it, so a rerun sends it again and
the new line *supersedes* it (a later line may repeat the key of such a failure, and only
of such a failure; :meth:`CallStore.get` returns the latest). A raw answer holding a lone UTF-16 surrogate (not
encodable as UTF-8) is stored too: its line is written with ASCII ``\\uXXXX`` escapes and its
hash uses ``surrogatepass``. ``record_sha256`` (SHA-256 of the canonical JSON of all
other fields) makes each line self-checking.

Crash safety: each line is written with a single ``write`` of the whole encoded line followed
by ``flush`` (optionally ``fsync``). A process killed mid-write (``kill -9``) can leave only
the *last* line torn (no final newline, or not valid JSON). Opening the store truncates that
torn tail (its byte count is kept in :attr:`CallStore.recovered_torn_bytes`); its request is
then simply not stored and is sent again. A damaged line anywhere else is corruption and
raises :class:`StoreCorruptError`; nothing is silently skipped.

The store is single-writer: one run per file at a time (an exclusive ``flock`` is taken
where the OS offers it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError
from recipematch.io import sha256_text
from recipematch.llm.backends import GenerationRequest, GenerationResult, canonical_json, is_retry_later

__all__ = ["CallStore", "StoreCorruptError", "make_record", "verify_record"]

try:  # POSIX only; the lock is a guard against two runs on one file, not a requirement
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


class StoreCorruptError(RecipematchError, RuntimeError):
    """A store line other than the last is not a valid, self-consistent record (a user-facing
    error: one line naming the store and the byte)."""


class StoreInUseError(RecipematchError, RuntimeError):
    """Another run holds the store's lock."""


def _record_hash(rec: Mapping[str, Any]) -> str:
    body = {k: v for k, v in rec.items() if k != "record_sha256"}
    # surrogatepass: a lone surrogate in a raw answer hashes instead of raising; any other
    # text hashes exactly as plain UTF-8 (so existing stores keep verifying)
    return sha256_text(canonical_json(body), errors="surrogatepass")


def _encode_line(record: Mapping[str, Any]) -> bytes:
    """One store line. Canonical JSON as UTF-8; a record whose text cannot be UTF-8 (a lone
    surrogate in a raw answer) is written with ASCII escapes instead, which reads back to
    the same record."""
    try:
        return (canonical_json(dict(record)) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(dict(record), sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                           allow_nan=False) + "\n").encode("ascii")


def make_record(
    request: GenerationRequest, result: GenerationResult, parse: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The store line for one finished call (see module docstring for the fields).

    ``parse`` is the parse outcome summary (``{"ok": bool, "reason": str|None,
    "item_rejections": [...]}``) or ``None`` when there was no text to parse.
    """
    rec: dict[str, Any] = {
        "key": request.key,
        "prompt_name": request.prompt_name,
        "prompt_sha256": request.prompt_sha256,
        "model_id": request.model_id,
        "source_id": request.source_id,
        "variant": request.variant,
        "sampling": dict(request.sampling),
        "seed": request.seed,
        "raw_text": result.raw_text,
        "error": result.error,
        "origin": result.origin,
        "attempts": result.attempts,
        "finish_reason": result.finish_reason,
        "detail": result.detail,
        "parse": None if parse is None else dict(parse),
    }
    rec["record_sha256"] = _record_hash(rec)
    return rec


def verify_record(rec: Mapping[str, Any]) -> bool:
    """True when ``rec['record_sha256']`` matches the record's other fields."""
    return rec.get("record_sha256") == _record_hash(rec)


class CallStore:
    """The call store of one run (see module docstring).

    Args:
        path: the JSONL file; created (with parent folders) when absent.
        fsync: ``os.fsync`` after every line (survives power loss, not only ``kill -9``;
            slower). ``flush`` alone already survives a killed process.

    Use as a context manager, or call :meth:`close`.

    Raises:
        StoreCorruptError: a line other than the last is torn, not JSON, fails its
            ``record_sha256`` check, or two complete lines share a key.
    """

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._records: dict[str, dict[str, Any]] = {}
        self._order: list[str] = []
        self.recovered_torn_bytes = 0
        self.appended = 0
        self._fh = open(self.path, "a+b")  # noqa: SIM115 - closed in close()
        if fcntl is not None:
            try:
                fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                self._fh.close()
                raise StoreInUseError(f"call store {self.path} is in use by another run") from e
        self._load()

    def _load(self) -> None:
        self._fh.seek(0)
        data = self._fh.read()
        good_end = 0
        pos = 0
        n = len(data)
        while pos < n:
            nl = data.find(b"\n", pos)
            line = data[pos:] if nl < 0 else data[pos:nl]
            is_last = nl < 0 or nl == n - 1
            rec = None
            if nl >= 0:
                try:
                    rec = json.loads(line.decode("utf-8"))
                except (UnicodeDecodeError, ValueError):
                    rec = None
            if rec is None or not isinstance(rec, dict) or not verify_record(rec):
                if nl < 0 or (is_last and rec is None):
                    break  # torn tail: dropped below
                raise StoreCorruptError(f"{self.path}: damaged record at byte {pos}")
            key = rec["key"]
            if key in self._records:
                if not self.supersedable(key):
                    raise StoreCorruptError(f"{self.path}: key {key} stored twice (byte {pos})")
            else:
                self._order.append(key)
            self._records[key] = rec
            pos = nl + 1
            good_end = pos
        if good_end < n:
            self.recovered_torn_bytes = n - good_end
            self._fh.truncate(good_end)
            self._fh.flush()
            os.fsync(self._fh.fileno())
        self._fh.seek(0, os.SEEK_END)

    def __contains__(self, key: str) -> bool:
        return key in self._records

    def __len__(self) -> int:
        return len(self._records)

    def supersedable(self, key: str) -> bool:
        """True when ``key`` is stored as a failure that no model answered (see the module
        docstring): a rerun sends that request again and appends the new result."""
        rec = self._records.get(key)
        return rec is not None and rec.get("raw_text") is None and is_retry_later(rec.get("error"))

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored record of a request key, or ``None``."""
        return self._records.get(key)

    def records(self) -> Iterator[dict[str, Any]]:
        """Stored records (the latest of each key), in the order their keys first appear."""
        return (self._records[k] for k in self._order)

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one record as one line (single ``write`` + ``flush``).

        Raises:
            ValueError: the key is already stored (the store never holds a request twice,
                except that a new result may supersede a :meth:`supersedable` failure), or
                ``record_sha256`` does not match.
        """
        key = record["key"]
        if key in self._records and not self.supersedable(key):
            raise ValueError(f"request {key} is already stored")
        if not verify_record(record):
            raise ValueError("record_sha256 does not match the record")
        line = _encode_line(record)
        self._write(line)
        if key not in self._records:
            self._order.append(key)
        self._records[key] = dict(record)
        self.appended += 1

    def _write(self, line: bytes) -> None:
        self._fh.write(line)
        self._fh.flush()
        if self.fsync:
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()  # closing releases the flock

    def __enter__(self) -> CallStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
