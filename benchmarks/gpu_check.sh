#!/usr/bin/env bash
# The prepared GPU check (issue "paper scale", item 6); see benchmarks/gpu_check.py for what it
# does and prints. At most 8 minutes (hard limit below), nothing from the network, only the
# working tree (no model weights: the model is built from MiniLM's configuration).
#
#   bash benchmarks/gpu_check.sh                        # on the GPU machine: cuda, paper-size corpus
#   bash benchmarks/gpu_check.sh --device cpu --docs 3000 --queries 100 --rows 40   # CPU rehearsal
#
# PYTHON picks the interpreter (default: python3 on PATH, the GPU machine's own Python);
# GPU_CHECK_LIMIT_S raises the 480 s limit for a slow CPU rehearsal only.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
exec timeout --signal=TERM --kill-after=10 "${GPU_CHECK_LIMIT_S:-480}" "${PYTHON:-python3}" benchmarks/gpu_check.py "$@"
