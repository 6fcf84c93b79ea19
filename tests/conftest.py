import hashlib
import os
from pathlib import Path

import numpy as np

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root() -> Path:
    return REPO


#: The raw inputs that ``dvc pull data.dvc`` restores from the in-repo remote.
RELEASE = REPO / "data" / "peer_release"


def require_real_data(path: Path = RELEASE) -> Path:
    """Return ``path`` (a file or folder under ``data/``) for a test that checks real data.

    When it is missing the test is skipped on a developer's machine, but FAILS under CI
    (``CI`` set): CI's command pulls ``data.dvc`` first, so a missing file there means the
    check would silently not run.
    """
    if path.exists():
        return path
    msg = f"{path} is missing: run `dvc pull data.dvc` first"
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)



class Hashed:
    """Mock encoder for tests: a unit vector of ``dim`` numbers drawn from each text's SHA-256
    (no two texts tie), so rankings are deterministic and need no model."""

    def __init__(self, dim: int = 32) -> None:
        self.dim = dim
        self.cache_key = f"hashed-{dim}"

    def encode(self, texts):
        out = np.stack([np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little"))
                        .standard_normal(self.dim) for t in texts]).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def stage_paths(root: Path, stage: str, params=None):
    """The paths stage ``stage`` (DVC's name, ``cells@recipe``) gets under ``root`` from this
    project's ``dvc.yaml`` ``cmd``, resolved with ``params`` (a raw params mapping; default the
    project's ``params.yaml``): tests run a stage on exactly the paths ``dvc repro`` gives it."""
    import yaml

    from recipematch.pipeline.graph import stage_paths as from_dvc_yaml

    if params is None:
        params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    return from_dvc_yaml(Path(root), stage, dvc_yaml=REPO / "dvc.yaml", params=params)


def stage_args(stage: str, params=None) -> list[str]:
    """The options this project's ``dvc.yaml`` ``cmd`` passes stage ``stage`` (its paths
    included), resolved with ``params`` as in :func:`stage_paths`."""
    import yaml

    from recipematch.pipeline.graph import resolve

    if params is None:
        params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    return resolve(REPO, dvc_yaml=REPO / "dvc.yaml", params=params, only=stage)[stage].args


class Outputs:
    """Where the stages of this project's ``dvc.yaml`` write under ``root``, by the stage that
    writes each path (read from the stages' commands, resolved with ``params``: a raw params
    mapping, default the project's ``params.yaml``). Tests read outputs through it and run a
    stage on :meth:`stage`'s paths, exactly those ``dvc repro`` passes."""

    def __init__(self, root: Path, params=None):
        import yaml

        self.root = Path(root).resolve()
        self.params = params if params is not None else yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
        self._cache: dict[str, object] = {}

    def stage(self, name: str):
        """The :class:`~recipematch.pipeline.door.StagePaths` of stage ``name`` (``cells@recipe``)."""
        if name not in self._cache:
            self._cache[name] = stage_paths(self.root, name, self.params)
        return self._cache[name]

    def p(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def rel(self, path: Path) -> str:
        return Path(path).relative_to(self.root).as_posix()

    # one stage's own output
    release = property(lambda self: self.stage("evalsets").release)
    corpus = property(lambda self: self.stage("corpus").out)
    evalsets = property(lambda self: self.stage("evalsets").out)
    gates = property(lambda self: self.stage("gates").out)
    cas = property(lambda self: self.stage("verified").out)
    recordings = property(lambda self: self.stage("recordings").out)
    backtranslate = property(lambda self: self.stage("backtranslate").out)
    replay = property(lambda self: self.stage("replay_pool").out)
    style = property(lambda self: self.stage("style").out)
    reports = property(lambda self: self.stage("report").out)
    metrics = property(lambda self: self.stage("report").metrics_dir)
    cache = property(lambda self: self.stage("evaluate_base").cache)
    scratch = property(lambda self: self.stage("verified").scratch.parent)
    # folders that hold one output per arm, label, prompt or source
    pairs = property(lambda self: self.stage("style").pairs)

    def pair_file(self, source: str) -> Path:
        return self.pairs / f"{source}.jsonl"

    def llm(self, prompt: str) -> Path:
        return self.stage(f"llm@{prompt}").out

    def cells(self, arm: str) -> Path:
        return self.stage("report").cells_root / arm

    def models(self, label: str) -> Path:
        return self.stage("style").models_root / label

    def eval_dir(self, label: str) -> Path:
        return self.stage("stats").evals / label

    def external(self, name: str) -> Path:
        return self.stage(f"external@{name}").out

    def regen(self, name: str) -> Path:
        return self.stage(f"regen@{name}").out



