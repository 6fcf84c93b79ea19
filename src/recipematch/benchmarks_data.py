"""Loaders for the evaluation sets of the paper.

Each loader turns a set's released files into a :class:`BenchmarkSet`: a BEIR triple
(corpus, queries, qrels as released) plus the scoring rule it is read under and what its
metrics need (the queries to score, cluster labels for the cluster bootstrap, named query
slices, near-miss ids). Loaders only read and check data: they never import the retrieval or
metric code (scoring lives in :mod:`recipematch.scoring`), and every check runs before any
model is loaded. Bad input raises :class:`recipematch.errors.RecipematchError` naming the
set, the file and the field. Nothing downloads, writes or builds here: the builders of the
searched folders, the writer of the MathNet-Retrieve tiers and the one downloader
(:func:`recipematch.benchmarks_build.fetch_mathnet_retrieve`, only when called) live in
:mod:`recipematch.benchmarks_build`.

- **MathNet-Retrieve** (Hugging Face dataset ``ShadenA/MathNet-Retrieve``; paper Section 3):
  one folder per tier (``easy``, ``medium``, ``hard``), each a BEIR folder whose qrels are
  ``qrels/test.jsonl`` (or ``.tsv``); the tiers share the corpus and the queries and differ
  only in the gold. Which documents are a hard query's near-misses is read from an optional
  ``near_misses.tsv`` (``query-id<TAB>corpus-id``, header allowed) in the tier folder or the
  root.
- **Cross-language duplicates** (paper Section 3 and Appendix A; slices as in Table 4): a
  BEIR folder whose query ``metadata`` has ``lang``, ``cluster_id``, ``gold_ids``,
  ``gold_langs`` (and ``methods``). Read under the rule ``crosslingual_strict``: a query's
  rank is taken over its golds whose tag *in that query's* ``gold_langs`` differs from its
  ``lang``; a gold tagged ``unknown`` counts as another language; tags as released; a query
  with no such gold is a miss. :func:`recipematch.benchmarks_build.build_crosslingual_folder`
  builds the searched folder from the peer release (sample corpus ∪ golds ∪ query rows).
- **Same-language duplicates** (paper Appendix A, Table 5): a BEIR folder whose query
  metadata has ``lang``, ``cluster_id`` and either ``slice`` (``"primary"``, ``"leaked"`` or
  ``"exact"``) or the flags ``exact_text`` / ``leaked``; slices primary / english / leaked /
  exact.
- **Near-miss probe** (paper Table 6): each item's ``source_text`` is a query whose id is
  its ``source_id`` (a corpus id, so its own corpus entry is self-masked); its positive is
  document ``cp-pos-<source_id>`` and its i-th negative ``cp-neg-<source_id>-<i>``. Two
  rankings: the corpus plus every probe document, and the probe documents alone.
- **Any BEIR folder** under the ``plain`` rule: :func:`load_plain`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recipematch.beir import (
    BeirDataset,
    BeirFormatError,
    positive_qrels,
    read_beir,
    read_corpus,
)
from recipematch.errors import RecipematchError, short_repr
from recipematch.io import BadLine, iter_jsonl
from recipematch.rules import SELF_MASK_RULES, UNKNOWN_LANG

__all__ = [
    "MATHNET_TIERS",
    "UNKNOWN_LANG",
    "RULE_LOADERS",
    "BenchmarkSet",
    "load_mathnet_retrieve",
    "load_plain",
    "load_crosslingual",
    "load_samelang",
    "load_probe",
    "load_set",
    "member_ids",
]

MATHNET_TIERS = ("easy", "medium", "hard")


@dataclass
class BenchmarkSet:
    """One evaluation set, checked and ready to score (:mod:`recipematch.scoring`).

    Attributes:
        name: e.g. ``"mathnet-retrieve/hard"``, ``"crosslingual"``.
        corpus, queries, qrels: the BEIR triple; ``qrels`` as released (all scores).
        query_ids: the queries to score, in file order: every query with a positive qrel.
        rule: the scoring rule, a key of :data:`recipematch.metrics.SCORING_RULES`.
        query_meta: ``query_id -> metadata``.
        query_lang: ``query_id -> metadata.lang`` (the strict rule; else empty).
        gold_tags: ``query_id -> {gold_id: tag}`` from that query's ``gold_ids`` /
            ``gold_langs`` (the strict rule; else empty).
        clusters: ``(len(query_ids),)`` cluster labels for the cluster bootstrap, or None.
        slices: named boolean masks aligned with ``query_ids``.
        near_misses: ``query_id -> near-miss doc ids`` (hard tier, probe), or empty.
        counts: what the loader saw, by name.
        self_mask: which corpus entry is a query's own and masked, a rule of
            :data:`recipematch.retrieval.selfmask.SELF_MASK_RULES` (default
            ``"id_and_text"``; an evaluation declares it).
    """

    name: str
    corpus: dict[str, dict]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    query_ids: list[str]
    rule: str = "plain"
    query_meta: dict[str, dict] = field(default_factory=dict)
    query_lang: dict[str, str] = field(default_factory=dict)
    gold_tags: dict[str, dict[str, str]] = field(default_factory=dict)
    clusters: np.ndarray | None = None
    slices: dict[str, np.ndarray] = field(default_factory=dict)
    near_misses: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    self_mask: str = "id_and_text"


def member_ids(bset: BenchmarkSet) -> list[str]:
    """Every id a set evaluates with: its scored queries and all their positive golds,
    sorted. These join the training exclusion lists (the cross-language set: 779 ids,
    paper Appendix A)."""
    positive = positive_qrels(bset.qrels)
    out = set(bset.query_ids)
    for q in bset.query_ids:
        out.update(positive.get(q, ()))
    return sorted(out)


# --------------------------------------------------------------------------- reading


def _first_bad_line(path: Path) -> BadLine | None:
    for _, obj in iter_jsonl(path):
        if isinstance(obj, BadLine):
            return obj
    return None


def _read_set(folder: str | os.PathLike, split: str, name: str) -> BeirDataset:
    """:func:`recipematch.beir.read_beir` with every failure turned into one
    :class:`RecipematchError` naming the set, and every id the qrels name checked.

    Raises:
        RecipematchError: a missing folder or file, a line that is not UTF-8 JSON (or holds a
            lone surrogate), a malformed row, a qrels row naming a query absent from
            ``queries.jsonl`` or a positive gold absent from ``corpus.jsonl``, or no query
            with a positive qrel.
    """
    folder = Path(folder)
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise RecipematchError(f"set {name!r}: folder {folder} {what}")
    for fname in ("corpus.jsonl", "queries.jsonl"):
        path = folder / fname
        if not path.is_file():
            raise RecipematchError(f"set {name!r}: missing file {path}")
        bad = _first_bad_line(path)
        if bad is not None:
            raise RecipematchError(f"set {name!r}: {path}:{bad.line_no}: {bad.reason}")
    try:
        ds = read_beir(folder, split)
    except (BeirFormatError, FileNotFoundError, UnicodeDecodeError) as exc:
        raise RecipematchError(f"set {name!r}: {exc}") from None
    qrels_file = next((p for p in (folder / "qrels" / f"{split}.tsv",
                                   folder / "qrels" / f"{split}.jsonl") if p.exists()), None)
    unknown_q = [q for q in ds.qrels if q not in ds.queries]
    if unknown_q:
        raise RecipematchError(f"set {name!r}: {qrels_file}: query-id {unknown_q[0]!r} is not in "
                               f"queries.jsonl ({len(unknown_q)} such ids)")
    unknown_d = sorted({d for per_q in positive_qrels(ds.qrels).values() for d in per_q
                        if d not in ds.corpus})
    if unknown_d:
        raise RecipematchError(f"set {name!r}: {qrels_file}: corpus-id {unknown_d[0]!r} is not in "
                               f"corpus.jsonl ({len(unknown_d)} such ids)")
    if not positive_qrels(ds.qrels):
        raise RecipematchError(f"set {name!r}: {qrels_file}: no query has a qrels row with score > 0")
    return ds


def _scored_ids(ds: BeirDataset) -> list[str]:
    positive = positive_qrels(ds.qrels)
    return [q for q in ds.queries if q in positive]


def load_plain(folder: str | os.PathLike, *, split: str = "test",
               name: str | None = None) -> BenchmarkSet:
    """Any BEIR folder under the ``plain`` rule: every gold with score > 0 counts.

    Scored queries are those with a positive qrel, in file order. A ``cluster_id`` in every
    scored query's metadata gives ``clusters``; ``near_miss_ids`` (a list) in a query's
    metadata gives its near-misses (the hard tier of :mod:`recipematch.evalsets`).

    Raises:
        RecipematchError: see :func:`_read_set`.
    """
    name = name or Path(folder).name
    ds = _read_set(folder, split, name)
    ids = _scored_ids(ds)
    metas = [ds.query_meta.get(q) or {} for q in ids]
    clusters = (np.asarray([str(m["cluster_id"]) for m in metas], dtype=object)
                if all("cluster_id" in m for m in metas) else None)
    near = {q: [str(d) for d in m["near_miss_ids"]] for q, m in zip(ids, metas)
            if isinstance(m.get("near_miss_ids"), list) and m["near_miss_ids"]}
    return BenchmarkSet(name=name, corpus=ds.corpus, queries=ds.queries, qrels=ds.qrels,
                        query_ids=ids, rule="plain", query_meta=ds.query_meta,
                        clusters=clusters, near_misses=near, counts=ds.counts.to_dict())


# --------------------------------------------------------------------------- MathNet-Retrieve

def _read_pairs_tsv(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    with open(path, encoding="utf-8-sig") as fh:
        for lineno, line in enumerate(fh, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if lineno == 1 and parts[0].strip().lower() in ("query-id", "query_id"):
                continue
            if len(parts) < 2:
                raise RecipematchError(f"{path}:{lineno}: expected query-id<TAB>corpus-id")
            out.setdefault(parts[0].strip(), []).append(parts[1].strip())
    return out


def load_mathnet_retrieve(root: str | os.PathLike, tier: str, *,
                          split: str = "test") -> BenchmarkSet:
    """Load one MathNet-Retrieve tier from a local copy (layout of the Hugging Face repo).

    Args:
        root: folder holding ``easy/``, ``medium/``, ``hard/`` (see
            :func:`recipematch.benchmarks_build.fetch_mathnet_retrieve`).
        tier: ``"easy"``, ``"medium"`` or ``"hard"``.

    Returns:
        :class:`BenchmarkSet` named ``"mathnet-retrieve/<tier>"``, rule ``plain``;
        ``near_misses`` from an optional ``near_misses.tsv`` in the tier folder or ``root``;
        queries scored are those with a positive qrel. A ``domain`` in query metadata gives
        per-domain R@k.

    Raises:
        ValueError: an unknown tier.
        RecipematchError: see :func:`_read_set`.
    """
    if tier not in MATHNET_TIERS:
        raise ValueError(f"tier must be one of {MATHNET_TIERS}, got {tier!r}")
    root = Path(root)
    ds = _read_set(root / tier, split, f"mathnet-retrieve/{tier}")
    near: dict[str, list[str]] = {}
    for cand in (root / tier / "near_misses.tsv", root / "near_misses.tsv"):
        if cand.exists():
            near = _read_pairs_tsv(cand)
            break
    return BenchmarkSet(name=f"mathnet-retrieve/{tier}", corpus=ds.corpus, queries=ds.queries,
                        qrels=ds.qrels, query_ids=_scored_ids(ds), rule="plain",
                        query_meta=ds.query_meta, near_misses=near,
                        counts=ds.counts.to_dict())

# --------------------------------------------------------------------------- duplicate sets

#: How a cross-language pair was found (``metadata.methods``) grouped as the paper's Table 4
#: rows: through a shared answer, through matching text, through formulas only.
FOUND_BY = {
    "answer": ("V4_answer_math", "V5_answer_tag"),
    "text": ("V1_text", "exact_text"),
}


def _crosslingual_tags(ds: BeirDataset, ids: Sequence[str], name: str
                       ) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Each scored query's ``lang`` and ``{gold_id: tag}`` from its own metadata.

    Raises:
        RecipematchError: naming the set, ``queries.jsonl``, the query and the field: a
            missing or empty ``metadata.lang``, ``gold_ids`` / ``gold_langs`` missing, not
            lists of strings, of different lengths, or a positive qrels gold the query's
            ``gold_ids`` does not list.
    """
    src = f"set {name!r}: {Path(ds.folder) / 'queries.jsonl'}"
    positive = positive_qrels(ds.qrels)
    query_lang: dict[str, str] = {}
    gold_tags: dict[str, dict[str, str]] = {}
    for q in ids:
        meta = ds.query_meta.get(q) or {}
        lang = meta.get("lang")
        if not isinstance(lang, str) or not lang.strip():
            raise RecipematchError(f"{src}: query {q!r}: metadata.lang is missing or empty "
                                   "(the crosslingual_strict rule needs a language tag per query)")
        gids, glangs = meta.get("gold_ids"), meta.get("gold_langs")
        for fname, val in (("gold_ids", gids), ("gold_langs", glangs)):
            if not isinstance(val, list) or not all(isinstance(x, str) and x for x in val):
                raise RecipematchError(f"{src}: query {q!r}: metadata.{fname} must be a list of "
                                       "non-empty strings (the crosslingual_strict rule reads it)")
        if len(gids) != len(glangs):
            raise RecipematchError(f"{src}: query {q!r}: metadata.gold_ids has {len(gids)} entries "
                                   f"but metadata.gold_langs has {len(glangs)}")
        tags = {}
        for g, tag in zip(gids, glangs):
            if tags.setdefault(g, tag) != tag:
                raise RecipematchError(f"{src}: query {q!r}: metadata.gold_ids lists {g!r} twice with different "
                                       f"language tags ({tags[g]!r}, {tag!r})")
        untagged = [d for d in positive[q] if d not in tags]
        if untagged:
            raise RecipematchError(f"{src}: query {q!r}: qrels gold {untagged[0]!r} is not listed "
                                   "in metadata.gold_ids, so it has no language tag")
        query_lang[q] = lang
        gold_tags[q] = tags
    return query_lang, gold_tags


