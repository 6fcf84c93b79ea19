"""Training variants (paper Table 2, Appendix E, Table 19): LoRA adapters, the V2 query
instruction, the replay mix and WiSE-FT soups; with every variant off, training is what it was."""

import copy
import json

import numpy as np
import pytest

from recipematch.config import load_params, parse_params
from recipematch.errors import RecipematchError
from recipematch.training import (
    LoraSettings,
    ReplayPool,
    TrainSettings,
    add_lora,
    mix_replay,
    save_checkpoint,
    train_one,
    with_instruction,
)
from test_training import _cfg, _rows, tiny_model  # noqa: F401 - the tiny model fixture of the training tests

ORIGINAL_FIELDS = ["lr", "epochs", "batch_size", "mini_batch_size", "scale", "warmup_ratio", "max_seq_length",
                   "eval_steps", "max_dev_triplets", "device", "bf16"]


def _params(repo_root, **train):
    from recipematch.config import load_yaml

    raw = load_yaml(repo_root / "params.yaml")
    raw = copy.deepcopy(raw)
    raw["train"].update(train)
    return raw


# ------------------------------------------------------------------ params and settings

@pytest.mark.parametrize("name", ["params.yaml", "params-paper.yaml"])
def test_shipped_params_leave_every_variant_off(repo_root, name):
    p = load_params(repo_root / name)
    s = TrainSettings.pick(p.train)
    assert s.lora is None and s.gradient_checkpointing is False and s.query_instruction == ""
    assert p.train.replay.fraction == 0.0
    # the run's identity (run key, record) is the one it had before the variants existed
    assert list(s.identity()) == ORIGINAL_FIELDS
    assert s.learning_rate == p.train.lr
    # ... while MLflow shows every variant, off
    mp = s.mlflow_params()
    assert mp["lora.enabled"] is False and mp["gradient_checkpointing"] is False and mp["query_instruction"] == ""


def test_lora_settings_come_from_params_and_bring_their_learning_rate(repo_root):
    raw = _params(repo_root, lora={"enabled": True, "rank": 8, "alpha": 16, "dropout": 0.1,
                                   "target_modules": ["query", "value"], "lr": 3e-4},
                  gradient_checkpointing=True, query_instruction="Q: ")
    s = TrainSettings.pick(parse_params(raw).train)
    assert s.lora == LoraSettings(rank=8, alpha=16.0, dropout=0.1, target_modules=("query", "value"), lr=3e-4)
    assert s.learning_rate == 3e-4 and s.lr == raw["train"]["lr"]
    ident = s.identity()
    assert ident["lora"]["rank"] == 8 and ident["gradient_checkpointing"] is True and ident["query_instruction"] == "Q: "
    mp = s.mlflow_params()
    assert mp["lora.enabled"] is True and mp["lora.rank"] == 8 and mp["lora.target_modules"] == "query,value"
    # a disabled section keeps full fine-tuning whatever its other keys say
    raw["train"]["lora"]["enabled"] = False
    assert TrainSettings.pick(parse_params(raw).train).lora is None


@pytest.mark.parametrize("train, message", [
    ({"replay": {"file": "", "fraction": 0.2}}, "train.replay.fraction > 0 needs train.replay.file"),
    ({"replay": {"file": "x.jsonl", "fraction": 0.95}}, "train.replay.fraction must lie in"),
    ({"soup_alphas": [0.5]}, "train: unknown key(s) ['soup_alphas']"),
    ({"lora": {"enabled": True, "rank": 0}}, "train.lora.rank must lie in"),
    ({"lora": {"enabled": True, "bogus": 1}}, "train.lora: unknown key(s) ['bogus']"),
])
def test_bad_variant_params_are_refused_naming_the_key(repo_root, train, message):
    with pytest.raises(RecipematchError, match=r".*" + __import__("re").escape(message)):
        parse_params(_params(repo_root, **train))


# ------------------------------------------------------------------ V2 query instruction

