"""The rollout (trainer/rollout.py).

The lab's old (rollout-policy) statistics come from ``generate``'s own logits, not a second
forward: they must equal a separate full forward's, position by position.

``random_reward``: the rollout's rewards are replaced by Bernoulli(1/2) draws, independent of
the responses (Park et al. 2025, arXiv 2509.26114); the responses themselves are unchanged.
"""

from __future__ import annotations

import pytest
import torch

from entflow.core.token_stats import token_stats
from entflow.lab.config import LabConfig
from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer
from entflow.lab.tasks import get_task
from entflow.trainer.rollout import response_token_stats, sample_rollout, step_seed
from entflow.trainer.tokens import encode_prompts
from support.hf_sampling import reference_sample

TOL = 1e-5  # float32 KV-cached decoding vs one full forward
STATS = ("logp", "entropy", "sum_p2", "sum_p2_logp")


def _tiny(task_name: str):
    task = get_task(task_name, validation_size=4)
    tok = build_tokenizer(task.alphabet)
    model = build_policy(tok, PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64), seed=3)
    return task, tok, model


@pytest.fixture(scope="module")
def tiny():
    return _tiny("countdown")


# arithmetic prompts differ in length (left padding); countdown's responses are long (many positions)
@pytest.mark.parametrize(("task_name", "temperature"), [("arithmetic", 1.0), ("countdown", 0.7)])
def test_generate_logits_give_the_same_old_statistics_as_a_full_forward(task_name, temperature):
    task, tok, model = _tiny(task_name)
    cfg = LabConfig(prompts_per_step=6, group_size=4, temperature=temperature, seed=11)
    torch.manual_seed(0)
    roll = sample_rollout(model, tok, task, cfg, step=1)
    n, t = roll.response_ids.shape
    assert roll.logits is not None and roll.logits.shape == (n, t, len(tok))
    # the batch really exercises left padding and rows that ended before the longest one
    if task_name == "arithmetic":
        assert (roll.prompt_mask == 0).any(), "prompts of one length: left padding untested"
    assert ((roll.mask == 0).any(-1)).any(), "no row ended early: post-eos masking untested"

    mine = token_stats(roll.logits, roll.response_ids, temperature=temperature, stats=STATS)
    with torch.no_grad():
        model.eval()
        ref = response_token_stats(
            model, roll.prompt_ids, roll.prompt_mask, roll.response_ids, temperature, None, STATS
        )
    valid = roll.mask.bool()
    for name in STATS:
        a, b = getattr(mine, name)[valid], getattr(ref, name)[valid]
        assert torch.allclose(a, b, atol=TOL, rtol=0), f"{name}: max |diff| {float((a - b).abs().max()):.2e}"

    # the check is sharp: the same logits one position off do not match
    shifted = token_stats(roll.logits[:, 1:], roll.response_ids[:, 1:], temperature=temperature, stats=("logp",))
    off_by_one = (shifted.logp - ref.logp[:, :-1])[valid[:, 1:]].abs().max()
    assert off_by_one > 100 * TOL
    shifted = token_stats(roll.logits[:, :-1], roll.response_ids[:, 1:], temperature=temperature, stats=("logp",))
    assert (shifted.logp - ref.logp[:, 1:])[valid[:, 1:]].abs().max() > 100 * TOL


def test_sampling_law_is_softmax_of_raw_logits_over_temperature(tiny):
    """With top_k=0, top_p=1 the only processor is the temperature: the scores the sampler draws
    from (``output_scores``) are exactly ``logits / T``, so softmax(logits / T) is the rollout law."""
    task, tok, model = tiny
    enc = encode_prompts(tok, ["12+3=", "4*5-67=", "8="])
    model.eval()
    torch.manual_seed(0)
    out = reference_sample(
        model, tok, enc, 0.7, task.max_response_len,
        output_logits=True, output_scores=True, return_dict_in_generate=True,
    )  # fmt: skip
    for raw, scores in zip(out.logits, out.scores, strict=True):
        assert torch.allclose(scores, raw / 0.7, atol=1e-6, rtol=1e-6)


# --- random_reward ---


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
