"""Rules that join several params keys (arms, prompts, the cell under test, named entries,
folders), checked after every section is built."""

from __future__ import annotations

import re
import typing
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from recipematch.config.sections import EvaluationConfig
from recipematch.config.urls import ENV_VAR_NAME, TRACKING_URI, server_url_problem
from recipematch.errors import RecipematchError, short_repr
from recipematch.rules import (
    ATTACKS,
    BASELINES,
    EXTERNAL_SUBSETS,
    LLM_PROMPTS,
    MELD_ATTACKS,
    NAMED_ARMS,
    POSITIVES,
    CellSpec,
    check_token_pattern,
    missing_input_message,
    parse_contrast,
    remedy_labels,
)

if typing.TYPE_CHECKING:
    from recipematch.config import Params


def cross_checks(p: Params) -> None:
    """Rules that join several keys."""

    try:
        CellSpec(p.positives, p.negatives, p.negatives_volume)
    except RecipematchError as e:
        raise RecipematchError(f"positives/negatives/negatives_volume: {e}") from None
    bad = [a for a in p.arms if a != "cell" and a not in NAMED_ARMS]
    if bad or len(set(p.arms)) != len(p.arms) or not p.arms:
        raise RecipematchError(f"arms must be distinct names from {sorted(NAMED_ARMS)} or 'cell'; got {list(p.arms)}")
    _check_contrasts(p)
    bad = [a for a in p.budget.shared_sources if a not in NAMED_ARMS]
    if bad:
        raise RecipematchError(f"budget.shared_sources may list named arms only; unknown: {bad}")
    if p.budget.shared_sources and (len(p.budget.shared_sources) < 2
                                    or len(set(p.budget.shared_sources)) != len(p.budget.shared_sources)):
        raise RecipematchError("budget.shared_sources: list two or more distinct named arms (or none)")
    if len(set(p.evaluate.ks)) != len(p.evaluate.ks):
        raise RecipematchError(f"evaluate.ks lists a cut-off twice: {list(p.evaluate.ks)}")
    for key, name in (("llm.api_key_env", p.llm.api_key_env), ("llm.judge_api_key_env", p.llm.judge_api_key_env)):
        if name and not ENV_VAR_NAME.fullmatch(name):
            raise RecipematchError(f"{key} must be the NAME of an environment variable (letters, digits, _), "
                                   f"never the key itself")
    bad = [x for x in p.llm.prompts if x not in LLM_PROMPTS]
    if bad or len(set(p.llm.prompts)) != len(p.llm.prompts) or not p.llm.prompts:
        raise RecipematchError(f"llm.prompts must be distinct names from {list(LLM_PROMPTS)}; got {list(p.llm.prompts)}")
    if p.llm.backend == "openai" and not p.llm.base_url:
        raise RecipematchError("llm.base_url: backend openai needs the server's URL (e.g. http://127.0.0.1:8000/v1)")
    for key, url in (("llm.base_url", p.llm.base_url), ("llm.judge_base_url", p.llm.judge_base_url),
                     ("judge2.base_url", p.judge2.base_url)):
        if url and (why := server_url_problem(url)):
            raise RecipematchError(f"{key} {why}")
    if 1 not in p.evaluate.ks:
        raise RecipematchError(f"evaluate.ks must be cut-offs >= 1 including 1 (the report's R@1), got {list(p.evaluate.ks)}")
    if not p.evaluations:
        raise RecipematchError("evaluations: declare at least one evaluation set")
    for name, ev in p.evaluations.items():
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]{0,63}", name):
            raise RecipematchError(f"evaluations.{name}: a name starts with a letter, then up to 63 letters, "
                                   f"digits, '_' or '-'")
        if ev.folder.strip() in (".", "") or ev.folder.startswith("~"):
            raise RecipematchError(f"evaluations.{name}.folder must be a folder inside the project, got {short_repr(ev.folder, 120)}")
        if Path(ev.folder).is_absolute() or ".." in Path(ev.folder).parts:
            raise RecipematchError(f"evaluations.{name}.folder must be relative to the project root, got {short_repr(ev.folder, 120)}")
        _check_graded_evaluation(name, ev)
        bad = [g for g in ev.in_family_for if g not in POSITIVES]
        if bad:
            raise RecipematchError(f"evaluations.{name}.in_family_for: unknown positives {bad}; choose from {sorted(POSITIVES)}")
    _check_report(p)
    _check_external(p)
    _check_attacks(p)
    _check_pooling(p)
    _check_regen(p)
    _check_judging(p)
    _check_saber(p)
    _check_meld_generate(p)
    e = p.engine
    if e.kind == "local" and (e.workers != 1 or e.address or e.num_gpus):
        raise RecipematchError("engine.workers, engine.address and engine.num_gpus need engine.kind: ray "
                               "(local runs units one after another in the stage's process)")
    if p.style.train_prompt not in p.style.score_prompts:
        raise RecipematchError(f"style.train_prompt {short_repr(p.style.train_prompt, 120)} must be one of style.score_prompts")
    bad = [x for x in p.style.score_prompts if x not in p.llm.prompts]
    if bad:
        raise RecipematchError(f"style.score_prompts {bad} are not in llm.prompts {list(p.llm.prompts)}")
    _check_hits(p)
    if p.style.tracking_set not in p.evaluations:
        raise RecipematchError(f"style.tracking_set {short_repr(p.style.tracking_set, 120)} is not a declared evaluation")
    if not any(ev.role == "benchmark" for ev in p.evaluations.values()):
        raise RecipematchError("evaluations: declare at least one set with role: benchmark")
    if p.train.replay.fraction > 0 and not p.train.replay.file:
        raise RecipematchError("train.replay.fraction > 0 needs train.replay.file (a JSONL pair file)")
    _check_remedies(p)
    if not TRACKING_URI.match(p.mlflow.tracking_uri):
        raise RecipematchError(f"mlflow.tracking_uri must be sqlite:///PATH, http(s)://HOST[:PORT] or file:PATH, "
                               f"got {short_repr(p.mlflow.tracking_uri, 120)}")
    if re.search(r"\s", p.mlflow.tracking_uri):
        raise RecipematchError("mlflow.tracking_uri must not contain blanks")
    for key, value in (("data.path", p.data.path), ("data.retrieve", p.data.retrieve)):
        if value and (Path(value).is_absolute() or ".." in Path(value).parts or value.startswith("~")
                      or value.strip() in (".", "")):
            raise RecipematchError(f"{key} must be a file or folder inside the project, relative to its root "
                                   f"(DVC hashes it as a dependency), got {short_repr(value, 120)}")
    if any(ord(c) < 32 for c in p.mlflow.experiment):
        raise RecipematchError("mlflow.experiment must not contain control characters")


