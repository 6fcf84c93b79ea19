"""generate_for_problem on small hand-written problems (tests/fixtures/cas/problems.jsonl).

Checks provenance, determinism, the three families' verifications, the exact validity of
every stored counterexample, bad input, and that a Python payload is never evaluated.
"""

from __future__ import annotations

import builtins
import json
import random
from fractions import Fraction
from pathlib import Path

import pytest
import sympy as sp

from recipematch.cas import GENERATOR_VERSION, generate_for_problem
from recipematch.cas.grammar import DEGREE, function_letters, parse_segment
from recipematch.cas.numeric import Rel, check_equivalent
from recipematch.cas.spans import find_spans, split_segments

FIXTURES = Path(__file__).parent / "fixtures" / "cas" / "problems.jsonl"
PROBLEMS = {r["_id"]: r["text"] for r in map(json.loads, FIXTURES.read_text(encoding="utf-8").splitlines())}


@pytest.fixture(scope="module")
def outputs() -> dict[str, dict]:
    return {pid: generate_for_problem(pid, text, seed=7) for pid, text in PROBLEMS.items()}


def _segments(text: str) -> list[str]:
    out = []
    for span in find_spans(text):
        out += [text[s.start:s.end] for s in split_segments(text, span)]
    return out


def _changed(orig: str, new: str) -> tuple[str, str]:
    """The one segment that differs between a problem and its edited copy."""
    a, b = _segments(orig), _segments(new)
    assert len(a) == len(b)
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    assert len(diff) == 1, diff
    # the text outside the segment is unchanged
    assert orig.replace(diff[0][0], "", 1) == new.replace(diff[0][1], "", 1)
    return diff[0]


def _exact(s: str) -> sp.Expr:
    if s == "E":
        return sp.E
    if "/" in s:
        p, q = s.split("/")
        return sp.Rational(int(p), int(q))
    return sp.Rational(Fraction(s))


def _holds(rel_obj: sp.Basic, point: dict, approx: bool) -> bool:
    rel_obj = rel_obj.xreplace({DEGREE: sp.pi / 180})
    if approx:
        subs = {s: (sp.E if point[s.name] == "E" else sp.Float(point[s.name], 30)) for s in rel_obj.free_symbols}
        links = rel_obj.args if isinstance(rel_obj, sp.And) else [rel_obj]
        ok = True
        for link in links:
            diff = sp.N((link.lhs - link.rhs).subs(subs), 30)
            if isinstance(link, sp.Eq):
                ok &= abs(diff) < 1e-9
            else:
                ok &= bool(link.func(diff, 0).subs({}))
        return ok
    val = rel_obj.subs({s: _exact(point[s.name]) for s in rel_obj.free_symbols})
    assert val in (sp.true, sp.false)
    return bool(val)


def test_statuses_and_reasons(outputs):
    assert outputs["fx-ineq-es"]["status"] == "ok"
    assert outputs["fx-quad-ru"]["status"] == "ok"
    assert outputs["fx-count-de"]["status"] == "no_relation" and outputs["fx-count-de"]["reason"]
    assert outputs["fx-empty"] == {**outputs["fx-empty"], "status": "no_relation", "reason": "empty text", "rows": []}
    bad = outputs["fx-malformed"]
    assert bad["status"] == "no_relation" and "rejected" in bad["reason"]
    for out in outputs.values():
        assert out["generator_version"] == GENERATOR_VERSION
        json.dumps(out)  # JSON-serialisable


def test_row_shape_and_families(outputs):
    fams = set()
    for pid, out in outputs.items():
        for row in out["rows"]:
            assert set(row) >= {"positive_text", "transform_family", "positive_transforms", "verification", "negatives"}
            assert row["transform_family"] in ("rename", "reformulate", "mirror")
            assert row["positive_text"] != PROBLEMS[pid]
            assert row["positive_transforms"]
            fams.add(row["transform_family"])
            for neg in row["negatives"]:
                assert set(neg) == {"text", "edit", "counterexample"}
                assert set(neg["counterexample"]) >= {"point", "orig", "edited", "method"}
    assert fams == {"rename", "reformulate", "mirror"}


