"""The committed ``dvc.lock`` was recorded from the committed code and params: ``dvc status``
at HEAD shows no stage whose code, data or params deps changed. Outputs that a fresh clone
has not pulled (``deleted``, ``not in cache``) are expected and ignored; a dependency that is
``modified`` or ``new``, or a changed params key, means ``dvc.lock`` is stale and a fresh
clone would rerun that stage."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _dvc() -> str:
    exe = Path(sys.executable).with_name("dvc")
    return str(exe) if exe.exists() else (shutil.which("dvc") or "dvc")


def stale_deps(status: dict) -> dict[str, list[str]]:
    """Per stage, the dependencies ``dvc status --json`` reports as changed in a way only a
    stale lock explains: a code or data file ``modified`` or ``new``, or any params key."""
    out: dict[str, list[str]] = {}
    for stage, entries in status.items():
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            for path, state in (entry.get("changed deps") or {}).items():
                if isinstance(state, dict):  # a params file: {key: modified|new|deleted}
                    out.setdefault(stage, []).extend(f"{path}:{k} {v}" for k, v in state.items())
                elif state in ("modified", "new"):
                    out.setdefault(stage, []).append(f"{path} {state}")
    return out


def test_stale_deps_reads_dvc_status_shapes():
    status = {"corpus": [{"changed deps": {"src/a.py": "modified", "artifacts/x": "deleted"}},
                         {"changed outs": {"artifacts/corpus": "not in cache"}}],
              "stats": [{"changed deps": {"params.yaml": {"arms": "modified"}}}],
              "report": [{"changed outs": {"reports": "deleted"}}], "odd": ["always changed"]}
    assert stale_deps(status) == {"corpus": ["src/a.py modified"], "stats": ["params.yaml:arms modified"]}


def test_committed_lock_matches_committed_code_and_params():
    if not (ROOT / ".git").exists() or not (ROOT / "dvc.lock").is_file():
        pytest.skip("not a git checkout with dvc.lock")
    r = subprocess.run([_dvc(), "status", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    stale = stale_deps(json.loads(r.stdout or "{}"))
    assert not stale, ("dvc.lock is stale (re-run the changed stages, or `dvc commit` where outputs provably "
                       f"cannot change): {json.dumps(stale, indent=1)[:3000]}")
