"""A gradient fault for the doctor's fault-injection tests."""

from __future__ import annotations

import torch


class ScaleGrad(torch.autograd.Function):
    """Identity forward; multiplies the gradient flowing back by ``factor``
    (``ScaleGrad.apply(x, factor)``)."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.factor, None
