"""One training step (trainer/step.py) on a micro lab run: strict on-policy makes exactly one
optimizer step per rollout batch, so the ratio is 1 and nothing is clipped."""

from __future__ import annotations

from entflow.lab.setup import train_lab
from support.lab_micro import metric_column, micro_run_config  # the micro_policy fixture is in conftest


def test_strict_on_policy_forces_one_gradient_step(tmp_path, micro_policy):
    run = train_lab(
        micro_run_config(tmp_path, micro_policy, name="s", strict_on_policy=True, ppo_epochs=3, mini_batches=4, steps=2)
    )
    assert metric_column(run, "update/optimizer_steps") == [1.0, 1.0]
    # r ≡ 1 on the single step: nothing is clipped at either bound
    assert metric_column(run, "clip/frac_high") == [0.0, 0.0] and metric_column(run, "clip/frac_low") == [0.0, 0.0]
    loose = train_lab(micro_run_config(tmp_path, micro_policy, name="l", ppo_epochs=2, mini_batches=2, steps=1))
    assert metric_column(loose, "update/optimizer_steps") == [4.0]
