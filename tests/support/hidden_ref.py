"""Shared pieces of the token_stats_from_hidden tests: random inputs and the float64 reference.

The reference builds the logits ``(h @ W.T + b)`` explicitly in float64 and takes the explicit
softmax of ``tests/support/core_ref.py``; gradients come from float64 autograd through that graph.
"""

from __future__ import annotations

import torch

from support.core_ref import ref_softmax_stats

NAMES = ("logp", "entropy", "sum_p2", "sum_p2_logp")


def make_inputs(gen, lead=(3, 5), d=7, v=53, bias=True, scale=1.0):
    """float64 ``hidden [*lead, D]``, ``weight [V, D]``, ``bias [V]`` (or None), ``ids [*lead]``, coefficients."""
    h = torch.randn(*lead, d, generator=gen, dtype=torch.float64) * scale
    w = torch.randn(v, d, generator=gen, dtype=torch.float64)
    b = torch.randn(v, generator=gen, dtype=torch.float64) if bias else None
    ids = torch.randint(0, v, lead, generator=gen)
    coef = torch.randn(4, *lead, generator=gen, dtype=torch.float64)
    return h, w, b, ids, coef


def reference(h, w, b, ids, temperature, coef, stats=NAMES, floor=None):
    """float64 values (all four) and gradients w.r.t. (h, w, b) of Σ coef_s · stat_s over ``stats``.

    ``floor``: clamp logits from below (a −inf bias entry → the π = 0 limit)."""
    leaves = [None if t is None else t.detach().double().requires_grad_(True) for t in (h, w, b)]
    h64, w64, b64 = leaves
    z = h64 @ w64.T
    if b64 is not None:
        z = z + b64
    if floor is not None:
        z = z.clamp(min=floor)
    vals = ref_softmax_stats(z, ids, temperature)
    obj = sum((coef[i] * vals[i]).sum() for i, n in enumerate(NAMES) if n in stats)
    grads = torch.autograd.grad(obj, [t for t in leaves if t is not None])
    return [x.detach() for x in vals], list(grads)


def objective(out, coef, stats=NAMES):
    return sum((coef[i].to(getattr(out, n).dtype) * getattr(out, n)).sum() for i, n in enumerate(NAMES) if n in stats)
