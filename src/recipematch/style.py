"""The style probe and style tracking (paper Appendix C, "The style probe, and the artefacts
stripped before fitting it" and "The recipe arm tracks the fingerprint"; Tables 13, 14, 15).

**The probe** is a plain text classifier: a scikit-learn ``LogisticRegression`` over word
1–2-gram tf-idf features (``TfidfVectorizer``), trained on organic source texts (label 0)
against LLM rewrites of the same sources (label 1). The train/test split is *by source id*,
so no source's organic text or rewrite is on both sides and topic and language cancel: what
is left to learn is writing style. Its quality is the AUC on the held-out sources, with a
percentile interval from a bootstrap over held-out source ids (Table 13). The same detector,
fitted on one prompt's rewrites, scores another prompt's held-out rewrites against the same
held-out organic texts (Table 13's rows D2–D4).

**Artefact stripping** (on by default): a leading OCR ``Problem:`` header and image
placeholders exist in the organic corpus and nowhere in the rewrites, so left in they let the
classifier learn the corpus's formatting instead of LLM style (paper: holdout AUC 0.969
unstripped against 0.880 stripped). Stripping reuses the v2 contamination gate's normal form
(:func:`recipematch.gates.norm_v2`): image placeholders removed, a leading ``Problem:`` header
removed, whitespace runs collapsed (which a word tokenizer ignores anyway). The unstripped
detector is fitted and reported beside it.

**Style tracking** (Tables 14 and 15): for sampled queries, the Spearman correlation between
a model's cosine similarity to every corpus document and the detector's style score of that
document (positive: the model rates LLM-styled documents as more similar), averaged over
queries; and where each query's top-k documents sit in the corpus's style distribution, as a
percentile (50 = no preference).

Conventions
-----------
* Tf-idf uses scikit-learn's defaults apart from the n-gram range: lower-casing, the token
  pattern ``(?u)\\b\\w\\w+\\b`` (tokens of two or more word characters; so ``\\frac`` counts as
  ``frac``), smooth idf, l2-normalised rows, no minimum document frequency. The logistic
  regression uses the ``lbfgs`` solver with the caller's ``C`` and ``max_iter`` (deterministic:
  no random state is involved).
* AUC ties count one half (``sklearn.metrics.roc_auc_score``'s rule).
* Bootstrap over source ids: each replicate draws as many source ids as there are held-out
  sources, uniformly with replacement, from ``np.random.default_rng(seed)`` (``integers``),
  block by block in replicate order; a document's weight in a replicate is the number of times
  its source was drawn, and the replicate AUC is the pair-weighted AUC computed from ranks
  (equal to ``roc_auc_score`` on the data with each document repeated that many times; tested).
  A replicate that draws no positive or no negative has no AUC and is left out
  (``n_boot_used`` counts the rest). The interval is the percentile interval
  (:func:`recipematch.stats.percentile_interval`).
* A document's style percentile is ``100 * (midrank - 0.5) / n_docs`` of its style score
  among all corpus documents (``scipy.stats.percentileofscore(kind="mean")``), so the
  corpus mean is exactly 50.
* Spearman's rho is the Pearson correlation of average ranks (``scipy.stats.spearmanr``);
  a query whose similarities are all equal has no rho (NaN, counted, left out of the mean).
* Top-k: highest cosine similarity first, ties broken by the lower corpus index.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import rankdata
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import Pipeline

from recipematch.errors import RecipematchError
from recipematch.gates import norm_v2
from recipematch.stats import percentile_interval

__all__ = [
    "AucInterval",
    "SourceSplit",
    "StyleProbe",
    "StyleProbeReport",
    "StyleProbeRow",
    "StyleTracking",
    "bootstrap_auc",
    "fit_style_probe",
    "run_style_probe",
    "sample_queries",
    "similarity_style_spearman",
    "split_sources",
    "strip_artefacts",
    "style_percentiles",
    "style_tracking",
    "top_k_style_percentile",
]

_BOOT_BLOCK = 256  # replicates resampled at once (results do not depend on it: draws are sequential)
_QUERY_BLOCK = 64  # queries scored at once in style tracking (per-query results are independent)


def strip_artefacts(text: str) -> str:
    """Remove the corpus-formatting artefacts the probe must not learn (paper Appendix C).

    Image placeholders (markdown ``![...](...)``, HTML ``<img ...>``, ``[image ...]`` /
    ``[figure ...]``) and a leading OCR ``Problem:`` header are removed and whitespace runs
    collapsed: the v2 gate's normal form, :func:`recipematch.gates.norm_v2`, reused as is.

    Args:
        text: any string.

    Returns:
        The stripped text (may be empty).
    """
    return norm_v2(text)


# --------------------------------------------------------------------------- split


@dataclass(frozen=True)
class SourceSplit:
    """A seeded train/test split of source ids (no id on both sides).

    Attributes:
        train, test: sorted source ids.
        test_fraction: the requested share of ids held out.
        seed: the seed of ``np.random.default_rng``.
    """

    train: tuple[str, ...]
    test: tuple[str, ...]
    test_fraction: float
    seed: int

    def to_metrics(self) -> dict:
        """Flat JSON-ready summary (counts, not the ids)."""
        return {"n_train_sources": len(self.train), "n_test_sources": len(self.test),
                "test_fraction": float(self.test_fraction), "seed": int(self.seed)}


def split_sources(source_ids: Iterable[str], *, test_fraction: float, seed: int) -> SourceSplit:
    """Split source ids into train and test, seeded (paper Appendix C: split by source problem).

    The distinct ids are sorted, permuted with ``np.random.default_rng(seed).permutation``,
    and the first ``round(test_fraction * n)`` (at least 1, at most ``n - 1``) are held out,
    so the split depends only on the set of ids and the seed, not on their order.

    Args:
        source_ids: source ids (strings; repeats allowed).
        test_fraction: share held out, in (0, 1).
        seed: non-negative integer.

    Raises:
        RecipematchError: fewer than two distinct ids, or ``test_fraction`` outside (0, 1).
    """
    if not 0.0 < float(test_fraction) < 1.0:
        raise RecipematchError(f"style probe: test_fraction must be in (0, 1), got {test_fraction!r}")
    ids = sorted({str(s) for s in source_ids})
    n = len(ids)
    if n < 2:
        raise RecipematchError(f"style probe: a source split needs at least 2 distinct source ids, got {n}")
    n_test = min(n - 1, max(1, int(round(float(test_fraction) * n))))
    perm = np.random.default_rng(seed).permutation(n)
    test = sorted(ids[i] for i in perm[:n_test])
    test_set = set(test)
    train = [s for s in ids if s not in test_set]
    return SourceSplit(train=tuple(train), test=tuple(test), test_fraction=float(test_fraction), seed=int(seed))


# --------------------------------------------------------------------------- probe


@dataclass(frozen=True)
class StyleProbe:
    """A fitted style detector (paper Appendix C).

    Attributes:
        pipeline: the fitted scikit-learn ``Pipeline`` (``tfidf`` then ``logreg``).
        strip: whether texts are passed through :func:`strip_artefacts` before the pipeline
            (at fit and at scoring time alike).
        ngram_range, C, max_iter: the fitting parameters.
        n_organic, n_rewrites: training documents per class.
    """

    pipeline: Pipeline = field(compare=False, repr=False)
    strip: bool
    ngram_range: tuple[int, int]
    C: float
    max_iter: int
    n_organic: int
    n_rewrites: int

    def _prepare(self, texts: Sequence[str]) -> list[str]:
        return [strip_artefacts(t) for t in texts] if self.strip else list(texts)

    def decision_function(self, texts: Sequence[str]) -> np.ndarray:
        """Style scores: the log-odds that each text is a rewrite.

        Args:
            texts: ``n`` strings.

        Returns:
            Array of shape ``(n,)``, float64, unbounded; higher = more LLM-rewrite-like.
        """
        _check_texts(texts, "texts")
        if len(texts) == 0:
            return np.zeros(0, dtype=np.float64)
        return np.asarray(self.pipeline.decision_function(self._prepare(texts)), dtype=np.float64)

    def top_features(self, k: int) -> dict[str, list[tuple[str, float]]]:
        """The ``k`` heaviest features on each side (Appendix C reads these).

        Returns:
            ``{"rewrite": [(feature, coef), ...], "organic": [...]}``, the rewrite side by
            descending coefficient, the organic side by ascending; ties by feature name.
        """
        if k < 1:
            raise RecipematchError(f"style probe: top_features needs k >= 1, got {k}")
        names = self.pipeline.named_steps["tfidf"].get_feature_names_out()
        coef = self.pipeline.named_steps["logreg"].coef_[0]
        order_pos = np.lexsort((names, -coef))[:k]
        order_neg = np.lexsort((names, coef))[:k]
        return {"rewrite": [(str(names[i]), float(coef[i])) for i in order_pos],
                "organic": [(str(names[i]), float(coef[i])) for i in order_neg]}


def _check_texts(texts, what: str) -> None:
    if isinstance(texts, str):
        raise RecipematchError(f"style probe: {what} must be a sequence of strings, got one string")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise RecipematchError(f"style probe: {what}[{i}] is {type(t).__name__}, not a string")


def fit_style_probe(organic: Sequence[str], rewrites: Sequence[str], *, ngram_range: tuple[int, int],
                    C: float, max_iter: int, strip: bool) -> StyleProbe:
    """Fit the style detector: word n-gram tf-idf + logistic regression (paper Appendix C).

    Args:
        organic: organic texts (label 0), at least one.
        rewrites: LLM rewrites (label 1), at least one.
        ngram_range: ``(min_n, max_n)`` word n-gram lengths (the paper: 1–2).
        C: inverse regularisation strength of the logistic regression, > 0.
        max_iter: ``lbfgs`` iteration cap, >= 1.
        strip: strip artefacts (:func:`strip_artefacts`) before fitting and scoring.

    Raises:
        RecipematchError: an empty class, a non-string text, bad parameters, or a training
            set with no word token of two or more characters.
    """
    _check_texts(organic, "organic")
    _check_texts(rewrites, "rewrites")
    if len(organic) == 0 or len(rewrites) == 0:
        raise RecipematchError(f"style probe: need texts of both classes, got {len(organic)} organic "
                               f"and {len(rewrites)} rewrites")
    lo, hi = (int(x) for x in ngram_range)
    if not 1 <= lo <= hi:
        raise RecipematchError(f"style probe: ngram_range must be (min_n, max_n) with 1 <= min_n <= max_n, got {ngram_range!r}")
    if not C > 0:
        raise RecipematchError(f"style probe: C must be > 0, got {C!r}")
    if int(max_iter) < 1:
        raise RecipematchError(f"style probe: max_iter must be >= 1, got {max_iter!r}")
    pipe = Pipeline([
        ("tfidf", TfidfVectorizer(ngram_range=(lo, hi))),
        ("logreg", LogisticRegression(C=float(C), max_iter=int(max_iter), solver="lbfgs")),
    ])
    probe = StyleProbe(pipeline=pipe, strip=bool(strip), ngram_range=(lo, hi), C=float(C),
                       max_iter=int(max_iter), n_organic=len(organic), n_rewrites=len(rewrites))
    texts = probe._prepare(list(organic) + list(rewrites))
    labels = np.r_[np.zeros(len(organic), dtype=np.int64), np.ones(len(rewrites), dtype=np.int64)]
    try:
        pipe.fit(texts, labels)
    except ValueError as e:  # e.g. "empty vocabulary"
        raise RecipematchError(f"style probe: cannot fit the detector: {e}") from e
    return probe


# --------------------------------------------------------------------------- AUC


@dataclass(frozen=True)
class AucInterval:
    """A held-out AUC with its bootstrap interval over source ids (Table 13).

    Attributes:
        auc: ``roc_auc_score`` on the held-out documents, in [0, 1] (0.5 = chance).
        low, high: percentile interval bounds at ``level``.
        n_boot: replicates drawn; n_boot_used: replicates with both classes present.
        seed: seed of ``np.random.default_rng``; level: interval coverage.
        n_pos, n_neg: held-out rewrites and organic texts; n_sources: distinct source ids.
    """

    auc: float
    low: float
    high: float
    n_boot: int
    n_boot_used: int
    seed: int
    level: float
    n_pos: int
    n_neg: int
    n_sources: int

    def to_metrics(self, prefix: str = "") -> dict:
        """Flat dict, keys ``prefix + name``."""
        return {f"{prefix}{k}": v for k, v in (
            ("auc", float(self.auc)), ("auc_low", float(self.low)), ("auc_high", float(self.high)),
            ("n_boot", int(self.n_boot)), ("n_boot_used", int(self.n_boot_used)), ("seed", int(self.seed)),
            ("level", float(self.level)), ("n_pos", int(self.n_pos)), ("n_neg", int(self.n_neg)),
            ("n_sources", int(self.n_sources)))}


def _weighted_auc_replicates(pos_scores, pos_group, neg_scores, neg_group, counts) -> np.ndarray:
    """Pair-weighted AUC per replicate: (b,) from counts (b, n_groups); NaN where undefined."""
    order = np.argsort(neg_scores, kind="stable")
    neg_sorted = neg_scores[order]
    neg_group_sorted = neg_group[order]
    lo = np.searchsorted(neg_sorted, pos_scores, side="left")   # negatives strictly below
    hi = np.searchsorted(neg_sorted, pos_scores, side="right")  # negatives at or below
    wn = counts[:, neg_group_sorted].astype(np.float64)
    cum = np.zeros((counts.shape[0], wn.shape[1] + 1), dtype=np.float64)
    np.cumsum(wn, axis=1, out=cum[:, 1:])
    wp = counts[:, pos_group].astype(np.float64)
    num = (wp * (cum[:, lo] + cum[:, hi])).sum(axis=1) * 0.5
    den = wp.sum(axis=1) * cum[:, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def bootstrap_auc(scores, labels, groups, *, n_boot: int, seed: int, level: float) -> AucInterval:
    """Held-out AUC with a percentile interval from a bootstrap over groups (source ids).

    Args:
        scores: shape ``(n,)``, finite floats (the detector's decision values).
        labels: shape ``(n,)``, 1 for a rewrite, 0 for an organic text; both present.
        groups: shape ``(n,)``, the source id of each document (any hashable values); a
            replicate redraws source ids, each drawn id bringing all its documents.
        n_boot: replicates, >= 1 (the paper: 2,000).
        seed: seed of ``np.random.default_rng``.
        level: interval coverage in (0, 1), e.g. 0.95.

    Returns:
        :class:`AucInterval`.

    Raises:
        RecipematchError: mismatched shapes, non-finite scores, labels other than 0/1, one
            class missing, ``n_boot < 1`` or no replicate with both classes.
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels)
    g = np.asarray(groups)
    if s.ndim != 1 or y.shape != s.shape or g.shape != s.shape:
        raise RecipematchError(f"style probe AUC: scores, labels and groups must be 1-D of one length, got "
                               f"{s.shape}, {y.shape}, {g.shape}")
    if not np.all(np.isfinite(s)):
        raise RecipematchError("style probe AUC: scores must be finite")
    if not np.all((y == 0) | (y == 1)):
        raise RecipematchError("style probe AUC: labels must be 0 (organic) or 1 (rewrite)")
    y = y.astype(np.int64)
    n_pos, n_neg = int(y.sum()), int((1 - y).sum())
    if n_pos == 0 or n_neg == 0:
        raise RecipematchError(f"style probe AUC: need both classes, got {n_pos} rewrites and {n_neg} organic texts")
    if int(n_boot) < 1:
        raise RecipematchError(f"style probe AUC: n_boot must be >= 1, got {n_boot!r}")
    _, gidx = np.unique(g, return_inverse=True)
    gidx = gidx.reshape(-1)
    n_groups = int(gidx.max()) + 1
    auc = float(roc_auc_score(y, s))
    pos, neg = y == 1, y == 0
    rng = np.random.default_rng(seed)
    reps = np.empty(int(n_boot), dtype=np.float64)
    for start in range(0, int(n_boot), _BOOT_BLOCK):
        b = min(_BOOT_BLOCK, int(n_boot) - start)
        draws = rng.integers(0, n_groups, size=(b, n_groups))
        flat = (draws + (np.arange(b, dtype=np.int64) * n_groups)[:, None]).ravel()
        counts = np.bincount(flat, minlength=b * n_groups).reshape(b, n_groups)
        reps[start:start + b] = _weighted_auc_replicates(s[pos], gidx[pos], s[neg], gidx[neg], counts)
    used = reps[np.isfinite(reps)]
    if used.size == 0:
        raise RecipematchError("style probe AUC: no bootstrap replicate drew both classes")
    low, high = percentile_interval(used, level)
    return AucInterval(auc=auc, low=low, high=high, n_boot=int(n_boot), n_boot_used=int(used.size),
                       seed=int(seed), level=float(level), n_pos=n_pos, n_neg=n_neg, n_sources=n_groups)


