"""Small tensor helpers shared by the methods (not part of the public API)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from entflow.core.batch import TokenBatch


def selection_count(ratio: float, n_valid: int) -> int:
    """``max(⌊ratio · N_valid⌋, 1)``: how many tokens Clip-Cov / KL-Cov / Rand-Pos-Clip select."""
    return max(math.floor(ratio * n_valid), 1)


def pick_random(candidates: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """Boolean ``[N, T]``: ``min(n, #candidates)`` of the ``True`` entries of ``candidates``,
    drawn uniformly without replacement with ``generator`` (CPU, so the draw is device-independent).
    """
    flat = candidates.reshape(-1)
    idx = flat.nonzero().squeeze(1)
    perm = torch.randperm(idx.numel(), generator=generator)[:n].to(idx.device)
    out = torch.zeros_like(flat)
    out[idx[perm]] = True
    return out.view_as(candidates)


def uniform_like(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """U(0, 1) draws of ``x``'s shape from a CPU generator, moved to ``x``'s device (float64)."""
    return torch.rand(x.shape, generator=generator, dtype=torch.float64).to(x.device)


def response_mean(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` [N, T] over each response's valid tokens → ``[N]`` (0 for an empty response)."""
    m = valid.to(x.dtype)
    return (x.masked_fill(~valid, 0) * m).sum(-1) / m.sum(-1).clamp(min=1)


def valid_mean(x: torch.Tensor, valid: torch.Tensor) -> float:
    """Mean of ``x`` over the valid tokens, as a float (0 if there are none)."""
    n = int(valid.sum())
    return float(x.detach().masked_fill(~valid, 0).sum()) / max(n, 1)


def group_inverse(group_index: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``(inv [N], n_groups)``: each response's group as 0..n_groups−1."""
    _, inv = torch.unique(group_index, return_inverse=True)
    return inv, int(inv.max()) + 1 if inv.numel() else 0


def quantile(values: torch.Tensor, q: float) -> torch.Tensor:
    """The ``q`` quantile of a 1-D tensor with linear interpolation (as ``torch.quantile``,
    without its 16M-element limit), by two O(n) selections instead of a sort. 0-d tensor."""
    n = values.numel()
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    v_lo = values.kthvalue(lo + 1).values
    if pos == lo:
        return v_lo
    v_hi = values.kthvalue(hi + 1).values
    return v_lo + (pos - lo) * (v_hi - v_lo)


def masked_extreme(x: torch.Tensor, valid: torch.Tensor, ids: torch.Tensor | None, largest: bool) -> torch.Tensor:
    """Max (or min) of ``x`` [N, T] over valid tokens per scope, broadcast back to ``[N, T]``.

    ``ids`` None: one scope (the batch); else ``[N]`` scope id of each response (0..K−1).
    A scope with no valid token gets 0.
    """
    fill = -math.inf if largest else math.inf
    per_row = x.masked_fill(~valid, fill)
    per_row = per_row.amax(-1) if largest else per_row.amin(-1)  # [N]
    if ids is None:
        v = per_row.amax() if largest else per_row.amin()
        v = torch.where(torch.isfinite(v), v, torch.zeros_like(v))
        return v.expand_as(x)
    k = int(ids.max()) + 1
    init = torch.full((k,), fill, dtype=x.dtype, device=x.device)
    per_scope = init.scatter_reduce(0, ids, per_row, reduce="amax" if largest else "amin")
    per_scope = torch.where(torch.isfinite(per_scope), per_scope, torch.zeros_like(per_scope))
    return per_scope[ids].unsqueeze(-1).expand_as(x)


class ReportsShaping:
    """Mixin for advantage shapers: ``shape_advantages`` runs in ``compute_advantages``, which
    returns only a tensor, so a shaper stores what it did with :meth:`_report` and the next
    ``policy_loss`` copies it into its metrics (through ``loss_terms``, adding no term)."""

    def _report(self, **metrics: float) -> None:
        self._shaping_metrics = {f"{self.name}/{k}": float(v) for k, v in metrics.items()}  # type: ignore[attr-defined]

    def loss_terms(self, ctx: Any, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        ctx.metrics.update(getattr(self, "_shaping_metrics", {}))
        return {}


def require_all(batch: TokenBatch, fields: tuple[str, ...], needed_by: str) -> None:
    """Raise :class:`MissingInputError` for the first of ``fields`` the batch lacks."""
    for f in fields:
        batch.require(f, needed_by)
