"""entflow's advantage estimators == verl 0.9.1's own ``core_algos.get_adv_estimator_fn(name)``.

Same inputs to both, in float64: verl gets ``token_level_rewards`` with each response's outcome
reward on its last valid token (what verl's reward manager writes), the response mask and the
group ids as a numpy object array (verl's ``uid``); entflow gets the same rewards ``[N]``, mask and
groups in a :class:`TokenBatch`. The advantages must agree on every token to 1e-12 (absolute,
relative to max(1, |A|)): both sides are float64 and compute the same sums in a different order.

Batches: ragged masks (one response with a hole in its mask), groups of unequal size, a group of
one response (except grpo_passk, which verl refuses for it and so do we), a group whose rewards
are all tied, and continuous rewards. ``norm_adv_by_std_in_grpo=False`` for the two estimators that
read it (grpo_passk through ``config``, gdpo as an argument). ReMax's greedy rollout is drawn by
verl's trainer, not its estimator: the estimator is given the baseline rewards
(``reward_baselines``), and so is ours; the refusal of the hosts that cannot draw it is tested in
tests/trainer/test_step.py, tests/integrations/test_trl_method_needs.py and
tests/integrations/test_verl_method_needs.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from verl.trainer.config import AlgoConfig
from verl.trainer.ppo import core_algos

import entflow as ef
from entflow.errors import MissingInputError, ShapeError

D = torch.float64
TOL = 1e-12


def batch(seed: int, groups=(4, 3, 1, 5), tied: int | None = 1, binary: bool = True, T: int = 9):
    """Rewards [N], mask [N, T], group ids [N], old log-probs and Σπ² of a random softmax."""
    g = torch.Generator().manual_seed(seed)
    n = sum(groups)
    gi = torch.cat([torch.full((s,), 10 * i + 3) for i, s in enumerate(groups)])
    R = torch.randint(0, 2, (n,), generator=g).to(D) if binary else torch.randn(n, generator=g, dtype=D)
    if tied is not None:  # every reward of that group equal
        R[gi == gi.unique()[tied]] = 1.0
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    mask = (torch.arange(T) < lengths[:, None]).to(D)
    if lengths[0] > 3:
        mask[0, 1] = 0  # a hole: verl's returns carry through it
    logits = torch.randn(n, T, 7, generator=g, dtype=D) * 1.5
    logpi = torch.log_softmax(logits, -1)
    ids = torch.randint(0, 7, (n, T), generator=g)
    old_logp = logpi.gather(-1, ids[..., None])[..., 0]
    sum_p2 = (logpi.exp() ** 2).sum(-1)
    return R, mask, gi, old_logp, sum_p2


def token_rewards(R: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's token_level_rewards: the outcome reward on the last valid token."""
    last = (mask * torch.arange(mask.shape[1], dtype=D)).argmax(-1)
    out = torch.zeros_like(mask)
    out[torch.arange(R.numel()), last] = R
    return out


def ours(name: str, R, mask, gi, old_logp=None, sum_p2=None, baselines=None, **params) -> torch.Tensor:
    b = ef.TokenBatch(
        logp=torch.zeros_like(mask),
        old_logp=torch.zeros_like(mask) if old_logp is None else old_logp,
        advantages=None,
        mask=mask,
        sum_p2=sum_p2,
        rewards=R,
        group_index=gi,
        reward_baselines=baselines,
    )
    return ef.compute_advantages(b, ef.get_method(name, **params))


def verl(name: str, R, mask, gi, config=None, **kwargs) -> torch.Tensor:
    index = np.array([f"uid-{int(i)}" for i in gi], dtype=object)
    fn = core_algos.get_adv_estimator_fn(name)
    adv, _ = fn(token_level_rewards=token_rewards(R, mask), response_mask=mask, index=index, config=config, **kwargs)
    return adv * mask


def assert_same(a: torch.Tensor, b: torch.Tensor, tol: float = TOL) -> None:
    assert a.dtype == D and b.dtype == D
    scale = max(1.0, float(b.abs().max()))
    assert float((a - b).abs().max()) <= tol * scale, float((a - b).abs().max())


SEEDS = [0, 1, 2]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "continuous"])
@pytest.mark.parametrize("name", ["rloo", "reinforce_plus_plus_baseline", "opo"])
def test_group_baselines_equal_verl(name, seed, binary):
    R, mask, gi, *_ = batch(seed, binary=binary)
    assert_same(ours(name, R, mask, gi), verl(name, R, mask, gi, config=AlgoConfig()))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma", [1.0, 0.9, 0.0])
