"""Graded judging of a candidate pool (the candidate design's judging): a 0 / 1 / 2 rubric held
as data, an LLM judge for the pairs that most need it, a distilled relevance model for the
rest, every label recording its judge.

- **The rubric** is a JSON file (shipped: ``strict-math-retrieval-v1``): the scores, the reason
  codes with the scores each allows, the answer-validity values with theirs. An answer has
  exactly the design's 8 fields (``task_id, guideline_version, query_evaluable, score,
  answer_validity, reason_codes, confidence, rationale``) and is checked against the JSON
  Schema :func:`answer_schema` builds from the rubric (by the ``jsonschema`` library): a
  score outside the list, a reason code not in it or not allowed with that score, a score
  with ``query_evaluable: false`` (which must carry ``score: null``, never a forced 0), or a
  ``task_id`` that is not the pair's is a failure record with its reason.
- **Routing** (:func:`route_pairs`): a pair goes to the LLM judge when its fused rank is
  within ``llm_fused_ranks``, some dense route ranks it within ``llm_dense_ranks``, or its
  document is longer than ``long_chars`` characters (the design: dense ranks 1-5, long
  documents, long new candidates at fused positions 1-5); every other pair to the distilled judge.
- **The distilled judge** (:func:`train_distilled`): a sentence-transformers cross-encoder with
  a new single-output regression head trained by MSE on the LLM's 0 / 1 / 2 labels; its raw
  score is kept beside the label it is cut into at 0.5 / 1.5 (:func:`cut_scores`).
- **Agreement** (:func:`agreement`): exact agreement, Cohen's kappa (scikit-learn), the 0-vs-2
  flip rate and the within-query R^2 (both series centred on each query's mean: most label
  variance lies between queries, which flatters a pooled R^2), over held-out pairs none of which
  the distilled judge trained on.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recipematch.errors import RecipematchError
from recipematch.llm.prompts import fill_slots

__all__ = ["Rubric", "load_rubric", "answer_schema", "parse_answer", "render_prompt", "task_id", "route_pairs",
           "cut_scores", "agreement", "within_query_r2", "train_distilled", "second_judge_reliability",
           "reliability_markdown", "misses_markdown", "FIELDS", "DEFAULT_RUBRIC"]

#: the design's 8 answer fields, in its order
FIELDS = ("task_id", "guideline_version", "query_evaluable", "score", "answer_validity", "reason_codes",
          "confidence", "rationale")
#: the shipped rubric (package data)
DEFAULT_RUBRIC = "strict-math-retrieval-v1.json"


@dataclass(frozen=True)
class Rubric:
    """A judging rubric as data.

    Attributes:
        guideline_version: the string every answer must carry.
        scores: the allowed scores (integers; the design: 0, 1, 2).
        reason_codes: ``code -> scores it may accompany`` (``None``: an unevaluable query).
        answer_validity: ``value -> scores it may accompany``.
        sha256: SHA-256 of the rubric file's bytes.
    """

    guideline_version: str
    scores: tuple[int, ...]
    reason_codes: Mapping[str, tuple[int | None, ...]]
    answer_validity: Mapping[str, tuple[int | None, ...]]
    sha256: str


def load_rubric(path: str | Path | None = None) -> Rubric:
    """The rubric in ``path`` (``None``: the shipped one).

    Raises:
        RecipematchError: an unreadable file, bad JSON, or a rubric whose codes or validity
            values name a score outside ``scores``.
    """
    where = str(path) if path else f"recipematch/rubrics/{DEFAULT_RUBRIC}"
    try:
        raw = (Path(path).read_bytes() if path else
               resources.files("recipematch").joinpath("rubrics", DEFAULT_RUBRIC).read_bytes())
        doc = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecipematchError(f"rubric {where}: cannot read it ({e})") from None
    try:
        scores = tuple(doc["scores"])
        allowed = set(scores) | {None}

        def table(key: str) -> dict[str, tuple]:
            out = {}
            for k, v in doc[key].items():
                if not isinstance(v, list) or not v or not set(v) <= allowed:
                    raise RecipematchError(f"rubric {where}: {key}.{k} must list scores from {list(scores)} or null")
                out[k] = tuple(v)
            return out

        if not scores or not all(isinstance(s, int) and not isinstance(s, bool) for s in scores):
            raise RecipematchError(f"rubric {where}: scores must be a non-empty list of integers")
        if sorted(scores) != [0, 1, 2]:  # the distilled judge's cuts (0.5, 1.5) and its agreement table assume them
            raise RecipematchError(f"rubric {where}: scores must be [0, 1, 2] (the design note's scale, which the "
                                   f"distilled judge's cut scores and agreement assume), got {list(scores)}")
        return Rubric(str(doc["guideline_version"]), scores, table("reason_codes"), table("answer_validity"),
                      hashlib.sha256(raw).hexdigest())
    except (KeyError, TypeError, AttributeError) as e:
        raise RecipematchError(f"rubric {where}: missing or malformed field ({e})") from None


def answer_schema(rubric: Rubric) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one answer: the 8 fields, no others, and the ties of
    reason codes and answer validity to the score (one ``if score == s then ...`` per score)."""
    def codes_for(s):
        return sorted(c for c, ok in rubric.reason_codes.items() if s in ok)

    def validity_for(s):
        return sorted(v for v, ok in rubric.answer_validity.items() if s in ok)

    ties = []
    for s in [*rubric.scores, None]:
        ties.append({"if": {"properties": {"score": {"const": s}}, "required": ["score"]},
                     "then": {"properties": {"reason_codes": {"items": {"enum": codes_for(s)}},
                                             "answer_validity": {"enum": validity_for(s)}}}})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "required": list(FIELDS),
        "properties": {
            "task_id": {"type": "string", "minLength": 1},
            "guideline_version": {"const": rubric.guideline_version},
            "query_evaluable": {"type": "boolean"},
            "score": {"enum": [*rubric.scores, None]},
            "answer_validity": {"enum": sorted(rubric.answer_validity)},
            "reason_codes": {"type": "array", "minItems": 1, "uniqueItems": True,
                             "items": {"enum": sorted(rubric.reason_codes)}},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "rationale": {"type": "string"},
        },
        "allOf": [
            *ties,
            {"if": {"properties": {"query_evaluable": {"const": False}}, "required": ["query_evaluable"]},
             "then": {"properties": {"score": {"const": None}}}},
            {"if": {"properties": {"query_evaluable": {"const": True}}, "required": ["query_evaluable"]},
             "then": {"properties": {"score": {"enum": list(rubric.scores)}}}},
        ],
    }


