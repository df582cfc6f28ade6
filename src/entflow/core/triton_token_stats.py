"""Fused Triton path of :func:`entflow.core.token_stats.token_stats` (forward and backward).

Selected automatically for CUDA tensors when Triton is installed (``pip install entflow[triton]``);
``token_stats(..., backend="triton")`` forces it (on CPU tensors it needs ``TRITON_INTERPRET=1``,
which is how the tests check it). Reads each logit once in the forward and once in the backward
(online softmax over V tiles, float32 accumulation, bf16/fp16/fp32 input, temperature folded in,
masked rows skipped); extra memory is O(rows), plus the ``[rows, V]`` gradient in the backward.

Checked against a float64 reference under Triton's CPU interpreter (CI) and compiled on an H100
(``.ci/gpu-check``; timings in docs/benchmarks.md, "On a GPU").
"""

from __future__ import annotations

import importlib.util

import torch

# forward: V piece of one program step (elements). On one H100 at 8,192 × 151,936 bf16, forward +
# backward took 3.47 / 3.19 / 4.53 / 3.25 ms with 1,024 / 2,048 / 4,096 / 8,192 (TRL's kernel 3.26 ms;
# docs/results/gpu/gpu_stats-h100-2026-11-27-a.json)
DEFAULT_BLOCK = 2048
BACKWARD_BLOCK = 1024  # backward: columns per program (one program per row and block)


def available() -> bool:
    """Whether Triton is importable (without importing it)."""
    return importlib.util.find_spec("triton") is not None


class _TokenStatsTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x3, ids, inv_temp, want, mask, block):  # x3 [B, T, V] (unit stride over V), ids [B·T]
        from entflow.core._triton_kernels import kernels

        fwd, _ = kernels()
        n, v = ids.shape[0], x3.shape[-1]
        kw = {"dtype": torch.float32, "device": x3.device}
        logp, lse = torch.empty(n, **kw), torch.empty(n, **kw)
        want_h, want_p2 = want[1], want[2] or want[3]
        ent = torch.empty(n if want_h else 0, **kw)
        s2 = torch.empty(n if want_p2 else 0, **kw)
        s2l = torch.empty(n if want_p2 else 0, **kw)
        has_mask = mask is not None
        mask_t = mask.to(torch.int8).contiguous() if has_mask else ids
        if n:
            fwd[(n,)](
                x3, x3.stride(0), x3.stride(1), x3.shape[1], v, ids, mask_t, float(inv_temp),
                logp, ent if want_h else logp, s2 if want_p2 else logp, s2l if want_p2 else logp, lse,
                HAS_MASK=has_mask, WANT_H=want_h, WANT_P2=want_p2, BLOCK=block,
            )  # fmt: skip
        ctx.save_for_backward(x3, ids, mask_t, lse, ent, s2, s2l)
        ctx.inv_temp, ctx.want, ctx.has_mask, ctx.block = inv_temp, want, has_mask, block
        outs = (logp, ent, s2, s2l)
        return tuple(o for o, w in zip(outs, want, strict=True) if w)

    @staticmethod
    def backward(ctx, *grad_outs):
        from entflow.core._triton_kernels import kernels

        _, bwd = kernels()
        x3, ids, mask_t, lse, ent, s2, s2l = ctx.saved_tensors
        it = iter(grad_outs)
        grads = [next(it) if w else None for w in ctx.want]
        n, v = ids.shape[0], x3.shape[-1]
        grad = torch.empty(x3.shape, dtype=x3.dtype, device=x3.device)
        if n == 0:
            return grad, None, None, None, None, None
        zeros = torch.zeros(n, dtype=torch.float32, device=x3.device)
        g = [zeros if gg is None else gg.float().contiguous() for gg in grads]
        has_h, has_p2 = grads[1] is not None, grads[2] is not None or grads[3] is not None
        bblock = min(BACKWARD_BLOCK, ctx.block)
        bwd[(n, -(-v // bblock))](
            x3, x3.stride(0), x3.stride(1), x3.shape[1], v, ids, mask_t, float(ctx.inv_temp),
            lse, ent if has_h else lse, s2 if has_p2 else lse, s2l if has_p2 else lse,
            g[0], g[1], g[2], g[3], grad,
            HAS_MASK=ctx.has_mask, HAS_H=has_h, HAS_P2=has_p2, BLOCK=bblock,
        )  # fmt: skip
        return grad, None, None, None, None, None


def token_stats_triton(
    x3: torch.Tensor,
    ids: torch.Tensor,
    inv_temp: float,
    want: tuple[bool, bool, bool, bool],
    row_mask: torch.Tensor | None = None,
    block: int | None = None,
) -> tuple[torch.Tensor, ...]:
    """The requested statistics (in ``STAT_NAMES`` order) of ``x3`` ``[B, T, V]`` at ``ids`` ``[B·T]``.

    ``row_mask`` ``[B·T]``: rows where it is 0 get 0 and zero gradient, and read no logits.
    ``block``: V tile (a power of two; default ``min(DEFAULT_BLOCK, next_pow2(V))``).
    """
    v = x3.shape[-1]
    if block is None:
        block = min(DEFAULT_BLOCK, 1 << max(v - 1, 1).bit_length())
    ids = ids.contiguous()
    return _TokenStatsTriton.apply(x3, ids, inv_temp, want, row_mask, block)
