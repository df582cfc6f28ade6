"""Exact resume after SIGKILL on a real model with 2 threads: ``entflow train --model`` (the real
path: shared prompts, the packed update forward) killed during a rollout, an update and a
checkpoint's write (the trainer's test hook, entflow.trainer.faults), then ``entflow train
--resume``, ends byte for byte where an uninterrupted run of the same config ends.

The model is a small grouped-head Llama sized as in tests/trainer/test_determinism.py, so that the
update's backward takes torch's multi-threaded ``index_put_`` path (16 rows × 16 tokens × 128 ≥
torch's grain of 32768 elements) that entflow.trainer.determinism makes repeatable. The runs are
``entflow train`` processes forked from a server that has imported torch and transformers
(support/train_server.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.kill_resume import assert_same_run, kill_and_resume, steps_of

STEPS = 2


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from support.real_tiny import save_grouped_llama

    return save_grouped_llama(tmp_path_factory.mktemp("kill-resume") / "model", hidden_size=128)


def _args(out: Path, model: Path) -> list[str]:
    """2 steps with 2 threads, checkpointing every step: 2 prompts × 8 responses of at most 16
    tokens, two passes over the batch (an update is two optimizer steps), rewards by a seeded coin
    (the tiny model answers nothing right), validation at steps 0 and 2 on 1 problem × 2 samples."""
    keys = {
        "out_dir": out,
        "steps": STEPS,
        "threads": 2,
        "prompts_per_step": 2,
        "group_size": 8,
        "mini_batches": 1,
        "ppo_epochs": 2,
        "max_new_tokens": 16,
        "random_reward": "true",
        "lr": 1e-3,
        "val_size": 1,
        "eval_k": 2,
        "eval_every": 0,
        "audit": "false",
        "checkpoint_every": 1,
        "progress": "false",
        "task_params": "{max_terms: 2, max_digits: 1}",
    }
    overrides = [f"{k}={v}" for k, v in keys.items()]
    return ["--model", str(model), "--data", "basic_arithmetic", "--name", "run", *overrides]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, model_dir, train_server) -> Path:
    out = tmp_path_factory.mktemp("reference")
    train_server.train(_args(out, model_dir))
    return out / "run"


@pytest.mark.parametrize(
    ("kill_at", "resumed_from"),
    [
        ("rollout:2", 1),
        ("update:2", 1),  # after the first of the step's two optimizer steps
        ("checkpoint:1", 0),  # the first checkpoint torn: the run starts again from step 0
    ],
)
def test_a_real_run_with_two_threads_killed_and_resumed_is_the_uninterrupted_run(
    tmp_path, model_dir, train_server, reference, kill_at, resumed_from
):
    run = tmp_path / "run"
    resumed = kill_and_resume(train_server, run, _args(tmp_path, model_dir), kill_at)
    assert_same_run(reference, run)
    assert f"from step {resumed_from}" in resumed, resumed
    assert steps_of(run / "metrics.jsonl") == list(range(STEPS + 1))
