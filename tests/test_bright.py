"""The BRIGHT loader (issue 21, item 2): parquet shaped like xlangai/BRIGHT's documents and
examples configurations, excluded ids out of each ranking, bad input named."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from recipematch.beir import load_beir
from recipematch.errors import RecipematchError
from recipematch.external.bright import EXCLUDED_FILE, build_folder, read_excluded

SPLIT = "theoremqa_theorems"
DOCS = [("t/ferma", "Fermat's little theorem: a^p is congruent to a modulo a prime p."),
        ("t/euler", "Euler's theorem: a^phi(n) is congruent to 1 modulo n for a coprime to n."),
        ("t/pyth", "Pythagoras: in a right triangle the squares of the legs sum to the square of the hypotenuse."),
        ("t/wilson", "Wilson's theorem: (p-1)! is congruent to -1 modulo a prime p."),
        ("t/self", "What is 3^7 modulo 7 by Fermat's little theorem?")]
EXAMPLES = [
    {"query": "What is 3^7 modulo 7 by Fermat's little theorem?", "reasoning": "Fermat", "id": "q1",
     "excluded_ids": ["t/self"], "gold_ids_long": ["t/ferma"], "gold_ids": ["t/ferma"]},
    {"query": "A right triangle has legs 3 and 4; how long is the hypotenuse?", "reasoning": "", "id": "q2",
     "excluded_ids": ["N/A"], "gold_ids_long": [], "gold_ids": ["t/pyth"]},
]


def _copy(root: Path, docs=DOCS, examples=EXAMPLES) -> Path:
    """A local copy laid out as the hub's parquet files are."""
    (root / "documents").mkdir(parents=True, exist_ok=True)
    (root / "examples").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [d for d, _ in docs], "content": [t for _, t in docs]}),
                   root / "documents" / f"{SPLIT}-00000-of-00001.parquet")
    schema = pa.schema([("query", pa.string()), ("reasoning", pa.string()), ("id", pa.string()),
                        ("excluded_ids", pa.list_(pa.string())), ("gold_ids_long", pa.list_(pa.string())),
                        ("gold_ids", pa.list_(pa.string()))])
    pq.write_table(pa.Table.from_pylist(examples, schema=schema), root / "examples" / f"{SPLIT}-00000-of-00001.parquet")
    return root


def test_a_split_becomes_a_beir_folder_with_its_excluded_ids(tmp_path: Path) -> None:
    m = build_folder(_copy(tmp_path / "bright"), tmp_path / "out", SPLIT, revision="r1")
    corpus, queries, qrels = load_beir(tmp_path / "out")
    assert list(corpus) == [d for d, _ in DOCS] and qrels == {"q1": {"t/ferma": 1}, "q2": {"t/pyth": 1}}
    assert read_excluded(tmp_path / "out") == {"q1": ["t/self"]}  # "N/A" means none
    assert (m["n_docs"], m["n_queries"], m["n_qrels"], m["n_queries_with_excluded"]) == (5, 2, 2, 1)
    assert m["licence"].startswith("CC BY 4.0") and m["revision"] == "r1" and len(m["inputs"]) == 2


def test_excluded_ids_leave_the_ranking_before_the_cut(tmp_path: Path) -> None:
    from recipematch.benchmarks_data import load_set
    from recipematch.graded import measure_run, parse_measures, topk_run
    from recipematch.scoring import BM25, scored_qrels

    build_folder(_copy(tmp_path / "bright"), tmp_path / "out", SPLIT)
    bset = load_set(tmp_path / "out", "plain")
    plain = topk_run(bset, BM25, 2, bm25_k1=1.5, bm25_b=0.75)
    assert plain.doc_ids.tolist()[0][0] == "t/self"  # the query's own text, a document BRIGHT excludes
    run = topk_run(bset, BM25, 2, bm25_k1=1.5, bm25_b=0.75, exclude=read_excluded(tmp_path / "out"))
    assert "t/self" not in run.doc_ids.tolist()[0] and None not in run.doc_ids.tolist()[0] and run.depth == 2
    with_ex, _ = measure_run(scored_qrels(bset), run, parse_measures(["Success@1"]))
    without, _ = measure_run(scored_qrels(bset), plain, parse_measures(["Success@1"]))
    assert with_ex["Success@1"] > without["Success@1"]
    out = tmp_path / "res.json"
    from recipematch.eval_cli import evaluate

    res = CliRunner().invoke(evaluate, [str(tmp_path / "out"), "--model", "bm25", "--out", str(out), "--k", "1",
                                        "--measure", "Success@1"])
    assert res.exit_code == 0, res.output
    s = json.loads(out.read_text())
    assert s["excluded"]["file"] == EXCLUDED_FILE and s["excluded"]["n_queries"] == 1
    assert s["measures"]["Success@1"] == with_ex["Success@1"]


