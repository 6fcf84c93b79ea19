import pytest

from recipematch.gates import NgramGate, build_exclusion_list, norm_v1, norm_v2, word_ngrams


def test_normalisers():
    assert norm_v1("  a\n\t b  ") == "a b"
    assert norm_v2("Problem:\n\nFind  $x$. ![](attached_image_1.png)") == "Find $x$."
    assert norm_v2("problem: Find $x$") == "Find $x$"
    # v1 keeps the header, so v1 and v2 differ on it
    assert norm_v1("Problem: Find $x$") != norm_v2("Problem: Find $x$")


def test_v1_v2_exclusion_lists():
    corpus = [("a", "Find $x$."), ("b", "Problem:\nFind $x$."), ("c", "Prove $y>0$."), ("d", "Prove  $y>0$."),
              ("e", "Unrelated.")]
    evals = ["Find $x$.", "Prove $y>0$."]
    v1 = build_exclusion_list(corpus, evals, "v1")
    # v1: whitespace-normal exact match only; the "Problem:" reprint b is missed
    assert v1.ids == ("a", "c", "d")
    v2 = build_exclusion_list(corpus, evals, "v2")
    assert v2.ids == ("a", "b", "c", "d")
    assert v2.hits_text("Problem: Find   $x$.") and not v1.hits_text("Problem: Find $x$.")
    assert not v2.hits_text("Unrelated.")


def test_v2_unions_internal_duplicates():
    corpus = [("a", "Eval text."), ("b", "Problem: Other text."), ("c", "Other  text.")]
    # named id b is excluded outright; its internal duplicate c must follow under v2 only
    v1 = build_exclusion_list(corpus, ["Eval text."], "v1", extra_ids=["b"])
    v2 = build_exclusion_list(corpus, ["Eval text."], "v2", extra_ids=["b"])
    assert v1.ids == ("a", "b")
    assert v2.ids == ("a", "b", "c")
    assert v2.reasons["c"] == "internal_duplicate"


def test_gate_cannot_be_switched_off():
    with pytest.raises(ValueError, match="cannot be switched off"):
        build_exclusion_list([("a", "x")], ["x"], "none")


def test_ngram_containment_both_directions():
    long_eval = "let a b c be positive reals such that a b c equals one prove the inequality holds for all of them"
    gate = NgramGate([long_eval], n=5, threshold=0.35)
    # a short training text fully contained in the long evaluation text: containment(text, eval) = 1
    short = "let a b c be positive reals such that"
    assert gate.max_containment(short)[0] == pytest.approx(1.0)
    assert gate.flags(short)
    # a long training text that restates the evaluation text inside much other text:
    # containment(text, eval) is small, containment(eval, text) = 1 -> caught only by the reverse direction
    restating = " ".join(["word%d" % i for i in range(200)]) + " " + long_eval
    grams_t = word_ngrams(restating, 5)
    grams_e = word_ngrams(long_eval, 5)
    forward = len(grams_t & grams_e) / len(grams_t)
    assert forward < 0.35
    assert gate.flags(restating)
    assert not gate.flags("completely different words about geometry and circles and triangles in a plane")
    with pytest.raises(ValueError):
        NgramGate([], n=5, threshold=1.5)


class _OneHot:
    """Encodes a text as the one-hot vector of its first word in a fixed vocabulary."""

    vocab = ["alpha", "beta", "gamma", "delta"]

    def encode(self, texts):
        import numpy as np

        out = np.zeros((len(texts), len(self.vocab)), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i, self.vocab.index(t.split()[0])] = 1.0
        return out


def test_cosine_gate_drops_rows_and_negatives():
    from recipematch.gates import CosineGate

    enc = _OneHot()
    gate = CosineGate(enc.encode(["alpha eval query"]), enc, threshold=0.9)
    assert gate.max_cosine(["alpha x", "beta y"]).tolist() == [1.0, 0.0]
    rows = [{"source_id": "s1", "anchor": "beta a", "positive": "gamma p", "negatives": [{"text": "alpha n"}, {"text": "delta n"}]},
            {"source_id": "s2", "anchor": "beta a", "positive": "alpha p", "negatives": []}]
    kept, dropped = gate.filter_rows(rows)
    assert [r["source_id"] for r in kept] == ["s1"] and [n["text"] for n in kept[0]["negatives"]] == ["delta n"]
    assert sorted((d["source_id"], d["what"]) for d in dropped) == [("s1", "negative"), ("s2", "row")]
    with pytest.raises(ValueError):
        CosineGate(enc.encode(["alpha"]), enc, threshold=1.5)
