"""Per-token statistics straight from the last hidden state (docs/design.md §3), without logits.

``token_stats_from_hidden(hidden, weight, ids, bias)`` returns what
``token_stats(hidden @ weight.T + bias, ids)`` returns — the same :class:`TokenStats`, the same
``stats=`` selection — but the ``[N, V]`` logits never exist. Rows are taken ``chunk_rows`` at a
time and the vocabulary ``chunk_vocab`` entries at a time; each ``[rows, vocab chunk]`` tile of
logits is one matmul into a reused float32 buffer, folded into per-row running sums, and dropped.
Peak extra memory is O(chunk_rows · chunk_vocab) (plus the gradients themselves in the backward).

Online statistics (all float32; float64 for float64 input). With ``z = (h·wᵀ + b)/τ`` and a
running reference ``m`` (the largest ``z`` seen so far in the row), each row keeps::

    Z = Σ_b e_b,   A = Σ_b e_b d_b,   B = Σ_b e_b²,   C = Σ_b e_b² d_b,   e_b = exp(d_b), d_b = z_b − m

over the entries seen so far. A tile whose maximum raises ``m`` to ``m'`` rescales them with
α = exp(m − m') and δ = m − m' (since ``e_b' = α e_b`` and ``d_b' = d_b + δ``)::

    Z' = α Z + Σ_tile e,  A' = α (A + δ Z) + Σ_tile e·d,  B' = α² B + Σ_tile e²,  C' = α² (C + δ B) + Σ_tile e²·d

After the last tile, with ``log Z`` (``lse = m + log Z``): entropy = log Z − A/Z,
Σπ² = B/Z², Σπ² log π = C/Z² − log Z · Σπ², logp = z_k − lse (the statistics of docs/design.md §3,
as :mod:`entflow.core.token_stats` computes them from logits).

Backward: the tiles are recomputed (one more matmul each) and turned into the closed-form gradient
w.r.t. the logits of ``stats_common.gradient_coefficients``, π (c0 + c1 log π + π (c2 + c3 log π)) +
g_logp δ_bk (divided by τ), from the saved ``lse`` and statistics; then
``∇h += G W_c``, ``∇W_c += Gᵀ h`` and ``∇b_c += Σ_rows G`` (float32 accumulation). All four
statistics are differentiable, as in ``token_stats``.

Backends: ``"torch"`` runs each tile's matmul with torch into a reused float32 buffer and folds it
with torch ops. ``"triton"`` (the default on CUDA with Triton installed) runs the fused kernels of
:mod:`entflow.core._triton_hidden_kernels`: the forward multiplies and folds each tile on chip (no
buffer at all), the backward recomputes each tile on chip and writes its ∇logits for the two
gradient matmuls (torch's).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from entflow.core import stats_common  # the helpers token_stats.py shares (dtype, backend, checks, gradient)
from entflow.core.checks import check_finite
from entflow.core.stats_common import BACKENDS, LOG_FLOOR, STAT_NAMES
from entflow.core.token_stats import TokenStats
from entflow.errors import NonFiniteError, ParameterError, ShapeError

__all__ = [
    "BACKENDS",
    "DEFAULT_CHUNK_ROWS",
    "DEFAULT_CHUNK_ROWS_CUDA",
    "DEFAULT_CHUNK_VOCAB",
    "FUSED_CHUNK_ROWS",
    "FUSED_CHUNK_VOCAB",
    "token_stats_from_hidden",
]

_OWNER = "token_stats_from_hidden"

# Default tile (chunk_rows=None, chunk_vocab=None), measured on the 2-core CPU at D = 896,
# V = 151,936 (docs/benchmarks.md, "token_stats_from_hidden", tile sweep): forward + backward took
# 38 s with 8,192 vocabulary entries per tile, 62 s with 2,048 (more, smaller ops) and 36 s with
# 32,768 (within the noise, at 4× the memory). 1,024 rows keep a typical micro-batch in one row
# chunk, so the weight is read once per pass; a float32 tile is then 32 MiB.
DEFAULT_CHUNK_ROWS = 1024
DEFAULT_CHUNK_VOCAB = 8192
# On CUDA, measured on one H100 at 8,192 rows × V = 151,936, bf16, forward + backward (docs/benchmarks.md,
# "On a GPU"): 4,096 rows per tile took 26 ms at D = 896 and 64 ms at D = 3,584, against 48 and 80 ms
# with 1,024 rows, for 250 MiB more memory; larger tiles gained at most 2 ms.
DEFAULT_CHUNK_ROWS_CUDA = 4096
# The fused Triton kernels (backend "triton") chunk only the backward, whose ∇logits tile goes through
# memory in the operand dtype for the two gradient matmuls. On one H100 (docs/results/gpu/
# gpu_stats-h100-2026-11-27-{a,b}.json) 8,192 × 16,384 took 23.1 / 23.6 ms at D = 896 against 24.4 /
# 24.9 ms at 4,096 × 8,192, 76.6 against 76.9 / 77.2 ms at D = 4,096, and halved the peak (one row
# chunk writes each ∇W slice once, with no float32 ∇W accumulator): 614 against 871 MiB at D = 896.
FUSED_CHUNK_ROWS = 8192
FUSED_CHUNK_VOCAB = 16384
# torch.mm(..., out_dtype=) (half-precision operands, float32 result) exists from torch 2.8
_MM_OUT_DTYPE = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 8)


# --------------------------------------------------------------------------------------------
# Tiles
# --------------------------------------------------------------------------------------------


def _half_operands(h2: torch.Tensor, weight: torch.Tensor) -> bool:
    """Multiply bf16/fp16 ``h2`` and ``weight`` as they are, accumulating in float32 (CUDA, torch ≥ 2.8).

    Elsewhere the operands are cast to float32 first. On a GPU that cast costs the tensor cores: at
    8,192 × 896 × 151,936 forward + backward took 218 ms in float32 against 17 ms for TRL's kernel,
    which multiplies bf16 tiles (docs/benchmarks.md, "On a GPU").
    """
    return h2.is_cuda and h2.dtype == weight.dtype and h2.dtype in (torch.bfloat16, torch.float16) and _MM_OUT_DTYPE


def _mm_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, accumulate: bool = False) -> torch.Tensor:
    """``out = a @ b`` (``out += a @ b`` with ``accumulate``) in ``out``'s dtype; half-precision
    ``a`` and ``b`` multiply as they are, with ``out``'s dtype as accumulator and result."""
    if a.dtype != out.dtype:
        if accumulate:
            return torch.addmm(out, a, b, out_dtype=out.dtype, out=out)
        return torch.mm(a, b, out_dtype=out.dtype, out=out)
    return out.addmm_(a, b) if accumulate else torch.mm(a, b, out=out)


