"""Devices are execution only (the `devices` section, beside `engine`): every stage reads them
without declaring them, no stage's dvc.yaml params name them, and a params file written before
the section existed is refused with the key's new home."""

import importlib

import pytest
import yaml

from recipematch.cli import STAGE_COMMANDS
from recipematch.config import RUNTIME_ONLY, UndeclaredParam, load_yaml, parse_params
from recipematch.errors import RecipematchError
from recipematch.training import TrainSettings


@pytest.fixture
def raw(repo_root):
    return load_yaml(repo_root / "params.yaml")


def test_no_stage_declares_a_device_and_dvc_yaml_names_none(repo_root):
    for _name, module in STAGE_COMMANDS:
        mod = importlib.import_module(f"recipematch.pipeline.{module}")
        assert not [k for k in mod.PARAMS if k.split(".")[0] in RUNTIME_ONLY or k.endswith("device")], module
    stages = yaml.safe_load((repo_root / "dvc.yaml").read_text())["stages"]
    named = [(s, k) for s, d in stages.items() for entry in d.get("params", [])
             for k in (entry if isinstance(entry, dict) else {entry: None})
             if "device" in str(k) or str(k).split(".")[0] in RUNTIME_ONLY]
    assert named == []


def test_any_view_reads_devices_and_nothing_else_undeclared(raw):
    p = parse_params({**raw, "devices": {**raw["devices"], "train": "mps"}})
    view = p.view(("budget",))
    assert view.devices.train == "mps" and view.devices.evaluate == raw["devices"]["evaluate"]
    with pytest.raises(UndeclaredParam):
        view.train  # noqa: B018 - the read is the test
    with pytest.raises(UndeclaredParam):  # only at the top: a section's own "devices" key is no pass
        p.view(("budget.rows",)).budget.devices  # noqa: B018


@pytest.mark.parametrize(("section", "key", "new"), [
    ("train", "device", "devices.train"), ("evaluate", "device", "devices.evaluate"),
    ("gates", "cosine_device", "devices.cosine_gate"), ("backtranslate", "device", "devices.backtranslate"),
])
def test_an_old_device_key_is_refused_naming_its_new_home(raw, section, key, new):
    bad = {**raw, section: {**raw[section], key: "cpu"}}
    with pytest.raises(RecipematchError, match=rf"{section}\.{key} is now {new}"):
        parse_params(bad)


def test_an_old_distilled_device_in_a_judging_entry_names_its_new_home(raw):
    entry = {"pool": "p", "folder": "judge", "prompt": "judge/prompt.txt", "backend": "replay", "base_url": "",
             "model_id": "m", "distilled_device": "cuda"}
    with pytest.raises(RecipematchError, match=r"judging\.j\.distilled_device is now devices\.distilled_judge"):
        parse_params({**raw, "judging": {"j": entry}})


def test_a_bad_device_is_refused_naming_the_key(raw):
    with pytest.raises(RecipematchError, match=r"devices\.cosine_gate must be one of"):
        parse_params({**raw, "devices": {**raw["devices"], "cosine_gate": "tpu"}})
    with pytest.raises(RecipematchError, match=r"devices: unknown key"):
        parse_params({**raw, "devices": {**raw["devices"], "gpu": "cuda"}})


def test_training_settings_take_the_device_from_devices(raw):
    p = parse_params(raw)
    assert TrainSettings.pick(p.train, device="cuda").device == "cuda"
    assert TrainSettings.pick(p.train).device == "cpu"
    assert TrainSettings.pick(p.train, device=p.devices.train).identity()["device"] == raw["devices"]["train"]
