"""Graded relevance: nDCG@k, AP, R@k and Success@k over multi-gold, graded qrels, computed
by ir_measures (the paper, Section 6 and Appendix D, scores the external benchmarks by
nDCG@10; its own sets by the single-gold R@k of :mod:`recipematch.metrics`).

The measures are not ours: ir_measures (with pytrec_eval, trec_eval's C code, behind it)
computes them from a *run* (each query's top documents) and the qrels, and names them as it
does (``nDCG@10``, ``R@100``, ``AP``, ``Success@1``, ``nDCG(gains={2:3})@10``). What is ours
is the run and the rules around it:

- **The run**: each query's top ``depth`` documents by the model's score, the query's own
  entry masked under the set's ``self_mask`` rule (:mod:`recipematch.retrieval.selfmask`),
  ordered by score descending and then by ascending document id (the order of
  :func:`recipematch.retrieval.search_topk`). The library is given the position, not the
  raw score (``depth - position``), so its order is exactly this one whatever its own
  tie-breaking; the raw scores are kept in :class:`Run` and in a written TREC run file.
- **Qrels**: the set's scored qrels (its rule applied, :func:`recipematch.scoring.scored_qrels`)
  for the queries it scores; a query absent from the run scores 0 (the library's rule).
- **Gains**: ``linear`` (trec_eval's nDCG: gain = grade) or ``exponential`` (gain =
  ``2**grade - 1``, the convention of SABER-Math's metric code), applied to every nDCG
  measure that does not name its own ``gains``. trec_eval takes integer grades only, so graded
  measures refuse real-valued grades (:func:`check_grades`); a declared scale bounds them.
- **Reranking** (SABER-Math's protocol): a folder with :data:`CANDIDATES_FILE` (``query id ->
  [doc ids]``) ranks each query's own candidates only, by score descending then document id
  (SABER-Math's ``argsort`` leaves tied scores in the sort's order; ours is fixed). Every
  query with a graded candidate needs candidates, and every query with candidates a grade
  above 0 (BEIR's convention would drop it from the mean); a measure cutting deeper than the
  run's depth is refused. Under the exponential gain such a folder is always scored by
  SABER-Math's metric (below), whole-numbered grades or not, so its measure keeps one name.
- **Real-valued grades** (SABER-Math's Bradley-Terry ratings in [0, 5]): trec_eval keeps grades
  as integers, so the library cannot score them. Such qrels take nDCG@k under the exponential
  gain only, computed by :func:`recipematch.saber.ndcg_exponential` (gain ``2**g - 1``, discount
  ``1/log2(rank + 1)``, ideal DCG over every judged document: SABER-Math's metric code; a test
  holds it to scikit-learn's ``ndcg_score`` on the same runs); any other measure or gain is refused.
- **Our R@k** (the paper's: the best gold within the top k) is the library's ``Success@k``,
  and on single-gold qrels also its ``R@k``: a test holds the two to identical numbers on
  runs without score ties (with ties our rank lets the gold win them, the run orders by id).

Values are fractions in [0, 1], as the library reports them, under its measure names; they
live apart from the percent R@k of the rest of a summary (``summary["measures"]``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from recipematch.beir import BeirFormatError, doc_text, iter_qrels_rows
from recipematch.errors import RecipematchError, short_repr
from recipematch.graded_files import CANDIDATES_FILE, EXCLUDED_FILE, positive_qrel_ids, read_candidates, read_excluded
from recipematch.rules import GAINS, MEASURE_PREFIX
from recipematch.saber import ndcg_exponential

__all__ = ["GAINS", "DEFAULT_MEASURES", "DEFAULT_DEPTH", "LIBRARY", "Run", "parse_measures",
           "check_grades", "check_qrels_file", "topk_run", "measure_run", "write_trec_run", "library_version",
           "measure_real_valued", "GradedSpec",
           "prepare", "score_graded", "MEASURE_PREFIX", "REAL_VALUED_ENGINE"]

#: what ``recipematch evaluate --measure`` computes unless told otherwise (the paper's Section 6 measure first)
DEFAULT_MEASURES = ("nDCG@10", "R@10", "R@100", "AP@100")
#: documents per query in a run unless told otherwise (the deepest default cut-off)
DEFAULT_DEPTH = 100
#: the measures this module lets through to the library (trec_eval's, through pytrec_eval), each
#: with the parameters it may take; others fail inside the library (a C assertion, a perl helper)
ALLOWED = {"nDCG": {"cutoff", "gains", "judged_only"}, "R": {"cutoff", "judged_only"},
           "AP": {"cutoff", "rel", "judged_only"}, "P": {"cutoff", "rel", "judged_only"},
           "RR": {"rel", "judged_only"}, "Success": {"cutoff", "rel", "judged_only"}, "Judged": {"cutoff"}}
#: what computes nDCG on real-valued grades (module docstring)
REAL_VALUED_ENGINE = "recipematch.saber.ndcg_exponential (SABER-Math's metric: trec_eval takes integer grades only)"
#: grades trec_eval holds in a C int; the exponential gain 2**g - 1 must fit too
MAX_GRADE = 2**31 - 1
MAX_EXPONENTIAL_GRADE = 30
#: the library that computes every graded measure
LIBRARY = "ir_measures"


def library_version() -> str:
    import ir_measures

    return f"{LIBRARY} {ir_measures.__version__} (pytrec_eval)"


def _grade(g, scale: tuple[int, int] | None) -> tuple[int, str | None]:
    """``(grade as int, None)``, or ``(0, why it cannot be a graded measure's grade)``."""
    if isinstance(g, float) and g.is_integer():
        g = int(g)
    if isinstance(g, bool) or not isinstance(g, (int, np.integer)):
        return 0, (f"{short_repr(g, 40)} is not an integer grade; graded measures (trec_eval's) take integer "
                   "grades: map real-valued grades to levels first")
    g = int(g)
    if abs(g) > MAX_GRADE:
        return 0, f"{short_repr(g, 30)} is beyond +-{MAX_GRADE} (trec_eval keeps grades in a C int)"
    if scale is not None and not scale[0] <= g <= scale[1]:
        return 0, f"{g} is outside the declared scale {scale[0]}..{scale[1]}"
    return g, None


def check_grades(qrels: Mapping[str, Mapping[str, float]], scale: tuple[int, int] | None = None,
                 *, where: str = "qrels") -> list[int]:
    """The distinct grades of ``qrels``, sorted, after checking them for graded measures.

    Args:
        qrels: ``query_id -> {doc_id: grade}``.
        scale: ``(lowest, highest)`` grade the benchmark declares, or ``None``.
        where: what to name in an error.

    Raises:
        RecipematchError: a grade that is not an integer (trec_eval's rule), beyond a C int
            (:data:`MAX_GRADE`), or outside ``scale``.
    """
    grades: set[int] = set()
    for qid, per_q in qrels.items():
        for did, raw in per_q.items():
            g, problem = _grade(raw, scale)
            if problem:
                raise RecipematchError(f"{where}: the grade of ({qid!r}, {did!r}), {problem}")
            grades.add(g)
    return sorted(grades)


def check_qrels_file(folder: str | os.PathLike, split: str = "test",
                     scale: tuple[int, int] | None = None, *, real_valued: bool = False) -> list:
    """:func:`check_grades` on a BEIR folder's qrels file, naming the file, line and field of
    the first bad grade; returns the distinct grades.

    With ``real_valued``, a qrels file holding any non-integer grade is read as real-valued
    (module docstring): every grade must then be finite, >= 0 and inside ``scale``, and the
    distinct grades come back as floats.

    Raises:
        RecipematchError: a grade :func:`check_grades` refuses (``path:line: field 'score'
            ...``), an empty ``scale``, or a malformed row (:class:`recipematch.beir.BeirFormatError`).
        FileNotFoundError: no qrels file for ``split``.
    """
    if scale is not None and (scale[0] > scale[1]):
        raise RecipematchError(f"grade scale {scale[0]}..{scale[1]} is empty")
    rows = list(iter_qrels_rows(folder, split))
    if real_valued and any(isinstance(raw, float) and not float(raw).is_integer() for *_, raw in rows):
        reals: set[float] = set()
        for path, lineno, _qid, _did, raw in rows:
            g = float(raw)
            if g < 0 or (scale is not None and not scale[0] <= g <= scale[1]) or g > MAX_EXPONENTIAL_GRADE:
                where = ("negative" if g < 0 else f"outside the declared scale {scale[0]}..{scale[1]}"
                         if scale is not None and not scale[0] <= g <= scale[1]
                         else f"above {MAX_EXPONENTIAL_GRADE} (the exponential gain 2**grade - 1 would overflow)")
                raise RecipematchError(f"{path}:{lineno}: field 'score' {raw!r} is {where} (real-valued grades)")
            reals.add(g)
        return sorted(reals)
    grades: set[int] = set()
    for path, lineno, _qid, _did, raw in rows:
        g, problem = _grade(raw, scale)
        if problem:
            raise RecipematchError(f"{path}:{lineno}: field 'score' {problem}")
        grades.add(g)
    return sorted(grades)


def parse_measures(names: Sequence[str], *, gain: str = "linear", grades: Sequence[int] = (0, 1)) -> list:
    """ir_measures measures from their names, the ``gain`` applied to nDCG.

    Args:
        names: measure names as ir_measures parses them (``nDCG@10``, ``R@100``, ``AP``,
            ``Success@1``, ``RR``, ``P@5``); at least one, no duplicates.
        gain: one of :data:`GAINS`.
        grades: the grades the qrels hold (for the exponential gain table).

    Returns:
        The measures, in order; an nDCG without its own ``gains`` gets ``2**g - 1`` per grade
        ``g`` under ``exponential`` and stays trec_eval's (gain = grade) under ``linear``.

    Raises:
        RecipematchError: an unknown or malformed name, a duplicate, no name, or another gain.
    """
    import ir_measures

    if gain not in GAINS:
        raise RecipematchError(f"gain must be one of {list(GAINS)}, got {short_repr(gain, 40)}")
    if not names:
        raise RecipematchError("no measure named")
    out, seen = [], set()
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise RecipematchError(f"measure {short_repr(name, 60)}: not a measure name")
        try:
            m = ir_measures.parse_measure(name.strip())
        except (NameError, ValueError, TypeError, SyntaxError) as exc:
            raise RecipematchError(f"measure {short_repr(name, 60)}: not an {LIBRARY} measure ({exc}); "
                                   "e.g. nDCG@10, R@100, AP@100, Success@1, RR") from None
        _check_measure(m, name)
        if m.NAME == "nDCG" and gain == "exponential" and "gains" not in m.params:
            too_big = [g for g in grades if g > MAX_EXPONENTIAL_GRADE]
            if too_big:
                raise RecipematchError(f"measure {name!r} under the exponential gain: grade {too_big[0]} is above "
                                       f"{MAX_EXPONENTIAL_GRADE} (2**grade - 1 would not fit trec_eval's int)")
            m = ir_measures.nDCG(**{**m.params, "gains": {int(g): max(0, 2 ** int(g) - 1) for g in grades}})
        if str(m) in seen:
            raise RecipematchError(f"measure {name!r} is named twice")
        seen.add(str(m))
        out.append(m)
    return out


def _check_measure(m, name: str) -> None:
    """Refuse a parsed measure the library would crash on (module constant :data:`ALLOWED`)."""
    import ir_measures

    allowed = ALLOWED.get(m.NAME)
    if allowed is None:
        raise RecipematchError(f"measure {short_repr(name, 60)}: {m.NAME} is not among the measures recipematch "
                               f"computes ({', '.join(sorted(ALLOWED))})")
    extra = sorted(set(m.params) - allowed)
    if extra:
        raise RecipematchError(f"measure {short_repr(name, 60)}: {m.NAME} takes no {extra}")
    cutoff = m.params.get("cutoff")
    if cutoff is not None and (isinstance(cutoff, bool) or not isinstance(cutoff, int) or not 1 <= cutoff <= 10**6):
        raise RecipematchError(f"measure {short_repr(name, 60)}: the cut-off must be an integer in 1..1000000")
    for key in ("rel",):
        v = m.params.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_GRADE):
            raise RecipematchError(f"measure {short_repr(name, 60)}: {key} must be an integer in 1..{MAX_GRADE}")
    gains = m.params.get("gains")
    if gains is not None and (not isinstance(gains, dict) or not all(
            isinstance(k, int) and not isinstance(k, bool) and isinstance(v, int) and not isinstance(v, bool)
            and abs(k) <= MAX_GRADE and abs(v) <= MAX_GRADE for k, v in gains.items())):
        raise RecipematchError(f"measure {short_repr(name, 60)}: gains must map integer grades to integer gains")
    try:  # one query, one document: whatever else the library refuses, it refuses here, in one line
        ir_measures.calc_aggregate([m], {"q": {"d": 1}}, {"q": {"d": 1.0}})
    except Exception as exc:  # noqa: BLE001 - the library raises many kinds; all mean "not computable"
        raise RecipematchError(f"measure {short_repr(name, 60)}: the library cannot compute it "
                               f"({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})") from None


