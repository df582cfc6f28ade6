"""A lab run with a scheduled entropy bonus: the logged coefficient follows c(t) at t = step − 1, a run
stopped mid-way and resumed writes the same metrics and weights as an uninterrupted one, and a run
resumed with more steps continues the schedule (it reads the step, not the run's length)."""

from __future__ import annotations

import math

import pytest
import torch

from entflow.errors import ConfigError
from entflow.lab.setup import train_lab
from entflow.trainer.rundir import read_jsonl
from support.lab_micro import metric_column, micro_run_config

# cosine from 0.05 to 0.01 over 3 rollout steps: c(0) = 0.05, c(1) = 0.04, c(2) = 0.02, then 0.01
SCHEDULE = {"c": 0.05, "schedule": "cosine", "c_end": 0.01, "steps": 3}
KW = {"name": "s", "method": "entropy_bonus", "method_params": SCHEDULE, "lr": 3e-3}


def expected_coef(t: int) -> float:
    """c(t) in float64: c_end + (c − c_end)·(1 + cos(π·min(t, steps)/steps))/2."""
    c, c_end, steps = SCHEDULE["c"], SCHEDULE["c_end"], SCHEDULE["steps"]
    return c_end + (c - c_end) * (1 + math.cos(math.pi * min(t, steps) / steps)) / 2


def last_weights(run_dir) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)["model"]


def test_stopped_and_resumed_run_equals_the_uninterrupted_one(tmp_path, micro_policy):
    full = train_lab(micro_run_config(tmp_path / "a", micro_policy, steps=4, **KW))
    coef = metric_column(full, "entropy_bonus/coef")
    assert coef == pytest.approx([expected_coef(t) for t in range(4)], rel=1e-15, abs=0)  # step k: t = k − 1
    assert len(set(coef)) == 4  # the coefficient really moves

    class StopError(Exception):
        pass

    def stop_at_2(record):
        if record["step"] == 2:
            raise StopError  # after step 2's metrics are written, before its checkpoint

    with pytest.raises(StopError):
        train_lab(micro_run_config(tmp_path / "b", micro_policy, steps=4, **KW), on_step=stop_at_2)
    assert [r["step"] for r in read_jsonl(tmp_path / "b" / "s" / "metrics.jsonl")] == [0, 1, 2]
    resumed = train_lab(micro_run_config(tmp_path / "b", micro_policy, steps=4, **KW), resume=True)
    assert (full / "metrics.jsonl").read_text() == (resumed / "metrics.jsonl").read_text()
    wa, wb = last_weights(full), last_weights(resumed)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_resumed_with_more_steps_the_schedule_continues(tmp_path, micro_policy):
    full = train_lab(micro_run_config(tmp_path / "a", micro_policy, steps=5, **KW))
    train_lab(micro_run_config(tmp_path / "b", micro_policy, steps=2, **KW))
    extended = train_lab(micro_run_config(tmp_path / "b", micro_policy, steps=5, **KW), resume=True)
    coef = metric_column(extended, "entropy_bonus/coef")
    assert coef == pytest.approx([expected_coef(t) for t in range(5)], rel=1e-15, abs=0)
    assert coef[-2:] == [SCHEDULE["c_end"]] * 2  # past `steps` it holds c_end
    assert metric_column(extended, "loss") == metric_column(full, "loss")
    assert metric_column(extended, "entropy_bonus/entropy") == metric_column(full, "entropy_bonus/entropy")


def test_a_bad_schedule_fails_when_the_config_is_built(tmp_path, micro_policy):
    with pytest.raises(ConfigError) as e:
        micro_run_config(tmp_path, micro_policy, **{**KW, "method_params": {"schedule": "linear", "c_end": 0.0}})
    assert e.value.key == "method_params" and "'steps'" in str(e.value)
    assert not (tmp_path / "s").exists()