def _tile_logits(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    """Raw logits ``h wᵀ + b`` of one tile into ``out`` [R, C] (h [R, D], w [C, D]: compute dtype or
    both half precision, see :func:`_half_operands`; ``out`` and ``b`` in the compute dtype)."""
    if b is not None and h.dtype == out.dtype:
        return torch.addmm(b, h, w.t(), out=out)
    _mm_into(out, h, w.t())
    return out if b is None else out.add_(b)


class _State:
    """Running per-row sums of the online softmax (see the module docstring), each ``[R]``."""

    def __init__(self, r: int, want_h: bool, want_p2: bool, want_s2l: bool, kw: dict) -> None:
        self.m = torch.full((r,), float("-inf"), **kw)
        self.z = torch.zeros(r, **kw)
        self.a = torch.zeros(r, **kw) if want_h else None
        self.b = torch.zeros(r, **kw) if want_p2 else None
        self.c = torch.zeros(r, **kw) if want_s2l else None
        self.zk = torch.zeros(r, **kw)  # the sampled token's scaled logit z_k


@torch.no_grad()
def _fold_tile_torch(tile: torch.Tensor, e: torch.Tensor, st: _State, local: torch.Tensor, inv_temp: float) -> None:
    """Fold one tile of raw logits ``tile`` [R, C] into ``st`` (torch ops; ``tile`` is overwritten).

    ``local`` [R]: the sampled token's column in this tile (outside [0, C) when it is not in it).
    """
    m_new = torch.maximum(st.m, tile.amax(-1) * inv_temp)
    m_ref = torch.where(m_new == float("-inf"), 0.0, m_new)  # all −inf so far: any finite reference
    alpha = torch.exp(st.m - m_ref)  # 0 while m = −inf
    delta = torch.where(st.m == float("-inf"), 0.0, st.m - m_ref)
    d = torch.add(m_ref.neg().unsqueeze(-1), tile, alpha=inv_temp, out=tile)  # d = z − m', one pass
    c = tile.shape[1]
    inside = (local >= 0) & (local < c)
    dk = d.gather(-1, local.clamp(0, c - 1).unsqueeze(-1)).squeeze(-1)
    st.zk = torch.where(inside, dk + m_ref, st.zk)
    d.clamp_(min=LOG_FLOOR)  # exp(d) = 0 below it; keeps 0·(−inf) out of the products
    torch.exp(d, out=e)
    z_t = e.sum(-1)
    if st.a is not None or st.c is not None:
        ed = d.mul_(e)  # e·d, in place of d
        if st.a is not None:
            st.a = alpha * (st.a + delta * st.z) + ed.sum(-1)  # uses the old Z
        if st.c is not None:  # before B is updated: C uses the old B
            c_t = torch.bmm(ed.unsqueeze(1), e.unsqueeze(2)).view(-1)  # Σ e²·d
            st.c = alpha * alpha * (st.c + delta * st.b) + c_t
    if st.b is not None:
        st.b = alpha * alpha * st.b + torch.bmm(e.unsqueeze(1), e.unsqueeze(2)).view(-1)  # Σ e²
    st.z = alpha * st.z + z_t
    st.m = m_new


def _coefficients(grads, saved, inv_temp):
    """Per-row coefficients (each ``[R]`` or None) of the logits gradient, times ``inv_temp``:
    G = π (c0 + c1 log π + π (c2 + c3 log π)) + g δ_bk
    (:func:`~entflow.core.stats_common.gradient_coefficients`), and g = g_logp."""

    def scale(c):
        return None if c is None else c * inv_temp

    return (*(scale(c) for c in stats_common.gradient_coefficients(grads, saved)), scale(grads[0]))


@torch.no_grad()
def _grad_tile_torch(tile, lse, coefs, local, inv_temp, p, tmp) -> torch.Tensor:
    """Turn raw logits ``tile`` [R, C] into the logits gradient G (returned; lives in ``tile``).

    ``p``, ``tmp``: [R, C] scratch buffers (``tmp`` is used only for the Σπ² terms)."""
    c0, c1, c2, c3, g_k = coefs

    def col(c):
        return c.unsqueeze(-1)

    lp = torch.add(lse.neg().unsqueeze(-1), tile, alpha=inv_temp, out=tile)  # log π
    lp.clamp_(min=LOG_FLOOR)
    torch.exp(lp, out=p)
    if c2 is not None:  # tmp = π (c2 + c3 log π)
        if c3 is not None:
            torch.addcmul(col(c2), lp, col(c3), out=tmp)
        else:
            tmp.copy_(col(c2).expand_as(tmp))
        tmp.mul_(p)
        if c1 is not None:
            tmp.addcmul_(lp, col(c1))
        g = tmp.add_(col(c0)).mul_(p)
    elif c1 is not None:
        g = torch.addcmul(col(c0), lp, col(c1), out=lp).mul_(p)
    else:
        g = torch.mul(p, col(c0), out=lp)
    if g_k is not None:
        c = g.shape[1]
        inside = (local >= 0) & (local < c)
        add = torch.where(inside, g_k, 0.0).unsqueeze(-1)
        g.scatter_add_(-1, local.clamp(0, c - 1).unsqueeze(-1), add)
    return g


def _finish(m, z, a, b, c, zk, want):
    """``lse`` and the requested statistics ``[logp, H, Σπ², Σπ² log π]`` (None where not wanted) of
    rows whose online sums are ``m, Z, A, B, C`` and sampled scaled logit ``zk`` (module docstring)."""
    log_z = torch.log(z)
    lse = m + log_z
    s2 = b / (z * z) if want[2] or want[3] else None
    return lse, [
        zk - lse if want[0] else None,
        log_z - a / z if want[1] else None,
        s2 if want[2] or want[3] else None,
        c / (z * z) - log_z * s2 if want[3] else None,
    ]


def _fused_operands(h2: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``h2`` and ``weight`` as the fused kernels' operands: one dtype (as they are when both are bf16
    or both fp16 on CUDA, else float32; see :func:`_half_operands`), unit stride over D."""
    odt = h2.dtype if _half_operands(h2, weight) else torch.float32
    h, w = h2.to(odt), weight.to(odt)
    return h if h.stride(-1) == 1 else h.contiguous(), w if w.stride(-1) == 1 else w.contiguous()


def _forward_fused(h2, weight, bias, ids, inv_temp, want):
    """The forward in one fused Triton kernel (matmul and fold on chip) plus a merge of its
    vocabulary splits: ``(lse, stats)`` as :func:`_finish`."""
    from entflow.core._triton_hidden_kernels import hidden_fold, merge_partials

    h, w = _fused_operands(h2, weight)
    want_h, want_p2 = want[1], want[2] or want[3]
    b = None if bias is None else bias.contiguous()
    state = merge_partials(*hidden_fold(h, w, b, ids, inv_temp, (want_h, want_p2, want[3])))
    return _finish(*state, want)


# --------------------------------------------------------------------------------------------
# Autograd function
# --------------------------------------------------------------------------------------------


def _buffers(r: int, c: int, n: int, kw: dict) -> list[torch.Tensor]:
    return [torch.empty(r * c, **kw) for _ in range(n)]


def _view(buf: torch.Tensor, r: int, c: int) -> torch.Tensor:
    return buf[: r * c].view(r, c)  # contiguous, also for a narrower last vocabulary chunk


def _forward_tiles(h2, weight, bias, ids, inv_temp, want, rows, cols):
    """The forward with torch ops: row × vocabulary tiles, each one matmul into a reused buffer and
    folded into the rows' running sums: ``(lse, stats)`` as :func:`_finish`."""
    cdt = stats_common.compute_dtype(h2.dtype, weight.dtype)
    n, v = h2.shape[0], weight.shape[0]
    kw = {"dtype": cdt, "device": h2.device}
    want_h, want_p2 = want[1], want[2] or want[3]
    outs = [torch.empty(n, **kw) if w else None for w in (want[0], want_h, want_p2, want[3])]
    lse = torch.empty(n, **kw)
    odt = h2.dtype if _half_operands(h2, weight) else cdt  # the matmuls' operand dtype
    r_max, c_max = max(min(rows, n), 1), max(min(cols, v), 1)
    tile_buf, e_buf = _buffers(r_max, c_max, 2, kw)
    bias_c = None if bias is None else bias.to(cdt)
    for r0 in range(0, n, r_max):
        r1 = min(r0 + r_max, n)
        h = h2[r0:r1].to(odt)
        st = _State(r1 - r0, want_h, want_p2, want[3], kw)
        for c0 in range(0, v, c_max):
            c1 = min(c0 + c_max, v)
            tile = _tile_logits(h, weight[c0:c1].to(odt), None if bias_c is None else bias_c[c0:c1],
                                _view(tile_buf, r1 - r0, c1 - c0))  # fmt: skip
            _fold_tile_torch(tile, _view(e_buf, r1 - r0, c1 - c0), st, ids[r0:r1] - c0, inv_temp)
        lse[r0:r1], chunk = _finish(st.m, st.z, st.a, st.b, st.c, st.zk, want)
        for out, val in zip(outs, chunk, strict=True):
            if out is not None:
                out[r0:r1] = val
    return lse, outs


class _HiddenStats(torch.autograd.Function):
    """Tiled forward (online softmax); backward recomputes each tile (memory O(rows · vocab chunk))."""

    @staticmethod
    def forward(ctx, h2, weight, bias, ids, inv_temp, want, rows, cols, backend):  # h2 [N, D], weight [V, D]
        ctx.set_materialize_grads(False)
        if backend == "triton":
            lse, outs = _forward_fused(h2, weight, bias, ids, inv_temp, want)
        else:
            lse, outs = _forward_tiles(h2, weight, bias, ids, inv_temp, want, rows, cols)
        saved = [o if o is not None else lse.new_empty(0) for o in outs[1:]]
        ctx.save_for_backward(h2, weight, bias, ids, lse, *saved)
        ctx.inv_temp, ctx.want, ctx.rows, ctx.cols, ctx.backend = inv_temp, want, rows, cols, backend
        return tuple(o for o, w in zip(outs, want, strict=True) if w)

    @staticmethod
    def backward(ctx, *grad_outs):
        h2, weight, bias, ids, lse, h_s, s2_s, s2l_s = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        it = iter(grad_outs)
        grads = [next(it) if w else None for w in ctx.want]
        none = (None,) * 9
        if all(g is None for g in grads) or not (need_h or need_w or need_b):
            return none
        if h2.shape[0] == 0:  # no rows: zero gradients
            pairs = zip((h2, weight, bias), (need_h, need_w, need_b), strict=True)
            zeros = [torch.zeros_like(t) if need else None for t, need in pairs]
            return (*zeros, None, None, None, None, None, None)
        fused = ctx.backend == "triton"
        cdt = stats_common.compute_dtype(h2.dtype, weight.dtype)
        n, v, dim = h2.shape[0], weight.shape[0], h2.shape[1]
        kw = {"dtype": cdt, "device": h2.device}
        grads = [None if g is None else g.to(cdt) for g in grads]
        odt = h2.dtype if _half_operands(h2, weight) else cdt  # the matmuls' operand dtype
        r_max, c_max = max(min(ctx.rows, n), 1), max(min(ctx.cols, v), 1)
        one_row_chunk = n <= r_max
        # gradients: written straight into the result when its dtype is the compute dtype; else
        # accumulated in float32 (∇h per row chunk, ∇W over the whole vocabulary unless one row
        # chunk writes each ∇W_c exactly once) and cast once
        g_h = torch.empty(h2.shape, dtype=h2.dtype, device=h2.device) if need_h else None
        g_w = g_w_acc = None
        if need_w:
            g_w = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)
            if not one_row_chunk:
                g_w_acc = g_w if weight.dtype == cdt else torch.empty(weight.shape, **kw)
                g_w_acc.zero_()
        g_b = torch.zeros(v, **kw) if need_b else None
        bias_c = None if bias is None else bias.to(cdt)
        has_p2 = grads[2] is not None or grads[3] is not None
        # torch tiles: logits, π and scratch buffers in the compute dtype, and the ∇logits operand in
        # the half dtype; fused: the kernel writes the ∇logits operand straight into its buffer
        tile_buf, p_buf = _buffers(r_max, c_max, 2, kw) if not fused else (None, None)
        tmp_buf = _buffers(r_max, c_max, 1, kw)[0] if has_p2 and not fused else None
        op_kw = {"dtype": odt, "device": h2.device}
        g_op_buf = None if odt == cdt and not fused else _buffers(r_max, c_max, 1, op_kw)[0]
        if fused:
            from entflow.core._triton_hidden_kernels import hidden_grad

            h_op, w_op = _fused_operands(h2, weight)
        gw_tmp = torch.empty(c_max, dim, **kw) if need_w and one_row_chunk and weight.dtype != cdt else None
        gh_acc = torch.empty(r_max, dim, **kw) if need_h and h2.dtype != cdt else None
        for r0 in range(0, n, r_max):
            r1 = min(r0 + r_max, n)
            r = r1 - r0
            h = h_op[r0:r1] if fused else h2[r0:r1].to(odt)
            sl = slice(r0, r1)
            sv = tuple(t[sl] if t.numel() else None for t in (h_s, s2_s, s2l_s))
            coefs = _coefficients([None if g is None else g[sl] for g in grads], sv, ctx.inv_temp)
            if fused:
                coefs = tuple(None if t is None else t.float().contiguous() for t in coefs)
            acc_h = None
            if need_h:
                acc_h = g_h[sl] if gh_acc is None else gh_acc[:r]
            for c0 in range(0, v, c_max):
                c1 = min(c0 + c_max, v)
                c = c1 - c0
                if fused:  # ∇logits of the tile, recomputed on chip, in the operand dtype; ∇b by atomics
                    w = w_op[c0:c1]
                    g_op = hidden_grad(
                        h, w, None if bias is None else bias[c0:c1], ids[sl] - c0, ctx.inv_temp, lse[sl], coefs,
                        _view(g_op_buf, r, c), None if g_b is None else g_b[c0:c1],
                    )  # fmt: skip
                else:
                    w = weight[c0:c1].to(odt)
                    tile = _tile_logits(h, w, None if bias_c is None else bias_c[c0:c1], _view(tile_buf, r, c))
                    g = _grad_tile_torch(tile, lse[sl], coefs, ids[sl] - c0, ctx.inv_temp, _view(p_buf, r, c),
                                         None if tmp_buf is None else _view(tmp_buf, r, c))  # fmt: skip
                    # ∇logits of the tile as a matmul operand (rounded to bf16/fp16 in the half path, as TRL does)
                    g_op = g if g_op_buf is None else _view(g_op_buf, r, c).copy_(g)
                    if need_b:
                        g_b[c0:c1] += g.sum(0)
                if need_h:
                    _mm_into(acc_h, g_op, w, accumulate=c0 > 0)
                if need_w:
                    if g_w_acc is not None:
                        _mm_into(g_w_acc[c0:c1], g_op.t(), h, accumulate=True)
                    elif gw_tmp is None:
                        _mm_into(g_w[c0:c1], g_op.t(), h)
                    else:
                        g_w[c0:c1].copy_(_mm_into(gw_tmp[:c], g_op.t(), h))
            if gh_acc is not None:
                g_h[sl].copy_(acc_h)
        if g_w_acc is not None and g_w_acc is not g_w:
            g_w.copy_(g_w_acc)
        g_b = None if g_b is None else g_b.to(bias.dtype)
        return g_h, g_w, g_b, None, None, None, None, None, None


