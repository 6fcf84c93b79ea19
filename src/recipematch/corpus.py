"""Corpus loading and normalisation (pipeline stage 1; the corpus of the paper, Section 3).

Three sources give the same table (:func:`load_source` picks one by the ``data.source``
param):

* ``sample``: a BEIR ``corpus.jsonl`` (rows ``{"_id", "title", "text"}``), as the peer
  released it (:func:`load_beir_corpus`);
* ``mathnet``: the full MathNet collection (Hugging Face ``ShadenA/MathNet``, configuration
  ``all``, 27,817 records), read through ``datasets`` from a local folder of parquet/JSON
  files or, where a network exists, from the hub (:func:`load_mathnet`; the pipeline reads
  local folders only);
* ``jsonl``: any organic pool, one ``{"id", "text"}`` object per line (:func:`load_jsonl_pool`).

The output table has one row per usable problem with columns ``doc_id`` (str), ``title``
(str), ``text`` (str, NFC, ``\\r\\n`` → ``\\n``, outer whitespace stripped), ``language``
and ``domain`` (str, empty when unknown) and ``text_sha256``. A row that cannot be used (bad
JSON, missing or duplicate id, non-string or empty text) is not dropped silently: it
becomes a failure record ``{"doc_id", "line_no", "reason"}`` that the stage writes and
counts.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from recipematch.errors import RecipematchError
from recipematch.io import BadLine, canonical_json, id_problem, iter_jsonl, sha256_text

CORPUS_COLUMNS = ["doc_id", "title", "text", "language", "domain", "text_sha256"]


def normalise_text(text: str) -> str:
    """Unicode NFC, Windows/Mac newlines to ``\\n``, outer whitespace stripped.

    Inner whitespace and LaTeX are kept byte for byte: the anchor a model trains on is the
    corpus text itself.
    """
    return unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n")).strip()


@dataclass
class CorpusLoad:
    """Result of loading a corpus: the usable rows and a failure record per unusable one."""

    table: pd.DataFrame
    failures: list[dict[str, Any]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        by_reason: dict[str, int] = {}
        for f in self.failures:
            key = f["reason"].split(":")[0]
            by_reason[key] = by_reason.get(key, 0) + 1
        return {"rows_ok": int(len(self.table)), "rows_failed": len(self.failures), **{f"failed.{k}": v for k, v in sorted(by_reason.items())}}


def _build(records: Iterable[tuple[int, Any]], *, id_key: str, text_key: str, title_key: str | None,
           language_key: str | None, domain_key: str | None) -> CorpusLoad:
    rows: list[dict[str, str]] = []
    failures: list[dict[str, Any]] = []
    seen: set[str] = set()
    for line_no, rec in records:
        if isinstance(rec, BadLine):
            failures.append({"doc_id": None, "line_no": line_no, "reason": f"bad_json: {rec.reason}", "raw": rec.raw[:300]})
            continue
        if not isinstance(rec, Mapping):
            failures.append({"doc_id": None, "line_no": line_no, "reason": f"not_an_object: got {type(rec).__name__}"})
            continue
        raw_id = rec.get(id_key)
        if raw_id is None or (isinstance(raw_id, str) and not raw_id.strip()):
            failures.append({"doc_id": None, "line_no": line_no, "reason": f"missing_id: no '{id_key}'"})
            continue
        if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
            failures.append({"doc_id": None, "line_no": line_no,
                             "reason": f"bad_id: '{id_key}' is {type(raw_id).__name__}, not a string or integer"})
            continue
        doc_id = str(raw_id).strip()
        if why := id_problem(doc_id):
            failures.append({"doc_id": None, "line_no": line_no, "reason": f"bad_id: '{id_key}' {doc_id!r} {why}"})
            continue
        text = rec.get(text_key)
        if not isinstance(text, str):
            failures.append({"doc_id": doc_id, "line_no": line_no, "reason": f"bad_text: '{text_key}' is {type(text).__name__}, not a string"})
            continue
        text = normalise_text(text)
        if not text:
            failures.append({"doc_id": doc_id, "line_no": line_no, "reason": "empty_text: no text after whitespace stripping"})
            continue
        if doc_id in seen:
            failures.append({"doc_id": doc_id, "line_no": line_no, "reason": "duplicate_id: first occurrence kept"})
            continue
        seen.add(doc_id)

        def _opt(key: str | None) -> str:
            v = rec.get(key) if key else None
            return v if isinstance(v, str) else ("" if v is None else canonical_json(v))

        rows.append({"doc_id": doc_id, "title": _opt(title_key), "text": text, "language": _opt(language_key),
                     "domain": _opt(domain_key), "text_sha256": sha256_text(text)})
    table = pd.DataFrame(rows, columns=CORPUS_COLUMNS)
    return CorpusLoad(table=table, failures=failures)


def load_beir_corpus(path: str | Path, *, id_keys: tuple[str, ...] = ("_id",)) -> CorpusLoad:
    """Load a BEIR ``corpus.jsonl`` (one ``{"_id", "title", "text"}`` object per line).

    Optional ``metadata.language``/``metadata.domain`` (or top-level ``language``/``domain``)
    fields are kept when present. Rows keep file order. ``id_keys``: the id field names
    tried in order (``("_id", "id")`` reads a plain ``{"id", "text"}`` pool too).

    Raises:
        FileNotFoundError: if ``path`` does not exist. Bad rows never raise; see
        :class:`CorpusLoad`.
    """

    def records() -> Iterable[tuple[int, Any]]:
        for line_no, rec in iter_jsonl(path):
            if isinstance(rec, dict) and isinstance(rec.get("metadata"), dict):
                rec = {**rec.get("metadata", {}), **rec}
            if isinstance(rec, dict) and "_id" not in rec:
                found = next((k for k in id_keys if k in rec), None)
                if found is not None:
                    rec = {**rec, "_id": rec[found]}
            yield line_no, rec

    return _build(records(), id_key="_id", text_key="text", title_key="title", language_key="language", domain_key="domain")


def load_jsonl_pool(path: str | Path) -> CorpusLoad:
    """Load any organic problem pool: one JSON object per line with ``id`` and ``text``
    (``_id`` is accepted for ``id``, so a BEIR corpus file also loads); optional
    ``title``, ``language`` and ``domain`` strings are kept. Rows keep file order.

    Raises:
        FileNotFoundError: if ``path`` does not exist. Bad rows never raise; see
        :class:`CorpusLoad` (a row with neither ``id`` nor ``_id`` is ``missing_id``).
    """

    def records() -> Iterable[tuple[int, Any]]:
        for line_no, rec in iter_jsonl(path):
            if isinstance(rec, dict) and "id" not in rec and "_id" in rec:
                rec = {**rec, "id": rec["_id"]}
            yield line_no, rec

    return _build(records(), id_key="id", text_key="text", title_key="title", language_key="language",
                  domain_key="domain")


#: Column names tried, in order, when reading MathNet records (problem, solution,
#: metadata with id, language, domain/topic). Override with ``columns=`` for another layout.
MATHNET_COLUMNS: dict[str, tuple[str, ...]] = {
    "id": ("id", "_id", "problem_id", "uid"),
    "text": ("problem_markdown", "problem", "text", "statement"),
    "language": ("language", "lang"),
    "domain": ("domain", "topic", "subject"),
}


def _pick(columns: Iterable[str], candidates: tuple[str, ...], what: str, required: bool) -> str | None:
    cols = list(columns)
    for c in candidates:
        if c in cols:
            return c
    if required:
        raise KeyError(f"MathNet records have no {what} column; tried {list(candidates)}, found {cols}")
    return None


def load_mathnet(source: str | Path, *, config: str = "all", split: str = "train",
                 columns: Mapping[str, str] | None = None, revision: str | None = None) -> CorpusLoad:
    """Load MathNet problems (the paper, Section 3) into the corpus table.

    Args:
        source: a local folder holding ``*.parquet`` or ``*.jsonl``/``*.json`` files (read
            with ``datasets`` offline), or a hub dataset name such as ``"ShadenA/MathNet"``
            (needs network; the paper-scale configuration).
        config: hub configuration name (``"all"`` for the 27,817-record collection).
        split: split to read.
        columns: explicit ``{"id", "text", "language", "domain"}`` → column mapping; by
            default the names in :data:`MATHNET_COLUMNS` are tried in order.
        revision: hub revision to pin (recorded by the stage).

    Returns:
        :class:`CorpusLoad` with rows in dataset order.

    Raises:
        FileNotFoundError: a local folder with no parquet/JSON files.
        KeyError: no id or text column could be found.
    """
    import datasets

    path = Path(source)
    if path.exists():
        files = sorted(path.rglob("*.parquet"))
        if files:
            ds = datasets.load_dataset("parquet", data_files=[str(f) for f in files], split="train")
        else:
            files = sorted([*path.rglob("*.jsonl"), *path.rglob("*.json")])
            if not files:
                raise FileNotFoundError(f"no parquet or JSON files under {path}")
            ds = datasets.load_dataset("json", data_files=[str(f) for f in files], split="train")
    else:
        ds = datasets.load_dataset(str(source), config, split=split, revision=revision)
    cols = dict(columns or {})
    id_key = cols.get("id") or _pick(ds.column_names, MATHNET_COLUMNS["id"], "id", True)
    text_key = cols.get("text") or _pick(ds.column_names, MATHNET_COLUMNS["text"], "text", True)
    lang_key = cols.get("language") or _pick(ds.column_names, MATHNET_COLUMNS["language"], "language", False)
    dom_key = cols.get("domain") or _pick(ds.column_names, MATHNET_COLUMNS["domain"], "domain", False)
    return _build(((i + 1, rec) for i, rec in enumerate(ds)), id_key=id_key, text_key=text_key, title_key=None,
                  language_key=lang_key, domain_key=dom_key)


#: The organic sources the ``data.source`` param chooses from (paper Section 3).
SOURCES = ("sample", "mathnet", "jsonl")


def load_source(source: str, path: str | Path, *, key: str = "data.path") -> CorpusLoad:
    """Load the organic source problems named by the ``data`` params (paper Section 3).

    Args:
        source: ``"sample"`` (a BEIR ``corpus.jsonl``), ``"mathnet"`` (a local folder of the
            MathNet dataset's parquet/JSON files) or ``"jsonl"`` (one ``{"id", "text"}``
            object per line).
        path: that file or folder; it must exist locally (nothing is downloaded here).
        key: the params key named in error messages.

    Returns:
        :class:`CorpusLoad` (usable rows, a failure record per unusable row).

    Raises:
        RecipematchError: an unknown source, a missing path, a folder where a file is
            expected (or the reverse), a MathNet folder without parquet/JSON files or without
            an id or text column, or a source with no usable row.
    """
    if source not in SOURCES:
        raise RecipematchError(f"data.source must be one of {list(SOURCES)}, got {source!r}")
    path = Path(path)
    if not path.exists():
        hint = ("download it first, e.g. `huggingface-cli download ShadenA/MathNet --repo-type dataset "
                f"--local-dir {path}`, then `dvc add {path}`" if source == "mathnet"
                else "fetch the raw inputs with `dvc pull data.dvc`, or point the key at your file")
        raise RecipematchError(f"{key}: {path} does not exist ({hint})")
    if source == "mathnet":
        if not path.is_dir():
            raise RecipematchError(f"{key}: {path} must be a folder of the MathNet dataset's parquet or JSON files")
        try:
            loaded = load_mathnet(path)
        except (FileNotFoundError, KeyError) as e:
            raise RecipematchError(f"{key}: {path}: {e.args[0] if e.args else e}") from None
    else:
        if path.is_dir():
            raise RecipematchError(f"{key}: {path} is a folder; data.source {source} reads one JSON-lines file")
        loaded = load_beir_corpus(path) if source == "sample" else load_jsonl_pool(path)
    if loaded.table.empty:
        raise RecipematchError(f"{key}: {path} holds no usable problem ({len(loaded.failures)} rows failed; "
                               f"first: {loaded.failures[0]['reason'] if loaded.failures else 'the file is empty'})")
    return loaded


def read_corpus(path: str | Path) -> pd.DataFrame:
    """Read the corpus parquet written by the corpus stage (columns :data:`CORPUS_COLUMNS`)."""
    df = pd.read_parquet(path)
    missing = set(CORPUS_COLUMNS) - set(df.columns)
    if missing:
        raise ValueError(f"{path}: corpus table lacks columns {sorted(missing)}")
    return df