# --------------------------------------------------------------------------- one probe run


@dataclass(frozen=True)
class StyleProbeRow:
    """One row of Table 13: a prompt's held-out rewrites against the held-out organic texts,
    scored by the stripped detector and by the unstripped one."""

    prompt: str
    stripped: AucInterval
    unstripped: AucInterval

    def to_metrics(self, prefix: str = "") -> dict:
        return {**self.stripped.to_metrics(f"{prefix}{self.prompt}."),
                **self.unstripped.to_metrics(f"{prefix}{self.prompt}.unstripped.")}


@dataclass(frozen=True)
class StyleProbeReport:
    """The result of :func:`run_style_probe`.

    Attributes:
        train_prompt: the prompt whose rewrites trained the detector.
        split: the source split.
        rows: one :class:`StyleProbeRow` per prompt, the training prompt first, then the
            others in sorted order.
        ngram_range, C, max_iter: the detector's parameters.
        n_heldout_twins: held-out organic texts whose stripped text equals a training
            document's (organic or rewrite). The split is by source id, so a problem filed
            under two ids can sit on both sides (Appendix C: 20 of 1,282 in the paper).
    """

    train_prompt: str
    split: SourceSplit
    rows: tuple[StyleProbeRow, ...]
    ngram_range: tuple[int, int]
    C: float
    max_iter: int
    n_heldout_twins: int

    def row(self, prompt: str) -> StyleProbeRow:
        for r in self.rows:
            if r.prompt == prompt:
                return r
        raise KeyError(prompt)

    def to_metrics(self) -> dict:
        """Flat JSON-ready dict, e.g. ``{"d1.auc": ..., "d1.unstripped.auc_low": ...}``."""
        out: dict = {"train_prompt": self.train_prompt, **self.split.to_metrics(),
                     "ngram_min": self.ngram_range[0], "ngram_max": self.ngram_range[1],
                     "C": float(self.C), "max_iter": int(self.max_iter),
                     "n_heldout_twins": int(self.n_heldout_twins)}
        for r in self.rows:
            out.update(r.to_metrics())
        return out


