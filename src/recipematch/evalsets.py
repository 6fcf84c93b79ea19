"""The LLM-built tiers and the near-miss probe of the embedded default, as BEIR folders.

(a) **Tiers shaped like MathNet-Retrieve** (paper Sections 1 and 3, Table 1). In
    MathNet-Retrieve every tier searches *one* corpus and asks the same queries; the tiers
    differ only in which LLM rewrite of the query counts as the gold. The corpus holds, for
    every query, every rewrite of it and its near-misses (small edits that change the
    problem). Here, for every held-out source: the query is the source problem under its
    corpus id (its own entry is masked at search time); the shared corpus is the whole corpus
    plus, per held-out source (sorted), its recorded D1 rewrite (``d1-pos-<id>``), its D1
    near-misses (``d1-neg-<id>-<i>``) and its recorded D4 restatement (``d4-pos-<id>``).
    ``tier_d1`` (the headline benchmark tier): gold = the D1 rewrite (the benchmark's own
    prompt, Appendix F); ``tier_d4``: gold = the D4 restatement (a prompt unrelated to the
    benchmark; in-family for arms whose positives are D4). In each tier the other rewrite is
    an equivalent document that is *not* the gold, as the other tiers' golds are in
    MathNet-Retrieve; each query's metadata lists ``near_miss_ids`` and ``equivalent_ids``.
    ``gold_only`` is a diagnostic, not a tier of the paper: corpus + the D1 golds, no
    near-misses and no other rewrite (what an earlier default called "easy"); it never
    enters Table 1's benchmark rows or the DiD. Nothing is subsampled: callers pass the whole
    corpus (:func:`write_tiers`).
(b) **Near-miss probe** (generator-free; paper Table 6): the query is the probe item's
    source problem, the gold its computer-algebra positive (``cp-pos-<id>``, the released
    qrels' naming) and its counterexampled near-misses (``cp-neg-<id>-<i>``) are
    distractors; ranked against corpus + probe documents, and against probe documents alone.

Held-out sources (:func:`choose_heldout`) are drawn with a seed from the sources that have
both a recorded D1 rewrite and a recorded D4 restatement, so both tiers ask the same
queries; no arm may train on them (the gates stage excludes them). Bad input raises
:class:`recipematch.errors.RecipematchError` naming the row and field.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recipematch.beir import doc_text, positive_qrels, write_beir
from recipematch.errors import RecipematchError

#: tier -> the recorded rewrite that is its gold (MathNet-Retrieve: the tiers share the corpus
#: and the queries and differ only in the gold; paper Section 3). The first is the headline.
TIER_GOLDS: dict[str, str] = {"tier_d1": "d1", "tier_d4": "d4"}
#: rewrites whose near-misses go into the shared corpus (the benchmark's own, Appendix F)
NEAR_MISS_SOURCE = "d1"
#: the diagnostic set: corpus + D1 golds only (not a paper tier; never in Table 1's benchmark rows)
GOLD_ONLY = "gold_only"
TIERS = (*TIER_GOLDS, GOLD_ONLY)


def choose_heldout(candidates: Sequence[str], n: int, *, seed: int) -> list[str]:
    """``n`` source ids drawn without replacement with ``seed`` from ``candidates``
    (order-free: candidates are sorted first), returned sorted.

    Raises:
        RecipematchError: ``n`` < 1 or larger than the number of candidates.
    """
    pool = sorted(set(candidates))
    if not 1 <= n <= len(pool):
        raise RecipematchError(f"n_heldout: cannot hold out {n} sources from {len(pool)} "
                               "candidates (sources with a recorded D1 rewrite and D4 restatement)")
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


def _doc_id(rewrite: str, sid: str) -> str:
    return f"{rewrite}-pos-{sid}"


def check_release_rows(rows: Sequence[Mapping[str, Any]], what: str, required: tuple[str, ...]) -> None:
    """Check released pair or probe rows before any folder is written: each an object with
    non-empty string ``required`` fields and a list (or no) ``negatives`` of ``{"text": str}``,
    no source id twice.

    Raises:
        RecipematchError: naming ``what``, the row (0-based index) and the field.
    """
    _unique_rows(rows, what, required)


def build_tiers(corpus_rows: Sequence[Mapping[str, Any]], rewrites: Mapping[str, Sequence[Mapping[str, Any]]],
                heldout: Sequence[str]) -> tuple[dict, dict[str, tuple[dict, dict, dict]]]:
    """The shared corpus and every tier of module docstring (a), in memory.

    Args:
        corpus_rows: the searched corpus problems ``{doc_id, title?, text}`` (the whole
            corpus: the paper subsamples nothing).
        rewrites: recorded answers per rewrite, ``{"d1": rows, "d4": rows}``, each row
            ``{source_id, positive_text, negatives:[{text}]}``; the near-misses come from the
            ``"d1"`` rows only (:data:`NEAR_MISS_SOURCE`).
        heldout: the held-out source ids; each must be a corpus id with a row in every
            rewrite of :data:`TIER_GOLDS`.

    Returns:
        ``(docs, tiers)``: ``docs`` is the shared corpus of the tiers (corpus rows as given,
        then per held-out source, sorted, its D1 rewrite, its D1 near-misses and its D4
        restatement); ``tiers`` maps each tier of :data:`TIER_GOLDS` to ``(queries, qrels,
        query_meta)``. The :data:`GOLD_ONLY` diagnostic is built by :func:`write_tiers`.

    Raises:
        RecipematchError: a held-out id missing from the corpus or from a rewrite's rows,
            malformed rows, or a tier document id already in the corpus.
    """
    docs = _corpus_docs(corpus_rows)
    missing_rw = [g for g in TIER_GOLDS.values() if g not in rewrites]
    if missing_rw:
        raise RecipematchError(f"tiers need the recorded rewrites {sorted(TIER_GOLDS.values())}; "
                               f"missing {missing_rw}")
    by_rw = {g: _unique_rows(rewrites[g], f"{g.upper()} release", ("source_id", "positive_text"))
             for g in TIER_GOLDS.values()}

    def add(did: str, text: str) -> None:
        if did in docs:
            raise RecipematchError(f"tier document id {did!r} is already a corpus id")
        docs[did] = {"title": "", "text": text}

    near: dict[str, list[str]] = {}
    order = sorted(set(heldout))
    for sid in order:
        if sid not in docs:
            raise RecipematchError(f"held-out source {sid!r} is not in the corpus")
        for g, rows in by_rw.items():
            if sid not in rows:
                raise RecipematchError(f"held-out source {sid!r} has no recorded {g.upper()} rewrite")
        add(_doc_id(NEAR_MISS_SOURCE, sid), by_rw[NEAR_MISS_SOURCE][sid]["positive_text"])
        near[sid] = []
        for i, n in enumerate(by_rw[NEAR_MISS_SOURCE][sid].get("negatives") or []):
            add(f"{NEAR_MISS_SOURCE}-neg-{sid}-{i}", n["text"])
            near[sid].append(f"{NEAR_MISS_SOURCE}-neg-{sid}-{i}")
        for g in by_rw:
            if g != NEAR_MISS_SOURCE:
                add(_doc_id(g, sid), by_rw[g][sid]["positive_text"])
    tiers: dict[str, tuple[dict, dict, dict]] = {}
    for tier, gold_rw in TIER_GOLDS.items():
        queries, qrels, meta = {}, {}, {}
        for sid in order:
            queries[sid] = docs[sid]["text"]
            qrels[sid] = {_doc_id(gold_rw, sid): 1}
            meta[sid] = {"tier": tier, "gold": gold_rw, "near_miss_ids": list(near[sid]),
                         "equivalent_ids": [_doc_id(g, sid) for g in by_rw if g != gold_rw]}
        tiers[tier] = (queries, qrels, meta)
    return docs, tiers


def build_gold_only(corpus_rows: Sequence[Mapping[str, Any]], d1_rows: Sequence[Mapping[str, Any]],
                    heldout: Sequence[str]) -> tuple[dict, dict, dict, dict]:
    """The :data:`GOLD_ONLY` diagnostic (module docstring (a)): corpus + each held-out
    source's D1 rewrite, no near-misses, no other rewrite. ``(docs, queries, qrels, meta)``.

    Raises:
        RecipematchError: as :func:`build_tiers`.
    """
    docs = _corpus_docs(corpus_rows)
    by_src = _unique_rows(d1_rows, "D1 release", ("source_id", "positive_text"))
    queries, qrels, meta = {}, {}, {}
    for sid in sorted(set(heldout)):
        if sid not in docs:
            raise RecipematchError(f"held-out source {sid!r} is not in the corpus")
        if sid not in by_src:
            raise RecipematchError(f"held-out source {sid!r} has no recorded D1 rewrite")
        gold = _doc_id("d1", sid)
        if gold in docs:
            raise RecipematchError(f"tier document id {gold!r} is already a corpus id")
        docs[gold] = {"title": "", "text": by_src[sid]["positive_text"]}
        queries[sid] = docs[sid]["text"]
        qrels[sid] = {gold: 1}
        meta[sid] = {"tier": GOLD_ONLY, "gold": "d1"}
    return docs, queries, qrels, meta


def write_tiers(out: str | os.PathLike, corpus_rows: Sequence[Mapping[str, Any]],
                rewrites: Mapping[str, Sequence[Mapping[str, Any]]], heldout: Sequence[str]) -> dict[str, int]:
    """Write ``out/<tier>`` for every tier of :data:`TIER_GOLDS` (one shared corpus) and
    ``out/gold_only`` as BEIR folders (deterministic bytes; module docstring (a)); read them
    with :func:`recipematch.benchmarks_data.load_plain`.

    Returns:
        counts: ``n_queries``, ``n_docs`` (the shared corpus), ``n_near_misses``,
        ``n_queries_without_near_misses``, ``n_equivalent_docs`` (rewrites that are
        another tier's gold), ``gold_only.n_docs``.

    Raises:
        RecipematchError: see :func:`build_tiers`.
    """
    out = Path(out)
    docs, tiers = build_tiers(corpus_rows, rewrites, heldout)
    for tier, (queries, qrels, meta) in tiers.items():
        write_beir(out / tier, docs, queries, qrels, query_meta=meta)
    first = next(iter(tiers.values()))[2]
    g_docs, g_queries, g_qrels, g_meta = build_gold_only(corpus_rows, rewrites[NEAR_MISS_SOURCE], heldout)
    write_beir(out / GOLD_ONLY, g_docs, g_queries, g_qrels, query_meta=g_meta)
    return {"n_queries": len(first), "n_docs": len(docs),
            "n_near_misses": sum(len(m["near_miss_ids"]) for m in first.values()),
            "n_queries_without_near_misses": sum(1 for m in first.values() if not m["near_miss_ids"]),
            "n_equivalent_docs": sum(len(m["equivalent_ids"]) for m in first.values()),
            "gold_only.n_docs": len(g_docs)}


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
    keep: set[str] = set()
    positive = positive_qrels(bset.qrels)
    for q in bset.query_ids:
        keep.update(positive.get(q, ()))
        keep.update(bset.near_misses.get(q, ()))
    out = {bset.queries[q] for q in bset.query_ids}
    out.update(doc_text(d) for k, d in bset.corpus.items() if k in keep or k not in corpus_ids)
    return sorted(t for t in out if t.strip())
