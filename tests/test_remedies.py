"""The remedies of paper Appendix E (Table 19): inverse-cloze replay rows, the remedies
params, and Table 19 / the mixing frontier rendered from a stats file."""

import json

import pytest

from recipematch.config import load_yaml, parse_params
from recipematch.errors import RecipematchError
from recipematch.replay import inverse_cloze_rows, sentences
from recipematch.report_appendix import frontier_png, frontier_rows, remedies_markdown
from recipematch.rules import mix_label, remedy_labels, soup_label


def test_sentences_never_cut_inside_math_and_cut_at_blank_lines():
    text = "Let $x = 1.5$ and $$y = 2. z$$ be given. Find x! Why?\n\nProve it. ok"
    assert sentences(text) == ["Let $x = 1.5$ and $$y = 2. z$$ be given.", "Find x!", "Why?", "Prove it.", "ok"]
    assert sentences("Sea \\(a. b\\) real. Halla $a$.") == ["Sea \\(a. b\\) real.", "Halla $a$."]
    assert sentences("   ") == [] and sentences("one sentence only") == ["one sentence only"]
    with pytest.raises(RecipematchError, match="expected a string"):
        sentences(None)


def test_inverse_cloze_rows_hold_out_one_long_sentence_deterministically():
    corpus = [{"doc_id": "a", "text": "Short. A long enough sentence about $x$ here. Another long sentence follows here."},
              {"doc_id": "b", "text": "Only one sentence with $a.b$ inside"},
              {"doc_id": "c", "text": "Tiny. Also tiny."},
              {"doc_id": "d", "text": "First sentence that is long enough. Second sentence that is long enough."}]
    rows, counts = inverse_cloze_rows(corpus, seed=3, min_chars=20)
    assert counts == {"problems": 4, "rows": 2, "skipped.one_sentence": 1, "skipped.no_anchor": 1}
    assert [r["source_id"] for r in rows] == ["a", "d"]
    a = rows[0]
    assert a["anchor"] in ("A long enough sentence about $x$ here.", "Another long sentence follows here.")
    assert a["anchor"] not in a["positive"] and a["positive"].startswith("Short.")
    assert a["negatives"] == [] and a["replay_kind"] == "inverse_cloze"
    # the same seed gives the same rows; a row's draw does not depend on the rows before it
    assert inverse_cloze_rows(corpus, seed=3, min_chars=20)[0] == rows
    assert inverse_cloze_rows([corpus[0]], seed=3)[0][0]["anchor"] == a["anchor"]
    anchors = {inverse_cloze_rows([corpus[0]], seed=s)[0][0]["anchor"] for s in range(20)}
    assert len(anchors) == 2  # the seed really draws among the candidates


@pytest.mark.parametrize("row", [{"text": "x. y."}, {"doc_id": "", "text": "x"}, {"doc_id": "a", "text": None}])
def test_inverse_cloze_rows_refuse_a_row_without_id_or_text(row):
    with pytest.raises(RecipematchError, match=r"corpus row 0: needs a doc_id and a text string"):
        inverse_cloze_rows([row], seed=0)


def test_labels():
    assert soup_label("recipe", "0.3") == "recipe@soup0.3" and mix_label("recipe", "0.2") == "recipe@mix0.2"
    assert remedy_labels(["a", "b"], [0.5], [0.2]) == ["a@soup0.5", "b@soup0.5", "a@mix0.2", "b@mix0.2"]


def _params(repo_root, **remedies):
    raw = load_yaml(repo_root / "params.yaml")
    raw["remedies"] = {**raw["remedies"], **remedies}
    return raw


def test_default_remedies_the_recipe_arm(repo_root):
    r = parse_params(load_yaml(repo_root / "params.yaml")).remedies
    assert r.arms == ("recipe",) and r.soup_alphas == (0.3, 0.7) and r.replay_fractions == (0.2, 0.4)
    assert r.replay_file == "artifacts/replay/ict.jsonl"


@pytest.mark.parametrize("over, message", [
    ({"arms": ["reference"]}, "remedies.arms ['reference'] are not in arms"),
    ({"arms": ["recipe", "recipe"]}, "remedies.arms lists a value twice"),
    ({"soup_alphas": [0.5, 0.5]}, "remedies.soup_alphas lists a value twice"),
    ({"soup_alphas": [1.5]}, "remedies.soup_alphas[0] must lie in"),
    ({"soup_alphas": [float("nan")]}, "remedies.soup_alphas[0]"),
    ({"replay_fractions": [0.0]}, "remedies.replay_fractions[0] must lie in"),
    ({"replay_fractions": [0.95]}, "remedies.replay_fractions[0] must lie in"),
    ({"replay_file": ""}, "remedies.replay_fractions needs remedies.replay_file"),
    ({"replay_file": "../outside.jsonl"}, "remedies.replay_file must be a path inside the project"),
    ({"replay_file": "/abs/replay.jsonl"}, "remedies.replay_file must be a path inside the project"),
    ({"soup_alphas": "0.5"}, "remedies.soup_alphas"),
    # the breaker: DVC passes these as written, and the soup and mix stages refuse them mid-run
    ({"soup_alphas": [1]}, "remedies.soup_alphas: write 1 as a decimal number such as 1.0"),
    ({"soup_alphas": ["0.50"]}, "remedies.soup_alphas: write '0.50' as a decimal number"),
    ({"replay_fractions": ["0.20"]}, "remedies.replay_fractions: write '0.20' as a decimal number"),
    ({"soup_alphas": [-0.0]}, "remedies.soup_alphas: write -0.0 as 0.0"),
])
def test_bad_remedies_are_one_line_naming_the_key(repo_root, over, message):
    with pytest.raises(RecipematchError, match=r".*" + __import__("re").escape(message)):
        parse_params(_params(repo_root, **over))


