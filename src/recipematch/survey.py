"""Public models on every declared set (paper Appendix D, Table 18): ``recipematch survey``.

Each model is scored on every evaluation declared in ``params.yaml`` under its own encoding
convention, recorded beside its scores: the query instruction prepended to queries, the
maximum sequence length, the dtype and the pooling its folder declares (sentence-transformers'
``Pooling`` module; read, never overridden). The result is Table 18's shape: R@1 / R@5 / R@10
(the params' ``evaluate.ks``) per set, rows sorted by R@1 on the headline set (the first
benchmark set, descending; ties by name).

A model spec (:class:`SurveyModel`) names a local sentence-transformers folder, the offline
MiniLM alias, or ``bm25``. Before anything is loaded, every declared set is loaded and checked
and every folder is checked: it must exist and must not ask for remote code (an ``auto_map``
in any ``config.json`` of the folder, or a ``modules.json`` entry outside
``sentence_transformers``); remote code is never enabled. A model that then fails to load is
named in one line. Results are written only when every model is scored (``survey.json`` and
``survey.md``, both or neither).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recipematch.benchmarks_data import load_set
from recipematch.config import report_row
from recipematch.errors import RecipematchError, short_repr
from recipematch.io import sha256_text
from recipematch.eval_cli import BM25_NAME, first_line, model_load_errors, resolve_model
from recipematch.metrics import recall_key
from recipematch.tracking import find_or_create_run, log_metrics_once, log_params_safe, open_store, store_lock

__all__ = ["SurveyModel", "parse_models", "check_folder", "default_models", "survey_table", "run_survey"]

_SPEC_KEYS = ("name", "path", "query_prompt", "max_seq_length", "dtype", "batch_size")
_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class SurveyModel:
    """One surveyed model and its encoding convention.

    Attributes:
        name: row label (unique; ``[A-Za-z0-9._-]``, at most 64 characters).
        path: a local sentence-transformers folder, the offline MiniLM alias, or ``bm25``.
        query_prompt: text prepended to every query ('' = none; the paper's V2 instruction).
        max_seq_length: tokens per input (None = the model's own limit).
        dtype: float32, bfloat16 or float16.
        batch_size: texts per forward pass (does not change scores).
    """

    name: str
    path: str
    query_prompt: str = ""
    max_seq_length: int | None = None
    dtype: str = "float32"
    batch_size: int = 64


def _check_spec(raw: Any, where: str) -> SurveyModel:
    import re

    if not isinstance(raw, Mapping):
        raise RecipematchError(f"{where}: a model is a mapping with keys {list(_SPEC_KEYS)}, got {short_repr(raw, 80)}")
    extra = sorted(set(raw) - set(_SPEC_KEYS))
    if extra:
        raise RecipematchError(f"{where}: unknown key(s) {extra}; allowed: {list(_SPEC_KEYS)}")
    for key in ("name", "path"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise RecipematchError(f"{where}.{key}: a non-empty string is required")
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", raw["name"]) or raw["name"] in (".", ".."):
        raise RecipematchError(f"{where}.name {short_repr(raw['name'], 80)}: use letters, digits, '.', '_' or '-' "
                               "(at most 64; not '.' or '..')")
    qp = raw.get("query_prompt", "")
    if not isinstance(qp, str) or len(qp) > 2000:
        raise RecipematchError(f"{where}.query_prompt: a string of at most 2,000 characters is required")
    msl = raw.get("max_seq_length")
    if msl is not None and (isinstance(msl, bool) or not isinstance(msl, int) or not 1 <= msl <= 131_072):
        raise RecipematchError(f"{where}.max_seq_length: an integer in [1, 131072] or null, got {short_repr(msl, 40)}")
    dt = raw.get("dtype", "float32")
    if dt not in _DTYPES:
        raise RecipematchError(f"{where}.dtype: one of {list(_DTYPES)}, got {short_repr(dt, 40)}")
    bs = raw.get("batch_size", 64)
    if isinstance(bs, bool) or not isinstance(bs, int) or not 1 <= bs <= 65_536:
        raise RecipematchError(f"{where}.batch_size: an integer in [1, 65536], got {short_repr(bs, 40)}")
    return SurveyModel(raw["name"], raw["path"], qp, msl, dt, bs)


def parse_models(raw: Any, where: str = "models") -> list[SurveyModel]:
    """Model specs from a YAML/JSON list (or ``{"models": [...]}``).

    Raises:
        RecipematchError: not a non-empty list, a bad key or value (naming the entry), or a
            name given twice.
    """
    if isinstance(raw, Mapping) and set(raw) == {"models"}:
        raw = raw["models"]
    if not isinstance(raw, list) or not raw:
        raise RecipematchError(f"{where}: a non-empty list of models is required")
    out = [_check_spec(m, f"{where}[{i}]") for i, m in enumerate(raw)]
    names = [m.name for m in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise RecipematchError(f"{where}: model name(s) {dup} given twice")
    return out


def _config_files(folder: Path) -> list[Path]:
    """Every ``*config*.json`` under ``folder``, symlinked sub-folders followed once each
    (``config.json``, ``tokenizer_config.json``, ``sentence_bert_config.json``, ...)."""
    import os

    out, seen = [], set()
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:  # a link back up the tree: walked once
            dirnames[:] = []
            continue
        seen.add(real)
        out.extend(Path(dirpath) / f for f in filenames if f.endswith(".json") and "config" in f)
    return sorted(out)


def _remote_code_reason(folder: Path) -> str | None:
    """Why ``folder`` would need remote code, or None: an ``auto_map`` in any of its config
    files (model, tokenizer, sub-modules, symlinked folders included) or ``trust_remote_code``
    set in one."""
    for cfg in _config_files(folder):
        try:
            data = json.loads(cfg.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            return f"{cfg} cannot be read as JSON ({type(exc).__name__})"
        if isinstance(data, dict) and data.get("auto_map"):
            return f"{cfg} has an auto_map (custom model code)"
        if isinstance(data, dict) and data.get("trust_remote_code"):
            return f"{cfg} sets trust_remote_code"
    mod = folder / "modules.json"
    if mod.is_file():
        try:
            entries = json.loads(mod.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            return f"{mod} cannot be read as JSON ({type(exc).__name__})"
        if not isinstance(entries, list):
            return f"{mod} is not a list of modules"
        for e in entries:
            t = e.get("type", "") if isinstance(e, dict) else ""
            if not isinstance(t, str) or not t.startswith("sentence_transformers."):
                return f"{mod} names module type {short_repr(t, 80)} outside sentence_transformers (custom code)"
    return None


def check_folder(model: SurveyModel) -> str:
    """The resolved path of ``model`` (a folder, or ``"bm25"``), checked before any load.

    Raises:
        RecipematchError: the path is neither ``bm25``, the MiniLM alias nor a folder, or the
            folder asks for remote code; the message names the model and the file.
    """
    try:
        resolved = resolve_model(model.path)
    except RecipematchError as e:
        msg = str(e).replace("--model ", "path ", 1)
        raise RecipematchError(f"model {model.name!r}: {msg}") from None
    if resolved == BM25_NAME:
        return resolved
    folder = Path(resolved)
    if not folder.is_dir():
        raise RecipematchError(f"model {model.name!r}: {folder} is not a folder")
    why = _remote_code_reason(folder)
    if why:
        raise RecipematchError(f"model {model.name!r}: {why}; recipematch never enables remote code")
    return resolved


def default_models(p) -> list[SurveyModel]:
    """The default survey: the untrained base under the evaluate stages' convention, and BM25."""
    return [SurveyModel("base", p.train.model, p.train.query_instruction or "", p.evaluate.max_seq_length,
                        p.evaluate.dtype, p.evaluate.batch_size),
            SurveyModel("bm25", "bm25")]


def survey_table(result: Mapping[str, Any]) -> str:
    """Table 18's shape from :func:`run_survey`'s result: rows = models sorted by the headline
    set's R@1 (descending; ties by name), columns = each set's ``R@k`` values joined by " / "."""
    sets, ks = result["sets"], result["ks"]
    head = result["headline"]
    rows = sorted(result["models"], key=lambda m: (-m["scores"][head][recall_key(ks[0])], m["name"]) if head else m["name"])
    cols = [f"{s['label']} " + " / ".join(recall_key(k) for k in ks) for s in sets.values()]
    lines = ["| model | convention | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 2)]
    for m in rows:
        conv = m["convention"]
        c = "lexical" if m["path"].strip().lower() == "bm25" else (
            f"max_seq_length {conv.get('max_seq_length')}, pooling {conv.get('pooling')}, "
            f"{conv.get('dtype')}" + (", query instruction" if conv.get("query_prompt") else ""))
        cells = [" / ".join(f"{m['scores'][n][recall_key(k)]:.2f}" for k in ks) for n in sets]
        lines.append(f"| {m['name']} | {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_survey(p, root: Path, models: Sequence[SurveyModel], *, cache_dir: Path | None = None,
               progress=None) -> dict[str, Any]:
    """Score every model on every declared evaluation (see the module docstring).

    Args:
        p: checked params (:func:`recipematch.config.load_params`).
        root: project root; evaluation folders are relative to it.
        models: the models, in input order.
        cache_dir: embedding cache (None = none).
        progress: called with one line per scored (model, set), or None.

    Returns:
        ``{"ks", "headline", "sets": {name: {label, role, rule, folder}}, "models": [{name, path,
        convention, scores: {set: {R@k: percent, n_queries}}}]}``.

    Raises:
        RecipematchError: a missing or malformed set folder, a model folder that is missing,
            asks for remote code or cannot be loaded; each names the set or model.
    """
    import os

    from recipematch.scoring import BM25, score  # lazy: recipematch.scoring pulls in pandas, torch

    ks = tuple(p.evaluate.ks)
    sets = {}
    for name, ev in sorted(p.evaluations.items()):
        folder = root / ev.folder
        if not folder.is_dir():
            raise RecipematchError(f"evaluations.{name}.folder: {folder} does not exist (run the stage that writes "
                                   "it, or `dvc pull` it)")
        sets[name] = (ev, load_set(folder, ev.rule, name=name, self_mask=ev.self_mask))
    resolved = {m.name: check_folder(m) for m in models}  # every folder checked before any load
    bench = [n for n, (ev, _) in sets.items() if ev.role == "benchmark"]
    out: dict[str, Any] = {"ks": list(ks), "headline": bench[0] if bench else None,
                           "sets": {n: {"label": report_row(p.report, n).label, "role": ev.role, "rule": ev.rule, "folder": ev.folder}
                                    for n, (ev, _) in sets.items()}, "models": []}
    for m in models:
        path = resolved[m.name]
        if path == BM25_NAME:
            enc, conv = BM25, {"bm25_k1": p.evaluate.bm25_k1, "bm25_b": p.evaluate.bm25_b}
        else:
            from recipematch.retrieval import SentenceTransformerEncoder  # lazy: tests monkeypatch recipematch.retrieval.SentenceTransformerEncoder

            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                enc = SentenceTransformerEncoder(path, max_seq_length=m.max_seq_length, batch_size=m.batch_size,
                                                 query_prompt=m.query_prompt or None, device=p.devices.evaluate,
                                                 dtype=m.dtype)
            except (*model_load_errors(), RecipematchError) as exc:
                raise RecipematchError(f"model {m.name!r}: cannot load a sentence-transformers model from {path}: "
                                       f"{first_line(exc)}") from None
            conv = {k: v for k, v in enc.settings.items() if k != "batch_size"}
        scores = {}
        for name, (ev, bset) in sets.items():
            kw = {"bm25_k1": p.evaluate.bm25_k1, "bm25_b": p.evaluate.bm25_b} if enc is BM25 else {"cache_dir": cache_dir}
            summary, _ = score(bset, enc, ks=ks, **kw)
            scores[name] = {recall_key(k): float(summary[recall_key(k)]) for k in ks}
            scores[name]["n_queries"] = int(summary["n_queries"])
            if progress:
                progress(f"{m.name} {name}: " + " ".join(f"{recall_key(k)}={scores[name][recall_key(k)]:.2f}" for k in ks))
        out["models"].append({**asdict(m), "convention": conv, "scores": scores})
        for s in scores.values():
            for k in ks:
                if not math.isfinite(s[recall_key(k)]):
                    raise RecipematchError(f"model {m.name!r}: a non-finite R@{k}")
    return out


def log_survey(result: Mapping[str, Any], tracking_uri: str, experiment: str) -> list[str]:
    """One MLflow run per surveyed model in ``experiment`` (params: its convention; metrics:
    ``<set>.R_at_k``, as the training runs name them), keyed by model name and convention so
    a rerun updates rather than duplicates; returns the run ids."""
    import time

    from mlflow.entities import Metric

    c, exp = open_store(tracking_uri, experiment)
    ids = []
    for m in result["models"]:
        key = "survey:" + sha256_text(json.dumps({"name": m["name"], "convention": m["convention"]}, sort_keys=True))
        with store_lock(tracking_uri):
            run_id, _ = find_or_create_run(c, exp, key, f"survey-{m['name']}", {"survey_model": m["name"]})
            log_params_safe(c, run_id, {"path": m["path"], **{f"convention.{k}": v for k, v in m["convention"].items()}})
            now = int(time.time() * 1000)
            metrics = [Metric(f"{n}.{k.replace('@', '_at_')}", v, now, 0) for n, s in m["scores"].items()
                       for k, v in s.items() if k.startswith("R@")]
            log_metrics_once(c, run_id, metrics, changed="supersede")
            c.set_terminated(run_id)
        ids.append(run_id)
    return ids
