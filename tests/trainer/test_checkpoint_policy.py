"""The checkpoint policy of entflow.trainer.loop: checkpoints every ``checkpoint_every`` steps, after
``checkpoint_minutes`` of wall clock and after the last step; a run stopped between checkpoints
loses only the steps since the last one, and resuming reproduces the uninterrupted run exactly.
Checkpoints hold the trainable parameters only (a frozen base is never written)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import entflow.trainer.loop as loop
from entflow.errors import ConfigError
from entflow.lab.config import build_config
from entflow.lab.setup import train_lab
from entflow.trainer.rundir import load_checkpoint, load_trainable_state, read_jsonl, trainable_state
from support.lab_micro import TASK_PARAMS, micro_lab_config


def micro_config(out_dir: Path, policy: str, **overrides):
    keys = {
        "steps": 7,
        "prompts_per_step": 4,
        "group_size": 4,
        "eval_every": 3,
        "lr": 3e-3,
        "name": "r",
        # the entropy bonus guarantees a gradient even when a micro policy's groups all tie
        "method": "adaptive_entropy",
        "method_params": {"target": 10.0, "delta": 0.01},
    }
    return micro_lab_config(out_dir, policy, **(keys | overrides))


def record_checkpoints(monkeypatch) -> list[int]:
    """The steps at which the loop writes a checkpoint (the real writer still runs)."""
    steps: list[int] = []
    real = loop.save_checkpoint

    def spy(path, **state):
        steps.append(int(state["step"]))
        real(path, **state)

    monkeypatch.setattr(loop, "save_checkpoint", spy)
    return steps


def test_due_checkpoint_rule():
    cfg = build_config({"steps": 10, "checkpoint_every": 4, "checkpoint_minutes": 2.0, "task_params": TASK_PARAMS})
    due = [s for s in range(1, 11) if loop._due_checkpoint(cfg, s, since_last_s=0.0)]
    assert due == [4, 8, 10]  # every 4th and the last
    assert loop._due_checkpoint(cfg, 5, since_last_s=119.9) is False
    assert loop._due_checkpoint(cfg, 5, since_last_s=120.0) is True  # two minutes since the last one
    cfg.checkpoint_minutes = None
    assert loop._due_checkpoint(cfg, 5, since_last_s=1e9) is False
    with pytest.raises(ConfigError, match="checkpoint_minutes"):
        build_config({"checkpoint_minutes": 0, "task_params": TASK_PARAMS})


def test_stop_between_checkpoints_loses_only_those_steps_and_resume_is_exact(tmp_path, micro_policy, monkeypatch):
    full = train_lab(micro_config(tmp_path / "a", micro_policy, checkpoint_every=3))

    class StopError(Exception):
        pass

    def stop_at_5(record):
        if record["step"] == 5:
            raise StopError  # step 5's record is written; the last checkpoint is step 3's

    written = record_checkpoints(monkeypatch)
    cfg = micro_config(tmp_path / "b", micro_policy, checkpoint_every=3)
    with pytest.raises(StopError):
        train_lab(cfg, on_step=stop_at_5)
    assert written == [3]
    assert int(load_checkpoint(cfg.run_dir / "checkpoints" / "last.pt")["step"]) == 3
    assert [r["step"] for r in read_jsonl(cfg.run_dir / "metrics.jsonl")] == [0, 1, 2, 3, 4, 5]

    written.clear()
    resumed = train_lab(micro_config(tmp_path / "b", micro_policy, checkpoint_every=3), resume=True)
    assert written == [6, 7]  # steps 4 and 5 recomputed (not checkpointed: 4, 5 are not due), then 6 and 7
    assert (full / "metrics.jsonl").read_text() == (resumed / "metrics.jsonl").read_text()
    wa = load_checkpoint(full / "checkpoints" / "last.pt")["model"]
    wb = load_checkpoint(resumed / "checkpoints" / "last.pt")["model"]
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    # timings and samples: each step once (step 5's were written before its record, whose on_step stopped the run)
    assert [r["step"] for r in read_jsonl(resumed / "timing.jsonl")] == [1, 2, 3, 4, 5, 6, 7]
    assert (full / "samples.jsonl").read_text() == (resumed / "samples.jsonl").read_text()


def test_stop_before_the_first_checkpoint_resumes_from_step_0_exactly(tmp_path, micro_policy, monkeypatch):
    full = train_lab(micro_config(tmp_path / "a", micro_policy, steps=4, checkpoint_every=100))

    class StopError(Exception):
        pass

    def stop_at_2(record):
        if record["step"] == 2:
            raise StopError  # steps 0–2 are logged, no checkpoint was written yet

    written = record_checkpoints(monkeypatch)
    cfg = micro_config(tmp_path / "b", micro_policy, steps=4, checkpoint_every=100)
    with pytest.raises(StopError):
        train_lab(cfg, on_step=stop_at_2)
    assert written == [] and not (cfg.run_dir / "checkpoints" / "last.pt").exists()

    resumed = train_lab(micro_config(tmp_path / "b", micro_policy, steps=4, checkpoint_every=100), resume=True)
    assert written == [4]
    # steps 1 and 2 recomputed from the start and not written twice; the log equals the uninterrupted run's
    assert (full / "metrics.jsonl").read_text() == (resumed / "metrics.jsonl").read_text()
    wa = load_checkpoint(full / "checkpoints" / "last.pt")["model"]
    wb = load_checkpoint(resumed / "checkpoints" / "last.pt")["model"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_checkpoint_minutes_writes_by_wall_clock(tmp_path, micro_policy, monkeypatch):
    clock = iter(range(0, 10_000, 45))  # every call of the loop's clock is 45 s after the previous one

    monkeypatch.setattr(loop, "_now", lambda: float(next(clock)))
    written = record_checkpoints(monkeypatch)
    train_lab(micro_config(tmp_path, micro_policy, steps=4, checkpoint_every=100, checkpoint_minutes=1.0))
    # the clock is read once at the start, then once per step and once after each checkpoint:
    # step 1 ends 45 s after the start (not due), step 2 90 s (due), step 3 45 s later, step 4 is the last
    assert written == [2, 4]


def test_checkpoint_holds_trainable_parameters_only(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    model[0].requires_grad_(False)  # a frozen base, as under a LoRA adapter
    state = trainable_state(model)
    assert set(state) == {"1.weight", "1.bias"}
    other = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    other[0].load_state_dict(model[0].state_dict())
    other[0].requires_grad_(False)
    load_trainable_state(other, state, tmp_path / "last.pt")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values(), strict=True))
    # a checkpoint that lacks a trainable parameter, or has a foreign one, is refused naming the file
    with pytest.raises(ConfigError, match=r"last\.pt does not fit"):
        load_trainable_state(other, {"1.weight": state["1.weight"]}, tmp_path / "last.pt")
    with pytest.raises(ConfigError, match="unexpected"):
        load_trainable_state(other, state | {"9.weight": torch.zeros(1)}, tmp_path / "last.pt")