def run_style_probe(organic: Mapping[str, str], rewrites: Mapping[str, Sequence[tuple[str, str]]], *,
                    train_prompt: str, test_fraction: float, seed: int, n_boot: int, level: float,
                    ngram_range: tuple[int, int], C: float, max_iter: int
                    ) -> tuple[StyleProbeReport, StyleProbe, StyleProbe]:
    """Fit the stripped and unstripped detectors on one prompt's rewrites and report Table 13.

    The sources of ``rewrites[train_prompt]`` are split by :func:`split_sources`. Each
    detector trains on the organic texts of the train sources (label 0) against their
    rewrites (label 1). Every prompt's row then scores that prompt's rewrites of the *test*
    sources (rewrites of train sources and of sources outside the split are not scored)
    against the organic texts of the test sources, and bootstraps over the test source ids
    (:func:`bootstrap_auc`, the same ``seed`` for every row). Every row's groups are the same
    test source ids, so replicate ``r`` draws the same sources in every row and in both
    detectors: rows are paired replicate by replicate.

    Args:
        organic: source id -> organic text.
        rewrites: prompt name -> ``(source_id, rewrite_text)`` rows (several rows per source
            allowed). Must contain ``train_prompt``.
        train_prompt: which prompt's rewrites train the detector (the paper: D1).
        test_fraction, seed: see :func:`split_sources`; the seed also seeds the bootstrap.
        n_boot, level: see :func:`bootstrap_auc`.
        ngram_range, C, max_iter: see :func:`fit_style_probe`.

    Returns:
        ``(report, stripped_detector, unstripped_detector)``.

    Raises:
        RecipematchError: ``train_prompt`` missing, a rewrite whose source has no organic
            text (naming prompt and source id), a prompt with no held-out rewrite, or any
            error of the functions above.
    """
    if train_prompt not in rewrites:
        raise RecipematchError(f"style probe: train_prompt {train_prompt!r} is not among the rewrite sets "
                               f"{sorted(rewrites)}")
    for prompt, rows in rewrites.items():
        for i, row in enumerate(rows):
            if len(row) != 2 or not isinstance(row[1], str):
                raise RecipematchError(f"style probe: rewrites[{prompt!r}][{i}] must be (source_id, text)")
            if str(row[0]) not in organic:
                raise RecipematchError(f"style probe: rewrites[{prompt!r}][{i}] has source_id {row[0]!r} "
                                       f"with no organic text")
    split = split_sources((str(r[0]) for r in rewrites[train_prompt]), test_fraction=test_fraction, seed=seed)
    train_set, test_set = set(split.train), set(split.test)
    train_organic = [organic[s] for s in split.train]
    train_rewrites = [t for s, t in rewrites[train_prompt] if str(s) in train_set]
    fit = dict(ngram_range=ngram_range, C=C, max_iter=max_iter)
    det = {"stripped": fit_style_probe(train_organic, train_rewrites, strip=True, **fit),
           "unstripped": fit_style_probe(train_organic, train_rewrites, strip=False, **fit)}
    test_organic = [organic[s] for s in split.test]
    neg_scores = {k: det[k].decision_function(test_organic) for k in det}
    out_rows = []
    for prompt in [train_prompt] + sorted(p for p in rewrites if p != train_prompt):
        held = [(str(s), t) for s, t in rewrites[prompt] if str(s) in test_set]
        if not held:
            raise RecipematchError(f"style probe: prompt {prompt!r} has no rewrite of a held-out source "
                                   f"({len(split.test)} held out)")
        labels = np.r_[np.zeros(len(test_organic), dtype=np.int64), np.ones(len(held), dtype=np.int64)]
        groups = np.array(list(split.test) + [s for s, _ in held], dtype=str)
        aucs = {}
        for k in det:
            pos_scores = det[k].decision_function([t for _, t in held])
            aucs[k] = bootstrap_auc(np.r_[neg_scores[k], pos_scores], labels, groups,
                                    n_boot=n_boot, seed=seed, level=level)
        out_rows.append(StyleProbeRow(prompt=prompt, stripped=aucs["stripped"], unstripped=aucs["unstripped"]))
    seen = {strip_artefacts(t) for t in train_organic + train_rewrites}
    twins = sum(strip_artefacts(t) in seen for t in test_organic)
    report = StyleProbeReport(train_prompt=train_prompt, split=split, rows=tuple(out_rows),
                              ngram_range=det["stripped"].ngram_range, C=float(C), max_iter=int(max_iter),
                              n_heldout_twins=int(twins))
    return report, det["stripped"], det["unstripped"]


