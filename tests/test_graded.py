"""Graded relevance through ir_measures (issue 21, item 1): our single-gold R@k against the
library on the same runs, nDCG's gains, grades checked with file and line, the CLI."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import RELEASE, Hashed, require_real_data

from recipematch.benchmarks_build import build_crosslingual_folder
from recipematch.benchmarks_data import load_crosslingual, load_samelang, load_set
from recipematch.errors import RecipematchError
from recipematch.graded import (
    check_grades,
    check_qrels_file,
    measure_run,
    parse_measures,
    topk_run,
    write_trec_run,
)
from recipematch.scoring import BM25, score, scored_qrels

FIX = Path(__file__).parent / "fixtures" / "beir"


def _cross_check(bset, model, **kw):
    ks = (1, 5, 10)
    summary, pq = score(bset, model, ks=ks, **kw)
    run = topk_run(bset, model, 10, bm25_k1=kw.get("bm25_k1"), bm25_b=kw.get("bm25_b"))
    names = [f"Success@{k}" for k in ks] + [f"R@{k}" for k in ks]
    values, table = measure_run(scored_qrels(bset), run, parse_measures(names))
    assert table["query_id"].tolist() == pq["query_id"].tolist()
    for k in ks:
        ours = pq[f"hit@{k}"].to_numpy()
        assert np.array_equal(ours.astype(float), table[f"Success@{k}"].to_numpy()), k  # per query, exactly
        assert summary[f"R@{k}"] == pytest.approx(100 * values[f"Success@{k}"], abs=1e-9)
        single = table["n_relevant"].to_numpy() == 1
        assert np.array_equal(ours[single].astype(float), table[f"R@{k}"].to_numpy()[single])
    return summary, values, table


def test_our_recall_is_the_librarys_success_on_the_same_runs() -> None:
    """The paper's R@k (best gold within the top k) is ir_measures' Success@k on every query;
    on a single-gold query its R@k too. Fixtures with multi-gold, 0-graded and cross-language qrels."""
    for folder, rule in (("graded_mini", "plain"), ("samelang_mini", "samelang"), ("crosslingual_mini", "crosslingual_strict")):
        bset = load_set(FIX / folder, rule)
        summary, values, table = _cross_check(bset, Hashed())
        assert summary["n_queries"] == len(table) > 0
    # the strict rule drops same-language golds: a query left without one is a miss on both sides
    bset = load_set(FIX / "crosslingual_mini", "crosslingual_strict")
    _, _, table = _cross_check(bset, Hashed())
    assert (table["n_relevant"] < np.asarray([len([d for d, g in bset.qrels[q].items() if g > 0])
                                              for q in bset.query_ids])).any()


def test_the_cross_check_holds_on_the_real_cross_language_and_same_language_sets(tmp_path: Path) -> None:
    peer = require_real_data(RELEASE / "crosslingual_eval" / "queries.jsonl").parents[1]
    build_crosslingual_folder(peer, tmp_path / "cl")
    build_crosslingual_folder(peer, tmp_path / "sl", subdir="samelang_eval")
    counts = []
    for bset in (load_crosslingual(tmp_path / "cl"), load_samelang(tmp_path / "sl")):
        summary, _, table = _cross_check(bset, Hashed())
        counts.append((summary["n_queries"], int((table["n_relevant"] > 1).sum())))
    assert [n for n, _ in counts] == [393, 498] and all(multi > 0 for _, multi in counts)  # multi-gold queries in both


def test_bm25_runs_agree_with_bm25_ranks_where_nothing_ties() -> None:
    bset = load_set(FIX / "graded_mini", "plain")
    summary, pq = score(bset, BM25, ks=(1, 2), bm25_k1=1.5, bm25_b=0.75)
    run = topk_run(bset, BM25, 10, bm25_k1=1.5, bm25_b=0.75)
    values, table = measure_run(scored_qrels(bset), run, parse_measures(["Success@1", "Success@2"]))
    calm = pq["n_ties_at_gold"].to_numpy() == 0
    assert calm.any()
    for k in (1, 2):
        assert np.array_equal(pq[f"hit@{k}"].to_numpy()[calm].astype(float), table[f"Success@{k}"].to_numpy()[calm])


def test_ndcg_gains_are_the_ones_asked_for() -> None:
    """Grades 2 and 1 ranked second and first: nDCG@10 by hand, linear and exponential."""
    from recipematch.benchmarks_data import BenchmarkSet

    corpus = {"d1": {"title": "", "text": "x"}, "d2": {"title": "", "text": "y"}, "d3": {"title": "", "text": "z"}}
    bset = BenchmarkSet(name="hand", corpus=corpus, queries={"q": "y"}, qrels={"q": {"d1": 2, "d2": 1}}, query_ids=["q"])

    class Fixed:
        cache_key = "fixed"

        def encode(self, texts):  # y first, then x, then z
            table = {"y": [1.0, 0.0], "x": [0.8, 0.6], "z": [0.0, 1.0]}
            return np.asarray([table[t] for t in texts], dtype=np.float32)

    run = topk_run(bset, Fixed(), 10)
    assert run.doc_ids.tolist() == [["d2", "d1", "d3"]]
    dcg_lin, idcg_lin = 1 / math.log2(2) + 2 / math.log2(3), 2 / math.log2(2) + 1 / math.log2(3)
    dcg_exp, idcg_exp = 1 / math.log2(2) + 3 / math.log2(3), 3 / math.log2(2) + 1 / math.log2(3)
    lin, _ = measure_run(bset.qrels, run, parse_measures(["nDCG@10"], gain="linear", grades=[0, 1, 2]))
    exp, _ = measure_run(bset.qrels, run, parse_measures(["nDCG@10"], gain="exponential", grades=[0, 1, 2]))
    assert lin == {"nDCG@10": pytest.approx(dcg_lin / idcg_lin, abs=1e-6)}
    ((name, value),) = exp.items()
    assert name.startswith("nDCG(gains=") and name.endswith(")@10") and value == pytest.approx(dcg_exp / idcg_exp, abs=1e-6)
    assert lin["nDCG@10"] != pytest.approx(value)
    ap, _ = measure_run(bset.qrels, run, parse_measures(["AP", "R@1"]))
    assert ap == {"AP": pytest.approx(1.0), "R@1": pytest.approx(0.5)}


def test_the_library_gets_our_order_not_its_own_tie_break() -> None:
    """Two documents tie: the run orders them by ascending id (search_topk's rule) and the
    library is given positions, so it keeps that order; our R@1 lets the gold win the tie."""
    from recipematch.benchmarks_data import BenchmarkSet

    corpus = {"b": {"title": "", "text": "same"}, "a": {"title": "", "text": "same"}, "c": {"title": "", "text": "other"}}
    bset = BenchmarkSet(name="tie", corpus=corpus, queries={"q": "same"}, qrels={"q": {"b": 1}}, query_ids=["q"])
    run = topk_run(bset, Hashed(), 3)
    assert run.doc_ids.tolist()[0][:2] == ["a", "b"] and run.for_library()["q"] == {"a": 3.0, "b": 2.0, "c": 1.0}
    values, _ = measure_run(bset.qrels, run, parse_measures(["Success@1"]))
    summary, _ = score(bset, Hashed(), ks=(1,))
    assert values["Success@1"] == 0.0 and summary["R@1"] == 100.0


def test_the_run_masks_the_querys_own_entry_as_the_set_does() -> None:
    bset = load_set(FIX / "graded_mini", "plain")
    run = topk_run(bset, Hashed(), 100)
    own = dict(zip(run.query_ids, run.doc_ids.tolist()))
    assert run.depth == len(bset.corpus) and all(q not in own[q] for q in run.query_ids)
    assert all(sum(d is None for d in own[q]) == 1 for q in run.query_ids)  # the masked slot stays empty
    assert "q1" in topk_run(bset, Hashed(), 100, self_mask="none").doc_ids.tolist()[0]


def test_grades_are_checked_with_file_line_and_field(tmp_path: Path) -> None:
    folder = tmp_path / "g"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "d", "text": "a"}\n{"_id": "e", "text": "b"}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q", "text": "a"}\n')
    tsv = folder / "qrels" / "test.tsv"
    tsv.write_text("query-id\tcorpus-id\tscore\nq\td\t2\nq\te\t1\n")
    assert check_qrels_file(folder, "test", (0, 2)) == [1, 2]
    with pytest.raises(RecipematchError, match=r"test.tsv:2: field 'score' 2 is outside the declared scale 0..1"):
        check_qrels_file(folder, "test", (0, 1))
    tsv.write_text("query-id\tcorpus-id\tscore\nq\td\t2\nq\te\t0.5\n")
    with pytest.raises(RecipematchError, match=r"test.tsv:3: field 'score' 0.5 is not an integer grade"):
        check_qrels_file(folder, "test")
    tsv.write_text("query-id\tcorpus-id\tscore\nq\td\ttwo\n")
    with pytest.raises(RecipematchError, match=r"test.tsv:2: field 'score' must be a finite number"):
        check_qrels_file(folder, "test")
    with pytest.raises(RecipematchError, match="not an integer"):
        check_grades({"q": {"d": 0.5}})
    assert check_grades({"q": {"d": 2.0, "e": 0}}, (0, 2)) == [0, 2]


@pytest.mark.parametrize("names, message", [
    (["nDCG@x"], "not an ir_measures measure"),
    (["Foo@3"], "not an ir_measures measure"),
    (["nDCG@10", " nDCG@10"], "named twice"),
    ([""], "not a measure name"),
    ([], "no measure named"),
])
def test_bad_measure_names_are_one_line(names, message) -> None:
    with pytest.raises(RecipematchError, match=message) as e:
        parse_measures(names)
    assert "\n" not in str(e.value)


def test_a_written_run_reads_back_to_the_same_measures(tmp_path: Path) -> None:
    import ir_measures

    bset = load_set(FIX / "samelang_mini", "samelang")
    run = topk_run(bset, Hashed(), 5)
    path = write_trec_run(tmp_path / "run.trec", run)
    measures = parse_measures(["nDCG@10", "R@5"])
    values, _ = measure_run(scored_qrels(bset), run, measures)
    rows = path.read_text().splitlines()
    assert rows[0].split()[1] == "Q0" and rows[0].split()[3] == "1" and len(rows) == len(run.query_ids) * 5
    back = ir_measures.read_trec_run(str(path))
    qrels = {q: {d: int(g) for d, g in per_q.items()} for q, per_q in scored_qrels(bset).items() if q in run.query_ids}
    again = {str(k): v for k, v in ir_measures.calc_aggregate(measures, qrels, back).items()}
    assert again == pytest.approx(values)
    assert path.read_bytes() == write_trec_run(tmp_path / "again.trec", topk_run(bset, Hashed(), 5)).read_bytes()


def _cli(args):
    from recipematch.eval_cli import evaluate

    return CliRunner().invoke(evaluate, args)


def test_the_cli_writes_the_librarys_measures_beside_r_at_k(tmp_path: Path) -> None:
    out, run = tmp_path / "res.json", tmp_path / "run.trec"
    res = _cli([str(FIX / "graded_mini"), "--model", "bm25", "--out", str(out), "--k", "1,5",
                "--measure", "nDCG@10", "--measure", "Success@1", "--gain", "exponential", "--grade-scale", "0..2",
                "--run-out", str(run), "--per-query", str(tmp_path / "pq.parquet")])
    assert res.exit_code == 0, res.output
    s = json.loads(out.read_text())
    assert set(s["measures"]) == {"nDCG(gains={2:3})@10", "Success@1"} and s["gain"] == "exponential"
    assert s["grade_scale"] == [0, 2] and s["grades"] == [0, 1, 2] and s["measure_library"].startswith("ir_measures ")
    assert 0 <= s["measures"]["Success@1"] <= 1 and run.exists()
    assert "nDCG(gains={2:3})@10=" in res.output
    import pandas as pd
    pq = pd.read_parquet(tmp_path / "pq.parquet")
    assert "measure:Success@1" in pq.columns


@pytest.mark.parametrize("extra, message", [
    (["--measure", "nDCG@10", "--grade-scale", "0..1"], r"test.tsv:2: field 'score' 2 is outside the declared scale 0..1"),
    (["--measure", "nDCG@zz"], "not an ir_measures measure"),
    (["--measure", "nDCG@10", "--grade-scale", "2..0"], "--grade-scale '2..0'"),
    (["--run-out", "x.trec"], "need at least one --measure"),
])
def test_bad_graded_options_are_one_line_before_any_model(tmp_path: Path, extra, message) -> None:
    out = tmp_path / "res.json"
    res = _cli([str(FIX / "graded_mini"), "--model", str(tmp_path / "no-such-model"), "--out", str(out), *extra])
    assert res.exit_code == 2 and message in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("name, message", [
    ("P@0", "cut-off must be an integer in 1..1000000"),  # pytrec_eval aborted the process (C assertion)
    ("Success@0", "cut-off must be an integer"),
    ("ERR@10", "not among the measures"),  # a perl helper failed with a traceback
    ("nDCG(dcg='exp-log2')@10", "takes no ['dcg']"),
    ("nDCG@1e1", "cut-off must be an integer"),
    ("nDCG(gains=1)@10", "gains must map integer grades"),
    ("RBP(p=0.8)", "not among the measures"),
    ("RR@10", "RR takes no ['cutoff']"),
])
def test_measures_the_library_would_crash_on_are_refused_first(name, message) -> None:
    """Breaker, issue 21: these passed the name check and crashed after the model had run."""
    with pytest.raises(RecipematchError, match=re.escape(message)):
        parse_measures([name])


def test_grades_past_a_c_int_or_the_exponential_table_are_refused(tmp_path: Path) -> None:
    """Breaker: 4294967297 gave nDCG 1.21 with exit 0; 10**30 under the exponential gain hung."""
    with pytest.raises(RecipematchError, match=r"beyond \+-2147483647"):
        check_grades({"q": {"d": 4294967297}})
    with pytest.raises(RecipematchError, match="above 30"):
        parse_measures(["nDCG@10"], gain="exponential", grades=[0, 64])
    assert parse_measures(["nDCG@10"], gain="exponential", grades=[0, 30])
    folder = tmp_path / "g"
    (folder / "qrels").mkdir(parents=True)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\td\t" + "9" * 31 + "\n")
    with pytest.raises(RecipematchError, match=r"test.tsv:2: field 'score' .* is beyond"):
        check_qrels_file(folder)


@pytest.mark.parametrize("extra, message", [
    (["--run-out", "{out}"], "--run-out and --out name the same file"),
    (["--run-out", "{tmp}"], "is a directory"),
    (["--depth", "1", "--measure", "R@10"], "--measure R@10: cuts at 10, deeper than the run's 1 documents"),
    (["--depth", "2", "--measure", "AP"], "cuts at the whole ranking"),
])
def test_run_outputs_and_depths_are_checked_before_any_model(tmp_path: Path, extra, message) -> None:
    out = tmp_path / "res.json"
    extra = [x.format(out=out, tmp=tmp_path) for x in extra]
    res = _cli([str(FIX / "graded_mini"), "--model", str(tmp_path / "no-such-model"), "--out", str(out),
                "--measure", "nDCG@1", *extra])
    assert res.exit_code == 2 and message in res.output, res.output
    assert not out.exists()


def test_the_run_file_is_written_with_the_other_outputs_or_not_at_all(tmp_path: Path) -> None:
    run, bad_out = tmp_path / "r.trec", tmp_path / "outdir"
    bad_out.mkdir()
    res = _cli([str(FIX / "graded_mini"), "--model", "bm25", "--out", str(bad_out), "--measure", "nDCG@10",
                "--run-out", str(run)])
    assert res.exit_code == 2 and not run.exists() and not list(tmp_path.glob(".*partial")), res.output
    res = _cli([str(FIX / "graded_mini"), "--model", "bm25", "--out", str(tmp_path / "ok.json"), "--measure", "nDCG@10",
                "--run-out", str(run)])
    assert res.exit_code == 0 and run.exists(), res.output
    assert json.loads((tmp_path / "ok.json").read_text())["measure_names"] == {"nDCG@10": "nDCG@10"}
