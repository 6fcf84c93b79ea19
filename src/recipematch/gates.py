"""Contamination gates (paper Section 3 and Appendix B).

An *exclusion list* names the corpus ids that no training row may use, and the hashes of
every evaluation text (queries, golds, distractors), so that a positive or negative that
restates an evaluation text is caught even when it is not a corpus problem.

* **v1** (the gate the paper's headline arms used): a corpus id is excluded when its text
  equals an evaluation text after whitespace normalisation (:func:`norm_v1`).
* **v2** (corrected): the same match after also stripping a leading OCR ``Problem:`` header
  and image placeholders (:func:`norm_v2`), then the union with the corpus's own internal
  duplicates: every corpus id whose v2 text equals that of an excluded id is excluded too.
* **n-gram gate**: word 5-gram containment above a threshold (0.35) in EITHER direction
  (Appendix B: the paper checked one direction and missed 11 sources).

The gates cannot be switched off: a stage chooses which version is active, never "none".
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from recipematch.io import sha256_text

from recipematch.rules import GATE_VERSIONS  # noqa: F401 (re-exported)

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
    header (12,498 of 27,817 MathNet problems start with it; Appendix B)."""
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
        extra_ids: ids excluded outright, corpus problems or not (held-out sources, and every
            query and gold id of the evaluations; Appendix B: "plus the 779 ids that are
            queries or golds of the duplicate evaluation").

    Returns:
        The list; ``reasons`` says for each id whether it matched an evaluation text, was
        named outright, or (v2 only) duplicates an excluded id inside the corpus.
    """
    norm = normaliser(version)
    eval_hashes = {sha256_text(norm(t)) for t in eval_texts}
    reasons: dict[str, str] = {}
    for d in extra_ids:
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


def word_ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """Set of lowercase word n-grams (``\\w+`` tokens, Unicode-aware); empty when the text
    has fewer than ``n`` words."""
    words = [w.lower() for w in _WORD.findall(text)]
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


class NgramGate:
    """Word n-gram containment gate in both directions (Appendix B).

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

    def __init__(self, eval_texts: Iterable[str], *, n: int, threshold: float) -> None:
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
    """Embedding-cosine gate (Appendix B: cosine ≥ 0.9, used for MELD).

    A text is flagged when its cosine similarity to some evaluation text reaches
    ``threshold``, both embedded by ``encoder`` (any object with ``encode(list[str]) ->
    (n, d)`` float32 unit rows, e.g. :class:`recipematch.retrieval.MemoisedEncoder`).

    Args:
        eval_embeddings: ``(n_eval, d)`` float32, unit rows.
        encoder: encodes the texts to check.
        threshold: cosine in [-1, 1] at or above which a text is dropped.
        encode: optional ``encode(texts) -> (n, d)`` used instead of ``encoder.encode`` (e.g.
            backed by the on-disk embedding cache, so the validate and train stages reuse
            each other's encodings of the same file).

    Raises:
        ValueError: ``threshold`` outside [-1, 1] or embeddings not 2-D.
    """

    def __init__(self, eval_embeddings, encoder, *, threshold: float, encode=None) -> None:
        import numpy as np

        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"cosine threshold must lie in [-1, 1], got {threshold}")
        emb = np.asarray(eval_embeddings, dtype=np.float32)
        if emb.ndim != 2:
            raise ValueError(f"eval_embeddings must be 2-D, got shape {emb.shape}")
        self.eval_embeddings = emb
        self.encoder = encoder
        self.threshold = threshold
        self._encode = encode or (lambda texts: encoder.encode(texts))

    def max_cosine(self, texts: Sequence[str]):
        """``(len(texts),)`` float32: each text's largest cosine to any evaluation text."""
        import numpy as np

        if not len(texts) or not len(self.eval_embeddings):
            return np.zeros(len(texts), dtype=np.float32)
        emb = np.asarray(self._encode(list(texts)), dtype=np.float32)  # (n, d)
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


