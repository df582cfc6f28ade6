"""Triton tile kernels for :mod:`entflow.core.hidden_stats` (imports Triton; load it lazily).

The matmuls that make each ``[R, C]`` tile of logits stay torch's (cuBLAS on a GPU); these kernels
replace the torch elementwise passes over a tile:

- ``fold_tile``: one program per row streams the row's C raw logits once, in ``BLOCK`` pieces,
  and folds them into the row's running online-softmax sums (``Z, A, B, C`` relative to the
  running maximum ``m``, rescaled by α = exp(m − m'), δ = m − m' when ``m`` grows: the recurrences
  of the ``hidden_stats`` module docstring), plus the sampled token's logit when it lies in the
  tile. Float32 accumulation; a −inf logit contributes e = 0 and stays out of every product.
- ``grad_tile``: one program per (row, ``BLOCK`` of columns) overwrites the tile with the
  logits gradient π (c0 + c1 log π + π (c2 + c3 log π)) + g_k δ_bk, log π = z − lse.

The kernels are jitted on first use (:func:`_kernels`), so ``TRITON_INTERPRET=1`` set by then
(the CPU tests) takes effect.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

NEG_INF = tl.constexpr(float("-inf"))
BLOCK = 1024


def _fold(
    X,
    C,
    LOCAL,
    inv_temp,
    M,
    ZS,
    AS,
    BS,
    CS,
    ZK,
    WANT_H: tl.constexpr,
    WANT_P2: tl.constexpr,
    WANT_S2L: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    base = X + row.to(tl.int64) * C
    m = tl.load(M + row)
    z_sum = tl.load(ZS + row)
    a_sum = tl.zeros([], tl.float32)
    b_sum = tl.zeros([], tl.float32)
    c_sum = tl.zeros([], tl.float32)
    if WANT_H:
        a_sum = tl.load(AS + row)
    if WANT_P2:
        b_sum = tl.load(BS + row)
    if WANT_S2L:
        c_sum = tl.load(CS + row)
    cols = tl.arange(0, BLOCK)
    for start in range(0, C, BLOCK):
        offs = start + cols
        x = tl.load(base + offs, mask=offs < C, other=NEG_INF).to(tl.float32) * inv_temp
        m_new = tl.maximum(m, tl.max(x, axis=0))
        m_ref = tl.where(m_new == NEG_INF, 0.0, m_new)  # all −inf so far: any finite reference
        alpha = tl.exp(m - m_ref)  # 0 while m = −inf
        delta = tl.where(m == NEG_INF, 0.0, m - m_ref)
        finite = x != NEG_INF
        d = tl.where(finite, x - m_ref, 0.0)
        e = tl.where(finite, tl.exp(d), 0.0)
        if WANT_H:  # before Z is updated: A uses the old Z
            a_sum = alpha * (a_sum + delta * z_sum) + tl.sum(e * d, axis=0)
        z_sum = alpha * z_sum + tl.sum(e, axis=0)
        if WANT_P2:
            ee = e * e
            if WANT_S2L:  # before B is updated
                c_sum = alpha * alpha * (c_sum + delta * b_sum) + tl.sum(ee * d, axis=0)
            b_sum = alpha * alpha * b_sum + tl.sum(ee, axis=0)
        m = m_new
    tl.store(M + row, m)
    tl.store(ZS + row, z_sum)
    if WANT_H:
        tl.store(AS + row, a_sum)
    if WANT_P2:
        tl.store(BS + row, b_sum)
    if WANT_S2L:
        tl.store(CS + row, c_sum)
    k = tl.load(LOCAL + row)
    inside = (k >= 0) & (k < C)
    one = tl.zeros([1], tl.int32) + inside.to(tl.int32)  # a [1] block: load x_k only when inside
    x_k = tl.load(base + tl.where(inside, k, 0) + tl.zeros([1], tl.int64), mask=one != 0, other=0.0)
    x_k = tl.sum(x_k.to(tl.float32), axis=0) * inv_temp
    old = tl.load(ZK + row)
    tl.store(ZK + row, tl.where(inside, x_k, old))


def _grad(
    X,
    C,
    LOCAL,
    inv_temp,
    LSE,
    C0,
    C1,
    C2,
    C3,
    GK,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ptrs = X + row.to(tl.int64) * C + offs
    valid = offs < C
    x = tl.load(ptrs, mask=valid, other=NEG_INF).to(tl.float32) * inv_temp
    finite = x != NEG_INF
    lp = tl.where(finite, x - tl.load(LSE + row), 0.0)
    p = tl.where(finite, tl.exp(lp), 0.0)
    c0 = tl.load(C0 + row)
    c1 = tl.load(C1 + row)
    c2 = tl.load(C2 + row)
    c3 = tl.load(C3 + row)
    g = p * (c0 + c1 * lp + p * (c2 + c3 * lp))
    g = tl.where(offs == tl.load(LOCAL + row), g + tl.load(GK + row), g)
    tl.store(ptrs, g.to(X.dtype.element_ty), mask=valid)


@functools.cache
def _jitted(interpret: str | None):
    return triton.jit(_fold), triton.jit(_grad)


def _kernels():
    return _jitted(os.environ.get("TRITON_INTERPRET"))


def fold_tile(tile: torch.Tensor, e: torch.Tensor, st, local: torch.Tensor, inv_temp: float) -> None:
    """Triton version of ``hidden_stats._fold_tile_torch`` (``tile`` [R, C] contiguous float32; ``e`` unused)."""
    if tile.dtype != torch.float32:
        raise TypeError(f"the Triton tile kernels take float32 tiles, got {tile.dtype}")
    fold, _ = _kernels()
    r, c = tile.shape
    if r == 0 or c == 0:
        return
    dummy = st.z
    fold[(r,)](
        tile, c, local.contiguous(), float(inv_temp), st.m, st.z,
        dummy if st.a is None else st.a, dummy if st.b is None else st.b, dummy if st.c is None else st.c, st.zk,
        WANT_H=st.a is not None, WANT_P2=st.b is not None, WANT_S2L=st.c is not None, BLOCK=min(BLOCK, _pow2(c)),
    )  # fmt: skip


def grad_tile(tile, lse, coefs, local, inv_temp, p, tmp) -> torch.Tensor:
    """Triton version of ``hidden_stats._grad_tile_torch``: the gradient overwrites ``tile``."""
    if tile.dtype != torch.float32:
        raise TypeError(f"the Triton tile kernels take float32 tiles, got {tile.dtype}")
    _, grad = _kernels()
    r, c = tile.shape
    if r == 0 or c == 0:
        return tile
    zeros = torch.zeros(r, dtype=torch.float32, device=tile.device)
    c0, c1, c2, c3, g_k = (zeros if t is None else t.contiguous() for t in coefs)
    block = min(BLOCK, _pow2(c))
    grad[(r, triton.cdiv(c, block))](
        tile, c, local.contiguous(), float(inv_temp), lse.contiguous(), c0, c1, c2, c3, g_k, BLOCK=block
    )
    return tile


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 1).bit_length()
