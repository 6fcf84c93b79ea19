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
from recipematch.audit.measure import prompt_identity, style_probe_benchmark
from recipematch import __version__
from recipematch.errors import RecipematchError
from recipematch.tracking import finite_value
from recipematch.io import read_json, read_jsonl_strict, sha256_file, write_json
from recipematch.metrics import metric_key
from recipematch.pipeline.door import StagePaths, stage
from recipematch.pipeline.inputs import pair_path, train_seeds
from recipematch.rules import BASELINES, CellSpec, NAMED_ARMS, POSITIVES

PARAMS = ("arms", "positives", "negatives", "negatives_volume", "evaluations", "style", "train.seed",
          "train.n_seeds", "train.model", "budget", "llm", "data")

#: the fields of a bootstrap interval that ``audit.json`` records (Appendix A)
INTERVAL_FIELDS = ("estimate", "low", "high", "level", "n_boot", "seeds", "scheme", "n_seeds_a", "n_seeds_b",
                   "n_queries")


def _stats_entry(stats: Any, section: str, key: str, what: str, *, numbers: tuple[str, ...] = (),
                 fields: tuple[str, ...] = ()) -> dict:
    """One entry of ``stats.json`` (written by the stats stage), checked: a mapping
    holding ``fields``, of which ``numbers`` are finite numbers; an interval's ``low`` is at
    most its ``high``.

    Raises:
        RecipematchError: naming the entry and the field (rerun the stats stage).
    """
    where = f"stats.json {section}[{key!r}] ({what})"  # section: a top-level key or an arm
    if not isinstance(stats, dict) or not isinstance(stats.get(section), dict):
        raise RecipematchError(f"stats.json has no {section!r} mapping: rerun the stats stage (`dvc repro stats`)")
    if key not in stats[section]:
        raise RecipematchError(f"stats.json has no {section}[{key!r}] ({what}): rerun the stats stage "
                               "with the audit's params (`dvc repro stats`)")
    entry = stats[section][key]
    if not isinstance(entry, dict):
        raise RecipematchError(f"{where} is not a mapping: rerun the stats stage")
    for f in (*fields, *numbers):
        if f not in entry:
            raise RecipematchError(f"{where} lacks {f!r}: rerun the stats stage")
    for f in numbers:
        finite_value(entry[f], f"{where}: {f} (rerun the stats stage)")
    if "low" in numbers and "high" in numbers and entry["low"] > entry["high"]:
        raise RecipematchError(f"{where}: low {entry['low']} is above high {entry['high']}: rerun the stats stage")
    return entry


def _per_seed(row: dict, where: str, n_seeds: int | None) -> list[float]:
    """An arm's per-seed scores: finite numbers, one per training seed when ``n_seeds`` is given."""
    v = row.get("per_seed")
    if not isinstance(v, list) or not v:
        raise RecipematchError(f"{where}: per_seed is {v!r}, not a non-empty list of finite numbers: "
                               "rerun the stats stage")
    for x in v:
        finite_value(x, f"{where}: per_seed (rerun the stats stage)")
    if n_seeds is not None and len(v) != n_seeds:
        raise RecipematchError(f"{where}: {len(v)} per-seed score(s) but the params train {n_seeds} seed(s): "
                               "rerun the stats stage with the audit's params")
    return v