def _clusters(ds: BeirDataset, ids: Sequence[str], name: str) -> np.ndarray:
    def bad(v) -> bool:  # a cluster id is a non-empty string or an integer (None would merge queries)
        return not ((isinstance(v, str) and v.strip()) or (isinstance(v, int) and not isinstance(v, bool)))

    missing = [q for q in ids if bad((ds.query_meta.get(q) or {}).get("cluster_id"))]
    if missing:
        raise RecipematchError(f"set {name!r}: {Path(ds.folder) / 'queries.jsonl'}: query "
                               f"{missing[0]!r} lacks metadata.cluster_id (missing, null or not a string/integer; "
                               f"{len(missing)} such queries)")
    return np.asarray([str(ds.query_meta[q]["cluster_id"]) for q in ids], dtype=object)


def crosslingual_slices(query_meta: Mapping[str, Mapping], ids: Sequence[str]
                        ) -> dict[str, np.ndarray]:
    """Named query slices of the cross-language set (paper Table 4), aligned with ``ids``.

    ``lang=<tag>`` per query language; ``method=<name>`` per mining method in
    ``metadata.methods`` (a query found by two methods is in both); the Table 4 rows
    ``found_by=answer`` (a method of ``FOUND_BY["answer"]``), ``found_by=text``
    (``FOUND_BY["text"]``) and ``found_by=formulas_only`` (methods exactly
    ``["V2_rare_math"]``); ``high_confidence`` when every query has ``min_confidence``.
    Slice names are sorted within each family.
    """
    metas = [query_meta.get(q) or {} for q in ids]
    out: dict[str, np.ndarray] = {}
    for lang in sorted({str(m.get("lang")) for m in metas}):
        out[f"lang={lang}"] = np.array([str(m.get("lang")) == lang for m in metas])
    if all(isinstance(m.get("methods"), list) for m in metas):
        methods = [set(map(str, m["methods"])) for m in metas]
        for meth in sorted(set().union(*methods)):
            out[f"method={meth}"] = np.array([meth in ms for ms in methods])
        for group, members in FOUND_BY.items():
            out[f"found_by={group}"] = np.array([bool(ms & set(members)) for ms in methods])
        out["found_by=formulas_only"] = np.array([ms == {"V2_rare_math"} for ms in methods])
    if all("min_confidence" in m for m in metas):
        out["high_confidence"] = np.array([m["min_confidence"] == "high" for m in metas])
    return out


