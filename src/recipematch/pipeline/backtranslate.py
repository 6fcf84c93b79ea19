"""Stage ``backtranslate``: back-translated positives for the ``bt`` and ``bt3`` cells (paper
Appendix C, the non-LLM paraphrase control; Tables 11-12).

Each source problem goes out and back through a local translation model (the paper:
NLLB-200-distilled-600M), one round trip for ``bt``, three (French, German, Russian) for
``bt3``, LaTeX masked at every hop, every drop counted (:mod:`recipematch.backtranslate`).

The stage is in the DVC graph always, but translates only what the declared arms read:

* no arm reads ``bt``/``bt3`` (the default): it writes ``status.json`` saying so and
  returns (interpreter start-up only; no model is loaded);
* an arm reads them but ``backtranslate.model_dir`` holds no model: ``status.json`` records
  "no back-translation model" and the stage succeeds; the cells stage of that arm then stops
  with that message (naming the param), so nothing downstream trains on a missing file;
* otherwise: ``artifacts/backtranslate/<bt|bt3>.jsonl`` (pair rows, ``negatives: []``; the
  cells stage attaches negatives), ``failures_<key>.jsonl`` (every drop with its reason),
  and counts plus paraphrase depth in ``metrics/backtranslate.json``.

Sources: the corpus problems not on the active exclusion list (as for the LLM arms), in
source-id order, capped at ``backtranslate.max_sources`` (0 = all). A source's language is
the corpus ``language`` column, else ``backtranslate.default_language``.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict

from recipematch.depth import paraphrase_depth
from recipematch.config import check_arm_inputs
from recipematch.backtranslate import backtranslate, nllb_code, NLLBTranslator
from recipematch.errors import RecipematchError
from recipematch.io import write_json, write_jsonl
from recipematch.pipeline.door import StagePaths, check_device, progress_option, stage, write_run_record
from recipematch.pipeline.graph import require_declared_dep
from recipematch.pipeline.inputs import corpus_rows, load_exclusion, pair_path
from recipematch.pipeline.pair_sources import BT_HOPS
from recipematch.rules import CellSpec, NAMED_ARMS

PARAMS = ("arms", "positives", "negatives", "negatives_volume", "llm.prompts", "gates.active", "backtranslate")


def needed_keys(p) -> list[str]:
    """The back-translation pair-file keys (``bt``, ``bt3``) some declared arm reads."""
    keys: set[str] = set()
    for arm in p.arms:
        spec = CellSpec(p.positives, p.negatives, p.negatives_volume) if arm == "cell" else NAMED_ARMS[arm]
        keys.update(k for k in spec.inputs() if k in BT_HOPS)
    return sorted(keys)


def check_model_dep(root, model_dir: str) -> None:
    """Refuse a ``backtranslate.model_dir`` outside the folders ``root/dvc.yaml`` lists as the
    stage's deps (``mt_models``): DVC would not hash new weights, so results would go stale.

    Raises:
        RecipematchError: naming the folder and where to put the model.
    """
    require_declared_dep(root, "backtranslate", "${backtranslate.model_dir}", model_dir,
                         fix="put the model under mt_models/ (the folder the stage's deps list) and point "
                             "backtranslate.model_dir there")


def model_present(lay: StagePaths, model_dir: str) -> bool:
    """True when ``model_dir`` holds a model configuration (``config.json``)."""
    return ((lay.root / model_dir) / "config.json").is_file()


def _check_languages(cfg) -> None:
    for key, tags in (("languages", cfg.languages),
                      ("default_language", (cfg.default_language,) if cfg.default_language else ())):
        for t in tags:
            try:
                nllb_code(t)
            except KeyError:
                raise RecipematchError(f"backtranslate.{key}: no NLLB code for {t!r}; use an ISO 639-1 tag "
                                       "such as en, fr, es or an NLLB code such as eng_Latn") from None


def make_translator(lay: StagePaths, p):
    """The translator the stage uses (:class:`recipematch.backtranslate.NLLBTranslator`
    over ``backtranslate.model_dir``, on ``devices.backtranslate``); ``p``: the stage's params."""
    cfg = p.backtranslate
    return NLLBTranslator(str(lay.root / cfg.model_dir), device=p.devices.backtranslate, batch_size=cfg.batch_size,
                          num_beams=cfg.num_beams, max_input_tokens=cfg.max_input_tokens,
                          max_new_tokens=cfg.max_new_tokens)


