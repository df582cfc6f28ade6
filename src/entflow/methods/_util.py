"""Small tensor helpers shared by the methods (not part of the public API)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from entflow.core.batch import TokenBatch
from entflow.core.distributed import Reducer
from entflow.core.selection import count_floor, dense_ids, smallest_mask


def global_count(ctxs: list[Any], reducer: Reducer, ratio: float) -> tuple[torch.Tensor, int]:
    """``n = max(⌊ratio · N_valid⌋, 1)`` with N_valid over the whole batch (0-d long tensor, on
    the device) and a host-known bound ``n_max`` on it (from the shapes, N_valid ≤ N·T)."""
    n = count_floor(ratio, reducer.sum([c.valid.sum() for c in ctxs]))
    return n, max(math.floor(ratio * reducer.n_tokens), 1)


def select_smallest(
    keys: list[torch.Tensor], candidates: list[torch.Tensor], n: tuple[torch.Tensor, int], reducer: Reducer
) -> list[torch.Tensor]:
    """Boolean ``[N_i, T_i]``: the ``min(n, #candidates)`` candidates with the smallest keys over
    the whole batch (ties: earlier token first). With i.i.d. U(0,1) keys, a uniformly random
    subset of size n drawn without replacement. ``n``: ``(count, bound)`` from :func:`global_count`."""
    flat_k = reducer.cat_tokens([k.masked_fill(~c, 2.0) for k, c in zip(keys, candidates, strict=True)])
    flat_c = reducer.cat_tokens(candidates)
    sel = smallest_mask(flat_k, *n) & flat_c
    return reducer.split_tokens(sel)


def response_mean(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` [N, T] over each response's valid tokens → ``[N]`` (0 for an empty response)."""
    m = valid.to(x.dtype)
    return (x.masked_fill(~valid, 0) * m).sum(-1) / m.sum(-1).clamp(min=1)


def valid_mean(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the valid tokens, a 0-d detached tensor (0 if there are none)."""
    return x.detach().masked_fill(~valid, 0).sum() / valid.sum().clamp(min=1)


def global_mean_entropy(ctxs: list[Any], reducer: Reducer, reader: str) -> torch.Tensor:
    """The batch mean old entropy over the valid tokens of every context (micro-batch) on every rank,
    a float64 0-d tensor (0 if there are none); ``reader`` names the method that reads it
    (``TokenBatch.entropy_for_reading``)."""
    parts = []
    for c in ctxs:
        H = c.batch.entropy_for_reading(reader).to(torch.float64).masked_fill(~c.valid, 0)
        parts.append(torch.stack([H.sum(), c.valid.sum().to(torch.float64)]))
    h = reducer.sum(parts)
    return h[0] / h[1].clamp(min=1)


def group_inverse(group_index: torch.Tensor) -> torch.Tensor:
    """Each response's group as a dense id in 0..K−1 (K ≤ N: size per-group buffers with N slots)."""
    return dense_ids(group_index)


class ReportsShaping:
    """Mixin for advantage shapers: ``shape_advantages`` runs in ``compute_advantages``, which
    returns only a tensor, so a shaper stores what it did with :meth:`_report` and the next
    ``policy_loss`` copies it into its metrics (through ``loss_terms``, adding no term)."""

    def _report(self, **metrics: torch.Tensor | float) -> None:
        self._shaping_metrics = {  # type: ignore[attr-defined]
            f"{self.name}/{k}": v.detach() if isinstance(v, torch.Tensor) else float(v) for k, v in metrics.items()
        }

    def loss_terms(self, ctx: Any, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        ctx.metrics.update(getattr(self, "_shaping_metrics", {}))
        return {}


def require_all(batch: TokenBatch, fields: tuple[str, ...], needed_by: str) -> None:
    """Raise :class:`MissingInputError` for the first of ``fields`` the batch lacks."""
    for f in fields:
        batch.require(f, needed_by)
