"""Loaders of the named benchmarks (SPEC §2), each scored on a local fixture with the
one-hot mock encoder; every expected value is worked out by hand in the comments."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recipematch.beir import BeirFormatError
from recipematch.benchmarks_data import (
    evaluate_benchmark,
    evaluate_benchmark_bm25,
    fetch_mathnet_retrieve,
    load_crosslingual,
    load_mathnet_retrieve,
    load_probe,
    load_samelang,
)
from recipematch.retrieval import NO_GOLD

FIX = Path(__file__).parent / "fixtures" / "beir"
PEER = Path(__file__).resolve().parents[2] / "shared" / "data" / "peer_release"


class OneHot:
    def __init__(self):
        self.vocab = {t: i for i, t in enumerate("A B C D E F G H I J <empty>".split())}
        self.cache_key = "onehot"

    def encode(self, texts):
        out = np.zeros((len(texts), len(self.vocab)), dtype=np.float32)
        for i, t in enumerate(texts):
            for tok in t.split() or ["<empty>"]:
                out[i, self.vocab[tok]] += 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


# m1 "A": easy gold "A E" (.707, ties near-miss "A C"), medium "A E F" (.577, below the two
# .707s), hard "A E F G" (.5, below three). m2 "B": easy "B" (1.0), medium "B H" (.707,
# below "B"), hard "B H I" (.577, below two; beats near-misses "B H I J" .5 and "C D" 0).
@pytest.mark.parametrize("tier, ranks, r1, r5, wins", [
    ("easy", [0, 0], 100.0, 100.0, [0.0, 1.0]),
    ("medium", [2, 1], 0.0, 100.0, [0.0, 1.0]),
    ("hard", [3, 2], 0.0, 100.0, [0.0, 1.0]),
])
def test_mathnet_retrieve_tiers(tier, ranks, r1, r5, wins):
    bset = load_mathnet_retrieve(FIX / "mathnet_mini", tier)
    assert bset.name == f"mathnet-retrieve/{tier}" and len(bset.corpus) == 10
    assert bset.near_misses == {"m1": ["n1"], "m2": ["n2", "n3"]}
    s, pq = evaluate_benchmark(OneHot(), bset)
    assert pq["rank"].tolist() == ranks
    assert (s["R@1"], s["R@5"]) == (r1, r5)
    assert pq["gold_beats_near_misses"].tolist() == wins
    assert s["near_miss"] == {"gold_beats_all_near_misses": 50.0, "n_wins": 1, "n_scored": 2,
                              "n_without_near_misses": 0}
    assert set(s["per_domain"]) == {"Algebra", "Geometry"}
    assert s["benchmark"] == bset.name


def test_mathnet_retrieve_rejects_unknown_tier():
    with pytest.raises(ValueError, match="tier"):
        load_mathnet_retrieve(FIX / "mathnet_mini", "extreme")


def test_fetch_mathnet_retrieve_asks_the_hub_for_the_tier_folders(monkeypatch, tmp_path):
    seen = {}

    def fake_snapshot_download(**kwargs):
        seen.update(kwargs)
        return str(tmp_path)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    assert fetch_mathnet_retrieve(tmp_path, tiers=("hard",), revision="abc") == tmp_path
    assert seen["repo_id"] == "ShadenA/MathNet-Retrieve" and seen["repo_type"] == "dataset"
    assert seen["revision"] == "abc" and "hard/*" in seen["allow_patterns"]


def test_crosslingual_strict_rule():
    bset = load_crosslingual(FIX / "crosslingual_mini")
    # c4's de gold c5 and c7's only (zh) gold are same-language: dropped
    assert bset.qrels == {"c1": {"c2": 1}, "c3": {"c2": 1, "c1": 1}, "c4": {"c6": 1}, "c7": {}}
    assert bset.query_ids == ["c1", "c3", "c4", "c7"]
    assert bset.clusters.tolist() == ["K1", "K1", "K2", "K3"]
    assert bset.counts["n_queries_without_strict_gold"] == 1
    s, pq = evaluate_benchmark(OneHot(), bset)
    # c1 "A": its text twin c9 (1.0) beats gold "A B" (.707) -> rank 1; c3 "A C": gold c1 .707
    # ties the twin c9 -> 0; c4 "D": gold "D F" ties the now non-gold "D E" -> 0; c7: no gold
    assert pq["rank"].tolist() == [1, 0, 0, NO_GOLD]
    assert (s["R@1"], s["R@5"], s["R@10"]) == (50.0, 75.0, 75.0)
    assert s["slices"]["high_confidence"] == pytest.approx(
        {"R@1": 100 / 3, "R@5": 200 / 3, "R@10": 200 / 3, "n": 3})  # c1, c3, c7
    assert pq["n_text_twins"].tolist() == [1, 0, 0, 0]
    assert pq["cluster"].tolist() == ["K1", "K1", "K2", "K3"]
    s_off, pq_off = evaluate_benchmark(OneHot(), bset, self_mask=False)
    assert pq_off["rank"].tolist() == [2, 1, 1, NO_GOLD] and s_off["R@1"] == 0.0


def test_samelang_slices():
    bset = load_samelang(FIX / "samelang_mini")
    assert {k: v.tolist() for k, v in bset.slices.items()} == {
        "primary": [True, True, False, False],
        "english": [True, False, False, False],
        "leaked": [False, False, True, False],
        "exact": [False, False, False, True],
    }
    s, pq = evaluate_benchmark(OneHot(), bset)
    assert pq["rank"].tolist() == [0, 0, 0, 0]
    assert {k: v["n"] for k, v in s["slices"].items()} == {"primary": 2, "english": 1,
                                                           "leaked": 1, "exact": 1}
    assert pq["n_text_twins"].tolist() == [0, 0, 0, 1]  # the exact reprint "G" is a twin


def test_samelang_needs_slice_metadata(tmp_path):
    from recipematch.beir import write_beir

    write_beir(tmp_path, {"a": {"text": "A"}, "b": {"text": "B"}}, {"a": "A"}, {"a": {"b": 1}},
               query_meta={"a": {"cluster_id": "x"}})
    with pytest.raises(BeirFormatError, match="slice"):
        load_samelang(tmp_path)


def test_probe_two_rankings():
    full, only = load_probe(FIX / "probe_mini" / "probe.jsonl", FIX / "probe_mini",
                            qrels_tsv=FIX / "probe_mini" / "qrels.tsv")
    assert full.counts == only.counts == {"n_items": 2, "n_probe_docs": 5, "n_negatives": 3,
                                          "n_qrels_queries_without_item": 1,
                                          "n_items_without_qrels": 0}
    assert len(full.corpus) == 9 and len(only.corpus) == 5
    assert full.near_misses == {"s1": ["cp-neg-s1-0", "cp-neg-s1-1"], "s2": ["cp-neg-s2-0"]}
    s, pq = evaluate_benchmark(OneHot(), full)
    # s1 "A B": own entry masked; positive "A B C" ties negative "A B D" (.816) -> rank 0;
    # s2 "F": corpus twin "F" (1.0) beats positive "F G" (.707) -> rank 1
    assert pq["rank"].tolist() == [0, 1] and s["R@1"] == 50.0
    assert pq["self_masked"].tolist() == [True, False]
    assert pq["gold_beats_near_misses"].tolist() == [0.0, 1.0]  # a tie is not a win
    assert set(s["per_domain"]) == {"Algebra", "Geometry"}
    s, pq = evaluate_benchmark(OneHot(), only)
    assert pq["rank"].tolist() == [0, 0] and s["R@1"] == 100.0


def test_probe_rejects_colliding_ids(tmp_path):
    corpus = {"cp-pos-s1": {"title": "", "text": "A"}}
    with pytest.raises(BeirFormatError, match="collide"):
        load_probe(FIX / "probe_mini" / "probe.jsonl", corpus)


@pytest.mark.skipif(not (PEER / "probe_sample.jsonl").exists(), reason="no peer release")
def test_probe_loads_the_real_peer_sample():
    full, only = load_probe(PEER / "probe_sample.jsonl", PEER / "corpus.jsonl",
                            qrels_tsv=PEER / "casprobe_eval_qrels_test.tsv")
    assert full.counts["n_items"] == 68 and len(full.query_ids) == 68
    assert full.counts["n_qrels_queries_without_item"] == 1107 - 68
    assert full.counts["n_items_without_qrels"] == 0
    assert len(only.corpus) == 68 + full.counts["n_negatives"]
    assert len(full.corpus) == 2500 + len(only.corpus)
    assert all(q["domain"] for q in full.query_meta.values())


def test_bm25_on_a_benchmark_set_uses_the_same_rules():
    bset = load_crosslingual(FIX / "crosslingual_mini")
    s, pq = evaluate_benchmark_bm25(bset)
    # c1 "a": its twin c9 "a" outscores gold "a b" -> rank 1; c7 has no strict gold
    assert pq["rank"].tolist()[0] == 1 and pq["rank"].tolist()[3] == NO_GOLD
    assert s["benchmark"] == "crosslingual-strict" and "high_confidence" in s["slices"]
    assert pq["cluster"].tolist() == ["K1", "K1", "K2", "K3"]