def test_rename_rows_change_only_math_letters(outputs):
    for pid, out in outputs.items():
        for row in out["rows"]:
            if row["transform_family"] != "rename":
                continue
            orig, new = PROBLEMS[pid], row["positive_text"]
            mapping = dict(t.split(":")[1].split("->") for t in row["positive_transforms"])
            assert 1 <= len(mapping) <= 2
            assert row["verification"]["method"] == "parse_back_structural_equality"
            spans = find_spans(orig)
            # prose untouched, math renamed letter by letter
            last = 0
            for s in spans:
                assert orig[last:s.inner_start] == new[last:s.inner_start]
                last = s.inner_end
            assert orig[last:] == new[last:]
            for old, repl in mapping.items():
                assert old not in "aAIieoOl" and repl not in "aAIieoOl"


def test_reformulate_and_mirror_rows_are_equivalent(outputs):
    checked = 0
    for pid, out in outputs.items():
        fl = function_letters([s.content(PROBLEMS[pid]) for s in find_spans(PROBLEMS[pid])])
        for row in out["rows"]:
            fam = row["transform_family"]
            if fam == "rename":
                continue
            before, after = _changed(PROBLEMS[pid], row["positive_text"])
            pa, pb = parse_segment(before, functions=fl), parse_segment(after, functions=fl)
            ver = check_equivalent(Rel(pa.ops, pa.sides), Rel(pb.ops, pb.sides), rng=random.Random(1))
            assert ver["verdict"] == "equivalent"
            assert row["verification"]["n_samples"] >= 20
            assert row["verification"]["reparse"] == "exact"
            if fam == "mirror":
                assert pb.ops == tuple({"<": ">", ">": "<", "<=": ">=", ">=": "<="}[o] for o in reversed(pa.ops))
                assert pb.sides == tuple(reversed(pa.sides))
            elif len(pa.ops) == 1 and pa.obj.free_symbols and not pa.obj.atoms(sp.core.function.AppliedUndef):
                # exact identity: g_new - k * g_old == 0
                k = sp.Rational(Fraction(row["verification"]["k"]))
                g_old = pa.sides[0] - pa.sides[1]
                g_new = pb.sides[0] - pb.sides[1]
                assert sp.simplify(g_new - k * g_old) == 0
            checked += 1
    assert checked >= 5


def test_every_counterexample_is_exactly_valid(outputs):
    checked = 0
    for pid, out in outputs.items():
        fl = function_letters([s.content(PROBLEMS[pid]) for s in find_spans(PROBLEMS[pid])])
        seen = set()
        for row in out["rows"]:
            for neg in row["negatives"]:
                if neg["text"] in seen:
                    continue
                seen.add(neg["text"])
                before, after = _changed(PROBLEMS[pid], neg["text"])
                pa, pb = parse_segment(before, functions=fl), parse_segment(after, functions=fl)
                cx = neg["counterexample"]
                if pa.obj.atoms(sp.core.function.AppliedUndef):
                    # function values are part of the point: substitute them as unknowns
                    atoms = {f: sp.Symbol(sp.sstr(f)) for f in pa.obj.atoms(sp.core.function.AppliedUndef)
                             | pb.obj.atoms(sp.core.function.AppliedUndef)}
                    oa, ob = pa.obj.xreplace(atoms), pb.obj.xreplace(atoms)
                else:
                    oa, ob = pa.obj, pb.obj
                approx = any(len(v.split(".")[-1]) > 2 and "/" not in v for v in cx["point"].values())
                assert _holds(oa, cx["point"], approx) == cx["orig"]["holds"], (pid, neg["edit"], cx)
                assert _holds(ob, cx["point"], approx) == cx["edited"]["holds"], (pid, neg["edit"], cx)
                assert cx["orig"]["holds"] != cx["edited"]["holds"]
                checked += 1
    assert checked >= 8


