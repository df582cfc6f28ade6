"""Triton kernels for :mod:`entflow.core.triton_token_stats` (imports Triton; load it lazily).

Forward: one program per token row streams the row's V logits once, in ``[1, BLOCK]`` pieces, through
the online fold that every entflow kernel shares (:func:`entflow.core._triton_fold.online_fold`:
running maximum and the sums Z, A, B, C in float32). Then log Z' = m + log Z (saved for the
backward), entropy = log Z − A/Z, Σπ² = B/Z², Σπ² log π = C/Z² − log Z · Σπ².

Backward: one program per (row, ``BLOCK`` of columns), as many programs as the GPU can keep busy,
each reading its logits once: log π = z − lse, π = exp(log π) and the closed-form gradient
π (c0 + c1 log π + π (c2 + c3 log π)) + g_logp δ_bk (see ``stats_common.gradient_coefficients``).

A −inf logit contributes e = 0 and is kept out of every product (no 0·(−inf)). Masked rows
(``row_mask`` = 0) read nothing: their loop is empty in the forward and their loads are masked
in the backward, which only writes the zero gradient.

Jitted when this module is imported, which :mod:`entflow.core.triton_token_stats` does on first use,
so that ``TRITON_INTERPRET=1`` set by then (the CPU tests, in a fresh process) takes effect.
"""

from __future__ import annotations

import triton
import triton.language as tl

from entflow.core._triton_fold import online_fold

NEG_INF = tl.constexpr(float("-inf"))


@triton.jit
def _row(X, stride_b, stride_t, T):
    """This program's token row (``program_id(0)`` = b·T + t) and the address of its logits
    ``X[b, t, :]`` (int64 offsets: a batch can exceed 2³¹ elements)."""
    row = tl.program_id(0)
    b = row // T
    t = row - b * T
    return row, X + b.to(tl.int64) * stride_b + t.to(tl.int64) * stride_t


def _fwd(
    X,
    stride_b,
    stride_t,
    T,
    V,
    IDS,
    MASK,
    inv_temp,
    LOGP,
    ENT,
    S2,
    S2L,
    LSE,
    HAS_MASK: tl.constexpr,
    WANT_H: tl.constexpr,
    WANT_P2: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row, base = _row(X, stride_b, stride_t, T)
    keep = True
    v_end = V
    if HAS_MASK:
        keep = tl.load(MASK + row) != 0
        v_end = tl.where(keep, V, 0)
    m = tl.full([1], NEG_INF, tl.float32)
    z_sum = tl.zeros([1], tl.float32)
    a_sum = tl.zeros([1], tl.float32)
    b_sum = tl.zeros([1], tl.float32)
    c_sum = tl.zeros([1], tl.float32)
    cols = tl.arange(0, BLOCK)
    for start in range(0, v_end, BLOCK):
        offs = start + cols
        x = tl.load(base + offs, mask=offs < V, other=NEG_INF).to(tl.float32) * inv_temp
        m, z_sum, a_sum, b_sum, c_sum = online_fold(x[None, :], m, z_sum, a_sum, b_sum, c_sum, WANT_H, WANT_P2, WANT_P2)
    m = tl.sum(m, axis=0)  # [1] -> scalar
    z_sum = tl.sum(z_sum, axis=0)
    a_sum = tl.sum(a_sum, axis=0)
    b_sum = tl.sum(b_sum, axis=0)
    c_sum = tl.sum(c_sum, axis=0)
    z_sum = tl.where(keep, z_sum, 1.0)  # masked rows: finite placeholders, zeroed below
    m = tl.where(keep, m, 0.0)
    log_z = tl.log(z_sum)
    lse = m + log_z
    k = tl.load(IDS + row)
    x_k = tl.load(base + k + tl.zeros([1], tl.int64), mask=tl.zeros([1], tl.int32) < v_end, other=0.0)
    x_k = tl.sum(x_k.to(tl.float32), axis=0) * inv_temp
    tl.store(LOGP + row, tl.where(keep, x_k - lse, 0.0))
    tl.store(LSE + row, tl.where(keep, lse, 0.0))
    if WANT_H:
        tl.store(ENT + row, tl.where(keep, log_z - a_sum / z_sum, 0.0))
    if WANT_P2:
        s2 = b_sum / (z_sum * z_sum)
        tl.store(S2 + row, tl.where(keep, s2, 0.0))
        tl.store(S2L + row, tl.where(keep, c_sum / (z_sum * z_sum) - log_z * s2, 0.0))


def _bwd(
    X,
    stride_b,
    stride_t,
    T,
    V,
    IDS,
    MASK,
    inv_temp,
    LSE,
    ENT,
    S2,
    S2L,
    G_LOGP,
    G_ENT,
    G_S2,
    G_S2L,
    GRAD,
    HAS_MASK: tl.constexpr,
    HAS_H: tl.constexpr,
    HAS_P2: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row, base = _row(X, stride_b, stride_t, T)
    out = GRAD + row.to(tl.int64) * V
    keep = True
    v_read = V  # masked rows read nothing (all loads masked off)
    if HAS_MASK:
        keep = tl.load(MASK + row) != 0
        v_read = tl.where(keep, V, 0)
    lse = tl.load(LSE + row)
    g_logp = tl.load(G_LOGP + row)
    c0 = -g_logp
    c1 = tl.zeros([], tl.float32)
    c2 = tl.zeros([], tl.float32)
    c3 = tl.zeros([], tl.float32)
    if HAS_H:
        g_h = tl.load(G_ENT + row)
        c0 -= g_h * tl.load(ENT + row)
        c1 = -g_h
    if HAS_P2:
        g_s2 = tl.load(G_S2 + row)
        g_s2l = tl.load(G_S2L + row)
        s2 = tl.load(S2 + row)
        c0 -= 2.0 * g_s2 * s2 + g_s2l * (2.0 * tl.load(S2L + row) + s2)
        c2 = 2.0 * g_s2 + g_s2l
        c3 = 2.0 * g_s2l
    k = tl.load(IDS + row)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(base + offs, mask=offs < v_read, other=NEG_INF).to(tl.float32) * inv_temp
    finite = x != NEG_INF
    lp = tl.where(finite, x - lse, 0.0)
    p = tl.where(finite, tl.exp(lp), 0.0)
    g = p * (c0 + c1 * lp + p * (c2 + c3 * lp))
    g = tl.where(offs == k, g + g_logp, g) * inv_temp
    g = tl.where(keep, g, 0.0)
    tl.store(out + offs, g.to(GRAD.dtype.element_ty), mask=offs < V)


_FWD = triton.jit(_fwd)
_BWD = triton.jit(_bwd)


def kernels():
    """The jitted ``(forward, backward)`` kernels: the forward runs on a grid ``(rows,)``, the
    backward on ``(rows, cdiv(V, BLOCK))``."""
    return _FWD, _BWD