def load_crosslingual(folder: str | os.PathLike, *, split: str = "test",
                      name: str = "crosslingual") -> BenchmarkSet:
    """Load the cross-language duplicate set under the strict rule (paper Section 3,
    Appendix A; slices as in Table 4).

    Every query with a positive qrel is scored; ``qrels`` stay as released and the rule is
    applied when scoring (:func:`recipematch.metrics.strict_crosslingual_qrels` with this
    set's ``query_lang`` and ``gold_tags``, read per query: the same document can carry
    different tags for different queries). ``clusters`` are ``metadata.cluster_id``;
    ``slices`` from :func:`crosslingual_slices`. ``counts`` adds ``n_member_ids`` (queries ∪
    golds), ``n_clusters`` and ``n_unknown_gold_tags``.

    Raises:
        RecipematchError: see :func:`_read_set` and :func:`_crosslingual_tags`; a query
            without ``metadata.cluster_id``.
    """
    ds = _read_set(folder, split, name)
    ids = _scored_ids(ds)
    query_lang, gold_tags = _crosslingual_tags(ds, ids, name)
    clusters = _clusters(ds, ids, name)
    bset = BenchmarkSet(name=name, corpus=ds.corpus, queries=ds.queries, qrels=ds.qrels,
                        query_ids=ids, rule="crosslingual_strict", query_meta=ds.query_meta,
                        query_lang=query_lang, gold_tags=gold_tags, clusters=clusters,
                        slices=crosslingual_slices(ds.query_meta, ids))
    positive = positive_qrels(ds.qrels)
    bset.counts = ds.counts.to_dict() | {
        "n_member_ids": len(member_ids(bset)),
        "n_clusters": len(set(clusters.tolist())),
        "n_unknown_gold_tags": sum(1 for q in ids for d in positive[q]
                                   if gold_tags[q][d] == UNKNOWN_LANG),
    }
    return bset


