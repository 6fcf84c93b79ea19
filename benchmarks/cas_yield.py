"""Yield, census, speed and agreement with the peer of the computer-algebra generator.

Run by hand (not a test), from a clone with the data pulled (``dvc pull data.dvc``):

    .venv/bin/python benchmarks/cas_yield.py [--data-dir DIR] [--workers 2] [--limit N]

The data directory defaults to the repository's ``data/peer_release``.

It runs :func:`recipematch.cas.run_generator` on every problem of the peer's released
``corpus.jsonl`` (2,500 MathNet problems, the whole sample), then compares our output with
the peer's verified rows for the sources it released (``pairs_cas_verified_negmatched.jsonl``
and the probe items whose source is in the corpus):

* per family: peer sources with a row of that family, how many of them we also produce
  that family for, sources with ≥ 1 positive and with ≥ 1 negative, positives and
  distinct negatives per source (ours and the peer's), our negatives carrying a
  counterexample;
* the peer's rows judged by our checker: its reformulated/mirrored positives that our
  numeric test proves equivalent (each unknown sampled in the problem's domains; two-point
  names read as unsigned lengths unless the problem declares vectors or directed
  segments, the notation rule of :mod:`recipematch.cas.grammar`), its renames that
  re-parse to the same structure, and its negatives that our counterexample search
  refutes inside the problem's declared domain (and over the unrestricted reals);
* the agreement table: every disagreement by class, with ids (``source_id/family#k`` for
  the k-th positive of that family, ``source_id/neg#k`` for the k-th distinct negative):
  *peer wrong* (a peer positive that is not equivalent, counted as "peer positive not
  equivalent" with the reason: a counterexample point, an inconsistent rename, or a
  rewrite of a relation over a comma list; a peer negative that is equivalent), *ours
  wrong* (our checker cannot decide: a positive left ``unknown``, a negative not refuted),
  *notation* (equivalent only under the unsigned-length reading of two-point names),
  and *unaligned* (the edit is not one parseable relation);
* the census over the whole sample (unique expressions, coverage before and after the
  normaliser, share parsed as a relation) and the time per problem (each worker is one
  process on one core).

It prints a table, then as its last line one JSON object with at least ``coverage_after``,
``coverage_before``, ``median_s_per_problem``, ``sources``, ``sources_with_positive``,
``sources_with_negative``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import sympy as sp

from recipematch.cas import GENERATOR_VERSION, run_generator
from recipematch.cas.counterexamples import find_counterexample
from recipematch.cas.domains import infer_domains
from recipematch.cas.equivalence import check_equivalent
from recipematch.cas.generator import census_of_problem, list_bound_relations
from recipematch.cas.grammar import DEGREE, declared_notation, function_letters, try_parse
from recipematch.cas.relations import Rel
from recipematch.cas.spans import find_spans, split_segments

FAMILIES = ("rename", "reformulate", "mirror")


def _default_data_dir() -> Path:
    """The repository's ``data/peer_release`` (restored by ``dvc pull data.dvc``)."""
    return Path(__file__).resolve().parents[1] / "data" / "peer_release"


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _segments(text: str) -> list[tuple[int, int, int, int]]:
    out = []
    for i, span in enumerate(find_spans(text)):
        for j, s in enumerate(split_segments(text, span)):
            out.append((i, j, s.start, s.end))
    return out


def _changed_segment(orig: str, new: str) -> tuple[str, str, int] | None:
    """The single segment that differs (original text, new text, its index among the
    original's segments), or None when the edit is not one segment."""
    a, b = _segments(orig), _segments(new)
    if len(a) != len(b):
        return None
    diff = [(k, orig[x[2]:x[3]], new[y[2]:y[3]]) for k, (x, y) in enumerate(zip(a, b))
            if orig[x[2]:x[3]] != new[y[2]:y[3]]]
    if len(diff) != 1:
        return None
    k, s_old, s_new = diff[0]
    return s_old, s_new, k


def _parse_pair(orig: str, new: str):
    ch = _changed_segment(orig, new)
    if ch is None:
        return None
    s_old, s_new, k = ch
    fl = function_letters([s.content(orig) for s in find_spans(orig)])
    pa, _ = try_parse(s_old, functions=fl)
    pb, _ = try_parse(s_new, functions=fl)
    if pa is None or pb is None or pa.kind not in ("relation", "chain") or pb.kind not in ("relation", "chain"):
        return None
    return pa, pb, k


