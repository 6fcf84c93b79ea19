"""Contamination gates (SPEC §4; paper Section 3 and Appendix B).

An *exclusion list* names the corpus ids that no training row may use, and the hashes of
every evaluation text (queries, golds, distractors), so that a positive or negative that
restates an evaluation text is caught even when it is not a corpus problem.

* **v1** (the gate the paper's headline arms used): a corpus id is excluded when its text
  equals an evaluation text after whitespace normalisation (:func:`norm_v1`).
* **v2** (corrected): the same match after also stripping a leading OCR ``Problem:`` header
  and image placeholders (:func:`norm_v2`), then the union with the corpus's own internal
  duplicates: every corpus id whose v2 text equals that of an excluded id is excluded too.
* **n-gram gate**: word 5-gram containment above a threshold (0.35) in EITHER direction
  (SPEC §4: the paper checked one direction and missed 11 sources).

The gates cannot be switched off: a stage chooses which version is active, never "none".
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from recipematch.io import sha256_text

GATE_VERSIONS = ("v1", "v2")

_WS = re.compile(r"\s+")
_HEADER = re.compile(r"^\s*(?:\*\*)?problem(?:\*\*)?\s*[:.]\s*", re.IGNORECASE)
# Markdown images ``![alt](file)``, HTML ``<img ...>`` and bracketed placeholders.
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)|<img\b[^>]*>|\[(?:image|figure)[^\]]*\]", re.IGNORECASE)
_WORD = re.compile(r"\w+", re.UNICODE)


def norm_v1(text: str) -> str:
    """v1 normal form: runs of whitespace collapsed to one space, ends stripped (Appendix B)."""
    return _WS.sub(" ", text).strip()


def norm_v2(text: str) -> str:
    """v2 normal form: v1, after removing image placeholders and a leading ``Problem:``
    header (12,498 of 27,817 MathNet problems start with it; SPEC §4)."""
    t = _IMAGE.sub(" ", text)
    t = _HEADER.sub("", t, count=1)
    return norm_v1(t)


def normaliser(version: str):
    """The text normaliser of a gate version.

    Raises:
        ValueError: for a version other than ``"v1"`` or ``"v2"``.
    """
    if version == "v1":
        return norm_v1
    if version == "v2":
        return norm_v2
    raise ValueError(f"unknown gate version {version!r}; expected one of {GATE_VERSIONS} (gates cannot be switched off)")


@dataclass(frozen=True)
class ExclusionList:
    """A versioned exclusion list.

    Attributes:
        version: ``"v1"`` or ``"v2"``.
        ids: excluded corpus ids, sorted.
        text_hashes: SHA-256 of the normalised evaluation texts, sorted.
        reasons: per excluded id, why (``eval_text_match`` or ``internal_duplicate``).
    """

    version: str
    ids: tuple[str, ...]
    text_hashes: tuple[str, ...]
    reasons: Mapping[str, str]

    def to_json(self) -> dict:
        return {"version": self.version, "ids": list(self.ids), "text_hashes": list(self.text_hashes),
                "reasons": {k: self.reasons[k] for k in sorted(self.reasons)}}

    @classmethod
    def from_json(cls, obj: Mapping) -> "ExclusionList":
        if obj.get("version") not in GATE_VERSIONS:
            raise ValueError(f"exclusion list has unknown version {obj.get('version')!r}")
        return cls(version=obj["version"], ids=tuple(obj["ids"]), text_hashes=tuple(obj["text_hashes"]),
                   reasons=dict(obj.get("reasons", {})))

    @functools.cached_property
    def _hash_set(self) -> frozenset[str]:
        return frozenset(self.text_hashes)

    def hits_text(self, text: str) -> bool:
        """True when ``text`` normalises (this list's version) to an evaluation text.
        Non-string input is never a hit (validation reports it separately)."""
        if not isinstance(text, str):
            return False
        return sha256_text(normaliser(self.version)(text)) in self._hash_set


def build_exclusion_list(corpus: Sequence[tuple[str, str]], eval_texts: Iterable[str], version: str,
                         extra_ids: Iterable[str] = ()) -> ExclusionList:
    """Build the v1 or v2 exclusion list.

    Args:
        corpus: ``(doc_id, text)`` for every corpus problem.
        eval_texts: every text an evaluation shows a model (queries, golds, distractors).
        version: ``"v1"`` or ``"v2"``.
        extra_ids: corpus ids excluded outright (e.g. the duplicate evaluation's members,
            SPEC §4: "plus the 779 ids that are queries or golds of the duplicate evaluation").

    Returns:
        The list; ``reasons`` says for each id whether it matched an evaluation text, was
        named outright, or (v2 only) duplicates an excluded id inside the corpus.
    """
    norm = normaliser(version)
    eval_hashes = {sha256_text(norm(t)) for t in eval_texts}
    reasons: dict[str, str] = {}
    corpus_ids = {d for d, _ in corpus}
    for d in extra_ids:
        if d in corpus_ids:
            reasons[d] = "named"
    by_hash: dict[str, list[str]] = defaultdict(list)
    for doc_id, text in corpus:
        h = sha256_text(norm(text))
        by_hash[h].append(doc_id)
        if h in eval_hashes and doc_id not in reasons:
            reasons[doc_id] = "eval_text_match"
    if version == "v2":
        for members in by_hash.values():
            if len(members) > 1 and any(m in reasons for m in members):
                for m in members:
                    reasons.setdefault(m, "internal_duplicate")
        # the excluded problems' own texts are evaluation-adjacent: block restatements of them
        excluded_texts = {sha256_text(norm(t)) for d, t in corpus if d in reasons}
        eval_hashes |= excluded_texts
    return ExclusionList(version=version, ids=tuple(sorted(reasons)), text_hashes=tuple(sorted(eval_hashes)),
                         reasons=reasons)


def word_ngrams(text: str, n: int = 5) -> set[tuple[str, ...]]:
    """Set of lowercase word n-grams (``\\w+`` tokens, Unicode-aware); empty when the text
    has fewer than ``n`` words."""
    words = [w.lower() for w in _WORD.findall(text)]
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


class NgramGate:
    """Word n-gram containment gate in both directions (SPEC §4).

    ``containment(a, b) = |G(a) ∩ G(b)| / |G(a)|`` with ``G`` the word n-gram set. A text
    is flagged when, for some evaluation text ``e``, ``containment(text, e) > threshold``
    OR ``containment(e, text) > threshold``.

    Args:
        eval_texts: the evaluation texts (queries, golds, distractors).
        n: n-gram length in words (5 in the paper).
        threshold: containment above which a text is dropped (0.35 in the paper), in [0, 1].

    Raises:
        ValueError: ``n < 1`` or ``threshold`` outside [0, 1].
    """

    def __init__(self, eval_texts: Iterable[str], *, n: int = 5, threshold: float = 0.35) -> None:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must lie in [0, 1], got {threshold}")
        self.n = n
        self.threshold = threshold
        self._sizes: list[int] = []
        self._index: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for i, t in enumerate(eval_texts):
            grams = word_ngrams(t, n)
            self._sizes.append(len(grams))
            for g in grams:
                self._index[g].append(i)

    def max_containment(self, text: str) -> tuple[float, int | None]:
        """Largest containment in either direction against any evaluation text, with the
        index of that evaluation text (``None`` when nothing is shared)."""
        grams = word_ngrams(text, self.n)
        if not grams:
            return 0.0, None
        shared: Counter[int] = Counter()
        for g in grams:
            for i in self._index.get(g, ()):
                shared[i] += 1
        best, best_i = 0.0, None
        for i, s in sorted(shared.items()):
            c = max(s / len(grams), s / self._sizes[i] if self._sizes[i] else 0.0)
            if c > best:
                best, best_i = c, i
        return best, best_i

    def flags(self, text: str) -> bool:
        """True when ``text`` must be dropped."""
        return self.max_containment(text)[0] > self.threshold


class CosineGate:
    """Embedding-cosine gate (SPEC §4: cosine ≥ 0.9, used for MELD).

    A text is flagged when its cosine similarity to some evaluation text reaches
    ``threshold``, both embedded by ``encoder`` (any object with ``encode(list[str]) ->
    (n, d)`` float32 unit rows, e.g. :class:`recipematch.retrieval.MemoisedEncoder`).

    Args:
        eval_embeddings: ``(n_eval, d)`` float32, unit rows.
        encoder: encodes the texts to check.
        threshold: cosine in [-1, 1] at or above which a text is dropped.

    Raises:
        ValueError: ``threshold`` outside [-1, 1] or embeddings not 2-D.
    """

    def __init__(self, eval_embeddings, encoder, *, threshold: float = 0.9) -> None:
        import numpy as np

        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"cosine threshold must lie in [-1, 1], got {threshold}")
        emb = np.asarray(eval_embeddings, dtype=np.float32)
        if emb.ndim != 2:
            raise ValueError(f"eval_embeddings must be 2-D, got shape {emb.shape}")
        self.eval_embeddings = emb
        self.encoder = encoder
        self.threshold = threshold

    def max_cosine(self, texts: Sequence[str]):
        """``(len(texts),)`` float32: each text's largest cosine to any evaluation text."""
        import numpy as np

        if not len(texts) or not len(self.eval_embeddings):
            return np.zeros(len(texts), dtype=np.float32)
        emb = np.asarray(self.encoder.encode(list(texts)), dtype=np.float32)  # (n, d)
        return (emb @ self.eval_embeddings.T).max(axis=1)

    def filter_rows(self, rows: Sequence[Mapping]) -> tuple[list[dict], list[dict]]:
        """Split rows into (kept, dropped); a row is dropped when its anchor or positive is
        flagged, and a flagged negative is removed from its row. Dropped records carry the
        reason ``cosine_gate`` and the cosine."""
        texts: list[str] = []
        for r in rows:
            texts += [r["anchor"], r["positive"], *[n["text"] for n in r.get("negatives") or []]]
        cos = self.max_cosine(texts)
        kept, dropped, i = [], [], 0
        for r in rows:
            negs = r.get("negatives") or []
            c_anchor, c_pos = float(cos[i]), float(cos[i + 1])
            c_negs = [float(c) for c in cos[i + 2:i + 2 + len(negs)]]
            i += 2 + len(negs)
            if max(c_anchor, c_pos) >= self.threshold:
                dropped.append({"source_id": r["source_id"], "what": "row", "reason": "cosine_gate",
                                "cosine": round(max(c_anchor, c_pos), 4)})
                continue
            keep_negs = []
            for n, c in zip(negs, c_negs):
                if c >= self.threshold:
                    dropped.append({"source_id": r["source_id"], "what": "negative", "reason": "cosine_gate",
                                    "cosine": round(c, 4)})
                else:
                    keep_negs.append(n)
            kept.append({**r, "negatives": keep_negs})
        return kept, dropped
