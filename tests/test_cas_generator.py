"""generate_for_problem on small hand-written problems (tests/fixtures/cas/problems.jsonl).

Checks provenance, determinism, the three families' verifications, the exact validity of
every stored counterexample, bad input, and that a Python payload is never evaluated.
"""

from __future__ import annotations

import builtins
import json
import random
import re
from fractions import Fraction
from pathlib import Path

import pytest
import sympy as sp

from recipematch.cas import GENERATOR_VERSION, generate_for_problem
from recipematch.cas.grammar import DEGREE, function_letters, parse_segment
from recipematch.cas.equivalence import check_equivalent
from recipematch.cas.relations import Rel
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


# --------------------------------------------------------------------------- issue 13: comma lists

_REL_OP = re.compile(r"=|<|>|\\leq?|\\geq?|\\leqslant|\\geqslant|\\neq|\\ge\b|\\le\b")
_BARE_ITEM = re.compile(r"\s*(?:[A-Za-z](?:_\{?[0-9A-Za-z]+\}?)?'*|\d+)\s*")
_ELLIPSIS_ITEM = re.compile(r"\s*(?:\\[lcvd]?dots[a-z]*|\\cdots|\.\.\.|…)\s*")


def _top_items(content: str) -> list[str]:
    """A span's content split at commas outside braces, brackets and parentheses."""
    items, depth, cur = [], 0, ""
    prev = ""
    for ch in content:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0 and prev != "\\":  # not the thin space \,
            items.append(cur)
            cur = ""
        else:
            cur += ch
        prev = ch
    items.append(cur)
    return items


_WORDS_BETWEEN = re.compile(r"\\(?:text|mbox|textrm|mathrm)\s*\{[^{}]*\}|\\q?quad\b")


def _list_side(item: str, side: int) -> str:
    """The part of an item that touches its list neighbour: after the last word command
    (``\\text{ for }``, ``\\quad``) for a neighbour on the right, before the first one
    for a neighbour on the left (``x = 1 \\text{ for } k = 1, 2, 3``: only ``k = 1``
    binds the list)."""
    parts = _WORDS_BETWEEN.split(item)
    return parts[-1] if side > 0 else parts[0]


def comma_list_rewrites(source: str, new: str) -> list[str]:
    """Spans of ``source`` that hold a relation over a comma list (a bare item, then a
    comma, then an item with a relation operator, or the reverse: ``a, b, c > 0``,
    ``x = 2, 3``) and whose relation item ``new`` changed. Independent of the
    generator's own rule (a plain text scan)."""
    out = []
    sa, sb = find_spans(source), find_spans(new)
    if len(sa) != len(sb):
        return out
    for x, y in zip(sa, sb):
        ca, cb = x.content(source), y.content(new)
        if ca == cb:
            continue
        ia, ib = _top_items(ca), _top_items(cb)
        for k, item in enumerate(ia):
            if not _REL_OP.search(item):
                continue
            for step in (-1, 1):  # the nearest item on each side that is not an ellipsis
                j = k + step
                while 0 <= j < len(ia) and _ELLIPSIS_ITEM.fullmatch(ia[j]):
                    j += step
                if not (0 <= j < len(ia) and _BARE_ITEM.fullmatch(ia[j])):
                    continue
                part = _list_side(item, step)
                if not _REL_OP.search(part):
                    continue
                if len(ia) != len(ib) or _list_side(ib[k], step).strip() != part.strip():
                    out.append(ca)
                    break
    return out


def test_a_relation_over_a_comma_list_is_never_rewritten():
    text = ("For all real numbers $a, b, c > 0$ with $a + b + c = 3$, and integers $m, n \\ge 3$, "
            "prove that $ab + bc + ca \\leq 3$ and $m + n \\geq 6$.")
    out = generate_for_problem("list", text, seed=1)
    assert out["census"]["list_bound_relations"] == 2
    texts = [r["positive_text"] for r in out["rows"] if r["transform_family"] != "rename"]
    texts += [n["text"] for r in out["rows"] for n in r["negatives"]]
    assert texts, "the other relations still give rows"
    for t in texts:
        assert "$a, b, c > 0$" in t and "$m, n \\ge 3$" in t
        assert comma_list_rewrites(text, t) == []
    # the scan itself finds the rewrites the issue reported
    assert comma_list_rewrites("for all $a, b, c > 0$", "for all $a, b, 0 < c$")
    assert comma_list_rewrites("$m, n \\ge 3$", "$m, 2 n \\geq 6$")
    assert comma_list_rewrites("$m, n \\geqslant 0$", "$m, 0 \\leq n$")
    assert not comma_list_rewrites("$x = 1, y = 2$", "$x - 1 = 0, y = 2$")
    assert not comma_list_rewrites(r"$y = x \text{ for } k = 1, 2$", r"$y - x = 0 \text{ for } k = 1, 2$")
    assert comma_list_rewrites(r"$y = x \text{ for } k = 1, 2$", r"$y = x \text{ for } k - 1 = 0, 2$")
    assert not comma_list_rewrites(r"$N \ge 100\,000$", r"$100\,000 \le N$")
    assert not comma_list_rewrites(r"$a_1 = b_1, \dots, a_m = b_m$", r"$a_1 - b_1 = 0, \dots, a_m = b_m$")
    assert comma_list_rewrites(r"$a_1, \ldots, a_n > 0$", r"$a_1, \ldots, 0 < a_n$")


