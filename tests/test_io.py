"""The one JSONL/TSV reader and the one set of hash helpers (issues 9 and 14)."""

from __future__ import annotations

import hashlib

import pytest

from recipematch.errors import RecipematchError
from recipematch.io import (
    FormatError,
    iter_tsv,
    read_jsonl_strict,
    sha256_text,
    sha256_texts,
    sha256_tree,
)


def test_strict_reader_skips_a_bom_and_blank_lines(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n{"b": "\xc3\xa9"}\n')
    assert read_jsonl_strict(p) == [{"a": 1}, {"b": "é"}]


@pytest.mark.parametrize("line, reason", [
    (b'{"a": "caf\xff"}', "invalid UTF-8"),
    (b'{"a": "\\ud800"}', "invalid text: lone surrogate"),
    (b'{"a": ', "invalid JSON"),
])
def test_strict_reader_refuses_bad_lines_naming_file_and_line(tmp_path, line, reason):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"ok": 1}\n' + line + b"\n")
    with pytest.raises(FormatError, match=rf"a.jsonl:2: not valid JSON Lines: {reason}") as err:
        read_jsonl_strict(p)
    assert isinstance(err.value, RecipematchError) and isinstance(err.value, ValueError)


def test_tsv_reader_bom_crlf_and_bad_bytes(tmp_path):
    p = tmp_path / "a.tsv"
    p.write_bytes(b"\xef\xbb\xbfh1\th2\r\n\r\nx\ty\n")
    assert list(iter_tsv(p)) == [(1, ["h1", "h2"]), (3, ["x", "y"])]
    p.write_bytes(b"x\ty\nx\t\xff\n")
    with pytest.raises(FormatError, match=r"a.tsv:2: not valid UTF-8"):
        list(iter_tsv(p))


def test_sequence_hash_is_length_prefixed_and_unchanged():
    """``sha256_texts`` reproduces the two helpers it replaced (BEIR file identity and the
    embedding cache's text-list hash), so no cache key or recorded hash changes."""
    texts = ["x^2 = 4", "", "número"]

    def old_lines(lines):  # beir._sha256_lines before the fold
        h = hashlib.sha256()
        for line in lines:
            data = line.encode("utf-8")
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
        return h.hexdigest()

    def old_texts(ts):  # retrieval.texts_sha256 before the fold
        h = hashlib.sha256()
        h.update(len(ts).to_bytes(8, "little"))
        for t in ts:
            data = t.encode("utf-8")
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
        return h.hexdigest()

    assert sha256_texts(texts) == old_lines(texts)
    assert sha256_texts(texts, count=len(texts)) == old_texts(texts)
    # boundaries count: moving a character across texts changes the hash
    assert sha256_texts(["ab", "c"]) != sha256_texts(["a", "bc"])


def test_text_hash_surrogates():
    assert sha256_text("é") == hashlib.sha256("é".encode()).hexdigest()
    assert sha256_text("é", errors="surrogatepass") == sha256_text("é")
    with pytest.raises(UnicodeEncodeError):
        sha256_text("\ud800")
    assert sha256_text("\ud800", errors="surrogatepass") == hashlib.sha256(b"\xed\xa0\x80").hexdigest()


def test_folder_hash_ignores_times_and_sees_names(tmp_path):
    import os

    for name in ("a", "b"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "sub" / "w.bin").write_bytes(b"\x00\x01")
        (tmp_path / name / "c.json").write_text("{}")
    os.utime(tmp_path / "b" / "c.json", (1, 1))
    assert sha256_tree(tmp_path / "a") == sha256_tree(tmp_path / "b")
    (tmp_path / "b" / "c.json").rename(tmp_path / "b" / "d.json")
    assert sha256_tree(tmp_path / "a") != sha256_tree(tmp_path / "b")
