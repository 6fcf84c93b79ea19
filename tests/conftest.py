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
