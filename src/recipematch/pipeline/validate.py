"""Stage 6: Great Expectations validation before training."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from recipematch.config import BudgetConfig, section
from recipematch.io import read_jsonl_strict, sha256_file, write_json
from recipematch.pipeline.common import Layout, eval_ngram_gate, load_exclusion, train_seeds

log = logging.getLogger("recipematch")

def run_validate(params: Mapping[str, Any], lay: Layout, arm: str) -> dict:
    """Great Expectations suites on every seed's cell file; a failure stops the pipeline."""
    from recipematch.validation import ValidationFailed, validate_cell

    bcfg = section(params, "budget", BudgetConfig)
    ex, ex_path = load_exclusion(lay, params)
    ngram = eval_ngram_gate(params, lay)
    records, failed = {}, []
    for s in train_seeds(params):
        path = lay.cells(arm) / f"seed_{s}.jsonl"
        rows = read_jsonl_strict(path)
        try:
            rec = validate_cell(rows, ex, budget_rows=bcfg.rows, suite_name=f"cell-{arm}-seed{s}", ngram=ngram)
        except ValidationFailed as e:
            failed.append(str(e))
            continue
        records[str(s)] = {**rec, "file_sha256": sha256_file(path), "exclusion_sha256": sha256_file(ex_path)}
    if failed:
        raise SystemExit("validation failed, training will not start:\n" + "\n".join(failed))
    out = lay.p("artifacts", "validated", f"{arm}.json")
    write_json(out, records)
    summary = {s: {"rows": r["rows"], "examples": r["examples"], "negatives_per_row": r["negatives_per_row"], "splits": r["splits"]}
               for s, r in records.items()}
    write_json(lay.metrics / "validate" / f"{arm}.json", summary)
    return summary
