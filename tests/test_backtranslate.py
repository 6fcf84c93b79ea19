"""recipematch.backtranslate: LaTeX masking on real problems, routes, drops, and NLLB-style
translation on a tiny randomly initialised M2M100 model with a tokenizer trained here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import RELEASE, require_real_data

from recipematch.backtranslate import (
    NLLBTranslator,
    StructuralError,
    backtranslate,
    mask_latex,
    nllb_code,
    pivots_for,
    procedure_sha256,
    unmask,
)

FIXTURES = Path(__file__).parent / "fixtures" / "llm"


def corpus_rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# ------------------------------------------------------------------ masking


def test_mask_real_problem() -> None:
    text = next(r["text"] for r in corpus_rows(FIXTURES / "corpus.sample.jsonl") if r["_id"] == "0000")
    m = mask_latex(text)
    assert m.text == "Determinar todos los pares [0] de enteros positivos para los cuales\n[1]\nes un número entero."
    assert m.spans == ("$(a, b)$", "$$\n\\frac{a^2 b + b}{ab^2 + 9}\n$$")
    assert unmask(m.text, m) == text


def test_mask_roundtrip_on_every_fixture_problem() -> None:
    rows = corpus_rows(FIXTURES / "corpus.sample.jsonl")
    for r in rows:
        m = mask_latex(r["text"])
        assert unmask(m.text, m) == r["text"]
        assert "$" not in m.text and "\\(" not in m.text and "\\[" not in m.text
    assert sum(len(mask_latex(r["text"]).spans) for r in rows) == 95


def test_mask_roundtrip_on_the_2500_released_problems() -> None:
    rows = corpus_rows(require_real_data(RELEASE / "corpus.jsonl"))
    spans = 0
    for r in rows:
        m = mask_latex(r["text"])
        assert unmask(m.text, m) == r["text"]
        spans += len(m.spans)
    assert len(rows) == 2500 and spans == 17710
    # only an unpaired dollar (a price, "$1000") is left in the text
    assert sum("$" in mask_latex(r["text"]).text for r in rows) == 1


@pytest.mark.parametrize(
    ("text", "masked", "spans"),
    [
        ("a $x$ b $$y$$ c", "a [0] b [1] c", ("$x$", "$$y$$")),
        ("p \\(x+1\\) q \\[y\\]", "p [0] q [1]", ("\\(x+1\\)", "\\[y\\]")),
        ("costs \\$5 and $x$", "costs \\$5 and [0]", ("$x$",)),
        ("$a$$b$", "[0][1]", ("$a$", "$b$")),
        ("\\begin{align} x \\begin{align}y\\end{align} \\end{align} z",
         "[0] z", ("\\begin{align} x \\begin{align}y\\end{align} \\end{align}",)),
        ("unclosed $x and \\(y", "unclosed $x and \\(y", ()),
        ("see [1] and $x$", "see [1] and [[0]]", ("$x$",)),  # placeholder collision: next format
        ("no math here", "no math here", ()),
    ],
)
def test_mask_cases(text: str, masked: str, spans: tuple[str, ...]) -> None:
    m = mask_latex(text)
    assert (m.text, m.spans) == (masked, spans)
    assert unmask(m.text, m) == text


@pytest.mark.parametrize(
    ("translated", "reason"),
    [("only [0] here", "placeholder_missing"), ("[0] [1] [1]", "placeholder_repeated"),
     ("[0] [1] [7]", "placeholder_unknown")],
)
def test_unmask_failures(translated: str, reason: str) -> None:
    m = mask_latex("a $x$ b $y$")
    with pytest.raises(StructuralError) as e:
        unmask(translated, m)
    assert e.value.reason == reason


def test_unmask_allows_reordering() -> None:
    m = mask_latex("if $x$ then $y$")
    assert unmask("[1] when [0]", m) == "$y$ when $x$"


# ------------------------------------------------------------------ routes


def test_routes() -> None:
    assert pivots_for("en", 1) == ["fra_Latn"]
    assert pivots_for("es", 1) == pivots_for("spa_Latn", 1) == ["eng_Latn"]
    assert pivots_for("en", 3) == ["fra_Latn", "deu_Latn", "rus_Cyrl"]
    assert pivots_for("fr", 3) == ["eng_Latn", "deu_Latn", "rus_Cyrl"]
    assert pivots_for("de", 3) == ["fra_Latn", "eng_Latn", "rus_Cyrl"]
    assert pivots_for("ru", 3) == ["fra_Latn", "deu_Latn", "eng_Latn"]
    assert nllb_code("mn") == "khk_Cyrl"
    with pytest.raises(KeyError):
        nllb_code("xx")
    with pytest.raises(ValueError):
        pivots_for("en", 2)


# ------------------------------------------------------------------ the control with scripted translators


class FakeTranslator:
    """Deterministic stand-in: into a pivot every word gets a '~' suffix; back from it the
    suffix goes and the word order of each line is reversed (so a round trip differs from
    the source). Placeholders pass through. ``breaker(text, src, tgt)`` may corrupt outputs."""

    def __init__(self, breaker=None) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.inputs: list[str] = []
        self.breaker = breaker

    def translate(self, texts, src_lang, tgt_lang):
        self.calls.append((src_lang, tgt_lang, len(texts)))
        self.inputs.extend(texts)
        out = []
        for t in texts:
            words = t.split(" ")
            if any(w.endswith("~") for w in words):  # coming back
                o = " ".join(reversed([w[:-1] if w.endswith("~") else w for w in words]))
            else:
                o = " ".join(w + "~" if re.search(r"[^\W\d_]", w) else w for w in words)
            out.append(self.breaker(o, src_lang, tgt_lang) if self.breaker else o)
        return out


SOURCES = [
    ("p1", "Find all real $x$ with $x^2 = 4$.", "en"),
    ("p2", "Determinar todos los pares $(a, b)$ de enteros.\n\n$$a+b$$\nes un número entero.", "es"),
    ("p3", "Sea $n$ un entero", "es"),
    ("p4", "Zeige $a < b$.", "de"),
]


def test_one_hop_rows_routes_and_masking() -> None:
    tr = FakeTranslator()
    rows, failures, counts = backtranslate(SOURCES, tr, hops=1)
    assert counts == {"sources": 4, "hops": 1, "kept": 4, "dropped": {}, "dropped_total": 0} and failures == []
    by = {r["source_id"]: r for r in rows}
    assert by["p1"]["positive"] == "$x^2 = 4$. with $x$ real all Find"
    assert by["p2"]["positive"] == "enteros. de $(a, b)$ pares los todos Determinar\n\n$$a+b$$\nentero. número un es"
    assert by["p1"]["positive_provenance"]["route"] == ["eng_Latn", "fra_Latn", "eng_Latn"]
    assert by["p2"]["positive_provenance"]["route"] == ["spa_Latn", "eng_Latn", "spa_Latn"]
    assert by["p4"]["positive_provenance"]["route"] == ["deu_Latn", "eng_Latn", "deu_Latn"]
    assert all("$" not in t for t in tr.inputs)  # formulas never reach the translator
    assert "[1]" not in tr.inputs and "" not in tr.inputs  # a placeholder-only line is copied, not sent
    prov = by["p1"]["positive_provenance"]
    assert prov["generator"] == "backtranslation_1hop" and prov["judge"] is None
    assert prov["prompt_sha256"] == procedure_sha256("facebook/nllb-200-distilled-600M", 1)
    assert re.fullmatch(r"[0-9a-f]{64}", prov["prompt_sha256"])
    assert [r["source_id"] for r in rows] == ["p1", "p2", "p3", "p4"] and all(r["negatives"] == [] for r in rows)


def test_three_hops_each_validated_and_masked_again() -> None:
    tr = FakeTranslator()
    rows, failures, counts = backtranslate(SOURCES[:1], tr, hops=3)
    assert [c[:2] for c in tr.calls] == [("eng_Latn", "fra_Latn"), ("fra_Latn", "eng_Latn"),
                                         ("eng_Latn", "deu_Latn"), ("deu_Latn", "eng_Latn"),
                                         ("eng_Latn", "rus_Cyrl"), ("rus_Cyrl", "eng_Latn")]
    assert rows[0]["positive_provenance"]["route"] == ["eng_Latn", "fra_Latn", "eng_Latn", "deu_Latn", "eng_Latn",
                                                       "rus_Cyrl", "eng_Latn"]
    # three reversals of the word order = one reversal
    assert rows[0]["positive"] == "$x^2 = 4$. with $x$ real all Find"
    assert all("$" not in t for t in tr.inputs)

    def break_german(text: str, src: str, tgt: str) -> str:
        return text.replace("[0]", "") if src == "deu_Latn" else text

    rows, failures, counts = backtranslate(SOURCES[:1], FakeTranslator(break_german), hops=3)
    assert rows == [] and failures[0]["item"]["hop"] == 2 and failures[0]["item"]["pivot"] == "deu_Latn"
    assert counts["dropped"] == {"structural:placeholder_missing": 1}


class IdentityTranslator:
    def translate(self, texts, src_lang, tgt_lang):
        return list(texts)


def test_identical_round_trips_dropped() -> None:
    rows, failures, counts = backtranslate(SOURCES, IdentityTranslator(), hops=1)
    assert rows == [] and counts["dropped"] == {"identical": 4}


@pytest.mark.parametrize(
    ("breaker", "reason"),
    [
        (lambda t, s, g: t.replace("[0]", "[0] [0]"), "structural:placeholder_repeated"),
        (lambda t, s, g: t + " [9]" if "[0]" in t else t, "structural:placeholder_unknown"),
        (lambda t, s, g: t + " $z$", "structural:math_delimiter_added"),
        (lambda t, s, g: t + " filler" * 40, "structural:length_ratio"),
    ],
)
def test_structural_failures(breaker, reason: str) -> None:
    rows, failures, counts = backtranslate(SOURCES[:1], FakeTranslator(breaker), hops=1)
    assert rows == [] and [f["reason"] for f in failures] == [reason]
    assert failures[0]["stage"] == "backtranslate" and failures[0]["item"]["hop"] == 1


def test_translation_errors_and_unsupported_languages() -> None:
    class Failing(FakeTranslator):
        def translate(self, texts, src_lang, tgt_lang):
            if src_lang == "deu_Latn":
                raise RuntimeError("CUDA out of memory")
            return super().translate(texts, src_lang, tgt_lang)

    srcs = SOURCES + [("p5", "Mystery text $q$", "xx")]
    rows, failures, counts = backtranslate(srcs, Failing(), hops=1)
    assert [r["source_id"] for r in rows] == ["p1", "p2", "p3"]
    assert counts["dropped"] == {"translation_error": 1, "unsupported_language": 1}
    assert counts["kept"] + counts["dropped_total"] == counts["sources"] == 5
    assert "CUDA out of memory" in next(f for f in failures if f["source_id"] == "p4")["item"]["detail"]
    with pytest.raises(ValueError, match="duplicate"):
        backtranslate(SOURCES + SOURCES[:1], Failing())
    with pytest.raises(ValueError, match="hops"):
        backtranslate(SOURCES, Failing(), hops=2)


def test_rows_pass_the_pair_provenance_check() -> None:
    pairs = pytest.importorskip("recipematch.pairs")
    rows, _, _ = backtranslate(SOURCES, FakeTranslator(), hops=3)
    assert rows and all(pairs.provenance_problems(r) == [] for r in rows)


# ------------------------------------------------------------------ tiny NLLB-style model

CODES = ["eng_Latn", "fra_Latn", "spa_Latn", "deu_Latn", "rus_Cyrl"]


@pytest.fixture(scope="module")
def tiny_nllb():
    """A randomly initialised 1-layer M2M100 (NLLB's architecture) and a word-level
    tokenizer trained on the fixture problems (masked and raw), with NLLB language codes."""
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import M2M100Config, M2M100ForConditionalGeneration, PreTrainedTokenizerFast

    texts = [r["text"] for r in corpus_rows(FIXTURES / "corpus.sample.jsonl")]
    texts += [mask_latex(t).text for t in texts]
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["<s>", "<pad>", "</s>", "<unk>", *CODES]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                        unk_token="<unk>", extra_special_tokens=CODES)
    torch.manual_seed(0)
    cfg = M2M100Config(vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                       encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                       max_position_embeddings=256, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                       decoder_start_token_id=2)
    model = M2M100ForConditionalGeneration(cfg)
    return model, tokenizer


def test_nllb_translator_encoding_and_forced_target(tiny_nllb) -> None:
    model, tokenizer = tiny_nllb
    tr = NLLBTranslator(model=model, tokenizer=tokenizer, num_beams=1, max_new_tokens=8, batch_size=2)
    seen = []
    real_generate = model.generate

    def spy(**kw):
        out = real_generate(**kw)
        seen.append((kw["input_ids"].clone(), kw["attention_mask"].clone(), out.clone()))
        return out

    model.generate = spy
    try:
        texts = ["Determinar todos los pares [0] de enteros", "es un número entero.", "Sea [0] un entero"]
        a = tr.translate(texts, "spa_Latn", "eng_Latn")
        b = tr.translate(texts, "spa_Latn", "eng_Latn")
    finally:
        del model.generate
    assert a == b and len(a) == 3 and all(isinstance(t, str) for t in a)
    assert len(seen) == 4  # batches of 2 + 1, twice
    ids, mask, out = seen[0]
    spa, eng = tokenizer.convert_tokens_to_ids("spa_Latn"), tokenizer.convert_tokens_to_ids("eng_Latn")
    assert ids[:, 0].tolist() == [spa, spa]  # [src_lang] tokens </s>
    lengths = mask.sum(dim=1).tolist()
    assert [ids[r, lengths[r] - 1].item() for r in range(2)] == [tokenizer.eos_token_id] * 2
    assert ids[1, lengths[1]:].tolist() == [tokenizer.pad_token_id] * (ids.shape[1] - lengths[1])
    assert out[:, 0].tolist() == [2, 2] and out[:, 1].tolist() == [eng, eng]  # decoder start, then forced target
    with pytest.raises(KeyError, match="xxx_Latn"):
        tr.translate(["x"], "xxx_Latn", "eng_Latn")


def test_backtranslate_end_to_end_on_tiny_model(tiny_nllb) -> None:
    model, tokenizer = tiny_nllb
    tr = NLLBTranslator(model=model, tokenizer=tokenizer, num_beams=1, max_new_tokens=16)
    rows = corpus_rows(FIXTURES / "corpus.sample.jsonl")
    sources = [(r["_id"], r["text"], "es") for r in rows]
    out1 = backtranslate(sources, tr, hops=1, model_id="tiny-random-m2m100")
    out2 = backtranslate(sources, tr, hops=1, model_id="tiny-random-m2m100")
    assert json.dumps(out1) == json.dumps(out2)  # deterministic (greedy)
    kept, failures, counts = out1
    assert counts["kept"] + counts["dropped_total"] == 9 == len(kept) + len(failures)
    # an untrained model cannot carry the placeholders through: every problem here has formulas
    assert counts["dropped"] == {"structural:placeholder_missing": 9}
