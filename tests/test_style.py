"""Style probe and style tracking (recipematch.style; paper Appendix C, Tables 13-15).

Fixtures are hand-built so that the expected values can be worked out by hand; the
comments give the working.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import percentileofscore, spearmanr
from conftest import require_real_data
from sklearn.metrics import roc_auc_score

from recipematch.corpus import load_beir_corpus
from recipematch.errors import RecipematchError
from recipematch.gates import norm_v2
from recipematch.io import read_jsonl_strict
from recipematch.resample import percentile_interval
from recipematch.style import bootstrap_auc, fit_style_probe, run_style_probe, split_sources, strip_artefacts
from recipematch.style_tracking import (
    sample_queries,
    similarity_style_spearman,
    style_percentiles,
    style_tracking,
    top_k_style_percentile,
)

PROBE = dict(ngram_range=(1, 2), C=1.0, max_iter=1000)


def _sid(i: int) -> str:
    return f"s{i:03d}"


# --------------------------------------------------------------------------- stripping


def test_strip_artefacts_removes_header_and_image_placeholders():
    text = "Problem:  Find $x$ such that\n![](attached_image_1.png)\n$x^2 = 4$."
    assert strip_artefacts(text) == "Find $x$ such that $x^2 = 4$."
    assert strip_artefacts("**Problem**: Show that <img src='a.png'> holds [Image: figure 1]") == "Show that holds"
    # only a LEADING header goes; the word elsewhere stays
    assert strip_artefacts("This problem: is fine") == "This problem: is fine"


def test_strip_artefacts_is_the_v2_gate_normal_form():
    texts = ["Problem: a  b", "x ![](i.png) y", "  plain\ttext ", "PROBLEM. upper", ""]
    assert [strip_artefacts(t) for t in texts] == [norm_v2(t) for t in texts]


# --------------------------------------------------------------------------- split


def test_split_sources_never_leaks_and_is_seeded():
    ids = [_sid(i) for i in range(50)] * 2  # repeats allowed
    a = split_sources(ids, test_fraction=0.3, seed=7)
    assert set(a.train).isdisjoint(a.test)
    assert set(a.train) | set(a.test) == set(ids)
    assert len(a.test) == 15  # round(0.3 * 50)
    assert list(a.test) == sorted(a.test) and list(a.train) == sorted(a.train)
    b = split_sources(list(reversed(ids)), test_fraction=0.3, seed=7)
    assert a == b  # order of the input does not matter
    c = split_sources(ids, test_fraction=0.3, seed=8)
    assert c.test != a.test
    assert a.to_metrics() == {"n_train_sources": 35, "n_test_sources": 15, "test_fraction": 0.3, "seed": 7}


def test_split_sources_keeps_both_sides_nonempty_and_rejects_bad_input():
    s = split_sources(["a", "b"], test_fraction=0.99, seed=0)
    assert len(s.train) == 1 and len(s.test) == 1
    s = split_sources(["a", "b", "c"], test_fraction=0.01, seed=0)
    assert len(s.test) == 1
    with pytest.raises(RecipematchError, match="at least 2"):
        split_sources(["a", "a"], test_fraction=0.5, seed=0)
    with pytest.raises(RecipematchError, match="test_fraction"):
        split_sources(["a", "b"], test_fraction=0.0, seed=0)
    with pytest.raises(RecipematchError, match="test_fraction"):
        split_sources(["a", "b"], test_fraction=1.0, seed=0)


# --------------------------------------------------------------------------- AUC


def test_bootstrap_auc_point_estimate_by_hand():
    # positives 0.35 and 0.8 against negatives 0.1 and 0.4: 0.35 beats 0.1 only, 0.8 beats
    # both -> 3 of 4 pairs -> 0.75.
    r = bootstrap_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], ["a", "b", "a", "b"], n_boot=200, seed=0, level=0.95)
    assert r.auc == 0.75
    assert (r.n_pos, r.n_neg, r.n_sources) == (2, 2, 2)
    # a tie counts one half
    r = bootstrap_auc([0.5, 0.5, 0.2], [0, 1, 0], ["a", "a", "b"], n_boot=50, seed=0, level=0.95)
    assert r.auc == pytest.approx(0.75)  # pairs: (0.5 vs 0.5) = 1/2, (0.5 vs 0.2) = 1


def test_bootstrap_auc_replicates_equal_sklearn_on_repeated_documents():
    """The documented draw: default_rng(seed).integers(0, n_groups, (n_boot, n_groups)), each
    document weighted by its source's count; compare with sklearn's weighted AUC (ties in the
    scores included) and the shared percentile interval."""
    rng = np.random.default_rng(3)
    n_groups = 12
    groups = np.repeat([f"g{i:02d}" for i in range(n_groups)], 3)  # 3 docs per source
    labels = np.tile([0, 1, 1], n_groups)
    scores = np.round(rng.normal(size=groups.size) + 0.7 * labels, 1)  # rounding makes ties
    n_boot, seed = 150, 11
    got = bootstrap_auc(scores, labels, groups, n_boot=n_boot, seed=seed, level=0.9)
    # the one resampler's draw, by hand: floor(u * n), u the generator's doubles in replicate order
    draws = np.floor(np.random.default_rng(seed).random((n_boot, n_groups)) * n_groups).astype(np.int64)
    gidx = np.unique(groups, return_inverse=True)[1]
    reps = []
    for d in draws:
        w = np.bincount(d, minlength=n_groups)[gidx]
        if w[labels == 1].sum() and w[labels == 0].sum():
            reps.append(roc_auc_score(labels, scores, sample_weight=w))
    low, high = percentile_interval(reps, 0.9)
    assert got.n_boot_used == len(reps)
    assert got.low == pytest.approx(low, abs=1e-12) and got.high == pytest.approx(high, abs=1e-12)
    assert got.auc == pytest.approx(roc_auc_score(labels, scores), abs=1e-15)


def test_bootstrap_auc_ci_contains_estimate_and_is_deterministic():
    rng = np.random.default_rng(0)
    n = 80
    groups = np.repeat([_sid(i) for i in range(n)], 2)
    labels = np.tile([0, 1], n)
    scores = rng.normal(size=2 * n) + labels
    a = bootstrap_auc(scores, labels, groups, n_boot=2000, seed=5, level=0.95)
    assert a.low < a.auc < a.high
    assert 0.6 < a.auc < 0.9  # a one-sd shift gives about 0.76
    assert a.n_boot == a.n_boot_used == 2000
    b = bootstrap_auc(scores, labels, groups, n_boot=2000, seed=5, level=0.95)
    assert a == b
    c = bootstrap_auc(scores, labels, groups, n_boot=2000, seed=6, level=0.95)
    assert (c.low, c.high) != (a.low, a.high)


def test_bootstrap_auc_drops_replicates_without_both_classes():
    # one source holds the only positive: a replicate that misses it has no AUC
    r = bootstrap_auc([0.0, 1.0, 0.2, 0.3], [0, 1, 0, 0], ["a", "a", "b", "c"], n_boot=300, seed=1, level=0.95)
    # P(source a not drawn in 3 draws) = (2/3)^3 ~ 0.30
    assert 0 < r.n_boot_used < 300
    assert r.auc == 1.0 and r.low == 1.0 and r.high == 1.0


def test_bootstrap_auc_rejects_bad_input():
    with pytest.raises(RecipematchError, match="both classes"):
        bootstrap_auc([0.1, 0.2], [1, 1], ["a", "b"], n_boot=10, seed=0, level=0.95)
    with pytest.raises(RecipematchError, match="0 \\(organic\\) or 1"):
        bootstrap_auc([0.1, 0.2], [0, 2], ["a", "b"], n_boot=10, seed=0, level=0.95)
    with pytest.raises(RecipematchError, match="finite"):
        bootstrap_auc([0.1, np.nan], [0, 1], ["a", "b"], n_boot=10, seed=0, level=0.95)
    with pytest.raises(RecipematchError, match="one length"):
        bootstrap_auc([0.1, 0.2], [0, 1], ["a"], n_boot=10, seed=0, level=0.95)
    with pytest.raises(RecipematchError, match="n_boot"):
        bootstrap_auc([0.1, 0.2], [0, 1], ["a", "b"], n_boot=0, seed=0, level=0.95)


# --------------------------------------------------------------------------- probe


def _separable(n_sources: int):
    """Organic texts use 'we then find', rewrites 'determine suppose define'; each source's
    topic word (unique to it) appears on both sides, so only the register separates them."""
    organic = {_sid(i): f"we then find the value of topic{i:03d} so that it works" for i in range(n_sources)}
    rewrites = [(_sid(i), f"determine the value of topic{i:03d} suppose and define it") for i in range(n_sources)]
    return organic, rewrites


def test_perfectly_separable_texts_give_auc_one():
    organic, rewrites = _separable(40)
    report, det, _ = run_style_probe(organic, {"d1": rewrites}, train_prompt="d1", test_fraction=0.25, seed=3,
                                     n_boot=500, level=0.95, **PROBE)
    assert report.n_heldout_twins == 0
    row = report.row("d1")
    for auc in (row.stripped, row.unstripped):
        assert (auc.auc, auc.low, auc.high) == (1.0, 1.0, 1.0)
        assert auc.n_pos == auc.n_neg == auc.n_sources == 10
    top = det.top_features(3)

    def occurs(feature: str, texts) -> bool:
        return any(f" {feature} " in f" {t} " for t in texts)

    # the heaviest features on each side are n-grams of that side only
    assert all(occurs(f, [t for _, t in rewrites]) and not occurs(f, organic.values()) for f, _ in top["rewrite"])
    assert all(occurs(f, organic.values()) and not occurs(f, [t for _, t in rewrites]) for f, _ in top["organic"])
    assert all(c > 0 for _, c in top["rewrite"]) and all(c < 0 for _, c in top["organic"])


def test_artefact_only_signal_is_removed_by_stripping():
    """Organic = 'Problem: ' + the rewrite's exact text. Stripped, the two classes are the same
    documents, so the fitted weights stay at zero, every score ties and the AUC is exactly 0.5.
    Unstripped, the header is the only difference; each source's unique word is unseen at test
    time, so all held-out organic texts score alike, all rewrites score alike, and the header's
    negative weight puts every rewrite above every organic text: AUC exactly 1."""
    n = 30
    body = {_sid(i): f"solve the equation number w{i:04d} for all reals" for i in range(n)}
    organic = {s: f"Problem: {t}" for s, t in body.items()}
    rewrites = {"d1": sorted(body.items())}
    report, stripped, unstripped = run_style_probe(organic, rewrites, train_prompt="d1", test_fraction=0.3,
                                                   seed=0, n_boot=300, level=0.95, **PROBE)
    row = report.row("d1")
    assert (row.stripped.auc, row.stripped.low, row.stripped.high) == (0.5, 0.5, 0.5)
    assert (row.unstripped.auc, row.unstripped.low, row.unstripped.high) == (1.0, 1.0, 1.0)
    assert np.all(stripped.pipeline.named_steps["logreg"].coef_ == 0.0)
    assert unstripped.top_features(1)["organic"][0][0] == "problem"


def test_identical_distributions_give_auc_near_half_across_seeds():
    vocab = [f"word{i:02d}" for i in range(40)]
    aucs, covered = [], 0
    for seed in range(12):
        rng = np.random.default_rng(100 + seed)

        def doc() -> str:
            return " ".join(rng.choice(vocab, size=12))

        organic = {_sid(i): doc() for i in range(120)}
        rewrites = {"d1": [(_sid(i), doc()) for i in range(120)]}
        report, _, _ = run_style_probe(organic, rewrites, train_prompt="d1", test_fraction=0.4, seed=seed,
                                       n_boot=400, level=0.95, **PROBE)
        r = report.row("d1").stripped
        aucs.append(r.auc)
        covered += r.low <= 0.5 <= r.high
    # one AUC over 48 x 48 pairs has sd about sqrt(97 / (12 * 48 * 48)) = 0.059; the mean of 12
    # has sd 0.017, so 0.06 is three and a half sd.
    assert abs(np.mean(aucs) - 0.5) < 0.06
    assert covered >= 9  # expected about 11.4 of 12


def test_run_style_probe_scores_other_prompts_on_held_out_sources_only():
    organic, d1 = _separable(40)
    # D4: rewrites of only the first 30 sources, plus none for the rest
    d4 = [(_sid(i), f"restate: the value of topic{i:03d} suppose") for i in range(30)]
    report, _, _ = run_style_probe(organic, {"d4": d4, "d1": d1}, train_prompt="d1", test_fraction=0.25,
                                   seed=3, n_boot=200, level=0.95, **PROBE)
    assert [r.prompt for r in report.rows] == ["d1", "d4"]
    test = set(report.split.test)
    expected_pos = sum(1 for s, _ in d4 if s in test)
    row = report.row("d4")
    assert row.stripped.n_pos == expected_pos
    assert row.stripped.n_neg == len(test) == 10
    assert row.stripped.n_sources == 10
    # the same test sources in every row, so replicates are paired: same seed, same counts
    assert report.row("d1").stripped.n_sources == row.stripped.n_sources
    assert set(report.split.train).isdisjoint(test)


def test_run_style_probe_is_deterministic_and_serialises_flat():
    organic, d1 = _separable(30)
    d1 = [(s, t + (" which" if i % 3 == 0 else "")) for i, (s, t) in enumerate(d1)]
    organic = {s: t + (" suppose" if i % 4 == 0 else "") for i, (s, t) in enumerate(organic.items())}
    args = dict(train_prompt="d1", test_fraction=0.3, n_boot=300, level=0.95, **PROBE)
    a, _, _ = run_style_probe(organic, {"d1": d1}, seed=1, **args)
    b, _, _ = run_style_probe(organic, {"d1": d1}, seed=1, **args)
    assert json.dumps(a.to_metrics(), sort_keys=True) == json.dumps(b.to_metrics(), sort_keys=True)
    m = a.to_metrics()
    assert all(isinstance(v, (int, float, str)) for v in m.values())
    for key in ("d1.auc", "d1.auc_low", "d1.auc_high", "d1.unstripped.auc", "d1.unstripped.auc_low",
                "n_train_sources", "n_test_sources", "train_prompt"):
        assert key in m
    c, _, _ = run_style_probe(organic, {"d1": d1}, seed=2, **args)
    assert c.split.test != a.split.test


def test_run_style_probe_counts_heldout_twins_of_training_texts():
    organic, d1 = _separable(20)
    split = split_sources(organic, test_fraction=0.25, seed=9)
    # one held-out source's organic text is a training source's text under another id, up to
    # a "Problem:" header that stripping removes
    organic[split.test[0]] = "Problem: " + organic[split.train[0]]
    report, _, _ = run_style_probe(organic, {"d1": d1}, train_prompt="d1", test_fraction=0.25, seed=9,
                                   n_boot=50, level=0.95, **PROBE)
    assert report.split == split
    assert report.n_heldout_twins == 1
    assert report.to_metrics()["n_heldout_twins"] == 1


def test_run_style_probe_rejects_bad_input():
    organic, d1 = _separable(10)
    with pytest.raises(RecipematchError, match="train_prompt 'd2'"):
        run_style_probe(organic, {"d1": d1}, train_prompt="d2", test_fraction=0.3, seed=0, n_boot=10,
                        level=0.95, **PROBE)
    bad = d1 + [("nope", "a rewrite with no source")]
    with pytest.raises(RecipematchError, match="'nope' with no organic text"):
        run_style_probe(organic, {"d1": bad}, train_prompt="d1", test_fraction=0.3, seed=0, n_boot=10,
                        level=0.95, **PROBE)
    # a second prompt whose sources are all in the training split
    split = split_sources(organic, test_fraction=0.3, seed=0)
    d4 = [(s, "restated text here") for s in split.train]
    with pytest.raises(RecipematchError, match="'d4' has no rewrite of a held-out source"):
        run_style_probe(organic, {"d1": d1, "d4": d4}, train_prompt="d1", test_fraction=0.3, seed=0,
                        n_boot=10, level=0.95, **PROBE)


def test_fit_style_probe_rejects_bad_input():
    with pytest.raises(RecipematchError, match="both classes"):
        fit_style_probe([], ["x y"], strip=True, **PROBE)
    with pytest.raises(RecipematchError, match=r"organic\[1\] is int"):
        fit_style_probe(["ab cd", 3], ["x y"], strip=True, **PROBE)
    with pytest.raises(RecipematchError, match="ngram_range"):
        fit_style_probe(["ab"], ["cd"], strip=True, ngram_range=(2, 1), C=1.0, max_iter=10)
    with pytest.raises(RecipematchError, match="cannot fit"):
        fit_style_probe(["a"], ["b"], strip=True, **PROBE)  # one-letter tokens only: empty vocabulary


# --------------------------------------------------------------------------- tracking


def test_spearman_hand_values():
    sims = np.array([[1.0, 2.0, 3.0, 4.0],
                     [4.0, 3.0, 2.0, 1.0],
                     [1.0, 3.0, 2.0, 4.0],
                     [5.0, 5.0, 5.0, 5.0]])
    style = np.array([10.0, 20.0, 30.0, 40.0])
    rho = similarity_style_spearman(sims, style)
    # row 3: rank differences (0, 1, -1, 0), sum d^2 = 2, rho = 1 - 6 * 2 / (4 * 15) = 0.8
    assert rho[:3] == pytest.approx([1.0, -1.0, 0.8], abs=1e-12)
    assert np.isnan(rho[3])  # constant similarities: undefined


def test_spearman_matches_scipy_with_ties_and_mask():
    rng = np.random.default_rng(0)
    sims = np.round(rng.normal(size=(7, 25)), 1)
    style = np.round(rng.normal(size=25), 1)
    rho = similarity_style_spearman(sims, style)
    for i in range(7):
        assert rho[i] == pytest.approx(spearmanr(sims[i], style).statistic, abs=1e-12)
    mask = np.zeros_like(sims, dtype=bool)
    mask[np.arange(7), [0, 3, 5, 5, 24, 1, 2]] = True
    mask[6] = False  # a row without a masked document
    rho_m = similarity_style_spearman(sims, style, mask=mask)
    for i in range(7):
        keep = ~mask[i]
        assert rho_m[i] == pytest.approx(spearmanr(sims[i, keep], style[keep]).statistic, abs=1e-12)


def test_style_percentiles_by_hand():
    p = style_percentiles([10.0, 40.0, 20.0, 30.0])
    assert p.tolist() == [12.5, 87.5, 37.5, 62.5]
    t = np.array([1.0, 1.0, 2.0, 5.0, 5.0, 5.0])
    p = style_percentiles(t)
    assert p.mean() == pytest.approx(50.0)
    assert p == pytest.approx([percentileofscore(t, x, kind="mean") for x in t])


def test_top_k_style_percentile_by_hand():
    style = np.array([10.0, 20.0, 30.0, 40.0])  # percentiles 12.5, 37.5, 62.5, 87.5
    sims = np.array([[0.9, 0.1, 0.8, 0.2],
                     [0.5, 0.5, 0.5, 0.5],
                     [0.1, 0.2, 0.3, 0.4]])
    assert top_k_style_percentile(sims, style, k=2).tolist() == [37.5, 25.0, 75.0]
    assert top_k_style_percentile(sims, style, k=1).tolist() == [12.5, 12.5, 87.5]  # tie -> lower index
    mask = np.zeros_like(sims, dtype=bool)
    mask[:, 0] = True
    assert top_k_style_percentile(sims, style, k=1, mask=mask).tolist() == [62.5, 37.5, 87.5]
    with pytest.raises(RecipematchError, match="top_k"):
        top_k_style_percentile(sims, style, k=4, mask=mask)


def test_top_k_matches_stable_argsort_with_many_ties():
    rng = np.random.default_rng(5)
    sims = rng.integers(0, 4, size=(30, 40)).astype(float)  # heavy ties
    style = rng.normal(size=40)
    pct = style_percentiles(style)
    for k in (1, 3, 10, 40):
        want = pct[np.argsort(-sims, axis=1, kind="stable")[:, :k]].mean(axis=1)
        assert top_k_style_percentile(sims, style, k=k) == pytest.approx(want, abs=1e-12)


def _circle(angles_deg):
    a = np.deg2rad(np.asarray(angles_deg, dtype=float))
    return np.c_[np.cos(a), np.sin(a)]


def test_style_tracking_on_constructed_embeddings():
    """Documents on the unit circle at 0..150 degrees; a query at 0 degrees has cosine falling
    with the angle. Style = angle: the model prefers low-style documents, rho = -1, and its
    top-2 are the two lowest-style documents (percentiles 100 * (0.5, 1.5) / 6 -> 16.67)."""
    docs = _circle([0, 30, 60, 90, 120, 150])
    style = np.array([0.0, 30.0, 60.0, 90.0, 120.0, 150.0])
    queries = 3.0 * _circle([0, 0, 150])  # scale does not matter: cosine
    res = style_tracking(queries, docs, style, n_queries=10, seed=0, top_k=2)
    assert res.query_indices == (0, 1, 2)
    assert res.rho_per_query == pytest.approx((-1.0, -1.0, 1.0))
    assert res.rho_mean == pytest.approx(-1.0 / 3.0)
    assert res.top_k_percentile_per_query == pytest.approx((100 / 6, 100 / 6, 100 * 5 / 6))
    # the query's own entry left out: query 0 is document 0
    res = style_tracking(queries, docs, style, n_queries=10, seed=0, top_k=2, exclude_doc=np.array([0, -1, 5]))
    assert res.rho_per_query == pytest.approx((-1.0, -1.0, 1.0))
    # query 0 without doc 0: top-2 docs 1, 2 -> (1.5 + 2.5) / 6 * 100; query 2 without doc 5: docs 4, 3
    assert res.top_k_percentile_per_query == pytest.approx((100 * 2 / 6, 100 / 6, 100 * 4 / 6))
    m = res.to_metrics("base.")
    assert m["base.n_queries"] == 3 and m["base.top_k"] == 2 and "base.rho_mean" in m


def test_style_tracking_samples_queries_seeded():
    rng = np.random.default_rng(1)
    q, c = rng.normal(size=(50, 8)), rng.normal(size=(40, 8))
    style = rng.normal(size=40)
    a = style_tracking(q, c, style, n_queries=20, seed=4, top_k=5)
    b = style_tracking(q, c, style, n_queries=20, seed=4, top_k=5)
    assert a == b
    assert a.query_indices == tuple(sample_queries(50, 20, seed=4).tolist())
    assert len(set(a.query_indices)) == 20
    assert style_tracking(q, c, style, n_queries=20, seed=5, top_k=5).query_indices != a.query_indices
    # each sampled query's rho is scipy's on its own row
    sims = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (c / np.linalg.norm(c, axis=1, keepdims=True)).T
    for i, r in zip(a.query_indices, a.rho_per_query):
        assert r == pytest.approx(spearmanr(sims[i], style).statistic, abs=1e-12)


def test_style_tracking_rejects_bad_input():
    docs = _circle([0, 30, 60])
    with pytest.raises(RecipematchError, match="2 style scores for 3 corpus documents"):
        style_tracking(docs, docs, [1.0, 2.0], n_queries=2, seed=0, top_k=1)
    with pytest.raises(RecipematchError, match="dim"):
        style_tracking(np.ones((2, 3)), docs, [1.0, 2.0, 3.0], n_queries=2, seed=0, top_k=1)
    with pytest.raises(RecipematchError, match="zero vector"):
        style_tracking(np.zeros((1, 2)), docs, [1.0, 2.0, 3.0], n_queries=1, seed=0, top_k=1)
    with pytest.raises(RecipematchError, match="exclude_doc"):
        style_tracking(docs, docs, [1.0, 2.0, 3.0], n_queries=3, seed=0, top_k=1, exclude_doc=np.array([0, 1, 3]))


def test_sample_d1_rewrites_are_detected_above_chance():
    """On the shipped sample (corpus problems vs the D1 positives of the same sources), the
    held-out stripped AUC's interval lies above chance (Appendix C reports 0.880 on the full
    files); skipped locally when data/ has not been pulled."""
    release = require_real_data()
    table = load_beir_corpus(release / "corpus.jsonl").table
    organic = dict(zip(table["doc_id"], table["text"]))
    d1 = [(r["source_id"], r["positive_text"]) for r in read_jsonl_strict(release / "pairs_d1_recipe.jsonl")]
    report, _, _ = run_style_probe(organic, {"d1": d1}, train_prompt="d1", test_fraction=0.3, seed=0, n_boot=300,
                                   level=0.95, **PROBE)
    row = report.row("d1")
    assert row.stripped.low > 0.5 and row.unstripped.low > 0.5
    assert row.stripped.n_pos == row.stripped.n_neg == len(report.split.test)