def _domains_for(orig: str, exclude: int):
    fl = function_letters([s.content(orig) for s in find_spans(orig)])
    segs = []
    for i, j, a, b in _segments(orig):
        p, _ = try_parse(orig[a:b], functions=fl)
        segs.append((i, j, p, a, b))
    return infer_domains(segs, orig, exclude=exclude)


def _list_bound(orig: str, k: int) -> bool:
    """Whether the k-th segment of ``orig`` is a relation over a comma list (the
    generator's rule: never rewritten)."""
    _, segs, _, _ = census_of_problem(orig)
    bound = list_bound_relations(orig, segs)
    start, end = _segments(orig)[k][2:]
    return any(segs[i].seg.start == start and segs[i].seg.end == end for i in bound)


def _judge_positive(orig: str, row: dict) -> tuple[str, str]:
    """(class, reason) of one peer positive: ``verified``, ``notation`` (equivalent only
    under the unsigned-length reading), ``peer_wrong``, ``ours_wrong`` or ``unaligned``."""
    fam = row["transform_family"]
    new = row["positive_text"]
    if fam == "rename":
        v, why = _peer_rename_verified(orig, new)
        if v is None:
            return "unaligned", why
        return ("verified", why) if v else ("peer_wrong", why)
    parsed = _parse_pair(orig, new)
    if parsed is None:
        return "unaligned", "the edit is not one parseable relation"
    pa, pb, k = parsed
    if _list_bound(orig, k):
        return "peer_wrong", "rewrites a relation over a comma list (it then binds fewer items)"
    directed = "directed_segments" in declared_notation(orig)
    doms = _domains_for(orig, k)
    a, b = Rel(pa.ops, pa.sides), Rel(pb.ops, pb.sides)
    ver = check_equivalent(a, b, rng=random.Random(0), domains=doms, directed_segments=directed)
    if ver["verdict"] == "equivalent":
        if not directed:
            strict = check_equivalent(a, b, rng=random.Random(0), domains=doms, directed_segments=True)
            if strict["verdict"] != "equivalent":
                return "notation", "equivalent when two-point names are unsigned lengths, not when directed"
        return "verified", ver["method"]
    if ver["verdict"] == "not_equivalent":
        cx = ver.get("counterexample") or {}
        at = f" at {cx['point']}" if cx.get("point") else ""
        return "peer_wrong", f"{ver['reason']}{at}"
    return "ours_wrong", f"unknown: {ver['reason']}"


_UNIT_RE = re.compile(r"\\(?:text|mathrm|textrm|operatorname|mathbb|mbox|begin|end)\s*\{[^{}]*\}|\\[A-Za-z]+|[A-Za-z]'*|\S")
_LETTER_UNIT = re.compile(r"[A-Za-z]'*")


def _units(s: str) -> list[str]:
    return _UNIT_RE.findall(s)


def _rename_name(name: str, umap: dict[str, str]) -> str:
    return "".join(umap.get(t, t) if _LETTER_UNIT.fullmatch(t) else t
                   for t in re.findall(r"\\[A-Za-z]+|[A-Za-z]'*|\s+|.", name))