def test_instruction_prefixes_anchors_only():
    cols = {"anchor": ["a1", "a2"], "positive": ["p1", "p2"], "negative": ["n1", "n2"]}
    out = with_instruction(cols, "Find: ")
    assert out == {"anchor": ["Find: a1", "Find: a2"], "positive": ["p1", "p2"], "negative": ["n1", "n2"]}
    assert with_instruction(cols, "") == cols


def test_evaluation_encoder_prefixes_the_instruction_to_queries_only(tiny_model):  # noqa: F811
    from recipematch.pipeline.models import encoder

    plain = encoder(str(tiny_model), max_seq_length=16, batch_size=8, device="cpu", dtype="float32")
    instr = encoder(str(tiny_model), max_seq_length=16, batch_size=8, device="cpu", dtype="float32", query_prompt="w39 ")
    texts = ["anchor w1 w2", "positive w3"]
    # default: queries and documents are encoded alike (today's behaviour)
    assert np.array_equal(plain.encode_queries(texts), plain.encode(texts))
    # with the instruction: queries are exactly the prefixed texts, documents untouched
    assert np.array_equal(instr.encode_queries(texts), plain.encode(["w39 anchor w1 w2", "w39 positive w3"]))
    assert np.array_equal(instr.encode(texts), plain.encode(texts))
    assert not np.allclose(instr.encode_queries(texts), plain.encode_queries(texts))
    assert instr.cache_key != plain.cache_key  # the embedding cache never mixes the two


# ------------------------------------------------------------------ replay mix

def _replay(n):
    return [{"source_id": f"r{i}", "anchor": f"anchor w{i}", "positive": f"positive w{i + 1}", "negatives": []}
            for i in range(n)]


def test_replay_mix_is_a_seeded_share_of_the_training_split():
    rows = _rows()  # 16 train rows, 4 dev rows
    same, n0 = mix_replay(rows, _replay(40), fraction=0.0, seed=1)
    assert n0 == 0 and same == rows
    mixed, n = mix_replay(rows, _replay(40), fraction=0.5, seed=1)
    assert n == 16  # replay rows are half of the mixed training split
    train = [r for r in mixed if r["split"] == "train"]
    assert len(train) == 32 and sum(1 for r in train if r.get("replay")) == 16
    assert [r for r in mixed if r["split"] == "dev"] == [r for r in rows if r["split"] == "dev"]
    assert mixed[:20] == rows  # the cell's own rows come first, unchanged
    again, _ = mix_replay(rows, _replay(40), fraction=0.5, seed=1)
    other, _ = mix_replay(rows, _replay(40), fraction=0.5, seed=2)
    assert again == mixed
    assert [r["source_id"] for r in other[20:]] != [r["source_id"] for r in mixed[20:]]
    picked = [int(r["source_id"][1:]) for r in mixed[20:]]
    assert picked == sorted(picked)  # file order kept
    quarter, n = mix_replay(rows, _replay(40), fraction=0.2, seed=1)
    assert n == 4  # round(16 * 0.2 / 0.8)


def test_replay_file_too_small_is_refused_naming_the_file():
    with pytest.raises(RecipematchError, match=r"general\.jsonl has 3 usable rows"):
        mix_replay(_rows(), _replay(3), fraction=0.5, seed=1, source="general.jsonl")


def test_replay_pool_goes_through_the_contamination_gate(tmp_path):
    from recipematch.gates import ContaminationGate, NgramGate, build_exclusion_list

    path = tmp_path / "general.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _replay(5)), encoding="utf-8")
    ex = build_exclusion_list([("r2", "anchor w2")], ["anchor w2"], "v1")
    pool = ReplayPool.load(path, ContaminationGate(ex, NgramGate([], n=5, threshold=0.35)))
    assert [r["source_id"] for r in pool.rows] == ["r0", "r1", "r3", "r4"]
    assert pool.gate_counts["rows_kept"] == 4 and len(pool.sha256) == 64
    with pytest.raises(RecipematchError, match=r"train\.replay\.file: .*missing\.jsonl does not exist"):
        ReplayPool.load(tmp_path / "missing.jsonl", None)