# --------------------------------------------------------------------------- style tracking


def style_percentiles(style_scores) -> np.ndarray:
    """Each document's percentile in the corpus style distribution.

    Args:
        style_scores: shape ``(n_docs,)``, finite.

    Returns:
        Shape ``(n_docs,)``, values in (0, 100): ``100 * (midrank - 0.5) / n_docs`` (ties share
        their mean rank; equals ``scipy.stats.percentileofscore(style_scores, s, kind="mean")``);
        the mean over the corpus is exactly 50.
    """
    t = _check_style(style_scores)
    return 100.0 * (rankdata(t) - 0.5) / t.size


def _check_style(style_scores) -> np.ndarray:
    t = np.asarray(style_scores, dtype=np.float64)
    if t.ndim != 1 or t.size == 0:
        raise RecipematchError(f"style tracking: style_scores must be 1-D and non-empty, got shape {t.shape}")
    if not np.all(np.isfinite(t)):
        raise RecipematchError("style tracking: style_scores must be finite")
    return t


def _check_mask(mask, shape) -> np.ndarray | None:
    if mask is None:
        return None
    m = np.asarray(mask, dtype=bool)
    if m.shape != shape:
        raise RecipematchError(f"style tracking: mask must have shape {shape}, got {m.shape}")
    return m


