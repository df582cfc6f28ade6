"""The loss aggregation of core/ppo.py through ``policy_loss``: ``seq-mean-token-sum-norm`` with a
fixed ``LossSpec.max_len`` divides by N · max_len whatever the batch's padded length (checked by
hand in float64), and a max_len shorter than the padded length is refused."""

from __future__ import annotations

import pytest
import torch

import entflow as ef

D = torch.float64


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
