import pytest

from recipematch.cells import NAMED_ARMS, CellSpec, MissingInput, apply_gates, assemble_cell, budget_rows
from recipematch.gates import NgramGate, build_exclusion_list

SHA = "0" * 64


def _row(sid, pos, negs, gen):
    return {"source_id": sid, "anchor": f"anchor {sid}", "positive": pos,
            "positive_provenance": {"generator": gen, "prompt_sha256": None if gen == "cas" else SHA, "model_id": "m"},
            "negatives": [{"text": n, "generator": gen, "prompt_sha256": None if gen == "cas" else SHA, "model_id": "m"}
                          for n in negs]}


def _files():
    cas = [_row("s1", "cas-pos-1a", ["cas-neg-1a"], "cas"), _row("s1", "cas-pos-1b", ["cas-neg-1b", "cas-neg-1c"], "cas"),
           _row("s2", "cas-pos-2", [], "cas")]
    d1 = [_row("s1", "d1-pos-1", ["r1", "r2", "r3"], "d1_recipe"), _row("s3", "d1-pos-3", ["r4"], "d1_recipe")]
    d4 = [_row("s1", "d4-pos-1", [], "d4_restatement"), _row("s2", "d4-pos-2", [], "d4_restatement"),
          _row("s3", "d4-pos-3", [], "d4_restatement")]
    return {"cas": cas, "d1_recipe": d1, "d4_restatement": d4}


def test_named_arms():
    assert NAMED_ARMS["verified"] == CellSpec("cas", "cas")
    assert NAMED_ARMS["recipe"].name == "d1xrecipe"
    assert CellSpec("d4", "recipe", "matched").name == "d4xrecipe-matched"
    with pytest.raises(ValueError, match="unknown negatives"):
        CellSpec("d4", "bogus")


def test_own_negatives_kept_as_they_are():
    rows, counts = assemble_cell(NAMED_ARMS["recipe"], _files(), seed=0)
    assert [r["positive"] for r in rows] == ["d1-pos-1", "d1-pos-3"]
    assert [len(r["negatives"]) for r in rows] == [3, 1]
    assert counts == {"sources_in": 2, "no_partner": 0, "rows_out": 2}


def test_reference_takes_one_cas_row_per_source_seeded():
    files = _files()
    rows, counts = assemble_cell(NAMED_ARMS["reference"], files, seed=0)
    # s3 has no CAS row: dropped and counted
    assert [r["source_id"] for r in rows] == ["s1", "s2"]
    assert counts["no_partner"] == 1
    s1_negs = [n["text"] for n in rows[0]["negatives"]]
    assert s1_negs in (["cas-neg-1a"], ["cas-neg-1b", "cas-neg-1c"])  # one whole CAS row, not a mix
    assert rows[1]["negatives"] == []
    # the choice is fixed by the seed, and some seed picks the other row
    assert assemble_cell(NAMED_ARMS["reference"], files, seed=0)[0] == rows
    picks = {len(assemble_cell(NAMED_ARMS["reference"], files, seed=s)[0][0]["negatives"]) for s in range(20)}
    assert picks == {1, 2}


def test_matched_volume_uses_reference_counts():
    files = _files()
    ref, _ = assemble_cell(NAMED_ARMS["reference"], files, seed=3)
    k = len(ref[0]["negatives"])
    rows, counts = assemble_cell(CellSpec("d4", "recipe", "matched"), files, seed=3)
    # s1: first k recipe near-misses; s2: no D1 row; s3: not in the reference
    assert [r["source_id"] for r in rows] == ["s1"]
    assert [n["text"] for n in rows[0]["negatives"]] == ["r1", "r2", "r3"][:k]
    assert counts["no_partner"] == 2
    full, _ = assemble_cell(CellSpec("d4", "recipe", "full"), files, seed=3)
    assert [len(r["negatives"]) for r in full] == [3, 1]


def test_missing_input_is_a_clear_error():
    with pytest.raises(MissingInput, match="no input for positives=d5"):
        assemble_cell(CellSpec("d5", "none"), _files(), seed=0)
    with pytest.raises(MissingInput, match="no input for negatives=unrelated"):
        assemble_cell(CellSpec("d4", "unrelated", "full"), _files(), seed=0)


def _pool(n_sources, per_source=2):
    return [_row(f"s{i:03d}", f"p{i}-{j}", [f"n{i}-{j}"], "d1_recipe") for i in range(n_sources) for j in range(per_source)]


def test_budget_exact_prefix_and_disjoint_splits():
    pool = _pool(50, per_source=3)
    big, info = budget_rows(pool, n_rows=60, seed=42)
    small, _ = budget_rows(pool, n_rows=25, seed=42)
    assert len(big) == 60 and info["selected"] == 60 and info["requested"] == 60
    assert [r["positive"] for r in small] == [r["positive"] for r in big[:25]]  # nested prefix
    # rows of a source are contiguous
    order = [r["source_id"] for r in big]
    assert all(order.index(s) + order.count(s) - 1 == len(order) - 1 - order[::-1].index(s) for s in set(order))
    train = {r["source_id"] for r in big if r["split"] == "train"}
    dev = {r["source_id"] for r in big if r["split"] == "dev"}
    assert dev and train and not train & dev
    other, _ = budget_rows(pool, n_rows=60, seed=43)
    assert [r["positive"] for r in other] != [r["positive"] for r in big]  # each seed draws its own rows
    assert budget_rows(pool, n_rows=60, seed=42)[0] == big  # deterministic


