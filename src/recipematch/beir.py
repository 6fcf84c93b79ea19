"""The one BEIR-format reader and writer.

A BEIR folder holds ``corpus.jsonl`` (one ``{"_id", "title", "text", ...}`` object a
line), ``queries.jsonl`` (``{"_id", "text", "metadata"?}``) and
``qrels/<split>.tsv`` (``query-id<TAB>corpus-id<TAB>score``, optional header). The Hugging
Face copy of MathNet-Retrieve ships ``qrels/<split>.jsonl`` (one
``{"query-id", "corpus-id", "score"}`` object a line) instead; it is read when no TSV exists.

Rules (each one counted in :class:`BeirCounts`, never applied silently):

- **Encoding**: every file is UTF-8, read by the project's one reader
  (:mod:`recipematch.io`): a byte-order mark is skipped; bytes that are not UTF-8 and
  JSON escapes of lone surrogates (text no tokenizer can take) raise
  :class:`BeirFormatError` naming the file and line.
- **Malformed rows** (bad JSON, missing or non-string ``_id``/``text``, a duplicate id, a
  qrels row without three fields or with a score that is not a finite number) raise
  :class:`BeirFormatError` naming the file and the 1-based line.
- **Empty corpus text**: a corpus row whose title and text are both empty or whitespace is
  *kept* (it is a document of the collection and dropping it would change every rank
  behind it); the count is stored in ``BeirCounts.n_empty_corpus_texts`` and a warning is
  issued. Such a document is encoded as the empty string.
- **Qrels scores** are grades: integers (0/1/2, 0–5) are read as ``int``, other finite
  numbers (real-valued grades) as ``float``; a pair is a gold when its score is > 0 (BEIR's
  convention); rows with score <= 0 are kept in the qrels mapping (so a round trip is
  lossless) and counted. Graded measures (:mod:`recipematch.graded`) need integer grades.
- **Queries without a positive qrel** are not evaluated (they are counted); qrels rows whose
  query is absent from ``queries.jsonl`` are counted and ignored by evaluation.

The document text that is embedded is ``title + " " + text`` when the title is non-empty and
``text`` otherwise (:func:`doc_text`), the convention of sentence-transformers' BEIR code.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recipematch.errors import short_repr
from recipematch.io import FormatError, id_problem, iter_jsonl_strict, iter_tsv, sha256_texts

__all__ = [
    "BeirFormatError",
    "BeirCounts",
    "BeirDataset",
    "read_beir",
    "read_corpus",
    "iter_qrels_rows",
    "load_beir",
    "write_beir",
    "doc_text",
    "corpus_sha256",
    "queries_sha256",
    "qrels_sha256",
    "positive_qrels",
    "read_qrels_tsv",
]

Corpus = dict[str, dict]
Queries = dict[str, str]
Qrels = dict[str, dict[str, int]]


class BeirFormatError(FormatError):
    """A BEIR file is malformed; the message names the file and the 1-based line.

    A :class:`recipematch.errors.RecipematchError` (and, as before, a ``ValueError``)."""


@dataclass(frozen=True)
class BeirCounts:
    """What the reader saw, so that no row disappears without a number.

    Attributes:
        n_corpus: corpus rows read.
        n_empty_corpus_texts: corpus rows kept although title and text are both blank.
        n_queries: query rows read.
        n_qrels_rows: qrels rows read (all scores).
        n_qrels_nonpositive: qrels rows with score <= 0 (kept, never a gold).
        n_queries_without_positive: queries with no qrels row of score > 0 (not evaluated).
        n_qrels_queries_missing: distinct qrels query ids absent from queries.jsonl.
        n_qrels_docs_missing: distinct positive qrels doc ids absent from corpus.jsonl.
    """

    n_corpus: int
    n_empty_corpus_texts: int
    n_queries: int
    n_qrels_rows: int
    n_qrels_nonpositive: int
    n_queries_without_positive: int
    n_qrels_queries_missing: int
    n_qrels_docs_missing: int

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class BeirDataset:
    """A loaded BEIR folder.

    Attributes:
        corpus: ``doc_id -> {"title": str, "text": str, ...extra fields}`` in file order.
        queries: ``query_id -> text`` in file order.
        qrels: ``query_id -> {doc_id: score}`` in file order (all scores, see module rules).
        query_meta: ``query_id -> metadata dict`` (the ``metadata`` field, ``{}`` if absent).
        counts: :class:`BeirCounts`.
        folder: where it was read from.
        split: the qrels split.
    """

    corpus: Corpus
    queries: Queries
    qrels: Qrels
    query_meta: dict[str, dict] = field(default_factory=dict)
    counts: BeirCounts | None = None
    folder: Path | None = None
    split: str = "test"


def _checked_rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict]]:
    """``(line number, object)`` for each non-blank line of a BEIR JSONL file, every row checked.

    This module reads no JSON itself: the lines come from the project's one JSONL reader
    (:func:`recipematch.io.iter_jsonl_strict`: byte-order mark skipped, blank lines skipped (their
    numbers kept), invalid UTF-8, invalid JSON and lone surrogate escapes refused, a folder refused),
    whose refusal keeps its wording as a :class:`BeirFormatError`. Checked here: each row is an
    object, each ``required`` field is present and a string, an ``_id`` is a usable id. The
    whole file is read and checked before a caller's checks across rows (duplicates).

    Raises:
        BeirFormatError: naming the file and line (and the field) of a malformed row.
    """
    rows: list[tuple[int, dict]] = []
    try:
        for lineno, obj in iter_jsonl_strict(path):
            if not isinstance(obj, dict):
                raise BeirFormatError(f"{path}:{lineno}: expected a JSON object")
            for key in required:
                if key not in obj:
                    raise BeirFormatError(f"{path}:{lineno}: missing field {key!r}")
                if not isinstance(obj[key], str):
                    raise BeirFormatError(f"{path}:{lineno}: field {key!r} must be a string, got "
                                          f"{type(obj[key]).__name__}")
            if isinstance(obj.get("_id"), str) and (why := id_problem(obj["_id"])):
                raise BeirFormatError(f"{path}:{lineno}: _id {obj['_id']!r} {why}")
            rows.append((lineno, obj))
    except BeirFormatError:
        raise
    except FormatError as exc:
        raise BeirFormatError(str(exc)) from None
    return rows


_ASCII_INT = re.compile(r"[+-]?[0-9]+")
_ASCII_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_score(raw, path: str | os.PathLike, lineno: int) -> int | float:
    """A qrels grade: ``int`` when integral (``2``, ``"2"``, ``2.0``), else a finite ``float``.
    A string must be ASCII decimal notation: Python's ``int``/``float`` would also take other
    scripts' digits (``"٣"``), underscores (``"1_0"``), ``"nan"`` and ``"inf"``; these are refused.

    Raises:
        BeirFormatError: ``"<path>:<line>: field 'score' must be a finite number, got ..."``.
    """
    value = raw
    if isinstance(raw, str):
        text = raw.strip(" \t\r\n\f\v")  # ASCII blanks only
        if _ASCII_INT.fullmatch(text) and len(text) <= 400:  # exact; longer digit strings read as floats (inf)
            value = int(text)
        else:
            value = float(text) if _ASCII_FLOAT.fullmatch(text) else None
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > 10**300:  # a JSON integer past float's range: math.isfinite would overflow
            raise BeirFormatError(f"{path}:{lineno}: field 'score' must be a finite number of sensible size, "
                                  f"got {short_repr(raw, 60)}")
        return value
    if isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value):
        raise BeirFormatError(f"{path}:{lineno}: field 'score' must be a finite number, got {short_repr(raw, 60)}")
    return int(value) if value.is_integer() else value

QRELS_HEADER_NAMES = ("query-id", "query_id", "qid")


def read_qrels_tsv(path: str | os.PathLike) -> list[tuple[int, str, str, int]]:
    """Read a BEIR qrels TSV: ``(line, query_id, doc_id, score)`` per row, in file order.

    The first non-blank line is a header (skipped) when its first field is ``query-id``,
    ``query_id`` or ``qid``; a UTF-8 byte-order mark and ``\\r\\n`` line ends are accepted
    (:func:`recipematch.io.iter_tsv`). Ids are stripped of outer whitespace.

    Raises:
        BeirFormatError: a line is not UTF-8, has other than three fields, an empty id, or a
            score that is not a finite number (file and line named).
    """
    path = Path(path)
    out: list[tuple[int, str, str, int]] = []
    first = True
    try:
        for lineno, parts in iter_tsv(path):
            if first:
                first = False
                if parts[0].strip().lower() in QRELS_HEADER_NAMES:
                    continue
            if len(parts) != 3:
                raise BeirFormatError(
                    f"{path}:{lineno}: expected 3 tab-separated fields "
                    f"(query-id, corpus-id, score), got {len(parts)}"
                )
            qid, did, raw = (x.strip() for x in parts)
            if not qid or not did:
                raise BeirFormatError(f"{path}:{lineno}: empty query-id or corpus-id")
            out.append((lineno, qid, did, parse_score(raw, path, lineno)))
    except BeirFormatError:
        raise
    except FormatError as exc:
        raise BeirFormatError(str(exc)) from None
    return out


def iter_qrels_rows(folder: str | os.PathLike, split: str = "test"):
    """Each qrels row of a BEIR folder's split as ``(path, line, query_id, doc_id, score)``,
    from ``qrels/<split>.tsv`` or, when there is none, ``qrels/<split>.jsonl``.

    Raises:
        FileNotFoundError: neither file exists.
        BeirFormatError: a malformed row (file and line named).
    """
    folder = Path(folder)
    tsv = folder / "qrels" / f"{split}.tsv"
    jsonl = folder / "qrels" / f"{split}.jsonl"
    if tsv.exists():
        for lineno, qid, did, score in read_qrels_tsv(tsv):
            yield tsv, lineno, qid, did, score
    elif jsonl.exists():
        for lineno, obj in _checked_rows(jsonl, ("query-id", "corpus-id")):
            if "score" not in obj:
                raise BeirFormatError(f"{jsonl}:{lineno}: missing field 'score'")
            yield jsonl, lineno, obj["query-id"], obj["corpus-id"], parse_score(obj["score"], jsonl, lineno)
    else:
        raise FileNotFoundError(f"no qrels file: neither {tsv} nor {jsonl} exists")


def _read_qrels(folder: Path, split: str) -> tuple[Qrels, int]:
    qrels: Qrels = {}
    n_rows = 0
    for path, lineno, qid, did, score in iter_qrels_rows(folder, split):
        per_q = qrels.setdefault(qid, {})
        if did in per_q:
            raise BeirFormatError(f"{path}:{lineno}: duplicate qrels pair ({qid!r}, {did!r})")
        per_q[did] = score
        n_rows += 1
    return qrels, n_rows


def _read_corpus(corpus_path: Path) -> tuple[Corpus, int]:
    corpus: Corpus = {}
    n_empty = 0
    for lineno, obj in _checked_rows(corpus_path, ("_id", "text")):
        did = obj["_id"]
        if did in corpus:
            raise BeirFormatError(f"{corpus_path}:{lineno}: duplicate corpus _id {did!r}")
        title = obj.get("title", "")
        if title is None:
            title = ""
        if not isinstance(title, str):
            raise BeirFormatError(f"{corpus_path}:{lineno}: field 'title' must be a string")
        row = {k: v for k, v in obj.items() if k != "_id"}
        row["title"] = title
        if not (title.strip() or obj["text"].strip()):
            n_empty += 1
        corpus[did] = row
    return corpus, n_empty


def read_corpus(path: str | os.PathLike) -> Corpus:
    """Read one ``corpus.jsonl`` (a file, or the folder holding it) under the module's rules.

    Returns ``doc_id -> {"title", "text", ...}`` in file order; blank documents are kept
    and warned about.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "corpus.jsonl"
    corpus, n_empty = _read_corpus(path)
    if n_empty:
        warnings.warn(f"{path}: {n_empty} corpus rows have empty title and text; they are "
                      "kept and encoded as the empty string", stacklevel=2)
    return corpus


