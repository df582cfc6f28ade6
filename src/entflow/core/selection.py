"""Order statistics without host synchronisation: ranks, dense ids, per-scope quantiles and extremes.

Everything here works on flat ``[M]`` tensors with a validity mask and fixed output shapes, by
sorting instead of by data-dependent counts (``nonzero``, ``unique``, boolean indexing), so that
a GPU never waits for the host. Tie rule everywhere: equal keys keep their order in the input
(stable sort), i.e. the earlier token in row-major order over the (global) batch comes first.
"""

from __future__ import annotations

import torch


def ascending_rank(keys: torch.Tensor) -> torch.Tensor:
    """Rank of each entry of ``keys`` [M] in ascending order (0 = smallest), ties by position → ``[M]`` long."""
    order = torch.sort(keys, stable=True).indices
    rank = torch.empty_like(order)
    rank[order] = torch.arange(keys.numel(), device=keys.device)
    return rank


def descending_rank(keys: torch.Tensor) -> torch.Tensor:
    """Rank of each entry of ``keys`` [M] in descending order (0 = largest), ties by position → ``[M]`` long."""
    order = torch.sort(keys, stable=True, descending=True).indices
    rank = torch.empty_like(order)
    rank[order] = torch.arange(keys.numel(), device=keys.device)
    return rank


def dense_ids(ids: torch.Tensor) -> torch.Tensor:
    """Map arbitrary ids [M] to 0..K−1 (K distinct values, in sorted order) → ``[M]`` long.

    ``torch.unique(return_inverse=True)`` without its data-dependent output size: K ≤ M, so
    callers size per-id buffers with M slots.
    """
    if ids.numel() == 0:
        return torch.zeros_like(ids, dtype=torch.long)
    sorted_ids, order = torch.sort(ids, stable=True)
    new = torch.ones_like(sorted_ids, dtype=torch.long)
    new[1:] = (sorted_ids[1:] != sorted_ids[:-1]).long()
    out = torch.empty_like(order)
    out[order] = torch.cumsum(new, 0) - 1
    return out


def scoped_extreme(
    values: torch.Tensor, valid: torch.Tensor, scope: torch.Tensor | None, largest: bool
) -> torch.Tensor:
    """Max (or min) of ``values`` [M] over the valid entries of each scope, broadcast back → ``[M]``.

    ``scope`` None: one scope; else dense ids [M] in 0..M−1. A scope without a valid entry gets 0.
    """
    fill = -torch.inf if largest else torch.inf
    v = values.masked_fill(~valid, fill)
    if scope is None:
        out = v.amax() if largest else v.amin()
        out = torch.where(torch.isfinite(out), out, torch.zeros_like(out))
        return out.expand_as(values)
    init = torch.full((values.numel(),), fill, dtype=values.dtype, device=values.device)
    per_scope = init.scatter_reduce(0, scope, v, reduce="amax" if largest else "amin")
    per_scope = torch.where(torch.isfinite(per_scope), per_scope, torch.zeros_like(per_scope))
    return per_scope[scope]


def scoped_quantile(
    values: torch.Tensor, valid: torch.Tensor, q: float, scope: torch.Tensor | None = None
) -> torch.Tensor:
    """The ``q`` quantile (linear interpolation, as ``torch.quantile``) of the valid entries of
    ``values`` [M] per scope, broadcast back → ``[M]``. A scope without a valid entry gets 0.

    ``scope`` None: one scope; else dense ids [M] in 0..M−1. Sort-based: no host sync, and no
    16M-element limit.
    """
    m = values.numel()
    if m == 0:
        return values.clone()
    key = values.masked_fill(~valid, torch.inf)
    order = torch.sort(key, stable=True).indices  # by value, invalid last
    if scope is not None:
        order = order[torch.sort(scope[order], stable=True).indices]  # then by scope
        sid = scope
    else:
        sid = torch.zeros(m, dtype=torch.long, device=values.device)
    s_sorted = key[order]
    n_all = torch.zeros(m, dtype=torch.long, device=values.device).index_add_(0, sid, torch.ones_like(sid))
    n_ok = torch.zeros(m, dtype=torch.long, device=values.device).index_add_(0, sid, valid.long())
    start = torch.cumsum(n_all, 0) - n_all  # where each scope's run begins in the sorted order
    pos = q * (n_ok - 1).clamp(min=0).to(torch.float64)
    lo = torch.floor(pos).long()
    hi = torch.minimum(lo + 1, (n_ok - 1).clamp(min=0))
    v_lo = s_sorted[(start + lo).clamp(max=m - 1)]
    v_hi = s_sorted[(start + hi).clamp(max=m - 1)]
    frac = (pos - lo.to(torch.float64)).to(values.dtype)
    out = torch.where(hi > lo, v_lo + frac * (v_hi - v_lo), v_lo)
    out = torch.where(n_ok > 0, out, torch.zeros_like(out))
    return out[sid]


def count_floor(ratio: float, n: torch.Tensor) -> torch.Tensor:
    """``max(⌊ratio · n⌋, 1)`` as a 0-d long tensor (n a 0-d count tensor): how many tokens
    Clip-Cov / KL-Cov / Rand-Pos-Clip select, computed on the device."""
    return torch.floor(ratio * n.to(torch.float64)).long().clamp(min=1)
