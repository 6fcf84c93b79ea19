"""Fan-out of the (arm, seed) units on Ray (recipematch.engine) on the tiny e2e fixture:
2 local Ray workers give the sequential path's bytes, a worker killed mid-seed costs that
seed only, an engine address that cannot be reached is named at once."""

import copy
import logging
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
import ray

from conftest import Outputs, stage_paths
from recipematch import engine as engine_mod
from recipematch.config import EngineConfig, parse_params
from recipematch.errors import RecipematchError
from recipematch.io import read_json, sha256_tree
from recipematch.pipeline import evaluate, train
from test_pipeline_e2e import PARAMS, _build_pairs, _root, stages

ARM = "recipe"
SEEDS = (42, 43)
RAY2 = EngineConfig(kind="ray", workers=2, num_cpus=1)


def _train(params, lay, engine=None):
    return train.run(parse_params(params).view(train.PARAMS), stage_paths(lay.root, f"train@{ARM}", params), ARM,
                     progress=False, engine=engine)


def _evaluate(params, lay, engine=None):
    return evaluate.run(parse_params(params).view(evaluate.PARAMS), stage_paths(lay.root, f"evaluate@{ARM}", params),
                        ARM, progress=False, engine=engine)


@pytest.fixture(scope="module")
def ray_local():
    """One local Ray for the module (2 CPUs): workers import this checkout's code."""
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
             runtime_env=engine_mod.same_code_env())
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    """A tiny project with the recipe arm's 2 seed files built and validated, nothing trained."""
    params = copy.deepcopy(PARAMS)
    params["arms"] = [ARM]
    lay = _root(tmp_path_factory.mktemp("fanout-base"))
    _build_pairs(params, lay)
    stages.run_validate(params, lay, ARM)
    return params, lay


def _copy(lay, dest: Path):
    shutil.copytree(lay.root, dest)
    return Outputs(dest)


@pytest.fixture(scope="module")
def sequential(validated, tmp_path_factory):
    """The reference: both seeds trained and scored one after another in this process, on
    one torch thread (what each Ray unit gets with engine.num_cpus 1)."""
    import torch

    params, lay = validated
    lay = _copy(lay, tmp_path_factory.mktemp("fanout-seq") / "p")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _train(params, lay)
        _evaluate(params, lay)
    finally:
        torch.set_num_threads(threads)
    return lay


def _outputs(lay) -> dict[str, bytes]:
    """Every file the train and evaluate stages write for the arm (checkpoints by tree hash)."""
    out = {f"models/{ARM}/seed_{s}/": sha256_tree(lay.models(ARM) / f"seed_{s}").encode() for s in SEEDS}
    for p in sorted([*lay.models(ARM).glob("seed_*.json"), *lay.eval_dir(ARM).glob("*"),
                     lay.metrics / "train" / f"{ARM}.json", lay.metrics / "eval" / f"{ARM}.json"]):
        out[str(p.relative_to(lay.root))] = p.read_bytes()
    return out


def _runs(lay):
    from recipematch import tracking

    c = tracking.client(f"sqlite:///{lay.root / 'mlflow.db'}")
    return c.search_runs([c.get_experiment_by_name("e2e").experiment_id], max_results=100)


def test_two_ray_workers_give_the_sequential_bytes(validated, sequential, ray_local, tmp_path):
    params, lay = validated
    lay = _copy(lay, tmp_path / "p")
    _train(params, lay, RAY2)
    _evaluate(params, lay, RAY2)
    seq, par = _outputs(sequential), _outputs(lay)
    assert sorted(par) == sorted(seq) and any(k.endswith(".parquet") for k in par)
    assert [k for k in seq if seq[k] != par[k]] == []
    # the driver logged every run (no worker touched the store): one per seed, same content
    runs = {r.data.tags["seed"]: r for r in _runs(lay)}
    ref = {r.data.tags["seed"]: r for r in _runs(sequential)}
    assert sorted(runs) == ["42", "43"]
    for s, r in runs.items():
        assert r.info.status == "FINISHED" and r.info.run_name == ref[s].info.run_name
        assert r.data.tags["checkpoint_sha256"] == ref[s].data.tags["checkpoint_sha256"]
        assert {k: v for k, v in r.data.metrics.items()} == ref[s].data.metrics
        assert "tier_d1.R_at_1" in r.data.metrics


def _kill_when_training(lay, seed: int, killed: list, stop: threading.Event) -> None:
    """Kill (SIGKILL) the Ray worker running ``seed``'s unit once its training has started
    (its intermediate-checkpoint folder exists); Ray titles that process by the unit's label."""
    work = lay.p("cache", "train-tmp", ARM, f"seed_{seed}")
    label = f"train[{ARM}] seed {seed}".encode()
    while not stop.is_set():
        if any(work.glob("rm-train-*")):
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if cmd.startswith(b"ray::") and label in cmd:
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(int(pid))
                    return
        time.sleep(0.02)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the worker through /proc")
