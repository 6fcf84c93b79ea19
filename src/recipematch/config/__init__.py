"""The params schema: every key of ``params.yaml``, its type and its bounds, read once.

A stage reads ``params.yaml`` at its door (:func:`load_params`) into one frozen
:class:`Params`, checked whole before any work starts: unknown or missing keys, wrong types
and out-of-range values are refused with the dotted key named
(:class:`~recipematch.errors.RecipematchError`). The stage then sees only the keys its
``dvc.yaml`` entry declares (:meth:`Params.view`), and hands typed values to the library,
which never sees the params mapping.

Every bound lives on its field (``field(metadata=...)``: ``min``, ``max``, ``choices``,
``finite``, ``help``), so this module is the one list of what a value may be; the README's
troubleshooting table is written from it.

YAML pitfall handled here: ``dvc exp run -S lr=0.000001`` writes ``1e-06``, which YAML 1.1
loaders (PyYAML) read as a *string*. :func:`load_yaml` resolves scalars by the YAML 1.2 core
schema (as DVC's own reader does), and a numeric string for a float field is converted, so
parameters keep their types.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipematch.config.checks import (ENTRY_NAME, check_arm_inputs, check_regen_targets, cross_checks, pool_models,
                                       regen_benchmark)
from recipematch.config.schema import build, section, spec, top
from recipematch.config.sections import (
    EVAL_RULES_ALLOWED,
    AttackConfig,
    BacktranslateConfig,
    BudgetConfig,
    CasConfig,
    DataConfig,
    DevicesConfig,
    EngineConfig,
    EvalSetConfig,
    EvaluateConfig,
    EvaluationConfig,
    ExternalConfig,
    GatesConfig,
    HitsConfig,
    Judge2Config,
    JudgingConfig,
    LLMConfig,
    MeldGenerateConfig,
    MlflowConfig,
    PoolConfig,
    RegenConfig,
    RemediesConfig,
    ReplayConfig,
    ReportRowConfig,
    SaberConfig,
    StatsConfig,
    StyleConfig,
    TrainConfig,
    report_row,
)
from recipematch.config.urls import ENV_VAR_NAME, server_url_problem
from recipematch.config.yamlio import MAX_YAML_CHARS, load_yaml, load_yaml_file, load_yaml_text
from recipematch.errors import RecipematchError

__all__ = [
    "ENTRY_NAME", "ENV_VAR_NAME", "EVAL_RULES_ALLOWED", "MAX_YAML_CHARS", "RUNTIME_ONLY", "TOP_LEVEL_KEYS", "AttackConfig",
    "BacktranslateConfig", "BudgetConfig", "CasConfig", "DataConfig", "DevicesConfig", "EngineConfig", "EvalSetConfig",
    "EvaluateConfig", "EvaluationConfig", "ExternalConfig", "GatesConfig", "HitsConfig", "Judge2Config",
    "JudgingConfig", "LLMConfig", "MeldGenerateConfig", "MlflowConfig", "Params", "ParamsView", "PoolConfig",
    "RegenConfig", "RemediesConfig", "ReplayConfig", "ReportRowConfig", "SaberConfig", "StatsConfig", "StyleConfig", "TrainConfig",
    "UndeclaredParam", "check_arm_inputs", "check_params", "check_regen_targets", "field_table", "load_params",
    "load_params_raw", "regen_benchmark",
    "load_yaml", "load_yaml_file", "load_yaml_text", "parse_params", "pool_models", "report_row", "section",
    "server_url_problem", "top",
]


@dataclass(frozen=True)
class Params:
    """The whole ``params.yaml``, checked (see :func:`load_params`)."""

    seed: int = spec("pair-building seed (CAS draws, LLM sampling, cell assembly); training seeds are train.seed",
                      min=0, max=2**32 - 1)
    positives: str = spec("the cell under test: positives", min=1)
    negatives: str = spec("the cell under test: negatives", min=1)
    negatives_volume: str = spec("the cell under test: LLM negative volume", min=1)
    arms: tuple[str, ...] = spec("arms trained and scored: named cells and/or 'cell'", min=1)
    contrasts: tuple[str, ...] = spec("gaps the report shows, each 'arm - arm' (Table 1, Tables 9 and 12)", min=1)
    evalsets: EvalSetConfig = spec("held-out evaluation sources")
    gates: GatesConfig = spec("contamination gates")
    cas: CasConfig = spec("computer-algebra generator")
    llm: LLMConfig = spec("LLM generation and judging")
    budget: BudgetConfig = spec("matched budget")
    train: TrainConfig = spec("training")
    evaluate: EvaluateConfig = spec("evaluation")
    evaluations: dict[str, EvaluationConfig] = spec("every evaluation set each model is scored on, by name")
    stats: StatsConfig = spec("statistics")
    style: StyleConfig = spec("style probe and tracking")
    mlflow: MlflowConfig = spec("tracking")
    data: DataConfig = spec("organic source problems")
    external: dict[str, ExternalConfig] = spec("external benchmarks built from local copies (Section 6), by name "
                                                "({} = none; the key is required: dvc.yaml builds one stage per entry)")
    attacks: dict[str, AttackConfig] = spec("MELD attack row sets replayed from released rows (Section 6, "
                                             "Appendix D), by pair-file key ({} = none; required like external)")
    pooling: dict[str, PoolConfig] = spec("candidate pools over declared evaluations, by name ({} = none; required "
                                           "like external: dvc.yaml builds one stage per entry)")
    judging: dict[str, JudgingConfig] = spec("graded judging of candidate pools, by name ({} = none; required like "
                                              "pooling: dvc.yaml builds one stage per entry)")
    saber: dict[str, SaberConfig] = spec("SABER-Math labelling runs, by name ({} = none; required like pooling)")
    meld_generate: dict[str, MeldGenerateConfig] = spec("MELD attack row sets generated through the LLM backends "
                                                         "(Appendix D), by row-set name ({} = none; dvc.yaml builds "
                                                         "one stage per entry)", default_factory=dict)
    regen: dict[str, RegenConfig] = spec("regenerated gold versions of declared benchmarks (Appendix E), by name "
                                          "({} = none; dvc.yaml builds one stage per entry)", default_factory=dict)
    report: dict[str, ReportRowConfig] = spec("how the report shows each declared evaluation, by its name: a row "
                                               "label and Table 1's cut-offs (read by the report stage alone; a set "
                                               "left out is shown under its name at R@1)", default_factory=dict)
    hits: HitsConfig = spec("hit accounting: sole wins (Section 7)", default_factory=HitsConfig)
    remedies: RemediesConfig = spec("the remedies for forgetting (Appendix E, Table 19): soups and replay mixes",
                                     default_factory=RemediesConfig)
    judge2: Judge2Config = spec("the second judge (two-judge control)", default_factory=Judge2Config)
    backtranslate: BacktranslateConfig = spec("the back-translation control", default_factory=BacktranslateConfig)
    engine: EngineConfig = spec("where training and evaluation units run (execution only)",
                                 default_factory=EngineConfig)
    devices: DevicesConfig = spec("where each kind of work runs (execution only: read by any stage, declared by "
                                  "none)", default_factory=DevicesConfig)

    def view(self, keys: Iterable[str]) -> ParamsView:
        """The keys a stage declared (dotted, e.g. ``"gates.active"`` or ``"budget"``);
        reading any other key raises :class:`UndeclaredParam`."""
        return ParamsView(self, frozenset(keys))


#: Top-level sections every stage may read without declaring them: they choose where the work
#: runs, never what it computes, so they are no DVC param and an edit reruns no stage.
RUNTIME_ONLY = ("devices",)

#: Every top-level key of params.yaml; anything else is a typo and is refused.
TOP_LEVEL_KEYS = tuple(f.name for f in dataclasses.fields(Params))


def parse_params(raw: Mapping[str, Any]) -> Params:
    """Check a whole params mapping and return it typed.

    Raises:
        RecipematchError: naming the dotted key: unknown, missing, wrong type, out of range,
            or breaking a rule that joins keys (arms, prompts, the cell under test, ...).
    """
    _check_grid_spelling(raw)
    _check_report_rows_moved(raw)
    p = build(raw, Params, "")
    cross_checks(p)
    return p


def _check_report_rows_moved(raw: Mapping[str, Any]) -> None:
    """An evaluation still carrying ``label`` or ``report_ks`` (params written before the report's
    rows got their own section) is refused with where they go now.

    Raises:
        RecipematchError: naming the key and its new place.
    """
    evals = raw.get("evaluations") if isinstance(raw, Mapping) else None
    for name, ev in (evals or {}).items() if isinstance(evals, Mapping) else ():
        for key in ("label", "report_ks"):
            if isinstance(ev, Mapping) and key in ev:
                raise RecipematchError(f"evaluations.{name}.{key}: the report's rows moved to `report` "
                                       f"(report: {{{name}: {{label: ..., ks: [...]}}}}); read by the report "
                                       "stage alone, so a label edit reruns only the report")


def _check_grid_spelling(raw: Mapping[str, Any]) -> None:
    """``remedies.soup_alphas`` and ``remedies.replay_fractions`` as written: DVC passes each value
    to its stage as YAML spelled it, and the stage names its folder by the value as Python prints
    it (``recipe@soup0.3``), so a value must be a decimal number (``1.0``, not ``1`` or
    ``"0.50"``) and not ``-0.0`` (Appendix E, Table 19).

    Raises:
        RecipematchError: naming the key and the value.
    """

    rem = raw.get("remedies") if isinstance(raw, Mapping) else None
    if not isinstance(rem, Mapping):
        return
    for key in ("soup_alphas", "replay_fractions"):
        vals = rem.get(key)
        if not isinstance(vals, list):
            continue
        for v in vals:
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                continue  # the type check names it
            if not isinstance(v, float):
                raise RecipematchError(f"remedies.{key}: write {v!r} as a decimal number such as 1.0 or 0.5 (DVC "
                                       "passes the value as written and the stage names its folder by it)")
            if v == 0 and math.copysign(1.0, v) < 0:
                raise RecipematchError(f"remedies.{key}: write -0.0 as 0.0")


def load_params_raw(path: str | Path) -> dict[str, Any]:
    """Read ``params.yaml`` as a plain mapping, unchecked (for tools that inspect which keys
    are set, such as the ``dvc.yaml`` deps check); stages read it through :func:`load_params`.

    Raises:
        RecipematchError: as :func:`load_yaml`.
    """
    return load_yaml(path)


def load_params(path: str | Path) -> Params:
    """Read and check ``params.yaml`` (the one place it is opened).

    Raises:
        RecipematchError: the message starts with the file's path and names the key.
    """
    raw = load_params_raw(path)
    try:
        return parse_params(raw)
    except RecipematchError as e:
        raise RecipematchError(f"{path}: {e}") from None


def check_params(raw: Mapping[str, Any]) -> None:
    """Validate a raw params mapping (see :func:`parse_params`)."""
    parse_params(raw)


def field_table() -> list[dict[str, Any]]:
    """Every params key with its help text and bounds (for the README's table)."""
    out = []

    def walk(cls, prefix):
        for f in dataclasses.fields(cls):
            tp = typing.get_type_hints(cls)[f.name]
            key = f"{prefix}{f.name}"
            if dataclasses.is_dataclass(tp):
                walk(tp, key + ".")
                continue
            md = {k: v for k, v in f.metadata.items() if v is not None and v is not False}
            if tp is str and "min" in md:
                md.pop("min")
                md["non_empty"] = True
            out.append({"key": key, "type": getattr(tp, "__name__", str(tp)), **md})
            args = typing.get_args(tp)
            if typing.get_origin(tp) is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
                walk(args[1], key + ".<name>.")  # each entry's own keys (evaluations.<name>.self_mask)

    walk(Params, "")
    return out


# --------------------------------------------------------------------------- a stage's view

class UndeclaredParam(AttributeError):
    """A stage read a params key that its ``dvc.yaml`` entry does not declare (a bug in the
    stage: DVC would not rerun it when that key changes)."""


class ParamsView:
    """Read-only view of :class:`Params` restricted to a stage's declared keys.

    A fully declared section (``"budget"``) comes back as its frozen dataclass; a partly
    declared one (``"gates.active"``) as a further view.
    """

    def __init__(self, target: Any, keys: frozenset[str], prefix: str = "") -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_keys", keys)
        object.__setattr__(self, "_prefix", prefix)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self._keys:
            return getattr(self._target, name)
        if not self._prefix and name in RUNTIME_ONLY:
            return getattr(self._target, name)
        sub = frozenset(k.split(".", 1)[1] for k in self._keys if k.startswith(name + "."))
        if sub:
            return ParamsView(getattr(self._target, name), sub, f"{self._prefix}{name}.")
        raise UndeclaredParam(f"this stage reads params key '{self._prefix}{name}', which it does not declare "
                              f"(declared: {sorted(self._prefix + k for k in self._keys)})")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("params are read-only")

    def declared(self) -> dict[str, Any]:
        """``{dotted key: value}`` for every declared key (the run record's config)."""
        out = {}
        for k in sorted(self._keys):
            obj = self._target
            for part in k.split("."):
                obj = getattr(obj, part)
            if isinstance(obj, Mapping):  # a section of named entries (evaluations, pooling, ...)
                obj = {n: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for n, v in obj.items()}
            out[self._prefix + k] = dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj
        return out
