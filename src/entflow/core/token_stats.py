"""Per-token statistics of a softmax policy (SPEC §3).

For logits ``z`` (already divided by the temperature) over a vocabulary of size V, and the
sampled token ``k``::

    logp        = z_k − logsumexp(z)
    entropy     = logsumexp(z) − Σ_b π_b z_b
    sum_p2      = Σ_b π_b²
    sum_p2_logp = Σ_b π_b² log π_b

All four are accumulated in float32 (float64 input stays float64). With ``chunk_size`` the
vocabulary-wide work is done ``chunk_size`` token rows at a time, forward *and* backward (the
backward recomputes the softmax of a chunk instead of storing it), so peak extra memory is
O(chunk_size · V) rather than O(N · T · V).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from entflow.core.checks import check_finite
from entflow.errors import ParameterError, ShapeError


class TokenStats(NamedTuple):
    """Per-token statistics, each ``[...]`` (the logits' shape without the vocabulary axis)."""

    logp: torch.Tensor
    entropy: torch.Tensor
    sum_p2: torch.Tensor
    sum_p2_logp: torch.Tensor


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _row_stats(z: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Stats of rows ``z`` [R, V] (compute dtype) at tokens ``ids`` [R]. Differentiable."""
    logpi = torch.log_softmax(z, dim=-1)
    pi = logpi.exp()
    logp = logpi.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    entropy = -(pi * logpi).sum(-1)
    p2 = pi * pi
    return logp, entropy, p2.sum(-1), (p2 * logpi).sum(-1)


@torch.no_grad()
def _row_stats_lean(rows: torch.Tensor, ids: torch.Tensor, inv_temp: float) -> tuple[torch.Tensor, ...]:
    """:func:`_row_stats` of ``rows`` [R, V] · ``inv_temp`` (same elementwise ops, same values),
    without autograd and with at most three ``[R, V]`` buffers alive. Used by the chunked forward."""
    z = rows.to(_compute_dtype(rows.dtype)) * inv_temp
    logpi = torch.log_softmax(z, dim=-1)
    del z
    pi = logpi.exp()
    logp = logpi.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    tmp = torch.mul(pi, logpi)
    entropy = -tmp.sum(-1)
    torch.mul(pi, pi, out=tmp)
    del pi
    s2 = tmp.sum(-1)
    s2l = tmp.mul_(logpi).sum(-1)
    return logp, entropy, s2, s2l


@torch.no_grad()
def _row_grads(rows: torch.Tensor, ids: torch.Tensor, g: tuple[torch.Tensor, ...], inv_temp: float) -> torch.Tensor:
    """Gradient w.r.t. ``z = rows · inv_temp`` [R, V] of Σ g·stats, written out (π = softmax z, H = entropy).

    ∂logp/∂z_b = δ_bk − π_b ;  ∂H/∂z_b = −π_b (log π_b + H) ;
    ∂S2/∂z_b = 2π_b (π_b − S2) ;  ∂S2L/∂z_b = π_b (2π_b log π_b + π_b − 2·S2L − S2).

    Collected per row as π_b · (c0 + c1 log π_b + π_b (c2 + c3 log π_b)) + g_logp δ_bk and
    evaluated in place, so at most three ``[R, V]`` buffers are alive.
    """
    g_logp, g_h, g_s2, g_s2l = (x.unsqueeze(-1) for x in g)
    z = rows.to(_compute_dtype(rows.dtype)) * inv_temp
    logpi = torch.log_softmax(z, dim=-1)
    del z
    pi = logpi.exp()
    buf = torch.mul(pi, logpi)
    h = -buf.sum(-1, keepdim=True)
    s2l = buf.mul_(pi).sum(-1, keepdim=True)
    s2 = torch.mul(pi, pi, out=buf).sum(-1, keepdim=True)
    c0 = -g_logp - g_h * h - 2 * g_s2 * s2 - g_s2l * (2 * s2l + s2)
    c1 = -g_h
    c2 = 2 * g_s2 + g_s2l
    c3 = 2 * g_s2l
    grad = torch.mul(logpi, c3, out=buf).add_(c2).mul_(pi)  # π (c2 + c3 log π)
    grad.addcmul_(logpi, c1.expand_as(logpi)).add_(c0).mul_(pi)
    grad.scatter_add_(-1, ids.unsqueeze(-1), g_logp)
    return grad


class _ChunkedTokenStats(torch.autograd.Function):
    """Chunked forward; backward recomputes each chunk's softmax (memory O(chunk · V))."""

    @staticmethod
    def forward(ctx, logits, ids, inv_temp, chunk):  # logits [R, V], ids [R]
        cdt = _compute_dtype(logits.dtype)
        out = [torch.empty(logits.shape[0], dtype=cdt, device=logits.device) for _ in range(4)]
        for s in range(0, logits.shape[0], chunk):
            for o, v in zip(out, _row_stats_lean(logits[s : s + chunk], ids[s : s + chunk], inv_temp), strict=True):
                o[s : s + chunk] = v
        ctx.save_for_backward(logits, ids)
        ctx.inv_temp, ctx.chunk = inv_temp, chunk
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        logits, ids = ctx.saved_tensors
        cdt = _compute_dtype(logits.dtype)
        grads = tuple(torch.zeros(logits.shape[0], dtype=cdt, device=logits.device) if g is None else g for g in grads)
        grad_logits = torch.empty_like(logits)
        for s in range(0, logits.shape[0], ctx.chunk):
            rows, row_ids = logits[s : s + ctx.chunk], ids[s : s + ctx.chunk]
            gz = _row_grads(rows, row_ids, tuple(g[s : s + ctx.chunk] for g in grads), ctx.inv_temp)
            grad_logits[s : s + ctx.chunk].copy_(gz.mul_(ctx.inv_temp))
        return grad_logits, None, None, None


def token_stats(
    logits: torch.Tensor,
    token_ids: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> TokenStats:
    """Log-prob of the sampled token and full-vocabulary statistics.

    Args:
        logits: ``[..., V]`` raw logits (any float dtype; bf16/fp16 are upcast to float32).
        token_ids: ``[...]`` sampled token ids (same leading shape as ``logits``).
        temperature: sampling temperature; logits are divided by it before any softmax.
        chunk_size: process at most this many token rows at a time (``None`` = all at once).

    Returns:
        :class:`TokenStats` of four ``[...]`` float32 tensors (float64 for float64 logits),
        differentiable w.r.t. ``logits``.
    """
    if logits.dim() < 1 or tuple(token_ids.shape) != tuple(logits.shape[:-1]):
        raise ShapeError("token_ids", f"{tuple(logits.shape[:-1])} (logits.shape[:-1])", tuple(token_ids.shape))
    if not temperature > 0:
        raise ParameterError("token_stats", "temperature", f"must be > 0, got {temperature}")
    if chunk_size is not None and chunk_size < 1:
        raise ParameterError("token_stats", "chunk_size", f"must be a positive int or None, got {chunk_size}")
    check_finite("logits", logits)
    lead = token_ids.shape
    z = logits.reshape(-1, logits.shape[-1])
    ids = token_ids.reshape(-1).long()
    if z.shape[0] and (int(ids.min()) < 0 or int(ids.max()) >= z.shape[-1]):
        raise ShapeError("token_ids", f"values in [0, {z.shape[-1]})", f"range [{int(ids.min())}, {int(ids.max())}]")
    if chunk_size is None or chunk_size >= z.shape[0]:
        stats = _row_stats(z.to(_compute_dtype(z.dtype)) / temperature, ids)
    else:
        stats = _ChunkedTokenStats.apply(z, ids, 1.0 / temperature, chunk_size)
    return TokenStats(*(s.reshape(lead) for s in stats))


def entropy_from_logits(logits: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
    """Full-vocabulary entropy ``logsumexp(z) − Σ softmax(z)·z`` of ``[..., V]`` logits → ``[...]``.

    Computed in float32 (float64 stays float64); ``chunk_size`` bounds memory as in
    :func:`token_stats`. Divide by the temperature before calling if sampling used one.
    """
    ids = torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)
    return token_stats(logits, ids, chunk_size=chunk_size).entropy
