"""Fused Triton kernels for :mod:`entflow.core.hidden_stats` (imports Triton; load it lazily).

The LM head's matmul and what follows it run in one kernel, so no tile of logits goes through memory
between the matmul and the softmax:

- ``hidden_fold`` (forward): program (i, s) owns the rows ``[i·BM, (i+1)·BM)`` and the vocabulary
  split ``s``. For each ``[BM, BN]`` tile of its split it multiplies ``h wᵀ`` on chip (``tl.dot``,
  bf16/fp16 operands or float32 in IEEE precision, float32 accumulation over ``BK`` pieces of D),
  adds the bias, divides by τ and folds the tile into the rows' running sums with the fold every
  entflow kernel shares (:func:`entflow.core._triton_fold.online_fold`). It writes one partial state
  per (split, row); :func:`merge_partials` combines the splits (the same recurrence over states).
  Splitting the vocabulary keeps all SMs busy when there are few row tiles.
- ``hidden_grad`` (backward): program (i, j) recomputes the ``[BM, BN]`` tile of logits on chip and
  writes its gradient G = π (c0 + c1 log π + π (c2 + c3 log π)) + g_k δ_bk (log π = z − lse; the
  coefficients already carry 1/τ) in the matmul operand dtype, plus its column sums into ∇b
  (atomics). ``hidden_stats`` then multiplies G into ∇h and ∇W (cuBLAS, float32 accumulation).

Jitted when this module is imported, which ``hidden_stats`` does on first use of the Triton
backend, so ``TRITON_INTERPRET=1`` set by then (the CPU tests, in a fresh process) takes effect.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from entflow.core._triton_fold import online_fold

NEG_INF = tl.constexpr(float("-inf"))

# Tile shapes (BM rows × BN vocabulary entries, BK of D per dot) and launch settings of the forward
# ("fold") and backward ("grad") kernels, per operand kind. "flat": the forward's one-loop form;
# "waves": vocabulary splits sized for that many waves of programs over the SMs (absent: at least two).
# Chosen from two H100 runs of benchmarks/gpu_stats.py (docs/results/gpu/gpu_stats-h100-2026-11-27-{a,b}.json):
# 4 stages and one wave were each faster than 3 stages and two waves at both D = 896 and D = 4,096 in
# every run they ran (by 1-6 %); the flat loop was slower (25.2 against 24.9 ms at D = 896, 80.1
# against 77.2 at D = 4,096), as were 64-row backward tiles.
CONFIGS = {
    "half": {"BM": 128, "BN": 128, "BK": 64, "num_warps": 8, "num_stages": 4, "flat": False, "waves": 1},
    "half_grad": {"BM": 128, "BN": 128, "BK": 64, "num_warps": 8, "num_stages": 3},
    "float32": {"BM": 64, "BN": 64, "BK": 32, "num_warps": 4, "num_stages": 2, "flat": False},
    "float32_grad": {"BM": 64, "BN": 64, "BK": 32, "num_warps": 4, "num_stages": 2},
}
# Tests only: skip this many vocabulary tiles at the start of each split (an injected fault that the
# float64 checks must catch). Never set outside tests.
_FAULT_SKIP_TILES = 0


@triton.jit
def _dot_step(H, W, rows, cols, row_ok, col_ok, k0, D, stride_h, stride_w, acc, IEEE: tl.constexpr,
              BK: tl.constexpr):  # fmt: skip
    """``acc + h[rows, k0:k0+BK] · w[cols, k0:k0+BK]ᵀ`` (masked past N, V and D)."""
    ks = k0 + tl.arange(0, BK)
    k_ok = ks < D
    h_ptrs = H + rows.to(tl.int64)[:, None] * stride_h + ks[None, :]
    w_ptrs = W + cols.to(tl.int64)[:, None] * stride_w + ks[None, :]
    h = tl.load(h_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
    w = tl.load(w_ptrs, mask=col_ok[:, None] & k_ok[None, :], other=0.0)
    if IEEE:
        acc = tl.dot(h, tl.trans(w), acc, input_precision="ieee")
    else:
        acc = tl.dot(h, tl.trans(w), acc)
    return acc


@triton.jit
def _scaled_logits(acc, BIAS, cols, col_ok, inv_temp, HAS_BIAS: tl.constexpr):
    """``(acc + b)/τ`` in float32, −inf in columns past the end."""
    if HAS_BIAS:
        acc += tl.load(BIAS + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    return tl.where(col_ok[None, :], acc * inv_temp, NEG_INF)


@triton.jit
def _logits_tile(H, W, BIAS, rows, cols, row_ok, col_ok, D, stride_h, stride_w, inv_temp,
                 HAS_BIAS: tl.constexpr, IEEE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                 BK: tl.constexpr):  # fmt: skip
    """Scaled logits ``(h wᵀ + b)/τ`` of one ``[BM, BN]`` tile, float32, −inf in columns past the end."""
    ks = tl.arange(0, BK)
    h_ptrs = H + rows.to(tl.int64)[:, None] * stride_h + ks[None, :]
    w_ptrs = W + cols.to(tl.int64)[:, None] * stride_w + ks[None, :]
    acc = tl.zeros([BM, BN], tl.float32)
    for k0 in range(0, D, BK):
        k_ok = (k0 + ks) < D
        h = tl.load(h_ptrs + k0, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_ptrs + k0, mask=col_ok[:, None] & k_ok[None, :], other=0.0)
        if IEEE:
            acc = tl.dot(h, tl.trans(w), acc, input_precision="ieee")
        else:
            acc = tl.dot(h, tl.trans(w), acc)
    return _scaled_logits(acc, BIAS, cols, col_ok, inv_temp, HAS_BIAS)


@triton.jit
def _hidden_fold(
    H, W, BIAS, IDS, N, V, D, stride_h, stride_w, inv_temp, cols_per_split,
    PM, PZ, PA, PB, PC, PK,
    HAS_BIAS: tl.constexpr, WANT_H: tl.constexpr, WANT_P2: tl.constexpr, WANT_S2L: tl.constexpr,
    IEEE: tl.constexpr, SKIP_TILES: tl.constexpr, FLAT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
    BK: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    split = tl.program_id(1)
    row_ok = rows < N
    ids = tl.load(IDS + rows, mask=row_ok, other=-1)
    m = tl.full([BM], NEG_INF, tl.float32)
    z_sum = tl.zeros([BM], tl.float32)
    a_sum = tl.zeros([BM], tl.float32)
    b_sum = tl.zeros([BM], tl.float32)
    c_sum = tl.zeros([BM], tl.float32)
    z_k = tl.zeros([BM], tl.float32)  # the sampled token's scaled logit, from the tile that holds it
    v_lo = split * cols_per_split + SKIP_TILES * BN
    v_hi = tl.minimum(split * cols_per_split + cols_per_split, V)
    if FLAT:  # one loop over (tile, D piece): the loads of the next tile stream while a tile is folded
        k_steps = tl.cdiv(D, BK)
        acc = tl.zeros([BM, BN], tl.float32)
        for it in range(0, tl.cdiv(v_hi - v_lo, BN) * k_steps):
            t = it // k_steps
            kk = it - t * k_steps
            cols = v_lo + t * BN + tl.arange(0, BN)
            col_ok = cols < v_hi
            acc = _dot_step(H, W, rows, cols, row_ok, col_ok, kk * BK, D, stride_h, stride_w, acc, IEEE, BK)
            if kk == k_steps - 1:
                x = _scaled_logits(acc, BIAS, cols, col_ok, inv_temp, HAS_BIAS)
                z_k += tl.sum(tl.where(cols[None, :] == ids[:, None], x, 0.0), axis=1)
                m, z_sum, a_sum, b_sum, c_sum = online_fold(x, m, z_sum, a_sum, b_sum, c_sum, WANT_H, WANT_P2,
                                                            WANT_S2L)  # fmt: skip
                acc = tl.zeros([BM, BN], tl.float32)
    else:
        for v0 in range(v_lo, v_hi, BN):
            cols = v0 + tl.arange(0, BN)
            col_ok = cols < v_hi
            x = _logits_tile(H, W, BIAS, rows, cols, row_ok, col_ok, D, stride_h, stride_w, inv_temp,
                             HAS_BIAS, IEEE, BM, BN, BK)  # fmt: skip
            z_k += tl.sum(tl.where(cols[None, :] == ids[:, None], x, 0.0), axis=1)
            m, z_sum, a_sum, b_sum, c_sum = online_fold(x, m, z_sum, a_sum, b_sum, c_sum, WANT_H, WANT_P2, WANT_S2L)
    out = split.to(tl.int64) * N + rows
    tl.store(PM + out, m, mask=row_ok)
    tl.store(PZ + out, z_sum, mask=row_ok)
    tl.store(PK + out, z_k, mask=row_ok)
    if WANT_H:
        tl.store(PA + out, a_sum, mask=row_ok)
    if WANT_P2:
        tl.store(PB + out, b_sum, mask=row_ok)
    if WANT_S2L:
        tl.store(PC + out, c_sum, mask=row_ok)


@triton.jit
def _hidden_grad(
    H, W, BIAS, IDS, N, C, D, stride_h, stride_w, inv_temp,
    LSE, C0, C1, C2, C3, GK, G, stride_g, GB,
    HAS_BIAS: tl.constexpr, HAS_C1: tl.constexpr, HAS_C2: tl.constexpr, HAS_C3: tl.constexpr,
    HAS_GK: tl.constexpr, HAS_GB: tl.constexpr, IEEE: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    row_ok = rows < N
    col_ok = cols < C
    x = _logits_tile(H, W, BIAS, rows, cols, row_ok, col_ok, D, stride_h, stride_w, inv_temp,
                     HAS_BIAS, IEEE, BM, BN, BK)  # fmt: skip
    finite = x != NEG_INF
    lp = tl.where(finite, x - tl.load(LSE + rows, mask=row_ok, other=0.0)[:, None], 0.0)  # log π
    p = tl.where(finite, tl.exp(lp), 0.0)
    inner = tl.load(C0 + rows, mask=row_ok, other=0.0)[:, None] + tl.zeros([BM, BN], tl.float32)
    if HAS_C1:
        inner += tl.load(C1 + rows, mask=row_ok, other=0.0)[:, None] * lp
    if HAS_C2:
        q = tl.load(C2 + rows, mask=row_ok, other=0.0)[:, None] + tl.zeros([BM, BN], tl.float32)
        if HAS_C3:
            q += tl.load(C3 + rows, mask=row_ok, other=0.0)[:, None] * lp
        inner += p * q
    g = p * inner
    if HAS_GK:
        ids = tl.load(IDS + rows, mask=row_ok, other=-1)
        g_k = tl.load(GK + rows, mask=row_ok, other=0.0)
        g += tl.where(cols[None, :] == ids[:, None], g_k[:, None], 0.0)
    g = tl.where(row_ok[:, None] & col_ok[None, :], g, 0.0)
    ptrs = G + rows.to(tl.int64)[:, None] * stride_g + cols[None, :]
    tl.store(ptrs, g.to(G.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])
    if HAS_GB:
        tl.atomic_add(GB + cols, tl.sum(g, axis=0), mask=col_ok)


def _config(dtype: torch.dtype, kernel: str, config: dict | None) -> dict:
    base = CONFIGS[("float32" if dtype == torch.float32 else "half") + kernel]
    return base if config is None else {**base, **config}


def _tile(n: int, t: int) -> int:
    """A tile of at most ``t`` (a power of two ≥ 16, as ``tl.dot`` needs) that is not much larger than ``n``."""
    return max(16, min(t, 1 << max(n - 1, 1).bit_length()))


def _splits(n_row_tiles: int, v: int, bn: int, device: torch.device, waves: float | None) -> int:
    """Vocabulary splits: ``waves`` full waves of programs over the device's SMs (rounded down), or,
    without ``waves``, at least two waves; never splits of fewer than four tiles."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    wanted = triton.cdiv(2 * sms, n_row_tiles) if waves is None else int(waves * sms) // n_row_tiles
    return max(1, min(wanted, triton.cdiv(v, 4 * bn)))


