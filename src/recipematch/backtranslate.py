"""Back-translation control: a paraphrase no LLM wrote (paper Appendix C).

Each source problem goes out to a pivot language and back through a dedicated
machine-translation model (NLLB-200-distilled-600M in the paper), with LaTeX spans masked
before each translation and restored after it. No LLM and no judge are involved.

Routes (:func:`pivots_for`):

* one hop (``hops=1``): English sources go through French and back; every other language
  through English and back;
* three hops (``hops=3``): three round trips in sequence, via French, then German, then
  Russian, with English substituted for any pivot equal to the source language. The formulas
  are masked again at every hop, and a row is kept only if every hop passes the structural
  check.

Drops (each counted, none silent):

* ``structural:<reason>`` after a hop (:func:`unmask` / :func:`structural_problems`):
  ``placeholder_missing``, ``placeholder_repeated``, ``placeholder_unknown``, ``empty``,
  ``length_ratio`` (restored length outside [1/3, 3] of the hop's input),
  ``math_delimiter_added`` (a ``$`` the model invented outside the masked spans);
* ``identical``: the final text equals the source after whitespace normalisation
  (186 single-hop and 1,038 three-hop round trips in the paper);
* ``unsupported_language``: no NLLB code for the source's language;
* ``translation_error``: the translator raised for that text.

Masking (:func:`mask_latex`): ``$$…$$``, ``\\[…\\]``, ``\\(…\\)``, ``$…$`` and
``\\begin{env}…\\end{env}`` (outermost, same-name nesting counted) become placeholders
``[0]``, ``[1]``, …; an escaped ``\\$`` is text. When the source already contains text that
looks like a placeholder, the next format of :data:`PLACEHOLDER_FORMATS` is used. An opener
without its closer is left as text. Lines are translated one by one (NLLB is a sentence-level
model); lines with no letters outside placeholders are copied unchanged.

Output rows follow the pair-row schema of :mod:`recipematch.pairs` with ``negatives: []``
(the cells stage attaches negatives): ``generator`` is ``"backtranslation_1hop"`` or
``"backtranslation_3hop"``; no prompt exists, so ``prompt_sha256`` holds the SHA-256 of the
procedure settings (:func:`procedure_sha256`: model id, route rule, masking and check
versions), which identifies the recipe the way a prompt hash does for LLM rows.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "NLLB_CODES",
    "PLACEHOLDER_FORMATS",
    "Masked",
    "StructuralError",
    "mask_latex",
    "unmask",
    "structural_problems",
    "pivots_for",
    "nllb_code",
    "Translator",
    "NLLBTranslator",
    "procedure_sha256",
    "backtranslate",
    "MASK_VERSION",
]

MASK_VERSION = 1
DEFAULT_MODEL_ID = "facebook/nllb-200-distilled-600M"

#: ISO 639-1 (and a few MathNet tags) → NLLB-200 (FLORES-200) language codes.
NLLB_CODES: dict[str, str] = {
    "en": "eng_Latn", "fr": "fra_Latn", "de": "deu_Latn", "ru": "rus_Cyrl", "es": "spa_Latn",
    "pt": "por_Latn", "it": "ita_Latn", "zh": "zho_Hans", "ja": "jpn_Jpan", "ko": "kor_Hang",
    "vi": "vie_Latn", "uk": "ukr_Cyrl", "ro": "ron_Latn", "pl": "pol_Latn", "nl": "nld_Latn",
    "hu": "hun_Latn", "cs": "ces_Latn", "sk": "slk_Latn", "bg": "bul_Cyrl", "sr": "srp_Cyrl",
    "hr": "hrv_Latn", "sl": "slv_Latn", "bs": "bos_Latn", "mk": "mkd_Cyrl", "mn": "khk_Cyrl",
    "ar": "arb_Arab", "fa": "pes_Arab", "tr": "tur_Latn", "el": "ell_Grek", "he": "heb_Hebr",
    "id": "ind_Latn", "th": "tha_Thai", "af": "afr_Latn", "et": "est_Latn", "lt": "lit_Latn",
    "lv": "lvs_Latn", "ka": "kat_Geor", "hy": "hye_Armn", "az": "azj_Latn", "kk": "kaz_Cyrl",
    "sv": "swe_Latn", "no": "nob_Latn", "da": "dan_Latn", "fi": "fin_Latn", "ca": "cat_Latn",
}

#: Placeholder formats, tried in order until one does not occur in the source text.
PLACEHOLDER_FORMATS: tuple[str, ...] = ("[{i}]", "[[{i}]]", "<{i}>", "#{i}#")


def nllb_code(lang: str) -> str:
    """NLLB code of a language tag (ISO 639-1 such as ``"es"``, or already an NLLB code such
    as ``"spa_Latn"``). Raises :class:`KeyError` for an unknown tag."""
    if re.fullmatch(r"[a-z]{3}_[A-Z][a-z]{3}", lang):
        return lang
    try:
        return NLLB_CODES[lang.lower()]
    except KeyError:
        raise KeyError(f"no NLLB code for language {lang!r}") from None


def pivots_for(lang: str, hops: int) -> list[str]:
    """Pivot languages (NLLB codes) for a source language (Appendix C).

    ``hops=1``: ``["fra_Latn"]`` for English, ``["eng_Latn"]`` otherwise. ``hops=3``:
    French, German, Russian, each replaced by English where it equals the source language.

    Raises:
        ValueError: ``hops`` is not 1 or 3. KeyError: unknown language.
    """
    src = nllb_code(lang)
    if hops == 1:
        return ["fra_Latn" if src == "eng_Latn" else "eng_Latn"]
    if hops == 3:
        return ["eng_Latn" if p == src else p for p in ("fra_Latn", "deu_Latn", "rus_Cyrl")]
    raise ValueError(f"hops must be 1 or 3, got {hops}")


# --------------------------------------------------------------------------- masking


@dataclass(frozen=True)
class Masked:
    """A text with its LaTeX spans replaced by placeholders.

    Attributes:
        text: the masked text; span ``i`` is ``fmt.format(i=i)``.
        spans: the original spans, in order of appearance.
        fmt: the placeholder format used (one of :data:`PLACEHOLDER_FORMATS`).
    """

    text: str
    spans: tuple[str, ...]
    fmt: str

    def placeholder(self, i: int) -> str:
        return self.fmt.format(i=i)

    def pattern(self) -> re.Pattern[str]:
        """Regex matching any placeholder of this format (group 1: the index)."""
        pre, post = self.fmt.split("{i}")
        return re.compile(re.escape(pre) + r"(\d+)" + re.escape(post))


class StructuralError(ValueError):
    """A translated text failed the structural check; ``reason`` is the code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