def _peer_rename_verified(orig: str, new: str) -> tuple[bool | None, str]:
    """A rename is verified when the spans correspond one to one, their contents differ
    only by a consistent, one-to-one substitution of letter units (a letter with its
    primes, so ``B'`` can be renamed while ``B`` stays; blanks are ignored: the peer
    re-spaced some spans), and every segment that parses re-parses to the original with
    the symbols renamed (indexed terms under ``\\sum`` included). None when spans do not
    correspond; the reason as the second value."""
    sa, sb = find_spans(orig), find_spans(new)
    if len(sa) != len(sb):
        return None, "spans do not correspond"
    umap: dict[str, str] = {}
    back: dict[str, str] = {}
    for x, y in zip(sa, sb):
        ua, ub = _units(x.content(orig)), _units(y.content(new))
        if len(ua) != len(ub):
            return None, "span contents do not correspond"
        for p, q in zip(ua, ub):
            if p == q and not _LETTER_UNIT.fullmatch(p):
                continue
            if not (_LETTER_UNIT.fullmatch(p) and _LETTER_UNIT.fullmatch(q)):
                return False, f"not a rename: {p!r} became {q!r}"
            if umap.get(p, q) != q:
                return False, f"inconsistent rename: {p} became both {umap[p]} and {q} (a partial rename)"
            if back.get(q, p) != p:
                return False, f"not one-to-one: {back[q]} and {p} both became {q}"
            umap[p] = q
            back[q] = p
    if all(p == q for p, q in umap.items()):
        return False, "nothing renamed"
    fl = function_letters([s.content(orig) for s in sa])
    fl2 = function_letters([s.content(new) for s in sb])
    any_rel = False
    for x, y in zip(sa, sb):
        segs_a = split_segments(orig, x)
        segs_b = split_segments(new, y)
        if len(segs_a) != len(segs_b):
            return False, "segments do not correspond"
        for seg, seg_b in zip(segs_a, segs_b):
            pa, _ = try_parse(orig[seg.start:seg.end], functions=fl)
            if pa is None:
                continue
            pb, _ = try_parse(new[seg_b.start:seg_b.end], functions=fl2)
            sub = {s: sp.Symbol(_rename_name(s.name, umap)) for s in pa.obj.atoms(sp.Symbol) if s is not DEGREE}
            expected = pa.obj.xreplace(sub)
            if pb is None or pb.obj != expected:
                return False, f"segment {orig[seg.start:seg.end][:40]!r} does not re-parse to its renamed self"
            any_rel = any_rel or pa.is_relation
    if not any_rel:
        return None, "no relation renamed"
    return True, "parse_back_structural_equality"


def _judge_negative(orig: str, neg_text: str) -> tuple[str, str, bool | None]:
    """(class, reason, refuted over the reals) of one peer negative: ``verified``
    (refuted inside the declared domain), ``peer_wrong`` (proved equivalent),
    ``ours_wrong`` (not refuted) or ``unaligned``."""
    parsed = _parse_pair(orig, neg_text)
    if parsed is None:
        return "unaligned", "the edit is not one parseable relation", None
    pa, pb, k = parsed
    directed = "directed_segments" in declared_notation(orig)
    a, b = Rel(pa.ops, pa.sides), Rel(pb.ops, pb.sides)
    doms = _domains_for(orig, k)
    in_dom = find_counterexample(a, b, rng=random.Random(0), domains=doms, flags=pa.flags,
                                 directed_segments=directed)
    free = find_counterexample(a, b, rng=random.Random(1), flags=pa.flags, directed_segments=directed)
    if in_dom is not None:
        return "verified", f"{in_dom['method']} at {in_dom['point']}", free is not None
    ver = check_equivalent(a, b, rng=random.Random(0), domains=doms, directed_segments=directed)
    if ver["verdict"] == "equivalent":
        return "peer_wrong", "the negative is equivalent to the original", free is not None
    return "ours_wrong", "no counterexample found in the declared domain", free is not None


