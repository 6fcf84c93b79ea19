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
