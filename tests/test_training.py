import pytest
from datasets import Dataset

from recipematch.gates import build_exclusion_list
from recipematch.training import dev_triplets, no_duplicates_report, training_examples


def _row(sid, negs, split="train"):
    return {"source_id": sid, "anchor": f"anchor {sid}", "positive": f"positive {sid}", "split": split,
            "negatives": [{"text": f"neg {sid} {i}"} for i in range(negs)]}


def test_examples_weigh_max_k_1():
    trip, pair = training_examples([_row("a", 3), _row("b", 0), _row("c", 1)])
    assert trip["anchor"] == ["anchor a"] * 3 + ["anchor c"]
    assert trip["negative"] == ["neg a 0", "neg a 1", "neg a 2", "neg c 0"]
    assert pair == {"anchor": ["anchor b"], "positive": ["positive b"]}


def test_no_duplicates_sampler_losses_are_counted():
    # 4 sources x 8 negatives: every example of a source shares its anchor and positive, so a
    # batch of 4 can hold at most one example per source; the sampler cannot place them all.
    trip, _ = training_examples([_row(s, 8) for s in "abcd"] + [_row(s, 1) for s in "efgh"])
    ds = Dataset.from_dict(trip)
    rep = no_duplicates_report(ds, batch_size=4, seed=0)
    assert rep["examples"] == 36
    assert rep["batches_advertised"] == 9
    # what one pass yields is fewer batches than advertised; the shortfall is re-drawn repeats
    covered = rep["examples"] - rep["examples_dropped"]
    assert 0 < covered < 36 and rep["examples_dropped"] > 0
    assert rep["batches_yielded"] * 4 == covered + rep["examples_repeated"]
    # with distinct anchors nothing is lost
    trip2, _ = training_examples([_row(f"s{i}", 1) for i in range(16)])
    rep2 = no_duplicates_report(Dataset.from_dict(trip2), batch_size=4, seed=0)
    assert rep2 == {"examples": 16, "batches_advertised": 4, "batches_yielded": 4, "examples_dropped": 0,
                    "examples_repeated": 0}


def test_dev_triplets_for_positive_only_rows_use_another_source():
    rows = [_row("a", 0, "dev"), _row("b", 0, "dev"), _row("c", 2, "dev")]
    trip = dev_triplets(rows, seed=1, limit=100)
    assert len(trip["anchor"]) == 4
    for a, n in zip(trip["anchor"], trip["negative"]):
        if n.startswith("positive"):
            assert n.split()[-1] != a.split()[-1]
    assert dev_triplets(rows, seed=1, limit=2)["anchor"].__len__() == 2


def test_trainer_gates_again():
    """The trainer applies the one contamination gate again (recipematch.gates.ContaminationGate)."""
    from recipematch.gates import ContaminationGate, NgramGate

    ex = build_exclusion_list([("a", "anchor a"), ("z", "zz")], ["anchor a", "neg b 1"], "v1")
    gate = ContaminationGate(ex, NgramGate([], n=5, threshold=0.35))
    rows, counts, _ = gate.apply([_row("a", 1), _row("b", 2)])
    assert [r["source_id"] for r in rows] == ["b"]
    assert [n["text"] for n in rows[0]["negatives"]] == ["neg b 0"]
    assert counts == {"rows_dropped.exclusion_v1_anchor_id": 1, "negatives_dropped.exclusion_v1_negative_text": 1,
                      "rows_kept": 1}


def test_single_positive_only_dev_source_borrows_a_train_positive():
    dev = [_row("d", 0, "dev")]
    assert dev_triplets(dev, seed=0, limit=10)["anchor"] == []
    trip = dev_triplets(dev, seed=0, limit=10, fallback=[_row("t1", 0), _row("t2", 0)])
    assert trip["anchor"] == ["anchor d"] and trip["negative"][0] in ("positive t1", "positive t2")


# ------------------------------------------------------------------ leftovers and checkpoints (issues 9, 14)

import hashlib
import time
from pathlib import Path

from recipematch.io import sha256_tree
from recipematch.training import TMP_PREFIX, clear_stale_work, save_checkpoint, train_one


def test_stale_temp_folders_of_one_seed_are_cleared_and_others_kept(tmp_path):
    mine = tmp_path / "recipe" / "seed_42"
    other = tmp_path / "verified" / "seed_42"
    for d in (mine, other):
        (d / f"{TMP_PREFIX}killed" / "checkpoint-2").mkdir(parents=True)
    (mine / "keep.txt").write_text("not a temp folder")
    removed = clear_stale_work(mine)
    assert [p.name for p in removed] == [f"{TMP_PREFIX}killed"]
    assert sorted(p.name for p in mine.iterdir()) == ["keep.txt"]
    assert (other / f"{TMP_PREFIX}killed").is_dir()  # another arm's run is never touched
    assert clear_stale_work(tmp_path / "new" / "seed_1") == [] and (tmp_path / "new" / "seed_1").is_dir()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A randomly initialised 1-layer BERT with a word-level tokenizer, saved as a
    sentence-transformers folder (mean pooling): small enough to train in seconds on CPU."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Pooling, Transformer
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    root = tmp_path_factory.mktemp("tiny")
    words = [f"w{i}" for i in range(40)] + ["anchor", "positive", "neg"]
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(words)], trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                        sep_token="[SEP]")
    torch.manual_seed(0)
    bert = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=64))
    hf = root / "hf"
    bert.save_pretrained(hf)
    tokenizer.save_pretrained(hf)
    tr = Transformer(str(hf), max_seq_length=16)
    st = SentenceTransformer(modules=[tr, Pooling(tr.get_word_embedding_dimension(), pooling_mode="mean")], device="cpu")
    st.save(str(root / "st"))
    return root / "st"


