"""The backtranslate stage (paper Appendix C, the non-LLM paraphrase control) end to end:
nothing to do without a bt/bt3 arm, "no back-translation model" when the folder is empty
(the cells then stop naming the param), and real translation through a tiny NLLB-style
model saved to a local folder and loaded by the stage as it would load NLLB-200."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from conftest import Outputs, stage_paths
from test_backtranslate import tiny_nllb  # noqa: F401 - the module-scoped tiny model fixture
from test_pipeline_e2e import PARAMS as E2E_PARAMS
from test_pipeline_e2e import _view

from recipematch.backtranslate import procedure_sha256
from recipematch.config import parse_params
from recipematch.errors import RecipematchError
from recipematch.gates import build_exclusion_list
from recipematch.io import read_json, write_json, write_jsonl
from recipematch.pairs import provenance_problems
from recipematch.pipeline import backtranslate as bt_stage
from recipematch.pipeline import corpus as corpus_stage
from recipematch.pipeline.pair_sources import cell_pairs

FIXTURES = Path(__file__).parent / "fixtures" / "llm"
EXCLUDED = "0004"


def _params(arms=("verified", "recipe"), **bt) -> dict:
    p = copy.deepcopy(E2E_PARAMS)
    p["arms"] = list(arms)
    p["backtranslate"] = {"model_dir": "mt_models/tiny", "model_id": "tiny-random-m2m100", **bt}
    return p


@pytest.fixture
def project(tmp_path: Path) -> Outputs:
    """The nine fixture problems as the corpus; one of them on the active exclusion list."""
    lay = Outputs(tmp_path, _params())
    lay.release.mkdir(parents=True)
    rows = [json.loads(x) for x in (FIXTURES / "corpus.sample.jsonl").read_text(encoding="utf-8").splitlines()]
    write_jsonl(lay.release / "corpus.jsonl", rows)
    corpus_stage.run(_view(_params(), corpus_stage), lay.stage("corpus"))
    ex = build_exclusion_list([(r["_id"], r["text"]) for r in rows], [], "v2", extra_ids=[EXCLUDED])
    write_json(lay.gates / "exclusion_v2.json", ex.to_json())
    return lay


def test_no_bt_arm_nothing_to_do(project: Outputs) -> None:
    out = bt_stage.run(_view(_params(), bt_stage), project.stage("backtranslate"), progress=False)
    assert out["needed"] == [] and "nothing translated" in out["reason"]
    assert sorted(f.name for f in (project.p("artifacts", "backtranslate")).iterdir()) == ["status.json"]


def test_which_arms_need_which_hops() -> None:
    assert bt_stage.needed_keys(parse_params(_params(arms=("verified", "bt_cas")))) == ["bt"]
    assert bt_stage.needed_keys(parse_params(_params(arms=("bt3_cas", "bt")))) == ["bt", "bt3"]
    cell = _params(arms=("cell",))
    cell["positives"], cell["negatives"] = "bt3", "none"
    assert bt_stage.needed_keys(parse_params(cell)) == ["bt3"]


def test_no_model_then_the_cells_stop_naming_the_param(project: Outputs) -> None:
    out = bt_stage.run(_view(_params(arms=("bt_cas", "bt3_cas")), bt_stage), project.stage("backtranslate"), progress=False)
    assert out["needed"] == ["bt", "bt3"] and out["model"] is None
    for key in ("bt", "bt3"):
        with pytest.raises(RecipematchError, match=r"no back-translation model: backtranslate.model_dir = "
                                                   r"'mt_models/tiny'"):
            cell_pairs(project, key)
    assert read_json(project.metrics / "backtranslate.json")["reason"].startswith("no back-translation model")
    # the cells stage of such an arm stops there, naming the param
    from recipematch.pipeline import cells as cells_stage
    from recipematch.pipeline import specs as specs_stage

    params = _params(arms=("bt_cas", "bt3_cas"))
    specs_stage.run(_view(params, specs_stage), project.stage("specs"))
    for arm in ("bt_cas", "bt3_cas"):
        with pytest.raises(RecipematchError, match=r"no back-translation model: backtranslate.model_dir"):
            cells_stage.run(_view(params, cells_stage), stage_paths(project.root, f"cells@{arm}", params), arm)


def test_bad_language_is_named(project: Outputs) -> None:
    with pytest.raises(RecipematchError, match="backtranslate.default_language: no NLLB code for 'xx'"):
        bt_stage.run(_view(_params(arms=("bt_cas",), default_language="xx"), bt_stage), project.stage("backtranslate"), progress=False)


def test_end_to_end_on_a_tiny_local_model(project: Outputs, tiny_nllb) -> None:  # noqa: F811
    model, tokenizer = tiny_nllb
    folder = project.p("mt_models", "tiny")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    params = _params(arms=("bt_cas", "bt3_cas"), default_language="es", num_beams=1, max_new_tokens=16)
    out = bt_stage.run(_view(params, bt_stage), project.stage("backtranslate"), progress=False)
    assert out["sources"] == 8  # nine problems, one excluded
    d = project.p("artifacts", "backtranslate")
    for key in ("bt", "bt3"):
        m = out[key]
        rows = cell_pairs(project, key)  # what the cells read
        fails = [json.loads(x) for x in (d / f"failures_{key}.jsonl").read_text().splitlines()]
        assert m["kept"] == len(rows) and m["dropped_total"] == len(fails) and len(rows) + len(fails) == 8
        assert sum(m["dropped"].values()) == len(fails)
        assert EXCLUDED not in {r["source_id"] for r in rows} | {f["source_id"] for f in fails}
        # an untrained model cannot carry the formulas' placeholders through (every fixture
        # problem has formulas): each drop is counted with that reason, none is silent
        assert m["dropped"] == {"structural:placeholder_missing": 8}
    again = bt_stage.run(_view(params, bt_stage), project.stage("backtranslate"), progress=False)
    assert again == out  # greedy decoding: the same counts and files


def test_kept_rows_with_a_translator_that_keeps_the_formulas(project: Outputs, monkeypatch) -> None:
    """The stage's row handling with a translator that marks each line with its target
    language (placeholders kept), so rows survive: one hop adds two marks, three hops six."""

    class Marking:
        def translate(self, texts, src_lang, tgt_lang):
            return [f"{t} <{tgt_lang[:3]}>" for t in texts]

    (project.p("mt_models", "tiny")).mkdir(parents=True)
    (project.p("mt_models", "tiny") / "config.json").write_text("{}")
    monkeypatch.setattr(bt_stage, "make_translator", lambda lay, cfg: Marking())
    params = _params(arms=("bt", "bt3_cas"), default_language="es", languages=["es", "en"])
    out = bt_stage.run(_view(params, bt_stage), project.stage("backtranslate"), progress=False)
    assert (out["bt"]["kept"], out["bt3"]["kept"]) == (8, 8)
    bt1, bt3 = cell_pairs(project, "bt"), cell_pairs(project, "bt3")
    r = bt1[0]
    first_line = r["anchor"].split("\n")[0]
    assert r["positive"].split("\n")[0] == f"{first_line} <eng> <spa>"
    assert r["positive_provenance"]["route"] == ["spa_Latn", "eng_Latn", "spa_Latn"]
    assert r["positive_provenance"]["prompt_sha256"] == procedure_sha256("tiny-random-m2m100", 1)
    assert bt3[0]["positive_provenance"]["route"] == ["spa_Latn", "fra_Latn", "spa_Latn", "deu_Latn", "spa_Latn",
                                                       "rus_Cyrl", "spa_Latn"]
    assert all(provenance_problems(x) == [] and x["negatives"] == [] for x in bt1 + bt3)
    assert 0 < out["bt3"]["paraphrase_depth_char3_jaccard"] < out["bt"]["paraphrase_depth_char3_jaccard"] < 1
    # a source language outside backtranslate.languages is dropped and counted
    only_fr = _params(arms=("bt",), default_language="es", languages=["fr"])
    out = bt_stage.run(_view(only_fr, bt_stage), project.stage("backtranslate"), progress=False)
    assert out["bt"]["kept"] == 0 and out["bt"]["dropped"] == {"unsupported_language": 8}
    # no tag and no default: every source dropped as unsupported_language, none silently
    out = bt_stage.run(_view(_params(arms=("bt",)), bt_stage), project.stage("backtranslate"), progress=False)
    assert out["skipped_language"] == 8 and out["bt"]["dropped"] == {"unsupported_language": 8}
