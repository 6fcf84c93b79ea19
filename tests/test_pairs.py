"""Pair files: a malformed row stops with the file, line and field named (issue 14)."""

from __future__ import annotations

import json

import pytest

from recipematch.errors import RecipematchError
from recipematch.pairs import read_pair_file


def _good(sid="s1"):
    return {"source_id": sid, "anchor": "a", "positive": "p", "positive_provenance": {"generator": "cas"},
            "negatives": [{"text": "n"}]}


def _write(tmp_path, rows):
    p = tmp_path / "pairs.jsonl"
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return p


def test_good_file_reads_in_order(tmp_path):
    rows = [_good("s1"), {**_good("s2"), "negatives": [], "split": "dev"}]
    assert read_pair_file(_write(tmp_path, rows)) == rows


@pytest.mark.parametrize("bad, message", [
    ({k: v for k, v in _good().items() if k != "anchor"}, r"pairs.jsonl:2: not a pair row: missing field 'anchor'"),
    ('"just a string"', r"pairs.jsonl:2: .*expected a JSON object, got string"),
    ({**_good(), "positive": None}, r"pairs.jsonl:2: .*field 'positive' must be a string, got null"),
    ({**_good(), "source_id": ""}, r"pairs.jsonl:2: .*field 'source_id' must be a non-empty string"),
    ({**_good(), "negatives": None}, r"pairs.jsonl:2: .*field 'negatives' must be an array, got null"),
    ({**_good(), "negatives": ["text"]}, r"pairs.jsonl:2: .*field 'negatives\[0\]' must be an object"),
    ({**_good(), "negatives": [{"txt": "n"}]}, r"pairs.jsonl:2: .*field 'negatives\[0\].text' must be a string"),
    ({**_good(), "positive_provenance": "cas"}, r"pairs.jsonl:2: .*'positive_provenance' must be an object"),
    ({**_good(), "split": "test"}, r"pairs.jsonl:2: .*field 'split' must be one of"),
    ('{"source_id": "x", ', r"pairs.jsonl:2: not valid JSON Lines: invalid JSON"),
])
def test_malformed_pair_row_names_file_line_and_field(tmp_path, bad, message):
    path = _write(tmp_path, [_good("s0"), bad])
    with pytest.raises(RecipematchError, match=message):
        read_pair_file(path)