@dataclass(frozen=True)
class Run:
    """Each query's top documents (module docstring, *the run*).

    Attributes:
        query_ids: ``n_queries`` ids, in the set's order.
        doc_ids: ``(n_queries, depth)`` object array of document ids, best first; ``None``
            where fewer than ``depth`` documents remain.
        scores: ``(n_queries, depth)`` float32 raw model scores, ``-inf`` where empty.
        model: the model's cache key (or BM25's settings as JSON).
    """

    query_ids: list[str]
    doc_ids: np.ndarray
    scores: np.ndarray
    model: str

    @property
    def depth(self) -> int:
        return int(self.doc_ids.shape[1])

    def for_library(self) -> dict[str, dict[str, float]]:
        """``query_id -> {doc_id: depth - position}``: the order, not the raw scores."""
        depth = self.depth
        return {q: {d: float(depth - j) for j, d in enumerate(row) if d is not None}
                for q, row in zip(self.query_ids, self.doc_ids)}


def _is_bm25(model, bm25_k1: float | None, bm25_b: float | None) -> bool:
    """Whether a run's ``model`` is the BM25 baseline (then with both its parameters) rather
    than an encoder.

    Raises:
        RecipematchError: a string other than BM25's name, or BM25 without its parameters.
    """
    from recipematch.scoring import BM25  # lazy: recipematch.scoring pulls in torch

    if not isinstance(model, str):
        return False
    if model != BM25:
        raise RecipematchError(f"model must be an encoder or {BM25!r}, got {short_repr(model, 60)}")
    if bm25_k1 is None or bm25_b is None:
        raise RecipematchError("BM25 needs bm25_k1 and bm25_b")
    return True


