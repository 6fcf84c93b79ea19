"""Small, deterministic file helpers shared by every stage.

All writers are atomic (write to a temporary file in the same folder, then rename), so an
interrupted stage never leaves a half-written output that a rerun would mistake for a
finished one. JSON is written with sorted keys and ``ensure_ascii=False`` so that the same
inputs give byte-identical files.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError


def canonical_json(obj: Any) -> str:
    """One-line JSON with sorted keys, no spaces, UTF-8 characters kept, NaN refused: the
    project's one canonical form (every content hash of a JSON value uses it).

    Raises:
        ValueError: ``obj`` holds NaN or an infinity.
    """
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data`` (64 lowercase hex characters)."""
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str, *, errors: str = "strict") -> str:
    """Hex SHA-256 of ``text`` encoded as UTF-8.

    ``errors`` is passed to :meth:`str.encode`: ``"strict"`` raises ``UnicodeEncodeError`` on a
    lone surrogate, ``"surrogatepass"`` hashes it instead (for raw model answers that may
    hold one). Both give the same value for any valid text.
    """
    return sha256_bytes(text.encode("utf-8", errors))


def sha256_texts(texts: Iterable[str], *, count: int | None = None) -> str:
    """Hex SHA-256 of a sequence of texts, so that text boundaries count.

    Each text is hashed as its UTF-8 byte length (8 bytes, little-endian) followed by its
    bytes; with ``count`` given, ``count`` (8 bytes, little-endian) is hashed first. Used for
    the identity of an ordered list of texts (embedding cache keys) and of BEIR files.
    """
    h = hashlib.sha256()
    if count is not None:
        h.update(int(count).to_bytes(8, "little"))
    for t in texts:
        data = t.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in ``chunk``-byte pieces.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
    """
    h = hashlib.sha256()
    if os.path.isdir(path):
        raise FormatError(f"{path}: is a folder, expected a file")
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_tree(path: str | os.PathLike[str]) -> str:
    """Content hash of a file or of a folder (relative paths and file hashes, sorted).

    The hash ignores timestamps and permissions, so two folders with the same files give
    the same value. This is the project's one folder-hash rule: checkpoints (every
    checkpoint versioned by content), a model folder's revision in an encoder's cache key,
    and the input hashes of run records.
    """
    p = Path(path)
    if p.is_file():
        return sha256_file(p)
    h = hashlib.sha256()
    for f in sorted(x for x in p.rglob("*") if x.is_file()):
        h.update(f.relative_to(p).as_posix().encode("utf-8") + b"\0")
        h.update(sha256_file(f).encode("ascii") + b"\n")
    return h.hexdigest()


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically, creating parent folders.

    Raises:
        IsADirectoryError: ``path`` is a folder (named, not the temporary file).
    """
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(p))
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; outputs are ordinary readable files
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted JSON (metrics and run records)."""
    atomic_write_text(path, json.dumps(obj, ensure_ascii=False, sort_keys=True, indent=2) + "\n")


class _RepeatedKey(Exception):
    """A JSON object repeats a key (raised by :func:`_unique_pairs`, named by :func:`read_json`)."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        raise _RepeatedKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return out


def read_json(path: str | os.PathLike[str], *, unique_keys: bool = False, finite: bool = False) -> Any:
    """Read a JSON file written by :func:`write_json`. With ``unique_keys``, an object that
    repeats a key is refused (JSON's parsers keep the last one without a word); with
    ``finite``, a ``NaN``, ``Infinity`` or a number too large for a float (``1e999``), which
    :func:`write_json` never writes.

    Raises:
        FileNotFoundError: the file does not exist (the stage door names the file and the
            stage to run).
        FormatError: the file is not valid UTF-8 JSON (an integer beyond Python's digit limit
            included), is nested too deep for the parser, is a folder or a symlink loop
            (naming the file).
    """
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f, object_pairs_hook=_unique_pairs if unique_keys else None,
                             **({"parse_constant": _no_constant, "parse_float": _finite_float} if finite else {}))
    except _NotFinite as e:
        raise FormatError(f"{path}: holds the number {str(e)[:40]}, which no stage writes; rebuild it (dvc repro)") from None
    except _RepeatedKey as e:
        raise FormatError(f"{path}: an object repeats the key {str(e)[:80]!r}; rebuild it (dvc repro)") from None
    except IsADirectoryError:
        raise FormatError(f"{path}: is a folder, expected a JSON file") from None
    except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError, and an integer over Python's digit limit
        raise FormatError(f"{path}: not valid JSON ({e}); rebuild it (dvc repro)") from None
    except RecursionError:
        raise FormatError(f"{path}: JSON nested too deep to read; rebuild it (dvc repro)") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise FormatError(f"{path}: a symlink loop, not a JSON file") from None
        raise


