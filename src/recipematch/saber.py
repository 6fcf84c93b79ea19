"""SABER-Math's labelling: how that benchmark turns a problem corpus into graded qrels without
expert annotation (SABER-Math, Sections 3.2-3.5 and Appendix B), as a library a benchmark
builder can run beside the audit. The recipe-matching paper scores SABER-Math as an external
benchmark (its Section 6); this module rebuilds the labels, not the benchmark's data.

The steps, each a function here with its constants as arguments:

1. **Topic similarity** over an ontology tree (Section 3.2): each problem carries a set of
   topics (its most specific assigned nodes). A node's information content is
   ``IC(t) = -log(c(t) / N)``, ``c(t)`` the number of problems with a topic at ``t`` or below it
   and ``N`` the number of problems with any topic; two topics' Lin similarity is
   ``2 IC(lca) / (IC(t) + IC(u))`` (1.0 when both ICs are 0, i.e. both are the root's
   count); two topic sets match by the best-match average
   ``(sum_t max_u sim(t, u) + sum_u max_t sim(t, u)) / (|Tx| + |Ty|)``.
2. **Summary similarity** (Section 3.3, Appendix B.1): the Jaccard similarity of two core-idea
   summaries' token sets, tokens the lowercased alphanumeric runs less scikit-learn's English
   stop words and a caller's extra list (the paper's mathematics stop words are in its
   supplementary material, not its text).
3. **Candidate selection** (Section 3.4): a document is topic-relevant when its topic
   similarity exceeds ``tau_topic`` (the paper: 0.858) and summary-relevant when its summary
   similarity exceeds ``tau_summ`` (0.211); a query needs ``K`` (50) documents in each of
   topic-only, summary-only and both, and ``K`` are drawn uniformly from each.
4. **The Swiss tournament** (Section 3.5, Appendix B.3): round 1 pairs the candidates
   uniformly at random; every later round shuffles them, sorts them by win count (ascending,
   stable) and, from the lowest unpaired one, pairs each with the unpaired candidate of the
   closest win count it has not met (the first such in that order); one left without an
   unmet opponent sits the round out. ``R`` rounds (the paper: 20).
5. **Bradley-Terry** (Section 3.5): strengths fitted to the judgments by the ``choix``
   library (its iterative Luce spectral ranking, with a small L2 ``alpha`` so a candidate that
   won or lost every game keeps a finite score), rescaled linearly to ``[0, 5]``.
6. **nDCG@10 with exponential gain** on those real-valued grades (SABER-Math's metric:
   gain ``2**g - 1``, discount ``log2(rank + 1)``). trec_eval takes integer grades only, so
   this one measure is computed here.

Failures are records, never silent zeros: a judgment the judge cannot give (an answer
outside ``A`` / ``B``, an error) or two orders that disagree (``both_orders``) is a
:class:`Judgment` with its ``reason`` and no winner, counted in the result and left out of
the fit; an ontology with a cycle, a node whose parent is not a node, or two roots is
refused in one line naming the node.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from recipematch.errors import RecipematchError, short_repr

__all__ = ["Ontology", "information_content", "lin_similarity", "topic_similarity", "SimilarityIndex", "summary_tokens",
           "jaccard", "select_candidates", "stratified_draw", "swiss_pairings", "Judgment", "Tournament", "run_tournament", "SwissTournament", "combine_orders",
           "bradley_terry", "rescale", "ndcg_exponential", "JudgeFailure", "SELECTION_CATEGORIES", "TAU_SUMM"]

#: Section 3.4's three candidate categories, in the order they are drawn
SELECTION_CATEGORIES = ("topic_only", "summary_only", "both")
#: Section 3.4 (Appendix B.2): a pair is summary-relevant when its summaries' Jaccard exceeds this
TAU_SUMM = 0.211
_TOKEN = re.compile(r"[a-z0-9]+")


class JudgeFailure(Exception):
    """Raised by a judge callable that cannot give a verdict; its message is the reason."""


@dataclass(frozen=True)
class Ontology:
    """A topic tree: ``parent[node]`` is the node's parent, ``None`` for the one root.

    Build it with :meth:`from_parents`, which checks it is a tree.
    """

    parent: Mapping[str, str | None]
    _chain: Mapping[str, tuple[str, ...]] = field(repr=False, compare=False)
    _kids: Mapping[str, tuple[str, ...]] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_parents(cls, parents: Mapping[str, str | None]) -> Ontology:
        """A tree from a ``node -> parent`` map (``None``: the root).

        Raises:
            RecipematchError: an empty map, a node that is not a non-empty string, a parent
                that is not a node, no root or two roots, or a cycle (one line naming a node on it).
        """
        if not parents:
            raise RecipematchError("ontology: no nodes")
        for node, par in parents.items():
            if not isinstance(node, str) or not node.strip():
                raise RecipematchError(f"ontology: a node must be a non-empty string, got {short_repr(node, 40)}")
            if par is not None and (not isinstance(par, str) or par not in parents):
                raise RecipematchError(f"ontology: node {node!r} names parent {short_repr(par, 60)}, which is not a node")
        roots = [n for n, par in parents.items() if par is None]
        chains: dict[str, tuple[str, ...]] = {}
        for node in parents:
            path: list[str] = []
            seen: set[str] = set()
            cur: str | None = node
            while cur is not None and cur not in chains:
                if cur in seen:
                    raise RecipematchError(f"ontology: cycle through node {cur!r}")
                seen.add(cur)
                path.append(cur)
                cur = parents[cur]
            tail = chains[cur] if cur is not None else ()
            for i in range(len(path) - 1, -1, -1):
                tail = (path[i], *tail)
                chains[path[i]] = tail
        if len(roots) != 1:
            raise RecipematchError(f"ontology: a tree has one root (a node whose parent is null), found {len(roots)}"
                                   + (f": {sorted(roots)[:5]}" if roots else ""))
        kids: dict[str, list[str]] = {}
        for node, par in parents.items():
            if par is not None:
                kids.setdefault(par, []).append(node)
        return cls(dict(parents), chains, {n: tuple(sorted(k)) for n, k in kids.items()})

    def ancestors(self, node: str) -> tuple[str, ...]:
        """``node`` and its ancestors, the root last. Raises ``KeyError`` for an unknown node."""
        return self._chain[node]

    def lca(self, a: str, b: str) -> str:
        """The lowest common ancestor of two nodes."""
        up = set(self._chain[b])
        return next(n for n in self._chain[a] if n in up)

    @property
    def root(self) -> str:
        """The one node whose parent is ``None``."""
        return next(n for n, par in self.parent.items() if par is None)

    def children(self, node: str) -> list[str]:
        """``node``'s children, sorted. Raises ``KeyError`` for an unknown node."""
        if node not in self.parent:
            raise KeyError(node)
        return list(self._kids.get(node, ()))

    def domains(self, topics: Iterable[str]) -> list[str]:
        """The top-level topics (children of the root) above ``topics``, sorted: the strata of
        SABER-Math's query selection (Section 3.4: Algebra, Geometry, Number Theory,
        Combinatorics, Calculus and Analysis)."""
        return sorted({self._chain[t][-2] for t in topics if len(self._chain[t]) >= 2})


