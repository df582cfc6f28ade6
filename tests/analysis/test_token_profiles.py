"""Per-token profiles: positional entropy (paper 004 Fig. 6a) by hand, the gradient-norm proxy (paper 004
Eq. 4) against autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from entflow.analysis.token_profiles import grad_norm_proxy, positional_entropy
from entflow.errors import AnalysisError


def test_positional_entropy_bins_by_relative_position():
    # response 0: 5 valid tokens at positions 1..5 (position 0 is prompt), l = 0, .25, .5, .75, 1
    # response 1: 2 valid tokens, l = 0, 1; response 2: 1 valid token, l = 0
    H = torch.tensor(
        [
            [9.0, 1.0, 2.0, 3.0, 4.0, 5.0],
            [10.0, 20.0, 9.0, 9.0, 9.0, 9.0],
            [7.0, 9.0, 9.0, 9.0, 9.0, 9.0],
        ]
    )
    M = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]])
    prof = positional_entropy(H, M, correct=[1, 0, 1], n_bins=2)
    # bin 0: l < .5 ; bin 1: l >= .5
    np.testing.assert_allclose(prof["correct"], [(1 + 2 + 7) / 3, (3 + 4 + 5) / 3])
    np.testing.assert_allclose(prof["incorrect"], [10.0, 20.0])
    np.testing.assert_allclose(prof["all"], [(1 + 2 + 7 + 10) / 4, (3 + 4 + 5 + 20) / 4])
    prof4 = positional_entropy(H, M, n_bins=4)
    # l = 0 → 0, .25 → 1, .5 → 2, .75 → 3, 1 → 3 (last bin is closed)
    np.testing.assert_allclose(prof4["all"], [(1 + 10 + 7) / 3, 2.0, 3.0, (4 + 5 + 20) / 3])
    assert "correct" not in prof4
    empty = positional_entropy(H, torch.zeros_like(M), n_bins=3)["all"]
    assert np.isnan(empty).all()


def test_grad_norm_proxy_equals_autograd_lm_head_gradient():
    torch.manual_seed(0)
    N, T, D, V = 2, 3, 5, 7
    h = torch.randn(N, T, D, dtype=torch.float64)
    W = torch.randn(V, D, dtype=torch.float64)
    tok = torch.randint(0, V, (N, T))
    w = torch.randn(N, T, dtype=torch.float64)
    probs = torch.softmax(h @ W.T, -1)
    logp = probs.gather(-1, tok[..., None]).squeeze(-1).log()
    sum_p2 = (probs**2).sum(-1)
    G = grad_norm_proxy(w, logp, sum_p2, h)
    # independent: ‖∂(w_t · log π(o_t)) / ∂W‖_F by autograd, one token at a time
    for i in range(N):
        for t in range(T):
            Wg = W.clone().requires_grad_(True)
            lp = torch.log_softmax(h[i, t] @ Wg.T, -1)[tok[i, t]]
            (g,) = torch.autograd.grad(w[i, t] * lp, Wg)
            assert G[i, t].item() == pytest.approx(torch.linalg.norm(g).item(), rel=1e-10)
    # norms instead of hidden states, [N] weights broadcast, and the mask
    hn = torch.linalg.vector_norm(h, dim=-1)
    torch.testing.assert_close(grad_norm_proxy(w, logp, sum_p2, hn), G)
    wa = torch.tensor([2.0, -1.0], dtype=torch.float64)
    torch.testing.assert_close(
        grad_norm_proxy(wa, logp, sum_p2, hn), grad_norm_proxy(wa[:, None].expand(N, T), logp, sum_p2, hn)
    )
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    Gm = grad_norm_proxy(w, logp, sum_p2, h, mask=mask)
    assert Gm[0, 2] == 0 and (Gm[1] == 0).all() and Gm[0, 0] == G[0, 0]
    with pytest.raises(AnalysisError):
        grad_norm_proxy(w, logp, sum_p2, hn[:, :2])
