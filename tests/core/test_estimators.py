"""The five entropy-change estimators (docs/design.md §5) vs hand formulas, and first-order exactness of
``tabular`` against the truly measured entropy change of a tabular softmax policy."""

from __future__ import annotations

import itertools

import pytest
import torch

import entflow as ef
from entflow.trainer.tabular import tabular_experiment
from support.core_ref import make_batch_tensors, ref_softmax_stats


def _hand(name, logp, old_logp, A, mask, H, s2=None, s2l=None, lo=0.2, hi=0.2):
    """Element-by-element hand formula of docs/design.md §5 (plain Python floats)."""
    N, T = logp.shape
    out = torch.zeros(N, T, dtype=torch.float64)
    valid = [(i, t) for i in range(N) for t in range(T) if mask[i, t] > 0]
    if name == "cov":
        mlp = sum(logp[i, t].item() for i, t in valid) / len(valid)
        ma = sum(A[i, t].item() for i, t in valid) / len(valid)
        for i, t in valid:
            out[i, t] = -(logp[i, t].item() - mlp) * (A[i, t].item() - ma)
        return out
    for i, t in valid:
        lp, a, h = logp[i, t].item(), A[i, t].item(), H[i, t].item()
        r = torch.exp(logp[i, t] - old_logp[i, t]).item()
        cut = (a > 0 and r > 1 + hi) or (a < 0 and r < 1 - lo)
        w = 0.0 if cut else a * r
        p = torch.exp(logp[i, t]).item()
        if name == "steer":
            v = -w * (1 - p) * (lp + h)
        elif name == "sampled_logit":
            v = -w * p * (1 - p) * (lp + h)
        elif name == "opefo":
            v = -w * (1 - p) ** 2 * (lp + h)
        else:
            v = -w * (p * (lp + h) - (s2l[i, t].item() + h * s2[i, t].item()))
        out[i, t] = v
    return out


def _batch(gen, adv_per_token=False, with_old_entropy=True):
    logp, old_logp, adv, mask, entropy, old_entropy = make_batch_tensors(gen, n=6, t=5, spread=0.6)
    s2 = torch.rand(6, 5, generator=gen, dtype=torch.float64) * 0.5 + 0.05
    s2l = -torch.rand(6, 5, generator=gen, dtype=torch.float64) * 0.5
    A = adv.unsqueeze(-1).expand_as(logp).clone()
    if adv_per_token:
        A = A + 0.3 * torch.randn(6, 5, generator=gen, dtype=torch.float64)
    batch = ef.TokenBatch(
        logp.clone().requires_grad_(True),
        old_logp,
        A if adv_per_token else adv,
        mask,
        entropy=entropy.clone().requires_grad_(True),
        old_entropy=old_entropy if with_old_entropy else None,
        sum_p2=s2,
        sum_p2_logp=s2l,
    )
    return batch, (logp, old_logp, A, mask, entropy, old_entropy, s2, s2l)


@pytest.mark.parametrize("name", ["steer", "sampled_logit", "opefo", "tabular", "cov"])
@pytest.mark.parametrize("adv_per_token", [False, True])
def test_estimators_vs_hand(gen, name, adv_per_token):
    batch, (logp, old_logp, A, mask, _entropy, old_entropy, s2, s2l) = _batch(gen, adv_per_token)
    got = ef.entropy_change(name, batch)
    want = _hand(name, logp, old_logp, A, mask, old_entropy, s2, s2l)  # H = old_entropy (given)
    assert got.shape == logp.shape and not got.requires_grad
    assert torch.allclose(got, want, rtol=0, atol=1e-12)  # float64: 1e-12
    assert bool((got[mask == 0] == 0).all())  # masked positions are exactly 0
    assert got.abs().sum() > 0


@pytest.mark.parametrize("name", ["steer", "sampled_logit", "opefo", "tabular"])
def test_entropy_precedence_rule(name):
    """old_entropy is used when given; otherwise entropy (detached); the two differ here."""
    # two batches from the same seed: identical except that the second has no old_entropy
    b1, (logp, old_logp, A, mask, entropy, old_entropy, s2, s2l) = _batch(torch.Generator().manual_seed(99))
    b2, _ = _batch(torch.Generator().manual_seed(99), with_old_entropy=False)
    assert torch.equal(b1.logp, b2.logp) and torch.equal(b1.entropy, b2.entropy)
    with_old = ef.entropy_change(name, b1)
    only_new = ef.entropy_change(name, b2)
    assert torch.allclose(with_old, _hand(name, logp, old_logp, A, mask, old_entropy, s2, s2l), atol=1e-12)
    assert torch.allclose(only_new, _hand(name, logp, old_logp, A, mask, entropy, s2, s2l), atol=1e-12)
    assert not torch.allclose(with_old, only_new, atol=1e-6)
    assert not only_new.requires_grad


