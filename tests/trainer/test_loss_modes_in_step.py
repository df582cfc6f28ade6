"""verl's and TRL's loss modes (methods/loss_modes.py) in the generic trainer's step: each runs
through ``train_step`` with two mini-batches (the second sees ratios off 1, where the losses differ
from GRPO), logs its own metrics, and changes the update relative to GRPO on the same rollout.
The formulas themselves are tested in tests/methods/test_loss_modes.py and against the peers in
tests/integrations/.

A random (not warm-started) micro Llama on countdown with random rewards (Bernoulli ½, so groups
have signal): the checks are about the wiring.
"""

from __future__ import annotations

import math

import pytest
import torch

import entflow as ef
from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer
from entflow.lab.tasks import get_task
from entflow.trainer import step as step_mod
from entflow.trainer.config import TrainConfig

MICRO = PolicyConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
METHODS = {
    "geo_mean": ({}, "geo_mean/clip_frac"),
    "dppo_tv": ({}, "dppo_tv/masked_frac"),
    "dppo_kl": ({}, "dppo_kl/masked_frac"),
    "gpg": ({}, None),
    "dro": ({"dro_beta": 0.5}, "dro/log_ratio_sq_mean"),
    "vespo": ({}, "vespo/phi_mean"),
    "luspo": ({}, "luspo/clip_frac"),
    "off_policy_mask": ({"threshold": 1e-9}, "off_policy_mask/masked_frac"),
}


def one_step(method: ef.Method) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    task = get_task("countdown", validation_size=8)
    tok = build_tokenizer(task.alphabet)
    model = build_policy(tok, MICRO, seed=0)
    cfg = TrainConfig(
        method=method.name, prompts_per_step=4, group_size=4, mini_batches=2, audit=False,
        temperature=1.0, lr=0.05, progress=False, dual_clip=3.0, random_reward=True,
    )  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    metrics, _, _ = step_mod.train_step(model, tok, task, method, opt, cfg, step=1)
    return metrics, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def grpo_step():
    return one_step(ef.get_method("grpo"))


@pytest.mark.parametrize("name", list(METHODS))
def test_loss_mode_runs_in_the_generic_step(name, grpo_step):
    params, key = METHODS[name]
    metrics, w = one_step(ef.get_method(name, **params))
    _, w_grpo = grpo_step
    assert math.isfinite(metrics["loss"])
    if key is not None:
        assert key in metrics and math.isfinite(metrics[key])
    w0 = build_policy(build_tokenizer(get_task("countdown", validation_size=8).alphabet), MICRO, seed=0).state_dict()
    assert any(not torch.equal(w_grpo[k], w0[k]) for k in w)  # GRPO's step moved the weights
    assert any(not torch.equal(w[k], w_grpo[k]) for k in w)  # the method changed the update