def _check_attacks(p) -> None:
    """Each attack is one of the MELD or SABER row sets, its rows a file inside the project; an arm that
    trains on one needs it declared (one line naming the arm and the file to declare)."""

    for key, a in p.attacks.items():
        if key not in ATTACKS:
            raise RecipematchError(f"attacks.{key}: unknown row set; choose from {list(ATTACKS)}")
        if (Path(a.rows).is_absolute() or ".." in Path(a.rows).parts or a.rows.startswith("~")
                or a.rows.strip() in (".", "", "./") or a.rows.endswith("/") or any(ord(c) < 32 for c in a.rows)):
            raise RecipematchError(f"attacks.{key}.rows must be a file inside the project, relative to its root "
                                   f"(DVC hashes it as a dependency), got {short_repr(a.rows, 120)}")
    for arm in p.arms:
        spec = CellSpec(p.positives, p.negatives, p.negatives_volume) if arm == "cell" else NAMED_ARMS.get(arm)
        for key in spec.inputs() if spec else ():
            if key in ATTACKS and key not in p.attacks:
                raise RecipematchError(f"arms[{arm}]: {missing_input_message(spec, key)}")


def pool_models(dense: Iterable[str], arms: Iterable[str]) -> list[str]:
    """A pool's dense models with ``arms`` expanded to every arm of ``arms``, in order (so an
    ablation that changes ``arms`` pools its own arms)."""
    out: list[str] = []
    for m in dense:
        out.extend(arms if m == "arms" else [m])
    return out


