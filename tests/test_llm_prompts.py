"""recipematch.llm.prompts: verbatim loading, byte-exact rendering, template identity."""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

import pytest

from recipematch.llm.prompts import (
    SHIPPED_FILE_SHA256,
    SPLIT_NEAR_MISSES_NAME,
    SPLIT_POSITIVES_NAME,
    available_prompts,
    load_prompt,
    split_d1_prompt,
    verify_shipped_prompts,
)

PKG_PROMPTS = resources.files("recipematch").joinpath("prompts")
# the project's original copies, when a checkout has them (a ``shared/`` folder beside the repo
# or inside it); without them the recorded SHA-256 in the package are the reference
SHARED_PROMPTS = next((p for p in (Path(__file__).resolve().parents[1] / "shared" / "prompts",
                                   Path(__file__).resolve().parents[2] / "shared" / "prompts") if p.is_dir()),
                      Path("shared/prompts"))
ARM_PROMPTS = ["d1_recipe", "d2_paraphrase", "d3_style", "d4_restatement", "d5_survey", "unrelated_negatives", "judge"]
# a problem text that would break if it went through str.format a second time
TRICKY = "Find all $f$ with $f^{2}(x) = {n_pos}$ and {{y}} \\frac{a}{b}; caf\u00e9 \u2014 \u6570\u5b66\n  end "


def file_bytes(name: str) -> bytes:
    return PKG_PROMPTS.joinpath(name).read_bytes()


@pytest.mark.parametrize("name", ARM_PROMPTS)
def test_sha256_is_system_nul_user_bytes(name: str) -> None:
    t = load_prompt(name)
    sysb, userb = file_bytes(f"{name}.system.txt"), file_bytes(f"{name}.user.txt")
    assert t.sha256 == hashlib.sha256(sysb + b"\x00" + userb).hexdigest()
    assert t.system_sha256 == hashlib.sha256(sysb).hexdigest()
    assert t.user_sha256 == hashlib.sha256(userb).hexdigest()
    assert t.system.encode("utf-8") == sysb and t.user.encode("utf-8") == userb


def test_pinned_template_hashes() -> None:
    # guards the package copies against any edit (the prompts are experimental inputs)
    assert load_prompt("d1_recipe").sha256.startswith("567223324562")
    assert load_prompt("d4_restatement").sha256.startswith("79b332cfccb2")
    assert load_prompt("judge").sha256.startswith("6bc502157046")


def test_package_prompt_files_match_their_recorded_sha256() -> None:
    """Every shipped prompt file is byte for byte the Appendix-F text whose SHA-256 the
    package records (works without the project's shared folder)."""
    assert verify_shipped_prompts() == {}
    for name, digest in SHIPPED_FILE_SHA256.items():
        assert hashlib.sha256(file_bytes(name)).hexdigest() == digest
    assert {f"{n}.{p}.txt" for n in ARM_PROMPTS for p in ("system", "user")} <= SHIPPED_FILE_SHA256.keys()


def test_verify_shipped_prompts_detects_an_edit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import recipematch.llm.prompts as pm

    for f in PKG_PROMPTS.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "judge.system.txt").write_bytes(file_bytes("judge.system.txt") + b" ")
    (tmp_path / "d9_extra.system.txt").write_bytes(b"x")
    (tmp_path / "d5_survey.user.txt").unlink()
    monkeypatch.setattr(pm, "_prompt_dir", lambda: tmp_path)
    problems = verify_shipped_prompts()
    assert set(problems) == {"judge.system.txt", "d9_extra.system.txt", "d5_survey.user.txt"}
    assert "differs" in problems["judge.system.txt"] and problems["d5_survey.user.txt"] == "missing"


@pytest.mark.parametrize("name", sorted(SHIPPED_FILE_SHA256))
def test_recorded_sha256_equal_the_shared_originals_when_present(name: str) -> None:
    if not SHARED_PROMPTS.is_dir():
        pytest.skip("the project's shared prompts folder is absent; the recorded SHA-256 are checked above")
    assert hashlib.sha256((SHARED_PROMPTS / name).read_bytes()).hexdigest() == SHIPPED_FILE_SHA256[name]


