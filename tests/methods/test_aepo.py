"""aepo (arXiv 2510.08141, ``methods/aepo.py``) against float64 references written here with
explicit loops, independently of the method code: the temperature controller's hand-computed
trajectory through a state_dict round trip, the REINFORCE advantages of the temperature samples,
and the loss on the merged batch.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

import entflow as ef
from entflow.cli.main import main
from entflow.errors import MissingInputError, ParameterError
from entflow.methods.aepo import AEPO
from support.methods_ref import D, mask_of

TOL = 1e-12


# ------------------------------------------------------------------------------------------
# aepo
# ------------------------------------------------------------------------------------------


def test_aepo_controller_trajectory_and_resume():
    m = ef.get_method("aepo", target=0.5, t_high=1.3, t_low=0.7, n_samples=10)
    assert (m.temperature, m.sample_budget) == (1.3, 10)  # no entropy yet counts as 0: sample hot
    steps = [(0.4, 1.3, 10), (0.5, 1.3, 10), (0.7, 0.7, 5), (0.9, 0.7, 5), (0.3, 1.3, 10)]
    saved = None
    for k, (H, temp, budget) in enumerate(steps):
        m.update({"entropy": H, "step": k})
        assert (m.temperature, m.sample_budget) == (temp, budget)
        if k == 2:
            saved = copy.deepcopy(m.state_dict())
    resumed = ef.get_method("aepo", target=0.5, t_high=1.3, t_low=0.7, n_samples=10)
    assert resumed.temperature == 1.3
    resumed.load_state_dict(saved)
    assert (resumed.temperature, resumed.sample_budget, resumed.last_entropy) == (0.7, 5, 0.7)
    assert m.n_prompts(16) == 4 and m.n_prompts(3) == 1


def temperature_batch(rewards: list[float], lengths: list[int], t: int = 5) -> ef.TokenBatch:
    n = len(rewards)
    logp = -torch.arange(1, n * t + 1, dtype=D).reshape(n, t) / (n * t)
    return ef.TokenBatch(logp, logp.clone(), None, mask_of(lengths, t), rewards=torch.tensor(rewards, dtype=D),
                         group_index=torch.arange(n) // 4)  # fmt: skip


@pytest.mark.parametrize(
    ("threshold", "raising", "kept"),
    [
        # group 0 rewards 1,0,1,0: A = ±0.866; group 1 1,1,1,0: A = 0.5, 0.5, 0.5, −1.5; group 2 all 1: A = 0
        (0.05, True, [0, 2, 4, 5]),  # 5 rewarded (0, 2, 4, 5, 6), budget min(5, 4) = 4, batch order
        (0.05, False, [0, 2]),  # above target: budget 4 // 2 = 2
        (0.6, True, [0, 2]),  # A = 0.5 no longer exceeds the threshold
    ],
)
def test_aepo_reinforce_advantages(threshold, raising, kept):
    m = ef.get_method("aepo", target=0.5, n_samples=4, threshold=threshold, alpha=0.7)
    if not raising:
        m.update({"entropy": 0.9})
    b = temperature_batch([1, 0, 1, 0, 1, 1, 1, 0, 1, 1, 1, 1], [5, 3, 1, 5, 2, 5, 5, 4, 5, 5, 5, 5])
    adv, keep = m.reinforce_advantages(b)
    assert keep.tolist() == [i in kept for i in range(12)]
    want = torch.zeros(12, 5, dtype=D)
    for i in kept:
        want[i] = 0.7 * b.mask[i]
    assert torch.equal(adv, want)


def test_aepo_loss_on_the_merged_batch_matches_reinforce_reference():
    """Regular rows (GRPO advantages) + kept temperature rows (advantage α): the loss is PPO-clip
    token-mean over all rows; its gradient on a kept row is −α·r·I/Σm (REINFORCE, ratio-weighted)."""
    m = ef.get_method("aepo", n_samples=4, alpha=0.7)
    tb = temperature_batch([1, 0, 1, 0, 1, 1, 1, 0], [5, 3, 1, 5, 2, 5, 5, 4])
    adv_t, keep = m.reinforce_advantages(tb)
    idx = keep.nonzero().squeeze(1)
    g = torch.Generator().manual_seed(3)
    n_reg = 4
    lp_reg = -torch.rand(n_reg, 5, generator=g, dtype=D)
    adv_reg = torch.tensor([1.2, -0.4, 0.0, -0.8], dtype=D)[:, None].expand(n_reg, 5)
    lp = torch.cat([lp_reg, tb.logp[idx]])
    old = lp + 0.3 * torch.randn(lp.shape, generator=g, dtype=D)
    mask = torch.cat([mask_of([5, 4, 2, 5], 5), tb.mask[idx]])
    adv = torch.cat([adv_reg, adv_t[idx]]) * mask
    logp = lp.clone().requires_grad_(True)
    out = ef.policy_loss(ef.TokenBatch(logp, old, adv, mask), m)
    out.loss.backward()
    loss, grad = 0.0, torch.zeros_like(lp)
    n_tok = float(mask.sum())
    for i in range(lp.shape[0]):
        for t in range(5):
            if not mask[i, t]:
                continue
            A, r = float(adv[i, t]), math.exp(lp[i, t] - old[i, t])
            loss += max(-A * r, -A * min(max(r, 0.8), 1.2)) / n_tok
            cut = (A > 0 and r > 1.2) or (A < 0 and r < 0.8)
            grad[i, t] = 0.0 if cut else -A * r / n_tok
    assert float(out.loss.detach()) == pytest.approx(loss, abs=TOL)
    assert torch.allclose(logp.grad, grad, atol=TOL, rtol=0)
    assert bool((grad[n_reg:] != 0).any())  # the REINFORCE rows carry gradient
    assert out.metrics["aepo/n_kept"] == 4.0 and out.metrics["aepo/temperature"] == 1.2


# ------------------------------------------------------------------------------------------
# parameters, missing inputs, CLI
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("target", -0.5),
        ("t_high", 0.0),
        ("alpha", -1.0),
        ("n_samples", 0),
        ("n_samples", 2.5),
        ("prompt_fraction", 0.0),
        ("t_low", 1.5),  # cross-parameter: t_low <= t_high
    ],
)
def test_bad_parameters_raise_parameter_error(param, value):
    with pytest.raises(ParameterError) as e:
        ef.get_method("aepo", **{param: value})
    assert e.value.param == param and f"'{param}'" in str(e.value)


def test_missing_inputs_are_named():
    bare = temperature_batch([1, 0, 1, 0], [5, 3, 1, 5])
    bare = ef.TokenBatch(bare.logp, bare.old_logp, None, bare.mask)
    with pytest.raises(MissingInputError, match="entropy"):
        ef.get_method("aepo").update({"step": 1})
    with pytest.raises(MissingInputError, match="rewards"):
        AEPO().reinforce_advantages(bare)


def test_cli_lists_it_and_shows_its_paper(capsys):
    assert main(["methods"]) == 0
    assert " aepo " in capsys.readouterr().out
    assert main(["methods", "aepo"]) == 0
    assert "arXiv 2510.08141" in capsys.readouterr().out
