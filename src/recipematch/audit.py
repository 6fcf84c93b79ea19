"""Audit any LLM-built retrieval benchmark: its recipe-sensitivity number (the paper's
practice (iv) for builders, Section 8: "publish a recipe-sensitivity number, how much a model
gains by matching the recipe"; the arms of Section 3 and Table 1; the statistics of
Appendix A; the style probe of Appendix C).

An audit is **not a second pipeline**: :func:`init_audit` writes a DVC project whose
``dvc.yaml`` runs recipematch's own stages (``recipematch corpus``, ``gates``, ``llm``,
``cells``, ``train``, ``evaluate-*``, ``stats`` … the same click commands as
``stages/<name>.py``) and whose ``params.yaml`` has the keys of the main ``params.yaml``
(checked by :func:`recipematch.config.parse_params` before it is written). What makes it an
audit is params only:

* ``data: {source: jsonl, path: data/sources.jsonl}``: the user's organic pool is the corpus;
* ``evaluations.benchmark``: the user's BEIR folder, ``role: benchmark`` (and
  ``evaluations.real``, ``role: real``, when a generator-free set is given);
  ``evalsets.n_heldout: 0`` (no embedded tier is built);
* ``llm.prompts: [d1_recipe, <control>]`` with ``llm.recipe_prompt`` naming the user's recipe
  sidecar (``''``: the shipped D1 is the recipe);
* ``arms: [recipe, cell]`` with ``positives: <control>``, ``negatives: recipe``,
  ``negatives_volume: full``: the **recipe** arm trains on recipe positives × recipe
  near-misses, the **control** (``cell``) on control positives × the *same* recipe
  near-misses, same sources pool, same LLM, same matched budget and seeds.

The recipe-sensitivity number is the gap ``recipe − cell`` in benchmark R@1 (percentage
points) with its nested-bootstrap interval (queries within seeds, Appendix A), computed by the
``audit-report`` stage (:func:`compute_audit`) from the per-query rank files the evaluate
stages wrote.

``audit.json`` (written by the ``audit-report`` stage; every number computed by the run):

.. code-block:: text

    schema              "recipematch.audit/1"
    recipe_sensitivity  {metric: "R@1", evaluation, contrast: "recipe - cell", units: "points",
                         estimate, low, high, level, n_boot, seeds: independent|paired|single_run,
                         n_seeds_a, n_seeds_b, n_queries}      # the number and its 95% interval
    did                 null, or {real, estimate, low, high, level, gap_real: {estimate, low, high}}
                        # (recipe − cell on the benchmark) − (recipe − cell on the real set)
    style_probe         {auc, low, high, auc_unstripped, low_unstripped, high_unstripped, n_pos,
                         n_neg, n_test_sources}  # organic queries vs the benchmark's gold documents,
                                                 # split by source (Appendix C, artefacts stripped)
    scores              {model: {"<set>.R@1": {mean, sd, per_seed}}} for base, bm25, recipe, cell
    arms                {recipe: {cell, prompt}, cell: {cell, prompt}}
    seeds               [training seeds]
    budget              {rows, dev_fraction, max_rows_per_source}
    model               {base_model, generator, judge, backend, base_url}
    prompts             {recipe: {name, sha256}, control: {name, sha256}, judge: {name, sha256}}
    data                {benchmark: {folder, corpus_sha256, queries_sha256, qrels_sha256, queries,
                         documents}, sources: {path, sha256, rows}, real: {...} | null}
    gates               {sources, sources_kept, sources_removed}   # the gates stage's count
    pairs               {d1_recipe: rows, <control>: rows}
    recipematch_version

Command line: ``recipematch audit init WORKDIR --benchmark DIR --recipe d1_recipe|FILE.prompt.yaml
--sources FILE.jsonl (--base-url URL --model NAME [--api-key-env VAR] | --replay DIR) [--real DIR
[--real-rule RULE]] [--also NAME=DIR[:RULE]] [--control PROMPT] [--base-model M] [--seeds N]
[--rows N] [--template PARAMS]``, then ``cd WORKDIR && dvc repro``.

The API key: only the *name* of its environment variable (``llm.api_key_env``) is written
anywhere; the key itself is read by the backend at request time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipematch.errors import RecipematchError, short_repr
from recipematch.metrics import metric_key

SCHEMA = "recipematch.audit/1"
#: the arms of an audit: the recipe and the control cell (positives = the control prompt)
AUDIT_ARMS = ("recipe", "cell")
#: the contrast the audit reports (arm, minus arm)
AUDIT_CONTRAST = ("recipe", "cell")
#: where init puts the user's inputs inside WORKDIR
BENCHMARK_DIR = "data/benchmark"
REAL_DIR = "data/real"
SOURCES_FILE = "data/sources.jsonl"
RECIPE_DIR = "data/recipe"
REPLAY_DIR = "data/peer_release"  # the recordings stage reads release rows from here
ALSO_DIR = "data/also"  # further declared evaluations (--also NAME=FOLDER[:RULE])


def control_positives(prompt: str) -> str:
    """The ``positives`` key of a shipped control prompt (e.g. ``d4_restatement`` → ``d4``).

    Raises:
        RecipematchError: not a shipped prompt that can be a control (``d1_recipe`` is the recipe).
    """
    from recipematch.rules import POSITIVES

    keys = {v: k for k, v in POSITIVES.items() if k not in ("cas", "bt", "bt3", "d1")}
    if prompt not in keys:
        raise RecipematchError(f"--control {prompt!r}: choose a shipped prompt from {sorted(keys)} "
                               "(the default d4_restatement is the paper's recipe-free restatement)")
    return keys[prompt]


# --------------------------------------------------------------------------- input checks

def check_benchmark(folder: Path, name: str = "benchmark", rule: str = "plain") -> dict[str, int]:
    """Read a BEIR folder as recipematch's evaluate stages will (under ``rule``).

    Returns:
        ``{"queries": scored queries, "documents": corpus size, "golds": positive qrels}``.

    Raises:
        RecipematchError: missing folder/file, malformed line (file:line), qrels naming a query
            or a corpus id the folder lacks, no positive qrel.
    """
    from recipematch.benchmarks_data import load_set

    bset = load_set(folder, rule, name=name)
    golds = sum(1 for q in bset.query_ids for s in bset.qrels.get(q, {}).values() if s > 0)
    self_gold = [q for q in bset.query_ids if q in {d for d, s in bset.qrels.get(q, {}).items() if s > 0}]
    if self_gold:
        raise RecipematchError(f"{folder}: {len(self_gold)} of {len(bset.query_ids)} queries have a gold with the "
                               f"query's own id (first: {self_gold[0]!r}); a query's own id is masked from its "
                               "ranking, so give the gold documents ids of their own")
    return {"queries": len(bset.query_ids), "documents": len(bset.corpus), "golds": golds}


def _benchmark_texts_and_ids(folder: Path) -> tuple[set[str], set[str]]:
    from recipematch.benchmarks_data import load_set, member_ids
    from recipematch.beir import doc_text
    from recipematch.gates import norm_v2 as normalize_v2

    bset = load_set(folder, "plain", name="benchmark")
    ids = set(member_ids(bset))
    texts = {normalize_v2(bset.queries[q]) for q in bset.query_ids}
    texts |= {normalize_v2(doc_text(bset.corpus[d])) for d in ids if d in bset.corpus}
    return texts, ids


def read_sources(path: Path) -> dict[str, str]:
    """The organic pool as ``{id: text}`` in file order (JSONL, ``id`` or ``_id`` and ``text``
    per line; ids read as the corpus stage reads them).

    Raises:
        RecipematchError: a line that is not a JSON object with a non-empty id and text
            (file:line), or a repeated id.
    """
    from recipematch.io import id_problem, iter_jsonl_strict

    out: dict[str, str] = {}
    for i, rec in iter_jsonl_strict(path):
        if not isinstance(rec, dict):
            raise RecipematchError(f"{path}:{i}: expected a JSON object {{\"id\": ..., \"text\": ...}}, "
                                   f"got {type(rec).__name__}")
        if "id" not in rec and "_id" not in rec:
            raise RecipematchError(f"{path}:{i}: each line needs an 'id' (or '_id')")
        sid = rec.get("id", rec.get("_id"))
        text = rec.get("text")
        if isinstance(sid, bool) or not isinstance(sid, (str, int)) or str(sid) == "":
            raise RecipematchError(f"{path}:{i}: the id must be a non-empty string or an integer, got "
                                   f"{type(sid).__name__} {short_repr(sid, 40)}")
        if not isinstance(text, str) or not text.strip():
            raise RecipematchError(f"{path}:{i}: source {sid!r} needs a non-empty string 'text', got "
                                   f"{type(text).__name__}")
        sid = str(sid).strip()  # as the corpus stage reads it
        if why := id_problem(sid):
            raise RecipematchError(f"{path}:{i}: source id {sid!r} {why}")
        if sid in out:
            raise RecipematchError(f"{path}:{i}: source id {sid!r} appears twice")
        out[sid] = text
    return out


def check_sources(path: Path, benchmark: Path, *, rows: int, dev_fraction: float) -> dict[str, int]:
    """Check the organic pool (JSONL, ``id`` or ``_id`` and ``text`` per line) against the
    benchmark and the budget.

    A source whose id is a benchmark query/gold id, or whose text matches a benchmark text
    after the v2 normalisation (paper Appendix B), is counted as overlapping (the gates stage
    removes it, with the n-gram and cosine gates on top). Each source supplies at most one
    row per arm (``budget.max_rows_per_source: 1``), so fewer than ``rows / (1 -
    dev_fraction)`` remaining sources cannot fill the budget.

    Returns:
        ``{"sources": n, "overlapping": n, "remaining": n}``.

    Raises:
        RecipematchError: a line that is not a JSON object with a non-empty id and text
            (file:line), a repeated id, or too few sources left for the budget.
    """
    from recipematch.gates import norm_v2 as normalize_v2

    texts, ids = _benchmark_texts_and_ids(benchmark)
    seen = read_sources(path)
    overlap = sum(1 for sid, text in seen.items() if sid in ids or normalize_v2(text) in texts)
    remaining = len(seen) - overlap
    need = int(rows / (1.0 - dev_fraction)) + 1
    if remaining < need:
        raise RecipematchError(f"{path}: {overlap} of {len(seen)} sources overlap the benchmark; the {remaining} "
                               f"left cannot fill budget.rows={rows} (need at least {need} sources with a train/dev "
                               f"split of {dev_fraction}); add sources or lower --rows")
    return {"sources": len(seen), "overlapping": overlap, "remaining": remaining}


def check_recipe(recipe: str) -> tuple[str, Path | None]:
    """``recipe`` is the shipped ``d1_recipe`` or a prompt sidecar (``*.prompt.yaml``).

    Returns:
        ``(prompt name, sidecar path or None)``.

    Raises:
        RecipematchError: the sidecar's own errors (a slot the schema needs and the texts lack,
            a missing answer schema, …; :func:`recipematch.llm.prompts.load_custom_prompt`), or
            a recipe whose answer has no near-misses.
    """
    if recipe == "d1_recipe":
        return "d1_recipe", None
    from recipematch.rules import LLM_PROMPTS

    if recipe in LLM_PROMPTS and not Path(recipe).exists():
        raise RecipematchError(f"--recipe {recipe}: the shipped recipe is d1_recipe (the paper's); another shipped "
                               "prompt is a control (--control), and a recipe of your own is a *.prompt.yaml sidecar")
    from recipematch.llm.prompts import load_custom_prompt

    path = Path(recipe)
    custom = load_custom_prompt(path)
    if custom.role != "generator" or not custom.has_near_misses:
        raise RecipematchError(f"{path}: the recipe must be a generator prompt whose answer declares near_misses "
                               "(the recipe arm trains on its own near-misses)")
    return custom.name, path


# --------------------------------------------------------------------------- params and dvc.yaml

def default_template() -> Path:
    """The project's own ``params.yaml`` (the embedded default) next to the source tree.

    Raises:
        RecipematchError: not found (an installed copy without the repository): pass
            ``--template``.
    """
    import recipematch

    cand = Path(recipematch.__file__).resolve().parents[2] / "params.yaml"
    if not cand.is_file():
        raise RecipematchError(f"no params template at {cand}: pass --template PARAMS.yaml (the project's params.yaml)")
    return cand


def _plain(obj: Any) -> Any:
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def template_params(path: Path) -> dict[str, Any]:
    """The template params file, checked whole (the project's one params reader), as a plain
    mapping (every key, defaults filled in).

    Raises:
        RecipematchError: naming the file and the bad key.
    """
    import dataclasses

    from recipematch.pipeline.door import check_params_file

    return _plain(dataclasses.asdict(check_params_file(Path(path))))


def audit_params(template: Mapping[str, Any], *, control: str, recipe_sidecar: str, backend: str, base_url: str,
                 model: str | None, api_key_env: str, real: bool, base_model: str | None, seeds: int | None,
                 rows: int | None, benchmark_label: str = "benchmark (LLM-built)", real_rule: str = "plain",
                 also: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The audit's ``params.yaml``: ``template`` (the main project's params) with the audit's
    keys set (module docstring), checked whole. ``also``: further declared evaluations
    ``{name: "FOLDER:RULE"}`` (folders inside the project), scored and gated like every
    declared set, with ``role: in_family`` so that they stay out of the number.

    Raises:
        RecipematchError: the result breaks a params rule (naming the key).
    """
    import copy

    from recipematch.config import parse_params

    p = copy.deepcopy(dict(template))
    p["positives"], p["negatives"], p["negatives_volume"] = control_positives(control), "recipe", "full"
    p["arms"] = list(AUDIT_ARMS)
    if "contrasts" in p:  # a params schema with declared contrasts: the audit's one gap
        p["contrasts"] = [" - ".join(AUDIT_CONTRAST)]
    p["evalsets"] = {**p["evalsets"], "n_heldout": 0}
    p["data"] = {**p.get("data", {}), "source": "jsonl", "path": SOURCES_FILE, "retrieve": ""}
    llm = {**p["llm"], "backend": backend, "base_url": base_url, "prompts": ["d1_recipe", control],
           "api_key_env": api_key_env, "recipe_prompt": recipe_sidecar}
    if model:
        llm["model_id"] = llm["judge_model_id"] = model
    p["llm"] = llm
    ev = {"benchmark": {"folder": BENCHMARK_DIR, "rule": "plain", "role": "benchmark", "label": benchmark_label,
                        "report_ks": [1]}}
    if real:
        ev["real"] = {"folder": REAL_DIR, "rule": real_rule, "role": "real", "label": "generator-free set",
                      "report_ks": [1]}
    for name, spec in (also or {}).items():
        folder, _, rule = spec.rpartition(":")
        ev[name] = {"folder": folder, "rule": rule, "role": "in_family", "label": name, "report_ks": [1]}
    p["evaluations"] = ev
    p["style"] = {**p["style"], "train_prompt": "d1_recipe", "score_prompts": ["d1_recipe", control],
                  "tracking_set": "benchmark"}
    p["budget"] = {**p["budget"], "shared_sources": []}
    # the template's pools, judging, SABER and regen runs name the template's own evaluations
    for key in ("pooling", "judging", "saber", "regen", "meld_generate"):
        if key in p:
            p[key] = {}
    if "remedies" in p:  # the audit's one question is recipe vs control: no soups or replay mixes
        p["remedies"] = {**p["remedies"], "arms": []}
    if "hits" in p:  # the audit's sets carry no near-miss probe of the template's
        p["hits"] = {**p["hits"], "probe": ""}
    if base_model:
        p["train"] = {**p["train"], "model": base_model}
    if seeds is not None:
        p["train"] = {**p["train"], "n_seeds": seeds}
    if rows is not None:
        p["budget"] = {**p["budget"], "rows": rows}
    parse_params(p)
    return p


def _stage_params(module: str) -> list[str]:
    """The params a stage reads: its module's ``PARAMS`` (what the door enforces and
    :mod:`recipematch.pipeline.deps` checks in the main ``dvc.yaml``)."""
    import importlib

    return list(importlib.import_module(f"recipematch.pipeline.{module}").PARAMS)


def audit_dvc_yaml(params: Mapping[str, Any]) -> dict[str, Any]:
    """The audit's ``dvc.yaml``: recipematch's stages as ``recipematch <stage>`` commands,
    each declaring the params its module reads, with the data deps and outputs of the main
    ``dvc.yaml`` (the benchmark folder and the source pool in place of the embedded sample).
    Code is not a dep here (the project holds no source tree): ``audit.json`` records the
    recipematch version."""
    replay = params["llm"]["backend"] == "replay"
    evals = [ev["folder"] for _, ev in sorted(params["evaluations"].items())]
    recipe = [RECIPE_DIR] if params["llm"].get("recipe_prompt") else []

    def st(cmd, module, deps, outs, metrics=None, **extra):
        d: dict[str, Any] = {"cmd": cmd, "deps": deps}
        ps = _stage_params(module)
        if ps:
            d["params"] = ps
        d["outs"] = outs
        if metrics:
            d["metrics"] = [{m: {"cache": False}} for m in metrics]
        d.update(extra)
        return d

    arm = {"arm": "${arms}"}
    stages: dict[str, Any] = {
        "corpus": st("recipematch corpus", "corpus", [SOURCES_FILE], ["artifacts/corpus"], ["metrics/corpus.json"]),
        "evalsets": st("recipematch evalsets", "evalsets", ["artifacts/corpus"], ["artifacts/evalsets"],
                       ["metrics/evalsets.json"]),
        "gates": st("recipematch gates", "gates", ["artifacts/corpus", "artifacts/evalsets", *evals],
                    ["artifacts/gates"], ["metrics/gates.json"]),
    }
    if replay:
        stages["recordings"] = st("recipematch recordings", "recordings", ["artifacts/corpus", REPLAY_DIR],
                                  ["artifacts/recordings"], ["metrics/recordings.json"])
    stages["llm"] = st("recipematch llm --prompt ${item.prompt} --no-progress", "llm",
                       ["artifacts/corpus", "artifacts/gates", *(["artifacts/recordings"] if replay else []), *recipe],
                       [{"artifacts/llm/${item.prompt}": {"persist": True}}, "artifacts/pairs/${item.prompt}.jsonl"],
                       ["metrics/llm_${item.prompt}.json"], matrix={"prompt": "${llm.prompts}"})
    stages["specs"] = st("recipematch specs", "specs", [], ["artifacts/specs"])
    stages["cells"] = st("recipematch cells --arm ${item.arm}", "cells",
                         ["artifacts/specs/${item.arm}.json", "artifacts/pairs", "artifacts/corpus", "artifacts/gates",
                          "artifacts/evalsets"], ["artifacts/cells/${item.arm}"], ["metrics/cells/${item.arm}.json"],
                         matrix=arm)
    stages["validate"] = st("recipematch validate --arm ${item.arm}", "validate",
                            ["artifacts/evalsets", "artifacts/corpus", "artifacts/cells/${item.arm}", "artifacts/gates"],
                            ["artifacts/validated/${item.arm}.json"], ["metrics/validate/${item.arm}.json"], matrix=arm)
    stages["train"] = st("recipematch train --arm ${item.arm} --no-progress", "train",
                         ["artifacts/specs/${item.arm}.json", "artifacts/cells/${item.arm}",
                          "artifacts/validated/${item.arm}.json", "artifacts/corpus", "artifacts/gates",
                          "artifacts/evalsets"], [{"models/${item.arm}": {"persist": True}}],
                         ["metrics/train/${item.arm}.json"], matrix=arm)
    stages["evaluate_base"] = st("recipematch evaluate-base --no-progress", "evaluate_base", [*evals],
                                 ["artifacts/eval/base"], ["metrics/eval/base.json"])
    stages["evaluate_bm25"] = st("recipematch evaluate-bm25", "evaluate_bm25", [*evals], ["artifacts/eval/bm25"],
                                 ["metrics/eval/bm25.json"])
    stages["evaluate"] = st("recipematch evaluate-arm --arm ${item.arm} --no-progress", "evaluate",
                            [*evals, "models/${item.arm}"], ["artifacts/eval/${item.arm}"],
                            ["metrics/eval/${item.arm}.json"], matrix=arm)
    stages["stats"] = st("recipematch stats", "stats", ["artifacts/eval"], [], ["metrics/stats.json"])
    del stages["stats"]["outs"]
    stages["audit"] = st("recipematch audit-report", "audit",
                         ["artifacts/eval", "metrics/gates.json", "artifacts/pairs", *evals, SOURCES_FILE, *recipe],
                         [{"reports": {"cache": False}}], ["audit.json"])
    return {"stages": stages}


# --------------------------------------------------------------------------- init

#: the files of a BEIR folder an audit reads (split ``test``); nothing else is copied
BEIR_FILES = ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv", "qrels/test.jsonl")


def _copy_beir(src: Path, dst: Path) -> None:
    """Copy the BEIR files of ``src`` (:data:`BEIR_FILES` that exist, symlinked files read
    through) into ``dst``; other files and links in the folder are left behind (a link loop, a
    FIFO or an unrelated blob is never followed or tracked)."""
    for rel in BEIR_FILES:
        f = src / rel
        if f.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst / rel)