#: a stage-entry name (pooling@NAME, judging@NAME, ...): it is a path part and a DVC foreach key
ENTRY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def _check_entry_name(where: str, name: str) -> None:
    if not ENTRY_NAME.fullmatch(name):
        raise RecipematchError(f"{where}: a name is letters, digits, '_' or '-', at most 64")


def _check_inside_project(where: str, cfg: Any, keys: Iterable[str]) -> None:
    """Each of ``cfg``'s file keys ``keys`` that is set is a relative path without '..'."""
    for key in keys:
        val = getattr(cfg, key)
        if val and (Path(val).is_absolute() or ".." in Path(val).parts):
            raise RecipematchError(f"{where}.{key} must be a path inside the project, got {short_repr(val, 100)}")


#: top-level folders that hold stage outputs, caches or code: never a labelling run's input folder
_NOT_INPUT_FOLDERS = frozenset({"artifacts", "metrics", "reports", "cache", "models", "mlruns", ".git", ".dvc",
                                "src", "stages", "tests", ".venv"})


def _check_inside_folder(where: str, cfg: Any, keys: Iterable[str]) -> None:
    """``cfg.folder`` is inside the project and each set file key of ``keys`` lies inside it:
    a labelling stage's dvc.yaml entry declares that folder, so every file it reads is a dep."""
    _check_inside_project(where, cfg, ("folder", *keys))
    top = Path(cfg.folder)
    if top.parts in ((), (".",)):
        raise RecipematchError(f"{where}.folder must name a folder below the project root, got {cfg.folder!r}")
    if (top.parts[0] in _NOT_INPUT_FOLDERS or cfg.folder != cfg.folder.strip()
            or any(c in cfg.folder for c in "~$\\") or any(ord(c) < 32 for c in cfg.folder)):
        raise RecipematchError(f"{where}.folder {short_repr(cfg.folder, 100)} must be a plain folder of inputs, not "
                               f"under {sorted(_NOT_INPUT_FOLDERS)} (stage outputs, caches and code) and without "
                               "'~', '$', backslashes or surrounding spaces")
    for key in keys:
        val = getattr(cfg, key)
        if val and top not in Path(val).parents:
            raise RecipematchError(f"{where}.{key} must lie inside {where}.folder {short_repr(cfg.folder, 100)} "
                                   f"(dvc.yaml tracks that folder), got {short_repr(val, 100)}")


def _check_pooling(p) -> None:
    """Each pool: a name that is a path part, a declared evaluation, dense models that are base
    or a declared arm (each once), a judge depth within the route depth, a usable token regex."""

    for name, pc in p.pooling.items():
        where = f"pooling.{name}"
        _check_entry_name(where, name)
        if pc.evaluation not in p.evaluations:
            raise RecipematchError(f"{where}.evaluation: {short_repr(pc.evaluation, 60)} is not a declared evaluation "
                                   f"(declared: {sorted(p.evaluations)})")
        if not pc.dense:
            raise RecipematchError(f"{where}.dense: name at least one model (base or an arm); the v1 pool is the "
                                   "dense routes' top judge_depth")
        bad = [m for m in pc.dense if m not in ("base", "arms") and m not in p.arms]
        if bad:
            raise RecipematchError(f"{where}.dense: {bad} are neither base, arms (every arm of `arms`) nor arms "
                                   f"listed in `arms` ({list(p.arms)})")
        models = pool_models(pc.dense, p.arms)
        if len(set(models)) != len(models):
            raise RecipematchError(f"{where}.dense names a model twice: {list(pc.dense)} is {models}")
        if pc.judge_depth > pc.route_depth:
            raise RecipematchError(f"{where}: judge_depth {pc.judge_depth} exceeds route_depth {pc.route_depth} "
                                   "(the pools are cut from the routes' lists)")
        check_token_pattern(pc.token_pattern, f"{where}.token_pattern")


