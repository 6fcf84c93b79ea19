"""BRIGHT's two math theorem splits as BEIR folders (the paper, Section 6 and Table 20: an
external benchmark, scored by nDCG@10 with BRIGHT's excluded ids taken out of each ranking).

BRIGHT (Su et al., arXiv 2407.12883; Hugging Face ``xlangai/BRIGHT``, CC BY 4.0) ships two
configurations as parquet, one file per split: ``documents/<split>-*.parquet`` with columns
``id, content`` and ``examples/<split>-*.parquet`` with ``id, query, reasoning, gold_ids,
gold_ids_long, excluded_ids``. The paper reads the splits ``theoremqa_theorems`` and ``aops``.

Rules:

- Corpus: every document of the split (``_id`` = its id, ``text`` = its content, no title);
  queries: every example; qrels: the example's ``gold_ids``, grade 1 (the short-document
  golds BRIGHT scores by default; ``gold_ids_long`` is kept in the query's metadata).
- ``excluded_ids`` (documents BRIGHT takes out of that query's ranking; the placeholder
  ``"N/A"`` means none) are written to ``excluded_ids.json`` (``query_id -> [doc ids]``) and
  applied by :func:`recipematch.graded.topk_run` (``exclude=``; the file is
  :data:`recipematch.graded_files.EXCLUDED_FILE`, read by :func:`recipematch.graded_files.read_excluded`), as BRIGHT's own evaluation
  sets their scores to minus infinity before ranking.
- A gold or excluded id that is not a document, a gold that is also excluded, a duplicate id,
  a missing column or file: one line naming the file and what is wrong; nothing is written.
- ``MANIFEST.json``: source, revision, licence, each input's SHA-256, the counts.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from recipematch.beir import write_beir
from recipematch.errors import RecipematchError, short_repr
from recipematch.external import check_out_folder, read_parquet_rows
from recipematch.graded_files import EXCLUDED_FILE, read_excluded
from recipematch.io import id_problem
from recipematch.rules import EXTERNAL_SUBSETS

__all__ = ["SPLITS", "SOURCE", "LICENCE", "EXCLUDED_FILE", "build_folder", "read_excluded"]

#: the splits the paper reads (Section 6: BRIGHT's math theorem retrieval)
SPLITS = EXTERNAL_SUBSETS["bright"]
SOURCE = "BRIGHT (xlangai/BRIGHT, arXiv 2407.12883): configurations documents and examples"
LICENCE = "CC BY 4.0 (BRIGHT's dataset card)"
_NA = "N/A"


def _one_file(root: Path, config: str, split: str) -> Path:
    files = sorted((root / config).glob(f"{split}-*.parquet")) + sorted((root / config / split).glob("*.parquet"))
    if not files:
        raise RecipematchError(f"BRIGHT: no {config} file for split {split!r} under {root / config} "
                               f"(expected {config}/{split}-00000-of-00001.parquet)")
    if len(files) > 1:
        raise RecipematchError(f"BRIGHT: {len(files)} {config} files for split {split!r}: {[str(f) for f in files]}; "
                               "expected one")
    return files[0]


def _id(value, path: Path, row: int, field: str) -> str:
    """One id, usable as it is: a string without outer blanks, tabs or line breaks (they would
    be stripped or split when the BEIR files are read back, naming another document)."""
    if not isinstance(value, str):
        raise RecipematchError(f"BRIGHT: {path}: row {row}: field {field!r}: an id must be a string, got {short_repr(value, 60)}")
    problem = id_problem(value) or ("has blanks at an end" if value != value.strip() else None)
    if problem:
        raise RecipematchError(f"BRIGHT: {path}: row {row}: field {field!r}: id {short_repr(value, 60)} {problem}")
    return value


def _ids(value, path: Path, row: int, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise RecipematchError(f"BRIGHT: {path}: row {row}: field {field!r} must be a list of ids, got {short_repr(value, 60)}")
    return [_id(x, path, row, field) for x in value if x != _NA]


def build_folder(root: str | os.PathLike, out: str | os.PathLike, split: str, *, revision: str = "") -> dict:
    """Write BRIGHT split ``split`` from the local copy ``root`` as a BEIR folder ``out``.

    Args:
        root: a local copy of ``xlangai/BRIGHT`` (holding ``documents/`` and ``examples/``).
        out: the folder to write (replaced whole; written aside, then renamed).
        split: one of :data:`SPLITS` (another BRIGHT split is read the same way).
        revision: the source revision to record.

    Returns:
        The manifest written to ``out/MANIFEST.json``.

    Raises:
        RecipematchError: a missing file or column, a bad row, an unknown gold or excluded
            id, a gold that is excluded, or a duplicate id (file and row named).
    """
    root = Path(root)
    if not isinstance(split, str) or not split or "/" in split or split.startswith("."):
        raise RecipematchError(f"BRIGHT: split must be a plain name such as {SPLITS[0]!r}, got {short_repr(split, 60)}")
    doc_path, ex_path = _one_file(root, "documents", split), _one_file(root, "examples", split)
    corpus: dict[str, dict] = {}
    for i, r in enumerate(read_parquet_rows(doc_path, ("id", "content"), "BRIGHT")):
        did, text = _id(r["id"], doc_path, i, "id"), r["content"]
        if not isinstance(text, str):
            raise RecipematchError(f"BRIGHT: {doc_path}: row {i}: 'content' must be a string")
        if did in corpus:
            raise RecipematchError(f"BRIGHT: {doc_path}: row {i}: duplicate document id {did!r}")
        corpus[did] = {"title": "", "text": text}
    queries, qrels, meta, excluded = {}, {}, {}, {}
    ex_columns = ("id", "query", "gold_ids", "gold_ids_long", "excluded_ids")
    for i, r in enumerate(read_parquet_rows(ex_path, ex_columns, "BRIGHT")):
        qid, text = _id(r["id"], ex_path, i, "id"), r["query"]
        if not isinstance(text, str) or not text.strip():
            raise RecipematchError(f"BRIGHT: {ex_path}: row {i}: 'query' must be a non-empty string")
        if qid in queries:
            raise RecipematchError(f"BRIGHT: {ex_path}: row {i}: duplicate example id {qid!r}")
        gold = _ids(r["gold_ids"], ex_path, i, "gold_ids")
        excl = _ids(r["excluded_ids"], ex_path, i, "excluded_ids")
        if not gold:
            raise RecipematchError(f"BRIGHT: {ex_path}: row {i} ({qid!r}): no gold_ids")
        unknown = [d for d in gold + excl if d not in corpus]
        if unknown:
            raise RecipematchError(f"BRIGHT: {ex_path}: row {i} ({qid!r}): ids not among the documents: "
                                   f"{short_repr(unknown[:3], 120)}")
        both = sorted(set(gold) & set(excl))
        if both:
            raise RecipematchError(f"BRIGHT: {ex_path}: row {i} ({qid!r}): gold ids also excluded: {short_repr(both, 120)}")
        queries[qid] = text
        qrels[qid] = {d: 1 for d in dict.fromkeys(gold)}
        meta[qid] = {"gold_ids_long": _ids(r["gold_ids_long"], ex_path, i, "gold_ids_long")}
        if excl:
            excluded[qid] = sorted(set(excl))
    if not queries:
        raise RecipematchError(f"BRIGHT: {ex_path}: no examples")
    manifest = {
        "benchmark": "BRIGHT", "split": split, "source": SOURCE, "revision": revision, "licence": LICENCE,
        "inputs": {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in (doc_path, ex_path)},
        "n_docs": len(corpus), "n_queries": len(queries), "n_qrels": sum(len(v) for v in qrels.values()),
        "n_queries_with_excluded": len(excluded), "n_excluded": sum(len(v) for v in excluded.values()),
        "protocol": "nDCG@10 over gold_ids, each query's excluded_ids taken out of its ranking",
    }

    out = check_out_folder(out, root, "BRIGHT")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    write_beir(tmp, corpus, queries, qrels, query_meta=meta)
    (tmp / EXCLUDED_FILE).write_text(json.dumps(excluded, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return manifest