def _copy_file(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def _copy_sidecar(sidecar: Path, dest: Path) -> Path:
    """Copy a prompt sidecar and the text files it names into ``dest``; returns the copy."""
    from recipematch.llm.prompts import load_custom_prompt_spec

    spec = load_custom_prompt_spec(sidecar)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(sidecar, dest / sidecar.name)
    for key in ("system", "user"):
        rel = spec.get(key)
        if isinstance(rel, str) and rel:
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                raise RecipematchError(f"{sidecar}: key {key!r} must name a file next to the sidecar, got {rel!r}")
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(sidecar.parent / rel, dest / rel)
    return dest / sidecar.name


def _run(cmd: list[str], cwd: Path) -> None:
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError:
        raise RecipematchError(f"`{cmd[0]}` is not installed or not on PATH (audit init runs git and dvc)") from None
    if r.returncode != 0:
        why = (r.stderr or r.stdout).strip()[:400] or f"exit code {r.returncode}, no message"
        raise RecipematchError(f"`{' '.join(cmd)}` failed in {cwd}: {why}")


def _dvc() -> str:
    import sys

    cand = Path(sys.executable).with_name("dvc")
    return str(cand) if cand.exists() else "dvc"


def init_audit(workdir: Path, *, benchmark: Path, recipe: str, sources: Path, control: str = "d4_restatement",
               base_url: str = "", model: str | None = None, api_key_env: str = "", replay: Path | None = None,
               real: Path | None = None, base_model: str | None = None, seeds: int | None = None,
               rows: int | None = None, template: Path | None = None, real_rule: str = "plain",
               also: Mapping[str, tuple[Path, str]] | None = None, git: bool = True) -> dict[str, Any]:
    """Write the audit's DVC project into ``workdir`` (see the module docstring).

    Steps: check every input (:func:`check_benchmark`, :func:`check_recipe`,
    :func:`check_sources`), copy them under ``workdir/data``, write ``params.yaml`` (checked)
    and ``dvc.yaml``, then ``git init``, ``dvc init`` and ``dvc add`` each input.

    Args:
        workdir: a new or empty folder.
        benchmark, real: BEIR folders (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``).
        recipe: ``d1_recipe`` or a prompt sidecar (``*.prompt.yaml``).
        sources: organic pool (JSONL with ``id``/``_id`` and ``text``).
        control: the control prompt (a shipped positives prompt; default D4).
        base_url, model, api_key_env: an OpenAI-compatible server, the model it serves (generator
            and judge) and the NAME of the variable holding its key; or ``replay``: a folder of
            released rows (``pairs_d1_recipe.jsonl``, ``pairs_d4_unrelated.jsonl``) to replay.
        base_model: ``train.model`` (a packaged model name or a local sentence-transformers folder).
        seeds, rows: ``train.n_seeds`` and ``budget.rows`` (default: the template's).
        real_rule: the scoring rule of ``real`` (``plain``, ``crosslingual_strict``, ``samelang``).
        also: further BEIR folders to declare, ``{name: (folder, rule)}`` (``role: in_family``:
            scored and kept out of training by the gates, not part of the number).
        template: the params file the audit starts from (default :func:`default_template`).
        git: run ``git init``/``dvc init``/``dvc add`` (False: files only).

    Returns:
        ``{"workdir", "benchmark": counts, "sources": counts, "recipe": name}``.

    Raises:
        RecipematchError: a bad input (named), a non-empty ``workdir``, neither or both of
            ``base_url`` and ``replay``, or a failing git/dvc command.
    """
    workdir = Path(workdir)
    if workdir.is_symlink() or (workdir.exists() and not workdir.is_dir()):
        raise RecipematchError(f"{workdir} is a link or a file: give a new folder")
    if workdir.exists() and any(workdir.iterdir()):
        raise RecipematchError(f"{workdir} is not empty: give a new folder")
    for flag, path in (("--sources", sources), ("--benchmark", benchmark)):
        if not Path(path).exists():
            raise RecipematchError(f"{flag} {path} does not exist")
    if not Path(sources).is_file():
        raise RecipematchError(f"--sources {sources}: give a regular JSONL file (not a folder, pipe or device)")
    if bool(base_url) == bool(replay):
        raise RecipematchError("give either --base-url (with --model) or --replay RECORDINGS, not both or neither")
    if base_url and not model:
        raise RecipematchError("--base-url needs --model (the name the server serves)")
    if replay is not None and recipe != "d1_recipe":
        raise RecipematchError("--replay replays the shipped D1/D4 prompts' recordings; a custom recipe needs a "
                               "server (--base-url)")
    _check_workdir_apart(workdir, [benchmark, sources, real, replay, *(f for f, _ in (also or {}).values())])
    if base_url:
        _check_base_url(base_url)
    from recipematch.config import ENV_VAR_NAME

    if api_key_env and not ENV_VAR_NAME.fullmatch(api_key_env):
        raise RecipematchError("--api-key-env must be the NAME of an environment variable (letters, digits, _), "
                               "never the key itself (not repeated here)")
    if api_key_env and not os.environ.get(api_key_env):
        raise RecipematchError(f"--api-key-env {api_key_env}: no such environment variable here, or it is empty; "
                               f"set it first (only its name is written, the key is read at request time)")
    if model is not None and (not model.strip() or any(c.isspace() or not c.isprintable() for c in model)):
        raise RecipematchError(f"--model {model!r}: give the model name the server serves (no spaces or "
                               "control characters)")
    if replay is not None and control != "d4_restatement":
        raise RecipematchError(f"--replay holds D1 and D4 rows only: --control {control} needs a server (--base-url)")
    if base_model:
        from recipematch.pipeline.models import resolve_model

        resolve_model(base_model, key="--base-model")
    from recipematch.config import field_table

    tpl = template_params(template or default_template())
    bench = check_benchmark(Path(benchmark))
    real_counts = check_benchmark(Path(real), name="real") if real is not None else None
    if real is not None:
        _check_real_apart(Path(real), Path(benchmark), real_rule)
    elif real_rule != "plain":
        raise RecipematchError(f"--real-rule {real_rule} without --real: give the generator-free set it scores")
    also = dict(also or {})
    for name, (folder, rule) in also.items():
        if name in ("benchmark", "real"):
            raise RecipematchError(f"--also {name}=...: the names benchmark and real are taken")
        check_benchmark(Path(folder), name=name, rule=rule)
        for flag, other in (("--benchmark", benchmark), ("--real", real)):
            if other is not None and Path(folder).resolve() == Path(other).resolve():
                raise RecipematchError(f"--also {name}={folder}: that folder is {flag} already")
    recipe_name, sidecar = check_recipe(recipe)
    rows_eff = rows if rows is not None else int(tpl["budget"]["rows"])
    bound = next(r for r in field_table() if r["key"] == "budget.rows")
    if not (bound["min"] <= rows_eff <= bound["max"]):
        raise RecipematchError(f"--rows {rows_eff}: budget.rows must be in [{bound['min']}, {bound['max']:,}]")
    src_counts = check_sources(Path(sources), Path(benchmark), rows=rows_eff,
                               dev_fraction=float(tpl["budget"]["dev_fraction"]))
    if replay is not None:
        from recipematch.pipeline.inputs import RELEASE_FILES

        missing = [f for f in RELEASE_FILES.values() if not (Path(replay) / f).is_file()]
        if missing:
            raise RecipematchError(f"--replay {replay}: missing {missing} (released rows the recordings are built from)")
        _check_replay_rows(Path(replay), Path(sources), tpl["llm"])
    params = audit_params(tpl, control=control, recipe_sidecar="", backend="replay" if replay else "openai",
                          base_url=base_url or "", model=model, api_key_env=api_key_env, real=real is not None,
                          base_model=base_model, seeds=seeds, rows=rows, real_rule=real_rule,
                          also={n: f"{ALSO_DIR}/{n}:{rule}" for n, (_, rule) in also.items()})
    created = not workdir.exists()
    workdir.mkdir(parents=True, exist_ok=True)
    import signal
    import threading

    def _terminated(signum, frame):  # SIGTERM (timeout, kill): clean up as for Ctrl-C
        raise KeyboardInterrupt(f"signal {signum}")

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
    try:
        return _write_project(workdir, benchmark=benchmark, sources=sources, real=real, also=also, sidecar=sidecar,
                              replay=replay, params=params, git=git, bench=bench, real_counts=real_counts,
                              src_counts=src_counts, recipe_name=recipe_name)
    except BaseException:
        # nothing half-written stays behind: the folder is emptied (and removed if init made it)
        for child in list(workdir.iterdir()):
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        if created:
            workdir.rmdir()
        raise
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _write_project(workdir: Path, *, benchmark, sources, real, also, sidecar, replay, params, git, bench,
                   real_counts, src_counts, recipe_name) -> dict[str, Any]:
    """Copy the checked inputs into ``workdir`` and write its params, dvc.yaml and git/DVC state."""
    _copy_beir(Path(benchmark), workdir / BENCHMARK_DIR)
    _copy_file(Path(sources), workdir / SOURCES_FILE)
    tracked = [BENCHMARK_DIR, SOURCES_FILE]
    if real is not None:
        _copy_beir(Path(real), workdir / REAL_DIR)
        tracked.append(REAL_DIR)
    for name, (folder, _) in also.items():
        _copy_beir(Path(folder), workdir / ALSO_DIR / name)
        tracked.append(f"{ALSO_DIR}/{name}")
    if sidecar is not None:
        copy = _copy_sidecar(sidecar, workdir / RECIPE_DIR)
        params["llm"]["recipe_prompt"] = str(copy.relative_to(workdir))
        tracked.append(RECIPE_DIR)
    if replay is not None:
        from recipematch.pipeline.inputs import RELEASE_FILES

        (workdir / REPLAY_DIR).mkdir(parents=True, exist_ok=True)
        for f in RELEASE_FILES.values():
            shutil.copyfile(Path(replay) / f, workdir / REPLAY_DIR / f)
        tracked.append(REPLAY_DIR)
    from recipematch.config import parse_params

    parse_params(params)
    _write_yaml(workdir / "params.yaml", params, "# recipematch audit: the main params.yaml's keys, set for an audit "
                                                 "(recipematch params lists them)\n")
    _write_yaml(workdir / "dvc.yaml", audit_dvc_yaml(params), "")
    (workdir / ".gitignore").write_text("/artifacts\n/models\n/cache\n/mlruns\n/mlflow.db\n/mlflow.db.lock\n",
                                        encoding="utf-8")
    if git:
        _run(["git", "init", "-q"], workdir)
        _run([_dvc(), "init"], workdir)
        _run([_dvc(), "config", "core.analytics", "false"], workdir)
        _run([_dvc(), "add", "-q", *tracked], workdir)
    return {"workdir": str(workdir), "benchmark": bench, "real": real_counts, "sources": src_counts,
            "recipe": recipe_name, "tracked": tracked}


def _write_yaml(path: Path, obj: Any, header: str) -> None:
    import yaml

    path.write_text(header + yaml.safe_dump(obj, sort_keys=False, allow_unicode=True, width=120), encoding="utf-8")


# --------------------------------------------------------------------------- the number

def _gap_dict(bi: Any) -> dict[str, Any]:
    d = bi.to_dict()
    return {k: d[k] for k in ("estimate", "low", "high", "level", "n_boot", "seeds", "scheme", "n_seeds_a",
                              "n_seeds_b", "n_queries")}


def compute_gap(ranks_a, ranks_b, *, n_boot: int, seed: int, paired_seeds: bool):
    """Nested-bootstrap R@1 gap ``a − b`` in points from two per-query rank tables (columns
    ``seed``, ``query_id``, ``rank``; Appendix A), via :func:`recipematch.stats.nested_bootstrap_gap`.

    Returns:
        ``(BootstrapInterval, hits_a, hits_b, clusters)`` with hits in points, shape
        ``(n_seeds, n_queries)``.

    Raises:
        RecipematchError: the two tables score different queries.
    """
    from recipematch.pipeline.stats import _hits
    from recipematch.stats import nested_bootstrap_gap

    ha, qa, ca = _hits(ranks_a, 1)
    hb, qb, _ = _hits(ranks_b, 1)
    if qa != qb:
        raise RecipematchError("the two arms were scored on different queries: rerun the evaluate stages")
    g = nested_bootstrap_gap(100 * ha, 100 * hb, n_boot=n_boot, seed=seed, clusters=ca, paired_seeds=paired_seeds)
    return g, 100 * ha, 100 * hb, ca


def style_probe_benchmark(folder: Path, *, test_fraction: float, seed: int, n_boot: int, level: float, C: float,
                          max_iter: int) -> dict[str, Any]:
    """Style-probe AUC of organic text vs the benchmark's gold documents (Appendix C): each
    scored query is an organic source and its positive golds are its rewrites; the detector
    (word 1–2-gram tf-idf + logistic regression) trains on the train sources and is scored on
    held-out sources, bootstrap over sources (:func:`recipematch.style.run_style_probe`).

    Returns:
        ``{auc, low, high, auc_unstripped, low_unstripped, high_unstripped, n_pos, n_neg,
        n_test_sources}`` (AUC in [0, 1]).
    """
    from recipematch.beir import doc_text, positive_qrels
    from recipematch.benchmarks_data import load_set
    from recipematch.style import run_style_probe

    bset = load_set(folder, "plain", name="benchmark")
    pos = positive_qrels(bset.qrels)
    organic = {q: bset.queries[q] for q in bset.query_ids}
    rewrites = {"benchmark": [(q, doc_text(bset.corpus[d])) for q in bset.query_ids for d in sorted(pos.get(q, ()))]}
    rep, _, _ = run_style_probe(organic, rewrites, train_prompt="benchmark", test_fraction=test_fraction, seed=seed,
                                n_boot=n_boot, level=level, ngram_range=(1, 2), C=C, max_iter=max_iter)
    row = rep.row("benchmark")
    s, u = row.stripped, row.unstripped
    return {"auc": float(s.auc), "low": float(s.low), "high": float(s.high), "auc_unstripped": float(u.auc),
            "low_unstripped": float(u.low), "high_unstripped": float(u.high), "n_pos": int(s.n_pos),
            "n_neg": int(s.n_neg), "n_test_sources": int(s.n_sources)}


def prompt_identity(name: str, sidecar: Path | None) -> dict[str, str]:
    """``{name, sha256}`` of a shipped prompt or a user's sidecar prompt (template SHA-256 of
    :class:`recipematch.llm.prompts.PromptTemplate`)."""
    from recipematch.llm.prompts import load_custom_prompt, load_prompt

    t = load_custom_prompt(sidecar).template if sidecar is not None else load_prompt(name)
    return {"name": t.name, "sha256": t.sha256}


def render_report(audit: Mapping[str, Any], png_name: str) -> str:
    """The one-page markdown report of an ``audit.json``."""
    rs = audit["recipe_sensitivity"]
    lines = ["# Recipe-sensitivity audit", "",
             f"**Recipe sensitivity** ({rs['contrast']}, {rs['evaluation']} {rs['metric']}): "
             f"**{rs['estimate']:+.2f} points** [{rs['low']:+.2f}, {rs['high']:+.2f}] "
             f"({int(rs['level'] * 100)}% nested bootstrap, B = {rs['n_boot']}, {rs['n_seeds_a']} seed(s), "
             f"{rs['n_queries']} queries).", ""]
    if audit.get("did"):
        d = audit["did"]
        lines += [f"**Difference in differences** against the generator-free set `{d['real']}`: "
                  f"{d['estimate']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] (gap there: "
                  f"{d['gap_real']['estimate']:+.2f} [{d['gap_real']['low']:+.2f}, {d['gap_real']['high']:+.2f}]).", ""]
    sp = audit["style_probe"]
    lines += [f"**Style probe** (organic queries vs the benchmark's golds, held-out sources, artefacts stripped): "
              f"AUC {sp['auc']:.3f} [{sp['low']:.3f}, {sp['high']:.3f}]; unstripped {sp['auc_unstripped']:.3f}.", "",
              "| model | " + " | ".join(k for k in next(iter(audit["scores"].values()))) + " |",
              "|---|" + "---|" * len(next(iter(audit["scores"].values())))]
    for m, sc in audit["scores"].items():
        lines.append(f"| {m} | " + " | ".join(f"{v['mean']:.2f}" for v in sc.values()) + " |")
    a = audit["arms"]
    lines += ["", f"Arms: recipe = {a['recipe']['cell']} ({a['recipe']['prompt']}), control = {a['cell']['cell']} "
              f"({a['cell']['prompt']} positives with the recipe's near-misses). Budget {audit['budget']['rows']} rows, "
              f"seeds {audit['seeds']}, base model {audit['model']['base_model']}, generator "
              f"{audit['model']['generator']} ({audit['model']['backend']}).",
              f"Sources: {audit['gates']['sources']} in the pool, {audit['gates']['sources_removed']} removed by the "
              f"gates against the benchmark.", "", f"![scores]({png_name})", ""]
    return "\n".join(lines)


def plot_audit(audit: Mapping[str, Any], path: Path) -> None:
    """Bar chart of benchmark R@1 per model (mean over seeds) and the gap with its interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ev = audit["recipe_sensitivity"]["evaluation"]
    models = list(audit["scores"])
    vals = [audit["scores"][m][metric_key(ev, 1)]["mean"] for m in models]
    names = {"cell": "control (cell)"}
    rs = audit["recipe_sensitivity"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3.2), gridspec_kw={"width_ratios": [3, 1]})
    ax1.bar([names.get(m, m) for m in models], vals, color=["#999", "#bbb", "#c0392b", "#2980b9"][: len(models)])
    ax1.set_ylabel(f"{ev} R@1 (%)")
    ax1.set_title("benchmark score per model")
    ax2.errorbar([0], [rs["estimate"]], yerr=[[rs["estimate"] - rs["low"]], [rs["high"] - rs["estimate"]]], fmt="o",
                 color="k", capsize=6)
    ax2.axhline(0, color="#888", lw=0.8)
    ax2.set_xticks([0], ["recipe − control"])
    ax2.set_ylabel("points")
    ax2.set_title("recipe sensitivity")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)


def json_dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False)


def _check_workdir_apart(workdir: Path, inputs: list) -> None:
    """Refuse a WORKDIR inside an input folder (copying it into itself) or an input inside
    WORKDIR, before anything is written."""
    wd = Path(workdir).resolve()
    for inp in inputs:
        if inp is None:
            continue
        src = Path(inp).resolve()
        if wd == src or wd.is_relative_to(src) or src.is_relative_to(wd):
            raise RecipematchError(f"WORKDIR {workdir} and the input {inp} overlap: give a folder outside every input")


def _check_real_apart(real: Path, benchmark: Path, real_rule: str) -> None:
    """The generator-free set is read under its own rule and must share no query with the
    benchmark (same text after the v2 normalisation of paper Appendix B, whatever the ids or
    order): a shared query counts on both sides of the difference in differences and pulls it
    towards zero."""
    from recipematch.benchmarks_data import load_set
    from recipematch.gates import norm_v2

    rset = load_set(real, real_rule, name="real")
    bset = load_set(benchmark, "plain", name="benchmark")
    bq = {norm_v2(bset.queries[q]) for q in bset.query_ids}
    shared = sum(1 for q in rset.query_ids if norm_v2(rset.queries[q]) in bq)
    if real.resolve() == benchmark.resolve() or shared:
        raise RecipematchError(f"--real {real}: {shared or len(rset.query_ids)} of its {len(rset.query_ids)} queries "
                               f"are queries of --benchmark {benchmark} (same text): the generator-free set must be "
                               "disjoint from the benchmark (real duplicates, human-written pairs), or leave --real out")


def _check_base_url(url: str) -> None:
    """An http(s) URL with a host and no credential part (:func:`recipematch.config.server_url_problem`)."""
    from recipematch.config import server_url_problem

    if why := server_url_problem(url):
        raise RecipematchError(f"--base-url {why}")


def _check_replay_rows(replay: Path, sources: Path, llm: Mapping[str, Any]) -> None:
    """Every released row replayed must be well formed (:func:`recipematch.llm.recordings.release_row`)
    and name a source of the pool (the recordings are keyed by source id), the first bad row
    named with its file and line; then the recordings stage's whole build
    (:func:`recipematch.llm.recordings.build_recordings`: repeated sources, near-miss counts
    per prompt, a text both positive and near-miss) runs on them with the template's ``llm``
    settings, so what init accepts the stage accepts."""
    from recipematch.io import iter_jsonl_strict
    from recipematch.llm.recordings import build_recordings, release_row
    from recipematch.pipeline.inputs import RELEASE_FILES
    from recipematch.rules import negatives_for_prompt

    pool = read_sources(sources)  # already checked by check_sources: one reader of the pool
    for fname in RELEASE_FILES.values():
        n = unknown = 0
        first = None
        for lineno, row in iter_jsonl_strict(replay / fname):
            try:
                sid = release_row(n, row)[0]
            except ValueError as e:
                raise RecipematchError(f"--replay {replay / fname}:{lineno}: {e}") from None
            n += 1
            if sid not in pool:
                unknown += 1
                first = first or (lineno, sid)
        if not n:
            raise RecipematchError(f"--replay {replay / fname}: no released rows")
        if unknown:
            raise RecipematchError(f"--replay {replay / fname}:{first[0]}: {unknown} of {n} rows name a source id not "
                                   f"in --sources (first: {first[1]!r}); replay needs the rows of this pool")
    for prompt, fname in RELEASE_FILES.items():
        try:
            build_recordings([row for _, row in iter_jsonl_strict(replay / fname)], pool, prompt,
                             n_pos=int(llm["n_pos"]), n_neg=negatives_for_prompt(prompt, int(llm["n_neg"])),
                             model_id=str(llm["model_id"]), judge_model_id=str(llm["judge_model_id"]))
        except ValueError as e:
            raise RecipematchError(f"--replay {replay / fname}: {e}") from None