class _NotFinite(Exception):
    pass


def _no_constant(text: str) -> float:
    raise _NotFinite(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[Any]) -> int:
    """Write rows as canonical JSON lines atomically; returns the number of rows."""
    lines = [canonical_json(r) for r in rows]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


@dataclass(frozen=True)
class BadLine:
    """A JSONL line that could not be read: where it is and why (never dropped silently).

    ``error`` is the :class:`UnicodeDecodeError`, :class:`json.JSONDecodeError`,
    :class:`RecursionError` or :class:`ValueError` that refused the line (``None`` for a
    lone surrogate escape), for a caller that words its own message.
    """

    path: str
    line_no: int
    reason: str
    raw: str
    error: Exception | None = field(default=None, compare=False, repr=False)

    def as_record(self) -> dict[str, Any]:
        return {"path": self.path, "line_no": self.line_no, "reason": self.reason, "raw": self.raw[:500]}


def _has_lone_surrogate(obj: Any) -> bool:
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(obj, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in obj.items())
    if isinstance(obj, list):
        return any(_has_lone_surrogate(v) for v in obj)
    return False


def _raw_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, bytes]]:
    """``(line_no, bytes)`` of a file, 1-based, a UTF-8 byte-order mark at the start removed.

    Raises:
        FormatError: ``path`` is a folder.
        FileNotFoundError: ``path`` does not exist.
    """
    if os.path.isdir(path):
        raise FormatError(f"{path}: is a folder, expected a file")
    with open(path, "rb") as f:
        for i, raw in enumerate(f, start=1):
            yield i, (raw[3:] if i == 1 and raw.startswith(b"\xef\xbb\xbf") else raw)


def iter_jsonl(
    path: str | os.PathLike[str], *, allow_lone_surrogates: bool = False,
) -> Iterator[tuple[int, Any | BadLine]]:
    """Yield ``(line_no, obj)`` for each non-blank line (1-based line numbers).

    ``obj`` is a :class:`BadLine` when the line is not valid UTF-8, not valid JSON, nests too
    deeply, or holds a lone surrogate escape (text that cannot be written back as UTF-8;
    kept instead with ``allow_lone_surrogates``, for recorded model answers that may hold
    one). A UTF-8 byte-order mark at the start of the file is skipped. Never raises on bad
    content.
    """
    for i, raw in _raw_lines(path):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            shown = raw.decode("utf-8", "replace").rstrip("\n")
            yield i, BadLine(str(path), i, f"invalid UTF-8: byte {e.start}", shown, e)
            continue
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            yield i, BadLine(str(path), i, f"invalid JSON: {e.msg} at column {e.colno}", line.rstrip("\n"), e)
            continue
        except (RecursionError, ValueError) as e:
            yield i, BadLine(str(path), i, f"invalid JSON: {type(e).__name__}: {str(e)[:100]}", line[:500], e)
            continue
        if not allow_lone_surrogates and _has_lone_surrogate(obj):
            yield i, BadLine(str(path), i, "invalid text: lone surrogate escape", line[:500])
            continue
        yield i, obj


class FormatError(RecipematchError, ValueError):
    """A file holds a line that cannot be read (bad encoding, bad JSON, a missing or
    mistyped field); the message names the file and the 1-based line (``path:line: ...``)
    and, where one is at fault, the field."""