_SAMELANG_SLICES = ("primary", "leaked", "exact")


def _samelang_slice(meta: Mapping, qid: str, src: str) -> str:
    """A same-language query's slice (paper Appendix A, Table 5): ``metadata.slice`` when
    given; else the release's flags: ``exact_text_cluster`` true -> ``exact`` (near
    byte-identical reprints, a ceiling check), else ``clean_of_training`` true -> ``primary``,
    false -> ``leaked``; the older ``exact_text`` / ``leaked`` flags are read the same way.

    Raises:
        RecipematchError: naming the file, the query and the missing or malformed field.
    """
    if "slice" in meta:
        s = meta["slice"]
        if s not in _SAMELANG_SLICES:
            raise RecipematchError(f"{src}: query {qid!r}: metadata.slice must be one of "
                                   f"{_SAMELANG_SLICES}, got {str(s)[:40]!r}")
        return s
    if "exact_text_cluster" in meta or "clean_of_training" in meta:
        for key in ("exact_text_cluster", "clean_of_training"):
            if not isinstance(meta.get(key), bool):
                raise RecipematchError(f"{src}: query {qid!r}: metadata.{key} must be true or false "
                                       f"(the slice flags of paper Table 5), got {str(meta.get(key))[:40]!r}")
        if meta["exact_text_cluster"]:
            return "exact"
        return "primary" if meta["clean_of_training"] else "leaked"
    if "exact_text" in meta or "leaked" in meta:
        for key in ("exact_text", "leaked"):
            if key in meta and not isinstance(meta[key], bool):
                raise RecipematchError(f"{src}: query {qid!r}: metadata.{key} must be true or false, "
                                       f"got {str(meta[key])[:40]!r}")
        if meta.get("exact_text"):
            return "exact"
        return "leaked" if meta.get("leaked") else "primary"
    raise RecipematchError(f"{src}: query {qid!r}: metadata lacks the slice flags (paper Table 5): "
                           "'exact_text_cluster' and 'clean_of_training', or 'slice'")