def test_training_with_replay_counts_the_replay_rows(tiny_model, tmp_path):  # noqa: F811
    rows, n = mix_replay(_rows(), _replay(40), fraction=0.2, seed=0)
    rec = train_one(rows, base_model=str(tiny_model), out_dir=tmp_path / "ckpt", seed=0, cfg=_cfg(), progress=False)
    assert rec["replay_rows"] == n == 4
    assert rec["train_rows"] == 20 and rec["dev_rows"] == 4


# ------------------------------------------------------------------ LoRA

def _lora():
    return LoraSettings(rank=4, alpha=8.0, dropout=0.0, target_modules=("query", "value"), lr=1e-2)


def test_saved_lora_adapter_reloads_and_scores_identically(tiny_model, tmp_path):  # noqa: F811
    import torch
    from sentence_transformers import SentenceTransformer

    texts = ["anchor w1 w2", "positive w3 w4", "neg w5"]
    base = SentenceTransformer(str(tiny_model), device="cpu")
    model = SentenceTransformer(str(tiny_model), device="cpu")
    add_lora(model, _lora())
    torch.manual_seed(3)
    with torch.no_grad():  # a trained adapter: B is no longer zero
        for name, prm in model.named_parameters():
            if "lora_B" in name:
                prm.normal_()
    before = model.encode(texts)
    assert not np.allclose(before, base.encode(texts), atol=1e-4)  # the adapter changes the vectors
    save_checkpoint(model, tmp_path / "adapter")
    files = {f.name for f in (tmp_path / "adapter").iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json"} <= files and "model.safetensors" not in files
    cfg = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert cfg["target_modules"] == ["query", "value"] and cfg["r"] == 4  # sorted: same bytes every run
    after = SentenceTransformer(str(tmp_path / "adapter"), device="cpu").encode(texts)
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-6)


def test_lora_training_trains_only_the_adapters_with_gradient_checkpointing(tiny_model, tmp_path,  # noqa: F811
                                                                            monkeypatch):
    from sentence_transformers import SentenceTransformer

    calls = []
    orig = SentenceTransformer.gradient_checkpointing_enable

    def spy(self, *a, **kw):
        calls.append(True)
        return orig(self, *a, **kw)

    monkeypatch.setattr(SentenceTransformer, "gradient_checkpointing_enable", spy)
    from dataclasses import replace

    cfg = replace(_cfg(), lora=_lora(), gradient_checkpointing=True)
    rec = train_one(_rows(), base_model=str(tiny_model), out_dir=tmp_path / "ckpt", seed=0, cfg=cfg, progress=False)
    assert rec["steps"] > 0 and calls  # the trainer switched gradient checkpointing on
    assert rec["config"]["lora"]["rank"] == 4 and rec["config"]["gradient_checkpointing"] is True
    texts = ["anchor w1", "positive w2 w22"]
    base = SentenceTransformer(str(tiny_model), device="cpu").encode(texts)
    tuned = SentenceTransformer(str(tmp_path / "ckpt"), device="cpu")
    assert not np.allclose(tuned.encode(texts), base, atol=1e-5)  # the adapters learned something
    tuned[0].auto_model.disable_adapters()
    np.testing.assert_array_equal(tuned.encode(texts), base)  # ... and the base weights did not move


# ------------------------------------------------------------------ WiSE-FT soups

def test_blend_is_exact_at_the_ends_and_the_elementwise_mean_halfway():
    import torch

    from recipematch.soups import blend_state_dicts

    g = torch.Generator().manual_seed(0)
    ft = {"w": torch.randn(64, 32, generator=g), "h": torch.randn(7, generator=g).to(torch.bfloat16),
          "ids": torch.arange(5)}
    base = {"w": torch.randn(64, 32, generator=g), "h": torch.randn(7, generator=g).to(torch.bfloat16),
            "ids": torch.arange(5)}
    for k in ("w", "h", "ids"):
        assert torch.equal(blend_state_dicts(ft, base, 1.0)[k], ft[k])
        assert torch.equal(blend_state_dicts(ft, base, 0.0)[k], base[k])
    half = blend_state_dicts(ft, base, 0.5)
    assert torch.equal(half["w"], (ft["w"] + base["w"]) / 2)
    assert half["h"].dtype == torch.bfloat16
    third = blend_state_dicts(ft, base, 0.3)["w"]
    assert torch.allclose(third, 0.3 * ft["w"] + 0.7 * base["w"], rtol=0, atol=1e-6)