@pytest.mark.parametrize("name", ["steer", "sampled_logit", "opefo", "tabular"])
def test_clipped_tokens_get_zero_weight(gen, name):
    batch, (logp, old_logp, A, mask, *_rest) = _batch(gen)
    r = torch.exp(logp - old_logp)
    cut = (((A > 0) & (r > 1.2)) | ((A < 0) & (r < 0.8))) & (mask > 0)
    assert cut.any()
    got = ef.entropy_change(name, batch)
    assert bool((got[cut] == 0).all())
    # with bounds wide enough to clip nothing, the same tokens get non-zero estimates
    free = ef.entropy_change(name, batch, clip_low=1.0, clip_high=100.0)
    assert bool((free[cut] != 0).all())


def test_cov_ignores_clipping_and_uses_valid_means(gen):
    batch, (logp, _old_logp, A, mask, *_rest) = _batch(gen, adv_per_token=True)
    got = ef.entropy_change("cov", batch)
    assert torch.allclose(got, ef.entropy_change("cov", batch, clip_low=0.0, clip_high=0.0), atol=0)
    # the valid-token mean of −cov is... the centred covariance sums to ≈ n·Cov; check one entry by hand
    v = mask > 0
    i, t = 0, 0
    want = -(logp[i, t] - logp[v].mean()) * (A[i, t] - A[v].mean())
    assert got[i, t].item() == pytest.approx(want.item(), abs=1e-12)


# ---------------------------------------------------------------------------------------------
# tabular: first-order exact on a tabular softmax
# ---------------------------------------------------------------------------------------------


def _own_tabular_check(lr: float, seed: int = 0, states: int = 64, vocab: int = 16) -> float:
    """Independent check: one token per state, on-policy, one SGD step on L = −(1/n) Σ A_s log π_s(k_s).

    The gradient is written by hand (∂L/∂z_s = −(A_s/n)(e_k − π_s)); the true entropy change
    is measured with an explicit float64 softmax. Returns ‖pred − true‖ / ‖true‖.
    """
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(states, vocab, generator=g, dtype=torch.float64) * 2
    pi = torch.softmax(z, -1)
    k = torch.multinomial(pi, 1, generator=g).squeeze(-1)
    A = torch.randn(states, generator=g, dtype=torch.float64)
    n = states
    logp, H, s2, s2l = ref_softmax_stats(z, k)
    onehot = torch.nn.functional.one_hot(k, vocab).double()
    grad = -(A / n).unsqueeze(-1) * (onehot - pi)
    H_after = ref_softmax_stats(z - lr * grad, k)[1]
    true_dH = H_after - H
    batch = ef.TokenBatch(
        logp.unsqueeze(-1),
        logp.unsqueeze(-1),
        A,
        torch.ones(states, 1),
        old_entropy=H.unsqueeze(-1),
        sum_p2=s2.unsqueeze(-1),
        sum_p2_logp=s2l.unsqueeze(-1),
    )
    pred = ef.entropy_change("tabular", batch).squeeze(-1) * (lr / n)
    return ((pred - true_dH).norm() / true_dH.norm()).item()


def test_tabular_first_order_exact_own_check():
    errs = [_own_tabular_check(lr) for lr in (10.0, 1.0, 0.1, 1e-2, 1e-3)]
    # first order: error ∝ lr → each 10× smaller lr shrinks the relative error ~10× (accept 5×–20×)
    for big, small in itertools.pairwise(errs):
        assert 5 < big / small < 20, errs
    assert errs[-1] <= 0.01, errs  # ≤ 1 % at lr = 1e-3


def test_tabular_first_order_exact_library_experiment():
    """Same property through ``tabular_experiment`` (several tokens per state, policy_loss autograd)."""
    lrs = (1.0, 1e-1, 1e-2, 1e-3)
    errs = []
    for lr in lrs:
        res = tabular_experiment(states=64, vocab=16, samples_per_state=4, lr=lr, seed=3)
        pred, true = res.predicted["tabular"], res.true_dH
        errs.append(((pred - true).norm() / true.norm()).item())
    for big, small in itertools.pairwise(errs):
        assert 5 < big / small < 20, errs
    assert errs[-1] <= 0.01, errs
    # the other estimators are NOT first-order exact: their error does not vanish as lr → 0
    res = tabular_experiment(states=64, vocab=16, samples_per_state=4, lr=1e-3, seed=3)
    for name in ("steer", "sampled_logit", "opefo", "cov"):
        e = ((res.predicted[name] - res.true_dH).norm() / res.true_dH.norm()).item()
        assert e > 0.05, (name, e)
