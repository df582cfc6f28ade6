#!/usr/bin/env bash
# GRPO with an entflow method on one node (default 8 GPUs) with verl + vLLM.
# Parameters: see overrides.sh; extra Hydra overrides may follow on the command line.
#   MODEL_PATH=/models/Qwen2.5-Math-7B TRAIN_FILE=... VAL_FILE=... METHOD=steer bash run_grpo_1node.sh
# ENTFLOW_PRINT_OVERRIDES=1 prints the overrides (one per line) and exits.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${PYTHON:=python3}"
# shellcheck source=overrides.sh
source "$HERE/overrides.sh"
run_verl "$@"
