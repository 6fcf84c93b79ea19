"""SABER-Math's topic assignment (SABER-Math, Section 3.2.2): each problem's topics found by a
top-down traversal of the ontology tree with an LLM scoring one node and its children at a time.

At a visited node the judge scores the node itself and each of its children for relevance to
the problem (one JSON object ``{tag: score in [0, 1]}``). The scores are normalised by the
largest of them; a child whose normalised score exceeds ``tau`` (SABER-Math: 0.85) is kept,
and its own children are visited next. Because the parent is scored beside its children, the
walk stops where the children are much less relevant than the parent. A problem's topics are
its most specific kept nodes (a kept node that is an ancestor of another kept node is dropped).

:class:`TopicTraversal` drives the walk level by level for many problems, so a caller can send
one level's calls of every problem to the LLM together. Failures are records, never silent:
an answer outside the schema stops the walk below that node and is kept with its reason; a
problem that keeps no node below the root gets no topics and a record saying so.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from recipematch.errors import RecipematchError, short_repr
from recipematch.llm.answer_json import load_answer_object
from recipematch.saber import Ontology

__all__ = ["TAU_ASSIGN", "parse_topic_scores", "kept_children", "most_specific", "TopicTraversal"]

#: SABER-Math Section 3.2.2: the normalised-score threshold a child must exceed to be kept
TAU_ASSIGN = 0.85


def parse_topic_scores(raw: str | None, tags: Sequence[str]) -> tuple[dict[str, float] | None, str]:
    """The scores in one answer: a JSON object (bare or in a fenced block) with exactly the
    offered ``tags`` as keys and numbers in ``[0, 1]`` as values.

    Returns:
        ``(scores, "")``, or ``(None, reason)`` for an answer outside that schema (the JSON
        reasons of :func:`recipematch.llm.answer_json.load_answer_object`: no text, not JSON, a
        duplicate key, not an object; a tag missing or not offered, a value that is not a
        number in [0, 1]).
    """
    obj, why = load_answer_object(raw)
    if obj is None:
        return None, why
    missing = [t for t in tags if t not in obj]
    if missing:
        return None, f"schema: tags not scored: {missing[:3]}"
    extra = [k for k in obj if k not in set(tags)]
    if extra:
        return None, f"schema: tags not offered: {[str(k)[:40] for k in extra[:3]]}"
    out = {}
    for t in tags:
        v = obj[t]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0.0 <= v <= 1.0:
            return None, f"schema: the score of {t!r} must be a number in [0, 1]"
        out[t] = float(v)
    return out, ""


def kept_children(scores: dict[str, float], node: str, children: Sequence[str], tau: float = TAU_ASSIGN
                  ) -> list[str]:
    """The children whose score, divided by the largest score among ``node`` and ``children``,
    exceeds ``tau`` (sorted). None when every score is 0."""
    top = max(scores[t] for t in (node, *children))
    if top <= 0:
        return []
    return sorted(c for c in children if scores[c] / top > tau)


def most_specific(ont: Ontology, nodes: Sequence[str]) -> list[str]:
    """``nodes`` less every node that is an ancestor of another of them, sorted."""
    kept = set(nodes)
    above = {a for n in kept for a in ont.ancestors(n)[1:]}
    return sorted(kept - above)


@dataclass
class TopicTraversal:
    """The top-down walk for many problems at once (module docstring).

    Use: ``while calls := t.next_calls(): ... t.record(problem, node, scores, reason)``; then
    :meth:`topics` and :attr:`failures`.

    Args:
        ont: the tree.
        problems: the problem ids to annotate.
        tau: the threshold on normalised scores, in ``[0, 1)`` (SABER-Math: 0.85).
    """

    ont: Ontology
    problems: Sequence[str]
    tau: float = TAU_ASSIGN
    failures: list[dict] = field(default_factory=list)
    calls_made: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.tau < 1.0:
            raise ValueError(f"tau must lie in [0, 1), got {self.tau}")
        for node in self.ont.parent:  # the scorer reads the tags as one comma-separated list
            if "," in node or any(unicodedata.category(c)[0] == "C" for c in node) or node != node.strip():
                raise RecipematchError(f"ontology: node {short_repr(node, 60)} cannot be offered as a tag (a comma, "
                                       "a control character or surrounding space makes the tag list ambiguous)")
        root = self.ont.root
        self._kept: dict[str, list[str]] = {p: [] for p in self.problems}
        self._frontier: dict[str, list[str]] = {p: [root] if self.ont.children(root) else [] for p in self.problems}
        self._open: set[tuple[str, str]] = set()

    def next_calls(self) -> list[tuple[str, str, list[str]]]:
        """The next level's calls: ``(problem, node, tags)`` with ``tags`` the node then its
        children; ``[]`` when every walk has ended. Every call of the previous level must be
        recorded first."""
        if self._open:
            raise RuntimeError(f"{len(self._open)} calls of the previous level are not recorded yet")
        out = []
        for p in self.problems:
            for node in self._frontier[p]:
                out.append((p, node, [node, *self.ont.children(node)]))
                self._open.add((p, node))
            self._frontier[p] = []
        self.calls_made += len(out)
        return out

    def record(self, problem: str, node: str, scores: dict[str, float] | None, reason: str = "") -> None:
        """One call's scores (from :func:`parse_topic_scores`), or ``None`` with the reason it
        failed (the walk stops below ``node`` for this problem)."""
        if (problem, node) not in self._open:
            raise ValueError(f"({problem!r}, {node!r}) is not an open call")
        self._open.discard((problem, node))
        if scores is None:
            self.failures.append({"step": "topics", "_id": problem, "node": node, "reason": reason})
            return
        for child in kept_children(scores, node, self.ont.children(node), self.tau):
            self._kept[problem].append(child)
            if self.ont.children(child):
                self._frontier[problem].append(child)

    def topics(self) -> dict[str, list[str]]:
        """``problem -> its most specific kept topics``; a problem that kept none is left out
        and recorded in :attr:`failures` (``no topic below the root``)."""
        if self._open or any(self._frontier.values()):
            raise RuntimeError("the traversal has not ended")
        out = {}
        for p in self.problems:
            if self._kept[p]:
                out[p] = most_specific(self.ont, self._kept[p])
            elif not any(f["_id"] == p for f in self.failures):
                self.failures.append({"step": "topics", "_id": p, "node": self.ont.root,
                                      "reason": "no topic below the root"})
        return out
