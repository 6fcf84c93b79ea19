"""MIRB (paper Section 6, Table 22): the loader's BEIR folders, its protocol (title + text,
excluded ids dropped, nDCG@10 over the top 1,000) through the library, and its refusals. The
fixture is shaped like MIRB's hcju/<task> folders (corpus, queries, graded qrels/test.jsonl,
excluded_ids.jsonl)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import Hashed

from recipematch.errors import RecipematchError
from recipematch.external import mirb

FIX = Path(__file__).parent / "fixtures" / "mirb_mini"


def test_a_task_becomes_a_beir_folder_with_mirbs_document_text_and_exclusions(tmp_path) -> None:
    from recipematch.beir import read_beir
    from recipematch.graded_files import read_excluded

    man = mirb.build_folder(FIX, tmp_path / "modup", "modup", revision="r")
    ds = read_beir(tmp_path / "modup", "test")
    assert ds.corpus["101"]["text"] == "Cauchy-Schwarz For vectors u and v, |<u,v>| <= |u||v|."
    assert ds.corpus["102"]["text"] == "The sum of the first n odd numbers is n^2."  # no title: no leading blank
    assert ds.corpus["105"]["text"] == "Wilson (p-1)! = -1 mod p for a prime p."  # each part stripped
    assert list(ds.queries) == ["1", "2"]  # query 3 has no grade > 0
    assert ds.qrels["1"] == {"101": 2, "103": 1}
    assert read_excluded(tmp_path / "modup") == {"1": ["103"]}  # query 3's row is not a kept query's
    assert (man["n_queries_without_qrels"], man["n_qrels_zero"], man["grades"]) == (1, 1, [1, 2])
    m2 = mirb.build_folder(FIX, tmp_path / "mseqa", "mseqa")
    assert m2["n_queries"] == 2 and m2["n_excluded_ids"] == 0 and not (tmp_path / "mseqa" / "excluded_ids.json").exists()
    assert read_beir(tmp_path / "mseqa", "test").qrels["8"] == {"105": 2, "104": 1}  # integer ids and 1.0 grades read


def test_ndcg_through_the_pipeline_is_the_librarys_on_the_run_without_excluded_ids(tmp_path) -> None:
    import ir_measures

    from recipematch.benchmarks_data import load_set
    from recipematch.graded import prepare, score_graded
    from recipematch.scoring import scored_qrels

    mirb.build_folder(FIX, tmp_path / "modup", "modup")
    bset = load_set(tmp_path / "modup", "plain", name="modup")
    spec = prepare(tmp_path / "modup", ["nDCG@10"], n_docs=len(bset.corpus), depth=1000)
    values, table, _ = score_graded(bset, Hashed(16), spec)
    enc = Hashed(16)
    ids = list(bset.corpus)
    d = enc.encode([bset.corpus[i]["text"] for i in ids])
    run = {}
    for q in bset.query_ids:
        s = d @ enc.encode([bset.queries[q]])[0]
        run[q] = {i: float(v) for i, v in zip(ids, s) if not (q == "1" and i == "103")}
    want = {m.query_id: m.value for m in ir_measures.iter_calc([ir_measures.nDCG @ 10], scored_qrels(bset), run)}
    assert table.set_index("query_id")["measure:nDCG@10"].to_dict() == pytest.approx(want)
    assert values["nDCG@10"] == pytest.approx(np.mean(list(want.values())))


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(FIX, tmp_path / "copy")
    return tmp_path / "copy"


@pytest.mark.parametrize("fname, line, message", [
    ("qrels/test.jsonl", '{"query-id": "1", "corpus-id": "101", "score": 1.5}', r"test.jsonl:5: field 'score' must be an integer grade"),
    ("qrels/test.jsonl", '{"query-id": "1", "corpus-id": "101", "score": "high"}', r"test.jsonl:5: field 'score' must be a number"),
    ("qrels/test.jsonl", '{"query-id": "1", "corpus-id": "101", "score": "\\u0663"}', r"test.jsonl:5: field 'score' must be a number"),
    ("qrels/test.jsonl", '{"query-id": "9", "corpus-id": "101", "score": 1}', r"test.jsonl:5: query-id '9' is not in queries.jsonl"),
    ("qrels/test.jsonl", '{"query-id": "1", "corpus-id": "999", "score": 1}', r"test.jsonl:5: corpus-id '999' is not in corpus.jsonl"),
    ("corpus.jsonl", '{"_id": "107", "title": " ", "text": ""}', r"corpus.jsonl:7: document '107' has no text"),
    ("corpus.jsonl", '{"_id": "101", "title": "", "text": "again"}', r"corpus.jsonl:7: document id '101' is given twice"),
    ("queries.jsonl", '{"_id": null, "text": "x"}', r"queries.jsonl:4: field '_id' must be a non-empty string"),
    ("excluded_ids.jsonl", '{"query-id": "1", "excluded-ids": "103"}', r"excluded_ids.jsonl:3: field 'excluded-ids' must be a list"),
    ("queries.jsonl", '{"_id": "4", "text": ', r"queries.jsonl:4: "),
])
def test_bad_input_is_named_by_file_line_and_field(tmp_path, fname, line, message) -> None:
    src = _copy(tmp_path)
    with (src / "modup" / fname).open("a") as f:
        f.write(line + "\n")
    with pytest.raises(RecipematchError, match=message):
        mirb.build_folder(src, tmp_path / "out", "modup")
    assert not (tmp_path / "out").exists()


def test_a_missing_task_file_or_unknown_task_is_one_line(tmp_path) -> None:
    src = _copy(tmp_path)
    (src / "modup" / "qrels" / "test.jsonl").unlink()
    with pytest.raises(RecipematchError, match=r"MIRB: missing files \[.*modup/qrels/test.jsonl"):
        mirb.build_folder(src, tmp_path / "out", "modup")
    with pytest.raises(RecipematchError, match="unknown task"):
        mirb.build_folder(src, tmp_path / "out", "leanpremises")


def test_the_external_stage_builds_the_declared_tasks_and_checks_all_first(tmp_path) -> None:
    from conftest import REPO

    from recipematch.config import load_yaml, parse_params
    from recipematch.pipeline import external
    from conftest import Outputs

    shutil.copytree(FIX, tmp_path / "data" / "mirb")
    raw = load_yaml(REPO / "params.yaml")
    raw["external"]["mirb"] = {"loader": "mirb", "copy": "data/mirb", "subsets": ["modup", "mseqa"]}
    p, lay = parse_params(raw), Outputs(tmp_path, raw)
    counts = external.run(p.view(external.PARAMS), lay.stage("external@mirb"), name="mirb")
    assert counts["subsets"]["modup"]["n_queries"] == 2 and counts["subsets"]["mseqa"]["n_queries"] == 2
    with (tmp_path / "data" / "mirb" / "mseqa" / "qrels" / "test.jsonl").open("a") as f:
        f.write('{"query-id": 7, "corpus-id": 101, "score": 0.5}\n')
    before = (lay.external("mirb") / "modup" / "corpus.jsonl").read_bytes()
    with pytest.raises(RecipematchError, match=r"mseqa/qrels/test.jsonl:4: field 'score' must be an integer grade"):
        external.run(p.view(external.PARAMS), lay.stage("external@mirb"), name="mirb")
    assert (lay.external("mirb") / "modup" / "corpus.jsonl").read_bytes() == before
    raw["external"]["mirb"]["subsets"] = ["leanpremises"]
    with pytest.raises(RecipematchError, match=r"external.mirb.subsets: unknown mirb subsets \['leanpremises'\]"):
        parse_params(raw)


@pytest.mark.parametrize("fname, line, message", [
    ("corpus.jsonl", '{"_id": "106 ", "title": "", "text": "a different doc"}', r"corpus.jsonl:7: field '_id' '106 ' starts or ends with blanks"),
    ("qrels/test.jsonl", '{"query-id": "2", "corpus-id": "102", "score": 2}', r"test.jsonl:5: duplicate qrels pair \('2', '102'\)"),
    ("qrels/test.jsonl", '{"query-id": "2", "corpus-id": "104", "score": -1}', r"test.jsonl:5: field 'score' must be an integer grade from 0"),
    ("qrels/test.jsonl", '{"query-id": "2", "corpus-id": "104", "score": 1' + '0' * 400 + '}', r"test.jsonl:5: field 'score'"),
    ("excluded_ids.jsonl", '{"query-id": "2"}', r"excluded_ids.jsonl:3: field 'excluded-ids' must be a list"),
    ("excluded_ids.jsonl", '{"query-id": "2", "excluded-ids": ["102"]}', r"query '2' has every gold excluded"),
    ("corpus.jsonl", '{"_id": "107", "title": false, "text": "x"}', r"corpus.jsonl:7: fields 'title' and 'text' must be strings"),
])
def test_input_that_would_score_the_wrong_thing_is_refused(tmp_path, fname, line, message) -> None:
    src = _copy(tmp_path)
    with (src / "modup" / fname).open("a") as f:
        f.write(line + "\n")
    with pytest.raises(RecipematchError, match=message):
        mirb.build_folder(src, tmp_path / "out", "modup")


def test_excluded_ids_are_deduplicated_and_unknown_ones_dropped_and_counted(tmp_path) -> None:
    from recipematch.graded_files import read_excluded

    src = _copy(tmp_path)
    with (src / "modup" / "excluded_ids.jsonl").open("a") as f:
        f.write('{"query-id": "1", "excluded-ids": ["103", "103", "nope"]}\n')
    man = mirb.build_folder(src, tmp_path / "out", "modup")
    assert read_excluded(tmp_path / "out") == {"1": ["103"]}
    assert (man["n_excluded_ids"], man["n_excluded_ids_not_in_corpus"]) == (1, 1)
    (src / "modup" / "excluded_ids.jsonl").unlink()
    (src / "modup" / "excluded_ids.jsonl").mkdir()
    with pytest.raises(RecipematchError, match=r"excluded_ids.jsonl exists but is not a file"):
        mirb.build_folder(src, tmp_path / "out", "modup")
