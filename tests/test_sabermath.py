"""The SABER-Math loader and its reranking protocol (issue 21, item 2; paper Section 6, Table 20):
parquet shaped like INSAIT-Institute/SaberMath-queries and -documents, each query ranking its own
candidates, nDCG@10 with exponential gain on real-valued 0-5 grades (held to scikit-learn's
``ndcg_score`` and to a hand-worked number), bad input named, and the external stage."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, Hashed

from recipematch.beir import load_beir
from recipematch.config import load_yaml, parse_params
from recipematch.errors import RecipematchError
from recipematch.external.sabermath import build_folder, full_text, read_copy
from recipematch.graded_files import CANDIDATES_FILE, read_candidates

DOCS = [("Find all primes p with p^2 + 2 prime.", "Work modulo 3: p = 3 only."),
        ("Show that n^3 - n is divisible by 6.", "Factor as (n-1)n(n+1), three consecutive integers."),
        ("A triangle has sides 3, 4, 5; find its area.", "It is right-angled, so the area is 6."),
        ("Prove that the sum of two odd numbers is even.", "Write them as 2a+1 and 2b+1."),
        ("How many subsets does a 4-element set have?", "Each element is in or out: 2^4 = 16."),
        ("Find the remainder of 2^100 modulo 3.", "2 is -1 modulo 3, so the remainder is 1.")]
QUERIES = [
    {"problem": "Find all primes p such that p^2 + 8 is prime.", "solution": "Modulo 3, only p = 3.",
     "candidates": [0, 1, 5, 3], "relevance_scores": [5.0, 1.25, 3.5, 0.0], "domains": ["Number Theory"],
     "jaccard_scores": [0.3, 0.1, 0.2, 0.0], "bma_scores": [0.9, 0.8, 0.85, 0.1], "original_index": 17},
    {"problem": "Count the subsets of a 5-element set.", "solution": "2^5 = 32.",
     "candidates": [4, 2, 3], "relevance_scores": [4.75, 0.5, 2.0], "domains": ["Combinatorics", "Algebra"],
     "jaccard_scores": [0.4, 0.0, 0.1], "bma_scores": [0.9, 0.2, 0.3], "original_index": 4},
]


def _copy(root: Path, docs=DOCS, queries=QUERIES) -> Path:
    """A local copy laid out as snapshots of the two hub repositories are."""
    for repo in ("queries", "documents"):
        (root / repo / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"problem": [p for p, _ in docs], "solution": [s for _, s in docs],
                             "original_index": list(range(100, 100 + len(docs)))}),
                   root / "documents" / "data" / "train-00000-of-00001.parquet")
    schema = pa.schema([("problem", pa.string()), ("solution", pa.string()), ("candidates", pa.list_(pa.int64())),
                        ("relevance_scores", pa.list_(pa.float64())), ("domains", pa.list_(pa.string())),
                        ("jaccard_scores", pa.list_(pa.float64())), ("bma_scores", pa.list_(pa.float64())),
                        ("original_index", pa.int64())])
    pq.write_table(pa.Table.from_pylist(queries, schema=schema), root / "queries" / "data" / "train-00000-of-00001.parquet")
    return root


def test_each_setting_becomes_a_beir_folder_with_candidates_and_real_grades(tmp_path: Path) -> None:
    copy = _copy(tmp_path / "saber")
    m = build_folder(copy, tmp_path / "sf", "statement-full", revision="r1")
    corpus, queries, qrels = load_beir(tmp_path / "sf")
    # the corpus is every named candidate, in document-row order (positional ids, not original_index)
    assert list(corpus) == ["d000000", "d000001", "d000002", "d000003", "d000004", "d000005"]
    assert corpus["d000002"]["text"] == "Problem: A triangle has sides 3, 4, 5; find its area.\n\nSolution: It is right-angled, so the area is 6."
    assert queries == {"q0000": QUERIES[0]["problem"], "q0001": QUERIES[1]["problem"]}
    assert qrels["q0000"] == {"d000000": 5, "d000001": 1.25, "d000005": 3.5, "d000003": 0}  # zeros kept, exact
    assert read_candidates(tmp_path / "sf") == {"q0000": ["d000000", "d000001", "d000005", "d000003"],
                                                "q0001": ["d000004", "d000002", "d000003"]}
    assert (m["n_queries"], m["n_docs"], m["n_qrels"], m["n_qrels_positive"]) == (2, 6, 7, 6)
    assert m["queries_by_domain"]["Algebra"] == 1 and m["revision"] == "r1" and len(m["inputs"]) == 2
    build_folder(copy, tmp_path / "ff", "full-full")
    _, q_full, _ = load_beir(tmp_path / "ff")
    assert q_full["q0001"] == full_text(QUERIES[1]["problem"], QUERIES[1]["solution"])
    build_folder(copy, tmp_path / "ss", "statement-statement", max_rows=1)
    c_ss, q_ss, _ = load_beir(tmp_path / "ss")
    assert list(q_ss) == ["q0000"] and list(c_ss) == ["d000000", "d000001", "d000003", "d000005"]
    assert c_ss["d000005"]["text"] == DOCS[5][0]


@pytest.mark.parametrize("spoil, message", [
    (lambda q, d: q[0].update(candidates=[0, 1, 6, 3]), r"queries/data/train-00000-of-00001.parquet: row 0: field "
     r"'candidates': 6 is not a row of"),
    (lambda q, d: q[1].update(relevance_scores=[4.75, 5.5, 2.0]), r"row 1: field 'relevance_scores': 5.5 is not a grade in \[0, 5\]"),
    (lambda q, d: q[1].update(relevance_scores=[4.75, math.nan, 2.0]), r"row 1: field 'relevance_scores': nan"),
    (lambda q, d: q[0].update(relevance_scores=[5.0, 1.0]), r"row 0: field 'relevance_scores' must be a list as long as 'candidates' \(4\)"),
    (lambda q, d: q[0].update(candidates=[0, 1, 1, 3]), r"row 0: field 'candidates' names a document twice"),
    (lambda q, d: q[1].update(problem="  "), r"row 1: field 'problem' must be a non-empty string"),
    (lambda q, d: d.__setitem__(2, ("", "x")), r"documents/data/train-00000-of-00001.parquet: row 2: field 'problem'"),
])
def test_bad_rows_are_named_and_nothing_is_written(tmp_path: Path, spoil, message) -> None:
    queries, docs = json.loads(json.dumps(QUERIES)), list(DOCS)
    spoil(queries, docs)
    copy = _copy(tmp_path / "saber", docs, queries)
    with pytest.raises(RecipematchError, match=message):
        build_folder(copy, tmp_path / "out", "statement-full")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_a_missing_file_or_column_is_one_line(tmp_path: Path) -> None:
    copy = _copy(tmp_path / "saber")
    shutil.rmtree(copy / "documents")
    with pytest.raises(RecipematchError, match=r"no parquet file under .*documents/data .*SaberMath-documents"):
        read_copy(copy)
    copy = _copy(tmp_path / "saber2")
    pq.write_table(pa.table({"problem": ["p"], "solution": ["s"]}), copy / "queries" / "data" / "train-00000-of-00001.parquet")
    with pytest.raises(RecipematchError, match=r"missing columns \['candidates', 'relevance_scores', 'domains'\]"):
        read_copy(copy)
    with pytest.raises(RecipematchError, match=r"unknown setting 'statement-proof'"):
        build_folder(_copy(tmp_path / "saber3"), tmp_path / "o", "statement-proof")


def _scored(tmp_path: Path, model):
    from recipematch.benchmarks_data import load_set
    from recipematch.graded import prepare, score_graded

    build_folder(_copy(tmp_path / "saber"), tmp_path / "sf", "statement-full")
    bset = load_set(tmp_path / "sf", "plain")
    spec = prepare(tmp_path / "sf", ["nDCG@10"], n_docs=len(bset.corpus), gain="exponential", scale=(0, 5))
    return bset, spec, score_graded(bset, model, spec, bm25_k1=1.5, bm25_b=0.75)


def test_each_query_reranks_its_own_candidates_and_ndcg_matches_scikit_learn(tmp_path: Path) -> None:
    from sklearn.metrics import ndcg_score

    from recipematch.scoring import BM25

    model = Hashed(16)
    bset, spec, (values, table, run) = _scored(tmp_path, model)
    assert spec.real_valued and spec.candidates and spec.library_names == ("nDCG@10",)
    cand = read_candidates(tmp_path / "sf")
    doc_ids = list(bset.corpus)
    emb_d = model.encode([bset.corpus[d]["text"] for d in doc_ids])
    emb_q = model.encode([bset.queries[q] for q in run.query_ids])
    for i, q in enumerate(run.query_ids):
        ranked = [d for d in run.doc_ids[i] if d is not None]
        assert sorted(ranked) == sorted(cand[q])  # only its candidates, every one of them
        cos = emb_d[[doc_ids.index(d) for d in cand[q]]] @ emb_q[i]
        gains = [2.0 ** bset.qrels[q][d] - 1 for d in cand[q]]
        want = ndcg_score([gains], [cos], k=10)
        assert table.set_index("query_id").loc[q, "measure:nDCG@10"] == pytest.approx(want, abs=1e-12)
    assert values["nDCG@10"] == pytest.approx(float(table["measure:nDCG@10"].mean()))
    _, _, (bm_values, _, bm_run) = _scored(tmp_path / "bm", BM25)
    assert all(sorted(d for d in row if d) == sorted(cand[q]) for q, row in zip(bm_run.query_ids, bm_run.doc_ids))
    assert 0 < bm_values["nDCG@10"] <= 1


def test_a_hand_worked_ndcg_on_real_grades() -> None:
    """Grades {a: 5, b: 1.25, c: 3.5, d: 0} ranked b, a, d, c: gains 2**g - 1 are 31, 1.378414,
    10.313708, 0; DCG = 1.378414/1 + 31/log2(3) + 0/2 + 10.313708/log2(5) = 1.378414 + 19.558877
    + 4.441887 = 25.379178; ideal a, c, b, d: 31 + 10.313708/log2(3) + 1.378414/2 = 38.196486;
    nDCG@10 = 0.664437."""
    import pandas as pd

    from recipematch.graded import Run, measure_real_valued, parse_measures

    run = Run(["q"], np.array([["b", "a", "d", "c"]], dtype=object), np.zeros((1, 4), np.float32), "m")
    values, table = measure_real_valued({"q": {"a": 5.0, "b": 1.25, "c": 3.5, "d": 0.0}}, run,
                                        parse_measures(["nDCG@10"]), "exponential")
    g = {k: 2 ** v - 1 for k, v in {"a": 5.0, "b": 1.25, "c": 3.5}.items()}
    dcg = g["b"] + g["a"] / math.log2(3) + g["c"] / math.log2(5)
    idcg = g["a"] + g["c"] / math.log2(3) + g["b"] / 2
    assert values["nDCG@10"] == pytest.approx(dcg / idcg, abs=1e-12)
    assert values["nDCG@10"] == pytest.approx(0.664437, abs=1e-6)
    assert isinstance(table, pd.DataFrame) and table["n_relevant"].tolist() == [3]


def test_real_grades_take_exponential_ndcg_only(tmp_path: Path) -> None:
    from recipematch.benchmarks_data import load_set
    from recipematch.graded import prepare

    build_folder(_copy(tmp_path / "saber"), tmp_path / "sf", "statement-full")
    n = len(load_set(tmp_path / "sf", "plain").corpus)
    with pytest.raises(RecipematchError, match=r"m: real-valued grades .* exponential gain only"):
        prepare(tmp_path / "sf", ["nDCG@10"], n_docs=n, gain="linear", where="m:")
    with pytest.raises(RecipematchError, match=r"measure R@10: real-valued grades take nDCG@k only"):
        prepare(tmp_path / "sf", ["nDCG@10", "R@10"], n_docs=n, gain="exponential")
    with pytest.raises(RecipematchError, match=r"qrels/test.tsv:2: field 'score' 5 is outside the declared scale 0..4"):
        prepare(tmp_path / "sf", ["nDCG@10"], n_docs=n, gain="exponential", scale=(0, 4))
    (tmp_path / "sf" / CANDIDATES_FILE).write_text('{"q0000": ["d000000", "d000000"]}')
    with pytest.raises(RecipematchError, match=r"candidates.json: query 'q0000': a candidate is listed twice"):
        prepare(tmp_path / "sf", ["nDCG@10"], n_docs=n, gain="exponential")


def test_the_external_stage_builds_sabermath_and_the_evaluate_stage_scores_it(tmp_path: Path) -> None:
    from recipematch.benchmarks_data import load_set
    from recipematch.pipeline import external
    from conftest import Outputs
    from recipematch.pipeline.evaluate import load_graded, score_models
    from recipematch.scoring import BM25

    _copy(tmp_path / "data" / "sabermath")
    raw = load_yaml(REPO / "params.yaml")
    raw["external"]["sabermath"] = {"loader": "sabermath", "copy": "data/sabermath",
                                    "subsets": ["statement-full", "full-full"], "revision": "rev", "max_rows": 0}
    raw["evaluations"] = {k: v for k, v in raw["evaluations"].items() if v.get("role") != "external"}
    raw["evaluations"]["saber"] = {"folder": "artifacts/external/sabermath/statement-full", "rule": "plain",
                                   "role": "external",
                                   "measures": ["nDCG@10"], "gain": "exponential", "grade_scale": [0, 5]}
    p, lay = parse_params(raw), Outputs(tmp_path, raw)
    counts = external.run(p.view(external.PARAMS), lay.stage("external@sabermath"), name="sabermath")
    assert counts["subsets"]["statement-full"]["n_queries"] == 2 and counts["subsets"]["full-full"]["n_docs"] == 6
    ev = p.evaluations["saber"]
    sets = {"saber": load_set(lay.p(ev.folder), ev.rule, name="saber")}
    graded = load_graded(p, lay, {**sets})
    frames, per_model = score_models([("bm25", BM25, None)], sets, arm="bm25", ks=(1,), lay=lay,
                                     bm25=(1.5, 0.75), graded=graded)
    r = per_model["bm25"]["saber"]
    assert r["graded"]["measure_library"].startswith("recipematch.saber.ndcg_exponential")
    assert r["graded"]["reranking"] == {"file": "candidates.json", "n_queries": 2}
    assert 0 < r["measures"]["nDCG@10"] <= 1
    assert frames["saber"][0]["measure:nDCG@10"].between(0, 1).all()
    bad = dict(raw["external"]["sabermath"], subsets=["statement-proof"])
    with pytest.raises(RecipematchError, match=r"external.sabermath.subsets: unknown sabermath subsets"):
        parse_params({**raw, "external": {"sabermath": bad}})


def test_plan_names_a_missing_or_partial_sabermath_copy(tmp_path: Path) -> None:
    from recipematch.plan import build_plan

    raw = load_yaml(REPO / "params.yaml")
    raw["external"] = {"sabermath": {"loader": "sabermath", "copy": "data/sabermath", "subsets": ["statement-full"]}}
    raw["evaluations"] = {k: v for k, v in raw["evaluations"].items() if v.get("role") != "external"}

    def status():
        inputs = {i["input"]: i for i in build_plan(parse_params(raw), tmp_path)["inputs"]}
        return inputs["external.sabermath.copy"]

    assert status()["status"] == "missing"
    copy = _copy(tmp_path / "data" / "sabermath")
    assert status()["status"] == "ok"
    shutil.rmtree(copy / "documents")
    got = status()
    assert (got["status"], got["detail"]) == ("bad", "sabermath copy: documents/data/ holds 0 parquet files, expected one")


def test_a_measure_deeper_than_the_reranking_run_is_refused(tmp_path: Path) -> None:
    from recipematch.graded import prepare

    build_folder(_copy(tmp_path / "saber"), tmp_path / "sf", "statement-full")
    with pytest.raises(RecipematchError, match=r"nDCG@4: cuts at 4, deeper than the run's 2 documents per query"):
        prepare(tmp_path / "sf", ["nDCG@4"], n_docs=6, gain="exponential", depth=2)
    assert prepare(tmp_path / "sf", ["nDCG@4"], n_docs=6, gain="exponential", depth=4).depth == 4


def test_every_query_counts_in_the_mean(tmp_path: Path) -> None:
    """A query none of whose candidates is graded above 0 is refused, by the loader and by a
    hand-edited folder's check, instead of leaving BEIR's mean silently."""
    from recipematch.graded import prepare

    queries = json.loads(json.dumps(QUERIES))
    queries[1]["relevance_scores"] = [0.0, 0.0, 0.0]
    with pytest.raises(RecipematchError, match=r"row 1: field 'relevance_scores': no candidate has a grade above 0"):
        build_folder(_copy(tmp_path / "s0", queries=queries), tmp_path / "o0", "statement-full")
    build_folder(_copy(tmp_path / "saber"), tmp_path / "sf", "statement-full")
    tsv = tmp_path / "sf" / "qrels" / "test.tsv"
    tsv.write_text("".join(line for line in tsv.read_text().splitlines(keepends=True) if not line.startswith("q0001")))
    with pytest.raises(RecipematchError, match=r"candidates.json: query 'q0001' has no candidate with a grade above 0"):
        prepare(tmp_path / "sf", ["nDCG@10"], n_docs=6, gain="exponential")


@pytest.mark.parametrize("qrels_line, message", [
    ("q0000\td000000\t1100.5\n", r"'score' 1100.5 is above 30 \(the exponential gain"),
    ("q0000\td000000\t-0.5\n", r"'score' -0.5 is negative"),
])
def test_grades_the_exponential_gain_cannot_take_are_refused(tmp_path: Path, qrels_line, message) -> None:
    from recipematch.graded import prepare

    build_folder(_copy(tmp_path / "saber"), tmp_path / "sf", "statement-full")
    tsv = tmp_path / "sf" / "qrels" / "test.tsv"
    lines = tsv.read_text().splitlines(keepends=True)
    tsv.write_text(lines[0] + qrels_line + "".join(lines[2:]))
    with pytest.raises(RecipematchError, match=message):
        prepare(tmp_path / "sf", ["nDCG@10"], n_docs=6, gain="exponential")


def test_an_empty_candidates_file_is_refused_not_read_as_full_retrieval(tmp_path: Path) -> None:
    from recipematch.graded import prepare

    build_folder(_copy(tmp_path / "saber"), tmp_path / "sf", "statement-full")
    (tmp_path / "sf" / CANDIDATES_FILE).write_text("{}")
    with pytest.raises(RecipematchError, match=r"candidates.json: expected a non-empty object"):
        prepare(tmp_path / "sf", ["nDCG@10"], n_docs=6, gain="exponential")
    assert read_candidates(tmp_path) is None  # no file: not a reranking folder


def test_whole_number_grades_keep_the_measure_name_and_value(tmp_path: Path) -> None:
    """A subsample whose grades happen to be whole numbers is scored by the same metric under the
    same name as one with real-valued grades."""
    from recipematch.benchmarks_data import load_set
    from recipematch.graded import prepare, score_graded
    from recipematch.scoring import BM25

    queries = json.loads(json.dumps(QUERIES))
    queries[0]["relevance_scores"] = [5.0, 1.0, 3.0, 0.0]
    queries[1]["relevance_scores"] = [5.0, 0.0, 2.0]
    build_folder(_copy(tmp_path / "saber", queries=queries), tmp_path / "sf", "statement-full")
    spec = prepare(tmp_path / "sf", ["nDCG@10"], n_docs=6, gain="exponential")
    assert spec.real_valued and spec.library_names == ("nDCG@10",)
    with pytest.raises(RecipematchError, match=r"R@10: real-valued grades take nDCG@k only"):
        prepare(tmp_path / "sf", ["R@10"], n_docs=6, gain="exponential")
    values, _, _ = score_graded(load_set(tmp_path / "sf", "plain"), BM25, spec, bm25_k1=1.5, bm25_b=0.75)
    assert 0 < values["nDCG@10"] <= 1


def test_unreadable_strings_bad_max_rows_and_unwritable_outputs_are_one_line(tmp_path: Path) -> None:
    copy = _copy(tmp_path / "saber")
    bad = pa.array([b"ok", b"\xff\xfe bad", b"x", b"y", b"z", b"w"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"problem": bad, "solution": [s for _, s in DOCS]}),
                   copy / "documents" / "data" / "train-00000-of-00001.parquet")
    with pytest.raises(RecipematchError, match=r"documents/data/train-00000-of-00001.parquet: field 'problem' cannot be "
                                               r"read .*UTF-8"):
        read_copy(copy)
    copy = _copy(tmp_path / "saber2")
    for bad_rows in (-1, True, 1.5, "1"):
        with pytest.raises(RecipematchError, match=r"max_rows must be an integer >= 0"):
            read_copy(copy, max_rows=bad_rows)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(RecipematchError, match=r"SABER-Math: cannot write .*afile/sub"):
        build_folder(copy, tmp_path / "afile" / "sub", "statement-full")
    assert not (tmp_path / "afile" / "sub.partial").exists()
    (tmp_path / "o.partial").write_text("a stale file")
    build_folder(copy, tmp_path / "o", "statement-full")
    assert (tmp_path / "o" / "MANIFEST.json").is_file() and not (tmp_path / "o.partial").exists()


def test_plan_reads_the_copys_parquet_footers(tmp_path: Path) -> None:
    from recipematch.external.sabermath import copy_problem as _sabermath_copy_problem

    copy = _copy(tmp_path / "saber")
    assert _sabermath_copy_problem(copy) is None
    (copy / "queries" / "data" / "extra.parquet").write_bytes(b"PAR1 not really")
    assert _sabermath_copy_problem(copy) == "queries/data/ holds 2 parquet files, expected one"
    (copy / "queries" / "data" / "extra.parquet").unlink()
    (copy / "documents" / "data" / "train-00000-of-00001.parquet").write_bytes(b"random bytes")
    assert _sabermath_copy_problem(copy).startswith("documents/data/train-00000-of-00001.parquet is not a readable parquet")
