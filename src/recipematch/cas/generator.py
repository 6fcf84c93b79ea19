"""The verified-pair generator for one problem (paper, Appendix A: the verified arm).

:func:`generate_for_problem` is pure and deterministic: its only randomness is a
``random.Random`` seeded from ``sha256(f"{seed}:{source_id}")`` (never Python's salted
``hash``), every set is iterated in sorted order, and nothing depends on time.

Per problem:

1. find the math spans (:mod:`recipematch.cas.spans`), split them into segments, and
   parse every segment raw and normalised (the census);
2. *qualifying relations*: equations, inequalities and chains with 1–6 unknowns and no
   ``≠`` (the peer's rule); the first :data:`MAX_RELATIONS` in text order are tried,
   except a relation over a comma list (:func:`list_bound_relations`: ``a, b, c > 0``,
   ``x = 2, 3``), which is never rewritten: rewriting only its last link (``a, b, 0 <
   c``) would make it bind fewer items, so no reformulation, mirror or negative comes
   from it (a rename, which substitutes letters in every span alike, may use it);
3. positives: at most one **rename** (up to 2 letters, the whole problem), at most
   :data:`MAX_REFORMULATE` **reformulate** (one per relation) and :data:`MAX_MIRROR`
   **mirror**;
4. negatives: minimal edits of the tried relations, each kept only with a
   counterexample over the problem's domains, at most :data:`MAX_NEGATIVES` distinct
   per problem and :data:`MAX_NEGATIVE_TRIES` tried per relation;
5. rows: one per positive. Attachment rule: the problem's distinct negatives, in the
   order found, are dealt to the rows in turn, :data:`NEGATIVES_PER_ROW` per row
   (row ``r`` gets negatives ``(r·3 + j) mod N``, ``j < min(3, N)``), so with three or
   fewer negatives every row carries all of them, and one negative can be attached to
   several rows, as in the peer's release (1.53 attachments per record in the paper).

Relations whose reading is not numeric (ellipses, divisibility, ``\\gcd``, numeric facts)
are used for renames only.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

import sympy as sp
from mpmath.libmp.libhyper import NoConvergence

from recipematch.cas.counterexamples import find_counterexample
from recipematch.cas.domains import infer_domains
from recipematch.cas.equivalence import check_equivalent
from recipematch.cas.grammar import Parsed, declared_notation, function_letters, latex_letters, try_parse
from recipematch.cas.relations import Rel
from recipematch.cas.spans import Segment, Span, find_spans, split_segments
from recipematch.cas.transforms import (
    RENAME_SKIP,
    _has_big_power,
    mirror,
    negative_edits,
    print_and_reparse,
    reformulations,
    rename_latex,
    rename_symbol_map,
)

__all__ = [
    "GENERATOR_VERSION",
    "MAX_RELATIONS",
    "MAX_NEGATIVES",
    "NEGATIVES_PER_ROW",
    "generate_for_problem",
    "problem_rng",
    "census_of_problem",
    "list_bound_relations",
]

#: Bump whenever the output for some input would change.
GENERATOR_VERSION = "cas-1.3"
#: Peer: at most 8 spans tried per problem.
MAX_RELATIONS = 8
MAX_REFORMULATE = 2
MAX_MIRROR = 1
MAX_NEGATIVES = 6
MAX_NEGATIVE_TRIES = 6
NEGATIVES_PER_ROW = 3
#: Peer: relations with 1–6 free symbols.
MIN_UNKNOWNS, MAX_UNKNOWNS = 1, 6
_NON_NUMERIC_FLAGS = frozenset({"ellipsis", "integer_semantics", "opaque_function", "numeric", "uninterpreted",
                                "big_operator"})
_ELLIPSIS_ONLY = re.compile(r"^\s*(?:\\(?:l|c|v|d)?dots[a-z]*|\.\.\.|…|\\cdots)\s*$")
_FAMILY_ORDER = {"rename": 0, "reformulate": 1, "mirror": 2}
_PROSE_LETTER = re.compile(r"(?<![A-Za-z\\])([A-Za-z])(?![A-Za-z])")
#: Errors inside SymPy that end the work on one relation (recorded in the census), not
#: on the problem.
_RELATION_ERRORS = (ValueError, TypeError, AttributeError, RecursionError, NotImplementedError,
                    ZeroDivisionError, OverflowError, IndexError, KeyError, sp.polys.polyerrors.BasePolynomialError,
                    NoConvergence)


def problem_rng(seed: int, source_id: str) -> random.Random:
    """The problem's own generator: seeded from ``sha256(f"{seed}:{source_id}")``."""
    digest = hashlib.sha256(f"{seed}:{source_id}".encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


@dataclass
class _Seg:
    span_i: int
    seg_i: int
    seg: Segment
    parsed: Parsed | None
    reason: str | None


def _expr_key(s: str) -> str:
    return hashlib.sha256(s.encode("utf-8")).hexdigest()[:16]


def census_of_problem(text: str) -> tuple[list[Span], list[_Seg], frozenset[str], dict]:
    """Spans, parsed segments, function letters and the census of one problem.

    The census unit is a math span (its stripped LaTeX, unique across a corpus by
    ``key``): *parsed before* = the whole span parses without the normaliser;
    *parsed after* = every segment parses after normalisation (segments that are a bare
    ellipsis are list punctuation and skipped); *relation* = some segment parses as an
    equation, inequality, chain, divisibility, congruence or geometric predicate;
    *interpreted* = parsed after, with no uninterpreted part (geometric predicates, map
    declarations, problem-defined operations).

    Returns:
        ``(spans, segments, function_letters, census)`` where census is
        ``{"spans", "parsed_before", "parsed_after", "relations", "segments",
        "segments_parsed", "expressions": [[key, before, after, relation, interpreted], …],
        "rejections": {reason class: count}}``.
    """
    spans = find_spans(text)
    contents = [s.content(text) for s in spans]
    functions = function_letters(contents)
    notation = declared_notation(text)
    segs: list[_Seg] = []
    expressions = []
    rejections: dict[str, int] = {}
    n_before = n_after = n_rel = n_seg_parsed = 0
    for span_i, span in enumerate(spans):
        content = contents[span_i].strip()
        before, _ = try_parse(content, functions=functions, normalize=False, notation=notation)
        all_ok = True
        any_rel = False
        any_seg = False
        interpreted = True
        for seg_i, seg in enumerate(split_segments(text, span)):
            seg_text = text[seg.start:seg.end]
            if _ELLIPSIS_ONLY.match(seg_text):
                continue
            any_seg = True
            parsed, reason = try_parse(seg_text, functions=functions, notation=notation)
            segs.append(_Seg(span_i, seg_i, seg, parsed, reason))
            if parsed is None:
                all_ok = False
                cls = (reason or "").split(":")[0][:80]
                rejections[cls] = rejections.get(cls, 0) + 1
            else:
                n_seg_parsed += 1
                any_rel = any_rel or parsed.is_any_relation
                interpreted = interpreted and "uninterpreted" not in parsed.flags
        after = all_ok and any_seg
        n_before += before is not None
        n_after += after
        n_rel += any_rel
        expressions.append([_expr_key(content), before is not None, after, any_rel, after and interpreted])
    census = {"spans": len(spans), "parsed_before": n_before, "parsed_after": n_after,
              "relations": n_rel, "segments": len(segs), "segments_parsed": n_seg_parsed,
              "expressions": expressions, "rejections": dict(sorted(rejections.items()))}
    return spans, segs, functions, census


_MATH_DELIMS = re.compile(r"\$|\\[()\[\]]")
_GAP_ELLIPSIS = re.compile(r"\\(?:l|c|v|d)?dots[a-z]*|\\cdots|\.\.\.|…")
_CONJUNCTIONS = frozenset({"and", "y", "et", "und", "и", "e", "és", "i", "và", "ve", "oraz", "și", "or", "o", "ou",
                           "или", "a"})


def _list_gap(gap: str) -> bool:
    """Whether the text between two segments joins items of one list: a comma, with an
    optional ellipsis and conjunction (``, \\ldots,``, ``$, $``, ``$ and $``)."""
    g = _GAP_ELLIPSIS.sub(" ", _MATH_DELIMS.sub(" ", gap))
    comma = "," in g
    words = g.replace(",", " ").split()
    if not all(w.lower() in _CONJUNCTIONS for w in words):
        return False
    return comma or bool(words)


def list_bound_relations(text: str, segs: list) -> set[int]:
    """Positions (in ``segs``) of relations that bind a comma list: a relation or chain
    segment next to a bare item (a segment parsed as an expression: ``a`` in ``a, b, c >
    0``, ``3`` in ``x = 2, 3``) with only a comma, an ellipsis or a conjunction between
    them (within one span on either side; across spans only items before the relation:
    ``$a$, $b$, $c > 0$``). Such a relation constrains every item, so it is not rewritten.

    Args:
        text: the problem text.
        segs: the problem's segments in text order (each with ``span_i``, ``seg`` and
            ``parsed``, as built by :func:`census_of_problem`).
    """
    out: set[int] = set()
    for i, sg in enumerate(segs):
        p = sg.parsed
        if p is None or p.kind not in ("relation", "chain"):
            continue
        for j in (i - 1, i + 1):
            if not 0 <= j < len(segs):
                continue
            nb = segs[j]
            if nb.parsed is None or nb.parsed.kind != "expression":
                continue
            if j > i and nb.span_i != sg.span_i:
                continue
            a, b = (nb.seg.end, sg.seg.start) if j < i else (sg.seg.end, nb.seg.start)
            if _list_gap(text[a:b]):
                out.add(i)
                break
    return out


def _qualifies(p: Parsed | None) -> bool:
    if p is None or p.kind not in ("relation", "chain") or "!=" in p.ops:
        return False
    if not all(isinstance(s, sp.Expr) for s in p.sides):
        return False
    return MIN_UNKNOWNS <= len(p.unknowns) <= MAX_UNKNOWNS


def _numeric(p: Parsed) -> bool:
    return not (p.flags & _NON_NUMERIC_FLAGS)


def _splice(text: str, seg: Segment, new: str) -> str:
    return text[:seg.start] + new + text[seg.end:]


def _rename_positive(text: str, spans: list[Span], segs: list[_Seg], functions: frozenset[str],
                     tried: list[int], rng: random.Random) -> dict | None:
    contents = [s.content(text) for s in spans]
    used = set()
    for c in contents:
        used |= latex_letters(c)
    # a letter standing alone in the prose may name the same object outside math ("point
    # B", "la función f") or be a word ("y" in Spanish): never renamed, never a target
    prose = "".join(text[a:b] for a, b in zip([0] + [s.end for s in spans], [s.start for s in spans] + [len(text)]))
    prose_letters = set(_PROSE_LETTER.findall(prose))
    used |= prose_letters
    cands = sorted({ch for i in tried for ch in segs[i].parsed.letters} - RENAME_SKIP - functions - prose_letters)
    if not cands:
        return None
    chosen = sorted(rng.sample(cands, 2 if len(cands) >= 2 else 1))
    mapping: dict[str, str] = {}
    for ch in chosen:
        pool = "BCDEHJKLMNRSTUVWXYZ" if ch.isupper() else "bcdhjkmnpqrstuvwxyz"
        pool = [c for c in pool if c not in used and c not in mapping.values() and c not in functions]
        if pool:
            mapping[ch] = rng.choice(pool)
    if not mapping:
        return None
    pieces = []
    last = 0
    for s in spans:
        pieces.append(text[last:s.inner_start])
        pieces.append(rename_latex(text[s.inner_start:s.inner_end], mapping))
        last = s.inner_end
    pieces.append(text[last:])
    new_text = "".join(pieces)
    if new_text == text or len(new_text) != len(text):
        return None
    new_functions = function_letters([s.content(new_text) for s in spans])
    checked = 0
    changed_relation = False
    for sg in segs:
        if sg.parsed is None:
            continue
        reparsed, _ = try_parse(new_text[sg.seg.start:sg.seg.end], functions=new_functions,
                                notation=declared_notation(new_text))
        expected = sg.parsed.obj.xreplace(rename_symbol_map(sg.parsed, mapping))
        if reparsed is None or reparsed.obj != expected or reparsed.kind != sg.parsed.kind:
            return None
        checked += 1
        if _qualifies(sg.parsed) and expected != sg.parsed.obj:
            changed_relation = True
    if not changed_relation:
        return None
    return {
        "positive_text": new_text,
        "transform_family": "rename",
        "positive_transforms": [f"rename:{k}->{v}" for k, v in sorted(mapping.items())],
        "verification": {"method": "parse_back_structural_equality", "segments_checked": checked,
                         "n_samples": 0, "k": None, "max_dev": None, "reparse": "exact"},
    }


def _symbolic_zero(old: Rel, new: Rel, k: sp.Expr) -> bool | None:
    """``cancel(g_new − k·g_old) == 0`` for small single-link relations, else ``None``."""
    if len(old.ops) != 1 or len(new.ops) != 1:
        return None
    g_old = old.sides[0] - old.sides[1]
    g_new = new.sides[0] - new.sides[1]
    diff = g_new - k * g_old
    if sp.count_ops(diff) > 40 or _has_big_power(diff):
        return None
    try:
        return bool(sp.cancel(sp.expand(diff)) == 0)
    except (sp.PolynomialError, NotImplementedError, RecursionError, TypeError):
        return None


def generate_for_problem(source_id: str, text: str, *, seed: int) -> dict:
    """Verified positives and counterexampled negatives for one problem (paper, Appendix A: the verified arm).

    Args:
        source_id: the problem's id (seeds its generator with ``seed``).
        text: the problem statement, any language, LaTeX math in ``$…$`` etc.
        seed: the run's seed (params ``seed``).

    Returns:
        ``{"source_id", "status", "reason", "rows", "census", "generator_version"}``.
        ``status`` is ``"ok"`` (≥ 1 row), ``"no_relation"`` (no equation or inequality
        with 1–6 unknowns parsed; empty text too) or ``"no_pair"`` (relations, but no
        positive verified); ``reason`` says why when not ``ok``. Each row is
        ``{"positive_text", "transform_family": "rename"|"reformulate"|"mirror",
        "positive_transforms": [str], "verification": {...}, "negatives": [{"text",
        "edit", "counterexample": {"point", "orig", "edited", "method"}}]}``. The census
        is :func:`census_of_problem`'s plus ``"qualifying_relations"`` and
        ``"tried_relations"``. All values are JSON-serialisable.

    Raises:
        Nothing on bad input text (a reason is recorded); errors inside SymPy that escape
        the per-segment guards are left to the runner, which records them as ``crash``.
    """
    out = {"source_id": source_id, "status": "no_relation", "reason": None, "rows": [],
           "census": {"spans": 0, "parsed_before": 0, "parsed_after": 0, "relations": 0,
                      "segments": 0, "segments_parsed": 0, "expressions": [], "rejections": {},
                      "qualifying_relations": 0, "tried_relations": 0},
           "generator_version": GENERATOR_VERSION}
    if not isinstance(text, str) or not text.strip():
        out["reason"] = "empty text"
        return out
    rng = problem_rng(seed, source_id)
    spans, segs, functions, census = census_of_problem(text)
    qualifying = [i for i, sg in enumerate(segs) if _qualifies(sg.parsed)]
    bound = list_bound_relations(text, segs)
    renamable = qualifying[:MAX_RELATIONS]
    tried = [i for i in qualifying if i not in bound][:MAX_RELATIONS]
    notation = declared_notation(text)
    directed = "directed_segments" in notation
    census["qualifying_relations"] = len(qualifying)
    census["tried_relations"] = len(tried)
    census["list_bound_relations"] = len([i for i in qualifying if i in bound])
    census["counterexamples_discarded"] = 0
    out["census"] = census
    if not spans:
        out["reason"] = "no math span"
        return out
    if not renamable:
        top = sorted(census["rejections"].items(), key=lambda kv: (-kv[1], kv[0]))[:2]
        why = "; ".join(f"{k} ({v})" for k, v in top)
        out["reason"] = "no equation or inequality with 1-6 unknowns parsed" + (f"; rejected: {why}" if why else "")
        return out

    positives: list[dict] = []
    seg_triples = [(sg.span_i, sg.seg_i, sg.parsed, sg.seg.start, sg.seg.end) for sg in segs]
    # a rename substitutes letters in every span alike, so a relation over a comma list
    # keeps binding every item: renames may use it
    ren = _rename_positive(text, spans, segs, functions, renamable, rng)
    if ren is not None:
        positives.append(ren)

    order = list(tried)
    rng.shuffle(order)
    errors: dict[str, int] = {}
    for i in order:
        sg = segs[i]
        p = sg.parsed
        if not _numeric(p):
            continue
        try:
            _positives_of_relation(text, sg, p, functions, rng, positives,
                                   infer_domains(seg_triples, text, exclude=i), directed)
        except _RELATION_ERRORS as exc:
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1

    negatives: list[dict] = []
    neg_texts: set[str] = set()
    stats: dict = {}
    for i in tried:
        if len(negatives) >= MAX_NEGATIVES:
            break
        sg = segs[i]
        p = sg.parsed
        if not _numeric(p):
            continue
        try:
            _negatives_of_relation(text, sg, p, functions, rng, seg_triples, i, negatives, neg_texts,
                                   directed, stats)
        except _RELATION_ERRORS as exc:
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
    out["census"]["relation_errors"] = dict(sorted(errors.items()))
    out["census"]["counterexamples_discarded"] = int(stats.get("discarded", 0))
    _finish(out, positives, negatives, renamable)
    if out["status"] == "no_pair" and not tried:
        out["reason"] += " (each relation is over a comma list such as a, b, c > 0: renamed only)"
    return out


def _positives_of_relation(text: str, sg: _Seg, p: Parsed, functions: frozenset[str],
                           rng: random.Random, positives: list[dict], domains: dict, directed: bool) -> None:
    """Reformulate and mirror one relation; appends to ``positives`` (caps included).
    ``domains``: the problem's (each unknown sampled in its domain); ``directed``: the
    problem declares vectors or directed segments (two-point names keep their order)."""
    n_reform = sum(r["transform_family"] == "reformulate" for r in positives)
    n_mirror = sum(r["transform_family"] == "mirror" for r in positives)
    rel = Rel(p.ops, p.sides)
    if n_reform < MAX_REFORMULATE and len(p.ops) == 1:
        cands = reformulations(rel)
        rng.shuffle(cands)
        for name, new, k in cands:
            ver = check_equivalent(rel, new, rng=rng, domains=domains, directed_segments=directed)
            if ver["verdict"] != "equivalent":
                continue
            printed = print_and_reparse(new, functions)
            if printed is None:
                continue
            pos_text = _splice(text, sg.seg, printed)
            if pos_text == text:
                continue
            positives.append({
                "positive_text": pos_text, "transform_family": "reformulate",
                "positive_transforms": [name],
                "verification": {"method": ver["method"], "n_samples": ver["points_tested"],
                                 "k": ver["k"], "max_dev": ver["max_dev"],
                                 "symbolic_zero": _symbolic_zero(rel, new, k), "reparse": "exact"},
            })
            n_reform += 1
            break
    if n_mirror < MAX_MIRROR:
        new = mirror(rel)
        if new is not None:
            ver = check_equivalent(rel, new, rng=rng, domains=domains, directed_segments=directed)
            printed = print_and_reparse(new, functions) if ver["verdict"] == "equivalent" else None
            if printed is not None and _splice(text, sg.seg, printed) != text:
                positives.append({
                    "positive_text": _splice(text, sg.seg, printed), "transform_family": "mirror",
                    "positive_transforms": ["mirror:swap_sides_reverse_direction"],
                    "verification": {"method": ver["method"], "n_samples": ver["points_tested"],
                                     "k": ver["k"], "max_dev": ver["max_dev"],
                                     "symbolic_zero": _symbolic_zero(rel, new, sp.Integer(-1)),
                                     "reparse": "exact"},
                })
                n_mirror += 1


def _negatives_of_relation(text: str, sg: _Seg, p: Parsed, functions: frozenset[str], rng: random.Random,
                           seg_triples: list, i: int, negatives: list[dict], neg_texts: set[str],
                           directed: bool, stats: dict) -> None:
    """Counterexampled minimal edits of one relation; appends to ``negatives``. Refuting
    points that fail the re-check are counted in ``stats["discarded"]``."""
    rel = Rel(p.ops, p.sides)
    domains = infer_domains(seg_triples, text, exclude=i)
    cands = negative_edits(rel)
    rng.shuffle(cands)
    kept_here = 0
    for label, new in cands[:MAX_NEGATIVE_TRIES]:
        if len(negatives) >= MAX_NEGATIVES or kept_here >= 3:
            break
        printed = print_and_reparse(new, functions)
        if printed is None:
            continue
        neg_text = _splice(text, sg.seg, printed)
        if neg_text == text or neg_text in neg_texts:
            continue
        cx = find_counterexample(rel, new, rng=rng, domains=domains, flags=p.flags,
                                 directed_segments=directed, stats=stats)
        if cx is None:
            continue
        neg_texts.add(neg_text)
        negatives.append({"text": neg_text, "edit": label, "counterexample": cx})
        kept_here += 1


def _finish(out: dict, positives: list[dict], negatives: list[dict], tried: list[int]) -> dict:
    """Attach negatives to rows (the rule in the module docstring) and set the status."""
    positives.sort(key=lambda r: _FAMILY_ORDER[r["transform_family"]])
    rows = []
    n = len(negatives)
    for r, pos in enumerate(positives):
        attached = [negatives[(r * NEGATIVES_PER_ROW + j) % n] for j in range(min(NEGATIVES_PER_ROW, n))] if n else []
        rows.append({**pos, "negatives": attached})
    out["rows"] = rows
    out["census"]["distinct_negatives"] = n
    if rows:
        out["status"] = "ok"
    else:
        out["status"] = "no_pair"
        out["reason"] = f"{len(tried)} relation(s) parsed, no positive verified"
    return out