def run(p, lay: StagePaths) -> dict:
    """Recipe sensitivity (recipe − control, benchmark R@1, points) with its interval and the
    DiD against the generator-free set, both as the stats stage computed them
    (``stats.json``, the contrast ``recipe - cell`` of ``contrasts``); the style
    probe; ``audit.json`` and the report."""
    a, b = AUDIT_CONTRAST
    if a not in p.arms or b not in p.arms:
        raise RecipematchError(f"arms must list {a!r} and {b!r} for an audit, got {list(p.arms)}")
    bench = [n for n, ev in sorted(p.evaluations.items()) if ev.role == "benchmark"]
    real = [n for n, ev in sorted(p.evaluations.items()) if ev.role == "real"]
    bn = bench[0]
    stats = read_json(lay.metrics_dir / "stats.json")
    pair = f"{a}-{b}"
    interval = ("estimate", "low", "high", "level")
    gap = _stats_entry(stats, "gaps", metric_key(bn, 1, pair), f"the {a} - {b} contrast on {bn}",
                       numbers=interval, fields=INTERVAL_FIELDS)
    rs = {"metric": "R@1", "evaluation": bn, "contrast": f"{a} - {b}", "units": "points",
          **{k: gap[k] for k in INTERVAL_FIELDS}}
    did = None
    if real:
        rn = real[0]
        key = f"{pair}.{bn}-{rn}.R@1"
        _stats_entry(stats, "did", key, f"the difference in differences against {rn}", fields=("did", "gap_real"))
        dd = _stats_entry(stats["did"], key, "did", "its estimate", numbers=interval)
        gr = _stats_entry(stats["did"], key, "gap_real", f"the gap on {rn}", numbers=interval[:3])
        did = {"real": rn, **{k: dd[k] for k in interval}, "gap_real": {k: gr[k] for k in interval[:3]}}
    scores: dict[str, Any] = {}
    n_seeds = len(train_seeds(p.train.seed, p.train.n_seeds))
    for m in [*BASELINES, a, b]:
        scores[m] = {}
        for name in [*bench, *real]:
            key = metric_key(name, 1)
            _stats_entry(stats, "arms", m, f"the scores of {m}")
            row = _stats_entry(stats["arms"], m, key, f"arms[{m!r}]: the scores of {m}", numbers=("mean",),
                               fields=("sd", "per_seed"))
            sd = row["sd"]  # None: one seed
            if sd is not None:
                finite_value(sd, f"stats.json arms[{m!r}][{key!r}]: sd (rerun the stats stage)")
            per_seed = _per_seed(row, f"stats.json arms[{m!r}][{key!r}]",
                                 n_seeds if m in (a, b) else None)
            scores[m][key] = {"mean": row["mean"], "sd": row["sd"], "per_seed": per_seed}
    st = p.style
    style = style_probe_benchmark(lay.root / p.evaluations[bn].folder, test_fraction=st.test_fraction, seed=st.seed,
                                  n_boot=st.n_boot, level=st.level, C=st.C, max_iter=st.max_iter)
    control_prompt = POSITIVES[p.positives]
    recipe_sidecar = (lay.root / p.llm.recipe_prompt) if p.llm.recipe_prompt else None
    judge = prompt_identity("judge", None)

    def bset_hashes(name: str) -> dict[str, Any]:
        folder = p.evaluations[name].folder
        ds = read_beir(lay.root / folder)
        return {"folder": folder, "corpus_sha256": corpus_sha256(ds.corpus), "queries_sha256": queries_sha256(ds.queries),
                "qrels_sha256": qrels_sha256(ds.qrels), "queries": len(ds.queries), "documents": len(ds.corpus)}

    gates = read_json(lay.metrics_dir / "gates.json")
    corpus = read_json(lay.metrics_dir / "corpus.json")
    n_sources = int(corpus["rows_ok"])
    removed = int(gates[gates["active"]]["corpus_ids_excluded"])
    pairs = {}
    for key in ("d1_recipe", control_prompt):
        path = pair_path(lay.pairs, key)
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
                 "sources": {"path": p.data.path, "sha256": sha256_file(lay.root / p.data.path), "rows": n_sources}},
        "gates": {"active": gates["active"], "sources": n_sources, "sources_removed": removed,
                  "sources_kept": n_sources - removed},
        "pairs": pairs,
        "recipematch_version": __version__,
    }
    write_json(lay.summary, audit)
    lay.out.mkdir(parents=True, exist_ok=True)
    plot_audit(audit, lay.out / "audit.png")
    (lay.out / "audit.md").write_text(render_report(audit, "audit.png"), encoding="utf-8")
    return {"recipe_sensitivity": {k: rs[k] for k in ("estimate", "low", "high")},
            "did": None if did is None else {k: did[k] for k in ("estimate", "low", "high")},
            "style_probe_auc": style["auc"]}


main = stage("audit", PARAMS, reads=("metrics_dir", "pairs"), writes=("out", "summary"))(run)