# --------------------------------------------------------------------------------------------
# Public function
# --------------------------------------------------------------------------------------------


def _check_inputs(hidden, weight, token_ids, bias, row_mask, temperature, chunk_rows, chunk_vocab, backend):
    if not isinstance(hidden, torch.Tensor) or hidden.dim() < 1 or not torch.is_floating_point(hidden):
        shown = tuple(hidden.shape) if isinstance(hidden, torch.Tensor) else type(hidden).__name__
        raise ShapeError("hidden", "a floating-point tensor [..., D]", shown)
    d = hidden.shape[-1]
    if weight.dim() != 2 or weight.shape[1] != d:
        raise ShapeError("weight", f"[V, {d}] (D = hidden.shape[-1])", tuple(weight.shape))
    if not torch.is_floating_point(weight):
        raise ParameterError(_OWNER, "weight", f"must be a floating-point tensor, got {weight.dtype}")
    v = weight.shape[0]
    if bias is not None:
        if tuple(bias.shape) != (v,):
            raise ShapeError("bias", f"[{v}] (V = weight.shape[0])", tuple(bias.shape))
        if not torch.is_floating_point(bias):
            raise ParameterError(_OWNER, "bias", f"must be a floating-point tensor, got {bias.dtype}")
    if tuple(token_ids.shape) != tuple(hidden.shape[:-1]):
        raise ShapeError("token_ids", f"{tuple(hidden.shape[:-1])} (hidden.shape[:-1])", tuple(token_ids.shape))
    if torch.is_floating_point(token_ids) or torch.is_complex(token_ids):
        raise ParameterError(_OWNER, "token_ids", f"must be an integer tensor, got {token_ids.dtype}")
    if row_mask is not None and tuple(row_mask.shape) != tuple(token_ids.shape):
        raise ShapeError("row_mask", f"{tuple(token_ids.shape)} (token_ids.shape)", tuple(row_mask.shape))
    if not temperature > 0:
        raise ParameterError(_OWNER, "temperature", f"must be > 0, got {temperature}")
    stats_common.check_positive_int(_OWNER, "chunk_rows", chunk_rows)
    stats_common.check_positive_int(_OWNER, "chunk_vocab", chunk_vocab)
    stats_common.check_backend(_OWNER, backend)