def _check_topics(ont: Ontology, topics: Mapping[str, Iterable[str]]) -> None:
    for pid, ts in topics.items():
        bad = [t for t in ts if not isinstance(t, str) or t not in ont.parent]
        if bad:
            raise RecipematchError(f"problem {short_repr(pid, 60)}: topics {bad[:3]} are not ontology nodes")


def information_content(ont: Ontology, topics: Mapping[str, Iterable[str]]) -> dict[str, float]:
    """``IC(t) = -log(c(t) / N)`` for every node (natural log; module docstring).

    Args:
        topics: ``problem id -> its topics`` (nodes of ``ont``); problems with none are not in ``N``.

    Returns:
        ``node -> IC`` in ``[0, inf]``; ``inf`` for a node no problem reaches (never one a
        problem carries).

    Raises:
        RecipematchError: a topic that is not a node, or no problem with a topic.
    """
    _check_topics(ont, topics)
    counts = dict.fromkeys(ont.parent, 0)
    n = 0
    for ts in topics.values():
        reach = {a for t in ts for a in ont.ancestors(t)}
        if reach:
            n += 1
            for a in reach:
                counts[a] += 1
    if n == 0:
        raise RecipematchError("information content needs at least one problem with a topic")
    return {t: (-math.log(c / n) if c else math.inf) for t, c in counts.items()}


