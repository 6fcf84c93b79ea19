"""Stage ``validate@<arm>``: Great Expectations suites on every seed's cell file; a failure
stops the pipeline before training (paper Appendix A, Table 2; Section 3, Appendix B)."""

from __future__ import annotations

from recipematch.errors import RecipematchError
from recipematch.io import read_jsonl_strict, sha256_file, write_json
from recipematch.pipeline.door import StagePaths, arm_option, check_device, stage
from recipematch.pipeline.inputs import arm_spec_from_file, train_seeds
from recipematch.pipeline.models import contamination_gate

PARAMS = ("budget.rows", "gates", "train.seed", "train.n_seeds", "train.model")


def run(p, lay: StagePaths, arm: str) -> dict:
    """Stage 6: Great Expectations suites; a failure stops the pipeline before training."""
    from recipematch.validation import ValidationFailed, validate_cell  # lazy: recipematch.validation pulls in pandas

    arm_spec_from_file(lay, arm)  # an arm without a spec is named before any work
    check_device("devices.cosine_gate", p.devices.cosine_gate)
    gate, ex_path = contamination_gate(p, lay)
    records, failed = {}, []
    for s in train_seeds(p.train.seed, p.train.n_seeds):
        path = lay.cells / f"seed_{s}.jsonl"
        rows = read_jsonl_strict(path)
        try:
            rec = validate_cell(rows, gate, budget_rows=p.budget.rows, suite_name=f"cell-{arm}-seed{s}")
        except ValidationFailed as e:
            failed.append(str(e))
            continue
        records[str(s)] = {**rec, "file_sha256": sha256_file(path), "exclusion_sha256": sha256_file(ex_path)}
    if failed:
        raise RecipematchError("validation failed, training will not start:\n" + "\n".join(failed))
    write_json(lay.out, records)
    summary = {s: {"rows": r["rows"], "examples": r["examples"], "negatives_per_row": r["negatives_per_row"],
                   "splits": r["splits"]} for s, r in records.items()}
    write_json(lay.metrics, summary)
    return summary


main = stage("validate", PARAMS, arm_option, reads=("spec", "cells", "evalsets", "gates", "cache"), writes=("out", "metrics"))(run)