def test_domain_is_respected_in_counterexamples(outputs):
    for row in outputs["fx-ineq-es"]["rows"]:
        for neg in row["negatives"]:
            assert all(_exact(v) > 0 for v in neg["counterexample"]["point"].values() if v != "E")


def test_negative_edit_labels(outputs):
    labels = {n["edit"].split(":")[0] for out in outputs.values() for row in out["rows"] for n in row["negatives"]}
    assert labels <= {"constant", "exponent", "opswap", "ineq_flip_no_swap"}
    assert len(labels) >= 3


def test_attachment_rule(outputs):
    out = outputs["fx-ineq-es"]
    distinct = out["census"]["distinct_negatives"]
    for r, row in enumerate(out["rows"]):
        assert len(row["negatives"]) == min(3, distinct)
    if distinct <= 3:
        texts = [tuple(n["text"] for n in row["negatives"]) for row in out["rows"]]
        assert len(set(texts)) == 1


def test_rename_leaves_letters_named_in_the_prose():
    text = "Sea B el punto medio y sea $ABCD$ un cuadrado con $AB + x = 2y$."
    for seed in range(5):
        out = generate_for_problem("prose", text, seed=seed)
        for row in out["rows"]:
            if row["transform_family"] == "rename":
                mapping = dict(t.split(":")[1].split("->") for t in row["positive_transforms"])
                assert "B" not in mapping and "y" not in mapping  # "B" and "y" stand alone in the prose
                assert not set(mapping.values()) & {"B", "y"}


def test_non_numeric_relations_are_rename_only():
    text = r"Prove that $\sum_{k=1}^{n} k^2 x_k \geq n$ and $a \mid b^2 + c$."
    out = generate_for_problem("sum", text, seed=3)
    assert {row["transform_family"] for row in out["rows"]} <= {"rename"}
    assert all(not row["negatives"] for row in out["rows"])


def test_deterministic_and_seeded():
    text = PROBLEMS["fx-ineq-es"]
    a = generate_for_problem("s1", text, seed=7)
    b = generate_for_problem("s1", text, seed=7)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    c = generate_for_problem("s2", text, seed=7)
    d = generate_for_problem("s1", text, seed=8)
    assert {json.dumps(c["rows"], sort_keys=True), json.dumps(d["rows"], sort_keys=True)} != {json.dumps(a["rows"], sort_keys=True)}


def test_census_counts(outputs):
    c = outputs["fx-malformed"]["census"]
    assert c["spans"] == 3 and c["parsed_after"] == 0
    c = outputs["fx-chain-fr"]["census"]
    assert c["spans"] == 3 and c["parsed_after"] == 3 and c["relations"] == 2
    # "x" and "x^2 \geq \frac{1}{4}" are canonical; the chain needs the normaliser
    assert c["parsed_before"] == 2
    assert len(c["expressions"]) == 3


def test_python_payload_never_evaluated(monkeypatch, tmp_path):
    marker = tmp_path / "pwned"
    text = (f"Let $__import__('os').system('touch {marker}') = 1$, "
            f"$x = \\text{{__import__('os').system('touch {marker}')}}$ and $x + 1 = 2$.")
    calls = []
    real_eval, real_exec = builtins.eval, builtins.exec

    def spy_eval(src, *a, **k):
        calls.append(src)
        return real_eval(src, *a, **k)

    def spy_exec(src, *a, **k):
        calls.append(src)
        return real_exec(src, *a, **k)

    monkeypatch.setattr(builtins, "eval", spy_eval)
    monkeypatch.setattr(builtins, "exec", spy_exec)
    out = generate_for_problem("payload", text, seed=1)
    assert not marker.exists()
    assert not any("__import__" in str(c) or "system" in str(c) for c in calls)
    assert out["census"]["rejections"]  # the payload spans are rejected with reasons
    # the harmless relation still works
    assert out["status"] == "ok"
