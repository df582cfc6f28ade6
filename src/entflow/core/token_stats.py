"""Per-token statistics of a softmax policy (docs/design.md §3).

For logits ``x`` over a vocabulary of size V, temperature τ, ``z = x / τ``, ``π = softmax(z)``
and the sampled token ``k``::

    logp        = z_k − logsumexp(z)
    entropy     = logsumexp(z) − Σ_b π_b z_b
    sum_p2      = Σ_b π_b²
    sum_p2_logp = Σ_b π_b² log π_b

Only the statistics asked for (``stats=``) are computed; the others come back as ``None``.
All are accumulated in float32 (float64 input stays float64).

How (torch path, CPU and any device). Rows are processed ``chunk_size`` at a time, forward *and*
backward, into reused ``[chunk, V]`` buffers, so peak extra memory is O(chunk · V). Per chunk the
forward takes the row max ``m``, writes ``u = (x − m)/τ`` (temperature folded into that one
pass), takes **one** ``exp`` per logit, ``e = exp(u)``, and reads every statistic off four
fused reductions (``Σe``, ``Σe·u``, ``Σe²``, ``Σe²·u``, the products as batched dot products):
with ``Z = Σe``, ``log π = u − log Z``, ``H = log Z − Σe·u / Z``, ``Σπ² = Σe² / Z²`` and
``Σπ² log π = Σe²·u / Z² − log Z · Σπ²``. The backward is the closed form of
:func:`~entflow.core.stats_common.gradient_coefficients`, again one ``exp`` per logit, using the
per-row constants saved by the forward.

On CUDA the fused Triton kernel of :mod:`entflow.core.triton_token_stats` is used when Triton
is installed (``backend="auto"``); the torch path is the fallback.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import torch

from entflow.core.stats_common import (
    BACKENDS,
    LOG_FLOOR,
    STAT_NAMES,
    check_backend,
    check_positive_int,
    check_token_ids,
    compute_dtype,
    gradient_coefficients,
    parse_stats,
    use_triton,
)
from entflow.errors import NonFiniteError, ParameterError, ShapeError

__all__ = [
    "AUTO_CHUNK_ELEMENTS",
    "BACKENDS",
    "STAT_NAMES",
    "TokenStats",
    "auto_chunk_size",
    "entropy_from_logits",
    "token_stats",
]

# Automatic chunk size (``chunk_size=None``): rows per chunk so that one [chunk, V] float32
# buffer holds about this many elements (32 MiB on the CPU: 55 rows at V = 151,936). Measured on
# the 2-core CPU (docs/benchmarks.md, "token_stats chunk size"): in-cache chunks (~8 rows) are
# fastest on an idle machine, but every chunk is ~7 parallel regions, and on a loaded machine
# their barriers dominate; ~64 rows is within 1.3× of the best when idle and the best when loaded.
AUTO_CHUNK_ELEMENTS = {"cpu": 1 << 23, "other": 1 << 24}


class TokenStats(NamedTuple):
    """Per-token statistics, each ``[...]`` (the logits' shape without the vocabulary axis), or
    ``None`` when not requested."""

    logp: torch.Tensor | None
    entropy: torch.Tensor | None
    sum_p2: torch.Tensor | None
    sum_p2_logp: torch.Tensor | None


def auto_chunk_size(vocab: int, device: torch.device | str = "cpu") -> int:
    """Rows per chunk that ``chunk_size=None`` uses for a vocabulary of ``vocab`` entries.

    Keeps one ``[chunk, V]`` float32 buffer near ``AUTO_CHUNK_ELEMENTS`` (32 MiB on the CPU,
    64 MiB elsewhere), so the torch path's extra memory is at most three such buffers
    (96 MiB / 192 MiB) whatever the number of rows.
    """
    kind = "cpu" if torch.device(device).type == "cpu" else "other"
    return max(1, AUTO_CHUNK_ELEMENTS[kind] // max(int(vocab), 1))


# --------------------------------------------------------------------------------------------
# Rows of the logits without copying them
# --------------------------------------------------------------------------------------------


def _as_3d(x: torch.Tensor) -> torch.Tensor:
    """``[..., V]`` → a ``[B, T, V]`` *view* (unit stride over V) whose rows, in order, are the
    rows of ``x``. A slice such as ``logits[:, :-1]`` stays a view; only layouts no 3-D view can
    describe (rare) are copied."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    v = x.shape[-1]
    try:
        return x.view(1, -1, v)
    except RuntimeError:
        pass
    if x.dim() == 3:
        return x
    try:
        return x.view(-1, x.shape[-2], v)
    except RuntimeError:
        return x.contiguous().view(1, -1, v)


def _rows(x3: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Rows ``start:stop`` of the flattened ``[B·T, V]`` rows of ``x3`` ``[B, T, V]``: a view when
    they lie in one ``b``, else a copy of just those rows (at most one chunk)."""
    t = x3.shape[1]
    b0, t0 = divmod(start, t)
    b1, t1 = divmod(stop - 1, t)
    if b0 == b1:
        return x3[b0, t0 : t1 + 1]
    parts = [x3[b0, t0:], x3[b0 + 1 : b1].reshape(-1, x3.shape[2]), x3[b1, : t1 + 1]]
    return torch.cat(parts)


# --------------------------------------------------------------------------------------------
# Torch path
# --------------------------------------------------------------------------------------------


def _shifted(rows: torch.Tensor, out: torch.Tensor, inv_temp: float, shift: torch.Tensor, clamp: bool) -> None:
    """One pass: ``out = rows · inv_temp − shift`` ([R, V] float32/64 from any input dtype).

    ``shift`` is ``[R, 1]``; −inf logits are clamped to ``LOG_FLOOR`` when ``clamp`` is set."""
    torch.add(shift.neg(), rows, alpha=inv_temp, out=out)
    if clamp:
        out.clamp_(min=LOG_FLOOR)


@torch.no_grad()
def _forward_chunk(rows, ids, inv_temp, want, clamp, u, e):
    """Statistics of one chunk ``rows`` [R, V] at tokens ``ids`` [R], in two reused buffers.

    Passes over the chunk: row max, ``u = z − max z`` (temperature folded in), ``e = exp(u)``
    (the one exp per logit), then in-place products and sums: ``Σe``, ``Σe·u``, ``Σe²·u``, ``Σe²``.
    Returns ``(logp, entropy, sum_p2, sum_p2_logp)`` (``None`` where not wanted) and the per-row
    log normaliser ``lse = logsumexp(z)`` [R] (what the backward needs to rebuild ``log π``).
    """
    mx = torch.amax(rows, dim=-1, keepdim=True).to(u.dtype) * inv_temp  # max z, [R, 1]
    _shifted(rows, u, inv_temp, mx, clamp)
    torch.exp(u, out=e)
    z = e.sum(-1)
    log_z = torch.log(z)
    logp = h = s2 = s2l = None
    if want[0]:
        logp = u.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - log_z
    if want[1] or want[3]:
        eu = u.mul_(e)  # e·u, in place of u
        if want[1]:
            h = log_z - eu.sum(-1) / z
        if want[3]:
            s2l = eu.mul_(e).sum(-1)  # Σ e²·u (divided below)
    if want[2] or want[3]:
        z2 = z * z
        s2 = e.mul_(e).sum(-1) / z2  # Σ e², in place of e
        if want[3]:
            s2l = s2l / z2 - log_z * s2
    return (logp, h, s2 if want[2] or want[3] else None, s2l), mx.view(-1) + log_z


@torch.no_grad()
def _backward_chunk(rows, ids, lse, saved, grads, inv_temp, clamp, lp, pi, tmp):
    """Gradient w.r.t. the raw logits ``rows`` [R, V] of ``Σ g·stats`` (π = softmax(rows·inv_temp)).

    Closed form (:func:`~entflow.core.stats_common.gradient_coefficients`, docs/design.md §3):
    π_b · (c0 + c1 log π_b + π_b (c2 + c3 log π_b)) + g_logp δ_bk, multiplied by inv_temp (∂z/∂x).
    ``log π = z − lse`` is one pass (``lse`` saved by the forward), ``π`` one exp.
    Returns the ``[R, V]`` gradient, written into ``pi``.
    """
    g_logp = grads[0]
    c0, c1, c2, c3 = gradient_coefficients(grads, saved)

    def col(c: torch.Tensor) -> torch.Tensor:  # a per-row coefficient times inv_temp, as [R, 1]
        return (c * inv_temp).unsqueeze(-1)

    _shifted(rows, lp, inv_temp, lse.unsqueeze(-1), clamp)  # log π
    torch.exp(lp, out=pi)  # π: the one exp per logit
    if c2 is not None or c3 is not None:
        if c3 is not None:  # tmp = π (c2 + c3 log π) + c1 log π + c0
            torch.mul(lp, col(c3), out=tmp)
            if c2 is not None:
                tmp.add_(col(c2))
        else:
            tmp.copy_(col(c2).expand_as(tmp))
        tmp.mul_(pi)
        if c1 is not None:
            tmp.addcmul_(lp, col(c1))
        pi.mul_(tmp.add_(col(c0)))
    elif c1 is not None:
        pi.mul_(torch.addcmul(col(c0), lp, col(c1), out=tmp))
    else:
        pi.mul_(col(c0))
    if g_logp is not None:
        pi.scatter_add_(-1, ids.unsqueeze(-1), col(g_logp))
    return pi


class _TokenStatsTorch(torch.autograd.Function):
    """Chunked forward into reused buffers; closed-form chunked backward (memory O(chunk · V))."""

    @staticmethod
    def forward(ctx, x3, ids, inv_temp, chunk, want, clamp):  # x3 [B, T, V], ids [B·T]
        cdt = compute_dtype(x3.dtype)
        n, v = ids.shape[0], x3.shape[-1]
        kw = {"dtype": cdt, "device": x3.device}
        have = (want[0], want[1], want[2] or want[3], want[3])  # Σπ² log π's gradient needs Σπ²
        outs = [torch.empty(n, **kw) if w else None for w in have]
        lse = torch.empty(n, **kw)
        k = max(min(chunk, n), 1)
        u, e = torch.empty(k, v, **kw), torch.empty(k, v, **kw)
        for s in range(0, n, k):
            stop = min(s + k, n)
            vals, lse[s:stop] = _forward_chunk(
                _rows(x3, s, stop), ids[s:stop], inv_temp, want, clamp, u[: stop - s], e[: stop - s]
            )
            for o, val in zip(outs, vals, strict=True):
                if o is not None:
                    o[s:stop] = val
        del u, e
        saved = [o if o is not None else lse.new_empty(0) for o in outs[1:]]
        ctx.save_for_backward(x3, ids, lse, *saved)
        ctx.inv_temp, ctx.chunk, ctx.want, ctx.clamp = inv_temp, chunk, want, clamp
        return tuple(o for o, w in zip(outs, want, strict=True) if w)

    @staticmethod
    def backward(ctx, *grad_outs):
        x3, ids, lse, h, s2, s2l = ctx.saved_tensors
        it = iter(grad_outs)
        grads = [next(it) if w else None for w in ctx.want]
        n, v = ids.shape[0], x3.shape[-1]
        grad = torch.empty(x3.shape, dtype=x3.dtype, device=x3.device)  # contiguous
        if all(g is None for g in grads) or n == 0:
            grad.zero_()
            return grad, None, None, None, None, None
        cdt = compute_dtype(x3.dtype)
        grads = [None if g is None else g.to(cdt) for g in grads]
        flat = grad.view(-1, v)
        k = max(min(ctx.chunk, n), 1)
        kw = {"dtype": cdt, "device": x3.device}
        direct = cdt == x3.dtype  # write π and the gradient straight into the result
        lp, tmp = torch.empty(k, v, **kw), torch.empty(k, v, **kw)
        pi = None if direct else torch.empty(k, v, **kw)
        for s in range(0, n, k):
            stop, r = min(s + k, n), min(s + k, n) - s
            g = tuple(None if gg is None else gg[s:stop] for gg in grads)
            sv = tuple(t[s:stop] if t.numel() else None for t in (h, s2, s2l))
            dst = flat[s:stop] if direct else pi[:r]
            _backward_chunk(
                _rows(x3, s, stop), ids[s:stop], lse[s:stop], sv, g, ctx.inv_temp, ctx.clamp, lp[:r], dst, tmp[:r]
            )
            if not direct:
                flat[s:stop].copy_(dst)
        return grad, None, None, None, None, None


# --------------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------------


def _check_logits(x: torch.Tensor, ids: torch.Tensor | None) -> bool:
    """docs/design.md §13 for the logits: NaN and +inf are errors; −inf is allowed where each row keeps a
    finite logit and (when ``ids`` is given) the sampled token's logit is finite. Returns whether
    a −inf was seen."""
    if x.numel() == 0:
        return False
    lo, hi = torch.aminmax(x.detach())
    lo_f, hi_f = float(lo), float(hi)  # one host sync for both
    if hi_f != hi_f or hi_f == float("inf"):
        xd = x.detach()
        raise NonFiniteError("logits", int(torch.isnan(xd).sum()), int(torch.isposinf(xd).sum()))
    if lo_f != float("-inf"):
        return False
    v = x.shape[-1]
    dead = torch.amax(x.detach(), dim=-1) == float("-inf")
    if bool(dead.any()):
        raise NonFiniteError("logits", 0, int(dead.sum()) * v)  # rows without a finite logit: softmax undefined
    if ids is None:
        return True
    picked = x.detach().gather(-1, ids.unsqueeze(-1))
    if bool((picked == float("-inf")).any()):
        n = int((picked == float("-inf")).sum())
        raise ShapeError("token_ids", "tokens whose logit is finite", f"{n} sampled token(s) with logit -inf")
    return True


def token_stats(
    logits: torch.Tensor,
    token_ids: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    *,
    stats: Iterable[str] = STAT_NAMES,
    row_mask: torch.Tensor | None = None,
    validate: bool = True,
    backend: str = "auto",
) -> TokenStats:
    """Log-prob of the sampled token and full-vocabulary statistics.

    Args:
        logits: ``[..., V]`` raw logits (float32/64, bf16, fp16; half precision is computed in
            float32). May be a non-contiguous view such as ``model(...).logits[:, :-1]``: it is
            read in place, not copied. ``-inf`` entries (masked vocabulary) are allowed as long as
            every row keeps a finite logit and the sampled token's logit is finite.
        token_ids: ``[...]`` sampled token ids (same leading shape as ``logits``).
        temperature: sampling temperature; logits are divided by it before any softmax.
        chunk_size: rows (tokens) processed at a time. ``None`` (default) picks
            :func:`auto_chunk_size` from V, so extra memory stays bounded (≤ 96 MiB on the CPU)
            whatever the number of rows; any value ≥ the number of rows processes everything at
            once.
        stats: which of ``STAT_NAMES`` to compute (default all four). The others are ``None``
            and cost nothing. See :func:`entflow.methods.needs.required_token_stats`.
        row_mask: optional ``[...]`` bool/0-1 mask; rows where it is 0 get every statistic 0 and
            zero gradient (the Triton kernel skips them; the torch path computes and zeroes them).
        validate: check ids and non-finite logits (docs/design.md §13; this reads the logits once more
            and syncs with the host). ``False`` skips the checks: use it on a GPU's hot path.
        backend: ``"auto"`` (Triton kernel for CUDA tensors when Triton is installed, else
            torch), ``"torch"`` or ``"triton"``.

    Returns:
        :class:`TokenStats` of ``[...]`` float32 tensors (float64 for float64 logits), ``None``
        for statistics not requested; differentiable w.r.t. ``logits``.
    """
    want = parse_stats(stats, "token_stats")
    if logits.dim() < 1 or tuple(token_ids.shape) != tuple(logits.shape[:-1]):
        raise ShapeError("token_ids", f"{tuple(logits.shape[:-1])} (logits.shape[:-1])", tuple(token_ids.shape))
    if not temperature > 0:
        raise ParameterError("token_stats", "temperature", f"must be > 0, got {temperature}")
    check_positive_int("token_stats", "chunk_size", chunk_size)
    check_backend("token_stats", backend)
    if row_mask is not None and tuple(row_mask.shape) != tuple(token_ids.shape):
        raise ShapeError("row_mask", f"{tuple(token_ids.shape)} (token_ids.shape)", tuple(row_mask.shape))
    if not torch.is_floating_point(logits):
        raise ParameterError("token_stats", "logits", f"must be a floating-point tensor, got {logits.dtype}")
    lead, v = token_ids.shape, logits.shape[-1]
    ids = token_ids.reshape(-1).long()
    clamp = True  # without validation a −inf may be present: clamp (one cheap pass per chunk)
    if validate:
        check_token_ids(ids, v, "logits", tuple(logits.shape))
        clamp = _check_logits(logits, token_ids.long() if want[0] else None)
    x3 = _as_3d(logits)
    fits = logits.dtype in (torch.float32, torch.bfloat16, torch.float16)
    why_not = f"'triton' needs float32/bf16/fp16 logits, got {logits.dtype}"
    if use_triton(backend, fits, logits.is_cuda, "token_stats", why_not):
        from entflow.core import triton_token_stats

        mask = None if row_mask is None else row_mask.reshape(-1)
        outs = triton_token_stats.token_stats_triton(x3, ids, 1.0 / temperature, want, mask)
    else:
        chunk = auto_chunk_size(v, logits.device) if chunk_size is None else chunk_size
        outs = _TokenStatsTorch.apply(x3, ids, 1.0 / temperature, chunk, want, clamp)
        if row_mask is not None:
            keep = row_mask.reshape(-1).bool()
            outs = tuple(torch.where(keep, o, torch.zeros((), dtype=o.dtype, device=o.device)) for o in outs)
    it = iter(outs)
    return TokenStats(*(next(it).reshape(lead) if w else None for w in want))


def entropy_from_logits(logits: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
    """Full-vocabulary entropy ``logsumexp(z) − Σ softmax(z)·z`` of ``[..., V]`` logits → ``[...]``.

    Computed in float32 (float64 stays float64); ``chunk_size`` bounds memory as in
    :func:`token_stats`. Divide by the temperature before calling if sampling used one.
    """
    ids = torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)
    return token_stats(logits, ids, chunk_size=chunk_size, stats=("entropy",)).entropy