def load_samelang(folder: str | os.PathLike, *, split: str = "test",
                  name: str = "samelang") -> BenchmarkSet:
    """Load the same-language duplicate set with its four slices (paper Appendix A,
    Table 5).

    Slices (aligned with ``query_ids``): ``primary`` (reworded clusters no training file
    touches), ``english`` (primary queries whose ``lang`` is ``en``), ``leaked``, ``exact``
    (exact-text reprints, a ceiling check). ``clusters`` are ``cluster_id``; the paper's
    primary-slice interval resamples the primary slice's clusters. Rule ``samelang``.

    Raises:
        RecipematchError: see :func:`_read_set`; a query without slice metadata or
            ``cluster_id``.
    """
    if not Path(folder).is_dir():
        raise RecipematchError(
            f"set {name!r}: folder {folder} does not exist: the same-language reprint set (paper Appendix A, "
            f"Table 5) is not in the shipped sample; put its BEIR folder there (corpus.jsonl, queries.jsonl with "
            f"metadata lang, cluster_id and slice or exact_text_cluster/clean_of_training, qrels/{split}.tsv); for the default's set restore data/peer_release/samelang_eval (`dvc pull data.dvc`) and rerun the evalsets stage; or drop the evaluation")
    ds = _read_set(folder, split, name)
    ids = _scored_ids(ds)
    src = f"set {name!r}: {Path(ds.folder) / 'queries.jsonl'}"
    metas = [ds.query_meta.get(q) or {} for q in ids]
    labels = [_samelang_slice(m, q, src) for m, q in zip(metas, ids)]
    clusters = _clusters(ds, ids, name)
    slices = {s: np.array([lab == s for lab in labels]) for s in _SAMELANG_SLICES}
    slices["english"] = slices["primary"] & np.array([m.get("lang") == "en" for m in metas])
    slices = {k: slices[k] for k in ("primary", "english", "leaked", "exact")}
    return BenchmarkSet(name=name, corpus=ds.corpus, queries=ds.queries, qrels=ds.qrels,
                        query_ids=ids, rule="samelang", query_meta=ds.query_meta,
                        clusters=clusters, slices=slices, counts=ds.counts.to_dict())