_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*)\n\s*```\s*$", re.S)


def _not_json(name: str):
    """``json.loads``'s hook for NaN / Infinity, which JSON does not have: refused."""
    raise ValueError(f"{name} is not JSON")


def parse_answer(raw: str | None, rubric: Rubric, expected_task_id: str, schema: Mapping | None = None
                 ) -> tuple[dict | None, str]:
    """One judge answer checked against the rubric.

    Args:
        raw: the answer text (one JSON object, optionally in a ```json fence).
        expected_task_id: the pair's :func:`task_id`.
        schema: :func:`answer_schema` of ``rubric`` (built when not given).

    Returns:
        ``(answer, "")`` or ``(None, reason)``: ``invalid_json``, ``schema: <path>: <message>``
        or ``task_id_mismatch``. Never raises for a bad answer.
    """
    import jsonschema

    if raw is None:
        return None, "no_answer_text"
    text = raw.strip()
    m = _FENCE.match(text)
    if m:
        text = m.group(1)
    try:
        ans = json.loads(text, parse_constant=_not_json)
    except (json.JSONDecodeError, RecursionError, ValueError):
        return None, "invalid_json"
    schema = schema or answer_schema(rubric)
    err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(ans))
    if err is not None:
        path = "/".join(str(p) for p in err.absolute_path) or "(answer)"
        return None, f"schema: {path}: {err.message[:160]}"
    if ans["task_id"] != expected_task_id:
        return None, "task_id_mismatch"
    return ans, ""


def task_id(query_id: str, doc_id: str) -> str:
    """A pair's id in prompts and answers: the first 16 hex characters of the SHA-256 of
    ``[query_id, doc_id]`` as JSON (ids may hold any character)."""
    return hashlib.sha256(json.dumps([query_id, doc_id], ensure_ascii=False).encode()).hexdigest()[:16]


def render_prompt(template: str, *, task: str, query: str, document: str, max_chars: int) -> str:
    """The template with ``{{task_id}}``, ``{{query}}`` and ``{{document}}`` replaced verbatim;
    the document cut to its first ``max_chars`` characters (the design: 30,000).

    Raises:
        RecipematchError: a template lacking one of the slots.
    """
    return fill_slots(template, {"task_id": task, "query": query, "document": document[:max_chars]}, "judge prompt")


def route_pairs(pool: pd.DataFrame, doc_chars: np.ndarray, *, llm_fused_ranks: int, llm_dense_ranks: int,
                long_chars: int) -> pd.Series:
    """Which judge each pool pair goes to: ``"llm"`` or ``"distilled"`` (module docstring).

    Args:
        pool: :func:`recipematch.pooling.fuse` rows (``fused_rank`` and the ``rank_dense_*`` columns).
        doc_chars: ``(len(pool),)`` each pair's document length in characters.
        llm_fused_ranks, llm_dense_ranks: rank cut-offs (0: that rule sends nothing).
        long_chars: documents longer than this go to the LLM (0: the rule is off).
    """
    dense_cols = [c for c in pool.columns if c.startswith("rank_dense_")]
    best_dense = (pool[dense_cols].min(axis=1, skipna=True).fillna(np.inf).to_numpy(dtype=np.float64)
                  if dense_cols else np.full(len(pool), np.inf))
    to_llm = (pool["fused_rank"].to_numpy() <= llm_fused_ranks) | (best_dense <= llm_dense_ranks)
    if long_chars > 0:
        to_llm |= np.asarray(doc_chars) > long_chars
    return pd.Series(np.where(to_llm, "llm", "distilled"), index=pool.index)


def cut_scores(raw: np.ndarray, low: float = 0.5, high: float = 1.5) -> np.ndarray:
    """Raw regression scores cut into 0 / 1 / 2 at ``low`` and ``high`` (the design's fixed cuts:
    a default, not a calibration): ``< low`` -> 0, ``< high`` -> 1, else 2."""
    raw = np.asarray(raw, dtype=np.float64)
    return np.where(raw < low, 0, np.where(raw < high, 1, 2)).astype(np.int64)


def within_query_r2(y: np.ndarray, pred: np.ndarray, groups: Sequence[str]) -> float | None:
    """R^2 of ``pred`` for ``y`` after centring both on each group's mean; ``None`` when the
    labels do not vary within any group."""
    df = pd.DataFrame({"y": np.asarray(y, dtype=np.float64), "p": np.asarray(pred, dtype=np.float64),
                       "g": list(groups)})
    yc = df["y"] - df.groupby("g")["y"].transform("mean")
    pc = df["p"] - df.groupby("g")["p"].transform("mean")
    tot = float((yc ** 2).sum())
    return None if tot == 0 else 1.0 - float(((yc - pc) ** 2).sum()) / tot


def agreement(llm: np.ndarray, raw: np.ndarray, query_ids: Sequence[str], *, low: float = 0.5,
              high: float = 1.5) -> dict[str, Any]:
    """The distilled judge against held-out LLM labels (module docstring).

    Returns:
        ``{n, n_queries, exact, kappa, zero_two_flips, within_query_r2, confusion}``: rates in
        [0, 1] (``None`` where undefined, e.g. no pairs); ``confusion[llm][distilled]`` counts.
    """
    from sklearn.metrics import cohen_kappa_score

    y = np.asarray(llm, dtype=np.int64)
    d = cut_scores(raw, low, high)
    n = int(len(y))
    if n == 0:
        return {"n": 0, "n_queries": 0, "exact": None, "kappa": None, "zero_two_flips": None,
                "within_query_r2": None, "confusion": {}}
    both = np.concatenate([y, d])
    kappa = None if len(set(both.tolist())) < 2 else float(cohen_kappa_score(y, d, labels=[0, 1, 2]))
    conf = {str(a): {str(b): int(((y == a) & (d == b)).sum()) for b in (0, 1, 2)} for a in (0, 1, 2)}
    r2 = within_query_r2(y, raw, query_ids)
    return {"n": n, "n_queries": len(set(query_ids)), "exact": round(float((y == d).mean()), 6),
            "kappa": None if kappa is None or np.isnan(kappa) else round(kappa, 6),
            "zero_two_flips": round(float((((y == 0) & (d == 2)) | ((y == 2) & (d == 0))).mean()), 6),
            "within_query_r2": None if r2 is None else round(r2, 6), "confusion": conf}


def second_judge_reliability(first, second) -> dict[str, Any]:
    """The design note's reliability table against a second judge: two LLM judges' 0/1/2
    labels on the same pairs.

    Args:
        first, second: ``(n,)`` integer scores in {0, 1, 2}, aligned pair by pair (pairs either
            judge left unscored, ``score: null``, are left out by the caller).

    The combined label is ours (the note does not state its rule): the shared label where the
    judges agree, the stricter (lower) one where they differ by one step, and no label where one
    says 0 and the other 2 (such pairs need arbitration, counted).

    Returns:
        ``{n, exact, needs_arbitration, zero_two, at_least_partial: {first, second, combined},
        distribution: {first, second, combined}: {"0", "1", "2"}: share}``; shares in [0, 1],
        rounded to 6 places; ``combined`` shares are over the pairs that have one.

    Raises:
        RecipematchError: lengths differ or a score outside {0, 1, 2}.
    """
    a = np.asarray(first, dtype=np.int64)
    b = np.asarray(second, dtype=np.int64)
    if a.shape != b.shape or a.ndim != 1:
        raise RecipematchError(f"second_judge_reliability needs two aligned 1-D score arrays, got {a.shape}, {b.shape}")
    if not (np.isin(a, (0, 1, 2)).all() and np.isin(b, (0, 1, 2)).all()):
        raise RecipematchError("second_judge_reliability: scores must be 0, 1 or 2")
    n = int(a.size)
    far = np.abs(a - b) == 2
    comb = np.minimum(a, b)[~far]

    def dist(x):
        return {str(s): (round(float((x == s).mean()), 6) if x.size else None) for s in (0, 1, 2)}

    def share(x):
        return round(float((x >= 1).mean()), 6) if x.size else None

    return {"n": n, "exact": round(float((a == b).mean()), 6) if n else None,
            "needs_arbitration": int(far.sum()), "zero_two": round(float(far.mean()), 6) if n else None,
            "at_least_partial": {"first": share(a), "second": share(b), "combined": share(comb)},
            "distribution": {"first": dist(a), "second": dist(b), "combined": dist(comb)}}


def reliability_markdown(rel: Mapping[str, Any], first: str, second: str) -> str:
    """The reliability table (the design note's shape) of :func:`second_judge_reliability`."""
    d = rel["distribution"]

    def pct(x):
        return "—" if x is None else f"{100 * x:.1f}%"

    lines = [f"| | {first} alone | {second} | combined |", "|---|---|---|---|"]
    for s in ("0", "1", "2"):
        lines.append(f"| score {s} | {pct(d['first'][s])} | {pct(d['second'][s])} | {pct(d['combined'][s])} |")
    al = rel["at_least_partial"]
    lines += ["", f"- {rel['n']} pairs judged by both; exact agreement {pct(rel['exact'])}; "
              f"{rel['needs_arbitration']} ({pct(rel['zero_two'])}) are a 0 against a 2 and need arbitration.",
              f"- At least partially relevant (score >= 1): {first} {pct(al['first'])}, {second} {pct(al['second'])}, "
              f"combined {pct(al['combined'])}.",
              "- Combined: the shared label, the stricter of two labels one step apart, none for 0 against 2."]
    return "\n".join(lines)


def misses_markdown(misses: Mapping[str, Mapping[str, int]], *, name: str, evaluation: str, judge_model: str) -> str:
    """The report row per model of the judged pool (the candidate design's question: how many
    of a model's top-1 misses on the labelled golds are unlabelled duplicates).

    Args:
        misses: ``route -> {"top1_misses", "judged", "called_same_problem", "called_partial"}``
            (a route is a dense model or BM25 / n-gram), as the judging stage counts them.
        name, evaluation, judge_model: the judging entry, its evaluation and the judge, for the title.

    Returns:
        A Markdown section: one row per route; the share is of the judged misses ("—" when
        none was judged).
    """
    lines = [f"## Top-1 misses the judge calls the same problem: judging@{name} ({evaluation}; judge {judge_model})",
             "", "| route | top-1 misses | judged | same problem (2) | partial (1) | same problem, share of judged |",
             "|---|---:|---:|---:|---:|---:|"]
    for route, m in misses.items():
        share = "—" if not m["judged"] else f"{100 * m['called_same_problem'] / m['judged']:.1f}%"
        lines.append(f"| {route} | {m['top1_misses']} | {m['judged']} | {m['called_same_problem']} | "
                     f"{m['called_partial']} | {share} |")
    lines += ["", "A miss is a route's rank-1 document that is not a labelled gold of the query. A miss the judge "
              "scores 2 is a candidate unlabelled duplicate: the model's R@1 undercounts it."]
    return "\n".join(lines) + "\n"


def train_distilled(base_model: str, queries: Sequence[str], documents: Sequence[str], labels: Sequence[float], *,
                    out_dir: str | Path, epochs: int, batch_size: int, learning_rate: float, max_length: int,
                    seed: int, device: str = "cpu"):
    """Train the distilled judge: ``base_model`` (a local folder) as a cross-encoder with a new
    single-output regression head (identity activation), MSE against ``labels`` in [0, 2].
    Saved to ``out_dir``; returns the model (``model.predict(pairs)`` gives raw scores).

    Raises:
        RecipematchError: no training pairs, or lengths that disagree.
    """
    import torch
    from datasets import Dataset
    from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import MSELoss
    from transformers import set_seed

    if not labels or not (len(queries) == len(documents) == len(labels)):
        raise RecipematchError(f"the distilled judge needs aligned, non-empty training pairs "
                               f"({len(queries)} queries, {len(documents)} documents, {len(labels)} labels)")
    set_seed(seed)
    model = CrossEncoder(base_model, num_labels=1, max_length=max_length, device=device,
                         activation_fn=torch.nn.Identity())
    ds = Dataset.from_dict({"query": list(queries), "document": list(documents),
                            "label": [float(x) for x in labels]})
    args = CrossEncoderTrainingArguments(
        output_dir=str(Path(out_dir) / "trainer"), num_train_epochs=epochs, per_device_train_batch_size=batch_size,
        learning_rate=learning_rate, seed=seed, data_seed=seed, report_to=[], save_strategy="no",
        logging_strategy="no", use_cpu=(device == "cpu"), disable_tqdm=True)
    CrossEncoderTrainer(model=model, args=args, train_dataset=ds,
                        loss=MSELoss(model, activation_fn=torch.nn.Identity())).train()
    # no model card: sentence-transformers' README.md records wall-clock training time (not byte-identical)
    model.save_pretrained(str(out_dir), create_model_card=False)
    return model
