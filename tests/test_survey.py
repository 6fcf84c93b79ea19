"""``recipematch survey`` (paper Appendix D, Table 18): local models scored on every declared
set under each one's own convention; each row equals ``recipematch evaluate`` with the same
settings; bad model folders are refused in one line before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from recipematch.beir import write_beir
from recipematch.cli import main
from recipematch.errors import RecipematchError
from recipematch.survey import SurveyModel, check_folder, parse_models

REPO = Path(__file__).resolve().parents[1]
WORDS = [f"w{i}" for i in range(40)]


def _tiny_st(folder: Path, pooling: str) -> Path:
    """A randomly initialised 1-layer BERT with a word-level tokenizer as a sentence-transformers folder."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Pooling, Transformer
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(WORDS + ["find", "prove"])],
                            trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                        sep_token="[SEP]")
    torch.manual_seed(1 if pooling == "cls" else 0)
    bert = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=64))
    hf = folder.parent / f"{folder.name}-hf"
    bert.save_pretrained(hf)
    tokenizer.save_pretrained(hf)
    tr = Transformer(str(hf), max_seq_length=32)
    st = SentenceTransformer(modules=[tr, Pooling(tr.get_word_embedding_dimension(), pooling_mode=pooling)],
                             device="cpu")
    st.save(str(folder))
    return folder


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("survey")
    for name, shift in (("bench", 1), ("real", 3)):
        corpus = {f"d{i}": {"text": f"w{i} w{(i + shift) % 40} prove"} for i in range(30)}
        queries = {f"q{i}": f"find w{i} w{(i + 2 * shift) % 40}" for i in range(12)}
        write_beir(root / "sets" / name, corpus, queries, {f"q{i}": {f"d{i}": 1} for i in range(12)})
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["evaluations"] = {
        "bench": {"folder": "sets/bench", "rule": "plain", "role": "benchmark"},
        "real": {"folder": "sets/real", "rule": "plain", "role": "real"}}
    raw["style"]["tracking_set"] = "bench"
    raw["hits"] = {"contrasts": ["recipe - verified"], "k": 1, "probe": ""}
    for key in ("external", "attacks", "pooling", "judging", "saber"):
        raw[key] = {}
    raw["mlflow"]["tracking_uri"] = "sqlite:///mlflow.db"
    (root / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    mean = _tiny_st(root / "models" / "mean", "mean")
    cls = _tiny_st(root / "models" / "cls", "cls")
    (root / "models.yaml").write_text(yaml.safe_dump([
        {"name": "tiny-mean", "path": str(mean), "max_seq_length": 24},
        {"name": "tiny-cls", "path": str(cls), "query_prompt": "find ", "max_seq_length": 16},
        {"name": "bm25", "path": "bm25"}]))
    return root


def _survey(root: Path, *extra: str):
    return CliRunner().invoke(main, ["survey", "--root", str(root), "--models", str(root / "models.yaml"),
                                     "--out", "out", *extra], catch_exceptions=False)


def test_survey_rows_match_recipematch_evaluate(project):
    res = _survey(project)
    assert res.exit_code == 0, res.output
    out = json.loads((project / "out" / "survey.json").read_text())
    assert [m["name"] for m in out["models"]] == ["tiny-mean", "tiny-cls", "bm25"]
    conv = {m["name"]: m["convention"] for m in out["models"]}
    assert conv["tiny-cls"]["pooling"] == "cls" and conv["tiny-cls"]["query_prompt"] == "find "
    assert conv["tiny-mean"]["pooling"] == "mean" and conv["tiny-mean"]["max_seq_length"] == 24
    assert out["headline"] == "bench"
    settings = {"tiny-mean": ["--max-seq-length", "24"], "tiny-cls": ["--max-seq-length", "16", "--query-prompt", "find "],
                "bm25": []}
    for m in out["models"]:
        for name in ("bench", "real"):
            ev = project / f"ev-{m['name']}-{name}.json"
            r = CliRunner().invoke(main, ["evaluate", str(project / "sets" / name), "--model", m["path"], "--rule", "plain",
                                          "--out", str(ev), *settings[m["name"]]], catch_exceptions=False)
            assert r.exit_code == 0, r.output
            want = json.loads(ev.read_text())
            assert {k: m["scores"][name][k] for k in ("R@1", "R@5", "R@10")} == {
                k: want[k] for k in ("R@1", "R@5", "R@10")}
    md = (project / "out" / "survey.md").read_text()
    rows = [r for r in md.splitlines() if r.startswith("| tiny") or r.startswith("| bm25")]
    order = sorted(out["models"], key=lambda m: (-m["scores"]["bench"]["R@1"], m["name"]))
    assert [r.split(" | ")[0][2:] for r in rows] == [m["name"] for m in order]  # sorted by the headline R@1
    from recipematch.tracking import client

    c = client(f"sqlite:///{project / 'mlflow.db'}")
    exp = c.get_experiment_by_name(f"{yaml.safe_load((project / 'params.yaml').read_text())['mlflow']['experiment']}-survey")
    runs = c.search_runs([exp.experiment_id])
    assert len(runs) == 3
    res = _survey(project)  # a rerun updates the same runs
    assert res.exit_code == 0 and len(c.search_runs([exp.experiment_id])) == 3


def test_survey_refuses_remote_code_and_missing_folders_before_writing(project, tmp_path):
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "modeling_x.X"}}))
    (project / "bad.yaml").write_text(yaml.safe_dump([{"name": "ok", "path": "bm25"},
                                                      {"name": "evil", "path": str(remote)}]))
    res = CliRunner().invoke(main, ["survey", "--root", str(project), "--models", str(project / "bad.yaml"),
                                    "--out", "bad-out", "--no-mlflow"])
    assert res.exit_code == 2
    assert "model 'evil'" in res.output and "auto_map" in res.output and "never enables remote code" in res.output
    assert not (project / "bad-out").exists()
    with pytest.raises(RecipematchError, match="model 'gone': .*not a local directory"):
        check_folder(SurveyModel("gone", str(tmp_path / "nothing-here")))
    mods = tmp_path / "custom"
    mods.mkdir()
    (mods / "modules.json").write_text(json.dumps([{"path": "0", "type": "my_pkg.Layer"}]))
    with pytest.raises(RecipematchError, match="my_pkg.Layer.*custom code"):
        check_folder(SurveyModel("custom", str(mods)))