_BEGIN = re.compile(r"\\begin\{([^{}]+)\}")


def _find_unescaped(text: str, needle: str, start: int) -> int:
    i = start
    while True:
        j = text.find(needle, i)
        if j < 0:
            return -1
        if j > 0 and text[j - 1] == "\\" and needle.startswith("$"):
            i = j + 1
            continue
        return j


def _env_end(text: str, name: str, start: int) -> int:
    """Index just past the ``\\end{name}`` matching a ``\\begin{name}`` that ends at ``start``."""
    depth = 1
    b, e = "\\begin{" + name + "}", "\\end{" + name + "}"
    i = start
    while depth:
        nb, ne = text.find(b, i), text.find(e, i)
        if ne < 0:
            return -1
        if 0 <= nb < ne:
            depth += 1
            i = nb + len(b)
        else:
            depth -= 1
            i = ne + len(e)
    return i


def _spans(text: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and text.startswith("\\$", i):
            i += 2
            continue
        end = -1
        if text.startswith("$$", i):
            j = _find_unescaped(text, "$$", i + 2)
            end = -1 if j < 0 else j + 2
        elif ch == "$":
            j = _find_unescaped(text, "$", i + 1)
            end = -1 if j < 0 else j + 1
        elif text.startswith("\\[", i):
            j = text.find("\\]", i + 2)
            end = -1 if j < 0 else j + 2
        elif text.startswith("\\(", i):
            j = text.find("\\)", i + 2)
            end = -1 if j < 0 else j + 2
        elif text.startswith("\\begin{", i):
            m = _BEGIN.match(text, i)
            if m:
                end = _env_end(text, m.group(1), m.end())
        if end > i:
            out.append((i, end))
            i = end
        else:
            i += 1
    return out


def mask_latex(text: str) -> Masked:
    """Replace every LaTeX span with a placeholder (see module docstring).

    ``unmask(masked.text, masked) == text`` always holds.

    Raises:
        ValueError: every placeholder format already occurs in ``text`` (never seen on MathNet).
    """
    spans = _spans(text)
    for fmt in PLACEHOLDER_FORMATS:
        pre, post = fmt.split("{i}")
        if re.search(re.escape(pre) + r"\d+" + re.escape(post), text):
            continue
        parts, last = [], 0
        for k, (a, b) in enumerate(spans):
            parts.append(text[last:a])
            parts.append(fmt.format(i=k))
            last = b
        parts.append(text[last:])
        return Masked("".join(parts), tuple(text[a:b] for a, b in spans), fmt)
    raise ValueError("every placeholder format already occurs in the text")


def unmask(translated: str, masked: Masked) -> str:
    """Put the spans back into a translated masked text.

    Raises:
        StructuralError: ``placeholder_missing`` / ``placeholder_repeated`` (a span's
            placeholder is not there exactly once) or ``placeholder_unknown`` (an index the
            source never had).
    """
    pat = masked.pattern()
    found = Counter(int(m.group(1)) for m in pat.finditer(translated))
    n = len(masked.spans)
    unknown = sorted(k for k in found if k >= n)
    if unknown:
        raise StructuralError("placeholder_unknown", f"indices {unknown[:5]}")
    missing = [k for k in range(n) if found[k] == 0]
    if missing:
        raise StructuralError("placeholder_missing", f"{len(missing)} of {n} spans lost")
    repeated = [k for k in range(n) if found[k] > 1]
    if repeated:
        raise StructuralError("placeholder_repeated", f"spans {repeated[:5]} repeated")
    return pat.sub(lambda m: masked.spans[int(m.group(1))], translated)


def structural_problems(source: str, restored: str, masked_source: Masked, masked_output: str) -> str | None:
    """The first structural problem of a restored round trip, or ``None``.

    Checks, in order: non-empty; length of the restored text within [1/3, 3] times the
    source's; no ``$`` added outside the masked spans (the masked output holds no more
    ``$`` than the masked source).
    """
    if not restored.strip():
        return "empty"
    ratio = len(restored) / max(len(source), 1)
    if not 1 / 3 <= ratio <= 3:
        return "length_ratio"
    if masked_output.count("$") > masked_source.text.count("$"):
        return "math_delimiter_added"
    return None


# --------------------------------------------------------------------------- translators


class Translator(Protocol):
    """Anything that translates a batch of texts between two NLLB language codes."""

    def translate(self, texts: Sequence[str], src_lang: str, tgt_lang: str) -> list[str]: ...


class NLLBTranslator:
    """NLLB-200 (or any M2M100-style seq2seq model with language-code tokens) via transformers.

    Args:
        model_name_or_path: a local folder or hub id, loaded with
            ``AutoModelForSeq2SeqLM``/``AutoTokenizer`` (give ``model`` and ``tokenizer``
            instead to use objects already in memory).
        device: torch device string.
        batch_size: texts per ``generate`` call.
        num_beams: beam width (the NLLB default is 4; 1 = greedy).
        max_input_tokens: inputs are cut to this many tokens (language code and ``</s>``
            included).
        max_new_tokens: output length cap.

    Encoding follows NLLB's convention: ``[src_lang_code] tokens </s>``, and generation
    starts with the target language code forced as first token (``forced_bos_token_id``).
    Language codes must be single tokens of the tokenizer.
    """

    def __init__(
        self,
        model_name_or_path: str | None = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
        device: str = "cpu",
        batch_size: int = 16,
        num_beams: int = 4,
        max_input_tokens: int = 512,
        max_new_tokens: int = 512,
    ) -> None:
        import torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        if (model is None) != (tokenizer is None):
            raise ValueError("give both model and tokenizer, or neither")
        if model is None:
            if model_name_or_path is None:
                raise ValueError("give model_name_or_path or model + tokenizer")
            tokenizer = AutoTokenizer.from_pretrained(model_name_or_path)
            model = AutoModelForSeq2SeqLM.from_pretrained(model_name_or_path)
        self.torch = torch
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = device
        self.batch_size = batch_size
        self.num_beams = num_beams
        self.max_input_tokens = max_input_tokens
        self.max_new_tokens = max_new_tokens

    def _lang_id(self, code: str) -> int:
        tid = self.tokenizer.convert_tokens_to_ids(code)
        if tid is None or tid == self.tokenizer.unk_token_id:
            raise KeyError(f"language code {code!r} is not a token of this tokenizer")
        return int(tid)

    def translate(self, texts: Sequence[str], src_lang: str, tgt_lang: str) -> list[str]:
        """Translate ``texts`` from ``src_lang`` to ``tgt_lang`` (NLLB codes); same order."""
        src_id, tgt_id = self._lang_id(src_lang), self._lang_id(tgt_lang)
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        out: list[str] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            ids = [
                [src_id] + self.tokenizer(t, add_special_tokens=False)["input_ids"][: self.max_input_tokens - 2] + [eos]
                for t in batch
            ]
            width = max(len(x) for x in ids)
            input_ids = self.torch.full((len(ids), width), pad, dtype=self.torch.long)  # (batch, width)
            mask = self.torch.zeros((len(ids), width), dtype=self.torch.long)
            for row, x in enumerate(ids):  # right padding
                input_ids[row, : len(x)] = self.torch.tensor(x)
                mask[row, : len(x)] = 1
            with self.torch.no_grad():
                gen = self.model.generate(
                    input_ids=input_ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    forced_bos_token_id=tgt_id,
                    num_beams=self.num_beams,
                    max_new_tokens=self.max_new_tokens,
                    do_sample=False,
                )
            out.extend(self.tokenizer.batch_decode(gen, skip_special_tokens=True))
        return out


# --------------------------------------------------------------------------- the control


def procedure_sha256(model_id: str, hops: int) -> str:
    """SHA-256 of the canonical JSON of the procedure settings (model id, hops, route rule,
    masking and check versions): the back-translation rows' ``prompt_sha256``."""
    spec = {"procedure": "backtranslation", "model_id": model_id, "hops": hops,
            "route": "en->fr->en, other->en->other" if hops == 1 else "fr,de,ru (en when pivot == source), round trip each",
            "mask_version": MASK_VERSION, "placeholders": list(PLACEHOLDER_FORMATS),
            "structural_checks": ["placeholders", "empty", "length_ratio[1/3,3]", "math_delimiter_added"],
            "segmentation": "lines"}
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


_LETTER = re.compile(r"[^\W\d_]")


def _translate_masked(
    items: list[tuple[int, str]], translator: Translator, src: dict[int, str], tgt: dict[int, str],
    fmt_pattern: dict[int, re.Pattern[str]],
) -> tuple[dict[int, str], dict[int, str]]:
    """Translate masked texts line by line, grouped by (src, tgt). Returns texts and errors."""
    results: dict[int, str] = {}
    errors: dict[int, str] = {}
    lines: dict[int, list[str]] = {k: t.split("\n") for k, t in items}
    groups: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for k, _ in items:
        for li, line in enumerate(lines[k]):
            if _LETTER.search(fmt_pattern[k].sub("", line)):
                groups.setdefault((src[k], tgt[k]), []).append((k, li))
    for (s, t), refs in sorted(groups.items()):
        try:
            outs = translator.translate([lines[k][li].strip() for k, li in refs], s, t)
            if len(outs) != len(refs):
                raise RuntimeError(f"translator returned {len(outs)} texts for {len(refs)}")
        except Exception as e:  # noqa: BLE001 - recorded per text, never silent
            for k, _ in refs:
                errors[k] = f"{type(e).__name__}: {e}"[:300]
            continue
        for (k, li), o in zip(refs, outs):
            lead = lines[k][li][: len(lines[k][li]) - len(lines[k][li].lstrip())]
            lines[k][li] = lead + o
    for k, _ in items:
        if k not in errors:
            results[k] = "\n".join(lines[k])
    return results, errors


def backtranslate(
    sources: Sequence[tuple[str, str, str]],
    translator: Translator,
    *,
    hops: int = 1,
    model_id: str = DEFAULT_MODEL_ID,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Back-translate source problems (Appendix C).

    Args:
        sources: ``(source_id, text, language)`` triples; ids unique; ``language`` an ISO
            639-1 tag or an NLLB code.
        translator: e.g. :class:`NLLBTranslator` over NLLB-200-distilled-600M.
        hops: 1 (one round trip) or 3 (French, German, Russian round trips in sequence).
        model_id: recorded in each row's provenance.
        progress: optional callback given a short message after each translation pass.

    Returns:
        ``(rows, failures, counts)``. Rows, sorted by ``source_id``::

            {"source_id", "anchor", "positive",
             "positive_provenance": {"generator": "backtranslation_<hops>hop",
                                     "prompt_sha256": procedure_sha256(model_id, hops),
                                     "model_id", "judge": None,
                                     "route": [source code, pivot, source code, ...]},
             "negatives": []}

        Failures ``{"source_id", "stage": "backtranslate", "item": {"hop": k or None,
        "pivot": code or None, "detail": str}, "reason": str}`` (reasons: see module
        docstring). Counts: ``sources``, ``kept``, ``dropped`` by reason,
        ``dropped_total``, ``hops``.

    Raises:
        ValueError: duplicate source ids, ``hops`` not 1 or 3.
    """
    if hops not in (1, 3):
        raise ValueError(f"hops must be 1 or 3, got {hops}")
    ids = [s[0] for s in sources]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate source ids")
    failures: list[dict[str, Any]] = []
    texts: dict[int, str] = {}
    langs: dict[int, str] = {}
    routes: dict[int, list[str]] = {}
    pivots: dict[int, list[str]] = {}
    for k, (sid, text, lang) in enumerate(sources):
        try:
            langs[k] = nllb_code(lang)
        except KeyError as e:
            failures.append({"source_id": sid, "stage": "backtranslate", "item": {"hop": None, "pivot": None,
                             "detail": str(e)}, "reason": "unsupported_language"})
            continue
        texts[k] = text
        pivots[k] = pivots_for(langs[k], hops)
        routes[k] = [langs[k]]
    alive = sorted(texts)
    current = dict(texts)
    for hop in range(hops):
        masks = {k: mask_latex(current[k]) for k in alive}
        pats = {k: masks[k].pattern() for k in alive}
        piv = {k: pivots[k][hop] for k in alive}
        out1, err1 = _translate_masked([(k, masks[k].text) for k in alive], translator, langs, piv, pats)
        back, err2 = _translate_masked(sorted(out1.items()), translator, piv, langs, pats)
        if progress is not None:
            progress(f"hop {hop + 1}/{hops}: {len(back)} of {len(alive)} round trips")
        survivors = []
        for k in alive:
            sid = sources[k][0]
            item = {"hop": hop + 1, "pivot": piv[k]}
            if k in err1 or k in err2:
                failures.append({"source_id": sid, "stage": "backtranslate",
                                 "item": {**item, "detail": err1.get(k) or err2.get(k)}, "reason": "translation_error"})
                continue
            try:
                restored = unmask(back[k], masks[k])
                problem = structural_problems(current[k], restored, masks[k], back[k])
                if problem is not None:
                    raise StructuralError(problem, f"hop {hop + 1} via {piv[k]}")
            except StructuralError as e:
                failures.append({"source_id": sid, "stage": "backtranslate", "item": {**item, "detail": e.detail},
                                 "reason": f"structural:{e.reason}"})
                continue
            current[k] = restored
            routes[k] += [piv[k], langs[k]]
            survivors.append(k)
        alive = survivors
    rows: list[dict[str, Any]] = []
    sha = procedure_sha256(model_id, hops)
    for k in alive:
        sid = sources[k][0]
        if " ".join(current[k].split()) == " ".join(texts[k].split()):
            failures.append({"source_id": sid, "stage": "backtranslate", "item": {"hop": None, "pivot": None,
                             "detail": "round trip returned the source text"}, "reason": "identical"})
            continue
        rows.append({
            "source_id": sid,
            "anchor": texts[k],
            "positive": current[k],
            "positive_provenance": {"generator": f"backtranslation_{hops}hop", "prompt_sha256": sha,
                                    "model_id": model_id, "judge": None, "route": routes[k]},
            "negatives": [],
        })
    rows.sort(key=lambda r: r["source_id"])
    failures.sort(key=lambda f: f["source_id"])
    dropped = Counter(f["reason"] for f in failures)
    counts = {"sources": len(sources), "hops": hops, "kept": len(rows), "dropped": dict(sorted(dropped.items())),
              "dropped_total": len(failures)}
    return rows, failures, counts

