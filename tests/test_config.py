import textwrap
from pathlib import Path

import pytest

from conftest import stage_paths

from recipematch.config import BudgetConfig, TrainConfig, load_yaml, section, top
from recipematch.errors import RecipematchError


def _write(tmp_path, text):
    p = tmp_path / "params.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_dvc_exp_run_float_is_a_float(tmp_path):
    # `dvc exp run -S train.lr=0.000001` writes 1e-06; PyYAML's YAML 1.1 rule reads a string.
    params = load_yaml(_write(tmp_path, """
        lr: 1e-06
        big: 2E5
        half: .5
        n: 12
        name: x1e5
    """))
    assert params["lr"] == 1e-06 and isinstance(params["lr"], float)
    assert params["big"] == 200000.0 and isinstance(params["big"], float)
    assert params["half"] == 0.5
    assert params["n"] == 12 and isinstance(params["n"], int)
    assert params["name"] == "x1e5"


def test_section_types_and_unknown_keys():
    base = {"rows": 60, "dev_fraction": 0.05, "max_rows_per_source": 1, "shared_sources": []}
    assert section({"budget": base}, "budget", BudgetConfig) == BudgetConfig(60, 0.05, 1, ())
    # a numeric string (as a YAML 1.1 writer may leave it) still becomes a float
    assert section({"budget": {**base, "dev_fraction": "5e-02"}}, "budget", BudgetConfig).dev_fraction == 0.05
    with pytest.raises(RecipematchError, match="unknown key"):
        section({"budget": {**base, "rowz": 1}}, "budget", BudgetConfig)
    with pytest.raises(RecipematchError, match="expected an integer"):
        section({"budget": {**base, "rows": "60"}}, "budget", BudgetConfig)
    with pytest.raises(RecipematchError, match="budget.rows: missing"):
        section({"budget": {"dev_fraction": 0.05}}, "budget", BudgetConfig)
    with pytest.raises(RecipematchError, match="expected true/false"):
        top({"flag": "yes"}, "flag", bool)


def test_shipped_params_parse(repo_root):
    params = load_yaml(repo_root / "params.yaml")
    cfg = section(params, "train", TrainConfig)
    assert isinstance(cfg.lr, float) and cfg.lr > 0
    assert {"verified", "recipe"} <= set(top(params, "arms", list[str]))  # the headline contrast


def test_yaml_12_scalars_and_duplicate_keys(tmp_path):
    params = load_yaml(_write(tmp_path, """
        a: 040
        b: 1:00
        c: yes
        d: true
        e: 0x1F
        f: -7
    """))
    assert params == {"a": 40, "b": "1:00", "c": "yes", "d": True, "e": 31, "f": -7}
    with pytest.raises(RecipematchError, match="duplicate key 'a'"):
        load_yaml(_write(tmp_path, "a: 1\na: 2\n"))