def test_a_problem_whose_only_relation_is_over_a_list_is_renamed_only():
    text = "Let $x, y, z > 0$. Find the minimum of $\\frac{x}{y} + \\frac{y}{z} + \\frac{z}{x}$."
    out = generate_for_problem("only-list", text, seed=3)
    assert out["census"]["list_bound_relations"] == 1 and out["census"]["tried_relations"] == 0
    assert {r["transform_family"] for r in out["rows"]} <= {"rename"}
    assert all(not r["negatives"] for r in out["rows"])
    for r in out["rows"]:
        assert re.search(r"\$[a-z], [a-z], [a-z] > 0\$", r["positive_text"])


def test_list_bound_relations_rule():
    from recipematch.cas.generator import census_of_problem, list_bound_relations

    for text, bound in [
        ("$a, b, c > 0$", ["c > 0"]),
        ("$a_1, a_2, \\ldots, a_n > 0$", ["a_n > 0"]),
        ("$x = 2, 3$", ["x = 2"]),
        ("$a$, $b$ and $c > 0$", ["c > 0"]),
        ("$x = 1, y = 2$", []),
        ("$x > 0$. Then $y$ is", []),
    ]:
        _, segs, _, _ = census_of_problem(text)
        got = sorted(text[segs[i].seg.start:segs[i].seg.end] for i in list_bound_relations(text, segs))
        assert got == bound, text


# --------------------------------------------------------------------------- issue 13: the whole sample

@pytest.fixture(scope="module")
def sample_output(tmp_path_factory):
    """The generator over the peer's 2,500-problem sample (data/peer_release/corpus.jsonl),
    two workers, run once for the module."""
    from conftest import require_real_data

    from recipematch.cas import run_generator

    corpus = require_real_data(Path(__file__).resolve().parents[1] / "data" / "peer_release" / "corpus.jsonl")
    rows = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = {r["_id"]: r["text"] for r in rows}
    out = tmp_path_factory.mktemp("cas_sample") / "pairs.jsonl"
    summary = run_generator(list(texts.items()), out_path=out, seed=42, timeout_s=30.0, memory_mb=2048,
                            workers=2, progress=False)
    recs = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return texts, recs, summary


def test_sample_output_never_rewrites_a_comma_listed_relation(sample_output):
    texts, recs, summary = sample_output
    assert len(recs) == len(texts) == 2500
    assert summary["census"]["list_bound_relations"] > 0  # the sample has such relations
    bad = []
    for rec in recs:
        src = texts[rec["source_id"]]
        for row in rec["rows"]:
            if row["transform_family"] != "rename":
                bad += [(rec["source_id"], s) for s in comma_list_rewrites(src, row["positive_text"])]
            for n in row["negatives"]:
                bad += [(rec["source_id"], s) for s in comma_list_rewrites(src, n["text"])]
    assert bad == []


def _changed_by_offsets(orig: str, new: str) -> tuple[str, str]:
    """The one segment that differs, compared position by position (a segment text may
    occur twice in a problem), with the text around it unchanged."""
    def segs(text):
        return [(s.start, s.end) for span in find_spans(text) for s in split_segments(text, span)]
    a, b = segs(orig), segs(new)
    assert len(a) == len(b)
    diff = [(x, y) for x, y in zip(a, b) if orig[x[0]:x[1]] != new[y[0]:y[1]]]
    assert len(diff) == 1, diff
    (s0, e0), (s1, e1) = diff[0]
    assert orig[:s0] == new[:s1] and orig[e0:] == new[e1:]
    return orig[s0:e0], new[s1:e1]


def test_sample_counterexamples_all_pass_a_50_digit_recheck(sample_output):
    """Every stored counterexample, re-checked exactly or at 50 digits on the relation
    pair re-parsed from the texts."""
    from recipematch.cas.grammar import declared_notation, try_parse
    from recipematch.cas.counterexamples import recheck_counterexample

    texts, recs, _ = sample_output
    checked = failed = 0
    failures = []
    for rec in recs:
        src = texts[rec["source_id"]]
        fl = function_letters([s.content(src) for s in find_spans(src)])
        notation = declared_notation(src)
        directed = "directed_segments" in notation
        seen = set()
        for row in rec["rows"]:
            for n in row["negatives"]:
                if n["text"] in seen:
                    continue
                seen.add(n["text"])
                a, b = _changed_by_offsets(src, n["text"])
                pa, _ = try_parse(a, functions=fl, notation=notation)
                pb, _ = try_parse(b, functions=fl, notation=notation)
                assert pa is not None and pb is not None, (rec["source_id"], a, b)
                ok = recheck_counterexample(Rel(pa.ops, pa.sides), Rel(pb.ops, pb.sides), n["counterexample"],
                                            flags=pa.flags, directed_segments=directed)
                checked += 1
                if not ok:
                    failed += 1
                    failures.append((rec["source_id"], a, b, n["counterexample"]["point"]))
    assert checked > 2000
    assert failures == []


def test_sample_problem_with_a_pole_at_a_simple_value_does_not_crash():
    """Regression: in source 016x a simple rational made a solve's polynomial have a
    ``zoo`` coefficient and SymPy's ``DomainError`` escaped as a crash."""
    from conftest import require_real_data

    corpus = require_real_data(Path(__file__).resolve().parents[1] / "data" / "peer_release" / "corpus.jsonl")
    text = next(r["text"] for r in map(json.loads, corpus.read_text(encoding="utf-8").splitlines())
                if r["_id"] == "016x")
    out = generate_for_problem("016x", text, seed=42)
    assert out["status"] == "ok"
    assert out["census"]["relation_errors"] == {}