def test_a_worker_killed_mid_seed_costs_that_seed_only(validated, sequential, ray_local, tmp_path, caplog):
    params, lay = validated
    lay = _copy(lay, tmp_path / "p")
    killed: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_kill_when_training, args=(lay, 43, killed, stop), daemon=True)
    watcher.start()
    try:
        with pytest.raises(engine_mod.EngineError, match=r"train\[recipe\] seed 43: the worker running it stopped"):
            _train(params, lay, RAY2)
    finally:
        stop.set()
        watcher.join(5)
    assert killed, "the seed-43 worker was never seen training"
    # seed 42 ran on and was recorded; seed 43 left no record, and its run is marked FAILED
    assert (lay.models(ARM) / "seed_42.json").exists() and not (lay.models(ARM) / "seed_43.json").exists()
    assert {r.data.tags["seed"]: r.info.status for r in _runs(lay)} == {"42": "FINISHED", "43": "FAILED"}
    weights_42 = next((lay.models(ARM) / "seed_42").rglob("*.safetensors"))
    stamp = weights_42.stat().st_mtime_ns
    record_42 = (lay.models(ARM) / "seed_42.json").read_bytes()

    caplog.set_level(logging.INFO, logger="recipematch")
    _train(params, lay, RAY2)  # the stage rerun
    assert "train[recipe] seed 42 submitted" not in caplog.text  # only seed 43 went to a worker
    assert "train[recipe] seed 43 submitted" in caplog.text
    assert weights_42.stat().st_mtime_ns == stamp and (lay.models(ARM) / "seed_42.json").read_bytes() == record_42
    # the resumed seed is the sequential seed, byte for byte; its run was resumed, not duplicated
    for s in SEEDS:
        assert sha256_tree(lay.models(ARM) / f"seed_{s}") == sha256_tree(sequential.models(ARM) / f"seed_{s}")
    assert (lay.metrics / "train" / f"{ARM}.json").read_bytes() == (sequential.metrics / "train" / f"{ARM}.json").read_bytes()
    runs = _runs(lay)
    assert sorted((r.data.tags["seed"], r.info.status) for r in runs) == [("42", "FINISHED"), ("43", "FINISHED")]
    assert next(r for r in runs if r.data.tags["seed"] == "43").data.tags["resumed"] == "true"


@pytest.mark.parametrize("address, why", [
    ("127.0.0.1:1", "cannot connect"),
    ("no-such-head.invalid:6379", "does not resolve"),
    ("ray://head:10001", "Ray Client (ray://) is not supported"),
    ("head-without-port", "expected HOST:PORT"),
])
def test_an_unreachable_engine_address_is_named_at_once(validated, address, why):
    params, lay = validated
    eng = EngineConfig(kind="ray", address=address, workers=2, connect_timeout_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(engine_mod.EngineError) as err:
        _train(params, lay, eng)
    assert time.monotonic() - t0 < 15
    assert f"engine.address {address!r}" in str(err.value) and why in str(err.value)
    assert isinstance(err.value, RecipematchError) and "\n" not in str(err.value)
    assert not lay.models(ARM).exists()  # nothing was prepared


def test_a_silent_engine_address_times_out(tmp_path):
    """A port that accepts nothing within the timeout (a listening socket that never
    accepts still completes the TCP handshake, so use a full backlog)."""
    import socket

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(0)
        port = srv.getsockname()[1]
        fillers = []
        try:
            for _ in range(8):  # fill the accept backlog so later connects hang
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", port))
                fillers.append(s)
            t0 = time.monotonic()
            try:
                engine_mod.check_address(f"127.0.0.1:{port}", 0.5)
            except engine_mod.EngineError as e:
                assert f"'127.0.0.1:{port}'" in str(e)
                assert time.monotonic() - t0 < 5
            else:
                pytest.skip("this kernel completes connections beyond the backlog: no silent port to show")
        finally:
            for s in fillers:
                s.close()


def test_engine_settings_are_checked_naming_the_key():
    p = copy.deepcopy(PARAMS)
    p["engine"] = {"kind": "local", "workers": 2}
    with pytest.raises(RecipematchError, match=r"engine.workers.*need engine.kind: ray"):
        parse_params(p)
    p["engine"] = {"kind": "dask"}
    with pytest.raises(RecipematchError, match=r"engine.kind must be one of \['local', 'ray'\]"):
        parse_params(p)
    assert parse_params(PARAMS).engine == EngineConfig()  # absent: local, today's behaviour
    with pytest.raises(engine_mod.EngineError, match="devices.train is cuda but engine.num_gpus is 0"):
        engine_mod.check_unit_device(EngineConfig(kind="ray"), "devices.train", "cuda")
    with pytest.raises(engine_mod.EngineError, match="engine.num_gpus is 1 but devices.evaluate is cpu"):
        engine_mod.check_unit_device(EngineConfig(kind="ray", num_gpus=1.0), "devices.evaluate", "cpu")


def test_map_units_keeps_order_and_raises_the_units_own_error(ray_local):
    def _double(x, shared):  # defined here: Ray ships it by value (workers cannot import a test module)
        time.sleep(0.3 if x == 5 else 0.0)  # the first unit finishes last
        if x == 3:
            raise ValueError("unit 3 is bad")
        return x * shared

    done = []
    out = engine_mod.map_units(_double, [5, 1, 4, 2], RAY2, shared=10, on_done=lambda i, r: done.append(i))
    assert out == [50, 10, 40, 20] and sorted(done) == [0, 1, 2, 3]
    assert engine_mod.map_units(_double, [5, 1], EngineConfig(), shared=10) == [50, 10]
    with pytest.raises(ValueError, match="unit 3 is bad") as err:
        engine_mod.map_units(_double, [1, 3], RAY2, shared=1)
    assert str(err.value) == "unit 3 is bad"  # the unit's own exception, not Ray's wrapper


def test_engine_is_no_dvc_param_of_any_stage(repo_root):
    """Changing where units run reruns nothing (the outputs are the same, tested above)."""
    import yaml

    doc = yaml.safe_load((repo_root / "dvc.yaml").read_text())
    assert not [n for n, st in doc["stages"].items()
                if any(str(p if isinstance(p, str) else next(iter(p))).startswith("engine") for p in st.get("params", []))]
    assert train.main.runtime_keys == ("engine",) and evaluate.main.runtime_keys == ("engine",)
