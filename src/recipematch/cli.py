"""The ``recipematch`` command line (click): one subcommand per pipeline stage (the same
command objects ``stages/*.py`` run for ``dvc repro``), plus ``cas`` (generator debugging)
and ``evaluate`` (any BEIR folder under any scoring rule).

Stage subcommands read ``--params`` (default ``params.yaml``) and write under ``--root``
(default ``.``), the same paths ``dvc.yaml`` declares. A user error (bad params, a bad input
file) prints one line and exits with status 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from recipematch.errors import RecipematchError
from recipematch.metrics import SCORING_RULES
from recipematch.pipeline.door import STAGE_COMMANDS, offline_env


class _LazyGroup(click.Group):
    """Imports a stage module only when its subcommand runs (keeps ``--help`` fast)."""

    def list_commands(self, ctx):
        return sorted([*super().list_commands(ctx), *(n for n, _ in STAGE_COMMANDS)])

    def get_command(self, ctx, name):
        import importlib

        for cmd_name, module in STAGE_COMMANDS:
            if cmd_name == name:
                return importlib.import_module(f"recipematch.pipeline.{module}").main
        return super().get_command(ctx, name)


@click.group(cls=_LazyGroup)
@click.version_option(package_name="recipematch")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """recipematch: how much of a benchmark score is bought by recipe-matching."""
    offline_env()
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")


@main.command("params")
@click.option("--check", "check_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Check this params file (every key, type and bound) and exit 0 if it is valid.")
def params_cmd(check_path: Path | None) -> None:
    """Every params.yaml key with its meaning and bounds (or check a file with --check)."""
    from recipematch.config import field_table  # lazy: keeps recipematch --help fast
    from recipematch.pipeline.door import run_guarded  # lazy: keeps recipematch --help fast
    from recipematch.pipeline.params_check import check_params_whole  # lazy: keeps recipematch --help fast

    if check_path is not None:
        run_guarded(lambda: check_params_whole(check_path), debug=False)
        click.echo(f"{check_path}: valid")
        return
    for row in field_table():
        bounds = []
        if row.get("choices"):
            bounds.append("one of " + ", ".join(map(str, row["choices"])))
        if row.get("min") is not None or row.get("max") is not None:
            bounds.append(f"[{row.get('min', '-inf')}, {row.get('max', 'inf')}]")
        if row.get("non_empty"):
            bounds.append("non-empty")
        if row.get("finite"):
            bounds.append("finite")
        if row.get("max_len"):
            bounds.append(f"at most {row['max_len']} characters")
        click.echo(f"{row['key']:32s} {row['help']}" + (f"  ({'; '.join(bounds)})" if bounds else ""))


@main.command("plan")
@click.option("--params", "params_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("params.yaml"),
              show_default=True, help="Parameters file (relative to --root).")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True,
              help="Project root (the stage outputs it holds make the counts exact).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--train-examples-per-s", type=float, default=None, help="Training rate to use (examples/s).")
@click.option("--encode-texts-per-s", type=float, default=None, help="Encoding rate to use (texts/s).")
@click.option("--llm-calls-per-s", type=float, default=None, help="LLM server rate to use (calls/s).")
@click.option("--require-inputs", is_flag=True,
              help="Exit 1 when an input (data, model, LLM server, key variable, Ray head) is not ready.")
def plan_cmd(params_path: Path, root: Path, as_json: bool, train_examples_per_s: float | None,
             encode_texts_per_s: float | None, llm_calls_per_s: float | None, require_inputs: bool) -> None:
    """What the params will cost: rows, examples, steps per (arm, seed), documents to encode,
    LLM calls still to make, hours from measured throughputs, and whether every outside input
    (data paths, base model, LLM servers and key variables, Ray head) is ready. Runs nothing."""
    import json

    from recipematch.pipeline.door import check_params_file, run_guarded  # lazy: keeps recipematch --help fast
    from recipematch.plan import build_plan, format_plan  # lazy: keeps recipematch --help fast

    def go():
        path = params_path if params_path.is_absolute() else root / params_path
        return build_plan(check_params_file(path), root, train_examples_per_s=train_examples_per_s,
                          encode_texts_per_s=encode_texts_per_s, llm_calls_per_s=llm_calls_per_s)

    plan = run_guarded(go, debug=False)
    click.echo(json.dumps(plan, indent=1, sort_keys=True) if as_json else format_plan(plan))
    not_ready = [i["input"] for i in plan["inputs"] if i["status"] != "ok"]
    if require_inputs and not_ready:
        click.echo(f"recipematch: not ready: {', '.join(not_ready)}", err=True)
        click.get_current_context().exit(1)


@main.command("survey")
@click.option("--params", "params_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("params.yaml"),
              show_default=True, help="Parameters file (relative to --root): the declared evaluations and settings.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True,
              help="Project root (evaluation folders are relative to it).")
@click.option("--models", "models_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="YAML list of models: name, path, and optionally query_prompt, max_seq_length, dtype, "
                   "batch_size (each model's own encoding convention). Replaces the default base + BM25.")
@click.option("--model", "model_args", multiple=True, metavar="NAME=PATH",
              help="A local sentence-transformers folder, added to the models under the evaluate stages' "
                   "settings (repeatable).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for survey.json and survey.md (relative to --root; default: survey/ in the report "
                   "stage's folder).")
@click.option("--mlflow/--no-mlflow", "use_mlflow", default=True, show_default=True,
              help="Log one MLflow run per model (experiment <mlflow.experiment>-survey).")
def survey_cmd(params_path: Path, root: Path, models_file: Path | None, model_args: tuple[str, ...], out: Path | None,
               use_mlflow: bool) -> None:
    """Public models on every declared set (paper Table 18): each model scored under its own
    encoding convention, rows sorted by the headline set's R@1. Default: the untrained base
    and BM25, plus every --model."""
    import os

    import yaml

    from recipematch.pipeline.door import check_params_file, run_guarded  # lazy: keeps recipematch --help fast
    from recipematch.pipeline.graph import project_stage_paths, project_stages  # lazy: keeps recipematch --help fast
    from recipematch.survey import default_models, log_survey, parse_models, run_survey, survey_table  # lazy: keeps recipematch --help fast

    def go():
        from dataclasses import replace

        from recipematch.eval_cli import check_outputs_outside, resolve_model  # lazy: keeps recipematch --help fast
        from recipematch.io import atomic_write_text, canonical_json  # lazy: keeps recipematch --help fast

        path = params_path if params_path.is_absolute() else root / params_path
        p = check_params_file(path)
        if models_file is not None:
            try:
                raw = yaml.safe_load(models_file.read_text(encoding="utf-8"))
            except OSError as e:
                raise RecipematchError(f"--models {models_file}: cannot be read ({e.strerror or e})") from None
            except UnicodeDecodeError:
                raise RecipematchError(f"--models {models_file}: not UTF-8 text (a YAML list of models)") from None
            except yaml.YAMLError as e:
                raise RecipematchError(f"--models {models_file}: not YAML ({str(e).splitlines()[0]})") from None
            models = parse_models(raw, where=f"--models {models_file}")
        else:
            models = default_models(p)
        base = default_models(p)[0]
        for arg in model_args:
            name, sep, mpath = arg.partition("=")
            if not sep:
                raise RecipematchError(f"--model {arg!r}: expected NAME=PATH")
            models.append(replace(base, name=name, path=mpath))
        models = parse_models([{k: v for k, v in vars(m).items()} for m in models], where="models")
        if out is None and "report" not in project_stages(root, p):
            raise RecipematchError(f"{root}: this project's dvc.yaml has no report stage to put the survey beside: "
                                   "pass --out")
        given = out if out is not None else project_stage_paths(root, "report", p).out / "survey"
        target = given if given.is_absolute() else root / given
        inputs = {f"evaluations.{n}.folder": root / ev.folder for n, ev in p.evaluations.items()}
        for m in models:  # a model named by an alias is protected as the folder it resolves to
            folder = Path(m.path) if Path(m.path).is_dir() else Path(resolve_model(m.path))
            if folder.is_dir():
                inputs[f"model {m.name}"] = folder.resolve()
        check_outputs_outside({"--out": target}, inputs)
        blocker = next((a for a in (target, *target.parents) if a.exists() and not a.is_dir()), None)
        if blocker is not None:  # before any model is scored, and nothing created yet
            raise RecipematchError(f"--out {given}: {blocker} is a file, so the folder cannot be made")
        cache = project_stage_paths(root, "evaluate_base", p).cache  # the evaluate stages' embedding cache
        res = run_survey(p, root, models, cache_dir=cache, progress=click.echo)
        md = "# Public models on every declared set (Table 18's shape)\n\n" + survey_table(res) + "\n"
        if use_mlflow:  # logged before the files are written: a store that fails leaves no finished-looking output
            from recipematch.pipeline.inputs import mlflow_uri  # lazy: keeps recipematch --help fast

            uri = mlflow_uri(p.mlflow.tracking_uri, root)
            try:
                log_survey(res, uri, f"{p.mlflow.experiment}-survey")
            except RecipematchError:
                raise
            except Exception as e:  # noqa: BLE001 - MLflow and its stores raise many kinds; all mean "not logged"
                raise RecipematchError(f"mlflow.tracking_uri {p.mlflow.tracking_uri}: the survey could not be logged "
                                       f"({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}); "
                                       "nothing was written (--no-mlflow skips the log)") from None
        target.mkdir(parents=True, exist_ok=True)
        tmp_json, tmp_md = target / ".survey.json.partial", target / ".survey.md.partial"
        atomic_write_text(tmp_json, canonical_json(res) + "\n")
        atomic_write_text(tmp_md, md)
        os.replace(tmp_json, target / "survey.json")
        os.replace(tmp_md, target / "survey.md")
        return md

    click.echo(run_guarded(go, debug=False))


@main.command("judging-reliability")
@click.option("--first", required=True, help="A judging entry (its LLM labels: labels.parquet in its judging@ stage's folder).")
@click.option("--second", required=True, help="Another judging entry over the same pool, with another judge model.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True,
              help="Project root.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for reliability.json and reliability.md (default: judging/<first>-vs-<second> in the "
                   "report stage's folder).")
def judging_reliability_cmd(first: str, second: str, root: Path, out: Path | None) -> None:
    """Reliability against a second judge (the candidate design note): two judging entries'
    LLM labels on the pairs both scored: each judge's score distribution, the combined label,
    exact agreement, and the 0-against-2 pairs that need arbitration."""
    import pandas as pd

    from recipematch.errors import RecipematchError  # lazy: keeps recipematch --help fast
    from recipematch.pipeline.door import run_guarded  # lazy: keeps recipematch --help fast
    from recipematch.pipeline.graph import project_stage_paths  # lazy: keeps recipematch --help fast

    def go():
        from recipematch.config import ENTRY_NAME  # lazy: keeps recipematch --help fast
        from recipematch.io import atomic_write_text, canonical_json  # lazy: keeps recipematch --help fast
        from recipematch.judging import reliability_markdown, second_judge_reliability  # lazy: keeps recipematch --help fast

        frames = {}
        for name in (first, second):
            if not ENTRY_NAME.fullmatch(name):
                raise RecipematchError(f"judging entry {name!r}: a name is letters, digits, '_' or '-'")
            path = project_stage_paths(root, f"judging@{name}").out / "labels.parquet"
            if not path.is_file():
                raise RecipematchError(f"{path} does not exist (run judging@{name})")
            df = pd.read_parquet(path, columns=["query_id", "doc_id", "judge", "score", "model"])
            frames[name] = df[(df["judge"] == "llm") & df["score"].notna()]
        if first == second:
            raise RecipematchError("--first and --second name the same judging entry")
        both = frames[first].merge(frames[second], on=["query_id", "doc_id"], suffixes=("_1", "_2"))
        if both.empty:
            raise RecipematchError(f"judging entries {first!r} and {second!r} share no LLM-scored pair")
        rel = second_judge_reliability(both["score_1"].astype(int), both["score_2"].astype(int))
        rel.update(first=first, second=second, first_model=sorted(set(both["model_1"])),
                   second_model=sorted(set(both["model_2"])))
        md = reliability_markdown(rel, first, second)
        target = out if out is not None else project_stage_paths(root, "report").out / "judging" / f"{first}-vs-{second}"
        target.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target / "reliability.json", canonical_json(rel) + "\n")
        atomic_write_text(target / "reliability.md", md + "\n")
        return md

    click.echo(run_guarded(go, debug=False))


@main.group("runs")
def runs_group() -> None:
    """The project's MLflow runs (one per trained arm and seed, and per soup seed)."""