def _check_inputs(similarities, style_scores, mask):
    """``(style (n_docs,), similarities (n_queries, n_docs) float64, mask or None)``, checked."""
    t = _check_style(style_scores)
    s = np.asarray(similarities, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] != t.size:
        raise RecipematchError(f"style tracking: similarities must be (n_queries, {t.size}), got {s.shape}")
    if not np.all(np.isfinite(s)):
        raise RecipematchError("style tracking: similarities must be finite")
    return t, s, _check_mask(mask, s.shape)


def similarity_style_spearman(similarities, style_scores, *, mask=None) -> np.ndarray:
    """Per-query Spearman correlation between similarity and style over the corpus (Table 14).

    Args:
        similarities: shape ``(n_queries, n_docs)``, finite (a model's query–document scores).
        style_scores: shape ``(n_docs,)``, finite (the detector's decision values).
        mask: optional bool ``(n_queries, n_docs)``; True leaves that document out of that
            query's correlation (e.g. the query's own corpus entry).

    Returns:
        Shape ``(n_queries,)``, values in [-1, 1]; NaN for a query whose (unmasked)
        similarities or style scores are all equal or fewer than two.

    Raises:
        RecipematchError: bad shapes or non-finite values.
    """
    t, s, m = _check_inputs(similarities, style_scores, mask)
    if m is None or not m.any():
        # no document left out: the style ranks are shared by every query
        a = rankdata(s, axis=1)
        a -= a.mean(axis=1, keepdims=True)
        b = rankdata(t)
        b -= b.mean()
        num = a @ b
        den = np.sqrt(np.einsum("ij,ij->i", a, a) * float(b @ b))
    else:
        rs = rankdata(np.where(m, np.nan, s), axis=1, nan_policy="omit")
        rt = rankdata(np.where(m, np.nan, np.broadcast_to(t, s.shape)), axis=1, nan_policy="omit")
        a = np.nan_to_num(rs - np.nanmean(rs, axis=1, keepdims=True))  # left-out entries -> 0
        b = np.nan_to_num(rt - np.nanmean(rt, axis=1, keepdims=True))
        num = np.einsum("ij,ij->i", a, b)
        den = np.sqrt(np.einsum("ij,ij->i", a, a) * np.einsum("ij,ij->i", b, b))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return np.clip(rho, -1.0, 1.0)


