"""ImpliRet as BEIR folders (the paper, Section 6 and Table 20: an external benchmark no one in
the project built, scored by nDCG@10 macro-averaged over its six subsets).

ImpliRet (Taghavi et al., arXiv 2506.14407; Hugging Face ``zeinabTaghavi/ImpliRet``, MIT
licence) has two styles (``unispeaker``, ``multispeaker``) and three categories of implicit
fact (``arithmetic``, ``temporal``, ``wknow``). Each subset's rows pair a question with the one
document that answers it, implicitly; a question's search space is every document of its own
subset. The peer's release keeps one JSONL file per subset, ``<style>__<category>.jsonl``,
one ``{"pos_document", "question"}`` object a line; that is what this loader reads.

Rules:

- Row ``i`` (0-based, file order) of subset ``s`` becomes document ``d<i:05d>`` and query
  ``q<i:05d>`` with the one qrel ``q<i> -> d<i>``, grade 1. Query and document ids are separate
  namespaces (the default self-masking rule, ``id_and_text``, masks nothing here).
- A row that is not JSON, not an object, or lacks a non-empty string ``pos_document`` or
  ``question`` is refused with the file, line and field named; nothing is written.
- Documents with the same text (after :func:`recipematch.retrieval.selfmask.comparable_text`)
  are kept (each is another row's gold) and counted (``n_duplicate_documents``); the
  harness counts them per query as text twins.
- Each folder gets a ``MANIFEST.json``: source, revision, licence, the input's SHA-256 and
  the counts.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from recipematch.beir import write_beir
from recipematch.errors import RecipematchError, short_repr
from recipematch.io import BadLine, iter_jsonl
from recipematch.external import check_out_folder
from recipematch.rules import EXTERNAL_SUBSETS

__all__ = ["STYLES", "CATEGORIES", "SUBSETS", "SOURCE", "LICENCE", "read_subset", "build_folder",
           "build_folders"]

#: the benchmark's two styles and three categories (ImpliRet, Section 3)
STYLES = ("unispeaker", "multispeaker")
CATEGORIES = ("arithmetic", "temporal", "wknow")
#: the six subsets, ``<style>__<category>`` as the peer's release names its files
SUBSETS = EXTERNAL_SUBSETS["impliret"]
SOURCE = "ImpliRet (zeinabTaghavi/ImpliRet, arXiv 2506.14407), as released in KAUST-Academy/recipe-matching-not-equivalence data/impliret_eval/"
LICENCE = "MIT (ImpliRet's dataset card)"

_FIELDS = ("pos_document", "question")


def read_subset(path: str | os.PathLike) -> list[dict[str, str]]:
    """The rows of one subset file, checked.

    Returns:
        ``[{"pos_document": .., "question": ..}, ...]`` in file order (extra fields dropped).

    Raises:
        RecipematchError: a missing file, bytes that are not UTF-8, or a bad row (file, line
            and field named), or a file without rows.
    """
    path = Path(path)
    if not path.is_file():
        raise RecipematchError(f"ImpliRet: missing subset file {path}")
    rows = []
    for lineno, obj in iter_jsonl(path):
        if isinstance(obj, BadLine):
            raise RecipematchError(f"{path}:{lineno}: {obj.reason}")
        if not isinstance(obj, dict):
            raise RecipematchError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        for f in _FIELDS:
            v = obj.get(f)
            if not isinstance(v, str) or not v.strip():
                raise RecipematchError(f"{path}:{lineno}: field {f!r} must be a non-empty string, got {short_repr(v, 60)}")
        rows.append({f: obj[f] for f in _FIELDS})
    if not rows:
        raise RecipematchError(f"ImpliRet: {path} holds no rows")
    return rows


def build_folder(src: str | os.PathLike, out: str | os.PathLike, subset: str, *, revision: str = "",
                 max_rows: int | None = None) -> dict:
    """Write subset ``subset`` of the ImpliRet files in ``src`` as a BEIR folder ``out``.

    Args:
        src: folder holding ``<subset>.jsonl``.
        out: the BEIR folder to write (replaced whole; written aside, then renamed).
        subset: one of :data:`SUBSETS`.
        revision: the source revision to record (e.g. the release's commit).
        max_rows: keep only the first rows (a documented subsample), ``None`` for all.

    Returns:
        The manifest written to ``out/MANIFEST.json``.

    Raises:
        RecipematchError: an unknown subset, a bad ``max_rows``, or any check of :func:`read_subset`.
    """
    import shutil

    from recipematch.retrieval.selfmask import comparable_text  # lazy: recipematch.retrieval.selfmask pulls in pandas, torch

    if subset not in SUBSETS:
        raise RecipematchError(f"ImpliRet: unknown subset {short_repr(subset, 60)}; expected one of {list(SUBSETS)}")
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1):
        raise RecipematchError(f"ImpliRet: max_rows must be an integer >= 1 or none, got {short_repr(max_rows, 40)}")
    path = Path(src) / f"{subset}.jsonl"
    rows = read_subset(path)
    n_in_file = len(rows)
    rows = rows[:max_rows] if max_rows else rows
    corpus = {f"d{i:05d}": {"title": "", "text": r["pos_document"]} for i, r in enumerate(rows)}
    queries = {f"q{i:05d}": r["question"] for i, r in enumerate(rows)}
    qrels = {f"q{i:05d}": {f"d{i:05d}": 1} for i in range(len(rows))}
    texts = [comparable_text(r["pos_document"]) for r in rows]
    style, category = subset.split("__")
    manifest = {
        "benchmark": "ImpliRet", "subset": subset, "style": style, "category": category,
        "source": SOURCE, "revision": revision, "licence": LICENCE,
        "input": path.name, "input_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "n_rows_in_file": n_in_file, "n_rows_used": len(rows),
        "n_docs": len(corpus), "n_queries": len(queries), "n_qrels": len(rows),
        "n_duplicate_documents": len(texts) - len(set(texts)),
        "protocol": "each question searches every document of its subset; nDCG@10, macro-averaged over subsets",
    }

    out = check_out_folder(out, src, "ImpliRet")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    write_beir(tmp, corpus, queries, qrels)
    (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return manifest


def build_folders(src: str | os.PathLike, out: str | os.PathLike, subsets: Sequence[str], *, revision: str = "",
                  max_rows: int | None = None) -> dict[str, dict]:
    """:func:`build_folder` for each of ``subsets`` into ``out/<subset>/``; every file is
    checked before any folder is written.

    Raises:
        RecipematchError: no subset, a repeated one, an unknown one, or a missing file (all
            missing files named at once).
    """
    subsets = list(subsets)
    if not subsets:
        raise RecipematchError("ImpliRet: no subset named")
    if len(set(subsets)) != len(subsets):
        raise RecipematchError(f"ImpliRet: a subset is named twice in {subsets}")
    unknown = [s for s in subsets if s not in SUBSETS]
    if unknown:
        raise RecipematchError(f"ImpliRet: unknown subsets {unknown}; expected names from {list(SUBSETS)}")
    missing = [str(Path(src) / f"{s}.jsonl") for s in subsets if not (Path(src) / f"{s}.jsonl").is_file()]
    if missing:
        raise RecipematchError(f"ImpliRet: missing subset files {missing}")
    for s in subsets:  # every row of every file checked before anything is written
        read_subset(Path(src) / f"{s}.jsonl")
    return {s: build_folder(src, Path(out) / s, s, revision=revision, max_rows=max_rows) for s in subsets}