def iter_jsonl_strict(
    path: str | os.PathLike[str],
    *,
    error: Callable[[BadLine], Exception] | None = None,
    allow_lone_surrogates: bool = False,
) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_no, obj)`` for each non-blank line; raise on the first bad line.

    The one JSONL reader of the project: same rules as :func:`iter_jsonl` (UTF-8 byte-order
    mark skipped; invalid UTF-8, invalid JSON and lone surrogate escapes refused, the last
    kept with ``allow_lone_surrogates``), but a bad line stops the read. ``error`` turns the
    bad line into the exception raised, for a caller with its own wording (the LLM layer's
    ``"<path>, line <n>: ..."``); by default a :class:`FormatError`.

    Raises:
        FormatError: ``"<path>:<line>: not valid JSON Lines: <reason>"`` (or what ``error``
            returns), or ``path`` is a folder.
        FileNotFoundError: ``path`` does not exist.
    """
    for i, obj in iter_jsonl(path, allow_lone_surrogates=allow_lone_surrogates):
        if isinstance(obj, BadLine):
            if error is not None:
                raise error(obj)
            raise FormatError(f"{path}:{i}: not valid JSON Lines: {obj.reason}; fix or remove that line")
        yield i, obj


def read_jsonl_strict(path: str | os.PathLike[str]) -> list[Any]:
    """Read a whole JSONL file (see :func:`iter_jsonl_strict`); objects in file order.

    Raises:
        FormatError: naming the file and line of the first malformed line.
    """
    return [obj for _, obj in iter_jsonl_strict(path)]


def iter_tsv(path: str | os.PathLike[str]) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line_no, fields)`` for each non-blank line of a tab-separated UTF-8 file.

    A UTF-8 byte-order mark at the start is skipped; ``\\n`` and ``\\r\\n`` line ends are
    removed; fields are split on tabs and not otherwise changed. Header detection is the
    caller's (it knows the column names).

    Raises:
        FormatError: a line is not valid UTF-8 (file and line named).
        FileNotFoundError: ``path`` does not exist.
    """
    for i, raw in _raw_lines(path):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(f"{path}:{i}: not valid UTF-8 (byte {e.start} of the line); "
                              "save the file as UTF-8") from None
        line = line.rstrip("\n").rstrip("\r")
        if not line.strip():
            continue
        yield i, line.split("\t")


#: characters an id may not hold: qrels, exclusion lists and rank files are tab-separated,
#: one record a line, so an id with a tab or a line break would split its row
ID_FORBIDDEN = {"\t": "a tab", "\n": "a line break", "\r": "a carriage return", "\x00": "a NUL byte"}


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a document, query or source id, or None when it can.

    Returns:
        ``None`` for a usable id; otherwise a short reason (``"holds a tab"``, ``"is empty"``).
    """
    if not value.strip():
        return "is empty"
    for ch, name in ID_FORBIDDEN.items():
        if ch in value:
            return f"holds {name} (ids are written to tab-separated, one-row-a-line files)"
    return None


@contextmanager
def building_dir(out: str | os.PathLike[str]) -> Iterator[Path]:
    """Build a stage's output folder whole or not at all: yields a fresh sibling
    ``<out>.partial`` folder to write into; when the block ends normally it replaces ``out``
    (whatever is there: a folder, a file; a symlink to a folder is followed and kept), and on
    any error it is removed and the previous ``out`` is kept.

    Raises:
        OSError: the folder cannot be removed or renamed (``<out>.partial`` removed first).
    """
    out = Path(out)
    if out.is_symlink() and out.is_dir():  # a folder kept on another disk: built there, the link kept
        out = out.resolve()
    tmp = out.with_name(out.name + ".partial")
    _remove(tmp)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        _remove(out)  # a folder, a file or a dangling link where the folder goes
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _remove(path: Path) -> None:
    """Remove ``path`` whatever it is (a folder, a file, a link, nothing)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