def _check_regen(p) -> None:
    """Each regen entry: a path-part name, a prompt of the llm section (source llm) or a rows
    file under data/ and a variant (source rows); each evaluation's ``version_of`` names another
    declared benchmark evaluation. (``of`` is checked by :func:`regen_benchmark`, not here: a
    params file that declares other evaluations still parses.)"""
    for name, rc in p.regen.items():
        where = f"regen.{name}"
        _check_entry_name(where, name)
        if rc.source == "llm":
            if rc.prompt not in p.llm.prompts:
                raise RecipematchError(f"{where}.prompt: {short_repr(rc.prompt, 60)} is not in llm.prompts "
                                       f"{list(p.llm.prompts)} (source llm rewrites through that section)")
            if rc.rows or rc.variant:
                raise RecipematchError(f"{where}: rows and variant belong to source rows, not llm")
        else:
            if not rc.rows or not rc.variant:
                raise RecipematchError(f"{where}: source rows needs both rows (the file) and variant")
            if rc.prompt:
                raise RecipematchError(f"{where}.prompt belongs to source llm, not rows")
            _check_inside_project(where, rc, ("rows",))
            if Path(rc.rows).parts[:1] != ("data",):
                raise RecipematchError(f"{where}.rows must lie under data/ (the DVC-tracked inputs the regen stage "
                                       f"declares), got {short_repr(rc.rows, 100)}")
    for name, ev in p.evaluations.items():
        if ev.version_of:
            other = p.evaluations.get(ev.version_of)
            if other is None or other.role != "benchmark" or ev.version_of == name:
                raise RecipematchError(f"evaluations.{name}.version_of: {short_repr(ev.version_of, 60)} is not another "
                                       "declared benchmark evaluation")


def _check_judging(p) -> None:
    """Each judging entry: a path-part name, a declared pool, files inside the project."""
    for name, jc in p.judging.items():
        where = f"judging.{name}"
        _check_entry_name(where, name)
        if jc.pool not in p.pooling:
            raise RecipematchError(f"{where}.pool: {short_repr(jc.pool, 60)} is not a pooling entry "
                                   f"(declared: {sorted(p.pooling)})")
        _check_inside_folder(where, jc, ("prompt", "system_prompt", "rubric", "recordings"))


def _check_meld_generate(p) -> None:
    """Each generation run: a MELD row set's name (it decides the system prompt and the group),
    files inside its folder."""

    for name, mc in p.meld_generate.items():
        where = f"meld_generate.{name}"
        if name not in MELD_ATTACKS:
            raise RecipematchError(f"{where}: the name is the row set it writes; choose from {list(MELD_ATTACKS)}")
        _check_inside_folder(where, mc, ("domains", "recordings"))


def _check_saber(p) -> None:
    """Each SABER run: a path-part name, files inside the project."""
    for name, sc in p.saber.items():
        where = f"saber.{name}"
        _check_entry_name(where, name)
        _check_inside_folder(where, sc, ("corpus", "queries", "ontology", "topics", "summaries", "judge_prompt",
                                         "topic_prompt", "topic_system_prompt", "recordings"))
        if not sc.topics and not sc.topic_prompt:
            raise RecipematchError(f"{where}: give topics (a file) or topic_prompt (the LLM assigns them)")


def _check_report(p) -> None:
    """``report``: each row of a declared set shows cut-offs it is scored at. A row naming no
    declared set is allowed and not shown (dropping a set stays a one-key edit; the report stage
    names such rows)."""
    for name, row in p.report.items():
        # a label is a Markdown table cell and a matplotlib title: no row breaks, no cell breaks, no maths
        bad = sorted({ch for ch in row.label if ch in "|$" or unicodedata.category(ch) in ("Cc", "Cf")})
        if bad or not row.label.strip():
            raise RecipematchError(f"report.{name}.label {short_repr(row.label, 80)}: a label is shown in Markdown "
                                   "tables and figure titles, so it holds no '|', '$' or control characters "
                                   f"and not only blanks (found {[ord(c) if not c.isprintable() else c for c in bad]})")
        if name not in p.evaluations:
            continue
        if list(row.ks) != sorted(set(row.ks)):
            raise RecipematchError(f"report.{name}.ks {list(row.ks)}: list each cut-off once, ascending")
        if not row.ks:
            raise RecipematchError(f"report.{name}.ks: list at least one cut-off")
        bad = [k for k in row.ks if k not in p.evaluate.ks]
        if bad:
            raise RecipematchError(f"report.{name}.ks {bad} are not in evaluate.ks {list(p.evaluate.ks)}")


