import pytest

from recipematch.gates import ContaminationGate, NgramGate, build_exclusion_list
from recipematch.validation import ValidationFailed, validate_cell

SHA = "ab" * 32


def _row(sid, split, anchor=None, positive=None, negs=("a near miss",), prompt_sha=SHA):
    return {"source_id": sid, "split": split, "anchor": anchor or f"anchor {sid}", "positive": positive or f"positive {sid}",
            "positive_provenance": {"generator": "d1_recipe", "prompt_sha256": prompt_sha, "model_id": "m"},
            "negatives": [{"text": n, "generator": "d1_recipe", "prompt_sha256": SHA, "model_id": "m"} for n in negs]}


@pytest.fixture
def exclusion():
    ex = build_exclusion_list([("bad", "An evaluation query."), ("ok", "fine")], ["An evaluation query."], "v2")
    return ContaminationGate(ex, NgramGate([], n=5, threshold=0.35))


def test_passing_suite_records_counts(exclusion):
    rows = [_row("s1", "train"), _row("s2", "train", negs=()), _row("s3", "dev")]
    rec = validate_cell(rows, exclusion, budget_rows=3, suite_name="ok")
    assert rec["success"] and rec["rows"] == 3 and rec["examples"] == 3
    assert rec["negatives_per_row"] == pytest.approx(2 / 3, abs=1e-4)
    assert rec["splits"] == {"dev": 1, "train": 2}
    assert all(e["success"] for e in rec["expectations"]) and len(rec["expectations"]) == 16


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
    gate = ContaminationGate(exclusion.exclusion, NgramGate([ev], n=5, threshold=0.35))
    rows = [_row("s1", "train", anchor="Note: " + ev.replace("prove", "show")), _row("s2", "dev")]
    rec = validate_cell([_row("s1", "train"), _row("s2", "dev")], gate, budget_rows=2, suite_name="ok")
    assert rec["success"]
    with pytest.raises(ValidationFailed, match="ngram_flagged.*s1"):
        validate_cell(rows, gate, budget_rows=2, suite_name="bad")


def test_whole_gate_checked_held_out_source_and_cosine(exclusion):
    """The suite checks the whole contamination gate: a held-out source and a text at the
    cosine threshold fail ``gate_violation`` even when no finer column catches them."""
    import numpy as np

    from recipematch.gates import CosineGate

    class OneHot:
        def encode(self, texts):
            out = np.zeros((len(texts), 2), dtype=np.float32)
            for i, t in enumerate(texts):
                out[i, 0 if "twin" in t else 1] = 1.0
            return out

    held = ContaminationGate(exclusion.exclusion, exclusion.ngram, heldout_sources={"s1"})
    with pytest.raises(ValidationFailed, match="gate_violation.*'s1'.*heldout_source"):
        validate_cell([_row("s1", "train"), _row("s2", "dev")], held, budget_rows=2, suite_name="held")
    enc = OneHot()
    cos = ContaminationGate(exclusion.exclusion, exclusion.ngram,
                            cosine=CosineGate(enc.encode(["twin"]), enc, threshold=0.9))
    assert validate_cell([_row("s1", "train"), _row("s2", "dev")], cos, budget_rows=2, suite_name="c0")["success"]
    with pytest.raises(ValidationFailed, match="gate_violation.*'s1'.*cosine_gate"):
        validate_cell([_row("s1", "train", negs=("a twin text",)), _row("s2", "dev")], cos, budget_rows=2,
                      suite_name="c1")
