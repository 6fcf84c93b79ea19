"""The style probe (paper Appendix C, "The style probe, and the artefacts
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

**Style tracking** (Tables 14 and 15) lives in :mod:`recipematch.style_tracking`.

Conventions
-----------
* Tf-idf uses scikit-learn's defaults apart from the n-gram range: lower-casing, the token
  pattern ``(?u)\\b\\w\\w+\\b`` (tokens of two or more word characters; so ``\\frac`` counts as
  ``frac``), smooth idf, l2-normalised rows, no minimum document frequency. The logistic
  regression uses the ``lbfgs`` solver with the caller's ``C`` and ``max_iter`` (deterministic:
  no random state is involved).
* AUC ties count one half (``sklearn.metrics.roc_auc_score``'s rule).
* Bootstrap over source ids: each replicate draws as many source ids as there are held-out
  sources, uniformly with replacement, from ``np.random.default_rng(seed)`` by the project's one
  resampler (:func:`recipematch.resample.draw_counts`), block by block in replicate order; a document's weight in a replicate is the number of times
  its source was drawn, and the replicate AUC is the pair-weighted AUC computed from ranks
  (equal to ``roc_auc_score`` on the data with each document repeated that many times; tested).
  A replicate that draws no positive or no negative has no AUC and is left out
  (``n_boot_used`` counts the rest). The interval is the percentile interval
  (:func:`recipematch.resample.percentile_interval`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import Pipeline

from recipematch.errors import RecipematchError
from recipematch.gates import norm_v2
from recipematch.resample import draw_counts, percentile_interval

__all__ = [
    "AucInterval",
    "SourceSplit",
    "StyleProbe",
    "StyleProbeReport",
    "StyleProbeRow",
    "bootstrap_auc",
    "fit_style_probe",
    "run_style_probe",
    "split_sources",
    "strip_artefacts",
]

_BOOT_BLOCK = 256  # replicates resampled at once (results do not depend on it: draws are sequential)


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
        counts = draw_counts(rng, n_groups, b)
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