def _check_external(p) -> None:
    """Each external benchmark: a name that is a path part, a copy inside the project, known
    subsets for its loader, each named once."""
    for name, ex in p.external.items():
        where = f"external.{name}"
        _check_entry_name(where, name)
        if (Path(ex.copy).is_absolute() or ".." in Path(ex.copy).parts or ex.copy.startswith("~")
                or ex.copy.strip() in (".", "") or any(ord(c) < 32 for c in ex.copy)):
            raise RecipematchError(f"{where}.copy must be a folder inside the project, relative to its root "
                                   f"(DVC hashes it as a dependency), got {short_repr(ex.copy, 120)}")
        if Path(ex.copy).parts[:2] == ("artifacts", "external"):
            raise RecipematchError(f"{where}.copy must not lie under artifacts/external/ (the stages' output, "
                                   f"replaced whole on every build), got {short_repr(ex.copy, 120)}")

        SUBSETS = EXTERNAL_SUBSETS[ex.loader]
        if ex.loader in ("bright", "meld", "mirb") and ex.max_rows:
            raise RecipematchError(f"{where}.max_rows: the {ex.loader} loader keeps every row (the benchmark's protocol)")
        bad = [x for x in ex.subsets if x not in SUBSETS]
        if bad:
            raise RecipematchError(f"{where}.subsets: unknown {ex.loader} subsets {bad}; choose from {list(SUBSETS)}")
        if len(set(ex.subsets)) != len(ex.subsets):
            raise RecipematchError(f"{where}.subsets names a subset twice: {list(ex.subsets)}")


def _check_graded_evaluation(name: str, ev: EvaluationConfig) -> None:
    """The graded fields of one evaluation (Section 6): an external set names its measures; the
    scale is two ordered grades; a group is a name. The measure names are the library's to
    parse: :func:`recipematch.graded.check_declared_measures` (``params --check``, and every scoring stage's door)."""
    where = f"evaluations.{name}"
    if ev.role == "external" and not ev.measures:
        raise RecipematchError(f"{where}.measures: role external needs at least one graded measure (e.g. [nDCG@10])")
    if not ev.measures and (ev.gain != "linear" or ev.grade_scale):
        raise RecipematchError(f"{where}: gain and grade_scale apply to graded measures; declare measures too")
    if ev.grade_scale and (len(ev.grade_scale) != 2 or ev.grade_scale[0] > ev.grade_scale[1]):
        raise RecipematchError(f"{where}.grade_scale: [lowest, highest], lowest <= highest, got {list(ev.grade_scale)}")
    if ev.group and not ENTRY_NAME.fullmatch(ev.group):
        raise RecipematchError(f"{where}.group: letters, digits, '_' or '-', got {short_repr(ev.group, 80)}")


def regen_benchmark(p, name: str) -> EvaluationConfig:
    """The evaluation ``regen.<name>.of`` names, which must be a declared benchmark (paper
    Appendix E: a regeneration rewrites a benchmark's golds). Called by the regen stage and by
    ``recipematch params --check`` (:func:`check_regen_targets`), not at every stage's door: a
    params file that drops an evaluation a regen entry names still serves the other stages.

    Args:
        p: parsed params, or a view holding ``regen`` and ``evaluations``.
        name: a ``regen`` entry.

    Raises:
        RecipematchError: ``of`` names no declared evaluation, or one that is not a benchmark.
    """
    of = p.regen[name].of
    ev = p.evaluations.get(of)
    if ev is None or ev.role != "benchmark":
        raise RecipematchError(f"regen.{name}.of: {short_repr(of, 60)} is not a declared benchmark evaluation "
                               f"(benchmarks: {sorted(n for n, e in p.evaluations.items() if e.role == 'benchmark')})")
    return ev


def check_regen_targets(p) -> None:
    """Every regen entry's ``of`` (:func:`regen_benchmark`).

    Raises:
        RecipematchError: naming the first entry whose ``of`` is no declared benchmark.
    """
    for name in p.regen:
        regen_benchmark(p, name)