def read_beir(folder: str | os.PathLike, split: str = "test") -> BeirDataset:
    """Read a BEIR folder with its query metadata and the counts of every rule applied.

    Args:
        folder: directory with ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``
            (or ``qrels/<split>.jsonl``).
        split: qrels split name.

    Returns:
        :class:`BeirDataset`.

    Raises:
        FileNotFoundError: a required file is missing.
        BeirFormatError: a malformed row (message gives file and line).
    """
    folder = Path(folder)
    corpus_path = folder / "corpus.jsonl"
    queries_path = folder / "queries.jsonl"
    for p in (corpus_path, queries_path):
        if not p.exists():
            raise FileNotFoundError(f"missing BEIR file {p}")

    corpus, n_empty = _read_corpus(corpus_path)

    queries: Queries = {}
    query_meta: dict[str, dict] = {}
    for lineno, obj in _checked_rows(queries_path, ("_id", "text")):
        qid = obj["_id"]
        if qid in queries:
            raise BeirFormatError(f"{queries_path}:{lineno}: duplicate query _id {qid!r}")
        meta = obj.get("metadata") or {}
        if not isinstance(meta, dict):
            raise BeirFormatError(f"{queries_path}:{lineno}: 'metadata' must be an object")
        queries[qid] = obj["text"]
        query_meta[qid] = meta

    qrels, n_rows = _read_qrels(folder, split)
    n_nonpos = sum(1 for per_q in qrels.values() for s in per_q.values() if s <= 0)
    positive = positive_qrels(qrels)
    counts = BeirCounts(
        n_corpus=len(corpus),
        n_empty_corpus_texts=n_empty,
        n_queries=len(queries),
        n_qrels_rows=n_rows,
        n_qrels_nonpositive=n_nonpos,
        n_queries_without_positive=sum(1 for q in queries if not positive.get(q)),
        n_qrels_queries_missing=sum(1 for q in qrels if q not in queries),
        n_qrels_docs_missing=len({d for per_q in positive.values() for d in per_q
                                  if d not in corpus}),
    )
    if n_empty:
        warnings.warn(
            f"{corpus_path}: {n_empty} corpus rows have empty title and text; they are kept "
            "and encoded as the empty string",
            stacklevel=2,
        )
    return BeirDataset(corpus=corpus, queries=queries, qrels=qrels, query_meta=query_meta,
                       counts=counts, folder=folder, split=split)


def load_beir(folder: str | os.PathLike, split: str = "test") -> tuple[Corpus, Queries, Qrels]:
    """Load a BEIR folder as ``(corpus, queries, qrels)``.

    ``corpus`` maps doc id to ``{"title", "text", ...}``; ``queries`` maps query id to its
    text; ``qrels`` maps query id to ``{doc_id: score}`` (gold when score > 0). See the
    module docstring for the rules on malformed rows and empty texts, and
    :func:`read_beir` for the version that also returns metadata and counts.
    """
    ds = read_beir(folder, split)
    return ds.corpus, ds.queries, ds.qrels


def _dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True)


def write_beir(
    folder: str | os.PathLike,
    corpus: Mapping[str, Mapping],
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    split: str = "test",
    *,
    query_meta: Mapping[str, Mapping] | None = None,
) -> Path:
    """Write a BEIR folder with deterministic bytes.

    Rows come in the order given; each JSON line is ``json.dumps(row, ensure_ascii=False,
    sort_keys=True)``; files are UTF-8 with ``\\n`` line ends; the qrels TSV starts with the
    header ``query-id<TAB>corpus-id<TAB>score``. Corpus rows keep their extra fields and get
    ``title`` ``""`` when absent. A query's metadata, when given, is written as
    ``metadata``. Same inputs give byte-identical files.

    Raises:
        BeirFormatError: an id or a field contains a tab or newline that would break the TSV,
            or a text is not a string.
    """
    folder = Path(folder)
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8", newline="\n") as fh:
        for did, row in corpus.items():
            if not isinstance(row.get("text"), str):
                raise BeirFormatError(f"corpus row {did!r}: 'text' must be a string")
            out = {k: v for k, v in row.items() if k != "_id"}
            out["_id"] = did
            out.setdefault("title", "")
            fh.write(_dumps(out) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8", newline="\n") as fh:
        for qid, text in queries.items():
            if not isinstance(text, str):
                raise BeirFormatError(f"query {qid!r}: text must be a string")
            out = {"_id": qid, "text": text}
            if query_meta is not None and query_meta.get(qid):
                out["metadata"] = dict(query_meta[qid])
            fh.write(_dumps(out) + "\n")
    with open(folder / "qrels" / f"{split}.tsv", "w", encoding="utf-8", newline="\n") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid, per_q in qrels.items():
            for did, score in per_q.items():
                for ident in (qid, did):
                    if any(c in ident for c in "\t\n\r"):
                        raise BeirFormatError(f"qrels id {ident!r} contains a tab or newline")
                fh.write(f"{qid}\t{did}\t{_grade(score)!r}\n")
    return folder


def _grade(score) -> int | float:
    """A grade as written and hashed: ``int`` when integral, else ``float``.

    Raises:
        BeirFormatError: not a finite number (a bool is not a grade).
    """
    if isinstance(score, (bool, np.bool_)) or not isinstance(score, numbers.Real) or not math.isfinite(score):
        raise BeirFormatError(f"qrels score must be a finite number, got {short_repr(score, 60)}")
    return int(score) if float(score).is_integer() else float(score)


def doc_text(row: Mapping) -> str:
    """The text that is embedded for a corpus row: ``title + " " + text`` or ``text``."""
    title = (row.get("title") or "").strip()
    text = row.get("text") or ""
    return f"{title} {text}" if title else text


def _sha256_lines(lines) -> str:
    return sha256_texts(lines)


def corpus_sha256(corpus: Mapping[str, Mapping]) -> str:
    """SHA-256 of the corpus content: ids, titles and texts, taken in sorted id order.

    Independent of row order and of extra metadata fields, so two files with the same
    documents get the same identity.
    """
    return _sha256_lines(
        _dumps([did, corpus[did].get("title") or "", corpus[did].get("text") or ""])
        for did in sorted(corpus)
    )


def queries_sha256(queries: Mapping[str, str]) -> str:
    """SHA-256 of the queries (ids and texts, sorted by id)."""
    return _sha256_lines(_dumps([qid, queries[qid]]) for qid in sorted(queries))


def qrels_sha256(qrels: Mapping[str, Mapping[str, int]]) -> str:
    """SHA-256 of the qrels (sorted ``query, doc, score`` triples)."""
    return _sha256_lines(
        _dumps([qid, did, _grade(qrels[qid][did])])
        for qid in sorted(qrels) for did in sorted(qrels[qid])
    )


def positive_qrels(qrels: Mapping[str, Mapping[str, int]]) -> dict[str, list[str]]:
    """``query_id -> [doc ids with score > 0]`` in qrels order (queries with none omitted)."""
    out: dict[str, list[str]] = {}
    for qid, per_q in qrels.items():
        golds = [did for did, s in per_q.items() if s > 0]
        if golds:
            out[qid] = golds
    return out
