"""The committed metrics reproduce the expected scores of the default (tests/expected/default.yaml,
as pyserini's 2cr files): every Table 1 number within its tolerance, none missing either way."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("expected_scores", ROOT / "scripts" / "expected_scores.py")
es = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(es)


def test_committed_metrics_match_the_expected_scores():
    stats = es.presented(json.loads((ROOT / "metrics" / "stats.json").read_text()))
    record = yaml.safe_load((ROOT / "tests" / "expected" / "default.yaml").read_text())
    assert record["scores"], "the record holds no number"
    assert es.check(stats, record) == []


def test_check_flags_a_moved_a_missing_and_an_unrecorded_number():
    stats = {"evaluations": {"t": {"report_ks": [1]}}, "arms": {"base": {"t.R@1": {"mean": 10.0}}},
             "gaps": {}, "did": {}}
    record = {"scores": es.headline(stats)}
    assert es.check(stats, record) == []
    moved = json.loads(json.dumps(stats))
    moved["arms"]["base"]["t.R@1"]["mean"] = 10.5
    assert es.check(moved, record) == ["arms/base/t.R@1/mean: 10.5 vs expected 10.0 ± 0.01"]
    assert es.check({**stats, "arms": {"base": {}}}, record) == ["arms/base/t.R@1/mean: missing from metrics"]
    extra = json.loads(json.dumps(stats))
    extra["arms"]["recipe"] = {"t.R@1": {"mean": 3.0}}
    assert es.check(extra, record) == ["arms/recipe/t.R@1/mean: not in the record"]


def test_a_nan_or_a_malformed_stats_file_never_passes():
    import math

    import pytest

    stats = {"evaluations": {"t": {"report_ks": [1]}}, "arms": {"base": {"t.R@1": {"mean": 10.0}}},
             "gaps": {}, "did": {}}
    record = {"scores": es.headline(stats)}
    nan = json.loads(json.dumps(stats))
    nan["arms"]["base"]["t.R@1"]["mean"] = math.nan
    assert es.check(nan, record)[0].startswith("arms/base/t.R@1/mean: nan vs expected 10.0")
    assert es.check(stats, {"scores": [{**record["scores"][0], "value": math.nan}]})  # a NaN record fails too
    with pytest.raises(es.BadStats, match="finite number"):
        es.headline(nan)  # `write` refuses to record it
    broken = {k: v for k, v in stats.items() if k != "gaps"}
    assert any("lacks a part the stats stage writes" in line for line in es.check(broken, record))


def test_check_flags_a_recorded_cut_off_the_report_no_longer_shows():
    """Breaker: narrowing a set's report cut-offs left its recorded R@5 rows unchecked."""
    stats = {"evaluations": {"t": {"report_ks": [1, 5]}},
             "arms": {"base": {"t.R@1": {"mean": 10.0}, "t.R@5": {"mean": 20.0}}}, "gaps": {}, "did": {}}
    record = {"scores": es.headline(stats)}
    narrowed = {**stats, "evaluations": {"t": {"report_ks": [1]}}}
    assert es.check(narrowed, record) == ["arms/base/t.R@5/mean: in the record, but the report no longer shows it "
                                          "(params report ks)"]
