"""MELD as a BEIR folder, its separation AUC, and the MELD attack's released rows (the paper,
Section 6, Table 20 and Appendix D).

MELD (Hugging Face ``uw-math-ai/MELD-dataset``, Apache-2.0; introduced with the MathLeap
embedders) holds 270 pairs of mathematically equivalent statements, each pair written in two
subfield "dialects" (nine domains x 30 pairs, 18 framings), and 541 lexically similar but
false distractor statements grouped by framing. Its two files, as the dataset card and the
peer's harness read them:

- ``adversarial_theorem_pairs_2.json``: ``{"pairs": [{"domain": str, "entry_1": {"statement":
  str, "framing": str, ...}, "entry_2": {...}, ...}, ...]}``;
- ``distractors_all.json``: ``{framing: [statement, ...], ...}``.

MELD ships no evaluation code; its paper describes the protocol the peer reimplemented
(Appendix A of the paper): **pairs only**, each of the 540 statements queries the other 539 and
its gold is its partner (R@1 the headline), and a **separation AUC**: how well a model's cosine
separates each statement's partner (540 positive scores) from the distractors (every query
against every distractor, and against only the distractors written in the partner's framing,
the hardest setting by the dataset card). Intervals resample the 270 pairs as clusters.

Rules of the folder this loader writes (subset ``pairs_only``):

- pair ``i`` (file order) gives statements ``p<i:03d>e1`` and ``p<i:03d>e2``; each is a
  document and a query under the same id with the same text, so the default self-masking rule
  (``id_and_text``) masks a query's own entry and leaves 539 candidates; qrel: the partner,
  grade 1; query metadata ``cluster_id`` = the pair (the stats stage resamples pairs), plus
  ``domain`` and ``framing``;
- ``distractors.jsonl``: one ``{"_id", "text", "framing"}`` per distractor (ids ``x<j:04d>``),
  with ``partner_framing`` recorded per query in ``queries.jsonl`` metadata; read by
  :func:`load_distractors` for :func:`separation`;
- the MELD attack's released rows are read by :mod:`recipematch.external.meld_attack`.
- refused, with file, position and field named, before anything is written: a file that is not
  JSON, a pair without ``domain`` or an entry without non-empty ``statement`` / ``framing``, a
  pair whose entries name a framing with no distractor pool in ``distractors_all.json`` (an
  unknown framing), a distractor that is not a non-empty string.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recipematch.beir import doc_text, write_beir
from recipematch.errors import RecipematchError, short_repr
from recipematch.io import BadLine, iter_jsonl, write_jsonl
from recipematch.external import check_out_folder
from recipematch.rules import EXTERNAL_SUBSETS

__all__ = ["PAIRS_FILE", "DISTRACTORS_FILE", "SUBSETS", "SOURCE", "LICENCE", "read_meld", "build_folder",
           "load_distractors", "separation_auc", "separation", "is_text"]

PAIRS_FILE = "adversarial_theorem_pairs_2.json"
DISTRACTORS_FILE = "distractors_all.json"
#: the one protocol built: MELD's pairs-only retrieval (Appendix A)
SUBSETS = EXTERNAL_SUBSETS["meld"]
SOURCE = "MELD (uw-math-ai/MELD-dataset on Hugging Face; MathLeap paper)"
LICENCE = "Apache-2.0 (MELD's dataset card)"


def _load_json(path: Path) -> Any:
    if not path.is_file():
        raise RecipematchError(f"MELD: missing file {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark is not content
    except UnicodeDecodeError as exc:
        raise RecipematchError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise RecipematchError(f"{path}:{exc.lineno}: not JSON: {exc.msg} (column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:  # an integer too long to read, nesting too deep
        raise RecipematchError(f"{path}: not usable JSON ({type(exc).__name__}: {short_repr(str(exc), 80)})") from None


def is_text(v: Any) -> bool:
    """Whether ``v`` is a non-empty string once invisible characters are dropped, writable as UTF-8 (no lone
    surrogate escape)."""
    from recipematch.retrieval.selfmask import comparable_text  # lazy: recipematch.retrieval.selfmask pulls in pandas, torch

    if not isinstance(v, str) or not comparable_text(v):
        return False
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_meld(src: str | os.PathLike) -> tuple[list[dict], dict[str, list[str]]]:
    """MELD's pairs and distractors from a local copy, checked.

    Args:
        src: folder holding :data:`PAIRS_FILE` and :data:`DISTRACTORS_FILE`.

    Returns:
        ``(pairs, distractors)``: ``[{"domain", "e1": (statement, framing), "e2": (...)}]`` in
        file order, and ``{framing: [statement, ...]}`` in file order.

    Raises:
        RecipematchError: a missing or malformed file, naming the file, the pair (or framing)
            and the field; a pair naming a framing with no distractor pool; no pairs.
    """
    src = Path(src)
    pf, df = src / PAIRS_FILE, src / DISTRACTORS_FILE
    missing = [str(p) for p in (pf, df) if not p.is_file()]
    if missing:
        raise RecipematchError(f"MELD: missing files {missing} (a local copy of uw-math-ai/MELD-dataset)")
    raw = _load_json(pf)
    dis = _load_json(df)
    if not isinstance(dis, dict) or not dis:
        raise RecipematchError(f"{df}: expected a non-empty object {{framing: [statement, ...]}}")
    distractors: dict[str, list[str]] = {}
    for fr, lst in dis.items():
        if not is_text(fr) or not isinstance(lst, list):
            raise RecipematchError(f"{df}: framing {short_repr(fr, 60)}: expected a list of statements")
        if not lst:
            raise RecipematchError(f"{df}: framing {fr!r} has no distractors (its pairs' same-framing AUC would "
                                   "silently skip them)")
        for j, s in enumerate(lst):
            if not is_text(s):
                raise RecipematchError(f"{df}: framing {fr!r}, item {j}: a distractor must be a non-empty string "
                                       f"(UTF-8, not only invisible characters), got {short_repr(s, 60)}")
        distractors[fr] = list(lst)
    pairs_raw = raw.get("pairs") if isinstance(raw, dict) else None
    if not isinstance(pairs_raw, list) or not pairs_raw:
        raise RecipematchError(f"{pf}: expected an object with a non-empty list 'pairs'")
    pairs = []
    for i, p in enumerate(pairs_raw):
        where = f"{pf}: pairs[{i}]"
        if not isinstance(p, dict):
            raise RecipematchError(f"{where}: expected an object")
        if not is_text(p.get("domain")):
            raise RecipematchError(f"{where}.domain must be a non-empty string, got {short_repr(p.get('domain'), 60)}")
        out = {"domain": p["domain"]}
        for e in ("entry_1", "entry_2"):
            ent = p.get(e)
            if not isinstance(ent, dict):
                raise RecipematchError(f"{where}.{e}: expected an object, got {short_repr(ent, 60)}")
            for f in ("statement", "framing"):
                if not is_text(ent.get(f)):
                    raise RecipematchError(f"{where}.{e}.{f} must be a non-empty string (UTF-8, not only invisible "
                                           f"characters), got {short_repr(ent.get(f), 60)}")
            if ent["framing"] not in distractors:
                raise RecipematchError(f"{where}.{e}.framing {ent['framing']!r} names no distractor pool in {df.name} "
                                       f"(framings there: {sorted(distractors)[:6]}...)")
            out["e1" if e == "entry_1" else "e2"] = (ent["statement"], ent["framing"])
        pairs.append(out)
    return pairs, distractors


def build_folder(src: str | os.PathLike, out: str | os.PathLike, subset: str = "pairs_only", *,
                 revision: str = "") -> dict:
    """Write MELD's pairs-only protocol as a BEIR folder ``out`` (rules: the module docstring).

    Returns:
        The manifest written to ``out/MANIFEST.json`` (counts: pairs, statements, distractors,
        framings, domains).

    Raises:
        RecipematchError: an unknown subset, or any check of :func:`read_meld`.
    """
    if subset not in SUBSETS:
        raise RecipematchError(f"MELD: unknown subset {short_repr(subset, 60)}; expected one of {list(SUBSETS)}")
    out = check_out_folder(out, src, "MELD")
    pairs, distractors = read_meld(src)
    corpus, queries, qrels, meta = {}, {}, {}, {}
    for i, p in enumerate(pairs):
        a, b = f"p{i:03d}e1", f"p{i:03d}e2"
        for me, other, key, okey in ((a, b, "e1", "e2"), (b, a, "e2", "e1")):
            corpus[me] = {"title": "", "text": p[key][0]}
            queries[me] = p[key][0]
            qrels[me] = {other: 1}
            meta[me] = {"cluster_id": f"p{i:03d}", "domain": p["domain"], "framing": p[key][1],
                        "partner_framing": p[okey][1]}
    rows = [{"_id": f"x{j:04d}", "text": s, "framing": fr}
            for j, (fr, s) in enumerate((fr, s) for fr, lst in distractors.items() for s in lst)]
    pf = Path(src) / PAIRS_FILE
    df = Path(src) / DISTRACTORS_FILE
    manifest = {
        "benchmark": "MELD", "subset": subset, "source": SOURCE, "revision": revision, "licence": LICENCE,
        "inputs": {pf.name: hashlib.sha256(pf.read_bytes()).hexdigest(),
                   df.name: hashlib.sha256(df.read_bytes()).hexdigest()},
        "n_pairs": len(pairs), "n_docs": len(corpus), "n_queries": len(queries), "n_qrels": len(qrels),
        "n_distractors": len(rows), "n_framings": len(distractors),
        "n_domains": len({p["domain"] for p in pairs}),
        "protocol": "pairs only: each statement queries the other statements (its own entry masked), gold = its "
                    "partner; separation AUC of partner against distractor cosines; pairs resampled as clusters",
    }
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    write_beir(tmp, corpus, queries, qrels, query_meta=meta)
    write_jsonl(tmp / "distractors.jsonl", rows)
    (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return manifest


def load_distractors(folder: str | os.PathLike) -> list[dict] | None:
    """The ``distractors.jsonl`` of a folder :func:`build_folder` wrote (``None`` when the folder
    has none: not a MELD folder).

    Raises:
        RecipematchError: a line that is not a ``{"_id", "text", "framing"}`` object of strings.
    """
    path = Path(folder) / "distractors.jsonl"
    if not path.is_file():
        return None
    rows = []
    for lineno, obj in iter_jsonl(path):
        if isinstance(obj, BadLine):
            raise RecipematchError(f"{path}:{lineno}: {obj.reason}")
        if not isinstance(obj, dict) or not all(is_text(obj.get(f)) for f in ("_id", "text", "framing")):
            raise RecipematchError(f"{path}:{lineno}: expected an object with non-empty strings _id, text and framing")
        rows.append(obj)
    if not rows:
        raise RecipematchError(f"{path}: no distractors")
    return rows


def separation_auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """ROC AUC of positive scores against negative scores (ties count one half), computed by
    scikit-learn; 0.5 is chance, 1.0 perfect separation.

    Raises:
        RecipematchError: either side empty or not finite.
    """
    from sklearn.metrics import roc_auc_score

    pos, neg = np.asarray(pos, dtype=np.float64).ravel(), np.asarray(neg, dtype=np.float64).ravel()
    if not len(pos) or not len(neg):
        raise RecipematchError(f"separation AUC needs positive and negative scores, got {len(pos)} and {len(neg)}")
    if not (np.isfinite(pos).all() and np.isfinite(neg).all()):
        raise RecipematchError("separation AUC: a score is not finite")
    y = np.concatenate([np.ones(len(pos)), np.zeros(len(neg))])
    return float(roc_auc_score(y, np.concatenate([pos, neg])))


def separation(bset, model, distractors: Sequence[Mapping[str, str]], *, cache_dir=None) -> dict[str, Any]:
    """MELD's separation measures for an encoder (Appendix A), from cosines of unit vectors.

    Positives: each query against its gold (its partner; 540 scores on the full set). Negatives:
    each query against every distractor (``auc_all``), and against only the distractors in its
    partner's framing (``auc_same_framing``); ``above_all_same_framing`` is the share of queries
    (percent) whose partner scores above every same-framing distractor.

    Args:
        bset: the MELD set (:func:`build_folder`'s folder, loaded under ``plain``); each query's
            metadata carries ``partner_framing``.
        model: an encoder (:class:`recipematch.retrieval.Encoder`).
        distractors: :func:`load_distractors`'s rows.

    Returns:
        ``{"auc_all", "auc_same_framing"}`` (0-1), ``"above_all_same_framing"`` (percent),
        ``"n_positive"``, ``"n_distractors"``.

    Raises:
        RecipematchError: a query without exactly one gold, or without ``partner_framing``.
    """
    from recipematch.retrieval.cache import encode_cached  # lazy: recipematch.retrieval.cache pulls in pandas, torch

    ids = list(bset.query_ids)
    gold = []
    for q in ids:
        g = [d for d, s in bset.qrels.get(q, {}).items() if s > 0]
        if len(g) != 1:
            raise RecipematchError(f"separation: query {q!r} has {len(g)} golds; MELD's protocol has exactly one")
        gold.append(g[0])
    pf = [(bset.query_meta.get(q) or {}).get("partner_framing") for q in ids]
    if not all(is_text(x) for x in pf):
        raise RecipematchError("separation: a query lacks metadata.partner_framing (rebuild the MELD folder)")
    q = encode_cached(model, [bset.queries[x] for x in ids], cache_dir, role="query")
    g = encode_cached(model, [doc_text(bset.corpus[d]) for d in gold], cache_dir, role="document")
    x = encode_cached(model, [r["text"] for r in distractors], cache_dir, role="document")
    pos = np.einsum("ij,ij->i", q, g)
    neg = q @ x.T  # (n_queries, n_distractors)
    by_framing: dict[str, list[int]] = defaultdict(list)
    for j, r in enumerate(distractors):
        by_framing[r["framing"]].append(j)
    same, above = [], []
    for i, fr in enumerate(pf):
        idx = by_framing.get(fr)
        if not idx:
            continue
        s = neg[i, idx]
        same.append(s)
        above.append(bool(pos[i] > s.max()))
    return {
        "auc_all": round(separation_auc(pos, neg), 6),
        "auc_same_framing": round(separation_auc(pos, np.concatenate(same)), 6) if same else None,
        "above_all_same_framing": round(100.0 * float(np.mean(above)), 4) if above else None,
        "n_positive": int(len(pos)), "n_distractors": int(len(distractors)),
    }