def test_model_specs_are_checked():
    with pytest.raises(RecipematchError, match=r"models\[0\]: unknown key\(s\) \['trust_remote_code'\]"):
        parse_models([{"name": "a", "path": "bm25", "trust_remote_code": True}])
    with pytest.raises(RecipematchError, match="given twice"):
        parse_models([{"name": "a", "path": "bm25"}, {"name": "a", "path": "bm25"}])
    with pytest.raises(RecipematchError, match="max_seq_length"):
        parse_models([{"name": "a", "path": "x", "max_seq_length": 0}])
    with pytest.raises(RecipematchError, match="non-empty list"):
        parse_models([])
    assert parse_models({"models": [{"name": "a", "path": "bm25"}]})[0] == SurveyModel("a", "bm25")


def test_bad_models_file_bad_out_and_a_failing_store_are_one_line_with_nothing_written(project, tmp_path):
    """Breaker round: a --models file that is not UTF-8, an --out below a file, and an MLflow store
    that cannot be opened each stop in one line; the store is written before the files, so a
    failing one leaves no finished-looking survey."""
    binary = tmp_path / "models.bin"
    binary.write_bytes(b"\x90\xff\x00 not text")
    res = CliRunner().invoke(main, ["survey", "--root", str(project), "--models", str(binary), "--no-mlflow"])
    assert res.exit_code == 2 and "not UTF-8 text" in res.output and "Traceback" not in res.output
    (tmp_path / "afile").write_text("x")
    res = _survey(project, "--out", str(tmp_path / "afile" / "sub"), "--no-mlflow")
    assert res.exit_code == 2 and "afile is a file" in res.output
    (project / "params-badml.yaml").write_text((project / "params.yaml").read_text())
    raw = yaml.safe_load((project / "params-badml.yaml").read_text())
    raw["mlflow"]["tracking_uri"] = f"sqlite:///{project / 'params.yaml'}/m.db"  # a file where a folder must be
    (project / "params-badml.yaml").write_text(yaml.safe_dump(raw))
    (project / "bm25.yaml").write_text(yaml.safe_dump([{"name": "lex", "path": "bm25"}]))
    res = CliRunner().invoke(main, ["survey", "--root", str(project), "--params", str(project / "params-badml.yaml"),
                                    "--models", str(project / "bm25.yaml"), "--out", "ml-out"])
    assert res.exit_code == 2 and "the survey could not be logged" in res.output
    assert not (project / "ml-out" / "survey.json").exists() and not (project / "ml-out" / "survey.md").exists()


