"""The regeneration defence (paper Appendix E, Tables 24-25): a benchmark builder's remedy for
recipe-matching is to write the gold documents another way and see whether a model's lead
survives.

A regenerated version keeps the benchmark's queries, qrels and corpus and replaces each
query's gold document text (same document id) with a new rewrite of the query's source
problem. Two rules keep the version honest:

- a corpus document other than a gold whose text equals a regenerated gold (after stripping
  outer whitespace) is removed and counted, so the corpus never holds the gold text twice
  (the sample's tiers carry the other prompt's rewrite as an equivalent non-gold);
- a query without a regenerated gold (the rewrite failed, was rejected by the judge or, in
  released rows, was not verified) stops the build (``missing="error"``) or is left out with
  its reason (``missing="drop"``); a gold document shared by two queries is refused (its one
  text cannot be two rewrites).

Released rows follow the peer release's ``data/defense_eval/regen_manifest.json`` shape:
``{"config": {...}, "queries": {query_id: {variant: {"text": str, "verified": bool}}}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError, short_repr

__all__ = ["Regenerated", "read_release_rows", "regenerate"]


@dataclass(frozen=True)
class Regenerated:
    """A regenerated version, ready for :func:`recipematch.beir.write_beir`."""

    corpus: dict[str, dict]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    query_meta: dict[str, dict]
    counts: dict[str, Any]
    dropped: list[dict] = field(default_factory=list)


def read_release_rows(path: Path, variant: str) -> tuple[dict[str, str], dict[str, str], dict]:
    """Regenerated golds of one ``variant`` from a release manifest.

    Returns:
        ``(texts, missing, config)``: query id → regenerated text for verified, non-empty
        rewrites; query id → reason for the others (``unverified``, ``empty``, ``no_variant``);
        the manifest's ``config`` block (provenance).

    Raises:
        RecipematchError: the file is missing, not JSON, not the manifest shape (naming the
            query and field), or no query has ``variant``.
    """
    import json

    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise RecipematchError(f"{path}: cannot be read ({e.strerror or e})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecipematchError(f"{path}: not a JSON file ({type(e).__name__}: {str(e)[:120]})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("queries"), dict):
        raise RecipematchError(f"{path}: expected {{'config': ..., 'queries': {{id: {{variant: {{text, verified}}}}}}}}")
    texts, missing, seen = {}, {}, False
    for qid, per in raw["queries"].items():
        if not isinstance(per, dict):
            raise RecipematchError(f"{path}: queries[{short_repr(qid, 60)}] is not an object")
        row = per.get(variant)
        if row is None:
            missing[qid] = "no_variant"
            continue
        seen = True
        if not isinstance(row, dict) or not isinstance(row.get("text"), str) or not isinstance(row.get("verified"), bool):
            raise RecipematchError(f"{path}: queries[{short_repr(qid, 60)}][{variant!r}] needs a string text and a "
                                   "boolean verified")
        if not row["verified"]:
            missing[qid] = "unverified"
        elif not row["text"].strip():
            missing[qid] = "empty"
        else:
            texts[qid] = row["text"]
    if not seen:
        raise RecipematchError(f"{path}: no query has variant {variant!r}")
    config = raw.get("config") if isinstance(raw.get("config"), dict) else {}
    return texts, missing, config


def regenerate(corpus: Mapping[str, Mapping], queries: Mapping[str, str], golds: Mapping[str, list[str]],
               new_texts: Mapping[str, str], *, missing: str = "error", reasons: Mapping[str, str] | None = None,
               query_meta: Mapping[str, Mapping] | None = None, where: str = "regen") -> Regenerated:
    """Replace each query's gold text with its regenerated one (see the module docstring).

    Args:
        corpus: doc id → corpus row (``text``, optional ``title``); not modified.
        queries: query id → text: the queries to keep (the benchmark's scored queries).
        golds: query id → its gold doc ids (positive qrels under the set's rule); exactly one
            gold per query.
        new_texts: query id → regenerated gold text.
        missing: ``"error"`` or ``"drop"``.
        reasons: query id → why it has no regenerated text (reported with the drop).
        query_meta: query id → metadata to keep in the version's queries file.
        where: names the entry in errors.

    Raises:
        RecipematchError: a query with no gold or with several, a gold shared by two queries, a
            regenerated text that is empty, or (``missing="error"``) a query without one; the
            message gives how many and the first few ids with their reasons. Two queries given
            the same regenerated text keep a gold each and are counted
            (``queries_sharing_a_new_gold_text``).
    """
    reasons = dict(reasons or {})
    gold_of: dict[str, str] = {}
    for q in queries:
        gs = list(golds.get(q, ()))
        if len(gs) != 1:
            raise RecipematchError(f"{where}: query {q!r} has {len(gs)} golds; a regenerated version replaces "
                                   "exactly one gold per query")
        g = gs[0]
        if g not in corpus:
            raise RecipematchError(f"{where}: query {q!r}'s gold {g!r} is not in the corpus")
        if g in gold_of.values():
            other = next(k for k, v in gold_of.items() if v == g)
            raise RecipematchError(f"{where}: gold {g!r} belongs to queries {other!r} and {q!r}; its one text "
                                   "cannot be two rewrites")
        gold_of[q] = g
    lacking = [q for q in queries if not (new_texts.get(q) or "").strip()]
    for q in lacking:
        reasons.setdefault(q, "empty" if q in new_texts else "not_regenerated")
    if lacking and missing == "error":
        first = ", ".join(f"{q} ({reasons[q]})" for q in lacking[:5])
        raise RecipematchError(f"{where}: {len(lacking)} of {len(queries)} queries got no regenerated gold "
                               f"(first: {first}); set missing: drop to leave them out, or regenerate them")
    keep = [q for q in queries if q not in set(lacking)]
    # two queries given one new gold text (their source problems are themselves duplicates: the
    # sample's 01op and 01or are one problem printed twice) keep one gold each; counted, as each
    # query's rank then ties with the other's gold
    by_text: dict[str, int] = {}
    for q in keep:
        by_text[new_texts[q].strip()] = by_text.get(new_texts[q].strip(), 0) + 1
    sharing = sum(n for n in by_text.values() if n > 1)
    replaced = {gold_of[q]: new_texts[q] for q in keep}
    new_stripped = {t.strip() for t in replaced.values()}
    out_corpus: dict[str, dict] = {}
    removed = []
    for d, row in corpus.items():
        if d in replaced:
            out_corpus[d] = {**row, "text": replaced[d]}
        elif str(row.get("text", "")).strip() in new_stripped:
            removed.append(d)
        else:
            out_corpus[d] = dict(row)
    unchanged = sum(1 for q in keep if str(corpus[gold_of[q]].get("text", "")).strip() == new_texts[q].strip())
    counts = {"queries": len(queries), "kept": len(keep), "dropped": len(lacking),
              "dropped_by_reason": {r: sum(1 for q in lacking if reasons[q] == r) for r in sorted({reasons[q] for q in lacking})},
              "golds_replaced": len(replaced), "golds_unchanged_text": unchanged,
              "corpus_in": len(corpus), "corpus_out": len(out_corpus), "duplicates_of_new_golds_removed": len(removed),
              "queries_sharing_a_new_gold_text": sharing}
    meta = {q: dict((query_meta or {}).get(q, {})) for q in keep}
    return Regenerated(corpus=out_corpus, queries={q: queries[q] for q in keep},
                       qrels={q: {gold_of[q]: 1} for q in keep}, query_meta=meta, counts=counts,
                       dropped=[{"query_id": q, "reason": reasons[q]} for q in lacking])