def hidden_fold(h, w, bias, ids, inv_temp, want, config=None):
    """Partial online-softmax states ``(m, Z, A, B, C, z_k)``, each ``[S, N]`` float32, of the logits
    ``(h wᵀ + b)/τ`` over ``S`` vocabulary splits (``A``/``B``/``C`` empty when not wanted).

    ``h`` ``[N, D]`` and ``w`` ``[V, D]`` of one dtype (bf16/fp16/float32, unit stride over D),
    ``bias`` ``[V]`` or None, ``ids`` ``[N]`` int64; ``want = (want_h, want_p2, want_s2l)``."""
    n, d = h.shape
    v = w.shape[0]
    cfg = _config(h.dtype, "", config)
    bm, bn, bk = _tile(n, cfg["BM"]), _tile(v, cfg["BN"]), _tile(d, cfg["BK"])
    row_tiles = triton.cdiv(n, bm)
    cols_per_split = triton.cdiv(triton.cdiv(v, _splits(row_tiles, v, bn, h.device, cfg.get("waves"))), bn) * bn
    splits = triton.cdiv(v, cols_per_split)
    kw = {"dtype": torch.float32, "device": h.device}
    parts = [torch.empty(splits, n, **kw) for _ in range(3)]  # m, Z, z_k
    extra = [torch.empty(splits, n, **kw) if w_ else parts[1] for w_ in want]  # A, B, C
    _hidden_fold[(row_tiles, splits)](
        h, w, parts[1] if bias is None else bias, ids, n, v, d, h.stride(0), w.stride(0), float(inv_temp),
        cols_per_split, parts[0], parts[1], *extra, parts[2],
        HAS_BIAS=bias is not None, WANT_H=want[0], WANT_P2=want[1], WANT_S2L=want[2],
        IEEE=h.dtype == torch.float32, SKIP_TILES=_FAULT_SKIP_TILES, FLAT=bool(cfg.get("flat")), BM=bm, BN=bn, BK=bk,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    m, z, zk = parts
    a, b, c = (e if w_ else None for e, w_ in zip(extra, want, strict=True))
    return m, z, a, b, c, zk


def merge_partials(m, z, a, b, c, zk):
    """Combine the splits' states ``[S, N]`` into one per row ``[N]``: the fold's recurrence applied
    to whole states (α = exp(m_s − m'), δ = m_s − m')."""
    m_new = m.amax(0)
    ref = torch.where(m_new == float("-inf"), 0.0, m_new)
    alpha = torch.exp(m - ref)  # 0 for a split with no finite logit
    delta = torch.where(m == float("-inf"), 0.0, m - ref)
    z_new = (alpha * z).sum(0)
    a_new = None if a is None else (alpha * (a + delta * z)).sum(0)
    alpha2 = alpha * alpha
    b_new = None if b is None else (alpha2 * b).sum(0)
    c_new = None if c is None else (alpha2 * (c + delta * b)).sum(0)
    return m_new, z_new, a_new, b_new, c_new, zk.sum(0)


def hidden_grad(h, w, bias, ids, inv_temp, lse, coefs, out, grad_bias=None, config=None):
    """Write the logits gradient of the tile ``h wᵀ`` (``h`` ``[R, D]``, ``w`` ``[C, D]``) into ``out``
    ``[R, C]`` (any float dtype, unit stride over C); add its column sums to ``grad_bias`` ``[C]``
    (float32) when given. ``coefs`` = ``(c0, c1, c2, c3, g_k)`` ``[R]`` float32 (None where absent),
    already multiplied by 1/τ."""
    r, d = h.shape
    c = w.shape[0]
    cfg = _config(h.dtype, "_grad", config)
    bm, bn, bk = _tile(r, cfg["BM"]), _tile(c, cfg["BN"]), _tile(d, cfg["BK"])
    c0, c1, c2, c3, g_k = coefs
    if c0 is None:
        c0 = torch.zeros(r, dtype=torch.float32, device=h.device)
    dummy = c0
    _hidden_grad[(triton.cdiv(r, bm), triton.cdiv(c, bn))](
        h, w, dummy if bias is None else bias, ids, r, c, d, h.stride(0), w.stride(0), float(inv_temp),
        lse, c0, *(dummy if t is None else t for t in (c1, c2, c3, g_k)), out, out.stride(0),
        dummy if grad_bias is None else grad_bias,
        HAS_BIAS=bias is not None, HAS_C1=c1 is not None, HAS_C2=c2 is not None, HAS_C3=c3 is not None,
        HAS_GK=g_k is not None, HAS_GB=grad_bias is not None, IEEE=h.dtype == torch.float32,
        BM=bm, BN=bn, BK=bk, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return out
