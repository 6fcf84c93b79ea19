"""The committed ``dvc.lock`` was recorded from the committed code and params: ``dvc status``
at HEAD shows no stage whose code, data or params deps changed. Outputs that a fresh clone
has not pulled (``deleted``, ``not in cache``) are expected and ignored; a dependency that is
``modified`` or ``new``, or a changed params key, means ``dvc.lock`` is stale and a fresh
clone would rerun that stage. Runs in CI from a fresh clone (after ``dvc pull data.dvc``)."""

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


#: top-level folders that only stage outputs live in (a fresh clone has none of them filled;
#: ``models/``, a dep of style and pooling whole, holds no committed file, so DVC reads it as deleted there)
OUTPUT_ROOTS = ("artifacts", "models", "metrics", "reports", "cache", "dvc_plots")


def stale_deps(status) -> dict[str, list[str]]:
    """Per stage, what ``dvc status --json`` reports that only a stale lock explains: a
    changed command, a code or data dependency ``modified``, ``new`` or ``deleted`` (stage
    outputs under :data:`OUTPUT_ROOTS` are left out: a fresh clone has not built them), or any
    params key. An entry of a shape DVC does not write is reported too, never skipped."""
    out: dict[str, list[str]] = {}
    if not isinstance(status, dict):
        return {"<status>": [f"not an object: {str(status)[:80]}"]}
    for stage, entries in status.items():
        if not isinstance(entries, list):
            out.setdefault(stage, []).append(f"unexpected entry {str(entries)[:80]}")
            continue
        for entry in entries:
            if entry == "changed command":
                out.setdefault(stage, []).append("changed command")
                continue
            if not isinstance(entry, dict):
                if entry != "always changed":
                    out.setdefault(stage, []).append(f"unexpected entry {str(entry)[:80]}")
                continue
            deps = entry.get("changed deps") or {}
            if not isinstance(deps, dict):
                out.setdefault(stage, []).append(f"unexpected changed deps {str(deps)[:80]}")
                continue
            for path, state in deps.items():
                if isinstance(state, dict):  # a params file: {key: modified|new|deleted}
                    out.setdefault(stage, []).extend(f"{path}:{k} {v}" for k, v in state.items())
                elif Path(path).parts[:1] and Path(path).parts[0] in OUTPUT_ROOTS:
                    continue
                elif state in ("modified", "new", "deleted") or not isinstance(state, str):
                    out.setdefault(stage, []).append(f"{path} {state}")
    return out


def test_stale_deps_reads_dvc_status_shapes():
    status = {"corpus": [{"changed deps": {"src/a.py": "modified", "artifacts/x": "deleted"}},
                         {"changed outs": {"artifacts/corpus": "not in cache"}}],
              "stats": [{"changed deps": {"params.yaml": {"arms": "modified"}}}],
              "style": [{"changed deps": {"models": "modified", "src/gone.py": "deleted"}}],
              "train": ["changed command"],
              "report": [{"changed outs": {"reports": "deleted"}}], "odd": ["always changed"]}
    assert stale_deps(status) == {"corpus": ["src/a.py modified"], "stats": ["params.yaml:arms modified"],
                                  "style": ["src/gone.py deleted"], "train": ["changed command"]}
    assert stale_deps({"x": {"changed deps": {}}}) == {"x": ["unexpected entry {'changed deps': {}}"]}
    assert stale_deps({"x": [{"changed deps": ["a"]}]}) == {"x": ["unexpected changed deps ['a']"]}
    assert stale_deps([]) == {"<status>": ["not an object: []"]}


def test_committed_lock_matches_committed_code_and_params():
    if not (ROOT / ".git").exists() or not (ROOT / "dvc.lock").is_file():
        pytest.skip("not a git checkout with dvc.lock")
    r = subprocess.run([_dvc(), "status", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    stale = stale_deps(json.loads(r.stdout or "{}"))
    assert not stale, ("dvc.lock is stale (re-run the changed stages, or `dvc commit` where outputs provably "
                       f"cannot change): {json.dumps(stale, indent=1)[:3000]}")


def test_models_holds_no_committed_file():
    """A committed file under ``models/`` (a ``.gitkeep``) made a fresh clone's ``dvc status``
    read the ``models`` dep of style and pooling as modified, like a stale lock."""
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "models"], capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked == []
