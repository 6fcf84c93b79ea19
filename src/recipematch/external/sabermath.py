"""SABER-Math as BEIR folders (the paper, Section 6 and Table 20: an external benchmark no one in
the project built, scored by nDCG@10 with exponential gain on its real-valued 0-5 grades).

SABER-Math (arXiv 2606.29894; Hugging Face ``INSAIT-Institute/SaberMath-queries`` and
``INSAIT-Institute/SaberMath-documents``) is a *reranking* benchmark: 1,000 queries, each with
150 candidate documents graded by a Bradley-Terry fit of pairwise LLM judgments rescaled to
[0, 5] (SABER-Math, Section 3.5). Each repository ships one parquet file,
``data/train-00000-of-00001.parquet``; a local copy keeps them as
``<copy>/queries/data/*.parquet`` and ``<copy>/documents/data/*.parquet`` (the layout a
snapshot of each repository has). Columns read:

- queries: ``problem``, ``solution`` (strings), ``candidates`` (150 **positional** row indices
  into the documents file, not its ``original_index`` column), ``relevance_scores`` (150
  grades in [0, 5], aligned with ``candidates``), ``domains`` (list of top-level branches);
- documents: ``problem``, ``solution``.

Rules (SABER-Math's own benchmark code, as the paper's Appendix D calibrates against it):

- **Texts by setting** (the subsets): a *statement* is the ``problem`` verbatim; a *full*
  text is ``"Problem: {problem}\\n\\nSolution: {solution}"``. ``statement-full`` (queries
  statements, documents full: SABER-Math's Table 1, the paper's Table 20) is the main setting;
  ``statement-statement`` and ``full-full`` are the other two.
- **Ids**: query row ``i`` (0-based) is ``q<i:04d>``; document row ``j`` is ``d<j:06d>``. The
  corpus holds every document some kept query names as a candidate, in row order.
- **Qrels**: every candidate with its grade as written (real-valued, zeros kept: the ideal
  DCG is computed over all of a query's candidates, as SABER-Math computes it).
- **Candidates**: ``candidates.json`` (``query id -> [doc ids]`` in the file's order); a graded
  run of such a folder ranks each query's candidates only (:mod:`recipematch.graded`: the
  reranking protocol), by score descending then document id.
- ``max_rows`` keeps the first queries only (a documented subsample; the corpus shrinks to
  their candidates, and with it the collection statistics BM25 reads, so a query's BM25 score
  depends on which others are kept; an encoder's does not).
- A query none of whose candidates has a grade above 0 is refused (SABER-Math rescales each
  query's ratings to [0, 5]; BEIR's convention would leave such a query out of every mean).
- A missing file or column, a candidate index outside the documents, a repeated candidate, a
  grade that is not a finite number in [0, 5], lists of different lengths, an empty text: one
  line naming the file, row and field; nothing is written.
- ``MANIFEST.json``: source, revision, licence, each input's SHA-256, the counts, the protocol.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path

from recipematch.beir import write_beir
from recipematch.errors import RecipematchError, short_repr
from recipematch.external import check_out_folder, read_parquet_rows
from recipematch.graded_files import CANDIDATES_FILE
from recipematch.rules import EXTERNAL_SUBSETS

__all__ = ["SETTINGS", "SOURCE", "LICENCE", "GRADE_SCALE", "BRANCHES", "REQUIRED_COLUMNS", "full_text", "copy_problem",
           "read_copy", "build_folder"]

#: the three settings SABER-Math reports (its Section 4 and Table 4): ``<query text>-<document text>``
SETTINGS = EXTERNAL_SUBSETS["sabermath"]
SOURCE = ("SABER-Math (INSAIT-Institute/SaberMath-queries and INSAIT-Institute/SaberMath-documents, "
          "arXiv 2606.29894)")
LICENCE = "as the two dataset cards state (recorded from the copy's revision; not shipped with the copy)"
#: the grade scale of SABER-Math's ratings (Bradley-Terry scores rescaled to [0, 5], its Section 3.5)
GRADE_SCALE = (0.0, 5.0)
#: SABER-Math's five top-level domains (its Section 3.4)
BRANCHES = ("Algebra", "Geometry", "Number Theory", "Combinatorics", "Calculus and Analysis")

_QUERY_COLUMNS = ("problem", "solution", "candidates", "relevance_scores", "domains")
_DOC_COLUMNS = ("problem", "solution")
#: the columns the loader reads, by repository folder (what ``recipematch plan`` checks)
REQUIRED_COLUMNS = {"queries": _QUERY_COLUMNS, "documents": _DOC_COLUMNS}


def full_text(problem: str, solution: str) -> str:
    """A problem with its solution, as SABER-Math's benchmark code joins them for the *full*
    setting: ``"Problem: {problem}\\n\\nSolution: {solution}"``."""
    return f"Problem: {problem}\n\nSolution: {solution}"


def _parquet_files(root: Path, repo: str) -> list[Path]:
    """A repository snapshot's parquet files (the layout of the module docstring)."""
    return sorted((root / repo / "data").glob("*.parquet"))


