"""A micro lab policy shared by the lab tests (one warm start per test session, not per module)."""

from __future__ import annotations

MICRO_PRETRAIN = {
    "policy": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64},
    "steps": 30,
    "batch_size": 16,
    "eval_k": 1,
}
TASK_PARAMS = {"validation_size": 8}


def pretrain_micro_policy(cache_dir) -> str:
    """Warm-start the micro policy on countdown into ``cache_dir``; returns its directory."""
    from entflow.lab.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(task="countdown", task_params=TASK_PARAMS, **MICRO_PRETRAIN)
    return str(pretrain(cfg, cache_dir=cache_dir, progress=False))