def test_remote_code_is_found_behind_links_and_in_tokenizer_configs(tmp_path):
    """Breaker round: a symlinked module folder whose config has an auto_map, and an auto_map in
    tokenizer_config.json, are refused before loading, as a top-level one is."""
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "config.json").write_text(json.dumps({"model_type": "bert", "auto_map": {"AutoModel": "m.X"}}))
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (linked / "0_Transformer").symlink_to(evil, target_is_directory=True)
    (linked / "loop").symlink_to(linked, target_is_directory=True)  # a link back up is walked once
    with pytest.raises(RecipematchError, match=r"0_Transformer/config.json has an auto_map"):
        check_folder(SurveyModel("linked", str(linked)))
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (tok / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["t.T", None]}}))
    with pytest.raises(RecipematchError, match=r"tokenizer_config.json has an auto_map"):
        check_folder(SurveyModel("tok", str(tok)))
    (tok / "tokenizer_config.json").write_text("{}")
    (tok / "sentence_bert_config.json").write_text(json.dumps({"trust_remote_code": True}))
    with pytest.raises(RecipematchError, match=r"sentence_bert_config.json sets trust_remote_code"):
        check_folder(SurveyModel("tok", str(tok)))


def test_a_folders_default_prompt_is_not_applied_behind_the_recorded_convention(tmp_path):
    """Breaker round: a folder whose config_sentence_transformers.json names a default prompt is
    encoded without it when no prompt is declared, as its settings record."""
    from recipematch.retrieval.encoders import SentenceTransformerEncoder

    plain = _tiny_st(tmp_path / "plain", "mean")
    prompted = _tiny_st(tmp_path / "prompted", "mean")
    cfg = prompted / "config_sentence_transformers.json"
    data = json.loads(cfg.read_text()) if cfg.exists() else {}
    data.update(prompts={"query": "zzz xyzzy plugh "}, default_prompt_name="query")
    cfg.write_text(json.dumps(data))
    a = SentenceTransformerEncoder(str(plain), device="cpu", max_seq_length=24)
    b = SentenceTransformerEncoder(str(prompted), device="cpu", max_seq_length=24)
    assert b.settings["query_prompt"] is None
    np.testing.assert_array_equal(a.encode(["prove w1 w2"]), b.encode(["prove w1 w2"]))


def test_dot_names_are_refused_and_bm25_reads_as_lexical_in_any_case():
    """Breaker round: '.' and '..' passed as model names; 'BM25' got a dense convention column."""
    from recipematch.survey import survey_table

    for bad in (".", ".."):
        with pytest.raises(RecipematchError, match=r"not '\.' or '\.\.'"):
            parse_models([{"name": bad, "path": "bm25"}])
    res = {"headline": "b", "ks": [1], "sets": {"b": {"label": "tier"}},
           "models": [{"name": "lex", "path": "BM25", "convention": {}, "scores": {"b": {"R@1": 10.0}}}]}
    assert "| lex | lexical |" in survey_table(res)