@pytest.mark.parametrize("base_change, message", [
    (lambda b: b.pop("w"), "differ in their tensors"),
    (lambda b: b.update(w=b["w"][:2]), "shape"),
    (lambda b: b.update(ids=b["ids"] + 1), "cannot be blended"),
])
def test_blend_refuses_models_of_another_architecture(base_change, message):
    import torch

    from recipematch.soups import blend_state_dicts

    ft = {"w": torch.zeros(4, 3), "ids": torch.arange(3)}
    base = {"w": torch.ones(4, 3), "ids": torch.arange(3)}
    base_change(base)
    with pytest.raises(RecipematchError, match=message):
        blend_state_dicts(ft, base, 0.5)
    with pytest.raises(RecipematchError, match=r"alpha must lie in \[0, 1\]"):
        blend_state_dicts(ft, ft, 1.5)


@pytest.fixture(scope="module")
def trained(tiny_model, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("trained") / "seed_42"
    train_one(_rows(), base_model=str(tiny_model), out_dir=out, seed=42, cfg=_cfg(), progress=False)
    return out


def test_soup_checkpoints_of_a_full_fine_tune(tiny_model, trained, tmp_path):  # noqa: F811
    from sentence_transformers import SentenceTransformer

    from recipematch.soups import build_soup

    info = build_soup(trained, tiny_model, 1.0, tmp_path / "a1")
    assert info["kind"] == "full" and info["tensors_blended"] > 0
    # alpha 1: the trained weights, byte for byte (tokenizer_config.json may differ: the tokenizer
    # records its padding settings once it has been called)
    assert (tmp_path / "a1" / "model.safetensors").read_bytes() == (trained / "model.safetensors").read_bytes()
    build_soup(trained, tiny_model, 0.0, tmp_path / "a0")
    build_soup(trained, tiny_model, 0.5, tmp_path / "a05")
    sd = {k: SentenceTransformer(str(p), device="cpu").state_dict() for k, p in
          (("ft", trained), ("base", tiny_model), ("a0", tmp_path / "a0"), ("a05", tmp_path / "a05"))}
    floats = [k for k, v in sd["ft"].items() if v.is_floating_point()]
    assert any(not sd["ft"][k].equal(sd["base"][k]) for k in floats)  # training moved the weights
    for k in floats:
        assert sd["a0"][k].equal(sd["base"][k])
        assert sd["a05"][k].equal((sd["ft"][k] + sd["base"][k]) / 2)


def test_soup_of_a_lora_checkpoint_scales_the_adapter(tiny_model, tmp_path):  # noqa: F811
    import torch
    from sentence_transformers import SentenceTransformer

    from recipematch.soups import build_soup

    texts = ["anchor w1 w2", "positive w3"]
    model = SentenceTransformer(str(tiny_model), device="cpu")
    add_lora(model, _lora())
    torch.manual_seed(5)
    with torch.no_grad():
        for name, prm in model.named_parameters():
            if "lora_B" in name:
                prm.normal_()
    save_checkpoint(model, tmp_path / "lora")
    assert build_soup(tmp_path / "lora", tiny_model, 0.0, tmp_path / "s0")["kind"] == "lora"
    build_soup(tmp_path / "lora", tiny_model, 1.0, tmp_path / "s1")
    enc = {k: SentenceTransformer(str(p), device="cpu").encode(texts)
           for k, p in (("base", tiny_model), ("lora", tmp_path / "lora"), ("s0", tmp_path / "s0"),
                        ("s1", tmp_path / "s1"))}
    np.testing.assert_allclose(enc["s0"], enc["base"], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(enc["s1"], enc["lora"])
    assert not np.allclose(enc["lora"], enc["base"], atol=1e-4)


def _beir(folder):
    folder.mkdir(parents=True)
    (folder / "qrels").mkdir()
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": f"positive w{i} w{i + 10}"}) + "\n" for i in range(12)))
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": f"anchor w{i}"}) + "\n" for i in range(6)))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i}\t1\n" for i in range(6)))


