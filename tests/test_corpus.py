import json

import pandas as pd

from recipematch.corpus import load_beir_corpus, load_mathnet, normalise_text


def test_beir_corpus_bad_rows_are_recorded(tmp_path):
    p = tmp_path / "corpus.jsonl"
    lines = [
        json.dumps({"_id": "a", "title": "", "text": "Find $x$.\r\n"}),
        "{not json",
        json.dumps({"_id": "b", "title": "", "text": "   "}),
        json.dumps({"title": "", "text": "no id"}),
        json.dumps({"_id": "c", "text": 5}),
        json.dumps({"_id": "a", "text": "duplicate id"}),
        json.dumps([1, 2]),
        json.dumps({"_id": "d", "text": "ok", "metadata": {"language": "es", "domain": "Algebra"}}),
    ]
    p.write_text("\n".join(lines) + "\n")
    res = load_beir_corpus(p)
    assert res.table["doc_id"].tolist() == ["a", "d"]
    assert res.table.loc[0, "text"] == "Find $x$."
    assert res.table.loc[1, "language"] == "es" and res.table.loc[1, "domain"] == "Algebra"
    reasons = sorted(f["reason"].split(":")[0] for f in res.failures)
    assert reasons == ["bad_json", "bad_text", "duplicate_id", "empty_text", "missing_id", "not_an_object"]
    c = res.counts()
    assert c["rows_ok"] == 2 and c["rows_failed"] == 6 and c["failed.bad_json"] == 1


def test_normalise_text_nfc():
    assert normalise_text("e\u0301") == "\u00e9"


def test_mathnet_loader_on_local_parquet(tmp_path):
    df = pd.DataFrame({"id": ["m1", "m2", "m3"], "problem_markdown": ["Solve $x^2=1$.", "", "Prove it."],
                       "language": ["en", "fr", "de"], "topic": ["Algebra", "Geometry", "Logic"],
                       "solution": ["x=±1", "", "..."]})
    (tmp_path / "data").mkdir()
    df.to_parquet(tmp_path / "data" / "train-00000.parquet", index=False)
    res = load_mathnet(tmp_path)
    assert res.table["doc_id"].tolist() == ["m1", "m3"]
    assert res.table["domain"].tolist() == ["Algebra", "Logic"]
    assert [f["reason"].split(":")[0] for f in res.failures] == ["empty_text"]


def test_bom_invalid_utf8_surrogates_and_odd_ids(tmp_path):
    import os
    import stat

    p = tmp_path / "corpus.jsonl"
    rows = [
        b'\xef\xbb\xbf' + json.dumps({"_id": "a", "text": "first row after a BOM"}).encode(),
        json.dumps({"_id": "b", "text": "caf"}).encode()[:-2] + b'\xe9"}',      # not UTF-8
        b'{"_id": "c", "text": "lone \\ud800 surrogate"}',
        json.dumps({"_id": 1.5, "text": "float id"}).encode(),
        json.dumps({"_id": ["x"], "text": "list id"}).encode(),
        json.dumps({"_id": 7, "text": "integer id is fine", "language": ["es", "pt"]}).encode(),
    ]
    p.write_bytes(b"\n".join(rows) + b"\n")
    res = load_beir_corpus(p)
    assert res.table["doc_id"].tolist() == ["a", "7"]
    assert res.table.loc[1, "language"] == '["es","pt"]'
    reasons = [f["reason"] for f in res.failures]
    assert reasons[0].startswith("bad_json: invalid UTF-8") and "lone surrogate" in reasons[1]
    assert [r.split(":")[0] for r in reasons[2:]] == ["bad_id", "bad_id"]
    assert all(f["line_no"] for f in res.failures)
    # outputs are ordinary readable files, not mkstemp's 0600
    from recipematch.io import write_json

    write_json(tmp_path / "m.json", {"a": 1})
    assert stat.S_IMODE(os.stat(tmp_path / "m.json").st_mode) == 0o644


def test_an_id_with_a_tab_becomes_a_counted_failure(tmp_path):
    from recipematch.corpus import load_beir_corpus

    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "a\\tb", "text": "x + 1 = 2"}\n{"_id": "c", "text": "y = 3"}\n')
    load = load_beir_corpus(path)
    assert list(load.table["doc_id"]) == ["c"]
    assert [f["reason"].split(":")[0] for f in load.failures] == ["bad_id"]
    assert "holds a tab" in load.failures[0]["reason"]