@pytest.mark.parametrize("name", ["d1_recipe", "d2_paraphrase", "d3_style", "unrelated_negatives"])
def test_render_with_near_misses_is_byte_exact(name: str) -> None:
    t = load_prompt(name)
    system, user = t.render(n_pos=1, n_neg=3, problem=TRICKY)
    sys_file = file_bytes(f"{name}.system.txt").decode("utf-8")
    expected_sys = sys_file.replace("{n_pos}", "1").replace("{n_neg}", "3").replace("{{", "{").replace("}}", "}")
    assert system.encode("utf-8") == expected_sys.encode("utf-8")
    user_file = file_bytes(f"{name}.user.txt").decode("utf-8")
    assert user.encode("utf-8") == user_file.replace("{problem}", TRICKY).encode("utf-8")
    assert user.endswith(TRICKY + "\n")  # the file's own final newline, nothing stripped or added
    assert "{{" not in system and '"original_problem"' in system


@pytest.mark.parametrize("name", ["d4_restatement", "d5_survey"])
def test_render_positives_only_prompts(name: str) -> None:
    t = load_prompt(name)
    assert t.slots == {"n_pos", "problem"}
    system, user = t.render(n_pos=1, problem=TRICKY)
    assert "Exactly 1 restatement(s)." in system
    assert system.count("{") == 2 and system.count("}") == 2  # the schema's two literal braces per object
    with pytest.raises(ValueError, match="unknown"):
        t.render(n_pos=1, n_neg=0, problem="x")


def test_judge_system_prompt_is_never_formatted() -> None:
    t = load_prompt("judge")
    assert t.system_slots is None and t.user_slots == {"anchor", "candidate"}
    system, user = t.render(anchor=TRICKY, candidate="B {anchor}")
    assert system.encode("utf-8") == file_bytes("judge.system.txt")
    assert '{"verdict": "equivalent" | "not_equivalent", "confidence": 0.0-1.0' in system
    with pytest.raises((KeyError, ValueError, IndexError)):
        t.system.format()  # why it must never go through str.format
    assert user == f"Problem A:\n{TRICKY}\nProblem B:\nB {{anchor}}\n"


def test_meld_screen_literal_system() -> None:
    t = load_prompt("meld_screen")
    assert t.system_slots is None
    assert t.render(framing_1="a", framing_2="b", statement_1="c", statement_2="d")[0] == t.system


def test_render_rejects_missing_and_unknown_slots() -> None:
    t = load_prompt("d1_recipe")
    with pytest.raises(ValueError, match="missing \\['n_neg'\\]"):
        t.render(n_pos=1, problem="x")
    with pytest.raises(ValueError, match="unknown \\['anchor'\\]"):
        t.render(n_pos=1, n_neg=3, problem="x", anchor="y")


def test_unknown_prompt() -> None:
    with pytest.raises(KeyError, match="unknown prompt 'd9'"):
        load_prompt("d9")


def test_available_prompts() -> None:
    names = available_prompts()
    assert set(ARM_PROMPTS) <= set(names)
    assert SPLIT_POSITIVES_NAME in names and "meld_generate" not in names  # it has no single user file
    for n in names:
        load_prompt(n)  # every one parses


def test_split_d1_keeps_lines_verbatim_and_drops_one_step() -> None:
    d1 = load_prompt("d1_recipe")
    pos, neg = split_d1_prompt(d1)
    assert load_prompt(SPLIT_POSITIVES_NAME) == pos and load_prompt(SPLIT_NEAR_MISSES_NAME) == neg
    d1_lines = d1.system.splitlines()
    for t, dropped, kept in ((pos, "## Step 2", "## Step 1"), (neg, "## Step 1", "## Step 2")):
        lines = t.system.splitlines()
        it = iter(d1_lines)
        assert all(ln in it for ln in lines)  # a subsequence: every surviving line is D1's, in order
        assert not any(ln.startswith(dropped) for ln in lines)
        assert any(ln.startswith(kept) for ln in lines)
        assert t.user == d1.user and t.derived_from == d1.sha256 and t.sha256 != d1.sha256
    # D1: line 1 persona, lines 2-24 Step 1 (23 lines), lines 25-32 Step 2 (8 lines), then Step 3
    assert len(pos.system.splitlines()) == len(d1_lines) - 8
    assert len(neg.system.splitlines()) == len(d1_lines) - 23
    system, _ = pos.render(n_pos=1, n_neg=0, problem="x")
    assert "Exactly 1 equivalent and 0 near-miss variants." in system
    assert "Near-Miss" not in system
    system, _ = neg.render(n_pos=0, n_neg=3, problem="x")
    assert "Exactly 0 equivalent and 3 near-miss variants." in system
    assert "Transformation Ideas" not in system


def test_split_refuses_other_prompts() -> None:
    with pytest.raises(ValueError, match="Step 1"):
        split_d1_prompt(load_prompt("d2_paraphrase"))