#: Scoring rule -> the loader that checks a folder for it (rules as data: a declared set
#: names its rule, and :func:`load_set` picks the loader).
RULE_LOADERS: dict[str, Callable[..., BenchmarkSet]] = {
    "plain": load_plain,
    "crosslingual_strict": load_crosslingual,
    "samelang": load_samelang,
}


def load_set(folder: str | os.PathLike, rule: str, *, split: str = "test",
             name: str | None = None, self_mask: str = "id_and_text") -> BenchmarkSet:
    """Load and check a BEIR folder for a scoring rule (a key of :data:`RULE_LOADERS`);
    every check runs here, before any model is loaded. ``self_mask`` is the set's
    self-masking rule (:mod:`recipematch.retrieval.selfmask`).

    Raises:
        RecipematchError: an unknown rule or self-masking rule, or any check of the rule's loader.
    """
    if rule not in RULE_LOADERS:
        raise RecipematchError(f"set {name or Path(folder).name!r}: unknown rule {rule!r}; "
                               f"expected one of {sorted(RULE_LOADERS)}")
    if self_mask not in SELF_MASK_RULES:
        raise RecipematchError(f"set {name or Path(folder).name!r}: unknown self-masking rule {short_repr(self_mask, 40)}; "
                               f"expected one of {list(SELF_MASK_RULES)}")
    # at call time: importing recipematch.retrieval with this module would load model code with the loaders
    from recipematch.retrieval.selfmask import check_own_only_golds

    bset = dataclasses.replace(RULE_LOADERS[rule](folder, split=split, name=name or Path(folder).name),
                               self_mask=self_mask)
    check_own_only_golds(bset)  # before any model loads
    return bset


