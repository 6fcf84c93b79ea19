#!/usr/bin/env bash
# Create .venv/ in the project root and install recipematch with its pinned dependencies
# (every other package held at constraints.txt, the versions that produced dvc.lock).
# Offline-safe: needs only the package registry. torch==2.13.0 is the CPU build that pip
# finds on this kind of machine; an unpinned torch would pull a CUDA build of several GB.
#   bash scripts/setup.sh          # runtime dependencies
#   bash scripts/setup.sh --test   # plus the test dependencies
set -euo pipefail
cd "$(dirname "$0")/.."
extra=""
[ "${1:-}" = "--test" ] && extra="[test]"
if [ ! -x .venv/bin/python ]; then
  python3.11 -m venv .venv 2>/dev/null || python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -m pip install -q -c constraints.txt -e ".${extra}" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import recipematch, torch, sentence_transformers, dvc, mlflow, great_expectations, ray; print('recipematch', recipematch.__version__, 'torch', torch.__version__)"