def test_reinforce_plus_plus_equals_verl(seed, gamma):
    R, mask, gi, *_ = batch(seed, binary=False)
    assert_same(
        ours("reinforce_plus_plus", R, mask, gi, gamma=gamma),
        verl("reinforce_plus_plus", R, mask, gi, config=AlgoConfig(gamma=gamma)),
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("f_norm", [1.0, 2.5])
def test_gpg_advantage_equals_verl_gpg(seed, f_norm):
    """verl computes α = N / count_nonzero(R) as int / int64 tensor, i.e. in torch's default float32:
    the tolerance is float32's relative rounding of α (2⁻²⁴ ≈ 6e-8), not float64's."""
    R, mask, gi, *_ = batch(seed)
    got = ours("gpg_advantage", R, mask, gi, f_norm=f_norm)
    assert_same(got, verl("gpg", R, mask, gi, f_norm=f_norm), tol=1.2e-7)


def test_gpg_alpha_counts_nonzero_rewards_over_the_batch():
    R = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0], dtype=D)
    mask = torch.ones(8, 2, dtype=D)
    gi = torch.arange(8) // 4
    a = ours("gpg_advantage", R, mask, gi)[:, 0]
    # α = 8 / 2 non-zero rewards = 4; group means 1/4 and 1/4 (hand computed)
    assert torch.allclose(a, 4 * (R - 0.25), atol=1e-15, rtol=0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "continuous"])
def test_grpo_passk_equals_verl(seed, norm, binary):
    R, mask, gi, *_ = batch(seed, groups=(4, 3, 2, 5), binary=binary)
    cfg = AlgoConfig(norm_adv_by_std_in_grpo=norm)
    assert_same(ours("grpo_passk", R, mask, gi, norm_adv_by_std_in_grpo=norm), verl("grpo_passk", R, mask, gi, cfg))


def test_grpo_passk_refuses_a_group_of_one_as_verl_does():
    R, mask, gi, *_ = batch(0)  # has a group of one
    with pytest.raises(ValueError, match="at least 2 samples"):
        verl("grpo_passk", R, mask, gi, AlgoConfig())
    with pytest.raises(ShapeError, match=r"group_index.*at least 2"):
        ours("grpo_passk", R, mask, gi)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm", [True, False])
def test_gdpo_equals_verl(seed, norm):
    """verl's GRPO gives a lone response std = torch.tensor(1.0), a float32, so it divides by
    float32(1 + 1e-6): with the std division the tolerance is float32's rounding (2⁻²⁴ ≈ 6e-8)."""
    R, mask, gi, *_ = batch(seed, binary=False)
    assert_same(
        ours("gdpo", R, mask, gi, norm_adv_by_std_in_grpo=norm),
        verl("gdpo", R, mask, gi, norm_adv_by_std_in_grpo=norm),
        tol=1.2e-7 if norm else TOL,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_remax_equals_verl_given_the_baseline_rewards(seed):
    R, mask, gi, *_ = batch(seed, binary=False)
    base = torch.randn(R.numel(), generator=torch.Generator().manual_seed(seed + 7), dtype=D)
    fn = core_algos.get_adv_estimator_fn("remax")
    expected, _ = fn(token_level_rewards=token_rewards(R, mask), reward_baselines=base, response_mask=mask)
    assert_same(ours("remax", R, mask, gi, baselines=base), expected * mask)
    with pytest.raises(MissingInputError, match="reward_baselines"):
        ours("remax", R, mask, gi)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("zero_tail", [True, False])
@pytest.mark.parametrize("groups", [(4, 3, 1, 5), (3, 3, 2)])
def test_optimal_token_baseline_equals_verl(seed, zero_tail, groups):
    R, mask, gi, old_logp, sum_p2 = batch(seed, groups=groups, binary=False)
    got = ours("optimal_token_baseline", R, mask, gi, old_logp, sum_p2, handle_zero_tail=zero_tail)
    index = np.array([f"uid-{int(i)}" for i in gi], dtype=object)
    fn = core_algos.get_adv_estimator_fn("optimal_token_baseline")
    expected, _ = fn(
        token_level_rewards=token_rewards(R, mask),
        response_mask=mask,
        index=index,
        old_log_probs=old_logp,
        sum_pi_squared=sum_p2,
        handle_zero_tail=zero_tail,
    )
    assert_same(got, expected * mask)


def test_optimal_token_baseline_tail_rule_acts():
    """A group whose longest response is alone: with the tail rule its advantage there is G = R."""
    R = torch.tensor([1.0, 0.0, 1.0], dtype=D)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=D)
    gi = torch.zeros(3, dtype=torch.long)
    old_logp = torch.full((3, 5), -1.0, dtype=D)
    sum_p2 = torch.full((3, 5), 0.5, dtype=D)
    with_tail = ours("optimal_token_baseline", R, mask, gi, old_logp, sum_p2)
    without = ours("optimal_token_baseline", R, mask, gi, old_logp, sum_p2, handle_zero_tail=False)
    assert torch.equal(with_tail[0, 3:], torch.ones(2, dtype=D))  # beyond the second-longest length 3
    assert torch.equal(with_tail[:, :3], without[:, :3])
    assert not torch.equal(with_tail[0, 3:], without[0, 3:])
