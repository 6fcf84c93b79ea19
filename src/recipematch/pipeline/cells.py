"""Stage ``cells@<arm>``: assemble one arm, gate it, draw each training seed's matched budget
(paper Section 3, Tables 2 and 11–12, Appendix B)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from recipematch.cells import assemble_cell, budget_rows, MissingInput
from recipematch.errors import RecipematchError
from recipematch.io import write_json, write_jsonl
from recipematch.pipeline.door import StagePaths, arm_option, check_device, stage, write_run_record
from recipematch.pipeline.inputs import arm_spec_from_file, train_seeds
from recipematch.pipeline.models import contamination_gate
from recipematch.pipeline.pair_sources import cell_pair_path, cell_pairs
from recipematch.rules import NAMED_ARMS

PARAMS = ("seed", "train.seed", "train.n_seeds", "budget", "gates", "train.model", "judge2.cells")


def run(p, lay: StagePaths, arm: str) -> dict:
    """Stage 5: assemble one arm, gate it, draw each seed's matched budget."""
    check_device("devices.cosine_gate", p.devices.cosine_gate)
    spec = arm_spec_from_file(lay, arm)
    bcfg, seed = p.budget, p.seed
    pair_files = {k: rows for k in spec.inputs() if (rows := cell_pairs(lay, k, judges=p.judge2.cells)) is not None}
    try:
        pool, asm_counts = assemble_cell(spec, pair_files, seed=seed)
    except MissingInput as e:
        raise RecipematchError(f"cells[{arm}]: {e}") from None
    gate, ex_path = contamination_gate(p, lay)
    kept, gate_counts, drops = gate.apply(pool, cosine=False)
    source_list = None
    if arm in bcfg.shared_sources:
        source_list = _shared_source_list(bcfg.shared_sources, lay, seed=seed, gate=gate, judges=p.judge2.cells)
    out = lay.out
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "pool.jsonl", kept)
    seeds = {}
    for s in train_seeds(p.train.seed, p.train.n_seeds):
        chosen, info = budget_rows(kept, n_rows=bcfg.rows, seed=s, dev_fraction=bcfg.dev_fraction,
                                   max_rows_per_source=bcfg.max_rows_per_source or None,
                                   row_filter=gate.cosine_filter, source_list=source_list)
        write_jsonl(out / f"seed_{s}.jsonl", chosen)
        filtered = info.pop("filtered")
        drops.extend({**d, "seed": s} for d in filtered)
        info["cosine_gate_rows_dropped"] = sum(d["what"] == "row" for d in filtered)
        info["cosine_gate_negatives_dropped"] = sum(d["what"] == "negative" for d in filtered)
        seeds[str(s)] = info
    write_jsonl(out / "drops.jsonl", drops)
    counts = {"arm": arm, "cell": spec.name, "assemble": asm_counts, "gates": gate_counts, "budget": seeds}
    write_json(out / "cell.json", {"arm": arm, "spec": asdict(spec), "name": spec.name})
    write_json(lay.metrics, counts)
    write_run_record(out, f"cells:{arm}", {"spec": asdict(spec), "budget": asdict(bcfg), "gates": asdict(p.gates),
                                           "seed": seed},
                     {**{k: cell_pair_path(lay, k, judges=p.judge2.cells) for k in pair_files}, "exclusion": ex_path}, counts)
    return counts


def _shared_source_list(arms: Sequence[str], lay: StagePaths, *, seed: int, gate, judges: str = "first") -> list[str]:
    """Sources every arm in ``arms`` can draw from after the gate (paper Appendix A: both
    arms of a comparison drawn from the same source list). Only named arms may share a list."""
    common: set[str] | None = None
    for a in arms:
        spec = NAMED_ARMS[a]
        files = {k: rows for k in spec.inputs() if (rows := cell_pairs(lay, k, judges=judges)) is not None}
        pool, _ = assemble_cell(spec, files, seed=seed)
        kept, _, _ = gate.apply(pool, cosine=False)
        srcs = {r["source_id"] for r in kept}
        common = srcs if common is None else common & srcs
    return sorted(common or ())


main = stage("cells", PARAMS, arm_option, reads=("spec", "pairs", "backtranslate", "judge2", "judge2_cells", "evalsets", "gates", "cache"), writes=("out", "metrics"))(run)