@pytest.mark.parametrize("edit, needle", [
    (lambda p: p.update(sede=1), "unknown top-level key"),
    (lambda p: p["gates"].update(active="none"), "cannot be switched off"),
    (lambda p: p["train"].update(lr=float("nan")), "train.lr must be a finite number"),
    (lambda p: p["train"].update(lr=-1.0), "train.lr must lie in"),
    (lambda p: p["evaluate"].update(ks=[5, 10]), "including 1"),
    (lambda p: p["budget"].update(shared_sources=["bogus"]), "unknown: ['bogus']"),
    (lambda p: p.update(seed=-1), "seed must lie in [0,"),
    (lambda p: p.update(arms=["verified", "nope"]), "arms must be"),
    (lambda p: p.update(positives="d9"), "unknown positives"),
    (lambda p: p["stats"].update(n_boot=1), "n_boot"),
    # every bound a hostile user tried (each used to fail later with a traceback, or run unbounded)
    (lambda p: p["evalsets"].update(n_heldout=10_000_000), "evalsets.n_heldout must lie in"),
    (lambda p: p["llm"].update(prompts=["bogus"]), "llm.prompts must be distinct names"),
    (lambda p: p["evaluate"].update(batch_size=0), "evaluate.batch_size must lie in"),
    (lambda p: p["evaluate"].update(max_seq_length=0), "evaluate.max_seq_length must lie in"),
    (lambda p: p["devices"].update(evaluate="tpu"), "devices.evaluate must be one of"),
    (lambda p: p["stats"].update(seed=-1), "stats.seed must lie in"),
    (lambda p: p["mlflow"].update(tracking_uri="not a uri"), "mlflow.tracking_uri must be"),
    (lambda p: p["mlflow"].update(experiment=""), "mlflow.experiment must not be empty"),
    (lambda p: p["mlflow"].update(experiment="x" * 500), "mlflow.experiment is 500 characters long"),
    (lambda p: p["train"].pop("model"), "train.model: missing"),
    (lambda p: p["stats"].update(n_boot=100_000_000), "stats.n_boot must lie in"),
    (lambda p: p["cas"].update(timeout_s=float("inf")), "cas.timeout_s must be a finite number"),
    (lambda p: p["cas"].update(workers=100_000), "cas.workers must lie in"),
    (lambda p: p["train"].update(eval_steps=0), "train.eval_steps must lie in"),
    (lambda p: p["train"].update(max_dev_triplets=-1), "train.max_dev_triplets must lie in"),
    (lambda p: p["llm"].update(backend="openai", base_url=""), "llm.base_url"),
])
def test_check_params_refuses_bad_values(repo_root, edit, needle):
    from recipematch.config import check_params

    check_params(load_yaml(repo_root / "params-paper.yaml"))
    params = load_yaml(repo_root / "params.yaml")
    check_params(params)  # the shipped files are valid
    edit(params)
    with pytest.raises(RecipematchError, match=needle.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        check_params(params)


def test_stage_view_refuses_undeclared_keys(repo_root):
    from recipematch.config import UndeclaredParam, load_params

    p = load_params(repo_root / "params.yaml")
    v = p.view(("seed", "gates.active", "budget"))
    assert v.seed == 42 and v.gates.active == "v2" and v.budget == p.budget
    with pytest.raises(UndeclaredParam, match="'gates.ngram_n'"):
        v.gates.ngram_n
    with pytest.raises(UndeclaredParam, match="'train'"):
        v.train
    assert v.declared() == {"budget": dataclass_dict(p.budget), "gates.active": "v2", "seed": 42}


def dataclass_dict(x):
    import dataclasses

    return dataclasses.asdict(x)


def test_load_params_names_the_file(tmp_path):
    from recipematch.config import load_params

    bad = tmp_path / "params.yaml"
    bad.write_bytes(b"seed: 1\n\xff\n")
    with pytest.raises(RecipematchError, match="params.yaml: not UTF-8"):
        load_params(bad)
    with pytest.raises(RecipematchError, match="does not exist"):
        load_params(tmp_path / "nope.yaml")


def test_params_medium_is_the_default_with_more_epochs_seeds_and_the_reference(repo_root):
    """params-medium.yaml stays in step with params.yaml: it parses, and differs only in the
    epochs, the number of training seeds and the reference arm added."""
    from recipematch.config import check_params

    medium = load_yaml(repo_root / "params-medium.yaml")
    default = load_yaml(repo_root / "params.yaml")
    check_params(medium)
    assert medium["train"]["n_seeds"] == 4 and medium["train"]["epochs"] > default["train"]["epochs"]
    assert medium["arms"] == ["verified", "recipe", "reference", "cell"] and default["arms"] == ["verified", "recipe", "cell"]
    for d in (medium, default):
        d["train"] = {k: v for k, v in d["train"].items() if k not in ("epochs", "n_seeds")}
        d.pop("arms")
    assert medium == default


def test_a_yaml_syntax_error_is_one_line_with_its_position(tmp_path):
    from recipematch.config import load_yaml

    p = tmp_path / "params.yaml"
    p.write_text("seed: 42\narms: [recipe\ncontrasts: []\n")
    with pytest.raises(RecipematchError) as e:
        load_yaml(p)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{p}:3:10: not valid YAML: ")


@pytest.mark.parametrize("key,url,why", [
    ("llm.base_url", "http://u:sk-URLPW@127.0.0.1:9/v1", "user:password"),
    ("llm.base_url", "http://127.0.0.1:9/v1?api_key=sk-Q", "query"),
    ("llm.judge_base_url", "ftp://h/v1", "http"),
    ("judge2.base_url", "http://[::1/v1", "not a valid URL"),
    ("llm.base_url", "http://h:99999/v1", "not a valid URL"),
])
def test_server_urls_are_checked_without_echoing_credentials(key, url, why):
    import copy

    from recipematch.config import load_yaml, parse_params

    raw = copy.deepcopy(load_yaml(Path(__file__).resolve().parents[1] / "params-paper.yaml"))
    section, name = key.split(".")
    raw[section][name] = url
    with pytest.raises(RecipematchError, match=why) as e:
        parse_params(raw)
    assert str(e.value).startswith(key) and "sk-" not in str(e.value)


@pytest.mark.parametrize("override, match", [
    ({"positives": "d5"}, r"arms\[cell\] \(positives/negatives/negatives_volume\): no input for positives=d5 of "
                          r"cell d5xnone: pair file 'd5_survey' .*add d5_survey to llm\.prompts"),
    ({"negatives": "unrelated"}, r"no input for negatives=unrelated .*'unrelated_negatives'"),
    ({"arms": ["verified", "d2_own"]}, r"arms\[d2_own\]: no input for positives=d2 .*'d2_paraphrase'"),
])
def test_an_arm_the_configuration_cannot_build_stops_before_any_model_loads(tmp_path, override, match):
    """A cell whose LLM pair file no declared prompt writes is refused by the first stages that
    read the arms (specs, backtranslate: neither loads a model), naming the arm, the field and
    the missing file; nothing is written."""
    from recipematch.config import check_arm_inputs, parse_params
    from recipematch.pipeline import backtranslate, specs

    raw = load_yaml(Path(__file__).resolve().parents[1] / "params.yaml")
    bad = parse_params({**raw, **override, "remedies": {**raw["remedies"], "arms": []}})
    with pytest.raises(RecipematchError, match=match):
        check_arm_inputs(bad)
    for name, mod in (("specs", specs), ("backtranslate", backtranslate)):
        with pytest.raises(RecipematchError, match=match):
            mod.run(bad.view(mod.PARAMS), stage_paths(tmp_path, name))
    assert not any(tmp_path.rglob("*.json"))
    check_arm_inputs(parse_params(raw))  # the shipped default builds every arm it declares


def test_an_alias_bomb_keeps_its_reason_whatever_the_path_length():
    from recipematch.config import load_yaml_text

    levels = "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(7))
    with pytest.raises(RecipematchError, match="expands, once its aliases"):
        load_yaml_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + levels, "/" + "x" * 230 + "/params.yaml")


def test_a_report_label_edit_reruns_the_report_alone(repo_root):
    """The report's rows (params ``report``) are declared by the report stage alone, and no
    evaluation carries them, so editing a label or a cut-off changes no other stage's params."""
    import yaml

    from recipematch.config import load_params

    stages = yaml.safe_load((repo_root / "dvc.yaml").read_text())["stages"]
    readers = sorted(name for name, st in stages.items()
                     for key in (st.get("do", st).get("params") or [])
                     if isinstance(key, str) and (key == "report" or key.startswith("report.")))
    assert readers == ["report"]
    p = load_params(repo_root / "params.yaml")
    assert p.report and set(p.report) <= set(p.evaluations)
    assert all(not hasattr(ev, "label") and not hasattr(ev, "report_ks") for ev in p.evaluations.values())