def topk_run(bset, model, depth: int = DEFAULT_DEPTH, *, cache_dir=None, bm25_k1: float | None = None,
             bm25_b: float | None = None, self_mask: str | None = None,
             exclude: Mapping[str, Sequence[str]] | None = None,
             candidates: Mapping[str, Sequence[str]] | None = None) -> Run:
    """The run of ``model`` on ``bset``: its top ``depth`` documents per scored query.

    Args:
        bset: a :class:`recipematch.benchmarks_data.BenchmarkSet`.
        model: an :class:`recipematch.retrieval.Encoder`, or :data:`recipematch.scoring.BM25`
            (then ``bm25_k1`` and ``bm25_b`` are required).
        depth: documents per query, >= 1 (capped at the corpus size).
        cache_dir: embedding cache (encoders only).
        self_mask: a rule of :mod:`recipematch.retrieval.selfmask`; default the set's.
        exclude: ``query_id -> doc ids`` taken out of that query's ranking before the cut to
            ``depth`` (BRIGHT's ``excluded_ids``); ids not in the corpus are ignored.
        candidates: ``query_id -> doc ids``: when given, each query ranks its own candidates
            only (SABER-Math's reranking protocol; :func:`rerank_run`); ``exclude`` and the
            self-mask do not apply.

    Raises:
        RecipematchError: ``depth`` < 1, BM25 without its parameters, or a blank corpus for BM25.
    """
    if candidates is not None:
        return rerank_run(bset, model, candidates, depth, cache_dir=cache_dir, bm25_k1=bm25_k1, bm25_b=bm25_b)
    from recipematch.retrieval.bm25 import bm25_settings, bm25_topk  # lazy: recipematch.retrieval.bm25 pulls in torch
    from recipematch.retrieval.cache import encode_cached  # lazy: recipematch.retrieval.cache pulls in torch
    from recipematch.retrieval.dense import search_topk  # lazy: recipematch.retrieval.dense pulls in torch
    from recipematch.retrieval.selfmask import own_entries  # lazy: recipematch.retrieval.selfmask pulls in torch

    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise RecipematchError(f"run depth must be an integer >= 1, got {short_repr(depth, 40)}")
    ids = list(bset.query_ids)
    doc_ids = list(bset.corpus)
    depth = min(depth, len(doc_ids))
    exclude = {q: set(v) for q, v in (exclude or {}).items() if v}
    wide = min(len(doc_ids), depth + max((len(v) for v in exclude.values()), default=0))
    own = own_entries(ids, [bset.queries[q] for q in ids], doc_ids, [bset.corpus[d] for d in doc_ids],
                      self_mask or bset.self_mask)
    if _is_bm25(model, bm25_k1, bm25_b):
        idx, scores = bm25_topk(bset.corpus, bset.queries, wide, query_ids=ids, self_mask=own.index,
                                k1=bm25_k1, b=bm25_b)
        name = json.dumps(bm25_settings(bm25_k1, bm25_b), sort_keys=True)
    else:
        doc_emb = encode_cached(model, [doc_text(bset.corpus[d]) for d in doc_ids], cache_dir, role="document")
        query_emb = encode_cached(model, [bset.queries[q] for q in ids], cache_dir, role="query")
        idx, scores = search_topk(query_emb, doc_emb, wide, query_ids=ids, doc_ids=doc_ids, self_mask=own.index)
        name = model.cache_key
    names = np.asarray(doc_ids + [None], dtype=object)[idx]  # index -1 (an empty slot) is None
    if exclude:  # drop each query's excluded ids, then cut to depth (empty slots stay last)
        kept_n = np.full((len(ids), depth), None, dtype=object)
        kept_s = np.full((len(ids), depth), -np.inf, dtype=np.float32)
        for i, q in enumerate(ids):
            keep = [j for j, d in enumerate(names[i]) if d is not None and d not in exclude.get(q, ())][:depth]
            kept_n[i, :len(keep)], kept_s[i, :len(keep)] = names[i, keep], scores[i, keep]
        names, scores = kept_n, kept_s
    else:
        names, scores = names[:, :depth], scores[:, :depth]
    return Run(ids, names, scores, name)