def _finish(lay: StagePaths, status: dict, metrics: dict) -> dict:
    out = lay.out
    write_json(out / "status.json", status)
    write_json(lay.metrics, metrics)
    return metrics


def run(p, lay: StagePaths, *, progress: bool = True) -> dict:
    """Stage 4e: back-translated positives (1 and 3 hops) for the arms that read them."""
    check_arm_inputs(p)  # a cell the configuration cannot build stops here, naming its missing file
    cfg = p.backtranslate
    _check_languages(cfg)
    need = needed_keys(p)
    # before any work: DVC must hash the model's folder, or new weights would not rerun the stage
    check_model_dep(lay.root, cfg.model_dir)
    out = lay.out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if not need:
        reason = "no arm reads back-translated positives (bt, bt3): nothing translated"
        return _finish(lay, {"needed": [], "reason": reason}, {"needed": [], "reason": reason})
    if not model_present(lay, cfg.model_dir):
        reason = (f"no back-translation model: backtranslate.model_dir = {cfg.model_dir!r} holds no model "
                  f"({(lay.root / cfg.model_dir) / 'config.json'} does not exist). Put the files of "
                  f"{cfg.model_id} there (e.g. `huggingface-cli download {cfg.model_id} --local-dir "
                  f"{cfg.model_dir}` on a machine with network access), or drop the bt/bt3 arms")
        return _finish(lay, {"needed": need, "reason": reason}, {"needed": need, "reason": reason, "model": None})
    check_device("devices.backtranslate", p.devices.backtranslate)

    ex, ex_path = load_exclusion(lay, p.gates.active)
    excluded = set(ex.ids)
    corpus = sorted((r for r in corpus_rows(lay) if r["doc_id"] not in excluded), key=lambda r: r["doc_id"])
    if cfg.max_sources:
        corpus = corpus[: cfg.max_sources]
    allowed = {nllb_code(t) for t in cfg.languages}
    sources, skipped = [], []
    for r in corpus:
        lang = r.get("language") or cfg.default_language
        if isinstance(lang, float) or not lang:  # pandas gives NaN for a missing value
            lang = cfg.default_language
        try:
            code = nllb_code(lang) if lang else None
        except KeyError:
            code = None
        if code is None or (allowed and code not in allowed):
            skipped.append({"source_id": r["doc_id"], "stage": "backtranslate",
                            "item": {"hop": None, "pivot": None, "detail": f"language {lang!r}"},
                            "reason": "unsupported_language"})
            continue
        sources.append((r["doc_id"], r["text"], code))
    translator = make_translator(lay, p)
    metrics: dict = {"needed": need, "model_id": cfg.model_id, "sources": len(corpus),
                     "skipped_language": len(skipped)}
    for key in need:
        log = (lambda m, _k=key: print(f"backtranslate[{_k}] {m}", flush=True)) if progress else None
        rows, failures, counts = backtranslate(sources, translator, hops=BT_HOPS[key], model_id=cfg.model_id,
                                               progress=log)
        failures = sorted(skipped + failures, key=lambda f: f["source_id"])
        dropped: dict[str, int] = {}
        for f in failures:
            dropped[f["reason"]] = dropped.get(f["reason"], 0) + 1
        write_jsonl(pair_path(out, key), rows)
        write_jsonl(out / f"failures_{key}.jsonl", failures)
        metrics[key] = {"hops": BT_HOPS[key], "kept": counts["kept"], "dropped": dict(sorted(dropped.items())),
                        "dropped_total": len(failures),
                        "paraphrase_depth_char3_jaccard": paraphrase_depth(rows)}
    write_run_record(out, "backtranslate", asdict(cfg), {"corpus": lay.corpus / "corpus.parquet",
                                                         "exclusion": ex_path},
                     {k: metrics[k]["kept"] for k in need})
    return _finish(lay, {"needed": need, "reason": None}, metrics)


main = stage("backtranslate", PARAMS, progress_option, reads=("corpus", "gates"), writes=("out", "metrics"))(run)
