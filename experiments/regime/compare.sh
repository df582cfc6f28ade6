#!/usr/bin/env bash
# Design-seed comparison on the exploration-bound preset (docs/regime.md): every method at its paper
# setting, seeds 100 101 102 (never 0..9), one run at a time; then pass@256 of each final policy on
# the hard split. Usage: experiments/regime/compare.sh OUT_DIR [STEPS]
set -u
OUT=${1:?out dir}; STEPS=${2:-100}
PY=${PY:-/work/main/.venv/bin/python}
export PYTHONPATH=src OMP_NUM_THREADS=1
CFG=src/entflow/lab/configs/regime.yaml
# most informative first: the queue may be cut short by the CPU budget
declare -a RUNS=(
  "grpo|grpo|"
  "negative_only|negative_only|"
  "clip_higher|clip_higher|"
  "kl_cov|kl_cov|"
  "clip_cov|clip_cov|"
  "steer|steer|method.lambda_min=0.7"
  "opefo_strict|opefo|strict_on_policy=true"
  "grpo_strict|grpo|strict_on_policy=true"
  "positive_only|positive_only|"
  "adaptive_entropy|adaptive_entropy|"
)
for seed in ${SEEDS:-100 101 102}; do
  for r in "${RUNS[@]}"; do
    IFS='|' read -r label method extra <<< "$r"
    if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $label "* ]]; then continue; fi
    name="$label-s$seed"
    [ -f "$OUT/$name/passk.json" ] && continue
    if [ -f "$OUT/$name/checkpoints/final/config.json" ]; then  # trained, pass@k missing
      $PY experiments/regime/passk.py "$OUT/$name/checkpoints/final" validation_size=128 hard_size=128 --n 256 --splits hard \
        --out "$OUT/$name/passk.json" >> "$OUT/$name.log" 2>&1
      echo "done $name (pass@k only) $(date +%T)"
      continue
    fi
    $PY experiments/regime/train.py --config $CFG --method "$method" --name "$name" \
      out_dir="$OUT" seed=$seed steps=$STEPS group="$label" $extra > "$OUT/$name.log" 2>&1 || { echo "FAILED $name"; continue; }
    $PY experiments/regime/passk.py "$OUT/$name/checkpoints/final" validation_size=128 hard_size=128 --n 256 --splits hard \
      --out "$OUT/$name/passk.json" >> "$OUT/$name.log" 2>&1
    echo "done $name $(date +%T)"
  done
done