def _pct(a: float, b: float) -> str:
    return f"{100.0 * a / b:6.1f}%" if b else "     - "


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=_default_data_dir(),
                    help="folder with corpus.jsonl, pairs_cas_verified_negmatched.jsonl, probe_sample.jsonl "
                         "(default: the repository's data/peer_release)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--memory-mb", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--limit", type=int, default=None, help="only the first N problems (quick look)")
    ap.add_argument("--out", type=Path, default=None, help="output file (default: a temporary directory)")
    args = ap.parse_args(argv)

    missing = [n for n in ("corpus.jsonl", "pairs_cas_verified_negmatched.jsonl", "probe_sample.jsonl")
               if not (args.data_dir / n).is_file()]
    if missing:
        print(f"{args.data_dir}: missing {', '.join(missing)}; run `dvc pull data.dvc` first "
              "or pass --data-dir", file=sys.stderr)
        return 2
    corpus = _read_jsonl(args.data_dir / "corpus.jsonl")
    if args.limit:
        corpus = corpus[:args.limit]
    texts = {r["_id"]: r["text"] for r in corpus}
    peer_rows = [r for r in _read_jsonl(args.data_dir / "pairs_cas_verified_negmatched.jsonl") if r["source_id"] in texts]
    probe = [r for r in _read_jsonl(args.data_dir / "probe_sample.jsonl") if r["source_id"] in texts]

    tmp = None
    out = args.out
    if out is None:
        tmp = tempfile.TemporaryDirectory()
        out = Path(tmp.name) / "cas_pairs.jsonl"
    t0 = time.perf_counter()
    summary = run_generator(list(texts.items()), out_path=out, seed=args.seed, timeout_s=args.timeout,
                            memory_mb=args.memory_mb, workers=args.workers, progress=sys.stderr.isatty())
    wall = time.perf_counter() - t0
    recs = {r["source_id"]: r for r in _read_jsonl(out)}
    timings = [r["elapsed_s"] for r in _read_jsonl(Path(summary["timings_path"])) if r["elapsed_s"] is not None]

    # ---------------------------------------------------------------- ours, whole sample
    def fam_stats(ids):
        """Per family: sources with >= 1 positive / negative, positives, distinct negatives."""
        st = {f: {"pos_sources": 0, "neg_sources": 0, "positives": 0, "negatives": 0} for f in FAMILIES + ("all",)}
        neg_with_cx = neg_total = 0
        for sid in ids:
            rec = recs.get(sid)
            if rec is None:
                continue
            pos: dict[str, int] = defaultdict(int)
            negs: dict[str, set] = defaultdict(set)
            for row in rec["rows"]:
                for key in (row["transform_family"], "all"):
                    pos[key] += 1
                    negs[key] |= {n["text"] for n in row["negatives"]}
            for f, npos in pos.items():
                st[f]["pos_sources"] += npos > 0
                st[f]["neg_sources"] += len(negs[f]) > 0
                st[f]["positives"] += npos
                st[f]["negatives"] += len(negs[f])
            unique = {n["text"]: n for row in rec["rows"] for n in row["negatives"]}
            neg_total += len(unique)
            neg_with_cx += sum(bool((n.get("counterexample") or {}).get("point")) for n in unique.values())
        return st, neg_with_cx, neg_total

    all_ids = list(texts)
    ours_all, cx_ok, cx_total = fam_stats(all_ids)

    # ---------------------------------------------------------------- the peer's sources
    peer_by_src: dict[str, list[dict]] = defaultdict(list)
    for r in peer_rows:
        peer_by_src[r["source_id"]].append({"transform_family": r["transform_family"],
                                            "positive_text": r["positive_text"], "negatives": r["negatives"]})
    for r in probe:
        peer_by_src[r["source_id"]].append({"transform_family": r["transform_family"],
                                            "positive_text": r["positive_text"], "negatives": r["negatives"]})
    peer_ids = sorted(peer_by_src)
    ours_peer, _, _ = fam_stats(peer_ids)
    table = []
    agree = {}
    for f in FAMILIES:
        srcs = [s for s in peer_ids if any(r["transform_family"] == f for r in peer_by_src[s])]
        same = sum(any(row["transform_family"] == f for row in recs[s]["rows"]) for s in srcs if s in recs)
        peer_pos = sum(sum(r["transform_family"] == f for r in peer_by_src[s]) for s in peer_ids)
        peer_neg_src = sum(any(r["transform_family"] == f and r["negatives"] for r in peer_by_src[s]) for s in peer_ids)
        peer_negs = sum(len({n["text"] for r in peer_by_src[s] if r["transform_family"] == f for n in r["negatives"]})
                        for s in peer_ids)
        agree[f] = {"peer_sources": len(srcs), "same_family": same}
        table.append((f, len(srcs), same, ours_peer[f]["pos_sources"], ours_peer[f]["neg_sources"], peer_neg_src,
                      ours_peer[f]["positives"] / max(1, len(peer_ids)), peer_pos / max(1, len(peer_ids)),
                      ours_peer[f]["negatives"] / max(1, len(peer_ids)), peer_negs / max(1, len(peer_ids))))

    # the peer's rows judged by our checker
    pos_checked = pos_ok = 0
    by_fam_ok = defaultdict(lambda: [0, 0])
    neg_checked = neg_in_dom = neg_free = 0
    classes: dict[str, list[tuple[str, str]]] = defaultdict(list)
    pos_classes: dict[str, int] = defaultdict(int)
    neg_classes: dict[str, int] = defaultdict(int)
    for s in peer_ids:
        orig = texts[s]
        seen_neg: list[str] = []
        fam_k: dict[str, int] = defaultdict(int)
        for r in peer_by_src[s]:
            fam = r["transform_family"]
            rid = f"{s}/{fam}#{fam_k[fam]}"
            fam_k[fam] += 1
            cls, why = _judge_positive(orig, r)
            pos_classes[cls] += 1
            if cls != "unaligned":
                pos_checked += 1
                ok = cls in ("verified", "notation")
                pos_ok += ok
                by_fam_ok[fam][0] += 1
                by_fam_ok[fam][1] += ok
            if cls != "verified":
                label = "peer positive not equivalent" if cls == "peer_wrong" else "positive"
                classes[cls].append((rid, f"{label}: {why}"))
            for n in r["negatives"]:
                if n["text"] in seen_neg:
                    continue
                seen_neg.append(n["text"])
                nid = f"{s}/neg#{len(seen_neg) - 1}"
                ncls, nwhy, free = _judge_negative(orig, n["text"])
                neg_classes[ncls] += 1
                if ncls == "unaligned":
                    classes[ncls].append((nid, f"negative: {nwhy}"))
                    continue
                neg_checked += 1
                neg_in_dom += ncls == "verified"
                neg_free += bool(free)
                if ncls != "verified":
                    label = "peer negative equivalent" if ncls == "peer_wrong" else "negative"
                    classes[ncls].append((nid, f"{label}: {nwhy}"))
    ours_neg_on_peer = sum(len({n["text"] for row in recs[s]["rows"] for n in row["negatives"]}) for s in peer_ids if s in recs)

    census = summary["census"]
    counts = summary["counts"]
    med = statistics.median(timings) if timings else 0.0
    p90 = sorted(timings)[int(0.9 * (len(timings) - 1))] if timings else 0.0

    # ---------------------------------------------------------------- print
    print(f"recipematch cas generator {GENERATOR_VERSION}: {len(texts)} problems, seed {args.seed}, "
          f"{args.workers} worker(s), {wall:.1f} s wall")
    print()
    print("Census (whole sample; unit = unique math span)")
    print(f"  unique expressions            {census['unique_expressions']:7d}")
    print(f"  parsed before normaliser      {100 * census['coverage_before']:6.2f}%   (paper: 86.61%, SymPy parse_latex)")
    print(f"  parsed after normaliser       {100 * census['coverage_after']:6.2f}%   (paper: 92.29%)")
    print(f"  ... of which fully interpreted {100 * census['coverage_after_interpreted']:6.2f}%   "
          "(no geometric predicate, map declaration or problem-defined operation)")
    print(f"  parsed as a relation          {100 * census['relation_share']:6.2f}%")
    top = list(census["rejections"].items())[:8]
    print("  top rejection reasons        " + "; ".join(f"{k} ({v})" for k, v in top))
    print()
    print("Outcomes (whole sample)")
    print("  " + "  ".join(f"{k} {v}" for k, v in counts.items()))
    print(f"  rows {summary['rows']}, distinct negatives {summary['distinct_negatives']}, "
          f"attachments {summary['negative_attachments']} "
          f"({summary['negative_attachments'] / max(1, summary['rows']):.2f} per row; paper 1.53)")
    print(f"  time per problem: median {med:.4f} s, p90 {p90:.4f} s, max {max(timings or [0]):.3f} s")
    print()
    print(f"{'family':12s} {'srcs+pos':>8s} {'srcs+neg':>8s} {'pos/src':>8s} {'neg/src':>8s}   (ours, whole sample)")
    for f in FAMILIES + ("all",):
        s = ours_all[f]
        print(f"{f:12s} {s['pos_sources']:8d} {s['neg_sources']:8d} {s['positives'] / len(texts):8.3f} "
              f"{s['negatives'] / len(texts):8.3f}")
    print()
    print(f"Against the peer's released verified rows: {len(peer_ids)} sources in the corpus")
    print(f"{'family':12s} {'peer srcs':>9s} {'same fam':>9s} {'ours+pos':>9s} {'ours+neg':>9s} {'peer+neg':>9s} "
          f"{'pos/src o':>9s} {'pos/src p':>9s} {'neg/src o':>9s} {'neg/src p':>9s}")
    for f, n_src, same, opos, oneg, pneg, ppos_o, ppos_p, pneg_o, pneg_p in table:
        print(f"{f:12s} {n_src:9d} {same:4d} {_pct(same, n_src)} {opos:9d} {oneg:9d} {pneg:9d} "
              f"{ppos_o:9.3f} {ppos_p:9.3f} {pneg_o:9.3f} {pneg_p:9.3f}")
    print(f"  our negatives with a counterexample: {cx_ok}/{cx_total} ({_pct(cx_ok, cx_total).strip()}); "
          f"on the peer's sources: {ours_neg_on_peer}")
    print(f"  peer positives our checker verifies: {pos_ok}/{pos_checked} ({_pct(pos_ok, pos_checked).strip()}) "
          + ", ".join(f"{f} {v[1]}/{v[0]}" for f, v in sorted(by_fam_ok.items())))
    print(f"  peer negatives our search refutes: inside the declared domain {neg_in_dom}/{neg_checked} "
          f"({_pct(neg_in_dom, neg_checked).strip()}), over the reals {neg_free}/{neg_checked} "
          f"({_pct(neg_free, neg_checked).strip()})")
    print()
    print("Agreement with the peer, by class (verified positives and refuted negatives agree)")
    print(f"  positives: " + ", ".join(f"{k} {v}" for k, v in sorted(pos_classes.items())))
    print(f"  negatives: " + ", ".join(f"{k} {v}" for k, v in sorted(neg_classes.items())))
    titles = {"peer_wrong": "peer wrong (peer positive not equivalent / peer negative equivalent)",
              "ours_wrong": "ours wrong (our checker cannot decide)",
              "notation": "notation (equivalent under the unsigned-length rule only; counted as verified)",
              "unaligned": "unaligned (not one parseable relation)"}
    for cls in ("peer_wrong", "ours_wrong", "notation", "unaligned"):
        items = classes.get(cls, [])
        print(f"  {titles[cls]}: {len(items)}")
        for rid, why in items:
            print(f"    {rid:24s} {why[:160]}")

    result = {
        "generator_version": GENERATOR_VERSION,
        "sources": len(texts),
        "sources_with_positive": ours_all["all"]["pos_sources"],
        "sources_with_negative": ours_all["all"]["neg_sources"],
        "rows": summary["rows"],
        "distinct_negatives": summary["distinct_negatives"],
        "negative_attachments": summary["negative_attachments"],
        "status_counts": counts,
        "coverage_before": round(census["coverage_before"], 6),
        "coverage_after": round(census["coverage_after"], 6),
        "relation_share": round(census["relation_share"], 6),
        "coverage_after_interpreted": round(census["coverage_after_interpreted"], 6),
        "unique_expressions": census["unique_expressions"],
        "median_s_per_problem": round(med, 5),
        "p90_s_per_problem": round(p90, 5),
        "wall_s": round(wall, 1),
        "workers": args.workers,
        "per_family": {f: {k: ours_all[f][k] for k in ("pos_sources", "neg_sources", "positives", "negatives")}
                       for f in FAMILIES},
        "peer_sources": len(peer_ids),
        "peer_same_family": {f: agree[f] for f in FAMILIES},
        "peer_positives_verified": [pos_ok, pos_checked],
        "peer_negatives_refuted_in_domain": [neg_in_dom, neg_checked],
        "peer_negatives_refuted_reals": [neg_free, neg_checked],
        "agreement_classes": {cls: len(classes.get(cls, [])) for cls in ("peer_wrong", "ours_wrong", "notation",
                                                                         "unaligned")},
        "peer_positive_classes": dict(sorted(pos_classes.items())),
        "peer_negative_classes": dict(sorted(neg_classes.items())),
        "counterexamples_discarded": census.get("counterexamples_discarded", 0),
        "list_bound_relations": census.get("list_bound_relations", 0),
        "our_negatives_with_counterexample": [cx_ok, cx_total],
    }
    print(json.dumps(result, sort_keys=True))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
