"""Smaller defects in the methods, each pinned by a test that failed before its fix."""

from __future__ import annotations

import warnings

import pytest
import torch

import entflow as ef
from entflow.methods import base as methods_base

D = torch.float64


# -- edge_grpo: a near-deterministic response must not get a ~1e5 advantage ------------------


def test_edge_grpo_factor_is_capped():
    n, t = 4, 5
    H = torch.full((n, t), 1.0, dtype=D)
    H[0] = 1e-5  # response 0 is almost deterministic: P_0 = 1e-5, mean_g P ≈ 0.75
    mask = torch.ones(n, t, dtype=D)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=D)
    b = ef.TokenBatch(
        torch.zeros(n, t, dtype=D), torch.zeros(n, t, dtype=D), adv, mask, old_entropy=H, group_index=torch.zeros(n)
    )
    out = ef.compute_advantages(b, ef.get_method("edge_grpo"))
    P = H.mean(-1)
    raw = P.mean() / P  # the uncapped EDGE-GRPO factor: ~7.5e4 for response 0
    assert float(raw[0]) > 1e4
    expected = adv * raw.clamp(max=10.0)
    torch.testing.assert_close(out, expected[:, None].expand(n, t), rtol=1e-12, atol=0)
    assert float(out.abs().max()) <= 10.0
    # a looser cap is a parameter
    out50 = ef.compute_advantages(b, ef.get_method("edge_grpo", max_factor=50.0))
    assert float(out50[0, 0]) == pytest.approx(50.0)
    with pytest.raises(ef.ParameterError, match="max_factor"):
        ef.get_method("edge_grpo", max_factor=0.5)


# -- entropy_advantage: κ > 1 (Cheng et al.) ---------------------------------------------------


@pytest.mark.parametrize("kappa", [1.0, 0.5, 0.1])
def test_entropy_advantage_rejects_kappa_at_most_one(kappa):
    with pytest.raises(ef.ParameterError, match="kappa"):
        ef.get_method("entropy_advantage", kappa=kappa)


def test_entropy_advantage_keeps_negative_advantages_negative():
    n, t = 3, 4
    adv = torch.tensor([-1.0, -0.01, 2.0], dtype=D)
    H = torch.full((n, t), 5.0, dtype=D)  # a large entropy: the bonus is at its cap |A|/κ
    b = ef.TokenBatch(torch.zeros(n, t, dtype=D), torch.zeros(n, t, dtype=D), adv, torch.ones(n, t), old_entropy=H)
    out = ef.compute_advantages(b, ef.get_method("entropy_advantage", kappa=1.01))
    assert bool((out[:2] < 0).all())
    torch.testing.assert_close(out[:, 0], adv + adv.abs() / 1.01)


# -- seq-mean-token-sum-norm with a fixed max_len --------------------------------------------


def _padded(batch_t: int, gen: torch.Generator):
    n, t = 4, 5
    logp = -torch.rand(n, t, generator=gen, dtype=D)
    old = logp + 0.1 * torch.randn(n, t, generator=gen, dtype=D)
    adv = torch.randn(n, generator=gen, dtype=D)
    mask = (torch.arange(t) < torch.tensor([5, 3, 2, 4])[:, None]).to(D)
    pad = batch_t - t
    return (*tuple(torch.nn.functional.pad(x, (0, pad)) for x in (logp, old, mask)), adv)


def test_sum_norm_with_max_len_does_not_depend_on_padding(gen):
    losses = {}
    for batch_t in (5, 9):
        lp, old, mask, adv = _padded(batch_t, torch.Generator().manual_seed(0))
        b = ef.TokenBatch(lp.requires_grad_(True), old, adv, mask)
        losses[batch_t] = (
            float(ef.policy_loss(b, spec=ef.LossSpec(agg="seq-mean-token-sum-norm", max_len=16)).loss.detach()),
            float(ef.policy_loss(b, spec=ef.LossSpec(agg="seq-mean-token-sum-norm")).loss.detach()),
        )
        # by hand: Σ ℓ m / (N · max_len)
        r = torch.exp(lp.detach() - old)
        A = adv[:, None]
        ell = torch.maximum(-A * r, -A * r.clamp(0.8, 1.2))
        assert losses[batch_t][0] == pytest.approx(float((ell * mask).sum() / (4 * 16)), rel=1e-12)
    assert losses[5][0] == pytest.approx(losses[9][0], rel=1e-12)  # fixed max_len: same scale
    assert losses[5][1] != pytest.approx(losses[9][1], rel=1e-6)  # padded length: drifts
    lp, old, mask, adv = _padded(9, gen)
    with pytest.raises(ef.ParameterError, match="max_len"):
        ef.policy_loss(ef.TokenBatch(lp, old, adv, mask), spec=ef.LossSpec(agg="seq-mean-token-sum-norm", max_len=8))


# -- state rules: a stateful or stochastic method passed by name warns once, with the fix --------


@pytest.mark.parametrize("name", ["clip_cov", "adaptive_entropy", "pos_adv_reweight", "grpo+quadrant"])
def test_stateful_method_by_name_warns_once_with_the_fix(monkeypatch, gen, name):
    monkeypatch.setattr(methods_base, "_WARNED_BY_NAME", set())
    n, t = 4, 3
    b = ef.TokenBatch(
        -torch.rand(n, t, generator=gen, dtype=D), -torch.rand(n, t, generator=gen, dtype=D),
        torch.randn(n, generator=gen, dtype=D), torch.ones(n, t), entropy=torch.rand(n, t, dtype=D),
    )  # fmt: skip
    with pytest.warns(ef.StatefulMethodWarning, match=r"get_method\(") as rec:
        ef.policy_loss(b, name)
    assert len(rec) == 1 and "rebuilt on every call" in str(rec[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ef.policy_loss(b, name)  # once per name
        ef.policy_loss(b, ef.get_method(name))  # objects are the documented way: silent
        ef.policy_loss(b, "steer+clip_higher")  # stateless by name: silent
