import pytest

from recipematch.gates import build_exclusion_list
from recipematch.validation import ValidationFailed, validate_cell

SHA = "ab" * 32


def _row(sid, split, anchor=None, positive=None, negs=("a near miss",), prompt_sha=SHA):
    return {"source_id": sid, "split": split, "anchor": anchor or f"anchor {sid}", "positive": positive or f"positive {sid}",
            "positive_provenance": {"generator": "d1_recipe", "prompt_sha256": prompt_sha, "model_id": "m"},
            "negatives": [{"text": n, "generator": "d1_recipe", "prompt_sha256": SHA, "model_id": "m"} for n in negs]}


@pytest.fixture
def exclusion():
    return build_exclusion_list([("bad", "An evaluation query."), ("ok", "fine")], ["An evaluation query."], "v2")


def test_passing_suite_records_counts(exclusion):
    rows = [_row("s1", "train"), _row("s2", "train", negs=()), _row("s3", "dev")]
    rec = validate_cell(rows, exclusion, budget_rows=3, suite_name="ok")
    assert rec["success"] and rec["rows"] == 3 and rec["examples"] == 3
    assert rec["negatives_per_row"] == pytest.approx(2 / 3, abs=1e-4)
    assert rec["splits"] == {"dev": 1, "train": 2}
    assert all(e["success"] for e in rec["expectations"]) and len(rec["expectations"]) == 15


@pytest.mark.parametrize("rows, budget, expectation, needle", [
    ([_row("s1", "train"), _row("s2", "dev")], 3, "expect_table_row_count_to_equal", "cannot supply the budget"),
    ([_row("s1", "train"), _row("s1", "dev"), _row("s2", "dev")], 3, "splits_of_source", "['s1']"),
    ([_row("bad", "train"), _row("s2", "dev")], 2, "anchor_id_excluded", "['bad']"),
    ([_row("s1", "train", anchor="An  evaluation query."), _row("s2", "dev")], 2, "anchor_text_excluded", "['s1']"),
    ([_row("s1", "train", positive="Problem: An evaluation query."), _row("s2", "dev")], 2, "positive_text_excluded", "['s1']"),
    ([_row("s1", "train", negs=("An evaluation query.",)), _row("s2", "dev")], 2, "negatives_excluded", "['s1']"),
    ([_row("s1", "train", positive="   "), _row("s2", "dev")], 2, "positive_len", "['s1']"),
    ([_row("s1", "train", negs=("",)), _row("s2", "dev")], 2, "min_negative_len", "['s1']"),
    ([_row("s1", "train", prompt_sha=None), _row("s2", "dev")], 2, "provenance_ok", "without a prompt SHA-256"),
    ([_row("s1", "train"), _row("s2", "train")], 2, "expect_column_distinct_values_to_equal_set", "['train'], need both"),
    ([_row("s1", "train", positive="anchor  s1"), _row("s2", "dev")], 2, "positive_is_anchor", "['s1']"),
    ([{**_row("s1", "train"), "positive": 5}, _row("s2", "dev")], 2, "malformed", "'positive' is not text"),
    ([{**_row("s1", "train"), "negatives": ["plain string"]}, _row("s2", "dev")], 2, "malformed", "not a list"),
    ([{k: v for k, v in _row("s1", "train").items() if k != "source_id"}, _row("s2", "dev")], 2, "malformed", "'source_id'"),
])
def test_each_invariant_fails_with_a_named_expectation(exclusion, rows, budget, expectation, needle):
    with pytest.raises(ValidationFailed) as err:
        validate_cell(rows, exclusion, budget_rows=budget, suite_name="bad")
    msg = str(err.value)
    assert expectation in msg and needle in msg


def test_ngram_gate_catches_a_restated_evaluation_text(exclusion):
    from recipematch.gates import NgramGate

    ev = "Let a b and c be positive reals with a b c equal to one; prove the inequality below holds."
    ng = NgramGate([ev], n=5, threshold=0.35)
    rows = [_row("s1", "train", anchor="Note: " + ev.replace("prove", "show")), _row("s2", "dev")]
    rec = validate_cell([_row("s1", "train"), _row("s2", "dev")], exclusion, budget_rows=2, suite_name="ok", ngram=ng)
    assert rec["success"]
    with pytest.raises(ValidationFailed, match="ngram_flagged.*s1"):
        validate_cell(rows, exclusion, budget_rows=2, suite_name="bad", ngram=ng)
