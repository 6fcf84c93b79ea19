"""MIRB's natural-language tasks as BEIR folders (the paper, Section 6 and Table 22: a
human-curated mathematical retrieval benchmark no one in the project built).

MIRB (Ju & Dong 2025, arXiv 2505.15585; the ``hcju/<task>`` Hugging Face datasets) keeps each
task in BEIR layout: ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl``
(``_id``, ``text``), graded ``qrels/test.jsonl`` (``query-id``, ``corpus-id``, ``score``) and,
per query, ``excluded_ids.jsonl`` (``query-id``, ``excluded-ids``): documents taken out of that
query's ranking. Its protocol, as MIRB's evaluation code applies it and the paper follows:
documents are ``title + " " + text`` (each stripped), each query's excluded ids are dropped,
nDCG@10 over the top 1,000 is the main score, and the benchmark's number is the macro-average
over tasks (declare the tasks' evaluations with one ``group``).

Rules of the folder this loader writes (one per task, :data:`TASKS`):

- a document's text is MIRB's ``title + " " + text`` (stripped), its title empty, so every
  model and BM25 read the text MIRB embeds; a document whose joined text is empty is refused;
- only queries with a qrel of grade > 0 are kept (MIRB scores those; the rest are counted);
  grades must be integers (``1`` or ``1.0``; ``1.5`` is refused with file, line and field);
  a qrel naming an unknown query or document is refused;
- ``excluded_ids.jsonl`` becomes :data:`recipematch.graded_files.EXCLUDED_FILE` for the kept
  queries (the graded measures drop them; R@k ranks every document, as for BRIGHT).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from recipematch.beir import BeirFormatError, parse_score, write_beir
from recipematch.errors import RecipematchError, short_repr
from recipematch.external import check_out_folder
from recipematch.graded_files import EXCLUDED_FILE
from recipematch.io import BadLine, iter_jsonl
from recipematch.rules import EXTERNAL_SUBSETS

__all__ = ["TASKS", "SOURCE", "LICENCE", "read_task", "build_folder"]

#: the eleven natural-language tasks (paper Table 22), by MIRB's task ids
TASKS = EXTERNAL_SUBSETS["mirb"]
SOURCE = "MIRB (Ju & Dong 2025, arXiv 2505.15585; Hugging Face hcju/<task>)"
LICENCE = "as each hcju/<task> dataset card states (MIRB collects sources under their own licences)"


def _rows(path: Path):
    for lineno, obj in iter_jsonl(path):
        if isinstance(obj, BadLine):
            raise RecipematchError(f"{path}:{lineno}: {obj.reason}")
        if not isinstance(obj, dict):
            raise RecipematchError(f"{path}:{lineno}: expected a JSON object")
        yield lineno, obj


def _id(obj: dict, key: str, where: str) -> str:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (str, int)) or (isinstance(v, str) and not v.strip()):
        raise RecipematchError(f"{where}: field {key!r} must be a non-empty string or an integer, got {short_repr(v, 60)}")
    s = str(v)
    if any(c in s for c in "\t\n\r"):
        raise RecipematchError(f"{where}: field {key!r} holds a tab or newline")
    if s != s.strip():  # the qrels TSV reader strips ids: "106 " would come back as another document's id
        raise RecipematchError(f"{where}: field {key!r} {s!r} starts or ends with blanks")
    return s


def _grade(v: Any, path: Path, lineno: int) -> int:
    where = f"{path}:{lineno}"
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise RecipematchError(f"{where}: field 'score' must be a number, got {short_repr(v, 40)}")
    try:
        f = parse_score(v, path, lineno)  # ASCII decimal notation only, finite
    except BeirFormatError:
        raise RecipematchError(f"{where}: field 'score' must be a number, got {short_repr(v, 40)}") from None
    if f != int(f):
        raise RecipematchError(f"{where}: field 'score' must be an integer grade, got {short_repr(v, 40)}")
    if not 0 <= int(f) <= 2**31 - 1:  # trec_eval reads grades as C ints; MIRB's are 0 or more
        raise RecipematchError(f"{where}: field 'score' must be an integer grade from 0 to 2**31 - 1, "
                               f"got {short_repr(v, 40)}")
    return int(f)


def read_task(folder: str | os.PathLike) -> dict[str, Any]:
    """One MIRB task folder, checked (rules: the module docstring).

    Returns:
        ``{"corpus": {id: text}, "queries": {id: text}, "qrels": {qid: {did: grade}},
        "excluded": {qid: [ids]}, "n_queries_without_qrels": int, "n_qrels_zero": int}``;
        queries and documents in file order.

    Raises:
        RecipematchError: a missing file, a bad line (file, line and field), an empty text, a
            non-integer grade, a qrel naming an unknown id, a repeated id.
    """
    folder = Path(folder)
    files = {n: folder / n for n in ("corpus.jsonl", "queries.jsonl", "qrels/test.jsonl")}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise RecipematchError(f"MIRB: missing files {missing}")
    corpus: dict[str, str] = {}
    for lineno, obj in _rows(files["corpus.jsonl"]):
        where = f"{files['corpus.jsonl']}:{lineno}"
        did = _id(obj, "_id", where)
        title, text = obj.get("title"), obj.get("text")
        title, text = ("" if title is None else title), ("" if text is None else text)
        if not isinstance(title, str) or not isinstance(text, str):
            raise RecipematchError(f"{where}: fields 'title' and 'text' must be strings (or null)")
        joined = (title.strip() + " " + text.strip()).strip()
        if not joined:
            raise RecipematchError(f"{where}: document {did!r} has no text (title and text empty)")
        if did in corpus:
            raise RecipematchError(f"{where}: document id {did!r} is given twice")
        corpus[did] = joined
    queries: dict[str, str] = {}
    for lineno, obj in _rows(files["queries.jsonl"]):
        where = f"{files['queries.jsonl']}:{lineno}"
        qid = _id(obj, "_id", where)
        if not isinstance(obj.get("text"), str) or not obj["text"].strip():
            raise RecipematchError(f"{where}: field 'text' must be a non-empty string")
        if qid in queries:
            raise RecipematchError(f"{where}: query id {qid!r} is given twice")
        queries[qid] = obj["text"]
    qrels: dict[str, dict[str, int]] = {}
    pairs_seen: set[tuple[str, str]] = set()
    zero = 0
    for lineno, obj in _rows(files["qrels/test.jsonl"]):
        where = f"{files['qrels/test.jsonl']}:{lineno}"
        qid, did = _id(obj, "query-id", where), _id(obj, "corpus-id", where)
        g = _grade(obj.get("score"), files["qrels/test.jsonl"], lineno)
        if qid not in queries:
            raise RecipematchError(f"{where}: query-id {qid!r} is not in queries.jsonl")
        if did not in corpus:
            raise RecipematchError(f"{where}: corpus-id {did!r} is not in corpus.jsonl")
        if (qid, did) in pairs_seen:
            raise RecipematchError(f"{where}: duplicate qrels pair ({qid!r}, {did!r})")
        pairs_seen.add((qid, did))
        if g > 0:
            qrels.setdefault(qid, {})[did] = g
        else:
            zero += 1
    kept = {q: t for q, t in queries.items() if q in qrels}
    if not kept:
        raise RecipematchError(f"MIRB: {files['qrels/test.jsonl']} gives no query a grade > 0")
    excluded: dict[str, list[str]] = {}
    unknown = 0
    ex = folder / "excluded_ids.jsonl"
    if ex.exists() and not ex.is_file():
        raise RecipematchError(f"MIRB: {ex} exists but is not a file")
    if ex.is_file():
        for lineno, obj in _rows(ex):
            where = f"{ex}:{lineno}"
            qid = _id(obj, "query-id", where)
            ids = obj.get("excluded-ids")
            if not isinstance(ids, list):
                raise RecipematchError(f"{where}: field 'excluded-ids' must be a list, got {short_repr(ids, 40)}")
            ids = [_id({"excluded-ids": x}, "excluded-ids", where) for x in ids]
            if qid not in kept:
                continue
            for x in ids:
                if x not in corpus:
                    unknown += 1  # MIRB drops an id its corpus lacks; counted in the manifest
                elif x not in excluded.setdefault(qid, []):
                    excluded[qid].append(x)
        for qid, ids in excluded.items():
            if set(qrels[qid]) <= set(ids):
                raise RecipematchError(f"{ex}: query {qid!r} has every gold excluded ({sorted(qrels[qid])[:3]}): "
                                       "nothing left to find")
        excluded = {q: v for q, v in excluded.items() if v}
    return {"corpus": corpus, "queries": kept, "qrels": {q: qrels[q] for q in kept}, "excluded": excluded,
            "n_queries_without_qrels": len(queries) - len(kept), "n_qrels_zero": zero,
            "n_excluded_unknown": unknown}


def build_folder(src: str | os.PathLike, out: str | os.PathLike, task: str, *, revision: str = "") -> dict:
    """Write MIRB task ``task`` of the copy ``src`` (``src/<task>/``) as a BEIR folder ``out``.

    Returns:
        The manifest written to ``out/MANIFEST.json``.

    Raises:
        RecipematchError: an unknown task, or any check of :func:`read_task`.
    """

    if task not in TASKS:
        raise RecipematchError(f"MIRB: unknown task {short_repr(task, 60)}; expected one of {list(TASKS)}")
    t = read_task(Path(src) / task)
    corpus = {d: {"title": "", "text": text} for d, text in t["corpus"].items()}
    grades = sorted({g for per in t["qrels"].values() for g in per.values()})
    manifest = {
        "benchmark": "MIRB", "task": task, "source": SOURCE, "revision": revision, "licence": LICENCE,
        "inputs": {f: hashlib.sha256((Path(src) / task / f).read_bytes()).hexdigest()
                   for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.jsonl", "excluded_ids.jsonl")
                   if (Path(src) / task / f).is_file()},
        "n_docs": len(corpus), "n_queries": len(t["queries"]),
        "n_qrels": sum(len(v) for v in t["qrels"].values()), "grades": grades,
        "n_queries_without_qrels": t["n_queries_without_qrels"], "n_qrels_zero": t["n_qrels_zero"],
        "n_excluded_ids": sum(len(v) for v in t["excluded"].values()),
        "n_excluded_ids_not_in_corpus": t["n_excluded_unknown"],
        "protocol": "documents as title + text; each query's excluded ids dropped; nDCG@10 over the top 1,000; "
                    "macro-average over tasks",
    }
    out = check_out_folder(out, src, "MIRB")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    write_beir(tmp, corpus, t["queries"], t["qrels"])
    if t["excluded"]:
        (tmp / EXCLUDED_FILE).write_text(json.dumps(t["excluded"], sort_keys=True) + "\n", encoding="utf-8")
    (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return manifest
