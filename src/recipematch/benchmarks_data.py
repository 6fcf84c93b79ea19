"""Loaders for the benchmarks of SPEC §2, and one evaluation entry point for them.

Each loader turns a benchmark's released files into a :class:`BenchmarkSet`: a BEIR triple
(corpus, queries, qrels) plus what its metrics need (the queries to score, cluster labels
for the cluster bootstrap, named query slices, near-miss ids). Nothing here downloads at
import or load time; :func:`fetch_mathnet_retrieve` is the one function that can download,
and only when called.

- **MathNet-Retrieve** (Hugging Face dataset ``ShadenA/MathNet-Retrieve``): one folder per
  tier (``easy``, ``medium``, ``hard``), each a BEIR folder whose qrels are
  ``qrels/test.jsonl`` (or ``.tsv``); the three tiers share the 117,088-document corpus and
  the 15,000 queries and differ only in the gold. The corpus rows carry only ``_id`` and
  ``text``, so which documents are a hard query's near-misses is not in them; it is read
  from an optional ``near_misses.tsv`` (``query-id<TAB>corpus-id``, header allowed) in the
  tier folder or the root, built from the benchmark's construction metadata.
- **Cross-language duplicates** (the peer's ``data/crosslingual_eval``): a BEIR folder whose
  query ``metadata`` has ``lang``, ``cluster_id``, ``gold_ids``, ``gold_langs``. Scored with
  the **strict** rule (SPEC §7): only golds whose language tag differs from the query's
  count; tags are used as released.
- **Same-language duplicates** (``data/samelang_eval``): a BEIR folder whose query metadata
  has ``lang``, ``cluster_id`` and either ``slice`` (``"primary"``, ``"leaked"`` or
  ``"exact"``) or the flags ``exact_text`` / ``leaked``; slices primary / English (primary
  queries tagged ``en``) / leaked / exact (SPEC §2, §7; paper Table 5).
- **Near-miss probe** (``data/cas_probe/probe.jsonl`` + ``data/casprobe_eval/qrels``): each
  item's ``source_text`` is a query whose id is its ``source_id`` (a MathNet corpus id, so its
  own corpus entry is self-masked); its positive is document ``cp-pos-<source_id>`` and its
  i-th negative ``cp-neg-<source_id>-<i>``. Two rankings (SPEC §7): the corpus plus every
  probe document, and the probe documents alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from recipematch.beir import BeirFormatError, _read_jsonl, doc_text, positive_qrels, read_beir, read_corpus
from recipematch.metrics import near_miss_win_rate, recall_by_slices, strict_crosslingual_qrels
from recipematch.retrieval import (
    Encoder,
    EmbeddingCache,
    encode_cached,
    evaluate_bm25,
    evaluate_embeddings,
    gold_beats_near_misses,
)

__all__ = [
    "MATHNET_RETRIEVE_REPO",
    "MATHNET_TIERS",
    "BenchmarkSet",
    "fetch_mathnet_retrieve",
    "load_mathnet_retrieve",
    "load_crosslingual",
    "load_samelang",
    "load_probe",
    "evaluate_benchmark",
    "evaluate_benchmark_bm25",
]

MATHNET_RETRIEVE_REPO = "ShadenA/MathNet-Retrieve"
MATHNET_TIERS = ("easy", "medium", "hard")


@dataclass
class BenchmarkSet:
    """One benchmark ready for :func:`evaluate_benchmark`.

    Attributes:
        name: e.g. ``"mathnet-retrieve/hard"``, ``"crosslingual-strict"``.
        corpus, queries, qrels: the BEIR triple (``qrels`` already holds the rule the
            benchmark is scored with, e.g. strict cross-language golds).
        query_ids: the queries to score, in order; a listed query without a gold is a miss.
        query_meta: ``query_id -> metadata``.
        clusters: ``(len(query_ids),)`` cluster labels for the cluster bootstrap, or None.
        slices: named boolean masks aligned with ``query_ids``.
        near_misses: ``query_id -> near-miss doc ids`` (hard tier, probe), or empty.
        counts: what the loader saw and dropped, by name.
    """

    name: str
    corpus: dict[str, dict]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    query_ids: list[str]
    query_meta: dict[str, dict] = field(default_factory=dict)
    clusters: np.ndarray | None = None
    slices: dict[str, np.ndarray] = field(default_factory=dict)
    near_misses: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------- MathNet-Retrieve


def fetch_mathnet_retrieve(dest: str | os.PathLike, *, tiers: Sequence[str] = MATHNET_TIERS,
                           revision: str | None = None) -> Path:
    """Download the MathNet-Retrieve tier folders into ``dest`` (network needed).

    Uses ``huggingface_hub.snapshot_download`` on the dataset repository
    :data:`MATHNET_RETRIEVE_REPO`; pin ``revision`` (a commit) for reproducibility. Returns
    ``dest``, ready for :func:`load_mathnet_retrieve`.
    """
    from huggingface_hub import snapshot_download

    bad = [t for t in tiers if t not in MATHNET_TIERS]
    if bad:
        raise ValueError(f"unknown tiers {bad}; expected some of {MATHNET_TIERS}")
    snapshot_download(repo_id=MATHNET_RETRIEVE_REPO, repo_type="dataset", revision=revision,
                      local_dir=str(dest), allow_patterns=[f"{t}/*" for t in tiers]
                      + [f"{t}/qrels/*" for t in tiers])
    return Path(dest)


def _read_pairs_tsv(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if lineno == 1 and parts[0].strip().lower() in ("query-id", "query_id"):
                continue
            if len(parts) < 2:
                raise BeirFormatError(f"{path}:{lineno}: expected query-id<TAB>corpus-id")
            out.setdefault(parts[0].strip(), []).append(parts[1].strip())
    return out


def load_mathnet_retrieve(root: str | os.PathLike, tier: str, *,
                          split: str = "test") -> BenchmarkSet:
    """Load one MathNet-Retrieve tier from a local copy (layout of the Hugging Face repo).

    Args:
        root: folder holding ``easy/``, ``medium/``, ``hard/`` (see
            :func:`fetch_mathnet_retrieve`).
        tier: ``"easy"``, ``"medium"`` or ``"hard"``.

    Returns:
        :class:`BenchmarkSet` named ``"mathnet-retrieve/<tier>"``; ``near_misses`` from an
        optional ``near_misses.tsv`` in the tier folder or ``root``; queries scored are those
        with a positive qrel. A ``domain`` in query metadata gives per-domain R@k.
    """
    if tier not in MATHNET_TIERS:
        raise ValueError(f"tier must be one of {MATHNET_TIERS}, got {tier!r}")
    root = Path(root)
    ds = read_beir(root / tier, split)
    near: dict[str, list[str]] = {}
    for cand in (root / tier / "near_misses.tsv", root / "near_misses.tsv"):
        if cand.exists():
            near = _read_pairs_tsv(cand)
            break
    positive = positive_qrels(ds.qrels)
    ids = [q for q in ds.queries if q in positive]
    return BenchmarkSet(name=f"mathnet-retrieve/{tier}", corpus=ds.corpus, queries=ds.queries,
                        qrels=ds.qrels, query_ids=ids, query_meta=ds.query_meta,
                        near_misses=near, counts=ds.counts.to_dict())


# --------------------------------------------------------------------------- duplicate sets


def _doc_langs_from_meta(query_meta: Mapping[str, Mapping]) -> dict[str, str | None]:
    """Language tag of every id the metadata names: queries (``lang``) and their golds
    (``gold_ids`` aligned with ``gold_langs``)."""
    langs: dict[str, str | None] = {}
    for qid, meta in query_meta.items():
        if meta.get("lang") is not None:
            langs[qid] = meta["lang"]
        gids, glangs = meta.get("gold_ids") or [], meta.get("gold_langs") or []
        if len(gids) != len(glangs):
            raise BeirFormatError(f"query {qid!r}: gold_ids and gold_langs differ in length")
        for gid, gl in zip(gids, glangs):
            if gl in (None, "", "unknown"):
                langs.setdefault(gid, None)
            else:
                langs[gid] = gl
    return langs


def load_crosslingual(folder: str | os.PathLike, *, split: str = "test") -> BenchmarkSet:
    """Load the cross-language duplicate set, scored with the strict rule (SPEC §7).

    The returned ``qrels`` keep only golds whose language tag differs from the query's
    (:func:`recipematch.metrics.strict_crosslingual_qrels`); every query with any positive
    qrel is scored, and one left without a different-language gold is a miss. ``clusters``
    are the queries' ``cluster_id``; slices: ``high_confidence`` (``min_confidence ==
    "high"``) and ``overlaps_retrieve_anchor`` when the metadata has them. ``counts`` has
    ``n_queries_without_strict_gold``.
    """
    ds = read_beir(folder, split)
    positive = positive_qrels(ds.qrels)
    ids = [q for q in ds.queries if q in positive]
    doc_lang = _doc_langs_from_meta(ds.query_meta)
    query_lang = {q: (ds.query_meta.get(q) or {}).get("lang") for q in ids}
    strict = strict_crosslingual_qrels({q: ds.qrels[q] for q in ids}, query_lang, doc_lang)
    missing_cluster = [q for q in ids if "cluster_id" not in (ds.query_meta.get(q) or {})]
    if missing_cluster:
        raise BeirFormatError(f"{len(missing_cluster)} queries lack metadata.cluster_id, e.g. "
                              f"{missing_cluster[:3]}")
    clusters = np.asarray([str(ds.query_meta[q]["cluster_id"]) for q in ids], dtype=object)
    slices: dict[str, np.ndarray] = {}
    metas = [ds.query_meta.get(q) or {} for q in ids]
    if all("min_confidence" in m for m in metas):
        slices["high_confidence"] = np.array([m["min_confidence"] == "high" for m in metas])
    if all("overlaps_retrieve_anchor" in m for m in metas):
        slices["overlaps_retrieve_anchor"] = np.array(
            [bool(m["overlaps_retrieve_anchor"]) for m in metas])
    counts = ds.counts.to_dict()
    counts["n_queries_without_strict_gold"] = sum(1 for q in ids if not strict.get(q))
    return BenchmarkSet(name="crosslingual-strict", corpus=ds.corpus, queries=ds.queries,
                        qrels=strict, query_ids=ids, query_meta=ds.query_meta,
                        clusters=clusters, slices=slices, counts=counts)


_SAMELANG_SLICES = ("primary", "leaked", "exact")


def _samelang_slice(meta: Mapping, qid: str) -> str:
    if "slice" in meta:
        s = meta["slice"]
        if s not in _SAMELANG_SLICES:
            raise BeirFormatError(f"query {qid!r}: slice must be one of {_SAMELANG_SLICES}, "
                                  f"got {s!r}")
        return s
    if "exact_text" in meta or "leaked" in meta:
        if meta.get("exact_text"):
            return "exact"
        return "leaked" if meta.get("leaked") else "primary"
    raise BeirFormatError(f"query {qid!r}: metadata needs 'slice' or 'exact_text'/'leaked'")


def load_samelang(folder: str | os.PathLike, *, split: str = "test") -> BenchmarkSet:
    """Load the same-language duplicate set with its four slices (SPEC §2, §7; Table 5).

    Slices (aligned with ``query_ids``): ``primary`` (reworded clusters no training file
    touches), ``english`` (primary queries whose ``lang`` is ``en``), ``leaked``, ``exact``
    (exact-text reprints, a ceiling check). ``clusters`` are ``cluster_id``; the paper's
    primary-slice interval resamples the primary slice's clusters.
    """
    ds = read_beir(folder, split)
    positive = positive_qrels(ds.qrels)
    ids = [q for q in ds.queries if q in positive]
    metas = [ds.query_meta.get(q) or {} for q in ids]
    labels = [_samelang_slice(m, q) for m, q in zip(metas, ids)]
    missing_cluster = [q for q, m in zip(ids, metas) if "cluster_id" not in m]
    if missing_cluster:
        raise BeirFormatError(f"{len(missing_cluster)} queries lack metadata.cluster_id")
    slices = {s: np.array([lab == s for lab in labels]) for s in _SAMELANG_SLICES}
    slices["english"] = slices["primary"] & np.array([m.get("lang") == "en" for m in metas])
    slices = {k: slices[k] for k in ("primary", "english", "leaked", "exact")}
    return BenchmarkSet(name="samelang", corpus=ds.corpus, queries=ds.queries, qrels=ds.qrels,
                        query_ids=ids, query_meta=ds.query_meta,
                        clusters=np.asarray([str(m["cluster_id"]) for m in metas],
                                            dtype=object),
                        slices=slices, counts=ds.counts.to_dict())


# --------------------------------------------------------------------------- near-miss probe


def _read_probe_items(path: Path) -> list[dict]:
    items = []
    seen = set()
    for lineno, obj in _read_jsonl(Path(path), ("source_id", "source_text", "positive_text", "negatives"),
                                   typed={"negatives": list}):
        if obj["source_id"] in seen:
            raise BeirFormatError(f"{path}:{lineno}: duplicate source_id {obj['source_id']!r}")
        seen.add(obj["source_id"])
        for j, neg in enumerate(obj["negatives"]):
            if not isinstance(neg, dict) or not isinstance(neg.get("text"), str):
                raise BeirFormatError(f"{path}:{lineno}: negative {j} has no text")
        items.append(obj)
    return items


def load_probe(
    probe_jsonl: str | os.PathLike,
    corpus: Mapping[str, Mapping] | str | os.PathLike,
    *,
    qrels_tsv: str | os.PathLike | None = None,
) -> tuple[BenchmarkSet, BenchmarkSet]:
    """Load the generator-free near-miss probe as its two rankings (SPEC §7; Table 6).

    Args:
        probe_jsonl: the probe items (``source_id, source_text, positive_text,
            negatives[{text, ...}]``, optional ``domain``, ``language``,
            ``transform_family``).
        corpus: the public corpus: a mapping, a ``corpus.jsonl`` file or a folder holding
            one.
        qrels_tsv: the released qrels (``<source_id> -> cp-pos-<source_id>``); rows for items
            not in ``probe_jsonl`` are counted and dropped; without it the qrels are built
            from the items.

    Returns:
        ``(full, probe_only)``: the corpus plus every probe document, and the probe documents
        alone; both score every item, carry its negatives as ``near_misses`` and its
        ``domain`` / ``language`` / ``transform_family`` as query metadata.

    Raises:
        BeirFormatError: malformed items, a probe document id that collides with a corpus id,
            or a qrels gold that is not a probe document.
    """
    items = _read_probe_items(Path(probe_jsonl))
    if not isinstance(corpus, Mapping):
        corpus = read_corpus(corpus)
    probe_docs: dict[str, dict] = {}
    queries: dict[str, str] = {}
    meta: dict[str, dict] = {}
    near: dict[str, list[str]] = {}
    for it in items:
        sid = it["source_id"]
        queries[sid] = it["source_text"]
        meta[sid] = {k: it.get(k) for k in ("domain", "language", "transform_family",
                                             "anchor_id") if k in it}
        probe_docs[f"cp-pos-{sid}"] = {"title": "", "text": it["positive_text"]}
        near[sid] = []
        for j, neg in enumerate(it["negatives"]):
            did = f"cp-neg-{sid}-{j}"
            probe_docs[did] = {"title": "", "text": neg["text"]}
            near[sid].append(did)
    clash = [d for d in probe_docs if d in corpus]
    if clash:
        raise BeirFormatError(f"probe document ids collide with corpus ids: {clash[:5]}")
    counts = {"n_items": len(items), "n_probe_docs": len(probe_docs),
              "n_negatives": sum(len(v) for v in near.values())}
    if qrels_tsv is not None:
        released = _read_pairs_tsv(Path(qrels_tsv))
        qrels = {q: {d: 1 for d in ds} for q, ds in released.items() if q in queries}
        counts["n_qrels_queries_without_item"] = sum(1 for q in released if q not in queries)
        bad = [d for ds in qrels.values() for d in ds if d not in probe_docs]
        if bad:
            raise BeirFormatError(f"qrels golds that are not probe documents: {bad[:5]}")
        counts["n_items_without_qrels"] = sum(1 for q in queries if q not in qrels)
    else:
        qrels = {sid: {f"cp-pos-{sid}": 1} for sid in queries}
    ids = list(queries)
    full_corpus = {**dict(corpus), **probe_docs}
    full = BenchmarkSet(name="probe/corpus+probe", corpus=full_corpus, queries=queries,
                        qrels=qrels, query_ids=ids, query_meta=meta, near_misses=near,
                        counts=dict(counts))
    only = BenchmarkSet(name="probe/probe-only", corpus=dict(probe_docs), queries=queries,
                        qrels=qrels, query_ids=ids, query_meta=meta, near_misses=near,
                        counts=dict(counts))
    return full, only


# --------------------------------------------------------------------------- evaluation


def evaluate_benchmark(
    encoder: Encoder,
    bset: BenchmarkSet,
    *,
    ks: Sequence[int] = (1, 5, 10),
    self_mask: bool = True,
    cache_dir: str | os.PathLike | EmbeddingCache | None = None,
    chunk_size: int | None = None,
) -> tuple[dict, pd.DataFrame]:
    """Score ``encoder`` on a :class:`BenchmarkSet` through :mod:`recipematch.retrieval`.

    Adds to the summary of :func:`recipematch.retrieval.evaluate_embeddings`: ``benchmark``,
    ``slices`` (R@k per named slice), ``near_miss`` (:func:`recipematch.metrics.
    near_miss_win_rate`) when the set has near-misses, and the loader's ``counts``. The
    per-query frame gains ``cluster`` and one boolean column per slice
    (``slice_<name>``), and ``gold_beats_near_misses`` when there are near-misses.
    """
    doc_ids = list(bset.corpus)
    doc_emb = encode_cached(encoder, [doc_text(bset.corpus[d]) for d in doc_ids], cache_dir,
                            role="document")
    query_emb = encode_cached(encoder, [bset.queries[q] for q in bset.query_ids], cache_dir,
                              role="query")
    extra: dict = {"benchmark": bset.name, "loader_counts": dict(bset.counts)}
    if hasattr(encoder, "settings"):
        extra["encoder"] = dict(encoder.settings)
    summary, per_query = evaluate_embeddings(
        query_emb, doc_emb, bset.corpus, bset.queries, bset.qrels, query_ids=bset.query_ids,
        ks=ks, self_mask=self_mask, model=encoder.cache_key, query_meta=bset.query_meta,
        chunk_size=chunk_size, extra=extra)
    _add_slices_and_clusters(summary, per_query, bset, ks)
    if bset.near_misses:
        wins = gold_beats_near_misses(query_emb, doc_emb, bset.query_ids, doc_ids, bset.qrels,
                                      bset.near_misses)
        per_query["gold_beats_near_misses"] = wins
        summary["near_miss"] = near_miss_win_rate(wins)
    return summary, per_query


def _add_slices_and_clusters(summary: dict, per_query: pd.DataFrame, bset: BenchmarkSet,
                             ks: Sequence[int]) -> None:
    if bset.slices:
        summary["slices"] = recall_by_slices(per_query["rank"].to_numpy(), bset.slices, ks)
        for name, mask in bset.slices.items():
            per_query[f"slice_{name}"] = np.asarray(mask, dtype=bool)
    if bset.clusters is not None:
        per_query["cluster"] = [str(c) for c in bset.clusters]


def evaluate_benchmark_bm25(bset: BenchmarkSet, *, ks: Sequence[int] = (1, 5, 10),
                            self_mask: bool = True) -> tuple[dict, pd.DataFrame]:
    """The BM25 baseline (SPEC §7) on a :class:`BenchmarkSet`, through the same metric code;
    slices and clusters as in :func:`evaluate_benchmark` (no near-miss rate: BM25 has no
    embeddings to compare pairwise)."""
    summary, per_query = evaluate_bm25(bset.corpus, bset.queries, bset.qrels, ks=ks,
                                       self_mask=self_mask, query_meta=bset.query_meta,
                                       query_ids=bset.query_ids)
    summary["benchmark"] = bset.name
    summary["loader_counts"] = dict(bset.counts)
    _add_slices_and_clusters(summary, per_query, bset, ks)
    return summary, per_query