def top_k_style_percentile(similarities, style_scores, *, k: int, mask=None) -> np.ndarray:
    """Mean style percentile of each query's top-``k`` documents (Tables 14–15; 50 = no preference).

    Args:
        similarities: shape ``(n_queries, n_docs)``, finite.
        style_scores: shape ``(n_docs,)``, finite; percentiles are taken over all ``n_docs``
            (:func:`style_percentiles`), masked documents included.
        k: documents per query, 1 <= k <= the unmasked documents of every query.
        mask: optional bool ``(n_queries, n_docs)``; True = never retrieved for that query.

    Returns:
        Shape ``(n_queries,)``, values in (0, 100). Ranking: highest similarity first, ties
        by lower document index.

    Raises:
        RecipematchError: bad shapes, non-finite values, or ``k`` out of range.
    """
    t, s, m = _check_inputs(similarities, style_scores, mask)
    available = t.size - (0 if m is None else int(m.sum(axis=1).max(initial=0)))
    if not 1 <= int(k) <= available:
        raise RecipematchError(f"style tracking: top_k must be in [1, {available}] (unmasked documents per query), got {k}")
    if m is not None:
        s = np.where(m, -np.inf, s)
    return style_percentiles(t)[_top_k_indices(s, int(k))].mean(axis=1)


