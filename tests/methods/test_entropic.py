"""entropic (arXiv 2511.15248, ``methods/entropic.py``) against float64 references written here
with explicit loops, independently of the method code: the loss and its gradient on a batch with
padding (holding inf values), A = 0 and an empty response, the weight 1 ± α it puts on
high-probability tokens, and the PI controller's hand-computed trajectory through a state_dict
round trip.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

import entflow as ef
from entflow.cli.main import main
from entflow.errors import MissingInputError, ParameterError
from support.methods_ref import D, mask_of

TOL = 1e-12


# ------------------------------------------------------------------------------------------
# entropic
# ------------------------------------------------------------------------------------------


def entropic_batch(H_level: float = 0.3):
    """Rows: 5 valid / 3 valid / 4 valid (A = 0) / empty; high-probability tokens (p > 0.95),
    one exactly at p = 0.95 (not high), high-probability values in the padding."""
    lp = torch.tensor(
        [
            [-0.01, -0.04, -0.06, -1.0, math.log(0.95), -0.02],
            [-0.03, -2.0, -0.001, -0.01, -0.01, -0.01],
            [-0.02, -0.5, -0.03, -0.8, -0.01, -0.01],
            [-0.01, -0.01, -0.01, -0.01, -0.01, -0.01],
        ],
        dtype=D,
    )
    old = lp + torch.tensor([0.02, -0.03, 0.01, 0.05, -0.02, 0.0], dtype=D)
    old[:, 5] = math.inf  # garbage in padding
    adv = torch.tensor([1.5, -0.8, 0.0, 2.0], dtype=D)
    m = mask_of([5, 3, 4, 0], 6)
    Hold = torch.full((4, 6), H_level, dtype=D)
    logp = lp.clone().requires_grad_(True)
    return ef.TokenBatch(logp, old, adv, m, old_entropy=Hold), lp, old, adv, m


def ref_entropic_term(lp, old, adv, m, alpha, agg, p_high=0.95):
    """α·agg(−r|A| on p > p_high) and its gradient w.r.t. logp, by hand."""
    n, t = lp.shape
    grad = torch.zeros(n, t, dtype=D)
    vals = torch.zeros(n, t, dtype=D)
    for i in range(n):
        for j in range(t):
            if m[i, j] and lp[i, j] > math.log(p_high):
                r = math.exp(lp[i, j] - old[i, j])
                vals[i, j] = -r * abs(float(adv[i]))
                grad[i, j] = vals[i, j]  # d(−r|A|)/dlogp = −r|A|
    if agg == "token-mean":
        w = torch.full((n, t), 1 / float(m.sum()), dtype=D)
    else:
        rows = [i for i in range(n) if m[i].sum() > 0]
        w = torch.zeros(n, t, dtype=D)
        for i in rows:
            w[i] = 1 / (len(rows) * float(m[i].sum()))
    return alpha * float((vals * w).sum()), alpha * grad * w


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_entropic_loss_and_gradient_match_reference(agg):
    m = ef.get_method("entropic", target=0.1, kp=0.5, ki=0.2)
    m.update({"entropy": 0.6})  # integral 0.5
    b, lp, old, adv, mask = entropic_batch(0.3)
    out = ef.policy_loss(b, m, ef.LossSpec(agg=agg))
    out.loss.backward()
    alpha = 0.5 * (0.3 - 0.1) + 0.2 * 0.5  # K_p·e + K_i·I = 0.2
    term, g = ref_entropic_term(lp, old, adv, mask, alpha, agg)
    assert term != 0 and out.metrics["entropic/alpha"] == pytest.approx(alpha, abs=TOL)
    assert out.metrics["entropic/loss"] == pytest.approx(term, abs=TOL)
    b2, *_ = entropic_batch(0.3)
    ef.policy_loss(b2, "grpo", ef.LossSpec(agg=agg)).loss.backward()
    assert torch.allclose(b.logp.grad - b2.logp.grad, g, atol=TOL, rtol=0)
    assert out.metrics["entropic/high_frac"] == pytest.approx(6 / 12, abs=TOL)  # 2 + 2 + 2 of 12 valid


def test_entropic_is_a_weight_one_plus_minus_alpha_on_high_probability_tokens():
    """Inside the clip, the term moves the weight of high-probability positive tokens to 1 + α and
    of negative ones to 1 − α (α > 0 lowers entropy)."""
    m = ef.get_method("entropic", target=0.0, kp=1.0, ki=0.0)
    b, lp, _, adv, mask = entropic_batch(0.25)  # α = 0.25
    ef.policy_loss(b, m).loss.backward()
    b2, *_ = entropic_batch(0.25)
    ef.policy_loss(b2, "grpo").loss.backward()
    high = mask.bool() & (lp > math.log(0.95))
    sign = torch.sign(adv)[:, None].expand_as(lp)
    ratio = torch.where(high, b.logp.grad / b2.logp.grad.where(b2.logp.grad != 0, torch.ones_like(lp)), 1.0)
    want = torch.where(high & (sign != 0), 1 + 0.25 * sign, torch.ones_like(lp))
    assert torch.allclose(ratio[high & (sign != 0)], want[high & (sign != 0)], atol=1e-12, rtol=0)


def test_entropic_pi_trajectory_and_resume():
    """K_p = 1, K_i = 0.5, α_max = 0.6, H* = 0.1, batch entropies 0.5, 0.3, 0.05, 0.02, 0.9:
    e = 0.4, 0.2, −0.05, −0.08, 0.8; I (before the step) = 0, 0.4, 0.6, 0.55, 0.47;
    α = e + I/2 = 0.4, 0.4, 0.25, 0.195, 1.035 → clipped to 0.6."""
    Hs = [0.5, 0.3, 0.05, 0.02, 0.9]
    alphas = [0.4, 0.4, 0.25, 0.195, 0.6]
    integrals = [0.4, 0.6, 0.55, 0.47, 1.27]
    m = ef.get_method("entropic", target=0.1, kp=1.0, ki=0.5, alpha_max=0.6)
    resumed = None
    for k, H in enumerate(Hs):
        for meth in [m] + ([resumed] if resumed is not None else []):
            out = ef.policy_loss(entropic_batch(H)[0], meth)
            assert out.metrics["entropic/alpha"] == pytest.approx(alphas[k], abs=TOL)
            meth.update({"entropy": out.metrics["entropy"], "step": k})
            assert meth.integral == pytest.approx(integrals[k], abs=TOL)
        if k == 2:  # checkpoint after step 2: a resumed controller continues exactly
            resumed = ef.get_method("entropic", target=0.1, kp=1.0, ki=0.5, alpha_max=0.6)
            resumed.load_state_dict(copy.deepcopy(m.state_dict()))
            assert resumed.integral == m.integral
    assert ef.get_method("entropic", target=0.1, kp=1.0, ki=0.5).integral == 0.0


# ------------------------------------------------------------------------------------------
# parameters, missing inputs, CLI
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("target", -0.1),
        ("kp", -1.0),
        ("ki", -0.01),
        ("p_high", 1.0),
        ("alpha_max", -1.0),
    ],
)
def test_bad_parameters_raise_parameter_error(param, value):
    with pytest.raises(ParameterError) as e:
        ef.get_method("entropic", **{param: value})
    assert e.value.param == param and f"'{param}'" in str(e.value)


def test_missing_inputs_are_named():
    b = entropic_batch()[0]
    bare = ef.TokenBatch(b.logp, b.old_logp, b.advantages, b.mask)
    with pytest.raises(MissingInputError, match="old_entropy"):
        ef.policy_loss(bare, ef.get_method("entropic"))
    with pytest.raises(MissingInputError, match="entropy"):
        ef.get_method("entropic").update({"step": 1})


def test_cli_lists_it_and_shows_its_paper(capsys):
    assert main(["methods"]) == 0
    assert " entropic " in capsys.readouterr().out
    assert main(["methods", "entropic"]) == 0
    assert "arXiv 2511.15248" in capsys.readouterr().out