@runs_group.command("restore")
@click.option("--params", "params_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("params.yaml"),
              show_default=True, help="Parameters file (relative to --root).")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True,
              help="Project root.")
def runs_restore_cmd(params_path: Path, root: Path) -> None:
    """Re-create the MLflow runs from the seed records and per-seed scores DVC keeps (after
    moving a broken mlflow.db aside: dvc repro reruns nothing, since no dep changed). Trains
    and scores nothing; runs the store already holds get nothing twice. The training-loss
    history is not in the records and is not restored."""
    import json

    from recipematch.pipeline.door import check_params_file, run_guarded  # lazy: keeps recipematch --help fast
    from recipematch.pipeline.restore import restore  # lazy: keeps recipematch --help fast

    def go():  # the whole params: the stages' folders come from dvc.yaml resolved with them
        path = params_path if params_path.is_absolute() else root / params_path
        if not path.is_file():
            raise RecipematchError(f"parameters file {path} does not exist (--params is relative to --root)")
        return restore(check_params_file(path), root)

    click.echo(json.dumps(run_guarded(go, debug=False), sort_keys=True))


@main.group("audit")
def audit_group() -> None:
    """Audit your own LLM-built benchmark: its recipe-sensitivity number (`audit init`, then `dvc repro`)."""


@audit_group.command("init")
@click.argument("workdir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--benchmark", required=True, type=click.Path(path_type=Path),
              help="The benchmark: a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv).")
