#!/usr/bin/env bash
# GRPO with an entflow method on several nodes with verl + vLLM, run on the Ray head node.
#
# First start one Ray cluster over the nodes (same Python environment with entflow[verl] on each):
#   head:     ray start --head --port=6379
#   others:   ray start --address=<head-ip>:6379
# then on the head node:
#   NNODES=4 GPUS_PER_NODE=8 MODEL_PATH=/shared/Qwen2.5-Math-7B TRAIN_FILE=/shared/math/train.parquet \
#   VAL_FILE=/shared/math/test.parquet METHOD=opefo bash run_grpo_multinode.sh
# Paths must be readable from every node. Parameters: see overrides.sh.
# ENTFLOW_PRINT_OVERRIDES=1 prints the overrides (one per line) and exits.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${PYTHON:=python3}"
: "${NNODES:=2}"
: "${TRAIN_BATCH_SIZE:=512}"
: "${MINI_BATCH_SIZE:=128}"
: "${ROLLOUT_TP:=2}"
: "${RAY_ADDRESS:=auto}"
export RAY_ADDRESS
# shellcheck source=overrides.sh
source "$HERE/overrides.sh"
run_verl "$@"