def _rows():
    rows = []
    for i in range(16):
        rows.append({"source_id": f"s{i}", "anchor": f"anchor w{i}", "positive": f"positive w{i} w{i + 20}",
                     "negatives": [{"text": f"neg w{(i + 7) % 40}"}], "split": "train"})
    for i in range(16, 20):
        rows.append({"source_id": f"s{i}", "anchor": f"anchor w{i}", "positive": f"positive w{i}",
                     "negatives": [{"text": f"neg w{i + 1}"}], "split": "dev"})
    return rows


def _cfg():
    from recipematch.training import TrainSettings

    return TrainSettings(lr=1e-3, epochs=1, batch_size=4, mini_batch_size=4, scale=20.0, warmup_ratio=0.0,
                       max_seq_length=16, eval_steps=2, max_dev_triplets=10, device="cpu", bf16=False)


def test_retraining_gives_a_byte_identical_checkpoint_and_no_leftovers(tiny_model, tmp_path):
    """Issue 9: the saved folder holds only what reproduces (no model card with wall-clock
    training times), so two trainings of one seed hash identically; issue 14: a killed
    run's temporary folder is gone after the rerun."""
    work = tmp_path / "train-tmp" / "arm" / "seed_0"
    (work / f"{TMP_PREFIX}killed-earlier").mkdir(parents=True)
    hashes, weights = [], []
    for i in range(2):
        out = tmp_path / f"ckpt{i}"
        rec = train_one(_rows(), base_model=str(tiny_model), out_dir=out, seed=0, cfg=_cfg(), progress=False,
                        work_dir=work)
        assert rec["steps"] > 0
        assert not (out / "README.md").exists()
        assert list(work.iterdir()) == []  # neither the killed run's folder nor this run's is left
        hashes.append(sha256_tree(out))
        weights.append(hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest())
        time.sleep(1.1)  # a wall-clock time in any saved file would now differ
    assert weights[0] == weights[1]
    assert hashes[0] == hashes[1]


