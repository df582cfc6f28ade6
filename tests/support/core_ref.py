"""float64 reference helpers for the core tests, written independently of the library
(explicit softmax, plain loops): tests compare the library against them, never against the
library's own helpers."""

from __future__ import annotations

import math

import torch


def ref_softmax_stats(logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0):
    """float64 reference of (logp, entropy, Σπ², Σπ² log π) from an explicit softmax.

    Differentiable w.r.t. ``logits`` (used for the float64 autograd reference of the gradient).
    """
    z = logits.to(torch.float64) / temperature
    zmax = z.max(dim=-1, keepdim=True).values.detach()
    e = torch.exp(z - zmax)
    norm = e.sum(-1, keepdim=True)
    pi = e / norm
    logpi = (z - zmax) - torch.log(norm)
    logp = torch.gather(logpi, -1, ids.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(pi * logpi).sum(-1)
    s2 = (pi**2).sum(-1)
    s2l = (pi**2 * logpi).sum(-1)
    return logp, entropy, s2, s2l


def make_batch_tensors(gen: torch.Generator, n: int = 6, t: int = 7, spread: float = 0.5):
    """Random float64 per-token tensors of a rollout batch (logp ≤ 0, ratios around 1, a ragged mask)."""
    logp = -torch.rand(n, t, generator=gen, dtype=torch.float64) * 3 - 0.01
    old_logp = logp + (torch.rand(n, t, generator=gen, dtype=torch.float64) - 0.5) * 2 * spread
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    lengths[0] = t
    mask = (torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
    entropy = torch.rand(n, t, generator=gen, dtype=torch.float64) * 2 + 0.05
    old_entropy = torch.rand(n, t, generator=gen, dtype=torch.float64) * 2 + 0.05
    return logp, old_logp, adv, mask, entropy, old_entropy


def isclose(a: float, b: float, tol: float) -> bool:
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)
