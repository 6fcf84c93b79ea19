"""The numbers of an audit (:mod:`recipematch.audit`), computed by the ``audit-report``
stage (:mod:`recipematch.pipeline.audit`): the recipe-sensitivity gap with its nested-bootstrap
interval (Appendix A), the style probe of the benchmark's golds (Appendix C), and the
identity of the prompts used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recipematch.beir import doc_text, positive_qrels
from recipematch.benchmarks_data import load_set
from recipematch.errors import RecipematchError
from recipematch.llm.prompts import load_custom_prompt, load_prompt
from recipematch.pipeline.stats import hit_matrix
from recipematch.stats import nested_bootstrap_gap


def gap_dict(bi: Any) -> dict[str, Any]:
    """The fields of a :class:`recipematch.stats.BootstrapInterval` that ``audit.json`` records."""
    d = bi.to_dict()
    return {k: d[k] for k in ("estimate", "low", "high", "level", "n_boot", "seeds", "scheme", "n_seeds_a",
                              "n_seeds_b", "n_queries")}


def compute_gap(ranks_a, ranks_b, *, n_boot: int, seed: int, paired_seeds: bool):
    """Nested-bootstrap R@1 gap ``a − b`` in points from two per-query rank tables (columns
    ``seed``, ``query_id``, ``rank``; Appendix A), via :func:`recipematch.stats.nested_bootstrap_gap`.

    Returns:
        ``(BootstrapInterval, hits_a, hits_b, clusters)`` with hits in points, shape
        ``(n_seeds, n_queries)``.

    Raises:
        RecipematchError: the two tables score different queries.
    """
    ha, qa, ca = hit_matrix(ranks_a, 1)
    hb, qb, _ = hit_matrix(ranks_b, 1)
    if qa != qb:
        raise RecipematchError("the two arms were scored on different queries: rerun the evaluate stages")
    g = nested_bootstrap_gap(100 * ha, 100 * hb, n_boot=n_boot, seed=seed, clusters=ca, paired_seeds=paired_seeds)
    return g, 100 * ha, 100 * hb, ca


def style_probe_benchmark(folder: Path, *, test_fraction: float, seed: int, n_boot: int, level: float, C: float,
                          max_iter: int) -> dict[str, Any]:
    """Style-probe AUC of organic text vs the benchmark's gold documents (Appendix C): each
    scored query is an organic source and its positive golds are its rewrites; the detector
    (word 1–2-gram tf-idf + logistic regression) trains on the train sources and is scored on
    held-out sources, bootstrap over sources (:func:`recipematch.style.run_style_probe`).

    Returns:
        ``{auc, low, high, auc_unstripped, low_unstripped, high_unstripped, n_pos, n_neg,
        n_test_sources}`` (AUC in [0, 1]).
    """
    from recipematch.style import run_style_probe  # pandas + scikit-learn: loaded when the probe runs

    bset = load_set(folder, "plain", name="benchmark")
    pos = positive_qrels(bset.qrels)
    organic = {q: bset.queries[q] for q in bset.query_ids}
    rewrites = {"benchmark": [(q, doc_text(bset.corpus[d])) for q in bset.query_ids for d in sorted(pos.get(q, ()))]}
    rep, _, _ = run_style_probe(organic, rewrites, train_prompt="benchmark", test_fraction=test_fraction, seed=seed,
                                n_boot=n_boot, level=level, ngram_range=(1, 2), C=C, max_iter=max_iter)
    row = rep.row("benchmark")
    s, u = row.stripped, row.unstripped
    return {"auc": float(s.auc), "low": float(s.low), "high": float(s.high), "auc_unstripped": float(u.auc),
            "low_unstripped": float(u.low), "high_unstripped": float(u.high), "n_pos": int(s.n_pos),
            "n_neg": int(s.n_neg), "n_test_sources": int(s.n_sources)}


def prompt_identity(name: str, sidecar: Path | None) -> dict[str, str]:
    """``{name, sha256}`` of a shipped prompt or a user's sidecar prompt (template SHA-256 of
    :class:`recipematch.llm.prompts.PromptTemplate`)."""
    t = load_custom_prompt(sidecar).template if sidecar is not None else load_prompt(name)
    return {"name": t.name, "sha256": t.sha256}