def check_arm_inputs(p) -> None:
    """Every declared arm (``cell`` = ``positives`` x ``negatives`` x ``negatives_volume``) reads
    only LLM pair files this configuration builds (a prompt in ``llm.prompts``; paper Tables
    9, 11-12). Called by the first stages that read the arms (``specs``, ``backtranslate``)
    and by ``recipematch params --check``, so a cell the sample cannot build
    (``-S positives=d5``) stops with one line naming the arm, the field and the missing file
    before any model loads. Back-translated and computer-algebra files are always built (the
    ``bt``/``bt3`` cells stop in their cells stage when no translation model is present).

    Args:
        p: parsed params, or a view holding ``arms``, ``positives``, ``negatives``,
            ``negatives_volume`` and ``llm``.

    Raises:
        RecipematchError: ``arms[<arm>]: no input for <field>=<value> of cell ...``.
    """

    for arm in p.arms:
        spec = CellSpec(p.positives, p.negatives, p.negatives_volume) if arm == "cell" else NAMED_ARMS.get(arm)
        if spec is None:
            continue  # an unknown arm name is reported by its own check
        for key in spec.inputs():
            if key in LLM_PROMPTS and key not in p.llm.prompts:
                where = ("arms[cell] (positives/negatives/negatives_volume)" if arm == "cell" else f"arms[{arm}]")
                raise RecipematchError(f"{where}: {missing_input_message(spec, key)}")


def _check_remedies(p: Params) -> None:
    """``remedies``: arms that ``arms`` trains (each once), no value listed twice, a replay
    file inside the project whenever a mix is declared (Appendix E, Table 19)."""
    r = p.remedies
    for key in ("arms", "soup_alphas", "replay_fractions"):
        vals = list(getattr(r, key))
        if len(set(vals)) != len(vals):
            raise RecipematchError(f"remedies.{key} lists a value twice: {vals}")
    bad = [a for a in r.arms if a not in p.arms]
    if bad:
        raise RecipematchError(f"remedies.arms {bad} are not in arms {list(p.arms)}: a remedy starts from a "
                               f"trained arm; name arms that train, or no remedy (-S 'remedies.arms=[]')")
    if r.arms and r.replay_fractions and not r.replay_file:
        raise RecipematchError("remedies.replay_fractions needs remedies.replay_file (a JSONL pair file)")
    _check_inside_project("remedies", r, ("replay_file",))


def _check_contrast_list(key: str, texts, extra: set[str] = frozenset()) -> None:
    """Each of ``texts`` is 'arm - arm' over known names (a named cell, ``cell``, a baseline,
    or one of ``extra``), none declared twice; errors name ``key[i]``."""

    seen = set()
    for i, text in enumerate(texts):
        try:
            a, b = parse_contrast(text)
        except RecipematchError as e:
            raise RecipematchError(f"{key}[{i}]: {e}") from None
        bad = [x for x in (a, b) if x not in NAMED_ARMS and x != "cell" and x not in BASELINES and x not in extra]
        if bad:
            what = " or a declared remedy row" if extra else ""
            raise RecipematchError(f"{key}[{i}] {short_repr(text, 120)} names {bad}: not a named arm, 'cell' "
                                   f"or a baseline {list(BASELINES)}{what}")
        if (a, b) in seen:
            raise RecipematchError(f"{key}[{i}] {short_repr(text, 120)} is declared twice")
        seen.add((a, b))


def _check_hits(p: Params) -> None:
    """``hits.contrasts`` are contrasts as ``contrasts`` are, a declared remedy row allowed too
    (``hits.probe`` is checked by the hits stage, which reads the evaluations: a params file
    whose evaluations have no probe still parses)."""

    r = p.remedies
    _check_contrast_list("hits.contrasts", p.hits.contrasts, set(remedy_labels(r.arms, r.soup_alphas, r.replay_fractions)))


def _check_contrasts(p: Params) -> None:
    """Each declared contrast is 'arm - arm' over known arm names (a named cell, ``cell``, or
    the baselines base and bm25), and no contrast is declared twice (paper Table 1: the gaps
    the report shows). A contrast whose arms are not both run (in ``arms``, or a baseline) is
    skipped by the stats stage and listed there, so ``-S arms=...`` needs no contrasts edit."""
    _check_contrast_list("contrasts", p.contrasts)
