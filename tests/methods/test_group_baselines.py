"""MaxRL and AsymRE (methods/group_baselines.py): against float64 hand formulas, and against the
peers' own functions on the same float64 tensors — SkyRL 0.4.0's ``compute_maxrl_advantage`` with
its PPO loss, prime-rl's ``max_rl`` (read against prime-rl's ``orchestrator/algo/max_rl.py``; not
importable here, so a hand reference of its rule), Trinity-RFT 0.6.0's ``ASYMREGroupAdvantage``
with its PPO loss. Loss and gradient w.r.t. the log-probs to 1e-6 relative, token-mean and
seq-mean-token-mean, ragged masks, an all-zero and an all-equal group.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import entflow as ef
from entflow.errors import ConfigError, ParameterError
from entflow.lab.config import LabConfig
from support.field_peers import (
    AGGS,
    ATOL,
    GROUPS,
    REWARDS,
    RTOL,
    field_batch,
    ours,
    skyrl_ppo,
    trinity_loss,
    trinity_ppo,
)
from support.methods_ref import D
from support.peers import skyrl_ppo_utils, trinity

# a lone response of each kind besides the four groups of four
REWARDS_LONE = torch.cat([REWARDS, torch.tensor([1.0, 0.0], dtype=D)])
GROUPS_LONE = torch.cat([GROUPS, torch.tensor([4, 5])])


def groups_of(R: torch.Tensor, g: torch.Tensor) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for r, k in zip(R.tolist(), g.tolist(), strict=True):
        out.setdefault(k, []).append(r)
    return out


def hand_maxrl(R: torch.Tensor, g: torch.Tensor, eps: float) -> list[float]:
    """SkyRL's form for eps > 0 (a lone response keeps R), prime-rl's for eps = 0 (0 where mean <= 0)."""
    by = groups_of(R, g)
    out = []
    for r, k in zip(R.tolist(), g.tolist(), strict=True):
        rs = by[k]
        mean = sum(rs) / len(rs)
        if eps > 0:
            out.append((r - mean) / (mean + eps) if len(rs) > 1 else r)
        else:
            out.append((r - mean) / mean if mean > 0 else 0.0)
    return out


def hand_asymre(R: torch.Tensor, g: torch.Tensor, delta: float) -> list[float]:
    by = groups_of(R, g)
    return [
        r - (sum(by[k]) / len(by[k]) + delta) if len(by[k]) > 1 else r
        for r, k in zip(R.tolist(), g.tolist(), strict=True)
    ]


def per_response(adv: torch.Tensor, b: ef.TokenBatch) -> torch.Tensor:
    """The one advantage of each response (its first token; every row has one), and a check that
    it is on every valid token and 0 off-mask."""
    a = adv[:, 0]
    assert torch.equal(adv, a.unsqueeze(-1) * b.mask)
    return a


@pytest.mark.parametrize("eps", [1e-6, 0.1, 0.0])
def test_maxrl_against_the_hand_formula(gen, eps):
    b = field_batch(gen, REWARDS_LONE, GROUPS_LONE)
    a = per_response(ef.compute_advantages(b, ef.get_method("maxrl", epsilon=eps)), b)
    assert torch.allclose(a, torch.tensor(hand_maxrl(REWARDS_LONE, GROUPS_LONE, eps), dtype=D), rtol=1e-12, atol=0)
    # the pass-rate weighting: the one success of a group with rate 1/4 gets (1 − 1/4)/(1/4) = 3
    assert a[13].item() == pytest.approx(3.0 if eps == 0 else 0.75 / (0.25 + eps), rel=1e-12)
    assert torch.all(a[4:12] == 0)  # the all-zero and the all-equal groups carry no signal


def test_maxrl_lone_response_is_where_the_peers_differ(gen):
    b = field_batch(gen, REWARDS_LONE, GROUPS_LONE)
    skyrl_form = per_response(ef.compute_advantages(b, ef.get_method("maxrl", epsilon=1e-6)), b)
    prime_form = per_response(ef.compute_advantages(b, ef.get_method("maxrl", epsilon=0.0)), b)
    assert skyrl_form[16:].tolist() == [1.0, 0.0]  # SkyRL: baseline 0 for a group of one
    assert prime_form[16:].tolist() == [0.0, 0.0]  # prime-rl: (R − R)/R, and 0 where the mean is 0


def test_maxrl_negative_mean_with_epsilon_zero_gives_no_signal(gen):
    R = torch.tensor([-1.0, 0.0, 2.0, -3.0], dtype=D)
    b = field_batch(gen, R, torch.tensor([0, 0, 1, 1]))
    a = per_response(ef.compute_advantages(b, ef.get_method("maxrl", epsilon=0.0)), b)
    assert a.tolist() == [0.0, 0.0, 0.0, 0.0]  # group means −0.5 and −0.5: prime-rl gives 0


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("eps", [1e-6, 0.05])
def test_maxrl_equals_skyrl(gen, eps, agg):
    ppo = skyrl_ppo_utils()
    b = field_batch(gen)
    token_rewards = torch.zeros_like(b.mask)
    last = b.mask.sum(-1).long() - 1
    token_rewards[torch.arange(16), last] = REWARDS  # SkyRL: the outcome reward on the last token
    theirs, _ = ppo.compute_maxrl_advantage(token_rewards, b.mask, np.array(GROUPS.tolist()), epsilon=eps)
    method = ef.get_method("maxrl", epsilon=eps)
    adv = ef.compute_advantages(b, method)
    torch.testing.assert_close(adv, theirs.to(D), rtol=RTOL, atol=ATOL)
    loss, grad = ours(ef.TokenBatch(**{**vars_of(b), "advantages": adv}), method, agg=agg)
    loss_p, grad_p = skyrl_ppo(theirs.to(D), b, agg)
    torch.testing.assert_close(loss, loss_p, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(grad, grad_p, rtol=RTOL, atol=ATOL)
    assert grad.abs().sum() > 0  # the comparison is not between two zeros


def vars_of(b: ef.TokenBatch) -> dict:
    return {f: getattr(b, f) for f in b.__dataclass_fields__ if not f.startswith("_")}


@pytest.mark.parametrize("delta", [-0.1, 0.0, 0.3])
def test_asymre_against_the_hand_formula(gen, delta):
    b = field_batch(gen, REWARDS_LONE, GROUPS_LONE)
    a = per_response(ef.compute_advantages(b, ef.get_method("asymre", baseline_shift=delta)), b)
    assert torch.allclose(
        a, torch.tensor(hand_asymre(REWARDS_LONE, GROUPS_LONE, delta), dtype=D), rtol=1e-12, atol=1e-15
    )
    assert torch.allclose(a[4:12], torch.full((8,), -delta, dtype=D))  # equal rewards: only the shift is left


def trinity_asymre(delta: float, rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Trinity-RFT's ``ASYMREGroupAdvantage`` on one Experience per response → ``[N, T]``."""
    mod = trinity("algorithm.advantage_fn.asymre_advantage")
    exp_mod = trinity("common.experience")
    exps = []
    for i, (r, k) in enumerate(zip(rewards.tolist(), groups.tolist(), strict=True)):
        e = exp_mod.Experience(
            eid=exp_mod.EID(task=k, run=i), tokens=torch.arange(mask.shape[1] + 1), reward=r, prompt_length=1
        )
        exps.append(e)
    out, _ = mod.ASYMREGroupAdvantage(baseline_shift=delta).process(exps)
    by_run = {e.eid.run: e for e in out}
    # its advantage is score·action_mask (all ones here); the group baseline is a float32 mean
    return torch.stack([by_run[i].advantages.to(D)[0] * mask[i] for i in range(len(rewards))])


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("delta", [-0.1, 0.25])
def test_asymre_equals_trinity(gen, delta, agg):
    b = field_batch(gen)
    theirs = trinity_asymre(delta, REWARDS, GROUPS, b.mask)
    method = ef.get_method("asymre", baseline_shift=delta)
    adv = ef.compute_advantages(b, method)
    # Trinity takes the group mean of float32 rewards: exact for 0/1 rewards in groups of 4, and
    # δ = −0.1 or 0.25 round-trips float32 → the float32 error of δ itself is the only gap
    torch.testing.assert_close(adv, theirs, rtol=RTOL, atol=1e-8)
    loss, grad = ours(ef.TokenBatch(**{**vars_of(b), "advantages": adv}), method, agg=agg, dual_clip=3.0)
    loss_p, grad_p = trinity_loss(trinity_ppo(agg), b, theirs)
    torch.testing.assert_close(loss, loss_p, rtol=RTOL, atol=1e-8)
    torch.testing.assert_close(grad, grad_p, rtol=RTOL, atol=1e-9)
    assert grad.abs().sum() > 0


@pytest.mark.parametrize(
    ("name", "param", "bad"),
    [("maxrl", "epsilon", -1e-3), ("maxrl", "epsilon", float("nan")), ("asymre", "baseline_shift", "x")],
)
def test_bad_parameters_name_the_parameter(name, param, bad):
    with pytest.raises(ParameterError, match=param):
        ef.get_method(name, **{param: bad})
    with pytest.raises(ConfigError, match=param) as e:  # through a run's config: the key and the parameter
        LabConfig(method=name, method_params={param: bad}).validate()
    assert e.value.key == "method_params"


@pytest.mark.parametrize("name", ["maxrl", "asymre"])
def test_missing_rewards_or_groups_name_the_field(gen, name):
    b = field_batch(gen)
    for missing in ("rewards", "group_index"):
        with pytest.raises(ef.MissingInputError, match=missing):
            ef.compute_advantages(ef.TokenBatch(**{**vars_of(b), missing: None, "advantages": b.advantages}), name)
