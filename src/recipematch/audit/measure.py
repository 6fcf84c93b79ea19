"""What an audit (:mod:`recipematch.audit`) measures besides the stats stage's numbers, for the
``audit-report`` stage (:mod:`recipematch.pipeline.audit`): the style probe of the
benchmark's golds (Appendix C) and the identity of the prompts used. The recipe-sensitivity
gap and its DiD are the stats stage's (the contrast ``recipe - cell``; Appendix A)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recipematch.beir import doc_text, positive_qrels
from recipematch.benchmarks_data import load_set
from recipematch.errors import RecipematchError
from recipematch.llm.prompts import load_custom_prompt, load_prompt


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
