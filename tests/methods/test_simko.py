"""SimKO (arXiv 2510.14807 §4) against a float64 hand reference, and its token statistic.

The policy is a table of logits ``z`` ``[N, T, V]`` (a leaf); the loss is differentiated w.r.t.
``z`` and compared with the gradient written out by hand from ∇_z log π(b) = e_b − π:

- a positive-advantage response at a high-entropy token (w = 1), inside the clip:
  −A/Σm · r · [(1 − α)(e_y − π) + (α/K) Σ_{b∈top-K} (e_b − π)];
- a negative-advantage response at a high-entropy token whose sampled token is the top-1:
  −λA/Σm · r (e_y − π); elsewhere PPO-clip's −A/Σm · r (e_y − π) (0 where the clip cuts it).

High entropy means above the τ quantile of the response's valid-token entropies (checked against
``torch.quantile``). ``topk_logprobs`` is checked against an explicit sort of ``log_softmax``.
Tolerance 1e-12 (float64).
"""

from __future__ import annotations

import pytest
import torch

import entflow as ef
from entflow.core.topk import topk_logprobs
from entflow.errors import MissingInputError, ParameterError, ShapeError
from entflow.methods.needs import needs_of
from entflow.methods.passk import _response_quantile

D = torch.float64


def setup(seed=0, n=6, t=7, v=6, off=0.0):
    g = torch.Generator().manual_seed(seed)
    z = (torch.randn(n, t, v, generator=g, dtype=D) * 1.5).requires_grad_(True)
    logpi = torch.log_softmax(z, -1)
    ids = torch.randint(0, v, (n, t), generator=g)
    ids[1, :] = logpi.detach().argmax(-1)[1]  # a response that always samples the top-1 token
    ids[4, :] = logpi.detach().argmax(-1)[4]
    logp = logpi.gather(-1, ids[..., None])[..., 0]
    old = logp.detach() + off * torch.randn(n, t, generator=g, dtype=D)
    H = -(logpi.exp() * logpi).sum(-1).detach()
    mask = torch.ones(n, t, dtype=D)
    mask[2, 4:] = 0
    A = torch.tensor([1.0, -0.8, 0.5, 0.9, -1.3, -0.2], dtype=D)[:n]
    return z, ids, logp, old, H, mask, A


def test_topk_logprobs_is_the_sorted_log_softmax():
    z, *_ = setup()
    for k in (1, 3, 6):
        got = topk_logprobs(z, k, temperature=0.7)
        want = torch.log_softmax(z / 0.7, -1).sort(-1, descending=True).values[..., :k]
        assert torch.allclose(got, want, atol=1e-12, rtol=0)
    with pytest.raises(ParameterError, match="k"):
        topk_logprobs(z, 7)
    with pytest.raises(ParameterError, match="temperature"):
        topk_logprobs(z, 2, temperature=0.0)


def test_the_quantile_is_torch_quantile_per_response():
    _, _, _, _, H, mask, _ = setup()
    q = _response_quantile(H, mask.bool(), 0.8)
    for i in range(H.shape[0]):
        want = torch.quantile(H[i][mask[i].bool()], 0.8)
        assert abs(float(q[i, 0]) - float(want)) <= 1e-12


@pytest.mark.parametrize(("K", "alpha", "lam", "tau"), [(3, 0.01, 1.1, 0.8), (2, 0.3, 2.0, 0.5)])
def test_loss_and_gradient_on_policy_by_hand(K, alpha, lam, tau):
    z, ids, logp, old, H, mask, A = setup()
    top = topk_logprobs(z, K)
    b = ef.TokenBatch(logp, old, A, mask, old_entropy=H, topk_logp=top)
    out = ef.policy_loss(b, ef.get_method("simko", top_k=K, alpha=alpha, lam=lam, tau=tau))
    out.loss.backward()
    n, t, v = z.shape
    pi = torch.softmax(z.detach(), -1)
    den = float(mask.sum())
    want = torch.zeros(n, t, v, dtype=D)
    loss = 0.0
    pushed = 0
    for i in range(n):
        Hv = H[i][mask[i].bool()]
        thr = float(torch.quantile(Hv, tau))
        for j in range(t):
            if not mask[i, j]:
                continue
            e = lambda c: torch.nn.functional.one_hot(torch.tensor(c), v).to(D)  # noqa: E731
            gy = e(int(ids[i, j])) - pi[i, j]
            high = float(H[i, j]) > thr
            a = float(A[i])
            if a > 0 and high:
                tops = pi[i, j].sort(descending=True).indices[:K]
                spread = sum(e(int(c)) - pi[i, j] for c in tops) / K
                want[i, j] = -a / den * ((1 - alpha) * gy + alpha * spread)
            elif a < 0 and high and int(ids[i, j]) == int(pi[i, j].argmax()):
                pushed += 1
                a = lam * a
                want[i, j] = -a / den * gy
            else:
                want[i, j] = -a / den * gy
            loss += -a / den  # r = 1
    assert pushed > 0
    assert abs(float(out.loss.detach()) - loss) <= 1e-12
    assert torch.allclose(z.grad, want, atol=1e-12, rtol=0)
    assert abs(out.metrics["simko/pushed_frac"] - pushed / den) <= 1e-12


def test_off_policy_clip_uses_the_mixed_ratio():
    """Off policy: r̃ has r's value, so the clip decisions are PPO's; the loss value equals PPO-clip's
    with λ on the pushed tokens (the spread changes only the gradient)."""
    z, ids, logp, old, H, mask, A = setup(seed=1, off=0.4)
    m = ef.get_method("simko", lam=1.5)
    out = ef.policy_loss(ef.TokenBatch(logp, old, A, mask, old_entropy=H, topk_logp=topk_logprobs(z, 3)), m)
    pi = torch.softmax(z.detach(), -1)
    den = float(mask.sum())
    loss = 0.0
    for i in range(z.shape[0]):
        thr = float(torch.quantile(H[i][mask[i].bool()], 0.8))
        for j in range(z.shape[1]):
            if not mask[i, j]:
                continue
            r = float(torch.exp(logp.detach()[i, j] - old[i, j]))
            a = float(A[i])
            if a < 0 and float(H[i, j]) > thr and int(ids[i, j]) == int(pi[i, j].argmax()):
                a *= 1.5
            loss += max(-a * r, -a * min(max(r, 0.8), 1.2)) / den
    assert abs(float(out.loss.detach()) - loss) <= 1e-12


def test_needs_and_errors():
    z, _ids, logp, old, H, mask, A = setup()
    assert needs_of("simko").topk == 3
    assert needs_of(ef.get_method("simko", top_k=5)).topk == 5
    with pytest.raises(MissingInputError, match="topk_logp"):
        ef.policy_loss(ef.TokenBatch(logp, old, A, mask, old_entropy=H), "simko")
    with pytest.raises(ParameterError, match="top_k"):
        ef.policy_loss(ef.TokenBatch(logp, old, A, mask, old_entropy=H, topk_logp=topk_logprobs(z, 2)), "simko")
    with pytest.raises(ShapeError, match="topk_logp"):
        ef.TokenBatch(logp, old, A, mask, topk_logp=torch.zeros(6, 7, dtype=D))
    for bad in ({"top_k": 0}, {"tau": 0.0}, {"tau": 1.0}, {"alpha": 1.5}, {"lam": -1.0}):
        with pytest.raises(ParameterError, match=next(iter(bad))):
            ef.get_method("simko", **bad)
