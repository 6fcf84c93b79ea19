"""Stage ``audit``: the recipe-sensitivity number of an audited benchmark and its one-page
report (paper Section 8, practice iv; Table 1's arms, Appendix A's nested bootstrap and
difference in differences, Appendix C's style probe). Writes ``audit.json`` (schema:
:mod:`recipematch.audit`), ``reports/audit.md`` and ``reports/audit.png``."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from recipematch.beir import corpus_sha256, qrels_sha256, queries_sha256, read_beir
from recipematch.audit.report import plot_audit, render_report, SCHEMA
from recipematch.audit.project import AUDIT_CONTRAST
from recipematch.audit.measure import compute_gap, gap_dict, prompt_identity, style_probe_benchmark
from recipematch import __version__
from recipematch.errors import RecipematchError
from recipematch.io import read_json, read_jsonl_strict, sha256_file, write_json
from recipematch.metrics import metric_key
from recipematch.pipeline.door import Layout, stage
from recipematch.pipeline.inputs import train_seeds
from recipematch.pipeline.stats import BASELINES, hit_matrix
from recipematch.rules import CellSpec, NAMED_ARMS, POSITIVES
from recipematch.stats import did_bootstrap, mean_sd

PARAMS = ("arms", "positives", "negatives", "negatives_volume", "evaluations", "stats", "style", "train.seed",
          "train.n_seeds", "train.model", "budget", "llm", "data")


def _ranks(lay: Layout, arm: str, name: str):
    import pandas as pd

    path = lay.eval_dir(arm) / f"{name}.parquet"
    if not path.exists():
        raise RecipematchError(f"{path} does not exist: rerun the evaluate stage of {arm!r}")
    df = pd.read_parquet(path)
    df["seed"] = df["seed"].astype(str)
    return df


def run(p, lay: Layout) -> dict:
    """Recipe sensitivity (recipe − control, benchmark R@1, points) with its interval, the DiD
    against the generator-free set, the style probe; ``audit.json`` and the report."""
    a, b = AUDIT_CONTRAST
    if a not in p.arms or b not in p.arms:
        raise RecipematchError(f"arms must list {a!r} and {b!r} for an audit, got {list(p.arms)}")
    bench = [n for n, ev in sorted(p.evaluations.items()) if ev.role == "benchmark"]
    real = [n for n, ev in sorted(p.evaluations.items()) if ev.role == "real"]
    s = p.stats
    bn = bench[0]
    gap, ha, hb, bc = compute_gap(_ranks(lay, a, bn), _ranks(lay, b, bn), n_boot=s.n_boot, seed=s.seed,
                                 paired_seeds=s.paired_seeds)
    rs = {"metric": "R@1", "evaluation": bn, "contrast": f"{a} - {b}", "units": "points", **gap_dict(gap)}
    did = None
    if real:
        rn = real[0]
        ra, qa, ca = hit_matrix(_ranks(lay, a, rn), 1)
        rb, qb, _ = hit_matrix(_ranks(lay, b, rn), 1)
        if qa != qb:
            raise RecipematchError(f"arms {a} and {b} were scored on different {rn} queries: rerun evaluate")
        d = did_bootstrap(ha, hb, 100 * ra, 100 * rb, n_boot=s.n_boot, seed=s.seed, real_clusters=ca, bench_clusters=bc,
                          paired_seeds=s.paired_seeds)
        did = {"real": rn, **{k: v for k, v in gap_dict(d.did).items() if k in ("estimate", "low", "high", "level")},
               "gap_real": {k: d.gap_real.to_dict()[k] for k in ("estimate", "low", "high")}}
    scores: dict[str, Any] = {}
    for m in [*BASELINES, a, b]:
        scores[m] = {}
        for name in [*bench, *real]:
            h, _, _ = hit_matrix(_ranks(lay, m, name), 1)
            per_seed = [round(float(x), 4) for x in 100.0 * h.mean(axis=1)]
            mu, sd = mean_sd(per_seed)
            scores[m][metric_key(name, 1)] = {"mean": round(float(mu), 4), "sd": None if sd != sd else round(float(sd), 4),
                                        "per_seed": per_seed}
    st = p.style
    style = style_probe_benchmark(lay.p(p.evaluations[bn].folder), test_fraction=st.test_fraction, seed=st.seed,
                                  n_boot=st.n_boot, level=st.level, C=st.C, max_iter=st.max_iter)
    control_prompt = POSITIVES[p.positives]
    recipe_sidecar = lay.p(p.llm.recipe_prompt) if p.llm.recipe_prompt else None
    judge = prompt_identity("judge", None)

    def bset_hashes(name: str) -> dict[str, Any]:
        folder = p.evaluations[name].folder
        ds = read_beir(lay.p(folder))
        return {"folder": folder, "corpus_sha256": corpus_sha256(ds.corpus), "queries_sha256": queries_sha256(ds.queries),
                "qrels_sha256": qrels_sha256(ds.qrels), "queries": len(ds.queries), "documents": len(ds.corpus)}

    gates = read_json(lay.metrics / "gates.json")
    corpus = read_json(lay.metrics / "corpus.json")
    n_sources = int(corpus["rows_ok"])
    removed = int(gates[gates["active"]]["corpus_ids_excluded"])
    pairs = {}
    for key in ("d1_recipe", control_prompt):
        path = lay.pairs / f"{key}.jsonl"
        pairs[key] = len(read_jsonl_strict(path)) if path.exists() else 0
    audit = {
        "schema": SCHEMA,
        "recipe_sensitivity": rs,
        "did": did,
        "style_probe": style,
        "scores": scores,
        "arms": {a: {"cell": NAMED_ARMS[a].name, "prompt": "d1_recipe"},
                 b: {"cell": CellSpec(p.positives, p.negatives, p.negatives_volume).name, "prompt": control_prompt}},
        "seeds": train_seeds(p.train.seed, p.train.n_seeds),
        "budget": {k: v for k, v in asdict(p.budget).items() if k in ("rows", "dev_fraction", "max_rows_per_source")},
        "model": {"base_model": p.train.model, "generator": p.llm.model_id, "judge": p.llm.judge_model_id,
                  "backend": p.llm.backend, "base_url": p.llm.base_url},
        "prompts": {"recipe": prompt_identity("d1_recipe", recipe_sidecar),
                    "control": prompt_identity(control_prompt, None), "judge": judge},
        "data": {"benchmark": bset_hashes(bn), "real": bset_hashes(real[0]) if real else None,
                 "sources": {"path": p.data.path, "sha256": sha256_file(lay.p(p.data.path)), "rows": n_sources}},
        "gates": {"active": gates["active"], "sources": n_sources, "sources_removed": removed,
                  "sources_kept": n_sources - removed},
        "pairs": pairs,
        "recipematch_version": __version__,
    }
    write_json(lay.root / "audit.json", audit)
    lay.reports.mkdir(parents=True, exist_ok=True)
    plot_audit(audit, lay.reports / "audit.png")
    (lay.reports / "audit.md").write_text(render_report(audit, "audit.png"), encoding="utf-8")
    return {"recipe_sensitivity": {k: rs[k] for k in ("estimate", "low", "high")},
            "did": None if did is None else {k: did[k] for k in ("estimate", "low", "high")},
            "style_probe_auc": style["auc"]}


main = stage("audit", PARAMS)(run)