def copy_problem(root: str | os.PathLike) -> str | None:
    """What a local copy lacks for :func:`read_copy` (one parquet per repository, readable,
    with the loader's columns), read from the parquet footers only (``recipematch plan``);
    ``None`` when it is usable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(root)
    for repo, columns in REQUIRED_COLUMNS.items():
        files = _parquet_files(root, repo)
        if len(files) != 1:
            return f"{repo}/data/ holds {len(files)} parquet files, expected one"
        try:
            names = pq.read_schema(files[0]).names
        except (pa.ArrowException, OSError) as exc:
            return f"{files[0].relative_to(root)} is not a readable parquet file ({type(exc).__name__})"
        missing = [c for c in columns if c not in names]
        if missing:
            return f"{files[0].relative_to(root)} lacks columns {missing}"
    return None


def _one_file(root: Path, repo: str) -> Path:
    files = _parquet_files(root, repo)
    if not files:
        raise RecipematchError(f"SABER-Math: no parquet file under {root / repo / 'data'} (expected "
                               f"{repo}/data/train-00000-of-00001.parquet, from INSAIT-Institute/SaberMath-{repo})")
    if len(files) > 1:
        raise RecipematchError(f"SABER-Math: {len(files)} parquet files under {root / repo / 'data'}; expected one")
    return files[0]


def _text(value, path: Path, row: int, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RecipematchError(f"SABER-Math: {path}: row {row}: field {field!r} must be a non-empty string, "
                               f"got {short_repr(value, 60)}")
    return value


def read_copy(root: str | os.PathLike, *, max_rows: int | None = None) -> tuple[list[dict], list[dict], dict]:
    """The checked rows of a local SABER-Math copy.

    Args:
        root: the copy (``queries/data/*.parquet``, ``documents/data/*.parquet``).
        max_rows: keep the first queries only (``None`` or 0 = all).

    Returns:
        ``(queries, documents, inputs)``: query rows (the five columns; ``candidates`` as ints,
        ``relevance_scores`` as floats), every document row, and ``{relative path: SHA-256}``.

    Raises:
        RecipematchError: any rule of the module docstring (file, row and field named).
    """
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0):
        raise RecipematchError(f"SABER-Math: max_rows must be an integer >= 0 (0 = all), got {short_repr(max_rows, 40)}")
    root = Path(root)
    q_path, d_path = _one_file(root, "queries"), _one_file(root, "documents")
    docs = read_parquet_rows(d_path, _DOC_COLUMNS, "SABER-Math")
    if not docs:
        raise RecipematchError(f"SABER-Math: {d_path}: no documents")
    for j, r in enumerate(docs):
        for f in _DOC_COLUMNS:
            _text(r[f], d_path, j, f)
    rows = read_parquet_rows(q_path, _QUERY_COLUMNS, "SABER-Math")
    if max_rows:
        rows = rows[:max_rows]
    if not rows:
        raise RecipematchError(f"SABER-Math: {q_path}: no queries")
    lo, hi = GRADE_SCALE
    for i, r in enumerate(rows):
        for f in ("problem", "solution"):
            _text(r[f], q_path, i, f)
        cand, grades = r["candidates"], r["relevance_scores"]
        if not isinstance(cand, list) or not cand:
            raise RecipematchError(f"SABER-Math: {q_path}: row {i}: field 'candidates' must be a non-empty list")
        if not isinstance(grades, list) or len(grades) != len(cand):
            raise RecipematchError(f"SABER-Math: {q_path}: row {i}: field 'relevance_scores' must be a list as long "
                                   f"as 'candidates' ({len(cand)}), got {short_repr(grades, 60)}")
        for c in cand:
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < len(docs):
                raise RecipematchError(f"SABER-Math: {q_path}: row {i}: field 'candidates': {short_repr(c, 30)} is not a "
                                       f"row of {d_path.name} (positional indices 0..{len(docs) - 1})")
        if len(set(cand)) != len(cand):
            raise RecipematchError(f"SABER-Math: {q_path}: row {i}: field 'candidates' names a document twice")
        for g in grades:
            if isinstance(g, bool) or not isinstance(g, (int, float)):
                raise RecipematchError(f"SABER-Math: {q_path}: row {i}: field 'relevance_scores': {short_repr(g, 30)} "
                                       "is not a number (int or float)")
            if not math.isfinite(g) or not lo <= g <= hi:
                raise RecipematchError(f"SABER-Math: {q_path}: row {i}: field 'relevance_scores': {short_repr(g, 30)} "
                                       f"is not a grade in [{lo:g}, {hi:g}]")
        if not any(g > 0 for g in grades):  # each query's ratings are rescaled to [0, 5]: its best is 5
            raise RecipematchError(f"SABER-Math: {q_path}: row {i}: field 'relevance_scores': no candidate has a grade "
                                   "above 0 (SABER-Math rescales each query's ratings to [0, 5]; such a query would "
                                   "be left out of every mean)")
        doms = r["domains"]
        if doms is None:
            doms = []
        if not isinstance(doms, list) or not all(isinstance(x, str) for x in doms):
            raise RecipematchError(f"SABER-Math: {q_path}: row {i}: field 'domains' must be a list of strings")
        r["candidates"], r["relevance_scores"], r["domains"] = [int(c) for c in cand], [float(g) for g in grades], doms
    inputs = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in (q_path, d_path)}
    return rows, docs, inputs


def build_folder(root: str | os.PathLike, out: str | os.PathLike, setting: str, *, revision: str = "",
                 max_rows: int | None = None, rows: tuple | None = None) -> dict:
    """Write SABER-Math under ``setting`` from the local copy ``root`` as a BEIR folder ``out``.

    Args:
        root: the local copy; out: the folder (replaced whole; written aside, then renamed).
        setting: one of :data:`SETTINGS`.
        revision: the copy's upstream revision, recorded.
        max_rows: keep the first queries only (0/``None`` = all).
        rows: :func:`read_copy`'s result, when already read (every setting reads the same rows).

    Returns:
        The manifest written to ``out/MANIFEST.json``.

    Raises:
        RecipematchError: an unknown setting, or anything :func:`read_copy` refuses.
    """

    if setting not in SETTINGS:
        raise RecipematchError(f"SABER-Math: unknown setting {short_repr(setting, 60)}; choose from {list(SETTINGS)}")
    queries_rows, docs, inputs = rows if rows is not None else read_copy(root, max_rows=max_rows)
    q_kind, d_kind = setting.split("-")

    def text(r: dict, kind: str) -> str:
        return r["problem"] if kind == "statement" else full_text(r["problem"], r["solution"])

    needed = sorted({c for r in queries_rows for c in r["candidates"]})
    corpus = {f"d{j:06d}": {"title": "", "text": text(docs[j], d_kind)} for j in needed}
    queries, qrels, meta, candidates = {}, {}, {}, {}
    for i, r in enumerate(queries_rows):
        qid = f"q{i:04d}"
        queries[qid] = text(r, q_kind)
        ids = [f"d{c:06d}" for c in r["candidates"]]
        qrels[qid] = dict(zip(ids, r["relevance_scores"]))
        candidates[qid] = ids
        meta[qid] = {"domains": list(r["domains"]), "row": i}
    by_branch = {b: sum(b in r["domains"] for r in queries_rows) for b in BRANCHES}
    manifest = {
        "benchmark": "SABER-Math", "setting": setting, "source": SOURCE, "revision": revision, "licence": LICENCE,
        "inputs": inputs, "max_rows": max_rows or 0,
        "n_queries": len(queries), "n_docs": len(corpus), "n_qrels": sum(len(v) for v in qrels.values()),
        "n_qrels_positive": sum(g > 0 for v in qrels.values() for g in v.values()),
        "n_candidates_per_query": sorted({len(v) for v in candidates.values()}),
        "queries_by_domain": by_branch, "grade_scale": list(GRADE_SCALE),
        "protocol": ("reranking: each query ranks its own candidates (candidates.json); nDCG@10 with gain "
                     "2**grade - 1, discount 1/log2(rank + 1), ideal DCG over all the query's candidates"),
    }
    out = check_out_folder(out, root, "SABER-Math")
    tmp = out.with_name(out.name + ".partial")
    if tmp.is_file() or tmp.is_symlink():
        tmp.unlink()
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write_beir(tmp, corpus, queries, qrels, query_meta=meta)
        (tmp / CANDIDATES_FILE).write_text(json.dumps(candidates, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing half-written; the last build, if any, stays
        raise RecipematchError(f"SABER-Math: cannot write {out}: {exc.strerror or exc}") from None
    return manifest