def test_soup_stage_scores_each_alpha_as_its_own_row(repo_root, tiny_model, trained, tmp_path):  # noqa: F811
    import shutil

    import pandas as pd

    from recipematch import tracking
    from recipematch.config import load_yaml
    from recipematch.io import read_json, sha256_tree
    from recipematch.pipeline import soup
    from conftest import Outputs

    raw = load_yaml(repo_root / "params.yaml")
    raw["train"].update(model=str(tiny_model), n_seeds=1)
    raw["remedies"].update(arms=["recipe", "cell"], soup_alphas=[0.5, 1.0], replay_fractions=[])
    raw["evaluate"].update(max_seq_length=16)
    raw["evaluations"] = {"easy": {"folder": "artifacts/evalsets/easy", "rule": "plain", "role": "benchmark"}}
    raw["style"]["tracking_set"] = "easy"
    raw["pooling"], raw["judging"], raw["saber"] = {}, {}, {}  # the default's pools name its own sets
    lay = Outputs(tmp_path, raw)
    _beir(tmp_path / "artifacts" / "evalsets" / "easy")
    shutil.copytree(trained, lay.models("recipe") / "seed_42")
    (lay.models("recipe") / "seed_42.json").write_text("{}")
    view = parse_params(raw).view(soup.PARAMS)

    with pytest.raises(RecipematchError, match=r"--alpha 0.7: not one of remedies.soup_alphas \[0.5, 1.0\]"):
        soup.run(view, lay.stage("soup@recipe-0.5"), arm="recipe", alpha="0.7")
    with pytest.raises(RecipematchError, match=r"--arm 'verified': not in remedies.arms"):
        soup.run(view, lay.stage("soup@recipe-0.5"), arm="verified", alpha="0.5")
    with pytest.raises(RecipematchError, match=r"models/cell does not exist \(train it first\)"):
        soup.run(view, lay.stage("soup@cell-0.5"), arm="cell", alpha="0.5")

    out = soup.run(view, lay.stage("soup@recipe-0.5"), arm="recipe", alpha="0.5")
    assert out["seeds"] == 1 and 0 <= out["easy.R@1.mean"] <= 100
    label = "recipe@soup0.5"
    rec = read_json(lay.p("artifacts", "soups", label, "seed_42.json"))
    assert rec["alpha"] == 0.5 and rec["kind"] == "full"
    assert rec["finetuned_checkpoint_sha256"] == sha256_tree(trained)
    assert rec["checkpoint_sha256"] == sha256_tree(lay.p("artifacts", "soups", label, "seed_42"))
    assert read_json(lay.metrics / "eval" / f"{label}.json") == out  # beside the arms' own rows
    ranks = pd.read_parquet(lay.eval_dir(label) / "easy.parquet")
    assert set(ranks["arm"]) == {label} and len(ranks) == 6

    soup.run(view, lay.stage("soup@recipe-1.0"), arm="recipe", alpha="1.0")  # alpha 1 is the trained checkpoint itself
    assert (lay.p("artifacts", "soups", "recipe@soup1.0", "seed_42", "model.safetensors").read_bytes()
            == (trained / "model.safetensors").read_bytes())

    c, exp_id = tracking.open_store(f"sqlite:///{tmp_path / 'mlflow.db'}", raw["mlflow"]["experiment"])
    runs = {r.data.params["arm"]: r for r in c.search_runs([exp_id])}
    assert set(runs) == {"recipe@soup0.5", "recipe@soup1.0"}
    assert runs["recipe@soup0.5"].data.params["soup.alpha"] == "0.5"
    assert "easy.R_at_1" in runs["recipe@soup0.5"].data.metrics
