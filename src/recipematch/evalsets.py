"""The two evaluations of the embedded default, written as BEIR folders (SPEC §7).

(a) **LLM-built tier** in the benchmark's own shape (MathNet-Retrieve, SPEC §2): the query is
    a held-out source problem (its corpus id, so self-masking removes its own entry), the
    gold is that source's recorded D1 rewrite (``d1-pos-<id>``) and the corpus holds every
    corpus problem plus, as distractors, the recorded D1 near-misses of the held-out sources
    (``d1-neg-<id>-<i>``), as the hard tier does.
(b) **Near-miss probe** (generator-free; SPEC §7): the query is the probe item's source
    problem, the gold its computer-algebra positive (``cp-pos-<id>``, the released qrels'
    naming) and its counterexampled near-misses (``cp-neg-<id>-<i>``) are distractors; ranked
    against corpus + probe documents, and against probe documents alone.

Held-out sources (:func:`choose_heldout`) are drawn with a seed from the sources that have a
recorded D1 rewrite; no arm may train on them (the gates stage excludes them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def choose_heldout(candidates: Sequence[str], n: int, *, seed: int) -> list[str]:
    """``n`` source ids drawn without replacement with ``seed`` from ``candidates``
    (order-free: candidates are sorted first), returned sorted.

    Raises:
        ValueError: ``n`` < 1 or larger than the number of candidates.
    """
    pool = sorted(set(candidates))
    if not 1 <= n <= len(pool):
        raise ValueError(f"cannot hold out {n} sources from {len(pool)} candidates")
    idx = np.random.default_rng(seed).choice(len(pool), size=n, replace=False)
    return sorted(pool[i] for i in idx)


Beir = tuple[dict[str, dict[str, str]], dict[str, str], dict[str, dict[str, int]]]


def _corpus_docs(corpus_rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    return {r["doc_id"]: {"title": r.get("title", ""), "text": r["text"]} for r in corpus_rows}


def sample_search_corpus(corpus_rows: Sequence[Mapping[str, Any]], n_docs: int, *, seed: int,
                         must_include: Sequence[str] = ()) -> list[Mapping[str, Any]]:
    """The corpus problems an evaluation searches, in corpus order.

    ``n_docs = 0`` keeps every problem (the paper: nothing subsampled, SPEC §7). A positive
    ``n_docs`` keeps ``must_include`` (the queries' own entries, so self-masking is exercised)
    plus a seeded random sample of the others up to ``n_docs`` in all — the CPU default, where
    encoding the whole corpus once per trained model would dominate the run.

    Raises:
        ValueError: ``n_docs`` negative, or smaller than ``len(must_include)``.
    """
    if n_docs < 0:
        raise ValueError(f"n_docs must be >= 0, got {n_docs}")
    if n_docs == 0 or n_docs >= len(corpus_rows):
        return list(corpus_rows)
    ids = [r["doc_id"] for r in corpus_rows]
    keep = set(must_include) & set(ids)
    if n_docs < len(keep):
        raise ValueError(f"n_docs={n_docs} is smaller than the {len(keep)} documents that must be searched")
    others = sorted(set(ids) - keep)
    extra = np.random.default_rng(seed).choice(len(others), size=n_docs - len(keep), replace=False)
    keep |= {others[i] for i in extra}
    return [r for r in corpus_rows if r["doc_id"] in keep]


def _unique_rows(rows: Sequence[Mapping[str, Any]], what: str, required: tuple[str, ...]) -> dict[str, Mapping[str, Any]]:
    """Rows keyed by ``source_id``; each must carry non-empty string ``required`` fields and
    a list (or no) ``negatives`` of ``{"text": str}``.

    Raises:
        ValueError: naming the row (index and source id) and the problem: a missing or
            non-string field, malformed negatives, or a source id seen twice.
    """
    out: dict[str, Mapping[str, Any]] = {}
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise ValueError(f"{what} row {i}: not an object")
        for f in required:
            if not isinstance(r.get(f), str) or not r.get(f).strip():
                raise ValueError(f"{what} row {i} (source {r.get('source_id')!r}): field '{f}' missing, empty or not text")
        negs = r.get("negatives", [])
        if negs is None or not isinstance(negs, list) or not all(isinstance(n, Mapping) and isinstance(n.get("text"), str) for n in negs):
            raise ValueError(f"{what} row {i} (source {r['source_id']!r}): 'negatives' must be a list of {{\"text\": ...}}")
        if r["source_id"] in out:
            raise ValueError(f"{what} row {i}: source {r['source_id']!r} appears twice")
        out[r["source_id"]] = r
    return out


def build_llm_tier(corpus_rows: Sequence[Mapping[str, Any]], d1_rows: Sequence[Mapping[str, Any]],
                   heldout: Sequence[str]) -> Beir:
    """Evaluation (a). ``d1_rows`` are recorded D1 answers ``{source_id, positive_text,
    negatives:[{text}]}``; every held-out id must be a corpus id with a D1 row.

    Raises:
        KeyError: a held-out id is missing from the corpus or from ``d1_rows``.
    """
    docs = _corpus_docs(corpus_rows)
    by_src = _unique_rows(d1_rows, "D1 release", ("source_id", "positive_text"))
    queries, qrels = {}, {}
    for sid in sorted(heldout):
        if sid not in docs:
            raise KeyError(f"held-out source {sid} is not in the corpus")
        if sid not in by_src:
            raise KeyError(f"held-out source {sid} has no recorded D1 rewrite")
        r = by_src[sid]
        queries[sid] = docs[sid]["text"]
        gold = f"d1-pos-{sid}"
        docs[gold] = {"title": "", "text": r["positive_text"]}
        for i, n in enumerate(r.get("negatives") or []):
            docs[f"d1-neg-{sid}-{i}"] = {"title": "", "text": n["text"]}
        qrels[sid] = {gold: 1}
    return docs, queries, qrels


def build_probe(corpus_rows: Sequence[Mapping[str, Any]] | None, items: Sequence[Mapping[str, Any]]) -> Beir:
    """Evaluation (b). ``items`` are probe rows ``{source_id, source_text, positive_text,
    negatives:[{text}]}``; ``corpus_rows=None`` gives the probe-only ranking."""
    docs = _corpus_docs(corpus_rows) if corpus_rows is not None else {}
    queries, qrels = {}, {}
    items = list(_unique_rows(items, "probe", ("source_id", "source_text", "positive_text")).values())
    for it in sorted(items, key=lambda x: x["source_id"]):
        sid = it["source_id"]
        queries[sid] = it["source_text"]
        gold = f"cp-pos-{sid}"
        docs[gold] = {"title": "", "text": it["positive_text"]}
        for i, n in enumerate(it.get("negatives") or []):
            docs[f"cp-neg-{sid}-{i}"] = {"title": "", "text": n["text"]}
        qrels[sid] = {gold: 1}
    return docs, queries, qrels


def evaluation_texts(*beirs: Beir, corpus_ids: set[str]) -> list[str]:
    """Every text an evaluation shows a model apart from the plain search corpus: queries,
    golds and distractors. These feed the contamination gates (SPEC §4)."""
    out: list[str] = []
    for docs, queries, qrels in beirs:
        out.extend(queries.values())
        out.extend(d["text"] for k, d in docs.items() if k not in corpus_ids)
    return sorted(set(out))
