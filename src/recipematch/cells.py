"""Factorial cells and the matched budget (paper Tables 2, 11–12; Appendix A).

A *cell* is positives × negatives × negative volume. Positives come from one generator's
pair file (``cas``, ``d1``, ``d4``, … ); negatives are attached per source from another
generator's rows (``none``, ``cas``, ``recipe``, ``unrelated``, ``own``). The named *arms* are cells:

=========  =========  =========  ======
arm        positives  negatives  volume
=========  =========  =========  ======
verified   cas        cas        full
recipe     d1         recipe     full
reference  d4         cas        full
d4         d4         none       full
=========  =========  =========  ======

Attachment rules (Tables 11–12):

* same generator for both (``cas``×``cas``, ``d1``×``recipe``, and ``own`` negatives: D2 and
  D3 on the near-misses their own prompts wrote, the middle rungs of Table 9): a row keeps
  its own negatives;
* ``cas`` negatives on other positives: each positive row takes the negatives of ONE computer-
  algebra row of the same source, chosen once at random (seeded) when the file is built;
* LLM negatives (``recipe``, ``unrelated``) on other positives: the negatives of that source's
  row; with volume ``matched`` only the first k, k = the count the same source carries in
  the reference cell (D4 × CAS); ``full`` keeps all of them.

A source with no partner row is dropped and counted (``no_partner``).

The budget (:func:`budget_rows`): sources in a seeded random order, their rows kept together
and listed source after source, truncated to exactly ``rows`` rows — so a smaller budget is
a prefix of the same order; dev sources (5%) chosen by a seeded hash of the source id, so
no source is in both splits.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from recipematch.gates import ContaminationGate, ExclusionList, NgramGate
from recipematch.pairs import n_examples, sort_rows

from recipematch.rules import NAMED_ARMS, NEGATIVES, POSITIVES, VOLUMES, CellSpec, missing_input_message  # noqa: F401 (re-exported)


class MissingInput(RuntimeError):
    """A cell needs a pair file that this configuration does not produce."""


def _rng_for(seed: int, *parts: str) -> np.random.Generator:
    digest = hashlib.sha256("\x1f".join([str(seed), *parts]).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _by_source(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in sort_rows(rows):
        out[r["source_id"]].append(r)
    return out


def assemble_cell(spec: CellSpec, pair_files: Mapping[str, Sequence[Mapping[str, Any]]], *, seed: int) -> tuple[list[dict], dict[str, int]]:
    """Build a cell's full row pool (before gates and budget).

    Args:
        spec: the cell.
        pair_files: pair-file key (``"cas"``, ``"d1_recipe"``, …) → its rows.
        seed: seeds the one-time random choice of a CAS partner row per source.

    Returns:
        ``(rows, counts)``; counts hold ``sources_in``, ``no_partner`` and ``rows_out``.

    Raises:
        MissingInput: a needed pair file is absent; the message names the pair file and the
            prompt or generator that writes it (``"no input for positives=d2: pair file
            'd2_paraphrase' ..."``).
    """
    for key in spec.inputs():
        if key not in pair_files:
            raise MissingInput(missing_input_message(spec, key))
    pos = _by_source(pair_files[POSITIVES[spec.positives]])
    counts = {"sources_in": len(pos), "no_partner": 0, "rows_out": 0}
    neg_key = spec.negatives_key
    if neg_key is None:
        rows = [{**r, "negatives": []} for rs in pos.values() for r in rs]
    elif spec._own:
        rows = [r for rs in pos.values() for r in rs]
    else:
        partners = _by_source(pair_files[neg_key])
        matched_k: dict[str, int] | None = None
        if spec.volume == "matched" and neg_key != "cas":
            ref_rows, _ = assemble_cell(NAMED_ARMS["reference"], pair_files, seed=seed)
            matched_k = {}
            for r in ref_rows:
                matched_k[r["source_id"]] = len(r["negatives"])
        rows = []
        for sid, rs in pos.items():
            cand = partners.get(sid)
            if not cand or (matched_k is not None and sid not in matched_k):
                counts["no_partner"] += 1
                continue
            if neg_key == "cas":
                pick = cand[int(_rng_for(seed, "cas-partner", sid).integers(len(cand)))]
                negs = pick["negatives"]
            else:
                negs = [n for c in cand for n in c["negatives"]]
                if matched_k is not None:
                    negs = negs[: matched_k[sid]]
            rows.extend({**r, "negatives": list(negs)} for r in rs)
    rows = sort_rows(rows)
    counts["rows_out"] = len(rows)
    return rows, counts


def apply_gates(rows: Sequence[Mapping[str, Any]], exclusion: ExclusionList, ngram: NgramGate,
                heldout_sources: set[str] = frozenset()) -> tuple[list[dict], dict[str, int], list[dict]]:
    """The contamination gate's cheap checks on a cell pool (no cosine): a shorthand for
    ``ContaminationGate(exclusion, ngram, heldout_sources).apply(rows, cosine=False)``
    (paper Section 3, Appendix B; the rule itself lives in :mod:`recipematch.gates`).

    Returns:
        ``(kept_rows, counts, drop_records)``.
    """
    return ContaminationGate(exclusion, ngram, heldout_sources).apply(rows, cosine=False)


def is_dev_source(source_id: str, *, seed: int, dev_fraction: float) -> bool:
    """Seeded, order-free dev assignment: the source's hash falls below ``dev_fraction``."""
    h = int.from_bytes(hashlib.sha256(f"dev\x1f{seed}\x1f{source_id}".encode()).digest()[:8], "little")
    return h / 2**64 < dev_fraction


def budget_rows(rows: Sequence[Mapping[str, Any]], *, n_rows: int, seed: int, dev_fraction: float = 0.05,
                max_rows_per_source: int | None = None,
                row_filter: Callable[[list[dict]], tuple[list[dict], list[dict]]] | None = None,
                source_list: Sequence[str] | None = None) -> tuple[list[dict], dict[str, Any]]:
    """Matched budget: seeded shuffle-then-truncate with sources kept together (Appendix A).

    Sources are put in a random order drawn from ``seed``; their rows (canonical order inside
    a source) are listed source after source and the list is cut at exactly ``n_rows`` rows,
    so a smaller budget is a prefix of the same order (the last source may be cut). Each row
    gets ``split`` = ``"dev"`` when its source is a dev source (:func:`is_dev_source`), else
    ``"train"``. When no selected source falls in dev, the last whole source becomes dev, so a
    dev split always exists.

    Args:
        rows: the gated pool of one cell.
        n_rows: the budget (row count), ≥ 1.
        seed: the training seed (each seed draws its own rows).
        dev_fraction: share of sources held out for checkpoint selection, in (0, 1).
        max_rows_per_source: keep at most this many rows of a source, drawn with ``seed`` and
            the source id (independently of the budget, so prefixes stay nested). The peer's
            released verified and D1 files hold one row per source; ``None`` keeps all.
        row_filter: an expensive gate applied lazily to each source's rows when the walk
            reaches that source (e.g. :meth:`recipematch.gates.CosineGate.filter_rows`); it
            returns ``(kept, dropped_records)``. Deterministic filters keep prefixes nested.
        source_list: when given, only these sources are drawn from (two arms trained on one
            source list: pass the intersection of their pools; Appendix A).

    Returns:
        ``(rows_with_split, info)``; info holds ``requested``, ``available``, ``selected``,
        ``sources``, ``dev_sources``, ``train_examples``, ``dev_examples``. When the pool is
        smaller than the budget the result is short and validation fails on it.

    Raises:
        ValueError: ``n_rows < 1`` or ``dev_fraction`` outside (0, 1).
    """
    if n_rows < 1:
        raise ValueError(f"budget rows must be >= 1, got {n_rows}")
    if not 0.0 < dev_fraction < 1.0:
        raise ValueError(f"dev_fraction must lie in (0, 1), got {dev_fraction}")
    groups = _by_source(rows)
    if max_rows_per_source is not None:
        if max_rows_per_source < 1:
            raise ValueError(f"max_rows_per_source must be >= 1, got {max_rows_per_source}")
        for sid, rs in groups.items():
            if len(rs) > max_rows_per_source:
                keep = _rng_for(seed, "rows-of-source", sid).permutation(len(rs))[:max_rows_per_source]
                groups[sid] = [rs[i] for i in sorted(keep)]
    if source_list is not None:
        allowed = set(source_list)
        groups = {k: v for k, v in groups.items() if k in allowed}
    order = sorted(groups)
    perm = np.random.default_rng(seed).permutation(len(order))
    ordered = [order[i] for i in perm]
    out: list[dict] = []
    filtered: list[dict] = []
    i = 0
    while len(out) < n_rows and i < len(ordered):
        # the filter runs on a block of the next sources at once (one batched encoding
        # instead of one per source); a deterministic filter gives the same rows as a
        # source-by-source walk, and drops are recorded only for sources the walk reaches
        block = ordered[i:i + max(16, n_rows - len(out))]
        i += len(block)
        kept_by: dict[str, list[dict]] = {sid: groups[sid] for sid in block}
        dropped_by: dict[str, list[dict]] = defaultdict(list)
        if row_filter is not None:
            kept, dropped = row_filter([r for sid in block for r in groups[sid]])
            kept_by = defaultdict(list)
            for r in kept:
                kept_by[r["source_id"]].append(r)
            for d in dropped:
                dropped_by[d["source_id"]].append(d)
        for sid in block:
            if len(out) >= n_rows:
                break
            filtered.extend(dropped_by.get(sid, ()))
            out.extend(kept_by.get(sid, [])[: n_rows - len(out)])
    srcs = list(dict.fromkeys(r["source_id"] for r in out))
    dev = {s for s in srcs if is_dev_source(s, seed=seed, dev_fraction=dev_fraction)}
    if not dev and len(srcs) >= 2:
        # the last source whose rows are all in (cut sources are fine too: still whole in dev)
        dev = {srcs[-1]}
    if len(dev) == len(srcs) and len(srcs) >= 2:
        # every source hashed into dev (tiny budgets): keep only the first ceil(frac * n)
        dev = set(srcs[: max(1, math.ceil(len(srcs) * dev_fraction))])
    result = [{**r, "split": "dev" if r["source_id"] in dev else "train"} for r in out]
    info = {
        "requested": n_rows, "available": len(rows), "selected": len(result), "sources": len(srcs),
        "dev_sources": len(dev),
        "train_examples": sum(n_examples(r) for r in result if r["split"] == "train"),
        "dev_examples": sum(n_examples(r) for r in result if r["split"] == "dev"),
        "negatives_per_row": round(sum(len(r["negatives"]) for r in result) / len(result), 4) if result else 0.0,
    }
    info["max_rows_per_source"] = max_rows_per_source
    info["filtered"] = filtered
    info["source_list"] = None if source_list is None else len(set(source_list))
    return result, info
