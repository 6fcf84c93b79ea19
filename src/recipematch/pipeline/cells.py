"""Stages 5a-5b: cell specs and cell assembly with gates and matched budgets."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from recipematch.config import (
    BudgetConfig,
    EvaluateConfig,
    GatesConfig,
    TrainConfig,
    section,
    top,
)
from recipematch.io import read_json, write_json, write_jsonl
from recipematch.pairs import read_pair_file
from recipematch.pipeline.common import (
    Layout,
    arm_spec,
    eval_texts,
    load_exclusion,
    read_pairs,
    resolve_model,
    spec_from_file,
    train_seeds,
    write_run_record,
)

log = logging.getLogger("recipematch")

def run_specs(params: Mapping[str, Any], lay: Layout) -> dict:
    """One spec file per arm (``artifacts/specs/<arm>.json``), so that changing the cell
    under test (``positives``/``negatives``/``negatives_volume``) changes only ``cell.json``
    and DVC reruns only that arm's downstream stages."""
    from recipematch.config import top

    arms = list(top(params, "arms", list[str]))
    if len(set(arms)) != len(arms):
        raise ValueError(f"arms lists a name twice: {arms}")
    out = {}
    for a in arms:
        spec = arm_spec(params, a)
        out[a] = {"arm": a, "name": spec.name, **asdict(spec)}
        write_json(lay.p("artifacts", "specs", f"{a}.json"), out[a])
    return out




def run_cells(params: Mapping[str, Any], lay: Layout, arm: str) -> dict:
    """Assemble one arm, gate it, and draw each training seed's matched budget (SPEC §3.4, §5)."""
    from recipematch.cells import MissingInput, apply_gates, assemble_cell, budget_rows
    from recipematch.gates import NgramGate

    spec = spec_from_file(lay, arm)
    bcfg = section(params, "budget", BudgetConfig)
    gcfg = section(params, "gates", GatesConfig)
    seed = top(params, "seed", int)
    pair_files = {}
    for key in spec.inputs():
        path = lay.pairs / f"{key}.jsonl"
        if path.exists():
            pair_files[key] = read_pair_file(path)  # file, line and field named on a bad row
    try:
        pool, asm_counts = assemble_cell(spec, pair_files, seed=seed)
    except MissingInput as e:
        raise SystemExit(f"cells[{arm}]: {e}") from None
    ex, ex_path = load_exclusion(lay, params)
    texts = eval_texts(lay)
    ngram = NgramGate(texts, n=gcfg.ngram_n, threshold=gcfg.ngram_threshold)
    heldout = set(read_json(lay.evalsets / "heldout.json")["heldout_sources"])
    kept, gate_counts, drops = apply_gates(pool, ex, ngram, heldout)
    source_list = None
    if arm in bcfg.shared_sources:
        source_list = _shared_source_list(bcfg.shared_sources, pair_files_loader=lambda k: read_pairs(lay, k),
                                          seed=seed, exclusion=ex, ngram=ngram, heldout=heldout)
    cosine = _cosine_gate(params, lay, texts)
    out = lay.cells(arm)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "pool.jsonl", kept)
    seeds = {}
    for s in train_seeds(params):
        chosen, info = budget_rows(kept, n_rows=bcfg.rows, seed=s, dev_fraction=bcfg.dev_fraction,
                                   max_rows_per_source=bcfg.max_rows_per_source or None,
                                   row_filter=cosine.filter_rows, source_list=source_list)
        write_jsonl(out / f"seed_{s}.jsonl", chosen)
        filtered = info.pop("filtered")
        drops.extend({**d, "seed": s} for d in filtered)
        info["cosine_gate_rows_dropped"] = sum(d["what"] == "row" for d in filtered)
        info["cosine_gate_negatives_dropped"] = sum(d["what"] == "negative" for d in filtered)
        seeds[str(s)] = info
    write_jsonl(out / "drops.jsonl", drops)
    counts = {"arm": arm, "cell": spec.name, "assemble": asm_counts, "gates": gate_counts, "budget": seeds}
    write_json(out / "cell.json", {"arm": arm, "spec": asdict(spec), "name": spec.name})
    write_json(lay.metrics / "cells" / f"{arm}.json", counts)
    write_run_record(out, lay, f"cells:{arm}", {"spec": asdict(spec), "budget": asdict(bcfg), "gates": asdict(gcfg), "seed": seed},
                     {**{k: lay.pairs / f"{k}.jsonl" for k in pair_files}, "exclusion": ex_path}, counts)
    return counts



def _shared_source_list(arms: Sequence[str], *, pair_files_loader, seed: int, exclusion, ngram, heldout) -> list[str]:
    """Sources every arm in ``arms`` can draw from after the gates (SPEC §5: both arms of a
    comparison drawn from the same source list). Only named arms may share a list."""
    from recipematch.cells import NAMED_ARMS, apply_gates, assemble_cell

    common: set[str] | None = None
    for a in arms:
        if a not in NAMED_ARMS:
            raise ValueError(f"budget.shared_sources may list named arms only, got {a!r}")
        spec = NAMED_ARMS[a]
        files = {k: rows for k in spec.inputs() if (rows := pair_files_loader(k)) is not None}
        pool, _ = assemble_cell(spec, files, seed=seed)
        kept, _, _ = apply_gates(pool, exclusion, ngram, heldout)
        srcs = {r["source_id"] for r in kept}
        common = srcs if common is None else common & srcs
    return sorted(common or ())


def _cosine_gate(params: Mapping[str, Any], lay: Layout, eval_texts: list[str]):
    """The embedding-cosine gate over the evaluation texts, with the base model (SPEC §4)."""
    from recipematch.gates import CosineGate
    from recipematch.retrieval import (
        MemoisedEncoder,
        SentenceTransformerEncoder,
        encode_cached,
    )

    gcfg = section(params, "gates", GatesConfig)
    tcfg = section(params, "train", TrainConfig)
    ecfg = section(params, "evaluate", EvaluateConfig)
    enc = MemoisedEncoder(SentenceTransformerEncoder(resolve_model(tcfg.model), max_seq_length=ecfg.max_seq_length,
                                                     batch_size=ecfg.batch_size, device=ecfg.device))
    emb = encode_cached(enc, eval_texts, lay.cache)
    return CosineGate(emb, enc, threshold=gcfg.cosine_threshold)
