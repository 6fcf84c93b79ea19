"""Great Expectations suites that must pass before any training stage (paper Appendix A,
Table 2: the matched-budget invariants; Section 3, Appendix B: the contamination gates).

Each cell file (one arm, one seed, after the budget) is flattened to one table row per pair
row with derived check columns, then validated by a Great Expectations suite:

* row count equals the budget;
* each source lies in exactly one split (train and dev disjoint by source) and both
  splits exist;
* no anchor id, anchor, positive or negative on the active exclusion list, and nothing the
  whole contamination gate (:class:`recipematch.gates.ContaminationGate`: held-out sources,
  exclusion list, n-gram containment, base-model cosine) would drop (``gate_violation``);
* no empty anchor or positive text, no empty negative;
* provenance complete (generator, model id, prompt SHA-256 for LLM texts);
* every row well formed, no positive equal to its anchor (after whitespace folding), and no
  text that restates an evaluation text (word n-gram containment in either direction above
  the threshold).

A failing suite raises :class:`ValidationFailed` whose message names each failed
expectation and the offending rows (source ids), so the pipeline stops before training.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from recipematch.gates import ContaminationGate
from recipematch.pairs import n_examples, provenance_problems


class ValidationFailed(RuntimeError):
    """A validation suite failed; ``failures`` lists ``{expectation, column, offending}``."""

    def __init__(self, suite: str, failures: list[dict[str, Any]]):
        self.suite = suite
        self.failures = failures
        lines = [f"validation suite '{suite}' failed ({len(failures)} expectation(s)):"]
        for f in failures:
            lines.append(f"  - {f['expectation']}" + (f" on '{f['column']}'" if f.get("column") else "")
                         + f": {f['detail']}")
        super().__init__("\n".join(lines))


def _malformed(r: Any) -> str:
    """Why a row does not have the pair-row shape (``""`` when it does)."""
    if not isinstance(r, Mapping):
        return f"row is {type(r).__name__}, not an object"
    problems = [f"'{k}' is not text" for k in ("source_id", "anchor", "positive") if not isinstance(r.get(k), str)]
    negs = r.get("negatives")
    if negs is not None and (not isinstance(negs, list) or not all(isinstance(n, Mapping) and isinstance(n.get("text"), str)
                                                                   for n in negs)):
        problems.append("'negatives' is not a list of {text: ...}")
    prov = r.get("positive_provenance")
    if prov is not None and not isinstance(prov, Mapping):
        problems.append("'positive_provenance' is not an object")
    return "; ".join(problems)


def _norm(t: str) -> str:
    return " ".join(t.split())


def flatten_for_validation(rows: Sequence[Any], gate: ContaminationGate) -> pd.DataFrame:
    """One table row per pair row with the derived columns the suite checks. Malformed rows
    are kept (their ``malformed`` column says why) so the suite reports them by position.
    The exclusion and n-gram columns name which part of the gate a row trips;
    ``gate_violation`` is the whole gate's verdict (:meth:`ContaminationGate.violations`)."""
    exclusion, ngram = gate.exclusion, gate.ngram
    ids = set(exclusion.ids)
    splits_per_source: dict[str, set[str]] = {}
    bad = [_malformed(r) for r in rows]
    for r, b in zip(rows, bad):
        if not b:
            splits_per_source.setdefault(r["source_id"], set()).add(r.get("split", ""))
    good = [r for r, b in zip(rows, bad) if not b]
    verdicts = iter(gate.violations(good))
    recs = []
    for i, (r, b) in enumerate(zip(rows, bad)):
        if b:
            recs.append({"source_id": str(r.get("source_id")) if isinstance(r, Mapping) else f"<row {i}>",
                         "split": r.get("split") if isinstance(r, Mapping) else None, "malformed": b, "anchor_len": 0,
                         "positive_len": 0, "min_negative_len": -1, "splits_of_source": 1, "anchor_id_excluded": False,
                         "anchor_text_excluded": False, "positive_text_excluded": False, "negatives_excluded": 0,
                         "positive_is_anchor": False, "ngram_flagged": 0, "provenance_ok": False,
                         "provenance_problem": b, "n_negatives": 0, "n_examples": 0, "gate_violation": ""})
            continue
        negs = r.get("negatives") or []
        prov = provenance_problems(r)
        texts = [r["anchor"], r["positive"], *[n["text"] for n in negs]]
        recs.append({
            "source_id": r["source_id"],
            "split": r.get("split"),
            "malformed": "",
            "anchor_len": len(r["anchor"].strip()),
            "positive_len": len(r["positive"].strip()),
            "min_negative_len": min((len(n["text"].strip()) for n in negs), default=-1),
            "splits_of_source": len(splits_per_source[r["source_id"]]),
            "anchor_id_excluded": r["source_id"] in ids,
            "anchor_text_excluded": exclusion.hits_text(r["anchor"]),
            "positive_text_excluded": exclusion.hits_text(r["positive"]),
            "negatives_excluded": sum(exclusion.hits_text(n["text"]) for n in negs),
            "positive_is_anchor": _norm(r["positive"]) == _norm(r["anchor"]),
            "ngram_flagged": sum(ngram.flags(t) for t in texts),
            "provenance_ok": not prov,
            "provenance_problem": "; ".join(prov),
            "n_negatives": len(negs),
            "n_examples": n_examples(r),
            "gate_violation": next(verdicts),
        })
    return pd.DataFrame(recs, columns=["source_id", "split", "malformed", "anchor_len", "positive_len",
                                       "min_negative_len", "splits_of_source", "anchor_id_excluded",
                                       "anchor_text_excluded", "positive_text_excluded", "negatives_excluded",
                                       "positive_is_anchor", "ngram_flagged", "provenance_ok", "provenance_problem",
                                       "n_negatives", "n_examples", "gate_violation"])