def _top_k_indices(s: np.ndarray, k: int) -> np.ndarray:
    """Row-wise indices of the ``k`` largest values, ties broken by the lower index: the same
    set as ``np.argsort(-s, kind="stable")[:, :k]``, found in linear time per row."""
    n = s.shape[1]
    kth = np.partition(s, n - k, axis=1)[:, n - k][:, None]  # the k-th largest value per row
    above = s > kth
    tied = s == kth
    need = k - above.sum(axis=1, keepdims=True)  # >= 1: how many tied entries to take
    take = above | (tied & (np.cumsum(tied, axis=1) <= need))
    return np.nonzero(take)[1].reshape(s.shape[0], k)


def sample_queries(n_total: int, n_sample: int, *, seed: int) -> np.ndarray:
    """Indices of the queries to score, sorted: all ``n_total`` when ``n_sample >= n_total``,
    otherwise ``np.random.default_rng(seed).choice(n_total, n_sample, replace=False)``.

    Raises:
        RecipematchError: ``n_total < 1`` or ``n_sample < 1``.
    """
    if int(n_total) < 1 or int(n_sample) < 1:
        raise RecipematchError(f"style tracking: need n_total >= 1 and n_queries >= 1, got {n_total}, {n_sample}")
    if int(n_sample) >= int(n_total):
        return np.arange(int(n_total), dtype=np.int64)
    idx = np.random.default_rng(seed).choice(int(n_total), int(n_sample), replace=False)
    return np.sort(idx).astype(np.int64)


@dataclass(frozen=True)
class StyleTracking:
    """One model's row of Tables 14/15.

    Attributes:
        rho_mean: mean over scored queries of the per-query Spearman rho, in [-1, 1].
        top_k_percentile_mean: mean over queries of the top-k style percentile, in (0, 100).
        n_queries: queries scored; n_queries_undefined: those with no rho (left out of
            ``rho_mean``); n_docs: corpus size; top_k, seed: the parameters.
        query_indices: the sampled query rows; rho_per_query, top_k_percentile_per_query:
            per-query values in that order (for paired comparisons between models).
    """

    rho_mean: float
    top_k_percentile_mean: float
    n_queries: int
    n_queries_undefined: int
    n_docs: int
    top_k: int
    seed: int
    query_indices: tuple[int, ...] = field(repr=False)
    rho_per_query: tuple[float, ...] = field(repr=False)
    top_k_percentile_per_query: tuple[float, ...] = field(repr=False)

    def to_metrics(self, prefix: str = "") -> dict:
        """Flat dict of the scalars (the per-query tuples are left out)."""
        return {f"{prefix}rho_mean": float(self.rho_mean),
                f"{prefix}top_k_percentile_mean": float(self.top_k_percentile_mean),
                f"{prefix}n_queries": int(self.n_queries), f"{prefix}n_queries_undefined": int(self.n_queries_undefined),
                f"{prefix}n_docs": int(self.n_docs), f"{prefix}top_k": int(self.top_k), f"{prefix}seed": int(self.seed)}


