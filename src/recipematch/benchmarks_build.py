"""Builders, writers and the downloader of the paper's evaluation sets: what makes the BEIR
folders that :mod:`recipematch.benchmarks_data` then only reads.

- :func:`fetch_mathnet_retrieve` downloads the MathNet-Retrieve tier folders (Hugging Face
  dataset :data:`MATHNET_RETRIEVE_REPO`; paper Section 3), the one function here that needs
  the network, and only when called;
- :func:`write_mathnet_retrieve` writes the tiers of a local copy as the pipeline's BEIR
  folders (near-misses in the query metadata);
- :func:`build_crosslingual_folder` writes the searched cross-language folder (paper
  Section 3, Appendix A) or the same-language reprint set (Appendix A, Table 5) from the
  peer release (sample corpus ∪ golds ∪ query rows).

Bad input raises :class:`recipematch.errors.RecipematchError` naming the file and line; every
folder is written with :func:`recipematch.beir.write_beir` (deterministic bytes).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from recipematch.beir import write_beir
from recipematch.benchmarks_data import MATHNET_TIERS, load_mathnet_retrieve
from recipematch.errors import RecipematchError
from recipematch.io import BadLine, iter_jsonl

__all__ = [
    "MATHNET_RETRIEVE_REPO",
    "fetch_mathnet_retrieve",
    "write_mathnet_retrieve",
    "build_crosslingual_folder",
]

MATHNET_RETRIEVE_REPO = "ShadenA/MathNet-Retrieve"


def fetch_mathnet_retrieve(dest: str | os.PathLike, *, tiers: Sequence[str] = MATHNET_TIERS,
                           revision: str | None = None) -> Path:
    """Download the MathNet-Retrieve tier folders into ``dest`` (network needed).

    Uses ``huggingface_hub.snapshot_download`` on the dataset repository
    :data:`MATHNET_RETRIEVE_REPO`; pin ``revision`` (a commit) for reproducibility. Returns
    ``dest``, ready for :func:`recipematch.benchmarks_data.load_mathnet_retrieve`.
    """
    from huggingface_hub import snapshot_download  # the network client: loaded only when a download is asked for

    bad = [t for t in tiers if t not in MATHNET_TIERS]
    if bad:
        raise ValueError(f"unknown tiers {bad}; expected some of {MATHNET_TIERS}")
    snapshot_download(repo_id=MATHNET_RETRIEVE_REPO, repo_type="dataset", revision=revision,
                      local_dir=str(dest), allow_patterns=[f"{t}/*" for t in tiers]
                      + [f"{t}/qrels/*" for t in tiers])
    return Path(dest)

def write_mathnet_retrieve(root: str | os.PathLike, out: str | os.PathLike, *,
                           split: str = "test") -> dict[str, int]:
    """Materialise the MathNet-Retrieve tiers of a local copy as the pipeline's BEIR folders
    (paper Section 3: 15,000 queries, one corpus of 117,088 documents, tiers easy / medium /
    hard that differ only in the gold).

    Every tier folder present under ``root`` (of :data:`recipematch.benchmarks_data.MATHNET_TIERS`)
    is read with :func:`recipematch.benchmarks_data.load_mathnet_retrieve` (all its checks) and written to ``out/<tier>`` with
    :func:`recipematch.beir.write_beir` (deterministic bytes, qrels as TSV). A query's
    near-misses (``near_misses.tsv``) go into its metadata as ``near_miss_ids``, which
    :func:`recipematch.benchmarks_data.load_plain` reads back, so a declared evaluation with rule ``plain`` scores the
    tier with its near-misses known.

    Returns:
        counts: ``tiers`` (how many were written) and per tier ``<tier>.n_docs``,
        ``<tier>.n_queries``, ``<tier>.n_qrels_rows``, ``<tier>.n_near_misses``.

    Raises:
        RecipematchError: ``root`` is not a folder or holds none of the tier folders, a
            near-miss row names a query or document the tier lacks, or any check of
            :func:`recipematch.benchmarks_data.load_mathnet_retrieve`.
    """
    root, out = Path(root), Path(out)
    if not root.is_dir():
        raise RecipematchError(f"MathNet-Retrieve: {root} is not a folder (expected {', '.join(MATHNET_TIERS)} "
                               f"tier folders; fetch them with fetch_mathnet_retrieve or huggingface-cli)")
    present = [t for t in MATHNET_TIERS if (root / t).is_dir()]
    if not present:
        raise RecipematchError(f"MathNet-Retrieve: {root} holds none of the tier folders {list(MATHNET_TIERS)}")
    counts: dict[str, int] = {"tiers": len(present)}
    for tier in present:
        bset = load_mathnet_retrieve(root, tier, split=split)
        meta = {q: dict(m) for q, m in bset.query_meta.items()}
        for q, docs in bset.near_misses.items():
            if q not in bset.queries:
                continue
            missing = [d for d in docs if d not in bset.corpus]
            if missing:
                raise RecipematchError(f"MathNet-Retrieve {tier}: near_misses.tsv names document {missing[0]!r} "
                                       f"(query {q!r}) that is not in {root / tier / 'corpus.jsonl'}")
            meta.setdefault(q, {})["near_miss_ids"] = list(docs)
        write_beir(out / tier, bset.corpus, bset.queries, bset.qrels, split, query_meta=meta)
        counts.update({f"{tier}.n_docs": len(bset.corpus), f"{tier}.n_queries": len(bset.query_ids),
                       f"{tier}.n_qrels_rows": sum(len(v) for v in bset.qrels.values()),
                       f"{tier}.n_near_misses": sum(len(meta[q].get("near_miss_ids", ())) for q in meta)})
    return counts


# --------------------------------------------------------------------------- cross-language folder


def _release_rows(path: Path, required: tuple[str, ...]) -> list[dict]:
    """Rows of a release JSONL file read with the project's one reader
    (:func:`recipematch.io.iter_jsonl`); each needs string ``required`` fields and a unique
    ``_id``.

    Raises:
        RecipematchError: naming the file and line.
    """
    if not path.is_file():
        raise RecipematchError(f"missing release file {path}")
    rows, seen = [], set()
    for lineno, obj in iter_jsonl(path):
        if isinstance(obj, BadLine):
            raise RecipematchError(f"{path}:{lineno}: {obj.reason}")
        if not isinstance(obj, dict):
            raise RecipematchError(f"{path}:{lineno}: expected a JSON object")
        for key in required:
            if not isinstance(obj.get(key), str):
                raise RecipematchError(f"{path}:{lineno}: field {key!r} missing or not a string")
        if obj["_id"] in seen:
            raise RecipematchError(f"{path}:{lineno}: duplicate _id {obj['_id']!r}")
        seen.add(obj["_id"])
        rows.append(obj)
    return rows


def _release_qrels(path: Path) -> dict[str, dict[str, int]]:
    if not path.is_file():
        raise RecipematchError(f"missing release file {path}")
    qrels: dict[str, dict[str, int]] = {}
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8").lstrip("\ufeff").rstrip("\r\n")
            except UnicodeDecodeError:
                raise RecipematchError(f"{path}:{lineno}: not valid UTF-8") from None
            if not line.strip():
                continue
            parts = [p.strip() for p in line.split("\t")]
            if lineno == 1 and parts[0].lower() in ("query-id", "query_id", "qid"):
                continue
            if len(parts) != 3 or not parts[0] or not parts[1]:
                raise RecipematchError(f"{path}:{lineno}: expected query-id<TAB>corpus-id<TAB>score")
            try:
                score = int(parts[2])
            except ValueError:
                raise RecipematchError(f"{path}:{lineno}: score must be an integer, got "
                                       f"{parts[2]!r}") from None
            if parts[1] in qrels.setdefault(parts[0], {}):
                raise RecipematchError(f"{path}:{lineno}: duplicate pair ({parts[0]!r}, {parts[1]!r})")
            qrels[parts[0]][parts[1]] = score
    return qrels


def build_crosslingual_folder(release: str | os.PathLike, out: str | os.PathLike, *,
                              corpus_rows: Sequence[Mapping] | None = None,
                              subdir: str = "crosslingual_eval") -> dict[str, int]:
    """Write the searched cross-language BEIR folder from the peer release (paper Section 3,
    Appendix A); with ``subdir="samelang_eval"`` the same-language reprint set (Appendix A,
    Table 5), released in the same shape and searched the same way.

    With ``corpus_rows`` (the corpus stage's rows ``{doc_id, title, text}``, e.g. the full
    MathNet corpus) those rows replace ``release/corpus.jsonl`` as the searched corpus, as the
    paper searches the whole collection; a gold or query row whose id is already there must
    then carry the same text after :func:`recipematch.corpus.normalise_text`.

    Reads ``release/corpus.jsonl`` (the corpus sample) and, under
    ``release/<subdir>/``, ``gold_corpus.jsonl``, ``queries.jsonl`` and
    ``qrels/test.tsv``. The corpus written is the sample, then the gold rows not in it, then
    the query rows not yet present (each query is a corpus problem whose own entry is masked
    at search time); queries and qrels are written as released, with their metadata. Same
    inputs give byte-identical files (:func:`recipematch.beir.write_beir`).

    Returns:
        counts: ``n_docs``, ``n_sample_docs``, ``n_gold_docs_added``, ``n_query_docs_added``,
        ``n_queries``, ``n_qrels_rows``, ``n_member_ids`` (queries ∪ golds).

    Raises:
        RecipematchError: a missing file, a malformed line (file and line named), one id with
            two different texts, or a qrels row naming a query or gold that no file holds.
    """
    release = Path(release)
    cl = release / subdir
    if corpus_rows is None:
        sample = _release_rows(release / "corpus.jsonl", ("_id", "text"))
        sample_path = release / "corpus.jsonl"
        same = str.__eq__
    else:
        from recipematch.corpus import normalise_text  # pandas-heavy: only with the corpus stage's rows

        sample = [{"_id": str(r["doc_id"]), "title": r.get("title") or "", "text": r["text"]} for r in corpus_rows]
        sample_path = Path("the corpus stage's table")

        def same(a: str, b: str) -> bool:
            return normalise_text(a) == normalise_text(b)
    golds = _release_rows(cl / "gold_corpus.jsonl", ("_id", "text"))
    qrows = _release_rows(cl / "queries.jsonl", ("_id", "text"))
    qrels_path = cl / "qrels" / "test.tsv"
    qrels = _release_qrels(qrels_path)
    corpus: dict[str, dict] = {}
    origin: dict[str, str] = {}
    added = {"sample": 0, "gold": 0, "query": 0}
    for what, path, rows in (("sample", sample_path, sample),
                             ("gold", cl / "gold_corpus.jsonl", golds),
                             ("query", cl / "queries.jsonl", qrows)):
        for r in rows:
            did = r["_id"]
            if did in corpus:
                if not same(corpus[did]["text"], r["text"]):
                    raise RecipematchError(f"{path}: _id {did!r} has a different text from its "
                                           f"row in {origin[did]}")
                continue
            title = r.get("title") if what != "query" else ""
            corpus[did] = {"title": title if isinstance(title, str) else "", "text": r["text"]}
            origin[did] = str(path)
            added[what] += 1
    queries = {r["_id"]: r["text"] for r in qrows}
    meta = {}
    for r in qrows:
        m = r.get("metadata")
        if m is not None and not isinstance(m, dict):
            raise RecipematchError(f"{cl / 'queries.jsonl'}: query {r['_id']!r}: metadata must be an object")
        meta[r["_id"]] = m or {}
    for q, per_q in qrels.items():
        if q not in queries:
            raise RecipematchError(f"{qrels_path}: query-id {q!r} is not in queries.jsonl")
        for d in per_q:
            if d not in corpus:
                raise RecipematchError(f"{qrels_path}: corpus-id {d!r} (query {q!r}) is in no "
                                       "corpus file")
            if d == q:
                raise RecipematchError(f"{qrels_path}: query {q!r} lists itself as a gold: its own corpus "
                                       "entry is masked at search time, so that gold can never be retrieved")
    write_beir(out, corpus, queries, qrels, query_meta=meta)
    members = set(queries) | {d for per_q in qrels.values() for d, s in per_q.items() if s > 0}
    return {"n_docs": len(corpus), "n_sample_docs": added["sample"],
            "n_gold_docs_added": added["gold"], "n_query_docs_added": added["query"],
            "n_queries": len(queries), "n_qrels_rows": sum(len(v) for v in qrels.values()),
            "n_member_ids": len(members)}
