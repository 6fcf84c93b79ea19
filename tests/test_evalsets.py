"""LLM-built tiers shaped like MathNet-Retrieve's (paper Sections 1 and 3, Table 1: one corpus,
the same queries, tiers differing only in the gold) and the gold-only diagnostic, as BEIR
folders, on hand-made rows; ranks worked out by hand with a one-hot encoder."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import stage_paths
from recipematch.benchmarks_data import load_plain
from recipematch.errors import RecipematchError
from recipematch.evalsets import build_gold_only, build_tiers, choose_heldout, write_tiers
from recipematch.scoring import score

CORPUS = [{"doc_id": "p1", "title": "", "text": "A B"},
          {"doc_id": "p2", "title": "", "text": "C"},
          {"doc_id": "p3", "title": "", "text": "A"},
          {"doc_id": "p4", "title": "", "text": "E"}]
D1 = [{"source_id": "p1", "positive_text": "A B D", "negatives": [{"text": "A B"}, {"text": "B"}]},
      {"source_id": "p2", "positive_text": "C D", "negatives": []},
      {"source_id": "p4", "positive_text": "E", "negatives": [{"text": "F"}]}]
D4 = [{"source_id": "p1", "positive_text": "B D", "negatives": []},
      {"source_id": "p2", "positive_text": "C F", "negatives": []}]
RW = {"d1": D1, "d4": D4}


class OneHot:
    cache_key = "onehot"
    vocab = {t: i for i, t in enumerate("A B C D E F".split())}

    def encode(self, texts):
        out = np.zeros((len(texts), len(self.vocab)), dtype=np.float32)
        for i, t in enumerate(texts):
            for tok in t.split():
                out[i, self.vocab[tok]] += 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_tiers_share_one_corpus_with_every_rewrite_and_near_miss():
    docs, tiers = build_tiers(CORPUS, RW, ["p2", "p1"])
    assert list(docs) == ["p1", "p2", "p3", "p4", "d1-pos-p1", "d1-neg-p1-0", "d1-neg-p1-1", "d4-pos-p1",
                          "d1-pos-p2", "d4-pos-p2"]
    assert list(tiers) == ["tier_d1", "tier_d4"]
    q1, r1, m1 = tiers["tier_d1"]
    q4, r4, m4 = tiers["tier_d4"]
    assert q1 == q4 == {"p1": "A B", "p2": "C"}  # the same queries: the held-out source's own text
    assert r1 == {"p1": {"d1-pos-p1": 1}, "p2": {"d1-pos-p2": 1}}
    assert r4 == {"p1": {"d4-pos-p1": 1}, "p2": {"d4-pos-p2": 1}}
    # near-misses are the benchmark's (D1) in both tiers; the other rewrite is equivalent, not gold
    assert m1["p1"] == {"tier": "tier_d1", "gold": "d1", "near_miss_ids": ["d1-neg-p1-0", "d1-neg-p1-1"],
                        "equivalent_ids": ["d4-pos-p1"]}
    assert m4["p1"]["near_miss_ids"] == ["d1-neg-p1-0", "d1-neg-p1-1"] and m4["p1"]["equivalent_ids"] == ["d1-pos-p1"]
    assert m1["p2"]["near_miss_ids"] == []


def test_gold_only_diagnostic_has_no_near_misses_and_no_other_rewrite():
    docs, queries, qrels, meta = build_gold_only(CORPUS, D1, ["p2", "p1"])
    assert list(docs) == ["p1", "p2", "p3", "p4", "d1-pos-p1", "d1-pos-p2"]
    assert qrels == {"p1": {"d1-pos-p1": 1}, "p2": {"d1-pos-p2": 1}}
    assert meta == {"p1": {"tier": "gold_only", "gold": "d1"}, "p2": {"tier": "gold_only", "gold": "d1"}}


def test_write_tiers_then_score_by_hand(tmp_path):
    counts = write_tiers(tmp_path, CORPUS, RW, ["p1", "p2"])
    assert counts == {"n_queries": 2, "n_docs": 10, "n_near_misses": 2,
                      "n_queries_without_near_misses": 1, "n_equivalent_docs": 2,
                      "gold_only.n_docs": 6}
    write_tiers(tmp_path / "again", CORPUS, RW, ["p2", "p1"])
    for tier in ("tier_d1", "tier_d4", "gold_only"):
        for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
            assert (tmp_path / tier / f).read_bytes() == (tmp_path / "again" / tier / f).read_bytes()
    assert (tmp_path / "tier_d1" / "corpus.jsonl").read_bytes() == (tmp_path / "tier_d4" / "corpus.jsonl").read_bytes()
    t1, t4, g = (load_plain(tmp_path / t) for t in ("tier_d1", "tier_d4", "gold_only"))
    assert g.near_misses == {} and t1.near_misses == {"p1": ["d1-neg-p1-0", "d1-neg-p1-1"]}
    # gold_only: p1 "A B" (own entry masked): gold "A B D" .816, p3 "A" .707 below -> 0;
    #            p2 "C": gold "C D" .707, nothing else shares C -> 0
    s, pq = score(g, OneHot(), ks=(1, 5))
    assert pq["rank"].tolist() == [0, 0] and s["R@1"] == 100.0
    # tier_d1: p1's near-miss "A B" scores 1.0 above the gold .816 -> 1;
    #          p2 "C": gold "C D" .707 ties the D4 rewrite "C F" .707 (an equivalent, not gold)
    s, pq = score(t1, OneHot(), ks=(1, 5))
    assert pq["rank"].tolist()[0] == 1 and s["near_miss"]["n_without_near_misses"] == 1
    # tier_d4: p1 "A B": near-miss "A B" 1.0, "A B D" .816 (equivalent), then gold "B D" .5
    #          and near-miss "B" .707 and p3 "A" .707 above it -> rank 4
    s, pq = score(t4, OneHot(), ks=(1, 5))
    assert pq["rank"].tolist()[0] == 4 and s["R@5"] >= 50.0


@pytest.mark.parametrize("heldout, match", [
    (["p9"], "'p9' is not in the corpus"),
    (["p3"], "'p3' has no recorded D1 rewrite"),
    (["p4"], "'p4' has no recorded D4 rewrite"),
])
def test_tiers_refuse_bad_input(heldout, match):
    with pytest.raises(RecipematchError, match=match):
        build_tiers(CORPUS, RW, heldout)


def test_tiers_need_both_rewrites():
    with pytest.raises(RecipematchError, match=r"missing \['d4'\]"):
        build_tiers(CORPUS, {"d1": D1}, ["p1"])


def test_tier_refuses_a_release_row_without_source_id():
    with pytest.raises(RecipematchError, match=r"D1 release row 1 .*'source_id'"):
        build_tiers(CORPUS, {"d1": [D1[0], {"positive_text": "x"}], "d4": D4}, ["p1"])


def test_tier_refuses_a_document_id_clash():
    corpus = [*CORPUS, {"doc_id": "d4-pos-p1", "title": "", "text": "Z"}]
    with pytest.raises(RecipematchError, match="already a corpus id"):
        build_tiers(corpus, RW, ["p1"])
    with pytest.raises(RecipematchError, match="already a corpus id"):
        build_gold_only([*CORPUS, {"doc_id": "d1-pos-p1", "title": "", "text": "Z"}], D1, ["p1"])


def test_choose_heldout_is_seeded_and_bounded():
    assert choose_heldout(["c", "a", "b", "d"], 2, seed=3) == choose_heldout(["d", "b", "a", "c"], 2, seed=3)
    with pytest.raises(RecipematchError, match="n_heldout"):
        choose_heldout(["a", "b"], 3, seed=0)


# --------------------------------------------------------------------------- the evalsets stage

import json  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

MINI = Path(__file__).parent / "fixtures" / "mini_release"


def _stage_root(tmp_path, edit=None):
    """A project root holding the mini release (``edit(release_folder)`` applied), its corpus
    stage run; returns ``(params, layout)``."""
    from recipematch.config import load_yaml, parse_params
    from recipematch.pipeline import corpus as corpus_stage
    from conftest import Outputs

    rel = tmp_path / "data" / "peer_release"
    shutil.copytree(MINI, rel)
    if edit:
        edit(rel)
    raw = load_yaml(Path(__file__).resolve().parents[1] / "params.yaml")
    raw["evalsets"] = {"seed": 7, "n_heldout": 5, "corpus_docs": 0}
    lay = Outputs(tmp_path)
    p = parse_params(raw)
    corpus_stage.run(p.view(corpus_stage.PARAMS), stage_paths(tmp_path, "corpus", raw))
    return raw, lay


def _run_evalsets(raw, lay):
    from recipematch.config import parse_params
    from recipematch.pipeline import evalsets as evalsets_stage

    return evalsets_stage.run(parse_params(raw).view(evalsets_stage.PARAMS), stage_paths(lay.root, "evalsets", raw))


def _rewrite_first(path: Path, fn):
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[0] = fn(lines[0])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_the_stage_writes_every_set_of_the_default(tmp_path):
    raw, lay = _stage_root(tmp_path)
    counts = _run_evalsets(raw, lay)
    assert counts["tiers.n_queries"] == 5 and counts["samelang.n_queries"] == 6
    for name in ("tier_d1", "tier_d4", "gold_only", "crosslingual", "samelang", "probe"):
        assert (lay.evalsets / name / "qrels" / "test.tsv").is_file()


@pytest.mark.parametrize("edit, match", [
    (lambda rel: _rewrite_first(rel / "probe_sample.jsonl", lambda line: '"hello"'),
     r"probe_sample\.jsonl row 0: not an object"),
    (lambda rel: _rewrite_first(rel / "pairs_d1_recipe.jsonl",
                                lambda line: json.dumps({**json.loads(line), "source_id": ["0004"]})),
     r"pairs_d1_recipe\.jsonl row 0 .*'source_id' missing, empty or not text"),
    (lambda rel: shutil.rmtree(rel / "samelang_eval"), r"samelang_eval is missing .*dvc pull data\.dvc"),
    (lambda rel: _rewrite_first(rel / "samelang_eval" / "queries.jsonl", lambda line: json.dumps(
        {**json.loads(line), "metadata": {k: v for k, v in json.loads(line)["metadata"].items()
                                          if k not in ("exact_text_cluster", "clean_of_training")}},
        ensure_ascii=False)),
     r"query '00ad': metadata lacks the slice flags .*fix it in .*samelang_eval/queries\.jsonl"),
])
def test_the_stage_refuses_bad_release_files_before_writing_a_set(tmp_path, edit, match):
    raw, lay = _stage_root(tmp_path, edit)
    with pytest.raises(RecipematchError, match=match):
        _run_evalsets(raw, lay)
    assert not [f for f in lay.evalsets.rglob("*") if f.is_file()] if lay.evalsets.exists() else True


def test_a_search_corpus_smaller_than_the_queries_is_a_params_error(tmp_path):
    raw, lay = _stage_root(tmp_path)
    raw["evalsets"]["corpus_docs"] = 3
    with pytest.raises(RecipematchError, match=r"evalsets\.corpus_docs: n_docs=3 is smaller than"):
        _run_evalsets(raw, lay)