@click.option("--recipe", required=True,
              help="The prompt that wrote its golds: d1_recipe or a sidecar FILE.prompt.yaml (slots + answer schema).")
@click.option("--sources", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Organic source pool: JSONL, one {id, text} per line, disjoint from the benchmark.")
@click.option("--base-url", default="", help="OpenAI-compatible server URL (e.g. http://127.0.0.1:8000/v1).")
@click.option("--model", default=None, help="Model name the server serves (generator and judge).")
@click.option("--api-key-env", default="", help="NAME of the environment variable holding the API key.")
@click.option("--replay", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Instead of a server: a folder of released D1/D4 rows to replay.")
@click.option("--control", default="d4_restatement", show_default=True, help="The control prompt (shipped).")
@click.option("--real", type=click.Path(path_type=Path), default=None,
              help="Optional generator-free BEIR set (for the difference in differences).")
@click.option("--real-rule", default="plain", show_default=True,
              type=click.Choice(list(SCORING_RULES)), help="Scoring rule of --real.")
@click.option("--also", "also", multiple=True, metavar="NAME=FOLDER[:RULE]",
              help="A further BEIR folder to declare (scored, gated against, not in the number); repeatable.")
@click.option("--base-model", default=None, help="Base model: packaged name or a local sentence-transformers folder.")
@click.option("--seeds", type=int, default=None, help="Training seeds (train.n_seeds).")
@click.option("--rows", type=int, default=None, help="Matched budget: rows per arm and seed (budget.rows).")
@click.option("--template", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Params file to start from (default: the project's params.yaml).")
@click.option("--debug", is_flag=True, help="Show a traceback for user errors too.")
def audit_init(workdir: Path, benchmark: Path, recipe: str, sources: Path, base_url: str, model: str | None,
               api_key_env: str, replay: Path | None, control: str, real: Path | None, base_model: str | None,
               real_rule: str, also: tuple[str, ...], seeds: int | None, rows: int | None, template: Path | None,
               debug: bool) -> None:
    """Write a DVC project into WORKDIR that measures the benchmark's recipe sensitivity."""
    import json

    from recipematch.audit import init_audit  # lazy: keeps recipematch --help fast
    from recipematch.config import EVAL_RULES_ALLOWED  # lazy: keeps recipematch --help fast
    from recipematch.pipeline.door import run_guarded  # lazy: keeps recipematch --help fast

    extra = {}
    for item in also:
        name, sep, rest = item.partition("=")
        if not sep or not name or not rest:
            raise click.BadParameter(f"{item!r}: expected NAME=FOLDER[:RULE]", param_hint="--also")
        folder, colon, rule = rest.rpartition(":")
        if rule not in EVAL_RULES_ALLOWED:
            if colon and not Path(rest).exists() and Path(folder).exists():
                raise click.BadParameter(f"{item!r}: unknown rule {rule!r} (one of {', '.join(EVAL_RULES_ALLOWED)})",
                                         param_hint="--also")
            folder, rule = rest, "plain"
        if name in extra:
            raise click.BadParameter(f"{name!r} is given twice", param_hint="--also")
        extra[name] = (Path(folder), rule)
    out = run_guarded(lambda: init_audit(workdir, benchmark=benchmark, recipe=recipe, sources=sources,
                                         control=control, base_url=base_url, model=model, api_key_env=api_key_env,
                                         replay=replay, real=real, base_model=base_model, seeds=seeds, rows=rows,
                                         template=template, real_rule=real_rule, also=extra), debug=debug)
    click.echo(json.dumps(out, indent=1, sort_keys=True))
    click.echo(f"next: cd {workdir} && dvc repro", err=True)


def _register() -> None:
    from recipematch.cas.cli import cas  # lazy: keeps recipematch --help fast
    from recipematch.eval_cli import evaluate  # lazy: keeps recipematch --help fast

    main.add_command(cas)
    main.add_command(evaluate)


try:
    _register()
except ImportError as _e:  # a partial install must still run the stage commands
    print(f"recipematch: optional commands unavailable: {_e}", file=sys.stderr)


if __name__ == "__main__":
    main()