def rerank_run(bset, model, candidates: Mapping[str, Sequence[str]], depth: int = DEFAULT_DEPTH, *,
               cache_dir=None, bm25_k1: float | None = None, bm25_b: float | None = None) -> Run:
    """The run of ``model`` reranking each query's candidates (SABER-Math's protocol).

    Args:
        bset: a :class:`recipematch.benchmarks_data.BenchmarkSet`; candidates: ``query_id ->
            doc ids`` covering every scored query (at most ``depth`` kept per query).
        model: an encoder (cosine of normalised embeddings) or :data:`recipematch.scoring.BM25`
            (each query's BM25 score of every corpus document, read at its candidates).

    Returns:
        A :class:`Run` whose row ``i`` holds query ``i``'s candidates by score descending,
        then by ascending document id; ``None`` / ``-inf`` pad rows shorter than the widest.

    Raises:
        RecipematchError: a scored query without candidates, a candidate not in the corpus, or
            ``depth`` < 1.
    """
    from recipematch.retrieval.bm25 import (  # lazy: recipematch.retrieval.bm25 pulls in torch
        bm25_score_matrix,
        bm25_settings,
    )
    from recipematch.retrieval.cache import encode_cached  # lazy: recipematch.retrieval.cache pulls in torch

    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise RecipematchError(f"run depth must be an integer >= 1, got {short_repr(depth, 40)}")
    ids = list(bset.query_ids)
    doc_ids = list(bset.corpus)
    pos = {d: j for j, d in enumerate(doc_ids)}
    for q in ids:
        cand = candidates.get(q)
        if not cand:
            raise RecipematchError(f"reranking: query {q!r} has no candidates in {CANDIDATES_FILE}")
        missing = [d for d in cand if d not in pos]
        if missing:
            raise RecipematchError(f"reranking: query {q!r}: candidate {missing[0]!r} is not in the corpus")
    if _is_bm25(model, bm25_k1, bm25_b):
        full = bm25_score_matrix(bset.corpus, bset.queries, ids, k1=bm25_k1, b=bm25_b)
        name = json.dumps(bm25_settings(bm25_k1, bm25_b), sort_keys=True)
    else:
        doc_emb = np.asarray(encode_cached(model, [doc_text(bset.corpus[d]) for d in doc_ids], cache_dir,
                                           role="document"), dtype=np.float32)
        query_emb = np.asarray(encode_cached(model, [bset.queries[q] for q in ids], cache_dir, role="query"),
                               dtype=np.float32)
        full = None
        name = model.cache_key
    width = min(depth, max(len(candidates[q]) for q in ids))
    names = np.full((len(ids), width), None, dtype=object)
    scores = np.full((len(ids), width), -np.inf, dtype=np.float32)
    for i, q in enumerate(ids):
        cand = list(dict.fromkeys(candidates[q]))
        idx = np.fromiter((pos[d] for d in cand), dtype=np.int64, count=len(cand))
        s = full[i, idx] if full is not None else doc_emb[idx] @ query_emb[i]
        order = sorted(range(len(cand)), key=lambda j: (-float(s[j]), cand[j]))[:width]
        names[i, :len(order)] = [cand[j] for j in order]
        scores[i, :len(order)] = [s[j] for j in order]
    return Run(ids, names, scores, name)