def test_an_old_params_file_with_train_soup_alphas_is_told_where_it_went(repo_root):
    raw = load_yaml(repo_root / "params.yaml")
    raw["train"]["soup_alphas"] = [0.5]
    with pytest.raises(RecipematchError, match=r"train\.soup_alphas is now remedies\.soup_alphas"):
        parse_params(raw)


def _stats():
    def cell(m):
        return {"mean": m, "sd": None}

    evals = {"tier": {"role": "benchmark", "label": "tier"}, "regen": {"role": "benchmark", "label": "regen",
                                                                       "version_of": "tier"},
             "real": {"role": "real", "label": "real"}}
    scores = {"base": (10, 30, 60), "recipe": (40, 20, 50), "recipe@soup0.5": (25, 27, 57),
              "recipe@mix0.2": (35, 24, 55)}
    arms = {a: {"tier.R@1": cell(t), "tier.R@5": cell(t + 10), "regen.R@1": cell(1), "regen.R@5": cell(2),
                "real.R@1": cell(r), "real.R@5": cell(r5)} for a, (t, r, r5) in scores.items()}
    forgetting = {f"{a}.real.R@1": {"estimate": 30 - scores[a][1], "low": 1.0, "high": 2.0}
                  for a in scores if a != "base"}
    return {"evaluations": evals, "arms": arms, "forgetting": forgetting,
            "remedies": {"recipe": {"soups": {"0.5": "recipe@soup0.5"}, "mixes": {"0.2": "recipe@mix0.2"}}}}


def test_table_19_rows_and_columns():
    text = remedies_markdown(_stats())
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    assert lines[0] == "| model | remedy | tier R@1/5 | real R@1 | lost vs base [95%] |"
    assert lines[1:] == ["| base | untrained base | 10.00 / 20.00 | 30.00 | — |",
                         "| recipe@soup0.5 | soup α = 0.5 | 25.00 / 35.00 | 27.00 | +3.00 [+1.00, +2.00] |",
                         "| recipe | the arm | 40.00 / 50.00 | 20.00 | +10.00 [+1.00, +2.00] |",
                         "| recipe@mix0.2 | replay 20% of rows | 35.00 / 45.00 | 24.00 | +6.00 [+1.00, +2.00] |"]
    assert "regen" not in text  # a regenerated version is Table 24's, not a column here
    assert remedies_markdown({**_stats(), "remedies": {}}) == ""


def test_frontier_points_and_plot(tmp_path):
    rows = frontier_rows(_stats())
    assert [(x["remedy"], x["model"], x["share"]) for x in rows] == [
        ("weight space", "base", 0.0), ("weight space", "recipe@soup0.5", 0.5), ("weight space", "recipe", 1.0),
        ("data space", "recipe", 1.0), ("data space", "recipe@mix0.2", 0.8)]
    assert rows[1]["retention"] == 27 and rows[1]["benchmark"] == 25 and rows[1]["benchmark_set"] == "tier"
    frontier_png(_stats(), tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    frontier_png({**_stats(), "remedies": {}}, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()
    # a soup listed but never scored is left out, not a KeyError
    st = _stats()
    st["remedies"]["recipe"]["soups"]["0.7"] = "recipe@soup0.7"
    assert "recipe@soup0.7" not in {x["model"] for x in frontier_rows(st)}
    json.dumps(rows)  # the DVC plot file is plain JSON


@pytest.mark.parametrize("text, message", [("0.50", "write it as 0.5"), ("1e0", "write it as 1.0"),
                                           ("1", "write it as 1.0"), ("abc", "is not a number"),
                                           ("nan", "not one of"), ("0.7", "not one of")])
def test_a_grid_value_has_one_spelling(text, message):
    """The soup and mix rows are named by the value's text: 0.50 and 0.5 would be two rows of
    one soup, and DVC writes a YAML 1 as '1' where the stats stage reads 1.0."""
    from recipematch.pipeline.mix import _fraction
    from recipematch.pipeline.soup import _alpha

    with pytest.raises(RecipematchError, match=message):
        _alpha(text, (0.5, 1.0))
    if text not in ("1e0", "1"):
        with pytest.raises(RecipematchError, match=message.replace("1.0", "0.5") if text == "0.50" else message):
            _fraction(text, (0.5,))
    assert _alpha("0.5", (0.5, 1.0)) == 0.5 and _fraction("0.5", (0.5,)) == 0.5
