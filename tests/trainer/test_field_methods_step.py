"""The methods of other RL libraries (docs/methods.md, "Exploration and entropy methods of other RL
libraries") through the generic trainer's step: two epochs × two mini-batches on a random micro
Llama with random 0/1 rewards (``random_reward``), so every group has a signal. Each step must
train (the parameters move), report the method's own metrics from the loss it ran, and — for
the methods that drop tokens — count fewer tokens than the batch holds. ``chord`` is not here:
the generic trainer does not append expert rows (docs/methods.md, "Our readings").
"""

from __future__ import annotations

import pytest
import torch

import entflow as ef
from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer
from entflow.lab.tasks import get_task
from entflow.trainer import step as step_mod
from entflow.trainer.config import TrainConfig

MICRO = PolicyConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)

CASES = [
    ("maxrl", {}, "maxrl/abs_mean"),
    ("asymre", {}, "asymre/baseline_mean"),
    ("topr", {"importance_sampling_level": "sequence"}, "topr/neg_weight_mean"),
    ("positive_nll", {}, "positive_nll/nll"),
    ("clipb", {"mu": 0.3}, "clipb/dropped_frac"),
    ("stare", {"variant": "C2", "target_entropy": 10.0}, "stare/plus_frac"),
]


@pytest.mark.parametrize(("name", "params", "key"), CASES, ids=[c[0] for c in CASES])
def test_a_trainer_step_runs_the_method(name, params, key):
    task = get_task("countdown", validation_size=8)
    tok = build_tokenizer(task.alphabet)
    model = build_policy(tok, MICRO, seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    cfg = TrainConfig(
        method=name,
        method_params=params,
        prompts_per_step=4,
        group_size=4,
        ppo_epochs=2,
        mini_batches=2,
        audit=False,
        temperature=0.9,
        lr=1e-3,
        progress=False,
        random_reward=True,
        seed=3,
    )
    method = ef.get_method(name, **params)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    metrics, _, _ = step_mod.train_step(model, tok, task, method, opt, cfg, step=1)
    assert key in metrics and metrics[key] == metrics[key]  # reported, and not NaN
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    if name == "clipb":
        assert metrics["clipb/dropped_frac"] > 0  # with μ = 0.3 some negative tokens leave the loss
    if name == "positive_nll":
        assert metrics["positive_nll/n_tokens"] > 0
    if name == "stare":
        assert metrics["stare/gate_on"] == 1.0 and metrics["stare/plus_frac"] > 0