def test_budget_larger_than_pool_is_short_not_padded():
    rows, info = budget_rows(_pool(3), n_rows=100, seed=0)
    assert len(rows) == 6 and info["available"] == 6


def test_apply_gates_counts_every_drop():
    rows = [_row("s1", "clean positive text here", ["leaked evaluation query text"], "d1_recipe"),
            _row("s2", "positive two", [], "d1_recipe"),
            _row("held", "positive three", [], "d1_recipe"),
            {**_row("s4", "leaked evaluation query text", [], "d1_recipe")}]
    ex = build_exclusion_list([("s2", "anchor s2"), ("s9", "x")], ["leaked evaluation query text", "anchor s2"], "v2")
    ng = NgramGate(["leaked evaluation query text"], n=5, threshold=0.35)
    kept, counts, drops = apply_gates(rows, ex, ng, heldout_sources={"held"})
    assert [r["source_id"] for r in kept] == ["s1"]
    assert kept[0]["negatives"] == []
    assert counts == {"negatives_dropped.exclusion_v2_negative_text": 1, "rows_dropped.exclusion_v2_anchor_id": 1,
                      "rows_dropped.exclusion_v2_positive_text": 1, "rows_dropped.heldout_source": 1, "rows_kept": 1}
    assert len(drops) == 4


def test_max_rows_per_source_is_seeded_and_keeps_prefixes():
    pool = _pool(30, per_source=4)
    a, info = budget_rows(pool, n_rows=20, seed=5, max_rows_per_source=1)
    assert len(a) == 20 and len({r["source_id"] for r in a}) == 20 and info["max_rows_per_source"] == 1
    b, _ = budget_rows(pool, n_rows=10, seed=5, max_rows_per_source=1)
    assert [r["positive"] for r in b] == [r["positive"] for r in a[:10]]
    picked = {r["source_id"]: r["positive"] for r in a}
    other = {r["source_id"]: r["positive"] for r in budget_rows(pool, n_rows=30, seed=6, max_rows_per_source=1)[0]}
    assert any(picked[s] != other[s] for s in picked if s in other)
    with pytest.raises(ValueError):
        budget_rows(pool, n_rows=5, seed=0, max_rows_per_source=0)


def test_every_named_cell_builds_or_says_which_input_is_missing():
    files = _files()
    built, missing = [], []
    for name, spec in NAMED_ARMS.items():
        try:
            rows, _ = assemble_cell(spec, files, seed=0)
            built.append(name)
            assert all(r["positive_provenance"]["generator"] in ("cas", "d1_recipe", "d4_restatement") for r in rows)
        except MissingInput as e:
            missing.append(name)
            assert str(e).startswith("no input for ")
    assert {"verified", "recipe", "reference", "d4", "cas_alone", "d4_recipe_matched", "d4_recipe_full", "cas_recipe",
            "d1_alone", "d1_cas"} <= set(built)
    assert {"d5", "bt", "bt3_cas", "d4_unrelated_full"} <= set(missing)


def test_budget_walk_with_a_filter_equals_the_source_by_source_walk():
    """The budget walk filters blocks of sources at once (one batched encoding); the rows,
    their order and the drop records equal a plain source-by-source walk."""
    import numpy as np

    rng = np.random.default_rng(3)
    rows = []
    for i in range(200):
        for j in range(int(rng.integers(1, 4))):
            rows.append({"source_id": f"s{i:03d}", "anchor": f"a{i}-{j}" + (" x" if rng.random() < 0.2 else ""),
                         "positive": f"p{i}-{j}", "negatives": [], "positive_provenance": {}})
    calls = []

    def drop_x(rs):
        calls.append(len(rs))
        kept = [dict(r) for r in rs if " x" not in r["anchor"]]
        return kept, [{"source_id": r["source_id"], "what": "row", "reason": "x"} for r in rs if " x" in r["anchor"]]

    def reference(n_rows, seed, cap):
        from recipematch.cells import _by_source, _rng_for

        groups = _by_source(rows)
        for sid, rs in groups.items():
            if cap and len(rs) > cap:
                keep = _rng_for(seed, "rows-of-source", sid).permutation(len(rs))[:cap]
                groups[sid] = [rs[k] for k in sorted(keep)]
        order = sorted(groups)
        out, filt = [], []
        for k in np.random.default_rng(seed).permutation(len(order)):
            if len(out) >= n_rows:
                break
            rs, dropped = drop_x(groups[order[k]])
            filt += dropped
            out += rs[: n_rows - len(out)]
        return [r["anchor"] for r in out], filt

    for n_rows, seed, cap in [(7, 1, None), (40, 2, 1), (150, 5, 2), (500, 9, None)]:
        chosen, info = budget_rows(rows, n_rows=n_rows, seed=seed, row_filter=drop_x, max_rows_per_source=cap,
                                   dev_fraction=0.05)
        want, want_drops = reference(n_rows, seed, cap)
        assert [r["anchor"] for r in chosen] == want
        assert info["filtered"] == want_drops
    calls.clear()
    budget_rows(rows, n_rows=150, seed=5, row_filter=drop_x, max_rows_per_source=1, dev_fraction=0.05)
    assert len(calls) <= 3  # batched: a few calls, not one per source