def _expectations(budget_rows: int):
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectTableRowCountToEqual(value=budget_rows),
        gxe.ExpectColumnValuesToBeInSet(column="malformed", value_set=[""]),
        gxe.ExpectColumnValuesToBeInSet(column="positive_is_anchor", value_set=[False]),
        gxe.ExpectColumnValuesToBeInSet(column="ngram_flagged", value_set=[0]),
        gxe.ExpectColumnValuesToBeInSet(column="split", value_set=["train", "dev"]),
        gxe.ExpectColumnDistinctValuesToEqualSet(column="split", value_set=["train", "dev"]),
        gxe.ExpectColumnValuesToBeInSet(column="splits_of_source", value_set=[1]),
        gxe.ExpectColumnValuesToBeInSet(column="anchor_id_excluded", value_set=[False]),
        gxe.ExpectColumnValuesToBeInSet(column="anchor_text_excluded", value_set=[False]),
        gxe.ExpectColumnValuesToBeInSet(column="positive_text_excluded", value_set=[False]),
        gxe.ExpectColumnValuesToBeInSet(column="negatives_excluded", value_set=[0]),
        gxe.ExpectColumnValuesToBeBetween(column="anchor_len", min_value=1),
        gxe.ExpectColumnValuesToBeBetween(column="positive_len", min_value=1),
        gxe.ExpectColumnValuesToNotBeInSet(column="min_negative_len", value_set=[0]),
        gxe.ExpectColumnValuesToBeInSet(column="provenance_ok", value_set=[True]),
        gxe.ExpectColumnValuesToBeInSet(column="gate_violation", value_set=[""]),
    ]


def validate_cell(rows: Sequence[Any], gate: ContaminationGate, *, budget_rows: int,
                  suite_name: str) -> dict[str, Any]:
    """Run the suite on one budgeted cell file.

    Args:
        rows: the cell's rows, each with ``split``.
        gate: the contamination gate (paper Section 3, Appendix B); pass one with its cosine
            check (:attr:`ContaminationGate.complete`) so the suite checks the whole rule.
        budget_rows: the exact row count required (paper Table 2: matched budget).
        suite_name: e.g. ``"cell-recipe-seed42"`` (shown in messages and records).

    Returns:
        A record ``{"suite", "success": True, "expectations": [...], "rows", "examples",
        "negatives_per_row"}`` to write next to the file.

    Raises:
        ValidationFailed: any expectation fails; the message names it and the offending
        source ids (at most 20 shown per expectation).
    """
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    import great_expectations as gx

    df = flatten_for_validation(rows, gate)
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    source = context.data_sources.add_pandas(name=f"src-{suite_name}")
    asset = source.add_dataframe_asset(name=f"asset-{suite_name}")
    batch_def = asset.add_batch_definition_whole_dataframe(f"batch-{suite_name}")
    suite = context.suites.add(gx.ExpectationSuite(name=suite_name))
    for e in _expectations(budget_rows):
        suite.add_expectation(e)
    vd = context.validation_definitions.add(gx.ValidationDefinition(name=f"vd-{suite_name}", data=batch_def, suite=suite))
    result = vd.run(batch_parameters={"dataframe": df}, result_format={"result_format": "COMPLETE"})
    records, failures = [], []
    for r in result.results:
        cfg = r.expectation_config
        column = cfg.kwargs.get("column")
        records.append({"expectation": cfg.type, "column": column, "success": bool(r.success)})
        if r.success:
            continue
        res = r.result or {}
        if cfg.type == "expect_table_row_count_to_equal":
            detail = (f"{res.get('observed_value')} rows, budget is {budget_rows}"
                      + (" (the arm cannot supply the budget: lower budget.rows or widen its sources)"
                         if (res.get("observed_value") or 0) < budget_rows else ""))
        elif cfg.type == "expect_column_distinct_values_to_equal_set":
            observed = sorted(str(x) for x in df["split"].dropna().unique())
            detail = f"observed splits {observed}, need both train and dev"
        else:
            idx = res.get("unexpected_index_list") or []
            idx = [i if isinstance(i, int) else next(iter(i.values())) for i in idx]
            bad = df.iloc[[i for i in idx if isinstance(i, int)]] if idx else df.iloc[0:0]
            srcs = list(dict.fromkeys(bad["source_id"].tolist()))
            extra = ""
            if column in ("provenance_ok", "malformed") and len(bad):
                extra = f"; first problem: {bad['provenance_problem'].iloc[0]}"
            if column == "gate_violation" and len(bad):
                extra = f"; first: {bad['gate_violation'].iloc[0]}"
            detail = (f"{res.get('unexpected_count', len(idx))} offending row(s), sources "
                      f"{srcs[:20]}{' …' if len(srcs) > 20 else ''}{extra}")
        failures.append({"expectation": cfg.type, "column": column, "detail": detail})
    if failures:
        raise ValidationFailed(suite_name, failures)
    return {
        "suite": suite_name, "success": True, "expectations": records, "rows": int(len(df)),
        "examples": int(df["n_examples"].sum()),
        "negatives_per_row": round(float(df["n_negatives"].mean()), 4) if len(df) else 0.0,
        "splits": dict(sorted(Counter(df["split"]).items())),
    }