class ContaminationGate:
    """The one contamination rule (paper Section 3, Appendix B), applied identically where
    cell rows are built, where they are validated and inside the trainer.

    A row is dropped when (checked in this order, the first reason recorded):

    1. its source is held out for evaluation (``heldout_source``);
    2. its anchor id is on the exclusion list (``exclusion_<v>_anchor_id``);
    3. its anchor or positive normalises to an evaluation text (``exclusion_<v>_anchor_text``,
       ``exclusion_<v>_positive_text``);
    4. its anchor or positive shares word n-grams with an evaluation text above the
       threshold in either direction (``ngram_containment``);
    5. its anchor or positive reaches the cosine threshold against an evaluation text with
       the base model (``cosine_gate``; only when a :class:`CosineGate` is given).

    A negative is removed from its row for reasons 3–5 (``exclusion_<v>_negative_text``,
    ``ngram_containment``, ``cosine_gate``).

    Args:
        exclusion: the active exclusion list.
        ngram: the n-gram gate over the evaluation texts.
        heldout_sources: source ids held out for evaluation.
        cosine: the embedding-cosine gate, or ``None`` where no encoder is at hand (then
            reason 5 is not checked and :attr:`complete` is False).
    """

    def __init__(self, exclusion: ExclusionList, ngram: NgramGate, heldout_sources: Iterable[str] = (),
                 cosine: CosineGate | None = None) -> None:
        self.exclusion = exclusion
        self.ngram = ngram
        self.heldout = frozenset(heldout_sources)
        self.cosine = cosine
        self._ids = frozenset(exclusion.ids)

    @property
    def complete(self) -> bool:
        """True when every check, the cosine one included, is applied."""
        return self.cosine is not None

    def row_reason(self, row: Mapping) -> str | None:
        """The first non-cosine reason to drop ``row`` (``None`` when it passes)."""
        v = self.exclusion.version
        if row["source_id"] in self.heldout:
            return "heldout_source"
        if row["source_id"] in self._ids:
            return f"exclusion_{v}_anchor_id"
        if self.exclusion.hits_text(row["anchor"]):
            return f"exclusion_{v}_anchor_text"
        if self.exclusion.hits_text(row["positive"]):
            return f"exclusion_{v}_positive_text"
        if self.ngram.flags(row["anchor"]) or self.ngram.flags(row["positive"]):
            return "ngram_containment"
        return None

    def negative_reason(self, text: str) -> str | None:
        """The first non-cosine reason to remove a negative (``None`` when it passes)."""
        if self.exclusion.hits_text(text):
            return f"exclusion_{self.exclusion.version}_negative_text"
        if self.ngram.flags(text):
            return "ngram_containment"
        return None

    def apply(self, rows: Sequence[Mapping], *, cosine: bool = True) -> tuple[list[dict], dict[str, int], list[dict]]:
        """Gate ``rows``.

        Args:
            rows: pair rows ``{source_id, anchor, positive, negatives: [{text}]}``.
            cosine: also apply the cosine check (when the gate has one). The cells stage
                passes False and applies :meth:`cosine_filter` lazily in the budget walk
                (same rule, fewer texts to encode).

        Returns:
            ``(kept_rows, counts, drop_records)``; counts are keyed
            ``rows_dropped.<reason>``, ``negatives_dropped.<reason>`` and ``rows_kept``.
        """
        counts: dict[str, int] = defaultdict(int)
        drops: list[dict] = []
        kept = []
        for r in rows:
            reason = self.row_reason(r)
            if reason:
                counts[f"rows_dropped.{reason}"] += 1
                drops.append({"source_id": r["source_id"], "what": "row", "reason": reason})
                continue
            negs = []
            for n in r.get("negatives") or []:
                nreason = self.negative_reason(n["text"])
                if nreason:
                    counts[f"negatives_dropped.{nreason}"] += 1
                    drops.append({"source_id": r["source_id"], "what": "negative", "reason": nreason,
                                  "text_head": n["text"][:80]})
                else:
                    negs.append(n)
            kept.append({**r, "negatives": negs})
        if cosine and self.cosine is not None:
            kept, cdrops = self.cosine.filter_rows(kept)
            for d in cdrops:
                counts[f"{'rows' if d['what'] == 'row' else 'negatives'}_dropped.cosine_gate"] += 1
            drops.extend(cdrops)
        counts["rows_kept"] = len(kept)
        return kept, dict(sorted(counts.items())), drops

    def cosine_filter(self, rows: Sequence[Mapping]) -> tuple[list[dict], list[dict]]:
        """Only the cosine check: ``(kept, dropped_records)`` (identity without a cosine gate)."""
        if self.cosine is None:
            return [dict(r) for r in rows], []
        return self.cosine.filter_rows(rows)

    def violations(self, rows: Sequence[Mapping]) -> list[str]:
        """Per row, every reason the gate would drop it or one of its negatives, joined by
        ``"; "`` (``""`` when the row passes whole) — the column Great Expectations checks."""
        out = []
        cos_flags: list[bool] = [False] * len(rows)
        if self.cosine is not None and rows:
            texts, spans = [], []
            for r in rows:
                t = [r["anchor"], r["positive"], *[n["text"] for n in r.get("negatives") or []]]
                spans.append((len(texts), len(texts) + len(t)))
                texts += t
            cos = self.cosine.max_cosine(texts)
            cos_flags = [bool((cos[a:b] >= self.cosine.threshold).any()) for a, b in spans]
        for r, cf in zip(rows, cos_flags):
            reasons = []
            if (rr := self.row_reason(r)) is not None:
                reasons.append(rr)
            for n in r.get("negatives") or []:
                if (nr := self.negative_reason(n["text"])) is not None:
                    reasons.append(f"negative:{nr}")
            if cf:
                reasons.append("cosine_gate")
            out.append("; ".join(reasons))
        return out
