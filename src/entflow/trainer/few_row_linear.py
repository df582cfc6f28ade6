"""Linear layers of a decoding model, computed as ``(W @ xᵀ)ᵀ`` when they see a few rows on a CPU.

Decoding feeds every linear layer a few rows per step (N = P·G ≈ 16 sequences × 1 token), each
time with a weight that is no longer in cache. ``nn.Linear`` computes ``x @ Wᵀ``; on a CPU, MKL's
sgemm computes the same product written ``W @ xᵀ`` (the weight as the left, untransposed operand)
1.1–1.3× faster at 4–32 rows (the LM head 1.4–2.9×), and as fast or slower at one row and from 64
rows on (docs/benchmarks.md "Few-row linears"). So :func:`few_row_linears` switches every large
float32 CPU ``nn.Linear`` of a model to ``(W @ xᵀ)ᵀ`` for inputs of a few rows while no gradient is
recorded, and leaves every other call (the prefill, the update, a GPU, bfloat16, small weights) to
``F.linear``. The values are the same up to float round-off (the same dot products, summed in
another order).
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.nn import functional

__all__ = ["MAX_ROWS", "MIN_ROWS", "MIN_WEIGHT", "few_row_linears", "linear_few_rows"]

# docs/benchmarks.md "Few-row linears": MIN_ROWS … MAX_ROWS rows take W @ xᵀ, and only weights of
# at least MIN_WEIGHT entries (one row, more rows and smaller weights were as fast or faster with
# F.linear; the lab's tiny policies keep F.linear, so their rollouts stay bit-identical to
# transformers' own generate)
MIN_ROWS, MAX_ROWS = 2, 32
MIN_WEIGHT = 300_000


def linear_few_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` computed as ``(weight @ xᵀ)ᵀ``: ``x`` ``[..., K]``, ``weight``
    ``[N, K]``, ``bias`` ``[N]`` → ``[..., N]``, contiguous."""
    rows = x.reshape(-1, x.shape[-1])
    out = torch.mm(weight, rows.t()).t().contiguous()
    if bias is not None:
        out = out.add_(bias)
    return out.view(*x.shape[:-1], weight.shape[0])


def _forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    # the layer is a float32 CPU one (few_row_linears chose it); the input decides the rest
    rows = x.numel() // x.shape[-1]
    if not torch.is_grad_enabled() and x.dtype == torch.float32 and MIN_ROWS <= rows <= MAX_ROWS:
        return linear_few_rows(x, self.weight, self.bias)
    return functional.linear(x, self.weight, self.bias)


@contextmanager
def few_row_linears(model: torch.nn.Module, min_weight: int = MIN_WEIGHT) -> Iterator[None]:
    """Within the block, every ``nn.Linear`` of ``model`` whose float32 CPU weight has at least
    ``min_weight`` entries computes a no-grad input of ``MIN_ROWS`` … ``MAX_ROWS`` rows as ``(W @ xᵀ)ᵀ``
    (:func:`linear_few_rows`); other inputs and layers as before. The layers are restored on exit,
    also on an error. A no-op on a model with no such layer (a GPU model, bfloat16, the lab's)."""
    layers = [
        m
        for m in model.modules()
        if type(m) is torch.nn.Linear
        and "forward" not in vars(m)
        and m.weight.device.type == "cpu"
        and m.weight.dtype == torch.float32
        and m.weight.numel() >= min_weight
    ]
    for m in layers:
        m.forward = types.MethodType(_forward, m)
    try:
        yield
    finally:
        for m in layers:
            del m.forward