@pytest.mark.parametrize("spoil, message", [
    (lambda ex: [{**ex[0], "gold_ids": ["t/nothing"]}, ex[1]], r"row 0 \('q1'\): ids not among the documents"),
    (lambda ex: [{**ex[0], "excluded_ids": ["t/ferma"]}, ex[1]], "gold ids also excluded"),
    (lambda ex: [ex[0], {**ex[1], "id": "q1"}], "row 1: duplicate example id 'q1'"),
    (lambda ex: [{**ex[0], "gold_ids": []}, ex[1]], "no gold_ids"),
    (lambda ex: [{**ex[0], "query": " "}, ex[1]], "'query' must be a non-empty string"),
])
def test_bad_examples_are_named_and_nothing_is_written(tmp_path: Path, spoil, message) -> None:
    root = _copy(tmp_path / "bright", examples=spoil(EXAMPLES))
    with pytest.raises(RecipematchError, match=message):
        build_folder(root, tmp_path / "out", SPLIT)
    assert not (tmp_path / "out").exists()


def test_a_missing_split_or_column_is_one_line(tmp_path: Path) -> None:
    root = _copy(tmp_path / "bright")
    with pytest.raises(RecipematchError, match=r"no documents file for split 'aops'.*aops-00000-of-00001.parquet"):
        build_folder(root, tmp_path / "out", "aops")
    pq.write_table(pa.table({"id": ["x"]}), root / "documents" / f"{SPLIT}-00000-of-00001.parquet")
    with pytest.raises(RecipematchError, match=r"missing columns \['content'\]"):
        build_folder(root, tmp_path / "out", SPLIT)
    (root / "documents" / f"{SPLIT}-00000-of-00001.parquet").write_bytes(b"not parquet")
    with pytest.raises(RecipematchError, match="not a readable parquet file"):
        build_folder(root, tmp_path / "out", SPLIT)
    with pytest.raises(RecipematchError, match="plain name"):
        build_folder(root, tmp_path / "out", "../x")
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / EXCLUDED_FILE).write_text('{"q": "x"}')
    with pytest.raises(RecipematchError, match="expected an object of query id -> list"):
        read_excluded(tmp_path / "f")


def test_ids_that_would_read_back_as_others_and_overlapping_outputs_are_refused(tmp_path: Path) -> None:
    """Breaker, issue 21: a gold id " a" was read back as "a" (another document); out == source
    deleted the input."""
    docs = DOCS + [(" t/ferma", "padded")]
    root = _copy(tmp_path / "bright", docs=docs)
    with pytest.raises(RecipematchError, match="has blanks at an end"):
        build_folder(root, tmp_path / "out", SPLIT)
    root = _copy(tmp_path / "bright2")
    for out in (root, root / "documents", tmp_path):
        with pytest.raises(RecipematchError, match="overlaps the input"):
            build_folder(root, out, SPLIT)
    assert (root / "documents" / f"{SPLIT}-00000-of-00001.parquet").exists()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(RecipematchError, match="exists and is not a folder"):
        build_folder(root, tmp_path / "afile", SPLIT)
    (tmp_path / "f" / EXCLUDED_FILE).mkdir(parents=True)
    with pytest.raises(RecipematchError, match="not a readable file"):
        read_excluded(tmp_path / "f")
