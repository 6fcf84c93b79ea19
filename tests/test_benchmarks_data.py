"""Loaders of the paper's evaluation sets (Section 3, Appendix A; Tables 4-6), each scored on
a local fixture with the one-hot mock encoder; every expected value is worked out by hand in
the comments. Real-data checks read the repository's ``data/`` (``dvc pull data.dvc``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import RELEASE, require_real_data

from recipematch.benchmarks_build import build_crosslingual_folder, fetch_mathnet_retrieve
from recipematch.benchmarks_data import (
    load_crosslingual,
    load_mathnet_retrieve,
    load_plain,
    load_probe,
    load_samelang,
    load_set,
    member_ids,
)
from recipematch.beir import write_beir
from recipematch.errors import RecipematchError
from recipematch.retrieval import NO_GOLD
from recipematch.scoring import BM25, score, scored_qrels

FIX = Path(__file__).parent / "fixtures" / "beir"
KS = (1, 5, 10)


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
    s, pq = score(bset, OneHot(), ks=KS)
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
    assert bset.rule == "crosslingual_strict"
    # c4's de gold c5 and c7's only (zh) gold are same-language: dropped
    assert scored_qrels(bset) == {"c1": {"c2": 1}, "c3": {"c2": 1, "c1": 1}, "c4": {"c6": 1},
                                  "c7": {}}
    assert bset.query_ids == ["c1", "c3", "c4", "c7"]
    assert bset.clusters.tolist() == ["K1", "K1", "K2", "K3"]
    s, pq = score(bset, OneHot(), ks=KS)
    # c1 "A": its text twin c9 (1.0) beats gold "A B" (.707) -> rank 1; c3 "A C": gold c1 .707
    # ties the twin c9 -> 0; c4 "D": gold "D F" ties the now non-gold "D E" -> 0; c7: no gold
    assert pq["rank"].tolist() == [1, 0, 0, NO_GOLD]
    assert (s["R@1"], s["R@5"], s["R@10"]) == (50.0, 75.0, 75.0)
    assert s["n_queries_no_gold"] == 1 and s["ranks"] == {"c1": 1, "c3": 0, "c4": 0, "c7": -1}
    assert s["slices"]["high_confidence"] == pytest.approx(
        {"R@1": 100 / 3, "R@5": 200 / 3, "R@10": 200 / 3, "n": 3})  # c1, c3, c7
    assert pq["n_text_twins"].tolist() == [1, 0, 0, 0]
    assert pq["cluster"].tolist() == ["K1", "K1", "K2", "K3"]
    s_off, pq_off = score(bset, OneHot(), ks=KS, self_mask=False)
    assert pq_off["rank"].tolist() == [2, 1, 1, NO_GOLD] and s_off["R@1"] == 0.0


def test_samelang_slices():
    bset = load_samelang(FIX / "samelang_mini")
    assert {k: v.tolist() for k, v in bset.slices.items()} == {
        "primary": [True, True, False, False],
        "english": [True, False, False, False],
        "leaked": [False, False, True, False],
        "exact": [False, False, False, True],
    }
    s, pq = score(bset, OneHot(), ks=KS)
    assert pq["rank"].tolist() == [0, 0, 0, 0]
    assert {k: v["n"] for k, v in s["slices"].items()} == {"primary": 2, "english": 1,
                                                           "leaked": 1, "exact": 1}
    assert pq["n_text_twins"].tolist() == [0, 0, 0, 1]  # the exact reprint "G" is a twin


def test_samelang_needs_slice_metadata(tmp_path):
    from recipematch.beir import write_beir

    write_beir(tmp_path, {"a": {"text": "A"}, "b": {"text": "B"}}, {"a": "A"}, {"a": {"b": 1}},
               query_meta={"a": {"cluster_id": "x"}})
    with pytest.raises(RecipematchError, match="slice"):
        load_samelang(tmp_path)


def test_probe_two_rankings():
    full, only = load_probe(FIX / "probe_mini" / "probe.jsonl", FIX / "probe_mini",
                            qrels_tsv=FIX / "probe_mini" / "qrels.tsv")
    assert full.counts == only.counts == {"n_items": 2, "n_probe_docs": 5, "n_negatives": 3,
                                          "n_qrels_queries_without_item": 1,
                                          "n_items_without_qrels": 0}
    assert len(full.corpus) == 9 and len(only.corpus) == 5
    assert full.near_misses == {"s1": ["cp-neg-s1-0", "cp-neg-s1-1"], "s2": ["cp-neg-s2-0"]}
    s, pq = score(full, OneHot(), ks=KS)
    # s1 "A B": own entry masked; positive "A B C" ties negative "A B D" (.816) -> rank 0;
    # s2 "F": corpus twin "F" (1.0) beats positive "F G" (.707) -> rank 1
    assert pq["rank"].tolist() == [0, 1] and s["R@1"] == 50.0
    assert pq["self_masked"].tolist() == [True, False]
    assert pq["gold_beats_near_misses"].tolist() == [0.0, 1.0]  # a tie is not a win
    assert set(s["per_domain"]) == {"Algebra", "Geometry"}
    s, pq = score(only, OneHot(), ks=KS)
    assert pq["rank"].tolist() == [0, 0] and s["R@1"] == 100.0


def test_probe_rejects_colliding_ids(tmp_path):
    corpus = {"cp-pos-s1": {"title": "", "text": "A"}}
    with pytest.raises(RecipematchError, match="collide"):
        load_probe(FIX / "probe_mini" / "probe.jsonl", corpus)


def test_probe_loads_the_real_peer_sample():
    peer = require_real_data(RELEASE / "probe_sample.jsonl").parent
    full, only = load_probe(peer / "probe_sample.jsonl", peer / "corpus.jsonl",
                            qrels_tsv=peer / "casprobe_eval_qrels_test.tsv")
    assert full.counts["n_items"] == 68 and len(full.query_ids) == 68
    assert full.counts["n_qrels_queries_without_item"] == 1107 - 68
    assert full.counts["n_items_without_qrels"] == 0
    assert len(only.corpus) == 68 + full.counts["n_negatives"]
    assert len(full.corpus) == 2500 + len(only.corpus)
    assert all(q["domain"] for q in full.query_meta.values())


def test_bm25_on_a_benchmark_set_uses_the_same_rules():
    bset = load_crosslingual(FIX / "crosslingual_mini")
    s, pq = score(bset, BM25, ks=KS, bm25_k1=1.5, bm25_b=0.75)
    # c1 "a": its twin c9 "a" outscores gold "a b" -> rank 1; c7 has no strict gold
    assert pq["rank"].tolist()[0] == 1 and pq["rank"].tolist()[3] == NO_GOLD
    assert s["benchmark"] == "crosslingual" and "high_confidence" in s["slices"]
    assert pq["cluster"].tolist() == ["K1", "K1", "K2", "K3"]


# --------------------------------------------------------------------------- cross-language folder

RELEASE_MINI = FIX / "crosslingual_release_mini"


@pytest.fixture
def cl_folder(tmp_path):
    counts = build_crosslingual_folder(RELEASE_MINI, tmp_path / "cl")
    return tmp_path / "cl", counts


def test_build_crosslingual_folder_is_sample_golds_and_query_rows(cl_folder, tmp_path):
    folder, counts = cl_folder
    # sample s1-s3, then golds g1-g3, then the query rows not yet there: q2, q3, q4
    # (s1 is a sample document and g1 a gold, so their rows are not added twice)
    assert counts == {"n_docs": 9, "n_sample_docs": 3, "n_gold_docs_added": 3,
                      "n_query_docs_added": 3, "n_queries": 5, "n_qrels_rows": 7,
                      "n_member_ids": 8}
    ids = [json.loads(line)["_id"] for line in (folder / "corpus.jsonl").read_text().splitlines()]
    assert ids == ["s1", "s2", "s3", "g1", "g2", "g3", "q2", "q3", "q4"]
    build_crosslingual_folder(RELEASE_MINI, tmp_path / "again")  # deterministic bytes
    for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        assert (folder / f).read_bytes() == (tmp_path / "again" / f).read_bytes()


def test_strict_rule_reads_each_querys_own_tags_and_keeps_unknown(cl_folder):
    bset = load_crosslingual(cl_folder[0])
    assert bset.query_ids == ["s1", "q2", "q3", "g1", "q4"]
    # s1 (de): g1 en and g3 "unknown" both count (the former loader dropped g3);
    # q2 (fr): its own list tags g2 "fr" -> dropped, though q3 tags the same g2 "en"
    #   (the former loader's one-language-per-document map kept g2 for q2);
    # q3 (en): g2 tagged "en" by q3 -> no gold -> a miss;
    # g1 (en): s1 tagged de; q4 (nl): s2 tagged "unknown" counts (the former loader: a miss)
    assert scored_qrels(bset) == {"s1": {"g1": 1, "g3": 1}, "q2": {"g3": 1}, "q3": {},
                                  "g1": {"s1": 1}, "q4": {"s2": 1}}
    assert bset.counts["n_unknown_gold_tags"] == 2 and bset.counts["n_clusters"] == 3
    assert member_ids(bset) == ["g1", "g2", "g3", "q2", "q3", "q4", "s1", "s2"]
    assert bset.clusters.tolist() == ["K1", "K2", "K2", "K1", "K3"]


def test_crosslingual_ranks_and_slices_by_hand(cl_folder):
    bset = load_crosslingual(cl_folder[0])
    s, pq = score(bset, OneHot(), ks=KS)
    # s1 "A" (own entry masked): gold g1 "A B" .707, nothing above -> 0
    # q2 "D E F": gold g3 "F" .577; g2 "D E" .816 is above it (no longer a gold) -> 1
    # q3 "D": no other-language gold -> -1 (a miss)
    # g1 "A B" (own entry masked): gold s1 "A" .707 -> 0
    # q4 "B G": gold s2 "B C" .5 ties g1 "A B" .5 (ties go to the gold) -> 0
    assert pq["rank"].tolist() == [0, 1, NO_GOLD, 0, 0]
    assert s["ranks"] == {"s1": 0, "q2": 1, "q3": -1, "g1": 0, "q4": 0}
    assert (s["R@1"], s["R@5"], s["R@10"]) == (60.0, 80.0, 80.0)
    assert s["n_queries_no_gold"] == 1 and s["rule"] == "crosslingual_strict"
    assert pq["self_masked"].tolist() == [True, True, True, True, True]
    sl = s["slices"]
    assert {k: v["n"] for k, v in sl.items() if k.startswith("lang=")} == {
        "lang=de": 1, "lang=en": 2, "lang=fr": 1, "lang=nl": 1}
    assert sl["lang=en"]["R@1"] == 50.0  # q3 miss, g1 hit
    assert {k: v["n"] for k, v in sl.items() if k.startswith(("method=", "found_by="))} == {
        "method=V1_text": 1, "method=V2_rare_math": 3, "method=V4_answer_math": 1,
        "method=exact_text": 1, "found_by=answer": 1, "found_by=text": 2,
        "found_by=formulas_only": 2}
    assert sl["found_by=text"]["R@5"] == 50.0  # q2 rank 1 (hit@5), q3 miss
    assert pq["cluster"].tolist() == ["K1", "K2", "K2", "K1", "K3"]


def _write_cl(folder, meta_q1, qrels=None, corpus=None):
    corpus = corpus or {"q1": {"text": "A"}, "d1": {"text": "B"}}
    write_beir(folder, corpus, {"q1": "A"}, qrels or {"q1": {"d1": 1}},
               query_meta={"q1": meta_q1})


@pytest.mark.parametrize("meta, field", [
    ({"cluster_id": "k", "gold_ids": ["d1"], "gold_langs": ["en"]}, "metadata.lang"),
    ({"lang": "de", "cluster_id": "k", "gold_ids": ["d1"]}, "metadata.gold_langs"),
    ({"lang": "de", "cluster_id": "k", "gold_ids": ["d1"], "gold_langs": ["en", "fr"]},
     "metadata.gold_ids has 1"),
    ({"lang": "de", "cluster_id": "k", "gold_ids": ["d9"], "gold_langs": ["en"]},
     "not listed in metadata.gold_ids"),
    ({"lang": "de", "gold_ids": ["d1"], "gold_langs": ["en"]}, "metadata.cluster_id"),
])
def test_strict_rule_refuses_missing_tags_naming_set_file_and_field(tmp_path, meta, field):
    _write_cl(tmp_path / "xl", meta)
    with pytest.raises(RecipematchError) as exc:
        load_set(tmp_path / "xl", "crosslingual_strict")
    msg = str(exc.value)
    assert field in msg and "'xl'" in msg and "queries.jsonl" in msg and "q1" in msg
    assert "\n" not in msg


def test_plain_rule_needs_no_tags_and_checks_ids(tmp_path):
    _write_cl(tmp_path / "p", {})
    bset = load_set(tmp_path / "p", "plain")
    assert bset.rule == "plain" and scored_qrels(bset) == {"q1": {"d1": 1}}
    _write_cl(tmp_path / "u", {}, qrels={"q1": {"nope": 1}})
    with pytest.raises(RecipematchError, match=r"corpus-id 'nope' is not in corpus.jsonl"):
        load_set(tmp_path / "u", "plain")
    _write_cl(tmp_path / "v", {}, qrels={"q1": {"d1": 1}, "ghost": {"d1": 1}})
    with pytest.raises(RecipematchError, match=r"test.tsv: query-id 'ghost' is not in queries"):
        load_set(tmp_path / "v", "plain")
    with pytest.raises(RecipematchError, match=r"set 'absent': folder .*absent does not exist"):
        load_set(tmp_path / "absent", "plain")
    with pytest.raises(RecipematchError, match="unknown rule"):
        load_set(tmp_path / "p", "fuzzy")


def test_reader_faults_name_file_and_line(tmp_path):
    _write_cl(tmp_path / "b", {})
    (tmp_path / "b" / "corpus.jsonl").write_bytes(b'{"_id": "q1", "text": "A"}\n'
                                                  b'{"_id": "d1", "text": "\xff"}\n')
    with pytest.raises(RecipematchError, match=r"corpus.jsonl:2: invalid UTF-8"):
        load_plain(tmp_path / "b")
    _write_cl(tmp_path / "s", {})
    (tmp_path / "s" / "queries.jsonl").write_text('{"_id": "q1", "text": "\\ud800"}\n')
    with pytest.raises(RecipematchError, match=r"queries.jsonl:1: .*surrogate"):
        load_plain(tmp_path / "s")


def test_loaders_do_not_import_evaluation():
    code = ("import sys, recipematch.benchmarks_data; "
            "print(sorted(m for m in sys.modules if m in ('recipematch.retrieval', "
            "'recipematch.metrics', 'recipematch.scoring', 'torch', 'sentence_transformers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**__import__("os").environ,
                                          "PYTHONPATH": str(Path(__file__).parents[1] / "src")})
    assert out.stdout.strip() == "[]"


def test_crosslingual_release_builds_the_papers_folder(tmp_path):
    peer = require_real_data(RELEASE / "crosslingual_eval" / "queries.jsonl").parents[1]
    counts = build_crosslingual_folder(peer, tmp_path / "cl")
    # the release manifest: 2,500 sample documents + 404 golds + the query rows = 3,245;
    # 393 queries, 457 qrels, 779 query and gold ids
    assert counts == {"n_docs": 3245, "n_sample_docs": 2500, "n_gold_docs_added": 404,
                      "n_query_docs_added": 341, "n_queries": 393, "n_qrels_rows": 457,
                      "n_member_ids": 779}
    bset = load_crosslingual(tmp_path / "cl")
    assert len(bset.query_ids) == 393 and len(member_ids(bset)) == 779
    assert bset.counts["n_clusters"] == len(set(bset.clusters.tolist()))
    strict = scored_qrels(bset)
    # the four queries whose strict gold set includes a gold tagged "unknown"
    with_unknown = sorted(q for q in bset.query_ids
                          if any(bset.gold_tags[q][d] == "unknown" for d in strict[q]))
    assert with_unknown == ["062p", "063j", "063r", "0bda"]
    assert strict["062p"] == {"04lx": 1, "08tm": 1}
    assert all(strict[q] for q in bset.query_ids)  # every query keeps an other-language gold
    # Table 4's rows: found through a shared answer 25, matching text 15, formulas only 353
    assert [int(bset.slices[f"found_by={g}"].sum()) for g in ("answer", "text", "formulas_only")
            ] == [25, 15, 353]
    assert sum(int(v.sum()) for k, v in bset.slices.items() if k.startswith("lang=")) == 393


def _copy_release(tmp_path):
    import shutil

    dst = tmp_path / "rel"
    shutil.copytree(RELEASE_MINI, dst)
    return dst


def test_build_crosslingual_folder_refuses_bad_release(tmp_path):
    rel = _copy_release(tmp_path)
    with open(rel / "crosslingual_eval" / "gold_corpus.jsonl", "a") as fh:
        fh.write('{"_id": "s2", "title": "", "text": "not B C"}\n')  # s2 with another text
    with pytest.raises(RecipematchError, match=r"gold_corpus.jsonl: _id 's2' has a different text"):
        build_crosslingual_folder(rel, tmp_path / "out")
    rel = _copy_release(tmp_path / "b")
    with open(rel / "crosslingual_eval" / "qrels" / "test.tsv", "a") as fh:
        fh.write("q4\tg9\t1\n")
    with pytest.raises(RecipematchError, match=r"test.tsv: corpus-id 'g9' \(query 'q4'\)"):
        build_crosslingual_folder(rel, tmp_path / "out")
    rel = _copy_release(tmp_path / "c")
    (rel / "crosslingual_eval" / "queries.jsonl").write_text('{"_id": "q1", "text": 5}\n')
    with pytest.raises(RecipematchError, match=r"queries.jsonl:1: field 'text'"):
        build_crosslingual_folder(rel, tmp_path / "out")
    assert not (tmp_path / "out").exists()