def _check_values(hidden, weight, bias, ids, want_logp) -> None:
    """docs/design.md §13: ids in range; hidden and weight finite; bias may hold −inf (a masked
    vocabulary entry) but no NaN/+inf, at least one finite entry, and none at a sampled token."""
    v = weight.shape[0]
    stats_common.check_token_ids(ids, v, "weight", tuple(weight.shape))
    check_finite("hidden", hidden)
    check_finite("weight", weight)
    if bias is None or bias.numel() == 0:
        return
    bd = bias.detach()
    lo, hi = torch.aminmax(bd)
    lo_f, hi_f = float(lo), float(hi)
    if hi_f != hi_f or hi_f == float("inf"):
        raise NonFiniteError("bias", int(torch.isnan(bd).sum()), int(torch.isposinf(bd).sum()))
    if hi_f == float("-inf"):
        raise NonFiniteError("bias", 0, v)  # no finite logit: the softmax is undefined
    if lo_f == float("-inf") and want_logp and ids.numel():
        n = int((bd[ids] == float("-inf")).sum())
        if n:
            raise ShapeError("token_ids", "tokens whose bias is finite", f"{n} sampled token(s) with bias -inf")


def token_stats_from_hidden(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    token_ids: torch.Tensor,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    *,
    stats: Iterable[str] = STAT_NAMES,
    chunk_rows: int | None = None,
    chunk_vocab: int | None = None,
    row_mask: torch.Tensor | None = None,
    validate: bool = True,
    backend: str = "auto",
) -> TokenStats:
    """:func:`~entflow.core.token_stats.token_stats` of ``hidden @ weight.T + bias`` without the logits.

    Args:
        hidden: ``[..., D]`` last hidden states (float32/64, bf16, fp16; computed in float32,
            float64 stays float64). A view such as ``last_hidden_state[:, :-1]`` is fine.
        weight: ``[V, D]`` output projection (``lm_head.weight``; may be tied to the input
            embedding: its gradient is returned to autograd, which accumulates it).
        token_ids: ``[...]`` sampled token ids (``hidden.shape[:-1]``).
        bias: optional ``[V]`` output bias. ``-inf`` entries mask vocabulary entries (π = 0);
            the sampled tokens' entries must be finite.
        temperature: τ > 0; the logits are divided by it before any softmax.
        stats: which of ``STAT_NAMES`` to compute (default all four); the others are ``None`` and
            cost nothing.
        chunk_rows: rows per tile (default ``DEFAULT_CHUNK_ROWS`` = 1,024; on CUDA
            ``DEFAULT_CHUNK_ROWS_CUDA`` = 4,096; with the fused Triton kernels, which tile on chip
            and chunk only the backward, ``FUSED_CHUNK_ROWS`` = 8,192).
        chunk_vocab: vocabulary entries per tile (default ``DEFAULT_CHUNK_VOCAB`` = 8,192; fused
            Triton kernels ``FUSED_CHUNK_VOCAB`` = 16,384). Extra
            memory is a few ``[chunk_rows, chunk_vocab]`` compute-dtype buffers (3 × 32 MiB at the
            CPU defaults, 3 × 128 MiB on CUDA; 2 in the forward), a float32 copy of each
            ``[chunk_vocab, D]`` weight slice for half-precision weights (on CUDA with torch ≥ 2.8,
            bf16/fp16 hidden and weight of one dtype are multiplied as they are, with float32
            accumulation, and the backward rounds each tile's ∇logits to that dtype for its two
            matmuls, as TRL's kernel does), and, in the backward, the gradients (plus a float32 ∇W
            accumulator for half-precision weights when the rows span several row chunks).
        row_mask: optional ``[...]`` bool/0-1 mask; rows where it is 0 are not computed at all
            (every statistic 0, zero gradient). Selecting the kept rows costs one host sync.
        validate: check ids, shapes' contents and finiteness (docs/design.md §13; reads the
            inputs once more and syncs with the host), and that no row's logits overflowed.
        backend: ``"auto"`` (the fused Triton kernels for CUDA tensors when Triton is installed, else
            torch), ``"torch"`` or ``"triton"`` (on CPU tensors only under ``TRITON_INTERPRET=1``).
            The fused forward needs no tile buffer at all; its backward writes one
            ``[chunk_rows, chunk_vocab]`` ∇logits buffer in the operand dtype.

    Returns:
        :class:`TokenStats` of ``[...]`` tensors (float32; float64 for float64 inputs), ``None``
        for the statistics not requested; differentiable w.r.t. ``hidden``, ``weight``, ``bias``.
    """
    want = stats_common.parse_stats(stats, _OWNER)
    _check_inputs(hidden, weight, token_ids, bias, row_mask, temperature, chunk_rows, chunk_vocab, backend)
    lead, d = token_ids.shape, hidden.shape[-1]
    ids = token_ids.reshape(-1).long()
    if validate:
        _check_values(hidden, weight, bias, ids, want[0])
    h2 = hidden.reshape(-1, d)
    keep = None
    if row_mask is not None:
        keep = row_mask.reshape(-1).bool().nonzero().squeeze(-1)  # one host sync
        h2, ids = h2.index_select(0, keep), ids.index_select(0, keep)
    if h2.stride(-1) != 1:
        h2 = h2.contiguous()
    fits = stats_common.compute_dtype(hidden.dtype, weight.dtype) == torch.float32
    why_not = "'triton' computes in float32; got float64 hidden and weight"
    backend = "triton" if stats_common.use_triton(backend, fits, hidden.is_cuda, _OWNER, why_not) else "torch"
    if backend == "triton":
        rows, cols = FUSED_CHUNK_ROWS, FUSED_CHUNK_VOCAB
    else:
        rows, cols = (DEFAULT_CHUNK_ROWS_CUDA if hidden.is_cuda else DEFAULT_CHUNK_ROWS), DEFAULT_CHUNK_VOCAB
    rows = rows if chunk_rows is None else chunk_rows
    cols = cols if chunk_vocab is None else chunk_vocab
    outs = _HiddenStats.apply(h2, weight, bias, ids.contiguous(), 1.0 / temperature, want, rows, cols, backend)
    if validate and ids.numel():
        _check_overflow(outs)
    if keep is not None:
        n = lead.numel()
        outs = tuple(o.new_zeros(n).index_copy(0, keep, o) for o in outs)
    it = iter(outs)
    return TokenStats(*(next(it).reshape(lead) if w else None for w in want))


def _check_overflow(outs: tuple[torch.Tensor, ...]) -> None:
    """Finite inputs can still overflow in ``hidden @ weight.T``; such rows give NaN/inf."""
    vals = torch.stack([o.detach() for o in outs])
    if not bool(torch.isfinite(vals).all()):
        raise NonFiniteError(
            "logits (hidden @ weight.T + bias)", int(torch.isnan(vals).sum()), int(torch.isinf(vals).sum())
        )