def measure_real_valued(qrels: Mapping[str, Mapping[str, float]], run: Run, measures: Sequence,
                        gain: str) -> tuple[dict, pd.DataFrame]:
    """Score ``run`` against real-valued ``qrels`` (module docstring, *real-valued grades*).

    Args:
        qrels: ``query_id -> {doc_id: grade >= 0}``; every judged document counts toward the
            ideal DCG. measures: parsed nDCG@k measures. gain: must be ``exponential``.

    Returns:
        As :func:`measure_run`.

    Raises:
        RecipematchError: a measure other than nDCG@k, or another gain.
    """
    check_real_valued_measures(measures, gain)
    per_query = pd.DataFrame({"query_id": run.query_ids,
                              "n_relevant": [sum(g > 0 for g in (qrels.get(q) or {}).values()) for q in run.query_ids]})
    values = {}
    for m in measures:
        k = int(m.params["cutoff"])
        col = np.asarray([ndcg_exponential(qrels.get(q) or {}, [d for d in row if d is not None], k)
                          for q, row in zip(run.query_ids, run.doc_ids)], dtype=np.float64)
        if not np.all(np.isfinite(col)):
            raise RecipematchError(f"{m}: a non-finite value (a grade too large for the exponential gain)")
        per_query[str(m)] = col
        values[str(m)] = float(col.mean()) if col.size else math.nan
    return values, per_query


