"""``random_reward``: the rollout's rewards are replaced by Bernoulli(1/2) draws, independent of
the responses (Park et al. 2025, arXiv 2509.26114); the responses themselves are unchanged."""

from __future__ import annotations

import torch

from entflow.lab.config import LabConfig
from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer
from entflow.lab.tasks import get_task
from entflow.trainer.rollout import sample_rollout, step_seed


def _rollout(random_reward: bool, step: int, task):
    tok = build_tokenizer(task.alphabet)
    model = build_policy(tok, PolicyConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), seed=3)
    cfg = LabConfig(prompts_per_step=8, group_size=8, seed=5, random_reward=random_reward)
    torch.manual_seed(0)
    return sample_rollout(model, tok, task, cfg, step=step)


def test_random_rewards_are_seeded_coins_independent_of_the_responses():
    task = get_task("arithmetic", validation_size=4)
    truth, coins = _rollout(False, 1, task), _rollout(True, 1, task)
    assert coins.texts == truth.texts  # the coin does not touch the generation's RNG
    g = torch.Generator().manual_seed(step_seed(5 + 3, 1))  # an independent draw with the stated seed
    assert torch.equal(coins.rewards, torch.bernoulli(torch.full((64,), 0.5), generator=g))
    assert set(coins.rewards.tolist()) == {0.0, 1.0} and not torch.equal(coins.rewards, truth.rewards)
    assert not torch.equal(_rollout(True, 2, task).rewards, coins.rewards)  # a new draw every step
