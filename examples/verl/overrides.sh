# shellcheck shell=bash
# Hydra overrides shared by run_grpo_1node.sh and run_grpo_multinode.sh: GRPO on a
# Qwen2.5-Math-style model with an entflow method, on verl's v1 trainer in entflow's trainer mode.
# Source it after setting any of the parameters below; it fills the bash array ARGS, and
# `run_verl "$@"` then launches verl's trainer with them and the command line's overrides.
#
# Parameters (environment variables, with defaults):
#   MODEL_PATH      local path or hub id of the policy            (Qwen/Qwen2.5-Math-7B)
#   TRAIN_FILE      verl-format parquet of training prompts        ($HOME/data/math/train.parquet)
#   VAL_FILE        verl-format parquet of validation prompts      ($HOME/data/math/test.parquet)
#   METHOD          entflow method or composition                  (clip_higher+steer)
#   METHOD_PARAMS   comma-separated key=value; part.key=value for a part of a composition
#                                                                  (steer.lambda_min=0.8)
#   STATISTICS      micro_batch | global                           (micro_batch)
#   CALCULATE_ENTROPY  True when the method differentiates the current entropy
#                   (entropy_bonus, adaptive_entropy)              (False)
#   NNODES, GPUS_PER_NODE                                          (1, 8)
#   TRAIN_BATCH_SIZE (prompts per step), ROLLOUT_N (responses per prompt), MINI_BATCH_SIZE (prompts
#   per optimizer step), MICRO_BATCH_PER_GPU, MAX_PROMPT_LEN, MAX_RESPONSE_LEN, ROLLOUT_TP, LR,
#   TOTAL_EPOCHS, SAVE_FREQ, TEST_FREQ, EXPERIMENT
: "${MODEL_PATH:=Qwen/Qwen2.5-Math-7B}"
: "${TRAIN_FILE:=$HOME/data/math/train.parquet}"
: "${VAL_FILE:=$HOME/data/math/test.parquet}"
: "${METHOD:=clip_higher+steer}"
: "${METHOD_PARAMS=steer.lambda_min=0.8}"  # unset: this default; empty: no parameters
: "${STATISTICS:=micro_batch}"
: "${CALCULATE_ENTROPY:=False}"
: "${NNODES:=1}"
: "${GPUS_PER_NODE:=8}"
: "${TRAIN_BATCH_SIZE:=256}"
: "${ROLLOUT_N:=8}"
: "${MINI_BATCH_SIZE:=64}"
: "${MICRO_BATCH_PER_GPU:=4}"
: "${MAX_PROMPT_LEN:=1024}"
: "${MAX_RESPONSE_LEN:=3072}"
: "${ROLLOUT_TP:=1}"
: "${LR:=1e-6}"
: "${TOTAL_EPOCHS:=20}"
: "${SAVE_FREQ:=20}"
: "${TEST_FREQ:=10}"
: "${EXPERIMENT:=grpo-${METHOD//+/-}}"

ARGS=(
    algorithm.adv_estimator=grpo
    algorithm.use_kl_in_reward=False
    data.train_files="$TRAIN_FILE"
    data.val_files="$VAL_FILE"
    data.train_batch_size="$TRAIN_BATCH_SIZE"
    data.max_prompt_length="$MAX_PROMPT_LEN"
    data.max_response_length="$MAX_RESPONSE_LEN"
    data.filter_overlong_prompts=True
    actor_rollout_ref.model.path="$MODEL_PATH"
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.actor.optim.lr="$LR"
    actor_rollout_ref.actor.ppo_mini_batch_size="$MINI_BATCH_SIZE"
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_PER_GPU"
    actor_rollout_ref.actor.use_kl_loss=False
    actor_rollout_ref.actor.entropy_coeff=0
    actor_rollout_ref.actor.loss_agg_mode=token-mean
    actor_rollout_ref.actor.clip_ratio_low=0.2
    actor_rollout_ref.actor.clip_ratio_high=0.2
    actor_rollout_ref.actor.calculate_entropy="$CALCULATE_ENTROPY"
    # entflow: the policy-loss config class that carries the method, and the method itself
    actor_rollout_ref.actor.policy_loss._target_=entflow.integrations.verl.config.EntflowPolicyLossConfig
    actor_rollout_ref.actor.policy_loss.loss_mode=entflow
    +actor_rollout_ref.actor.policy_loss.method="$METHOD"
    +actor_rollout_ref.actor.policy_loss.statistics="$STATISTICS"
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.n="$ROLLOUT_N"
    actor_rollout_ref.rollout.tensor_model_parallel_size="$ROLLOUT_TP"
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_PER_GPU"
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_PER_GPU"
    # entflow's trainer mode: loss-function path, advantage shapers, controllers, checkpointed state
    trainer.use_v1=True
    trainer.v1.trainer_mode=entflow
    trainer.critic_warmup=0
    trainer.logger='[console]'
    trainer.project_name=entflow
    trainer.experiment_name="$EXPERIMENT"
    trainer.nnodes="$NNODES"
    trainer.n_gpus_per_node="$GPUS_PER_NODE"
    trainer.save_freq="$SAVE_FREQ"
    trainer.test_freq="$TEST_FREQ"
    trainer.total_epochs="$TOTAL_EPOCHS"
)
IFS=',' read -ra _entflow_params <<< "$METHOD_PARAMS"
for _p in "${_entflow_params[@]}"; do
    [ -n "$_p" ] && ARGS+=("+actor_rollout_ref.actor.policy_loss.params.$_p")
done

# run_verl [OVERRIDE...]: ARGS and the command line's overrides; ENTFLOW_PRINT_OVERRIDES=1 prints them
# (one per line) and exits; else they are checked (fails in seconds, naming the key, on a wrong
# method, parameter or incompatible setting), then verl's trainer replaces this shell.
run_verl() {
    ARGS+=("$@")
    if [ -n "${ENTFLOW_PRINT_OVERRIDES:-}" ]; then
        printf '%s\n' "${ARGS[@]}"
        exit 0
    fi
    "$PYTHON" -m entflow.integrations.verl.check "${ARGS[@]}"
    exec "$PYTHON" -m verl.trainer.main_ppo "${ARGS[@]}"
}