# --------------------------------------------------------------------------- near-miss probe


def _read_probe_items(path: Path) -> list[dict]:
    """Probe items read with the project's one reader; each needs string ``source_id``,
    ``source_text``, ``positive_text`` and a list of ``{"text": str}`` ``negatives``.

    Raises:
        RecipematchError: naming the file, line and field.
    """
    if not path.is_file():
        raise RecipematchError(f"probe: missing file {path}")
    items = []
    seen = set()
    for lineno, obj in iter_jsonl(path):
        if isinstance(obj, BadLine):
            raise RecipematchError(f"{path}:{lineno}: {obj.reason}")
        if not isinstance(obj, dict):
            raise RecipematchError(f"{path}:{lineno}: expected a JSON object")
        for key in ("source_id", "source_text", "positive_text"):
            if not isinstance(obj.get(key), str):
                raise RecipematchError(f"{path}:{lineno}: field {key!r} missing or not a string")
        if not isinstance(obj.get("negatives"), list):
            raise RecipematchError(f"{path}:{lineno}: field 'negatives' missing or not a list")
        if obj["source_id"] in seen:
            raise RecipematchError(f"{path}:{lineno}: duplicate source_id {obj['source_id']!r}")
        seen.add(obj["source_id"])
        for j, neg in enumerate(obj["negatives"]):
            if not isinstance(neg, dict) or not isinstance(neg.get("text"), str):
                raise RecipematchError(f"{path}:{lineno}: negative {j} has no text")
        items.append(obj)
    return items


def load_probe(
    probe_jsonl: str | os.PathLike,
    corpus: Mapping[str, Mapping] | str | os.PathLike,
    *,
    qrels_tsv: str | os.PathLike | None = None,
) -> tuple[BenchmarkSet, BenchmarkSet]:
    """Load the generator-free near-miss probe as its two rankings (paper Table 6).

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
        RecipematchError: malformed items, a probe document id that collides with a corpus
            id, or a qrels gold that is not a probe document.
    """
    items = _read_probe_items(Path(probe_jsonl))
    if not isinstance(corpus, Mapping):
        try:
            corpus = read_corpus(corpus)
        except (BeirFormatError, FileNotFoundError, UnicodeDecodeError) as exc:
            raise RecipematchError(f"probe corpus: {exc}") from None
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
        raise RecipematchError(f"probe document ids collide with corpus ids: {clash[:5]}")
    counts = {"n_items": len(items), "n_probe_docs": len(probe_docs),
              "n_negatives": sum(len(v) for v in near.values())}
    if qrels_tsv is not None:
        released = _read_pairs_tsv(Path(qrels_tsv))
        qrels = {q: {d: 1 for d in ds} for q, ds in released.items() if q in queries}
        counts["n_qrels_queries_without_item"] = sum(1 for q in released if q not in queries)
        bad = [d for ds in qrels.values() for d in ds if d not in probe_docs]
        if bad:
            raise RecipematchError(f"qrels golds that are not probe documents: {bad[:5]}")
        counts["n_items_without_qrels"] = sum(1 for q in queries if q not in qrels)
    else:
        qrels = {sid: {f"cp-pos-{sid}": 1} for sid in queries}
    ids = list(queries)
    full_corpus = {**dict(corpus), **probe_docs}
    full = BenchmarkSet(name="probe/corpus+probe", corpus=full_corpus, queries=queries,
                        qrels=qrels, query_ids=ids, rule="plain", query_meta=meta, near_misses=near,
                        counts=dict(counts))
    only = BenchmarkSet(name="probe/probe-only", corpus=dict(probe_docs), queries=queries,
                        qrels=qrels, query_ids=ids, rule="plain", query_meta=meta, near_misses=near,
                        counts=dict(counts))
    return full, only
