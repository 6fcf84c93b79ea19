"""Replay rows for the data-space remedy of paper Appendix E (Table 19): general query →
document pairs that are neither built the benchmark's way nor the verified arm's way.

The paper mixes 12,000 problem → solution rows into V1 and V2. The sample ships no
solutions, so the default builds inverse-cloze rows instead (Lee et al., 2019's inverse cloze
task, a standard self-supervised retrieval objective): for a corpus problem of at least two
sentences, one sentence drawn with a seed is the anchor and the problem without that
sentence is the positive. No LLM and no computer algebra touch them. Rows that touch an
evaluation are removed later by the one contamination gate (Appendix B), when a mix stage
loads the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from recipematch.errors import RecipematchError

#: a TeX math span ($…$, $$…$$, \(…\), \[…\]): a sentence never ends inside one
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$]*\$|\\\(.*?\\\)|\\\[.*?\\\]", re.S)
#: a sentence end: . ! ? (or the full-width ones) followed by blanks
_END = re.compile(r"[.!?。！？](?=\s)")


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` in order, stripped, empty ones left out: cut after ``.``,
    ``!`` or ``?`` followed by a blank, never inside a TeX math span, and at blank lines.

    Args:
        text: a problem statement (any language; TeX kept as written).

    Returns:
        Sentences whose concatenation, blanks aside, is ``text``.
    """
    if not isinstance(text, str):
        raise RecipematchError(f"sentences: expected a string, got {type(text).__name__}")
    inside = np.zeros(len(text) + 1, dtype=bool)
    for m in _MATH.finditer(text):
        inside[m.start():m.end()] = True
    cuts = [m.end() for m in _END.finditer(text) if not inside[m.start()]]
    cuts += [m.start() for m in re.finditer(r"\n\s*\n", text) if not inside[m.start()]]
    out, start = [], 0
    for c in sorted(set(cuts)):
        piece = text[start:c].strip()
        if piece:
            out.append(piece)
        start = c
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


def inverse_cloze_rows(corpus: Iterable[Mapping[str, Any]], *, seed: int,
                       min_chars: int = 20) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """One inverse-cloze pair row per corpus problem that has one.

    A problem's sentences of at least ``min_chars`` characters are the candidate anchors; one
    is drawn with ``numpy.random.default_rng([seed, i])`` (``i``: the row's position), so a
    row's choice does not depend on the other rows. The positive is the problem's other
    sentences, joined by a blank, in order. A problem with fewer than two sentences, or no
    candidate anchor, gives no row and is counted.

    Args:
        corpus: rows with ``doc_id`` (non-empty string) and ``text`` (string), in corpus order.
        seed: the ``remedies.ict_seed``.
        min_chars: shortest anchor, in characters (>= 1).

    Returns:
        ``(rows, counts)``: pair rows ``{source_id, anchor, positive, negatives: [],
        replay_kind: "inverse_cloze"}`` in corpus order, and ``{problems, rows,
        skipped.one_sentence, skipped.no_anchor}``.

    Raises:
        RecipematchError: a row without a ``doc_id`` string or a ``text`` string (naming the
            row), or ``min_chars`` < 1.
    """
    if min_chars < 1:
        raise RecipematchError(f"remedies.ict_min_chars must be at least 1, got {min_chars}")
    rows: list[dict[str, Any]] = []
    counts = {"problems": 0, "rows": 0, "skipped.one_sentence": 0, "skipped.no_anchor": 0}
    for i, r in enumerate(corpus):
        doc_id, text = r.get("doc_id"), r.get("text")
        if not isinstance(doc_id, str) or not doc_id or not isinstance(text, str):
            raise RecipematchError(f"corpus row {i}: needs a doc_id and a text string, got "
                                   f"doc_id={doc_id!r}, text of type {type(text).__name__}")
        counts["problems"] += 1
        sents = sentences(text)
        if len(sents) < 2:
            counts["skipped.one_sentence"] += 1
            continue
        cand = [j for j, s in enumerate(sents) if len(s) >= min_chars]
        if not cand:
            counts["skipped.no_anchor"] += 1
            continue
        k = cand[int(np.random.default_rng([seed, i]).integers(len(cand)))]
        rows.append({"source_id": doc_id, "anchor": sents[k],
                     "positive": " ".join(s for j, s in enumerate(sents) if j != k), "negatives": [],
                     "replay_kind": "inverse_cloze"})
    counts["rows"] = len(rows)
    return rows, counts
