"""A micro lab policy shared by the lab tests (one warm start per test session, not per module)."""

from __future__ import annotations

MICRO_PRETRAIN = {
    "policy": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64},
    "steps": 30,
    "batch_size": 16,
    "eval_k": 1,
}
TASK_PARAMS = {"validation_size": 8}


def pretrain_micro_policy(cache_dir, **pretrain) -> str:
    """Warm-start the micro policy on countdown into ``cache_dir`` (``pretrain`` replacing keys of
    :data:`MICRO_PRETRAIN`); returns its directory."""
    from entflow.lab.pretrain import PretrainConfig
    from entflow.lab.pretrain import pretrain as run_pretrain

    cfg = PretrainConfig(task="countdown", task_params=TASK_PARAMS, **(MICRO_PRETRAIN | pretrain))
    return str(run_pretrain(cfg, cache_dir=cache_dir, progress=False))


def micro_lab_config(out_dir, policy: str, **keys):
    """A validated lab config of a run of ``policy`` on the micro task in ``out_dir`` (evaluations of
    k = 1 sample, no progress bar), with ``keys`` on top."""
    from entflow.lab.config import build_config

    base = {"out_dir": str(out_dir), "policy_path": policy, "task_params": TASK_PARAMS, "eval_k": 1, "progress": False}
    return build_config(base | keys)


# a 3-step micro run: 2 prompts × 4 responses, one mini-batch, no evaluation, no audit
MICRO_RUN = {"steps": 3, "prompts_per_step": 2, "group_size": 4, "mini_batches": 1, "eval_every": 0, "audit": False}


def micro_run_config(out_dir, policy: str, **overrides):
    """A validated lab config of a :data:`MICRO_RUN` of ``policy``, with ``overrides`` on top."""
    return micro_lab_config(out_dir, policy, **(MICRO_RUN | overrides))


def metric_column(run_dir, key: str) -> list[float]:
    """The values of ``key`` in the run's ``metrics.jsonl``, training steps only (step > 0)."""
    from entflow.trainer.rundir import read_jsonl

    return [r[key] for r in read_jsonl(run_dir / "metrics.jsonl") if r["step"] > 0]
