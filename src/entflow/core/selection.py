"""Order statistics without host synchronisation: ranks, dense ids, per-scope quantiles and extremes.

Everything here works on flat ``[M]`` tensors with a validity mask and fixed output shapes, by
sorting instead of by data-dependent counts (``nonzero``, ``unique``, boolean indexing), so that
a GPU never waits for the host. Tie rule everywhere: equal keys keep their order in the input
(stable sort), i.e. the earlier token in row-major order over the (global) batch comes first.
"""

from __future__ import annotations

import math

import torch


def _at(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    """``x[i]`` for a 0-d index tensor without reading it on the host (``x[i]`` would call
    ``i.item()`` inside ATen, a hidden sync) → 0-d."""
    return x.gather(0, i.reshape(1)).reshape(())


def smallest_mask(keys: torch.Tensor, n: torch.Tensor, n_max: int) -> torch.Tensor:
    """Boolean ``[M]``: the ``n`` smallest entries of ``keys`` [M], ties by position (the earlier
    entry first) — exactly the entries of stable ascending rank < n.

    ``n`` is a 0-d long tensor in ``[1, n_max]`` (a data-dependent count, never read on the host);
    ``n_max`` a host-known upper bound (from shapes), so the work is a ``topk`` of ``n_max``
    entries plus O(M), not a full sort.
    """
    m = keys.numel()
    if m == 0:
        return torch.zeros(0, dtype=torch.bool, device=keys.device)
    k = max(1, min(int(n_max), m))
    vals = torch.topk(keys, k, largest=False, sorted=True).values
    thr = _at(vals, (n - 1).clamp(0, k - 1))  # the n-th smallest value
    below = keys < thr
    tie = keys == thr
    room = n - below.sum()  # how many of the ties still fit
    return below | (tie & (torch.cumsum(tie.long(), 0) <= room))


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
    if scope is None:
        return _quantile_all(values, valid, q).expand(m)
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


def _quantile_all(values: torch.Tensor, valid: torch.Tensor, q: float) -> torch.Tensor:
    """``scoped_quantile`` with one scope, 0-d: a ``topk`` from the nearer end (O(M + k log k),
    k ≈ min(q, 1 − q)·M) instead of a full sort; the bound on k comes from the shape alone."""
    m = values.numel()
    n = valid.sum()
    last = (n - 1).clamp(min=0)
    pos = q * last.to(torch.float64)
    lo = torch.floor(pos).long()
    hi = torch.minimum(lo + 1, last)
    if q >= 0.5:  # count from the top: ascending index i is descending index n − 1 − i
        k = min(m, math.floor((1 - q) * (m - 1)) + 3)
        top = torch.topk(values.masked_fill(~valid, -torch.inf), k, largest=True, sorted=True).values
        v_lo, v_hi = _at(top, (last - lo).clamp(0, k - 1)), _at(top, (last - hi).clamp(0, k - 1))
    else:
        k = min(m, math.floor(q * (m - 1)) + 3)
        bottom = torch.topk(values.masked_fill(~valid, torch.inf), k, largest=False, sorted=True).values
        v_lo, v_hi = _at(bottom, lo.clamp(0, k - 1)), _at(bottom, hi.clamp(0, k - 1))
    frac = (pos - lo.to(torch.float64)).to(values.dtype)
    out = torch.where(hi > lo, v_lo + frac * (v_hi - v_lo), v_lo)
    return torch.where(n > 0, out, torch.zeros_like(out))


def count_floor(ratio: float, n: torch.Tensor) -> torch.Tensor:
    """``max(⌊ratio · n⌋, 1)`` as a 0-d long tensor (n a 0-d count tensor): how many tokens
    Clip-Cov / KL-Cov / Rand-Pos-Clip select, computed on the device."""
    return torch.floor(ratio * n.to(torch.float64)).long().clamp(min=1)