def test_save_checkpoint_replaces_the_folder_and_writes_no_model_card(tiny_model, tmp_path):
    """The save itself (the trained case is the test above): no README.md, the target folder
    replaced rather than merged, and the saved model encodes as the one in memory."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(tiny_model), device="cpu")
    save_checkpoint(model, tmp_path / "a")
    time.sleep(1.1)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "stale.bin").write_bytes(b"x")  # the target is replaced, not merged
    save_checkpoint(model, tmp_path / "b")
    assert sha256_tree(tmp_path / "a") == sha256_tree(tmp_path / "b")
    assert not list((tmp_path / "a").rglob("README.md"))
    reloaded = SentenceTransformer(str(tmp_path / "b"), device="cpu")
    assert (reloaded.encode(["anchor w1"]) == model.encode(["anchor w1"])).all()


def test_contrastive_loss_is_plain_at_a_full_mini_batch_and_equals_the_cached_one(tiny_model):
    """Gradient caching buys memory only when the mini-batch is smaller than the batch; at a
    full mini-batch the plain loss is used, and both give the same loss and gradient on one
    fixed batch (dropout off)."""
    import dataclasses

    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.losses import CachedMultipleNegativesRankingLoss, MultipleNegativesRankingLoss

    from recipematch.training import contrastive_loss

    model = SentenceTransformer(str(tiny_model), device="cpu")
    model.eval()
    cfg = _cfg()
    assert isinstance(contrastive_loss(model, cfg), MultipleNegativesRankingLoss)
    small = dataclasses.replace(cfg, mini_batch_size=2)
    assert isinstance(contrastive_loss(model, small), CachedMultipleNegativesRankingLoss)
    rows = _rows()[:4]
    cols = [[r["anchor"] for r in rows], [r["positive"] for r in rows], [r["negatives"][0]["text"] for r in rows]]

    def loss_and_grad(loss_fn):
        model.zero_grad()
        feats = [model.tokenize(c) for c in cols]
        value = loss_fn(feats, torch.empty(0))
        value.backward()
        return float(value), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    plain_l, plain_g = loss_and_grad(contrastive_loss(model, cfg))
    cached_l, cached_g = loss_and_grad(contrastive_loss(model, small))
    assert plain_l == pytest.approx(cached_l, abs=1e-5)
    assert torch.linalg.norm(plain_g - cached_g) <= 1e-4 * torch.linalg.norm(plain_g)
    assert torch.linalg.norm(plain_g) > 0  # the batch trains something


def _pair_rows():
    return [{**r, "negatives": []} for r in _rows()]


def test_a_batch_of_one_pair_is_refused_before_training(tiny_model, tmp_path):
    """Issue 24: batch_size 1 on pairs-only rows gives one candidate per in-batch softmax
    (loss and gradient exactly 0); it is refused before the model loads."""
    import dataclasses

    cfg = dataclasses.replace(_cfg(), batch_size=1, mini_batch_size=1)
    with pytest.raises(ValueError, match="one candidate"):
        train_one(_pair_rows(), base_model=str(tiny_model), out_dir=tmp_path / "m", seed=0, cfg=cfg, progress=False)
    assert not (tmp_path / "m").exists()


def test_a_run_whose_weights_did_not_move_fails(tiny_model, tmp_path):
    """A training run that changes no weight (here: learning rate 0) is not recorded as trained."""
    import dataclasses

    cfg = dataclasses.replace(_cfg(), lr=0.0)
    with pytest.raises(ValueError, match="no weight moved"):
        train_one(_rows(), base_model=str(tiny_model), out_dir=tmp_path / "m", seed=0, cfg=cfg, progress=False)
    assert not (tmp_path / "m").exists()



def test_a_run_that_moves_the_weights_by_rounding_only_fails(tiny_model, tmp_path):
    """Breaker, round two: train.lr 1e-9 passed the bit-exact check (largest change 1.9e-9)."""
    import dataclasses

    cfg = dataclasses.replace(_cfg(), lr=1e-9)
    with pytest.raises(ValueError, match=r"the weights moved by .* \(relative\), under 1e-06"):
        train_one(_rows(), base_model=str(tiny_model), out_dir=tmp_path / "m", seed=0, cfg=cfg, progress=False)
    assert not (tmp_path / "m").exists()


def test_a_negative_equal_to_its_positive_at_batch_one_is_refused(tiny_model, tmp_path):
    """Breaker, round two: two slots, one distinct candidate, passed the slot count."""
    import dataclasses

    cfg = dataclasses.replace(_cfg(), batch_size=1, mini_batch_size=1)
    # breaker, round three: a trailing space, or a difference past max_seq_length, is the same
    # input to the model and passed a comparison of raw strings
    long = " w1" * 20  # past max_seq_length (16 tokens)
    for pos, neg in ((lambda t: t, lambda t: t), (lambda t: t, lambda t: t + " "),
                     (lambda t: t + long, lambda t: t + long + " w2")):
        rows = [{**r, "positive": pos(r["positive"]), "negatives": [{"text": neg(r["positive"])}]}
                if r.get("split") == "train" else r for r in _rows()]
        with pytest.raises(ValueError, match="a negative the model reads as its positive"):
            train_one(rows, base_model=str(tiny_model), out_dir=tmp_path / "m", seed=0, cfg=cfg, progress=False)
        assert not (tmp_path / "m").exists()


def test_relative_weight_change_measures_the_trainable_weights():
    import torch

    from recipematch.training import _trainable_snapshot, relative_weight_change

    m = torch.nn.Linear(3, 2)
    frozen = torch.nn.Linear(3, 2)
    frozen.weight.requires_grad_(False)
    frozen.bias.requires_grad_(False)
    model = torch.nn.Sequential(m, frozen)
    snap = _trainable_snapshot(model)
    assert relative_weight_change(model, snap) == 0.0
    with torch.no_grad():
        frozen.weight += 1.0  # a frozen layer does not count
        assert relative_weight_change(model, snap) == 0.0
        m.weight.mul_(2.0)
        m.bias.mul_(2.0)
    assert relative_weight_change(model, snap) == pytest.approx(1.0)


def test_max_steps_stops_training_at_the_step_count_and_leaves_the_identity_alone_when_off(tiny_model, tmp_path):
    """Appendix D's step-matched arm: ``train.max_steps`` caps the optimiser steps whatever the
    epochs; off (0) it is no part of a run's identity, so existing run keys do not move."""
    import dataclasses

    one_epoch = train_one(_rows(), base_model=str(tiny_model), out_dir=tmp_path / "a", seed=0, cfg=_cfg(),
                          progress=False)
    capped = dataclasses.replace(_cfg(), epochs=3, max_steps=2)
    rec = train_one(_rows(), base_model=str(tiny_model), out_dir=tmp_path / "b", seed=0, cfg=capped, progress=False)
    assert one_epoch["steps"] == 4 and rec["steps"] == 2  # 16 train rows, batch 4: 4 steps an epoch
    assert "max_steps" not in _cfg().identity() and capped.identity()["max_steps"] == 2
