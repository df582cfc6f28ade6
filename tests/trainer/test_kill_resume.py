"""Exact resume after SIGKILL, on the lab: ``entflow train`` killed during a rollout,
an update, a checkpoint's write, a ``metrics.jsonl`` line and a ``samples.jsonl`` line (the
trainer's test hook, entflow.trainer.faults), then ``entflow train --resume``, ends byte for byte
where an uninterrupted run of the same config ends. The runs are ``entflow train`` processes forked
from a server that has imported torch and transformers (support/train_server.py); the torn
checkpoint's run is ``python -m entflow train`` itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.kill_resume import TEMPORARY, assert_same_run, entflow_train, kill_and_resume, steps_of

STEPS = 4


def _args(out: Path, name: str, policy: str) -> list[str]:
    """A 4-step micro run checkpointing every step: 2 prompts × 4 responses, 2 mini-batches (an
    update is two optimizer steps), validation at steps 2 and 4 (whole groups in samples.jsonl),
    adaptive_entropy (a controller whose state the checkpoint carries)."""
    keys = {
        "out_dir": out,
        "policy_path": policy,
        "task_params": "{validation_size: 8}",
        "steps": STEPS,
        "prompts_per_step": 2,
        "group_size": 4,
        "mini_batches": 2,
        "eval_every": 2,
        "eval_k": 1,
        "audit": "false",
        "lr": 3e-3,
        "method_params": "{target: 10.0, delta: 0.01}",
        "checkpoint_every": 1,
        "progress": "false",
    }
    return ["--name", name, "--method", "adaptive_entropy", *(f"{k}={v}" for k, v in keys.items())]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, micro_policy, train_server) -> Path:
    out = tmp_path_factory.mktemp("reference")
    train_server.train(_args(out, "run", micro_policy))
    return out / "run"


@pytest.mark.parametrize(
    ("kill_at", "resumed_from"),
    [
        ("rollout:3", 2),
        ("update:2", 1),
        ("checkpoint:2", 1),  # step 2's checkpoint torn: step 1's is the last complete one
        ("metrics:3", 2),  # step 3's record torn mid-line
        ("samples:4", 3),  # the last step (a validation step: whole groups), after its first sample line
    ],
)
def test_a_run_killed_and_resumed_is_the_uninterrupted_run(
    tmp_path, micro_policy, train_server, reference, kill_at, resumed_from
):
    run = tmp_path / "run"
    resumed = kill_and_resume(train_server, run, _args(tmp_path, "run", micro_policy), kill_at)
    assert_same_run(reference, run)
    assert f"from step {resumed_from}" in resumed, resumed  # the checkpoint it resumed from is named
    assert steps_of(run / "metrics.jsonl") == list(range(STEPS + 1))


def test_a_torn_checkpoint_is_never_loaded_and_its_temporary_file_is_removed(tmp_path, micro_policy, reference):
    run = tmp_path / "run"
    entflow_train(_args(tmp_path, "run", micro_policy), kill_at="checkpoint:3")
    (torn,) = (run / "checkpoints").glob(TEMPORARY)  # the write the kill interrupted, half of it
    complete = run / "checkpoints" / "last.pt"
    assert 0 < torn.stat().st_size < complete.stat().st_size
    resumed = entflow_train(["--resume", str(run)])
    assert f"removed {torn.name}" in resumed and "from step 2" in resumed, resumed
    assert_same_run(reference, run)


def test_equal_checkpoint_states_are_equal_bytes(tmp_path):
    """``pickle`` writes an object met before as a reference to it: a resumed run's optimizer keys
    (strings of the checkpoint it loaded) and an uninterrupted run's (AdamW's own, one object with
    the checkpoint's ``step``) pickled differently until save_checkpoint rebuilt the state."""
    import torch

    from entflow.trainer.rundir import save_checkpoint

    loaded_key = "".join(["st", "ep"])  # equal to "step", another object, as after torch.load
    assert loaded_key is not "step"  # noqa: F632
    for name, key in (("a", "step"), ("b", loaded_key)):
        save_checkpoint(tmp_path / name, optimizer={"state": {0: {key: torch.tensor(3.0)}}}, step=3)
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_opening_a_killed_runs_log_keeps_only_whole_records_of_finished_steps(tmp_path):
    from entflow.trainer.rundir import JsonlWriter

    path = tmp_path / "samples.jsonl"
    lines = [b'{"step": 1, "i": 0}\n', b'{"step": 2, "i": 0}\n', b'{"step": 2, "i": 1}\n', b'{"step": 3, "i": 0}\n']
    path.write_bytes(b"".join(lines) + b'{"step": 3, "i"')  # a torn last line
    JsonlWriter(path).close()
    assert path.read_bytes() == b"".join(lines)
    JsonlWriter(path, keep_steps={0, 1, 2}).close()  # step 3 has no metrics line: it is written again
    assert path.read_bytes() == b"".join(lines[:3])