def lin_similarity(ont: Ontology, ic: Mapping[str, float], a: str, b: str) -> float:
    """Lin's similarity ``2 IC(lca) / (IC(a) + IC(b))`` in ``[0, 1]`` (1.0 when both ICs are 0)."""
    den = ic[a] + ic[b]
    if den == 0:
        return 1.0
    if math.isinf(den):
        raise RecipematchError(f"topics {a!r}, {b!r}: a topic no problem carries has no information content")
    return 2.0 * ic[ont.lca(a, b)] / den


def topic_similarity(ont: Ontology, ic: Mapping[str, float], tx: Sequence[str], ty: Sequence[str]) -> float:
    """The best-match average of two topic sets (module docstring), in ``[0, 1]``; 0.0 when
    either set is empty (no evidence of relevance)."""
    tx, ty = list(dict.fromkeys(tx)), list(dict.fromkeys(ty))
    if not tx or not ty:
        return 0.0
    sim = np.array([[lin_similarity(ont, ic, t, u) for u in ty] for t in tx], dtype=np.float64)
    return float((sim.max(axis=1).sum() + sim.max(axis=0).sum()) / (len(tx) + len(ty)))


class SimilarityIndex:
    """Both candidate signals of Sections 3.2-3.3 for one corpus, vectorised: a query's topic
    best-match average and summary Jaccard against every document at once, with the same
    values as :func:`topic_similarity` and :func:`jaccard` (the per-pair reference).

    The Lin similarities among the nodes problems carry are one ``(m, m)`` float64 matrix
    (``m`` distinct carried topics; 10,000 take 800 MB); a document's topics are a segment of
    one flat index array, so the best-match average is two segment reductions
    (``numpy.maximum.reduceat`` / ``add.reduceat``); summaries are a binary sparse
    ``(n_docs, vocabulary)`` matrix, so the intersections are one sparse product.

    Args:
        ont, ic: the tree and :func:`information_content` over it.
        doc_ids: the corpus, in the order of every returned row.
        topics: ``doc id -> its topics``; a document with none has topic similarity 0.
        tokens: ``doc id -> its summary tokens`` (:func:`summary_tokens`); a document with no
            entry has summary similarity 0.

    Raises:
        RecipematchError: a topic that is not a node or that no problem carries (infinite IC).
    """

    def __init__(self, ont: Ontology, ic: Mapping[str, float], doc_ids: Sequence[str],
                 topics: Mapping[str, Sequence[str]], tokens: Mapping[str, frozenset[str]]) -> None:
        from scipy import sparse

        self.doc_ids = list(doc_ids)
        self._pos = {d: i for i, d in enumerate(self.doc_ids)}
        sets = {d: list(dict.fromkeys(topics.get(d, []))) for d in self.doc_ids}
        _check_topics(ont, sets)
        nodes = sorted({t for ts in sets.values() for t in ts})
        bad = [t for t in nodes if math.isinf(ic[t])][:3]
        if bad:
            raise RecipematchError(f"topics {bad}: a topic no problem carries has no information content")
        self._node = {t: i for i, t in enumerate(nodes)}
        self._lin = self._lin_matrix(ont, ic, nodes)
        with_topics = [i for i, d in enumerate(self.doc_ids) if sets[d]]
        self._with = np.asarray(with_topics, dtype=np.int64)
        self._flat = np.asarray([self._node[t] for i in with_topics for t in sets[self.doc_ids[i]]], dtype=np.int64)
        sizes = np.asarray([len(sets[self.doc_ids[i]]) for i in with_topics], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if sizes.size else sizes
        self._sizes = sizes.astype(np.float64)
        self._sets = sets
        vocab: dict[str, int] = {}
        rows, cols = [], []
        self._has_summary = np.zeros(len(self.doc_ids), dtype=bool)
        for i, d in enumerate(self.doc_ids):
            if d in tokens:
                self._has_summary[i] = True
                for tok in sorted(tokens[d]):
                    rows.append(i)
                    cols.append(vocab.setdefault(tok, len(vocab)))
        self._vocab = vocab
        self._bags = sparse.csr_matrix((np.ones(len(rows), dtype=np.float64), (rows, cols)),
                                       shape=(len(self.doc_ids), max(len(vocab), 1)))
        self._bag_sizes = np.asarray(self._bags.sum(axis=1)).ravel()

    @staticmethod
    def _lin_matrix(ont: Ontology, ic: Mapping[str, float], nodes: list[str]) -> np.ndarray:
        if not nodes:
            return np.zeros((0, 0), dtype=np.float64)
        chains = [ont.ancestors(t)[::-1] for t in nodes]  # root first
        depth = max(len(c) for c in chains)
        every = sorted({a for c in chains for a in c})
        gid = {a: i for i, a in enumerate(every)}
        anc = np.full((len(nodes), depth), -1, dtype=np.int64)
        for i, c in enumerate(chains):
            anc[i, : len(c)] = [gid[a] for a in c]
        icv = np.asarray([ic[a] for a in every], dtype=np.float64)
        own = icv[anc[np.arange(len(nodes)), [len(c) - 1 for c in chains]]]
        out = np.empty((len(nodes), len(nodes)), dtype=np.float64)
        step = max(1, min(512, 2**24 // (len(nodes) * depth)))  # about 16M booleans per block, whatever the depth
        for lo in range(0, len(nodes), step):
            block = anc[lo: lo + step]
            same = np.cumprod((block[:, None, :] == anc[None, :, :]) & (block[:, None, :] >= 0), axis=2)
            shared = same.sum(axis=2)  # >= 1: every chain starts at the root
            lca = block[np.arange(len(block))[:, None], shared - 1]
            den = own[lo: lo + step, None] + own[None, :]
            with np.errstate(invalid="ignore", divide="ignore"):
                out[lo: lo + step] = np.where(den == 0, 1.0, 2.0 * icv[lca] / np.where(den == 0, 1.0, den))
        return out

    def topic_row(self, query_topics: Sequence[str]) -> np.ndarray:
        """``(n_docs,)`` best-match averages of ``query_topics`` against every document, in
        ``[0, 1]``; all 0 for a query with no topics. Raises ``KeyError`` for a topic no
        document of the index carries."""
        tx = [self._node[t] for t in dict.fromkeys(query_topics)]
        out = np.zeros(len(self.doc_ids), dtype=np.float64)
        if not tx or not self._with.size:
            return out
        sim = self._lin[np.ix_(tx, self._flat)]  # (|Tx|, all document topics)
        term_t = np.maximum.reduceat(sim, self._starts, axis=1).sum(axis=0)  # sum_t max_u, per document
        term_u = np.add.reduceat(sim.max(axis=0), self._starts)  # sum_u max_t, per document
        out[self._with] = (term_t + term_u) / (len(tx) + self._sizes)
        return out

    def topic_row_of(self, doc_id: str) -> np.ndarray:
        """:meth:`topic_row` for a document of the index, by id."""
        return self.topic_row(self._sets[doc_id])

    def summary_row(self, doc_id: str) -> np.ndarray:
        """``(n_docs,)`` summary Jaccard of ``doc_id``'s summary against every document, in
        ``[0, 1]``; all 0 when it has no summary. Raises ``KeyError`` for an unknown id."""
        i = self._pos[doc_id]
        out = np.zeros(len(self.doc_ids), dtype=np.float64)
        if not self._has_summary[i]:
            return out
        inter = np.asarray((self._bags @ self._bags[i].T).todense()).ravel()
        union = self._bag_sizes + self._bag_sizes[i] - inter
        ok = self._has_summary & (union > 0)
        out[ok] = inter[ok] / union[ok]
        return out


def summary_tokens(text: str, extra_stop_words: Iterable[str] = ()) -> frozenset[str]:
    """A summary's token set: lowercased ``[a-z0-9]+`` runs less scikit-learn's English stop
    words and ``extra_stop_words`` (Appendix B.1). Raises ``TypeError`` for a non-string."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    if not isinstance(text, str):
        raise TypeError(f"a summary must be a string, got {type(text).__name__}")
    stop = ENGLISH_STOP_WORDS | {w.lower() for w in extra_stop_words}
    return frozenset(t for t in _TOKEN.findall(text.lower()) if t not in stop)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """``|a & b| / |a | b|`` in ``[0, 1]``; 0.0 when both are empty."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def select_candidates(doc_ids: Sequence[str], topic_sim: np.ndarray, summ_sim: np.ndarray, *, tau_topic: float,
                      tau_summ: float, k: int, rng: np.random.Generator) -> dict[str, list[str]]:
    """One query's candidates (Section 3.4): ``k`` documents drawn uniformly without
    replacement from each of topic-only, summary-only and both.

    Args:
        doc_ids: the query's possible documents (the query itself left out by the caller).
        topic_sim, summ_sim: ``(len(doc_ids),)`` similarities to the query.
        tau_topic, tau_summ: the strict thresholds (the paper: 0.858, 0.211).
        k: documents per category (the paper: 50).
        rng: the selection's generator (seeded from params by the caller).

    Returns:
        ``{category: doc ids}`` per :data:`SELECTION_CATEGORIES`, each sorted by id.

    Raises:
        RecipematchError: a category with fewer than ``k`` documents (naming every count),
            or arrays that do not match ``doc_ids``.
    """
    ts, ss = np.asarray(topic_sim, dtype=np.float64), np.asarray(summ_sim, dtype=np.float64)
    if ts.shape != (len(doc_ids),) or ss.shape != (len(doc_ids),):
        raise RecipematchError(f"similarities of shape {ts.shape}, {ss.shape} for {len(doc_ids)} documents")
    topic, summ = ts > tau_topic, ss > tau_summ
    masks = {"topic_only": topic & ~summ, "summary_only": summ & ~topic, "both": topic & summ}
    counts = {c: int(m.sum()) for c, m in masks.items()}
    short = {c: n for c, n in counts.items() if n < k}
    if short:
        raise RecipematchError(f"fewer than K={k} candidates in {sorted(short)} (counts {counts})")
    ids = np.asarray(doc_ids, dtype=object)
    out = {}
    for c in SELECTION_CATEGORIES:
        pool = np.sort(ids[masks[c]])
        out[c] = sorted(pool[rng.choice(len(pool), size=k, replace=False)].tolist())
    return out


def stratified_draw(eligible: Sequence[str], strata: Mapping[str, Sequence[str]], n: int,
                    rng: np.random.Generator) -> list[str]:
    """``n`` queries spread evenly over strata (Section 3.4: the 1,000 queries span the five
    top-level topics uniformly).

    Each stratum's eligible queries are shuffled (from their sorted order, by ``rng``); the
    strata, in sorted order, then take turns adding their next query not yet drawn, until
    ``n`` are drawn or none is left. A stratum that runs out leaves its turns to the others,
    and a query in several strata counts for the first that draws it.

    Args:
        eligible: the queries that have their K candidates in every category.
        strata: ``query -> its strata`` (its top-level topics; ``[]`` puts it in the stratum
            ``""``).
        n: queries to draw, >= 0 (all eligible when ``n`` >= their number).
        rng: the selection's generator.

    Returns:
        The drawn queries, sorted.

    Raises:
        ValueError: ``n`` is not an integer >= 0.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    members: dict[str, list[str]] = {}
    for q in sorted(eligible):
        for s_ in (strata.get(q) or [""]):
            members.setdefault(s_, []).append(q)
    queues = {s_: [qs[i] for i in rng.permutation(len(qs))] for s_, qs in sorted(members.items())}
    drawn: list[str] = []
    taken: set[str] = set()
    while len(drawn) < n and any(queues.values()):
        for s_ in sorted(queues):
            queue = queues[s_]
            while queue and queue[0] in taken:
                queue.pop(0)
            if queue and len(drawn) < n:
                q = queue.pop(0)
                taken.add(q)
                drawn.append(q)
    return sorted(drawn)


def swiss_pairings(wins: np.ndarray, met: set[frozenset[int]], rng: np.random.Generator
                   ) -> tuple[list[tuple[int, int]], list[int]]:
    """One round's pairs (Appendix B.3, Algorithm 1; module docstring).

    Args:
        wins: ``(n,)`` win counts so far (all 0 before round 1, which makes it a uniformly
            random pairing).
        met: pairs already judged, as ``frozenset({i, j})``.
        rng: the tournament's generator.

    Returns:
        ``(pairs, unpaired)``: ``(i, j)`` with ``i`` the lower in the round's order, and the
        candidates sitting the round out.
    """
    n = len(wins)
    order = rng.permutation(n)
    order = order[np.argsort(np.asarray(wins)[order], kind="stable")].tolist()
    pos = {c: i for i, c in enumerate(order)}
    free = list(order)
    pairs, unpaired = [], []
    while free:
        a = free.pop(0)
        options = [b for b in free if frozenset((a, b)) not in met]
        if not options:
            unpaired.append(a)
            continue
        b = min(options, key=lambda c: (abs(wins[c] - wins[a]), pos[c]))
        free.remove(b)
        pairs.append((a, b))
    return pairs, unpaired


@dataclass(frozen=True)
class Judgment:
    """One pairwise judgment: ``first`` and ``second`` as shown, ``winner`` (one of them) or
    ``None`` with ``reason`` when it failed."""

    round: int
    first: str
    second: str
    winner: str | None
    reason: str = ""


@dataclass
class Tournament:
    """A tournament's record: every judgment (failures included), per-round sit-outs."""

    items: list[str]
    judgments: list[Judgment]
    unpaired: list[list[str]]

    @property
    def failures(self) -> dict[str, int]:
        """Failed judgments counted by reason."""
        out: dict[str, int] = {}
        for j in self.judgments:
            if j.winner is None:
                out[j.reason] = out.get(j.reason, 0) + 1
        return out

    def comparisons(self) -> list[tuple[int, int]]:
        """``(winner index, loser index)`` of every valid judgment (what Bradley-Terry fits)."""
        idx = {d: i for i, d in enumerate(self.items)}
        return [(idx[j.winner], idx[j.second if j.winner == j.first else j.first])
                for j in self.judgments if j.winner is not None]


class SwissTournament:
    """A Swiss tournament driven round by round (so a caller can batch one round's judgments
    of many queries into one set of LLM calls): :meth:`next_round` gives the pairs to judge,
    :meth:`record` takes each verdict; :meth:`result` is the :class:`Tournament`.

    Args:
        items: distinct candidate ids (at least 2).
        rounds: R >= 1 (the paper: 20).
        seed: the tournament's seed (one per query, from params).

    Raises:
        ValueError: fewer than 2 items, duplicates, or ``rounds`` < 1.
    """

    def __init__(self, items: Sequence[str], *, rounds: int, seed: int) -> None:
        self.items = list(items)
        if len(self.items) < 2 or len(set(self.items)) != len(self.items) or rounds < 1:
            raise ValueError(f"a tournament needs >= 2 distinct items and rounds >= 1, got {len(self.items)} items, "
                             f"rounds={rounds}")
        self.rounds = rounds
        self.round = 0
        self._rng = np.random.default_rng(seed)
        self._idx = {d: i for i, d in enumerate(self.items)}
        self._wins = np.zeros(len(self.items), dtype=np.int64)
        self._met: set[frozenset[int]] = set()
        self._open: set[frozenset[int]] = set()
        self.judgments: list[Judgment] = []
        self.unpaired: list[list[str]] = []

    def next_round(self) -> list[tuple[str, str]]:
        """The next round's pairs ``(first, second)``; ``[]`` once R rounds are played or no
        unmet pair is left. Every pair of the previous round must be recorded first."""
        if self._open:
            raise RuntimeError(f"{len(self._open)} pairs of round {self.round} are not recorded yet")
        if self.round >= self.rounds:
            return []
        pairs, unpaired = swiss_pairings(self._wins, self._met, self._rng)
        if not pairs:
            return []
        self.round += 1
        self.unpaired.append([self.items[i] for i in unpaired])
        for i, j in pairs:
            self._met.add(frozenset((i, j)))
            self._open.add(frozenset((i, j)))
        return [(self.items[i], self.items[j]) for i, j in pairs]

    def record(self, first: str, second: str, winner: str | None, reason: str = "") -> None:
        """One verdict of this round: ``winner`` one of the two, or ``None`` with ``reason``."""
        key = frozenset((self._idx[first], self._idx[second]))
        if key not in self._open:
            raise ValueError(f"({first!r}, {second!r}) is not an open pair of round {self.round}")
        if winner is not None and winner not in (first, second):
            raise ValueError(f"winner {winner!r} is neither {first!r} nor {second!r}")
        self._open.discard(key)
        self.judgments.append(Judgment(self.round, first, second, winner, reason if winner is None else ""))
        if winner is not None:
            self._wins[self._idx[winner]] += 1

    def result(self) -> Tournament:
        return Tournament(self.items, list(self.judgments), [list(u) for u in self.unpaired])


def _verdict(judge: Callable[[str, str], str], a: str, b: str) -> tuple[str | None, str]:
    try:
        ans = judge(a, b)
    except JudgeFailure as e:
        return None, f"judge failed: {e}"
    if ans == "A":
        return a, ""
    if ans == "B":
        return b, ""
    return None, f"answer outside A/B: {short_repr(ans, 40)}"


def combine_orders(first: str, second: str, v1: str | None, why1: str, v2: str | None, why2: str
                   ) -> tuple[str | None, str]:
    """The verdict of a pair judged in both orders (``v1`` shown as (first, second), ``v2`` as
    (second, first)): the shared winner, or ``None`` with the first failure's reason, or
    ``inconsistent`` when the two orders disagree."""
    if v1 is None:
        return None, why1
    if v2 is None:
        return None, why2
    if v1 != v2:
        return None, "inconsistent: the two orders disagree"
    return v1, ""


def run_tournament(items: Sequence[str], judge: Callable[[str, str], str], *, rounds: int, seed: int,
                   both_orders: bool = False) -> Tournament:
    """A Swiss tournament of ``rounds`` rounds over one query's candidates, judged by a callable.

    Args:
        items: distinct candidate ids (at least 2).
        judge: ``judge(first, second) -> "A" | "B"``, the more relevant of the two as shown;
            raises :class:`JudgeFailure` when it cannot say.
        rounds: R >= 1 (the paper: 20); rounds stop early when no pair is left unmet.
        seed: the tournament's seed (one per query, from params).
        both_orders: judge each pair in both orders; a pair whose two verdicts disagree is a
            failure (``inconsistent``) with no winner (position-bias control; the paper
            judges one order).

    Returns:
        :class:`Tournament`; a failed pair counts as met (it is not asked again).

    Raises:
        ValueError: fewer than 2 items, duplicates, or ``rounds`` < 1.
    """
    t = SwissTournament(items, rounds=rounds, seed=seed)
    while pairs := t.next_round():
        for a, b in pairs:
            w, why = _verdict(judge, a, b)
            if both_orders:
                w, why = combine_orders(a, b, w, why, *_verdict(judge, b, a))
            t.record(a, b, w, why)
    return t.result()


def bradley_terry(n_items: int, comparisons: Sequence[tuple[int, int]], *, alpha: float) -> np.ndarray:
    """Bradley-Terry log-strengths ``(n_items,)`` float64 (mean 0) fitted by ``choix``'s
    iterative Luce spectral ranking with L2 ``alpha`` > 0; an item in no comparison stays at 0.

    Raises:
        ValueError: ``alpha`` <= 0 or an index outside ``[0, n_items)``.
        RuntimeError: choix's iteration did not converge in 1,000 steps (``alpha`` too small
            for the data: raise it).
    """
    import choix

    if not alpha > 0:
        raise ValueError(f"alpha must be > 0 (a candidate that won every game has no finite MLE), got {alpha}")
    data = [(int(w), int(lo)) for w, lo in comparisons]
    if any(not (0 <= x < n_items) for pair in data for x in pair):
        raise ValueError(f"a comparison names an item outside [0, {n_items})")
    if not data:
        return np.zeros(n_items, dtype=np.float64)
    return np.asarray(choix.ilsr_pairwise(n_items, data, alpha=alpha, max_iter=1000), dtype=np.float64)


def rescale(scores: np.ndarray, lo: float = 0.0, hi: float = 5.0) -> np.ndarray:
    """Linear map of ``scores`` onto ``[lo, hi]`` (Section 3.5: [0, 5]); all equal -> all ``lo``
    (no evidence that any candidate is more relevant)."""
    s = np.asarray(scores, dtype=np.float64)
    span = s.max() - s.min() if s.size else 0.0
    if span == 0:
        return np.full(s.shape, lo, dtype=np.float64)
    return lo + (s - s.min()) * (hi - lo) / span


def ndcg_exponential(grades: Mapping[str, float], ranked: Sequence[str], k: int = 10) -> float:
    """nDCG@k with gain ``2**g - 1`` and discount ``log2(rank + 1)`` over real-valued grades.

    Args:
        grades: the query's judged documents and grades (>= 0); unjudged documents gain 0.
        ranked: the system's order, best first (documents may repeat only once; a repeat is an error).
        k: the cut-off, >= 1.

    Returns:
        A value in ``[0, 1]``; 0.0 when no judged document has a grade above 0.

    Raises:
        ValueError: a negative or non-finite grade, a repeated document, or ``k`` < 1.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    g = np.array(list(grades.values()), dtype=np.float64)
    if g.size and (not np.isfinite(g).all() or (g < 0).any()):
        raise ValueError("grades must be finite and >= 0")
    if len(set(ranked)) != len(ranked):
        raise ValueError("a ranking lists a document twice")
    disc = 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))
    got = np.array([grades.get(d, 0.0) for d in list(ranked)[:k]], dtype=np.float64)
    dcg = float(((2.0 ** got - 1.0) * disc[: len(got)]).sum())
    ideal = np.sort(g)[::-1][:k]
    idcg = float(((2.0 ** ideal - 1.0) * disc[: len(ideal)]).sum())
    return dcg / idcg if idcg > 0 else 0.0