def _unit_rows(x, what: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] == 0:
        raise RecipematchError(f"style tracking: {what} must be 2-D (n, dim) and non-empty, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise RecipematchError(f"style tracking: {what} must be finite")
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise RecipematchError(f"style tracking: {what} row {int(np.flatnonzero(norms[:, 0] == 0)[0])} is a zero vector")
    return a / norms


def style_tracking(query_embeddings, corpus_embeddings, style_scores, *, n_queries: int, seed: int,
                   top_k: int, exclude_doc=None) -> StyleTracking:
    """Does a model rate LLM-styled documents as more similar? (Tables 14 and 15.)

    Similarity is cosine (both embedding sets are L2-normalised here, in float64). For
    ``n_queries`` queries sampled with :func:`sample_queries`, the per-query Spearman rho
    between similarity and style over the corpus (:func:`similarity_style_spearman`) and the
    top-``top_k`` style percentile (:func:`top_k_style_percentile`).

    Args:
        query_embeddings: shape ``(n_q, dim)``, finite, no zero row.
        corpus_embeddings: shape ``(n_docs, dim)``, finite, no zero row.
        style_scores: shape ``(n_docs,)``: the detector's decision value per corpus document.
        n_queries: queries to sample (the paper: 2,000); all when ``>= n_q``.
        seed: sampling seed (the paper: 42).
        top_k: retrieved documents per query (the paper: 10).
        exclude_doc: optional int array ``(n_q,)``: corpus row of each query's own entry,
            left out of its correlation and its top-k; -1 for none.

    Returns:
        :class:`StyleTracking`.

    Raises:
        RecipematchError: bad shapes, dims that differ, non-finite values, zero vectors, an
            ``exclude_doc`` index out of range, or ``top_k`` out of range.
    """
    q = _unit_rows(query_embeddings, "query_embeddings")
    c = _unit_rows(corpus_embeddings, "corpus_embeddings")
    t = _check_style(style_scores)
    if q.shape[1] != c.shape[1]:
        raise RecipematchError(f"style tracking: query dim {q.shape[1]} != corpus dim {c.shape[1]}")
    if t.size != c.shape[0]:
        raise RecipematchError(f"style tracking: {t.size} style scores for {c.shape[0]} corpus documents")
    excl = None
    if exclude_doc is not None:
        excl = np.asarray(exclude_doc)
        if excl.shape != (q.shape[0],) or not np.issubdtype(excl.dtype, np.integer):
            raise RecipematchError(f"style tracking: exclude_doc must be an int array of shape ({q.shape[0]},)")
        if np.any((excl < -1) | (excl >= c.shape[0])):
            raise RecipematchError(f"style tracking: exclude_doc values must be -1 or in [0, {c.shape[0]})")
    idx = sample_queries(q.shape[0], n_queries, seed=seed)
    rho = np.empty(idx.size, dtype=np.float64)
    pct = np.empty(idx.size, dtype=np.float64)
    for start in range(0, idx.size, _QUERY_BLOCK):
        rows = idx[start:start + _QUERY_BLOCK]
        sims = q[rows] @ c.T
        mask = None
        if excl is not None and np.any(excl[rows] >= 0):
            mask = np.zeros(sims.shape, dtype=bool)
            has = excl[rows] >= 0
            mask[np.flatnonzero(has), excl[rows][has]] = True
        rho[start:start + rows.size] = similarity_style_spearman(sims, t, mask=mask)
        pct[start:start + rows.size] = top_k_style_percentile(sims, t, k=top_k, mask=mask)
    defined = np.isfinite(rho)
    rho_mean = float(rho[defined].mean()) if defined.any() else float("nan")
    return StyleTracking(rho_mean=rho_mean, top_k_percentile_mean=float(pct.mean()), n_queries=int(idx.size),
                         n_queries_undefined=int((~defined).sum()), n_docs=int(c.shape[0]), top_k=int(top_k),
                         seed=int(seed), query_indices=tuple(int(i) for i in idx),
                         rho_per_query=tuple(float(r) for r in rho),
                         top_k_percentile_per_query=tuple(float(p) for p in pct))
