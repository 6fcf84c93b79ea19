"""The LLM-built tiers and the near-miss probe of the embedded default, as BEIR folders.

(a) **Easy and hard tiers** in the benchmark's own shape (MathNet-Retrieve; paper Section 3,
    Table 1): the query is a held-out source problem under its corpus id (its own corpus
    entry is masked at search time), the gold is that source's recorded D1 rewrite
    (``d1-pos-<id>``). *Easy*: the corpus is the whole corpus plus the golds, no
    near-misses. *Hard*: the same queries, with each source's recorded D1 near-misses
    (``d1-neg-<id>-<i>``) added as distractors and listed in the query's
    ``metadata.near_miss_ids``. Nothing is subsampled: callers pass the whole corpus
    (:func:`write_tiers`).
(b) **Near-miss probe** (generator-free; paper Table 6): the query is the probe item's
    source problem, the gold its computer-algebra positive (``cp-pos-<id>``, the released
    qrels' naming) and its counterexampled near-misses (``cp-neg-<id>-<i>``) are
    distractors; ranked against corpus + probe documents, and against probe documents alone.

Held-out sources (:func:`choose_heldout`) are drawn with a seed from the sources that have a
recorded D1 rewrite; no arm may train on them (the gates stage excludes them). Bad input
raises :class:`recipematch.errors.RecipematchError` naming the row and field.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recipematch.errors import RecipematchError

TIERS = ("easy", "hard")


def choose_heldout(candidates: Sequence[str], n: int, *, seed: int) -> list[str]:
    """``n`` source ids drawn without replacement with ``seed`` from ``candidates``
    (order-free: candidates are sorted first), returned sorted.

    Raises:
        RecipematchError: ``n`` < 1 or larger than the number of candidates.
    """
    pool = sorted(set(candidates))
    if not 1 <= n <= len(pool):
        raise RecipematchError(f"n_heldout: cannot hold out {n} sources from {len(pool)} "
                               "candidates (sources with a recorded D1 rewrite)")
    idx = np.random.default_rng(seed).choice(len(pool), size=n, replace=False)
    return sorted(pool[i] for i in idx)


Beir = tuple[dict[str, dict[str, str]], dict[str, str], dict[str, dict[str, int]]]


def _corpus_docs(corpus_rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    return {r["doc_id"]: {"title": r.get("title", ""), "text": r["text"]} for r in corpus_rows}


def sample_search_corpus(corpus_rows: Sequence[Mapping[str, Any]], n_docs: int, *, seed: int,
                         must_include: Sequence[str] = ()) -> list[Mapping[str, Any]]:
    """The corpus problems an evaluation searches, in corpus order.

    ``n_docs = 0`` keeps every problem (the paper subsamples nothing, Section 3). A positive
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
        RecipematchError: naming the row (index and source id) and the problem: a missing
            or non-string field, malformed negatives, or a source id seen twice.
    """
    out: dict[str, Mapping[str, Any]] = {}
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise RecipematchError(f"{what} row {i}: not an object")
        for f in required:
            if not isinstance(r.get(f), str) or not r.get(f).strip():
                raise RecipematchError(f"{what} row {i} (source {r.get('source_id')!r}): field "
                                       f"'{f}' missing, empty or not text")
        negs = r.get("negatives", [])
        if negs is None or not isinstance(negs, list) or not all(isinstance(n, Mapping) and isinstance(n.get("text"), str) for n in negs):
            raise RecipematchError(f"{what} row {i} (source {r['source_id']!r}): 'negatives' must "
                                   "be a list of {\"text\": ...}")
        if r["source_id"] in out:
            raise RecipematchError(f"{what} row {i}: source {r['source_id']!r} appears twice")
        out[r["source_id"]] = r
    return out


def build_tier(corpus_rows: Sequence[Mapping[str, Any]], d1_rows: Sequence[Mapping[str, Any]],
               heldout: Sequence[str], tier: str) -> tuple[dict, dict, dict, dict]:
    """One LLM-built tier (module docstring (a)) in memory.

    Args:
        corpus_rows: the searched corpus problems ``{doc_id, title?, text}`` (the whole
            corpus: the paper subsamples nothing).
        d1_rows: recorded D1 answers ``{source_id, positive_text, negatives:[{text}]}``.
        heldout: the held-out source ids; each must be a corpus id with a D1 row.
        tier: ``"easy"`` (no near-misses) or ``"hard"`` (each source's D1 near-misses added
            as distractors and listed in ``metadata.near_miss_ids``).

    Returns:
        ``(docs, queries, qrels, query_meta)`` in a fixed order: corpus rows as given, then
        per held-out source (sorted) its gold and, in the hard tier, its near-misses.

    Raises:
        RecipematchError: an unknown tier, a held-out id missing from the corpus or from
            ``d1_rows``, malformed D1 rows, or a tier document id already in the corpus.
    """
    if tier not in TIERS:
        raise RecipematchError(f"tier must be one of {TIERS}, got {tier!r}")
    docs = _corpus_docs(corpus_rows)
    by_src = _unique_rows(d1_rows, "D1 release", ("source_id", "positive_text"))
    queries, qrels, meta = {}, {}, {}

    def add(did: str, text: str) -> None:
        if did in docs:
            raise RecipematchError(f"tier document id {did!r} is already a corpus id")
        docs[did] = {"title": "", "text": text}

    for sid in sorted(set(heldout)):
        if sid not in docs:
            raise RecipematchError(f"held-out source {sid!r} is not in the corpus")
        if sid not in by_src:
            raise RecipematchError(f"held-out source {sid!r} has no recorded D1 rewrite")
        r = by_src[sid]
        queries[sid] = docs[sid]["text"]
        gold = f"d1-pos-{sid}"
        add(gold, r["positive_text"])
        qrels[sid] = {gold: 1}
        meta[sid] = {"tier": tier}
        if tier == "hard":
            near = []
            for i, n in enumerate(r.get("negatives") or []):
                add(f"d1-neg-{sid}-{i}", n["text"])
                near.append(f"d1-neg-{sid}-{i}")
            meta[sid]["near_miss_ids"] = near
    return docs, queries, qrels, meta


def write_tiers(out: str | os.PathLike, corpus_rows: Sequence[Mapping[str, Any]],
                d1_rows: Sequence[Mapping[str, Any]], heldout: Sequence[str]) -> dict[str, int]:
    """Write ``out/easy`` and ``out/hard`` as BEIR folders (deterministic bytes; module
    docstring (a)); read them with :func:`recipematch.benchmarks_data.load_plain`.

    Returns:
        counts: ``n_queries``, ``easy.n_docs``, ``hard.n_docs``, ``hard.n_near_misses``,
        ``hard.n_queries_without_near_misses``.

    Raises:
        RecipematchError: see :func:`build_tier`.
    """
    from recipematch.beir import write_beir

    out = Path(out)
    counts: dict[str, int] = {}
    for tier in TIERS:
        docs, queries, qrels, meta = build_tier(corpus_rows, d1_rows, heldout, tier)
        write_beir(out / tier, docs, queries, qrels, query_meta=meta)
        counts["n_queries"] = len(queries)
        counts[f"{tier}.n_docs"] = len(docs)
        if tier == "hard":
            counts["hard.n_near_misses"] = sum(len(m["near_miss_ids"]) for m in meta.values())
            counts["hard.n_queries_without_near_misses"] = sum(
                1 for m in meta.values() if not m["near_miss_ids"])
    return counts


def build_llm_tier(corpus_rows: Sequence[Mapping[str, Any]], d1_rows: Sequence[Mapping[str, Any]],
                   heldout: Sequence[str]) -> Beir:
    """The former mixed LLM-built tier: the hard tier's ``(docs, queries, qrels)`` (kept for
    the current evalsets stage; new code uses :func:`build_tier` / :func:`write_tiers`).

    Raises:
        RecipematchError: see :func:`build_tier`.
    """
    docs, queries, qrels, _ = build_tier(corpus_rows, d1_rows, heldout, "hard")
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
    golds and distractors. These feed the contamination gates (paper Appendix B)."""
    out: list[str] = []
    for docs, queries, qrels in beirs:
        out.extend(queries.values())
        out.extend(d["text"] for k, d in docs.items() if k not in corpus_ids)
    return sorted(set(out))


def set_texts(bset, corpus_ids: set[str]) -> list[str]:
    """Every text a declared evaluation shows a model apart from the plain search corpus: its
    scored queries, every positive gold and near-miss (corpus problems included: the
    cross-language golds are corpus problems), and every document that is not a corpus
    problem. These feed the contamination gates (paper Section 3, Appendix B).

    Args:
        bset: a loaded :class:`recipematch.benchmarks_data.BenchmarkSet`.
        corpus_ids: the training corpus's ids.

    Returns:
        Sorted distinct texts.
    """
    from recipematch.beir import doc_text, positive_qrels

    keep: set[str] = set()
    positive = positive_qrels(bset.qrels)
    for q in bset.query_ids:
        keep.update(positive.get(q, ()))
        keep.update(bset.near_misses.get(q, ()))
    out = {bset.queries[q] for q in bset.query_ids}
    out.update(doc_text(d) for k, d in bset.corpus.items() if k in keep or k not in corpus_ids)
    return sorted(t for t in out if t.strip())