def check_real_valued_measures(measures: Sequence, gain: str) -> None:
    """Refuse what real-valued grades cannot be scored by (module docstring).

    Raises:
        RecipematchError: a gain other than exponential, or a measure other than nDCG@k
            without its own gains.
    """
    if gain != "exponential":
        raise RecipematchError("real-valued grades (e.g. SABER-Math's 0-5 ratings) are scored by nDCG@k under the "
                               "exponential gain only (SABER-Math's metric); declare gain: exponential")
    for m in measures:
        if m.NAME != "nDCG" or m.params.get("cutoff") is None or "gains" in m.params or m.params.get("judged_only"):
            raise RecipematchError(f"{m}: real-valued grades take nDCG@k only (trec_eval, behind "
                                   f"{LIBRARY}, keeps grades as integers)")


def measure_run(qrels: Mapping[str, Mapping[str, float]], run: Run, measures: Sequence) -> tuple[dict, pd.DataFrame]:
    """Score ``run`` against ``qrels`` with the library.

    Args:
        qrels: ``query_id -> {doc_id: integer grade}`` (graded; > 0 relevant).
        run: from :func:`topk_run`; every query of ``run`` is scored. A query with no
            relevant document left in ``qrels`` (e.g. under the strict cross-language rule)
            scores 0 on every measure, as a miss does in R@k.
        measures: from :func:`parse_measures`.

    Returns:
        ``(values, per_query)``: ``values`` maps each measure's library name to its mean over
        the run's queries (a fraction in [0, 1]); ``per_query`` has ``query_id``,
        ``n_relevant`` and one column per measure name, in ``run.query_ids`` order.

    Raises:
        RecipematchError: a non-integer grade.
    """
    import ir_measures

    sub = {q: {d: g for d, g in (qrels.get(q) or {}).items()} for q in run.query_ids}
    check_grades(sub)
    sub = {q: {d: int(g) for d, g in per_q.items()} for q, per_q in sub.items() if per_q}
    table = {str(m): {} for m in measures}
    for metric in ir_measures.iter_calc(list(measures), sub, run.for_library()):
        table[str(metric.measure)][metric.query_id] = float(metric.value)
    per_query = pd.DataFrame({"query_id": run.query_ids,
                              "n_relevant": [sum(g > 0 for g in sub.get(q, {}).values()) for q in run.query_ids]})
    values = {}
    for name, by_q in table.items():
        col = np.asarray([by_q.get(q, 0.0) for q in run.query_ids], dtype=np.float64)
        if not np.all(np.isfinite(col)):
            raise RecipematchError(f"{name}: the library returned a non-finite value")
        per_query[name] = col
        values[name] = float(col.mean()) if col.size else math.nan
    return values, per_query


