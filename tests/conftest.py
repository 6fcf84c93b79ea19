import os
from pathlib import Path

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
