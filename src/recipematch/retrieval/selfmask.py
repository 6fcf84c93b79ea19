"""Which corpus entry is a query's own, to be masked from its ranking (the paper, Section 3:
"a query's own corpus entry is masked").

The paper's sets put every query's row in the corpus under the query's id, so "own entry" and
"entry with the query's id" coincide there. Ordinary BEIR folders (SciFact, NFCorpus) number
queries and documents separately, so an id match there is an unrelated document, sometimes a
gold. The rule is therefore declared, one of :data:`SELF_MASK_RULES`:

- ``id_and_text`` (the default): mask the entry with the query's id only when its text equals
  the query's (its ``text`` field or its embedded ``title + text``), both compared in Unicode
  NFC with zero-width characters removed and whitespace collapsed. An empty query text matches
  nothing. An id match with other text is ranked like any document and counted
  (``n_id_match_not_masked``).
- ``id``: mask the entry with the query's id whatever its text (a set whose own entries were
  re-rendered, e.g. with a title).
- ``none``: mask nothing.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from recipematch.beir import doc_text
from recipematch.errors import RecipematchError, short_repr
from recipematch.rules import SELF_MASK_RULES

__all__ = ["SELF_MASK_RULES", "DEFAULT_SELF_MASK", "OwnEntries", "resolve_rule", "own_entries", "describe_counts",
           "comparable_text", "own_only_gold_error", "check_own_only_golds"]

#: the rule a set gets unless its evaluation declares another (``evaluations.<name>.self_mask``)
DEFAULT_SELF_MASK = SELF_MASK_RULES[0]

_WS = re.compile(r"\s+")
#: zero-width space, non-joiner, joiner, word joiner and byte-order mark: invisible, dropped before comparing
_ZERO_WIDTH = re.compile("[\u200b\u200c\u200d\u2060\ufeff]")


def comparable_text(t: str) -> str:
    """``t`` as texts are compared for self-masking and text twins: Unicode NFC, zero-width
    characters removed, whitespace runs collapsed to one space, ends stripped."""
    return _WS.sub(" ", _ZERO_WIDTH.sub("", unicodedata.normalize("NFC", t))).strip()



def own_only_gold_error(query_ids: Sequence[str], name: str = "") -> RecipematchError:
    """The error for queries whose only gold is their own masked entry (nothing left to find;
    scoring them as misses would be wrong)."""
    head = f"set {name!r}: " if name else ""
    return RecipematchError(
        f"{head}{len(query_ids)} queries have their own masked corpus entry as their only gold "
        f"(e.g. {short_repr(list(query_ids[:3]), 120)}): with it masked there is nothing to find. Fix the qrels, "
        "or declare another self-masking rule (evaluations.<set>.self_mask, or --self-mask: id_and_text masks only "
        "an entry holding the query's own text, none masks nothing)")


def check_own_only_golds(bset) -> None:
    """Refuse a set (before any model loads) where some query's only positive qrel is the
    entry its declared rule masks (:func:`own_only_gold_error`).

    Args:
        bset: a :class:`recipematch.benchmarks_data.BenchmarkSet`.

    Raises:
        RecipematchError: naming the set and up to three such queries.
    """
    ids = list(bset.query_ids)
    doc_ids = list(bset.corpus)
    own = own_entries(ids, [bset.queries[q] for q in ids], doc_ids, [bset.corpus[d] for d in doc_ids], bset.self_mask)
    emptied = [q for q, j in zip(ids, own.index) if j >= 0
               and {d for d, g in (bset.qrels.get(q) or {}).items() if g > 0} == {doc_ids[j]}]
    if emptied:
        raise own_only_gold_error(emptied, bset.name)


def resolve_rule(self_mask: bool | str) -> str:
    """The rule name for a ``self_mask`` argument: ``True`` is :data:`DEFAULT_SELF_MASK`,
    ``False`` is ``"none"``, a rule name is itself.

    Raises:
        ValueError: any other value.
    """
    if self_mask is True:
        return DEFAULT_SELF_MASK
    if self_mask is False:
        return "none"
    if isinstance(self_mask, str) and self_mask in SELF_MASK_RULES:
        return self_mask
    raise ValueError(f"self_mask must be true, false or one of {list(SELF_MASK_RULES)}, got {short_repr(self_mask, 60)}")


@dataclass(frozen=True)
class OwnEntries:
    """The own entry of each query under one rule.

    Attributes:
        index: ``(n_queries,)`` int64 index into the corpus of the entry to mask, -1 for none.
        rule: the rule applied.
        n_masked: queries with an entry masked.
        n_id_match_not_masked: queries whose id names a corpus entry that was not masked
            because its text differs (``id_and_text`` only; 0 otherwise).
    """

    index: np.ndarray
    rule: str
    n_masked: int
    n_id_match_not_masked: int

    def describe(self, name: str = "") -> str:
        """One console line: what was masked and why (:func:`describe_counts`)."""
        return describe_counts(name, self.rule, self.n_masked, self.n_id_match_not_masked)


def describe_counts(name: str, rule: str, n_masked: int, n_id_match_not_masked: int) -> str:
    """One console line for a set's self-masking, from the counts an evaluation summary
    holds (``self_mask_rule``, ``n_queries_self_masked``, ``n_queries_id_match_not_masked``)."""
    head = f"{name}: " if name else ""
    if rule == "none":
        return f"{head}self-mask none: no corpus entry masked"
    line = f"{head}self-mask {rule}: {n_masked} queries' own corpus entries masked"
    if rule == "id_and_text":
        line += (f"; {n_id_match_not_masked} entries with a query's id but other text left in the ranking"
                 if n_id_match_not_masked else "; every id match held the query's text")
    return line


def own_entries(
    query_ids: Sequence[str],
    query_texts: Sequence[str],
    doc_ids: Sequence[str],
    docs: Sequence[Mapping],
    rule: str,
) -> OwnEntries:
    """Each query's own corpus entry under ``rule`` (module docstring).

    Args:
        query_ids, query_texts: aligned, ``n_queries`` each.
        doc_ids: ``n_docs`` unique ids, aligned with ``docs``.
        docs: BEIR corpus rows (``{"title": .., "text": ..}``).
        rule: one of :data:`SELF_MASK_RULES`.

    Raises:
        ValueError: an unknown rule, lengths that disagree, or duplicate doc ids.
    """
    rule = resolve_rule(rule)
    if len(query_ids) != len(query_texts) or len(doc_ids) != len(docs):
        raise ValueError("ids and texts disagree in length")
    pos = {d: i for i, d in enumerate(doc_ids)}
    if len(pos) != len(doc_ids):
        raise ValueError("doc_ids contain duplicates")
    index = np.full(len(query_ids), -1, dtype=np.int64)
    mismatched = 0
    if rule != "none":
        for i, (qid, qt) in enumerate(zip(query_ids, query_texts)):
            j = pos.get(qid, -1)
            if j < 0:
                continue
            if rule == "id":
                index[i] = j
                continue
            row, q = docs[j], comparable_text(qt)
            if q and (q == comparable_text(row.get("text") or "") or q == comparable_text(doc_text(row))):
                index[i] = j
            else:
                mismatched += 1
    return OwnEntries(index, rule, int((index >= 0).sum()), mismatched)
