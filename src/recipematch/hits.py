"""Hit accounting (paper Section 7, "Hit accounting in full"; Appendix B, "The recipe arm's
sole hard-tier hits"): which queries one arm alone ranks a gold within the top k, and what
sets those queries apart from the rest.

For two models a and b scored on the same queries of one set, every query falls in exactly one
of four classes at cut-off k (the paper: k = 1): **a alone** (a ranks a gold within the top k,
b does not), **b alone**, **both**, **neither**. The paper reads a's sole wins on the hard tier
against the rest through per-query features of the query and its gold:

- ``word_jaccard``: Jaccard of the two texts' lowercased ``[a-z0-9]+`` word sets (the paper's
  "word overlap (token Jaccard)"; its AUC 0.639, means 0.21 vs 0.17);
- ``latex_jaccard``: Jaccard of the two texts' sets of math spans (``$…$``, ``$$…$$``,
  ``\\(…\\)``, ``\\[…\\]``, whitespace removed; the paper's "overlap in LaTeX spans", 0.557);
- ``length_ratio``: gold characters / query characters (the paper: 0.481, "the opposite way");
- ``char3_jaccard``: character-3-gram Jaccard, the paraphrase-depth measure of Appendix A;
- ``style_percentile``: where the gold sits in the corpus's distribution of the stripped
  style detector's scores, 0–100 (the paper's "how LLM-styled it is", 0.511), when the style
  stage scored that corpus.

With several golds a query takes the largest feature value over its golds (the closest gold).
Each feature gets the AUC with which it separates a's sole wins from all other queries
(:func:`sklearn.metrics.roc_auc_score`; 0.5 = no separation, below 0.5 the opposite way), the two
group means, and a two-sided Mann–Whitney p (:func:`scipy.stats.mannwhitneyu`), plus how
concentrated the wins are: the share of wins among the ``n_wins`` queries with the highest value
and the share below the median (the paper: 17.8% and 30.8% for word overlap).

Probe discrimination (Appendix A, R14-e): when some of the set's queries are also near-miss
probe queries, a's probe hit rate on the probe queries among its sole wins against the other
probe queries.

The text features read text with regular expressions only; nothing is evaluated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from recipematch.depth import char3_jaccard
from recipematch.errors import RecipematchError
from recipematch.metrics import hits_at_k

__all__ = ["CLASSES", "FEATURES", "classify", "text_features", "separation", "hit_accounting",
           "word_jaccard", "latex_jaccard"]

#: The four classes of a query, in this order (paper Section 7: "1,401 …, 15 …, 4 both, 13,580 neither").
CLASSES = ("a_alone", "b_alone", "both", "neither")
#: Text features, in report order.
FEATURES = ("word_jaccard", "latex_jaccard", "length_ratio", "char3_jaccard", "style_percentile")

_WORD = re.compile(r"[a-z0-9]+")
_MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_BLANK = re.compile(r"\s+")


def _jaccard(a: frozenset, b: frozenset) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def word_jaccard(a: str, b: str) -> float:
    """Jaccard (0–1) of the lowercased ``[a-z0-9]+`` word sets of ``a`` and ``b``; 0 when both
    have none."""
    return _jaccard(frozenset(_WORD.findall(a.lower())), frozenset(_WORD.findall(b.lower())))


def math_spans(text: str) -> frozenset[str]:
    """The set of math spans of ``text`` (``$…$``, ``$$…$$``, ``\\(…\\)``, ``\\[…\\]``), each with its
    whitespace removed; an unclosed ``$`` opens no span."""
    out = set()
    for m in _MATH.finditer(text):
        body = next(g for g in m.groups() if g is not None)
        body = _BLANK.sub("", body)
        if body:
            out.add(body)
    return frozenset(out)


def latex_jaccard(a: str, b: str) -> float:
    """Jaccard (0–1) of the math-span sets of ``a`` and ``b`` (:func:`math_spans`); 0 when
    neither has a span."""
    return _jaccard(math_spans(a), math_spans(b))


def text_features(query: str, gold: str) -> dict[str, float]:
    """The query–gold features of the module docstring (all but ``style_percentile``).

    Raises:
        RecipematchError: an empty (or all-blank) query or gold text, which has no length ratio.
    """
    if not query.strip() or not gold.strip():
        raise RecipematchError("hit accounting needs a non-empty query and gold text")
    return {"word_jaccard": word_jaccard(query, gold), "latex_jaccard": latex_jaccard(query, gold),
            "length_ratio": len(gold) / len(query), "char3_jaccard": char3_jaccard(query, gold)}


def classify(ranks_a, ranks_b, k: int = 1) -> np.ndarray:
    """Per-query class index into :data:`CLASSES` (0 a alone, 1 b alone, 2 both, 3 neither).

    Args:
        ranks_a, ranks_b: ``(n_queries,)`` 0-based rank of the best gold as the evaluate
            stage writes it (0 = first), same query order; ``-1`` means no gold (a miss).
        k: a hit is a rank in ``0..k-1`` (:func:`recipematch.metrics.hits_at_k`, the rule
            R@k uses).

    Raises:
        RecipematchError: shapes differ or are not 1-D, or ``k < 1``.
    """
    a = np.asarray(ranks_a, dtype=np.int64)
    b = np.asarray(ranks_b, dtype=np.int64)
    if a.ndim != 1 or a.shape != b.shape:
        raise RecipematchError(f"classify needs two 1-D rank arrays of one length, got {a.shape} and {b.shape}")
    if k < 1:
        raise RecipematchError(f"k must be >= 1, got {k}")
    ha, hb = hits_at_k(a, k), hits_at_k(b, k)
    return np.where(ha & ~hb, 0, np.where(hb & ~ha, 1, np.where(ha & hb, 2, 3))).astype(np.int64)


@dataclass(frozen=True)
class Separation:
    """How one feature separates the wins from the rest (see the module docstring)."""

    auc: float | None
    mean_wins: float | None
    mean_rest: float | None
    p_mannwhitney: float | None
    top_share: float | None
    below_median_share: float | None
    n_wins: int
    n_rest: int
    reason: str = ""

    def to_dict(self) -> dict:
        def r(x):
            return None if x is None else round(float(x), 4)

        d = {"auc": r(self.auc), "mean_wins": r(self.mean_wins), "mean_rest": r(self.mean_rest),
             "p_mannwhitney": None if self.p_mannwhitney is None else float(f"{self.p_mannwhitney:.4g}"),
             "top_share": r(self.top_share), "below_median_share": r(self.below_median_share),
             "n_wins": self.n_wins, "n_rest": self.n_rest}
        if self.reason:
            d["reason"] = self.reason
        return d


def separation(values, wins) -> Separation:
    """AUC, group means, Mann–Whitney p and concentration of ``values`` on the ``wins`` mask.

    Args:
        values: ``(n,)`` feature values; NaN marks a query without the feature (left out).
        wins: ``(n,)`` booleans, True for a sole win.

    ``top_share`` is the share of wins among the ``n_wins`` queries with the highest values
    (ties ordered by position, so the result is deterministic); ``below_median_share`` the share
    of wins whose value is strictly below the median of all queries. When either group is empty
    every statistic is None and ``reason`` says why.
    """
    from scipy.stats import mannwhitneyu
    from sklearn.metrics import roc_auc_score

    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(wins, dtype=bool)
    if v.shape != w.shape or v.ndim != 1:
        raise RecipematchError(f"separation needs two 1-D arrays of one length, got {v.shape} and {w.shape}")
    keep = ~np.isnan(v)
    v, w = v[keep], w[keep]
    n_w, n_r = int(w.sum()), int((~w).sum())
    if n_w == 0 or n_r == 0:
        return Separation(None, None, None, None, None, None, n_w, n_r,
                          reason="no sole wins" if n_w == 0 else "every query is a sole win")
    auc = float(roc_auc_score(w, v))
    p = float(mannwhitneyu(v[w], v[~w], alternative="two-sided").pvalue)
    order = np.argsort(-v, kind="stable")
    top = float(w[order[:n_w]].sum()) / n_w
    below = float((v[w] < np.median(v)).sum()) / n_w
    return Separation(auc, float(v[w].mean()), float(v[~w].mean()), p, top, below, n_w, n_r)


def hit_accounting(query_ids: Sequence[str], ranks_a, ranks_b, *, queries: Mapping[str, str],
                   golds: Mapping[str, Sequence[str]], corpus_text: Mapping[str, str], k: int = 1,
                   style_percentile: Mapping[str, float] | None = None,
                   probe_hits_a: Mapping[str, bool] | None = None) -> dict:
    """The full hit accounting of one model pair on one set.

    Args:
        query_ids: ``(n,)`` the queries, in the order of the rank arrays.
        ranks_a, ranks_b: ``(n,)`` best-gold ranks of a and b (see :func:`classify`).
        queries: query id → text.
        golds: query id → its gold doc ids (positive qrels under the set's rule).
        corpus_text: doc id → text.
        k: cut-off of a hit (the paper: 1).
        style_percentile: doc id → the gold's style percentile (0–100), or None.
        probe_hits_a: probe query id → whether a hit it on the near-miss probe, or None.

    Returns:
        ``{"k", "n_queries", "counts": {class: n}, "features": {feature: separation dict},
        "probe": {...} | None, "missing_gold_text": n}``. A query whose golds are all absent from
        ``corpus_text`` gets NaN features (left out of every separation) and is counted.

    Raises:
        RecipematchError: bad shapes, an unknown query id, or an empty query text.
    """
    qids = list(query_ids)
    cls = classify(ranks_a, ranks_b, k)
    if len(qids) != cls.size:
        raise RecipematchError(f"{len(qids)} query ids for {cls.size} ranks")
    feats = {f: np.full(len(qids), np.nan) for f in FEATURES}
    missing = 0
    for i, q in enumerate(qids):
        if q not in queries:
            raise RecipematchError(f"hit accounting: query {q!r} has no text")
        gs = [g for g in golds.get(q, ()) if g in corpus_text and corpus_text[g].strip()]
        if not gs:
            missing += 1
            continue
        per = [text_features(queries[q], corpus_text[g]) for g in gs]
        for f in per[0]:
            feats[f][i] = max(x[f] for x in per)
        if style_percentile is not None:
            vals = [style_percentile[g] for g in gs if g in style_percentile]
            if vals:
                feats["style_percentile"][i] = max(vals)
    wins = cls == 0
    out = {"k": int(k), "n_queries": len(qids),
           "counts": {c: int((cls == j).sum()) for j, c in enumerate(CLASSES)},
           "features": {f: separation(feats[f], wins).to_dict() for f in FEATURES
                        if f != "style_percentile" or style_percentile is not None},
           "missing_gold_text": missing, "probe": None}
    if probe_hits_a is not None:
        on_probe = [i for i, q in enumerate(qids) if q in probe_hits_a]
        win_ids = {qids[i] for i in on_probe if wins[i]}
        in_w = [probe_hits_a[q] for q in win_ids]
        rest = [hit for q, hit in probe_hits_a.items() if q not in win_ids]
        out["probe"] = {"n_probe_queries_in_set": len(on_probe), "n_wins_on_probe": len(in_w),
                        "probe_R@1_on_wins": round(100.0 * float(np.mean(in_w)), 4) if in_w else None,
                        "probe_R@1_on_rest": round(100.0 * float(np.mean(rest)), 4) if rest else None,
                        "n_rest": len(rest)}
    return out
