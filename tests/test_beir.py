"""The BEIR reader/writer: exact contents, deterministic bytes, errors with file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import RELEASE, require_real_data

from recipematch.beir import (
    BeirFormatError,
    corpus_sha256,
    doc_text,
    load_beir,
    positive_qrels,
    read_beir,
    read_corpus,
    read_qrels_tsv,
    write_beir,
)
from recipematch.errors import RecipematchError

FIX = Path(__file__).parent / "fixtures" / "beir"


def test_two_doc_fixture_loads_exactly():
    corpus, queries, qrels = load_beir(FIX / "two_doc")
    assert corpus == {"q1": {"title": "", "text": "A"}, "d2": {"title": "", "text": "B"}}
    assert queries == {"q1": "A"}
    assert qrels == {"q1": {"d2": 1}}


def test_small_fixture_counts_every_rule():
    with pytest.warns(UserWarning, match="1 corpus rows have empty title and text"):
        ds = read_beir(FIX / "small")
    assert list(ds.corpus) == ["qa", "d1", "d2", "d3", "d4", "d5", "qb", "d6"]
    assert ds.corpus["d5"]["text"] == ""  # empty text kept, not dropped
    assert ds.counts.to_dict() == {
        "n_corpus": 8,
        "n_empty_corpus_texts": 1,
        "n_queries": 5,
        "n_qrels_rows": 6,
        "n_qrels_nonpositive": 1,
        "n_queries_without_positive": 1,  # qz
        "n_qrels_queries_missing": 1,  # orphan
        "n_qrels_docs_missing": 0,
    }
    assert ds.qrels["qc"] == {"d4": 1, "d2": 0}
    assert positive_qrels(ds.qrels)["qc"] == ["d4"]
    assert ds.query_meta["qa"] == {"domain": "Algebra"}
    assert ds.query_meta["qz"] == {}


def test_jsonl_qrels_of_the_hugging_face_layout():
    _, _, qrels = load_beir(FIX / "mathnet_mini" / "hard")
    assert qrels == {"m1": {"h1": 1}, "m2": {"h2": 1}}


def test_round_trip_gives_identical_bytes(tmp_path):
    with pytest.warns(UserWarning):
        ds = read_beir(FIX / "small")
    write_beir(tmp_path / "a", ds.corpus, ds.queries, ds.qrels, query_meta=ds.query_meta)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        assert (tmp_path / "a" / name).read_bytes() == (FIX / "small" / name).read_bytes()
    with pytest.warns(UserWarning):
        again = read_beir(tmp_path / "a")
    assert (again.corpus, again.queries, again.qrels) == (ds.corpus, ds.queries, ds.qrels)


def test_write_is_deterministic_and_unicode_verbatim(tmp_path):
    corpus = {"z": {"text": "Sea $x^2$ — número", "title": "", "lang": "es"}}
    for name in ("a", "b"):
        write_beir(tmp_path / name, corpus, {"q": "¿x?"}, {"q": {"z": 1}})
    assert (tmp_path / "a" / "corpus.jsonl").read_bytes() == (
        tmp_path / "b" / "corpus.jsonl").read_bytes()
    line = (tmp_path / "a" / "corpus.jsonl").read_text(encoding="utf-8")
    assert line == '{"_id": "z", "lang": "es", "text": "Sea $x^2$ — número", "title": ""}\n'
    assert (tmp_path / "a" / "qrels" / "test.tsv").read_text() == (
        "query-id\tcorpus-id\tscore\nq\tz\t1\n")


def _folder(tmp_path, corpus_lines, query_lines=None, qrels_text=None):
    (tmp_path / "qrels").mkdir(parents=True)
    (tmp_path / "corpus.jsonl").write_text("\n".join(corpus_lines) + "\n", encoding="utf-8")
    (tmp_path / "queries.jsonl").write_text(
        "\n".join(query_lines or ['{"_id": "q", "text": "x"}']) + "\n", encoding="utf-8")
    (tmp_path / "qrels" / "test.tsv").write_text(
        qrels_text or "query-id\tcorpus-id\tscore\nq\td\t1\n", encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("lines, message", [
    (['{"_id": "d", "text": "a"}', '{"_id": "e", "text": '], r"corpus.jsonl:2: not valid JSON"),
    (['{"_id": "d"}'], r"corpus.jsonl:1: missing field 'text'"),
    (['{"_id": 3, "text": "a"}'], r"corpus.jsonl:1: field '_id' must be a string"),
    (['{"_id": "d", "text": "a"}', '{"_id": "d", "text": "b"}'],
     r"corpus.jsonl:2: duplicate corpus _id 'd'"),
    (['["d", "a"]'], r"corpus.jsonl:1: expected a JSON object"),
])
def test_malformed_corpus_rows_name_file_and_line(tmp_path, lines, message):
    folder = _folder(tmp_path, lines)
    with pytest.raises(BeirFormatError, match=message):
        load_beir(folder)


@pytest.mark.parametrize("qrels_text, message", [
    ("query-id\tcorpus-id\tscore\nq\td\n", r"test.tsv:2: expected 3 tab-separated fields"),
    ("q\td\tone\n", r"test.tsv:1: field 'score' must be a finite number, got 'one'"),
    ("q\td\t1\nq\te\tnan\n", r"test.tsv:2: field 'score' must be a finite number, got 'nan'"),
    ("q\td\t-inf\n", r"test.tsv:1: field 'score' must be a finite number"),
    ("q\td\t\u0663\n", r"test.tsv:1: field 'score' must be a finite number, got '\u0663'"),  # an Arabic-Indic 3
    ("q\td\t1_0\n", r"test.tsv:1: field 'score' must be a finite number, got '1_0'"),
    ("q\td\tinfinity\n", r"test.tsv:1: field 'score' must be a finite number"),
    ("q\td\t" + "9" * 5000 + "\n", r"test.tsv:1: field 'score' must be a finite number"),
    ("q\td\t" + "9" * 350 + "\n", r"test.tsv:1: field 'score' must be a finite number of sensible size"),
    ("q\td\t1\nq\td\t1\n", r"test.tsv:2: duplicate qrels pair"),
])
def test_malformed_qrels_rows_name_file_and_line(tmp_path, qrels_text, message):
    folder = _folder(tmp_path, ['{"_id": "d", "text": "a"}'], qrels_text=qrels_text)
    with pytest.raises(BeirFormatError, match=message):
        load_beir(folder)


def test_missing_qrels_file(tmp_path):
    folder = _folder(tmp_path, ['{"_id": "d", "text": "a"}'])
    (folder / "qrels" / "test.tsv").unlink()
    with pytest.raises(FileNotFoundError, match="no qrels file"):
        load_beir(folder)


def test_corpus_hash_ignores_row_order_and_metadata():
    a = {"x": {"title": "", "text": "1"}, "y": {"title": "t", "text": "2"}}
    b = {"y": {"title": "t", "text": "2", "lang": "en"}, "x": {"title": "", "text": "1"}}
    c = {"x": {"title": "", "text": "1"}, "y": {"title": "t", "text": "3"}}
    assert corpus_sha256(a) == corpus_sha256(b) != corpus_sha256(c)


def test_doc_text_rule():
    assert doc_text({"title": "", "text": "body"}) == "body"
    assert doc_text({"title": "T", "text": "body"}) == "T body"


def test_read_corpus_accepts_file_or_folder():
    assert list(read_corpus(FIX / "probe_mini" / "corpus.jsonl")) == ["s1", "x1", "x2", "x3"]
    assert read_corpus(FIX / "two_doc") == load_beir(FIX / "two_doc")[0]


def test_peer_corpus_sample_reads():
    path = require_real_data(RELEASE / "corpus.jsonl")
    corpus = read_corpus(path)
    assert len(corpus) == 2500
    assert next(iter(corpus)) == "0000"
    assert json.loads(path.open(encoding="utf-8").readline())["text"] == corpus["0000"]["text"]


# ------------------------------------------------------------------ encoding (issue 14: readers)


def test_byte_order_marks_are_accepted_on_every_file(tmp_path):
    folder = _folder(tmp_path, ['{"_id": "d", "text": "a"}'])
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        p = folder / name
        p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    corpus, queries, qrels = load_beir(folder)
    assert corpus == {"d": {"title": "", "text": "a"}}
    assert queries == {"q": "x"}
    # the BOM sat before the header: the header is still recognised, not read as a row
    assert qrels == {"q": {"d": 1}}


def test_invalid_utf8_byte_in_corpus_names_file_and_line(tmp_path):
    folder = _folder(tmp_path, ['{"_id": "d", "text": "a"}'])
    with open(folder / "corpus.jsonl", "ab") as fh:
        fh.write(b'{"_id": "e", "text": "caf\xff"}\n')
    with pytest.raises(BeirFormatError, match=r"corpus.jsonl:2: .*invalid UTF-8") as err:
        load_beir(folder)
    assert isinstance(err.value, RecipematchError)


def test_lone_surrogate_in_a_query_names_file_and_line(tmp_path):
    folder = _folder(tmp_path, ['{"_id": "d", "text": "a"}'],
                     query_lines=['{"_id": "q", "text": "x"}', '{"_id": "r", "text": "y \\ud800"}'])
    with pytest.raises(BeirFormatError, match=r"queries.jsonl:2: .*lone surrogate"):
        load_beir(folder)


def test_invalid_utf8_in_qrels_names_file_and_line(tmp_path):
    folder = _folder(tmp_path, ['{"_id": "d", "text": "a"}'])
    (folder / "qrels" / "test.tsv").write_bytes(b"query-id\tcorpus-id\tscore\nq\td\xff\t1\n")
    with pytest.raises(BeirFormatError, match=r"test.tsv:2: not valid UTF-8"):
        load_beir(folder)


def test_qrels_tsv_reader_rows_and_header(tmp_path):
    p = tmp_path / "q.tsv"
    p.write_bytes(b"\xef\xbb\xbfqid\tdoc\tscore\r\n\r\nq1\td1\t1\r\nq1\td2\t0\n")
    assert read_qrels_tsv(p) == [(3, "q1", "d1", 1), (4, "q1", "d2", 0)]
    p.write_text("q1\td1\t2\n", encoding="utf-8")  # no header: the first line is a row
    assert read_qrels_tsv(p) == [(1, "q1", "d1", 2)]


def test_corpus_stage_and_beir_reader_agree_on_a_bom(tmp_path):
    """One reader: the corpus stage and the BEIR reader accept the same file."""
    from recipematch.corpus import load_beir_corpus

    p = tmp_path / "corpus.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"_id": "d", "text": "a"}\n')
    assert list(read_corpus(p)) == ["d"]
    assert load_beir_corpus(p).table["doc_id"].tolist() == ["d"]


def test_real_valued_grades_are_read_and_written_back_and_integers_stay_integers(tmp_path):
    """BEIR's score column may hold real-valued grades: read as float, integral values as int,
    written back unchanged, and the qrels hash of integer qrels is what it always was."""
    from recipematch.beir import qrels_sha256, write_beir

    folder = _folder(tmp_path, ['{"_id": "d", "text": "a"}', '{"_id": "e", "text": "b"}'],
                     qrels_text="q\td\t0.75\nq\te\t2.0\n")
    _, _, qrels = load_beir(folder)
    assert qrels == {"q": {"d": 0.75, "e": 2}} and type(qrels["q"]["e"]) is int
    out = write_beir(tmp_path / "out", {"d": {"text": "a"}, "e": {"text": "b"}}, {"q": "x"}, qrels)
    assert (out / "qrels" / "test.tsv").read_text() == "query-id\tcorpus-id\tscore\nq\td\t0.75\nq\te\t2\n"
    assert qrels_sha256({"q": {"e": 2}}) == qrels_sha256({"q": {"e": 2.0}}) != qrels_sha256({"q": {"e": 1}})
    # the hash the integer-only reader gave these qrels (computed before real grades were read)
    assert qrels_sha256({"q": {"e": 2, "d": 0}}) == "c973244d4a2655bc7b9dc194df497805ec5fcc7e09013aa6c9b027d5d95ad888"
