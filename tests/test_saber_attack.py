"""The SABER-Math attack's summary channel (issue 21, item 4; paper Section 6, Appendix D):
released rows shaped like the peer's ``data/saber_attack/pairs_summary_channel.jsonl`` become
pair rows anchored on the corpus problem with their source id, with the core-idea prompt's
hash in their provenance; the attack stage writes the pair file the arm of the same name
trains on; bad rows and an undeclared row set are one line each."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, stage_paths

from recipematch.config import load_yaml, parse_params
from recipematch.errors import RecipematchError
from recipematch.external.saber_attack import read_summary_rows, saber_prompt_sha256

CORPUS = {"007a": "Consider a semicircle with diameter AB and centre O.",
          "007d": "In triangle ABC the area ratio is 2:1; prove AB = AC.",
          "00b8": "Lines through P are parallel to the sides of a cyclic quadrilateral."}
ROWS = [
    {"source_id": "007d", "positive_text": "Use area ratios and the perpendicular bisector.",
     "negatives": [{"text": "Use a 120 degree rotation."}, {"text": "Apply Stewart's theorem."}], "channel": "saber_summary"},
    {"source_id": "007a", "positive_text": "Use perpendicularity and midpoints.",
     "negatives": [{"text": "Considerar valores específicos de $x$."}], "channel": "saber_summary"},
    {"source_id": "00b8", "positive_text": "Use parallel lines and cyclic quadrilaterals.", "negatives": [],
     "channel": "saber_summary"},
]


def _write(path: Path, rows=ROWS) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_released_rows_become_anchored_pair_rows_with_the_core_idea_prompt(tmp_path: Path) -> None:
    rows, counts = read_summary_rows(_write(tmp_path / "rows.jsonl"), "saber_summary", CORPUS, revision="r")
    assert [r["source_id"] for r in rows] == ["007a", "007d", "00b8"]  # canonical order
    assert rows[1]["anchor"] == CORPUS["007d"] and rows[1]["positive"] == ROWS[0]["positive_text"]
    shipped = (REPO / "src" / "recipematch" / "prompts" / "saber_core_idea.txt").read_bytes()
    assert saber_prompt_sha256() == hashlib.sha256(shipped).hexdigest()
    prov = rows[1]["positive_provenance"]
    assert (prov["generator"], prov["prompt_sha256"], prov["model_id"], prov["released"]) == (
        "saber_core_idea", hashlib.sha256(shipped).hexdigest(), "Qwen/Qwen3-32B-AWQ", "r")
    assert [n["text"] for n in rows[1]["negatives"]] == ["Use a 120 degree rotation.", "Apply Stewart's theorem."]
    assert rows[2]["negatives"] == []
    assert (counts["rows_out"], counts["sources"], counts["negatives"]) == (3, 3, 3)
    from recipematch.pairs import provenance_problems

    assert all(provenance_problems(r) == [] for r in rows)


@pytest.mark.parametrize("spoil, message", [
    (lambda r: r[0].update(channel="saber_document"), r"rows.jsonl:1: field 'channel' is 'saber_document'"),
    (lambda r: r[1].update(source_id="zzzz"), r"rows.jsonl:2: source_id 'zzzz' is not a problem of the corpus"),
    (lambda r: r[2].update(source_id="007d"), r"rows.jsonl:3: source_id '007d' is given twice"),
    (lambda r: r[0].update(negatives=[{"text": ""}]), r"rows.jsonl:1: field 'negatives' must be a list"),
    (lambda r: r[0].pop("positive_text"), r"rows.jsonl:1: field 'positive_text' must be a non-empty string"),
    (lambda r: r[0].update(generator_model=7), r"rows.jsonl:1: field 'generator_model' must be a non-empty string"),
])
def test_bad_rows_are_named_by_file_line_and_field(tmp_path: Path, spoil, message) -> None:
    rows = json.loads(json.dumps(ROWS))
    spoil(rows)
    with pytest.raises(RecipematchError, match=message):
        read_summary_rows(_write(tmp_path / "rows.jsonl", rows), "saber_summary", CORPUS)
    (tmp_path / "broken.jsonl").write_text('{"source_id": "007a",\n')
    with pytest.raises(RecipematchError, match=r"broken.jsonl:1: "):
        read_summary_rows(tmp_path / "broken.jsonl", "saber_summary", CORPUS)
    with pytest.raises(RecipematchError, match=r"attacks.saber_summary.rows: .*nope.jsonl does not exist .*pairs_summary_channel.jsonl"):
        read_summary_rows(tmp_path / "nope.jsonl", "saber_summary", CORPUS)


def test_the_attack_stage_anchors_rows_on_the_corpus_stages_problems(tmp_path: Path) -> None:
    from recipematch.corpus import CORPUS_COLUMNS
    from recipematch.pairs import read_pair_file
    from recipematch.pipeline import attack
    from conftest import Outputs
    from recipematch.pipeline.pair_sources import cell_pairs

    (tmp_path / "data").mkdir()
    _write(tmp_path / "data" / "rows.jsonl")
    lay = Outputs(tmp_path)
    lay.corpus.mkdir(parents=True)
    pd.DataFrame([{"doc_id": k, "title": "", "text": v, "language": "en", "domain": "", "text_sha256": ""}
                  for k, v in CORPUS.items()], columns=CORPUS_COLUMNS).to_parquet(lay.corpus / "corpus.parquet", index=False)
    raw = load_yaml(REPO / "params.yaml")
    raw["attacks"] = {"saber_summary": {"rows": "data/rows.jsonl", "revision": "r"}}
    p = parse_params(raw)
    counts = attack.run(p.view(attack.PARAMS), stage_paths(lay.root, "attack@saber_summary"), name="saber_summary")
    assert counts["rows_out"] == 3 and counts["prompt"] == "saber_core_idea"
    pairs = read_pair_file(lay.pairs / "saber_summary.jsonl")
    assert cell_pairs(lay, "saber_summary") == pairs and pairs[0]["anchor"] == CORPUS["007a"]
    first = (lay.pairs / "saber_summary.jsonl").read_bytes()
    attack.run(p.view(attack.PARAMS), stage_paths(lay.root, "attack@saber_summary"), name="saber_summary")
    assert (lay.pairs / "saber_summary.jsonl").read_bytes() == first  # byte-identical rerun


def test_the_summary_arm_is_a_cell_on_its_rows_own_negatives_and_needs_its_rows_declared(tmp_path: Path) -> None:
    from recipematch.cells import assemble_cell
    from recipematch.rules import NAMED_ARMS

    spec = NAMED_ARMS["saber_summary"]
    assert spec.inputs() == ["saber_summary"]
    rows, _ = read_summary_rows(_write(tmp_path / "rows.jsonl"), "saber_summary", CORPUS)
    pool, counts = assemble_cell(spec, {"saber_summary": rows}, seed=0)
    assert counts["rows_out"] == 3
    raw = load_yaml(REPO / "params.yaml")
    raw["arms"] = ["verified", "recipe", "cell", "saber_summary"]
    raw["attacks"] = {k: v for k, v in raw["attacks"].items() if k != "saber_summary"}
    with pytest.raises(RecipematchError, match=r"arms\[saber_summary\]: no input for positives=saber_summary .*"
                                               r"declare attacks.saber_summary.rows .*pairs_summary_channel.jsonl"):
        parse_params(raw)


DOC_ROWS = [  # summaries: a/b share most words (Jaccard 3/4 > 0.211), c/d share none with them
    {"source_id": "a", "positive_text": "Use parity and modular arithmetic.", "negatives": [], "channel": "saber_summary"},
    {"source_id": "b", "positive_text": "Apply parity with modular arithmetic.", "negatives": [], "channel": "saber_summary"},
    {"source_id": "c", "positive_text": "Rotate the triangle by sixty degrees.", "negatives": [], "channel": "saber_summary"},
    {"source_id": "d", "positive_text": "Count lattice paths by reflection.", "negatives": [], "channel": "saber_summary"},
    {"source_id": "e", "positive_text": "Telescoping sum of reciprocals.", "negatives": [], "channel": "saber_summary"},
]
DOC_CORPUS = {k: f"problem {k} text" for k in "abcde"}


def test_the_document_channel_pairs_problems_by_the_summary_rule(tmp_path: Path) -> None:
    from recipematch.external.saber_attack import build_document_rows
    from recipematch.saber import TAU_SUMM, jaccard, summary_tokens

    path = _write(tmp_path / "rows.jsonl", DOC_ROWS)
    # by hand: tokens less stop words: a = {use, parity, modular, arithmetic}, b = {apply, parity, modular,
    # arithmetic}: 3 shared of 5 = 0.6; every other pair shares nothing
    assert jaccard(summary_tokens(DOC_ROWS[0]["positive_text"]), summary_tokens(DOC_ROWS[1]["positive_text"])) == 0.6
    rows, counts = build_document_rows(path, "saber_document", DOC_CORPUS, seed=3, revision="r")
    # one row for the pair, never its reverse too (it could land in the other split)
    assert sorted((r["source_id"], r["positive"]) for r in rows) in ([("a", "problem b text")], [("b", "problem a text")])
    assert counts["relevant_pairs"] == 1 and counts["rows_out"] == 1 and counts["tau_summ"] == TAU_SUMM == 0.211
    for r in rows:
        negs = {n["partner"] for n in r["negatives"]}
        assert len(negs) == 2 and negs <= {"c", "d", "e"}  # only problems at or below the threshold
        prov = r["positive_provenance"]
        assert prov["channel"] == "saber_document" and prov["summaries_released"] == "r" and "released" not in prov
        assert prov["summary_jaccard"] == 0.6 and prov["generator"] == "saber_core_idea"
    assert build_document_rows(path, "saber_document", DOC_CORPUS, seed=3, revision="r")[0] == rows  # seeded
    lonely = _write(tmp_path / "lonely.jsonl", [DOC_ROWS[0], DOC_ROWS[2], DOC_ROWS[3]])
    with pytest.raises(RecipematchError, match=r"attacks.saber_document.rows: no pair of the 3 sources' summaries"):
        build_document_rows(lonely, "saber_document", DOC_CORPUS, seed=3)
    with pytest.raises(RecipematchError, match=r"attacks.saber_document.rows: .*missing.jsonl"):  # its own key
        build_document_rows(tmp_path / "missing.jsonl", "saber_document", DOC_CORPUS, seed=3)
    # one problem printed twice: no row pairs it with itself, no negative repeats the anchor or the positive
    twin = {**DOC_CORPUS, "b": DOC_CORPUS["a"], "c": DOC_CORPUS["a"]}
    with pytest.raises(RecipematchError, match=r"\(0 short, 1 of one text\)"):
        build_document_rows(path, "saber_document", twin, seed=3)
    rows, counts = build_document_rows(path, "saber_document", {**DOC_CORPUS, "c": DOC_CORPUS["a"]}, seed=3)
    assert all(n["text"] not in (r["anchor"], r["positive"]) for r in rows for n in r["negatives"])
    ru = _write(tmp_path / "ru.jsonl", [*DOC_ROWS, {"source_id": "f", "positive_text": "Используйте чётность.",
                                                   "negatives": [], "channel": "saber_summary"}])
    assert build_document_rows(ru, "saber_document", {**DOC_CORPUS, "f": "problem f"}, seed=3)[1][
        "summaries_without_tokens"] == 1