def write_trec_run(path: str | os.PathLike, run: Run, tag: str = "recipematch") -> Path:
    """Write ``run`` as a TREC run file (``qid Q0 docid rank score tag``, rank from 1, the raw
    score with 7 significant digits), deterministic bytes.

    Raises:
        BeirFormatError: an id or the tag holds whitespace (the format splits on it).
    """
    path = Path(path)
    for ident in [tag, *run.query_ids]:
        if not ident or any(c.isspace() for c in ident):
            raise BeirFormatError(f"TREC run: id or tag {ident!r} is empty or holds whitespace")
    lines = []
    for q, row, sc in zip(run.query_ids, run.doc_ids, run.scores):
        for j, (d, s) in enumerate(zip(row, sc)):
            if d is None:
                break
            if any(c.isspace() for c in d):
                raise BeirFormatError(f"TREC run: document id {d!r} holds whitespace")
            lines.append(f"{q} Q0 {d} {j + 1} {float(s):.7g} {tag}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.writelines(lines)
    return path


@dataclass(frozen=True)
class GradedSpec:
    """What one evaluation computes with the library, checked against its folder
    (:func:`prepare`): the measures by the names asked for and as parsed, the gain, the
    declared grade scale, the run depth, the per-query excluded ids and the grades present."""

    names: tuple[str, ...]
    parsed: tuple
    gain: str
    scale: tuple[int, int] | None
    depth: int
    excluded: Mapping[str, Sequence[str]]
    grades: tuple[int, ...]
    #: MELD's distractor statements (:func:`recipematch.external.meld.load_distractors`), when the
    #: folder has them: the separation AUC is computed beside the measures (Appendix A)
    distractors: tuple = ()
    #: each query's candidates (:data:`CANDIDATES_FILE`: SABER-Math's reranking), when the folder has them
    candidates: Mapping[str, Sequence[str]] | None = None
    #: the qrels hold real-valued grades (module docstring): scored by :data:`REAL_VALUED_ENGINE`
    real_valued: bool = False

    @property
    def library_names(self) -> tuple[str, ...]:
        """The measures as the library names them (``nDCG@10``; an exponential nDCG carries its
        gains table), in :attr:`names` order: the names results and reports use."""
        return tuple(str(m) for m in self.parsed)

    def describe(self, run: Run) -> dict:
        """The settings a result records beside its values."""
        rerank = {"reranking": {"file": CANDIDATES_FILE, "n_queries": len(self.candidates)}} if self.candidates else {}
        return {"measure_names": dict(zip(self.names, self.library_names)),
                "measure_library": REAL_VALUED_ENGINE if self.real_valued else library_version(), **rerank,
                "gain": self.gain, "grade_scale": list(self.scale) if self.scale else None,
                "grades": list(self.grades), "run_depth": run.depth,
                "excluded": {"file": EXCLUDED_FILE if self.excluded else None,
                             "n_queries": sum(1 for q in run.query_ids if self.excluded.get(q)),
                             "applies_to": "the graded measures (R@k ranks every document)"}}


def prepare(folder: str | os.PathLike, names: Sequence[str], *, n_docs: int, split: str = "test",
            gain: str = "linear", scale: tuple[int, int] | None = None, depth: int = DEFAULT_DEPTH,
            where: str = "measure") -> GradedSpec:
    """Every graded check of one evaluation, before any model loads: the qrels' grades
    (file, line and field of the first bad one), the measure names under ``gain``, the
    excluded-ids file, and that no measure cuts deeper than the run holds.

    Args:
        folder: the BEIR folder; ``n_docs``: its corpus size (the run is capped there).
        names: measure names (:func:`parse_measures`); ``depth``: documents per query, >= 1.
        where: what an error names for a measure (``--measure``, ``evaluations.X.measures``).

    Raises:
        RecipematchError: any of the checks above.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise RecipematchError(f"run depth must be an integer >= 1, got {short_repr(depth, 40)}")
    grades = check_qrels_file(folder, split, scale, real_valued=True)
    candidates = read_candidates(folder)
    # real-valued grades, or a reranking folder under the exponential gain (SABER-Math's protocol,
    # whose subsample may happen to hold whole grades only): SABER-Math's metric, one name
    real = any(not float(g).is_integer() for g in grades) or (candidates is not None and gain == "exponential")
    if real:  # SABER-Math's ratings: nDCG@k under the exponential gain, computed as its metric code does
        parsed = parse_measures(names, gain="linear")
        try:
            check_real_valued_measures(parsed, gain)
        except RecipematchError as exc:
            raise RecipematchError(f"{where} {exc}") from None
    else:
        parsed = parse_measures(names, gain=gain, grades=grades or (0, 1))
    if candidates is not None:  # a reranking run holds a query's candidates (up to the depth)
        n_docs = max(len(v) for v in candidates.values())
        positive = positive_qrel_ids(folder, split)
        unscored = sorted(q for q in positive if q not in candidates)
        if unscored:
            raise RecipematchError(f"{Path(folder) / CANDIDATES_FILE}: query {unscored[0]!r} has qrels but no candidates")
        no_gold = sorted(q for q in candidates if q not in positive)
        if no_gold:
            raise RecipematchError(f"{Path(folder) / CANDIDATES_FILE}: query {no_gold[0]!r} has no candidate with a "
                                   "grade above 0 (BEIR's convention would leave it out of every mean)")
    run_depth = min(depth, n_docs)
    for name, m in zip(names, parsed):
        cutoff = m.params.get("cutoff")
        if run_depth < n_docs and (cutoff is None or cutoff > run_depth):
            raise RecipematchError(f"{where} {name}: cuts at {cutoff or 'the whole ranking'}, deeper than the "
                                   f"run's {run_depth} documents per query; raise the depth")
    if candidates is not None and read_excluded(folder):
        raise RecipematchError(f"{folder}: has both {CANDIDATES_FILE} and {EXCLUDED_FILE}; a reranking folder "
                               "ranks its candidates only")
    return GradedSpec(tuple(names), tuple(parsed), gain, tuple(scale) if scale else None, depth,
                      read_excluded(folder), tuple(grades), candidates=candidates or None, real_valued=real)


def score_graded(bset, model, spec: GradedSpec, *, cache_dir=None, bm25_k1: float | None = None,
                 bm25_b: float | None = None) -> tuple[dict, pd.DataFrame, Run]:
    """The run of ``model`` on ``bset`` (:func:`topk_run`, ``spec``'s depth and exclusions)
    scored by the library against the set's scored qrels (its rule applied).

    Returns:
        ``(values, per_query, run)``: ``values`` maps each of ``spec.library_names`` to its
        mean (fraction 0-1); ``per_query`` has ``query_id`` and one ``measure:<library name>``
        column per measure (fractions), in ``bset.query_ids`` order.

    Raises:
        RecipematchError: as :func:`topk_run` and :func:`measure_run`.
    """
    import tempfile

    from recipematch.scoring import scored_qrels  # lazy: recipematch.scoring pulls in torch

    with tempfile.TemporaryDirectory() as tmp:  # without a cache: the encoder's vectors once more, not its work
        run = topk_run(bset, model, spec.depth, cache_dir=cache_dir or tmp, bm25_k1=bm25_k1, bm25_b=bm25_b,
                       exclude=spec.excluded, candidates=spec.candidates)
    if spec.real_valued:
        values, table = measure_real_valued(scored_qrels(bset), run, spec.parsed, spec.gain)
    else:
        values, table = measure_run(scored_qrels(bset), run, spec.parsed)
    table = table.drop(columns=["n_relevant"]).rename(columns=lambda c: c if c == "query_id" else MEASURE_PREFIX + c)
    return values, table, run


def check_declared_measures(p) -> None:
    """Every declared evaluation's graded measures parse as the library's under its gain
    (Section 6; ``params.yaml`` ``evaluations.<name>.measures``). Called by ``params --check``
    and at the door of every scoring stage, before any model.

    Raises:
        RecipematchError: ``evaluations.<name>.measures: ...``.
    """
    for name, ev in sorted(p.evaluations.items()):
        if ev.measures:
            try:
                parse_measures(ev.measures, gain=ev.gain, grades=tuple(ev.grade_scale) or (0, 1))
            except RecipematchError as exc:
                raise RecipematchError(f"evaluations.{name}.measures: {exc}") from None
