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

The switched ``forward`` takes any arguments: a call with the one input (by position or as
``input=``) may take the few-row path, every other call goes to ``nn.Linear.forward`` itself. It is
installed only while ``nn.Linear.forward`` has the signature it was written against,
``(self, input)`` (:data:`KNOWN_SIGNATURE`); on another torch it leaves the layers alone and warns
once, naming the torch version (docs/architecture.md, "Library internals entflow patches").
"""

from __future__ import annotations

import inspect
import types
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.nn import functional

__all__ = ["KNOWN_SIGNATURE", "MAX_ROWS", "MIN_ROWS", "MIN_WEIGHT", "few_row_linears", "linear_few_rows"]

# docs/benchmarks.md "Few-row linears": MIN_ROWS … MAX_ROWS rows take W @ xᵀ, and only weights of
# at least MIN_WEIGHT entries (one row, more rows and smaller weights were as fast or faster with
# F.linear; the lab's tiny policies keep F.linear, so their rollouts stay bit-identical to
# transformers' own generate)
MIN_ROWS, MAX_ROWS = 2, 32
MIN_WEIGHT = 300_000
#: the parameters of ``torch.nn.Linear.forward`` this module knows (torch 2.x)
KNOWN_SIGNATURE = ("self", "input")

_warned: set[str] = set()  # torch versions already warned about (once per version and process)


def linear_few_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` computed as ``(weight @ xᵀ)ᵀ``: ``x`` ``[..., K]``, ``weight``
    ``[N, K]``, ``bias`` ``[N]`` → ``[..., N]``, contiguous."""
    rows = x.reshape(-1, x.shape[-1])
    out = torch.mm(weight, rows.t()).t().contiguous()
    if bias is not None:
        out = out.add_(bias)
    return out.view(*x.shape[:-1], weight.shape[0])


def _forward(self: torch.nn.Linear, *args: Any, **kwargs: Any) -> Any:
    # the layer is a float32 CPU one (few_row_linears chose it); the input decides the rest
    if len(args) == 1 and not kwargs:
        x = args[0]
    elif not args and len(kwargs) == 1 and "input" in kwargs:
        x = kwargs["input"]
    else:  # a call this module does not read: nn.Linear's own forward answers it
        return torch.nn.Linear.forward(self, *args, **kwargs)
    if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[-1] > 0:
        rows = x.numel() // x.shape[-1]
        if not torch.is_grad_enabled() and x.dtype == torch.float32 and MIN_ROWS <= rows <= MAX_ROWS:
            return linear_few_rows(x, self.weight, self.bias)
    return functional.linear(x, self.weight, self.bias)


def _known_linear_forward() -> bool:
    """Whether ``torch.nn.Linear.forward`` has :data:`KNOWN_SIGNATURE`; warns once per torch version
    when it does not."""
    try:
        params = tuple(inspect.signature(torch.nn.Linear.forward).parameters)
    except (TypeError, ValueError):
        params = None
    if params == KNOWN_SIGNATURE:
        return True
    version = str(torch.__version__)
    if version not in _warned:
        _warned.add(version)
        warnings.warn(
            f"entflow: torch {version}'s nn.Linear.forward{'(' + ', '.join(params) + ')' if params else ''} is not "
            f"the signature entflow knows ({', '.join(KNOWN_SIGNATURE)}); decoding leaves the linear layers to torch "
            "(the same results, without the few-row speed-up)",
            RuntimeWarning,
            stacklevel=4,
        )
    return False


@contextmanager
def few_row_linears(model: torch.nn.Module, min_weight: int = MIN_WEIGHT) -> Iterator[None]:
    """Within the block, every ``nn.Linear`` of ``model`` whose float32 CPU weight has at least
    ``min_weight`` entries computes a no-grad input of ``MIN_ROWS`` … ``MAX_ROWS`` rows as ``(W @ xᵀ)ᵀ``
    (:func:`linear_few_rows`); other inputs and layers as before. The layers are restored on exit,
    also on an error. A no-op on a model with no such layer (a GPU model, bfloat16, the lab's), and,
    with one warning per torch version, where ``nn.Linear.forward``'s signature is not
    :data:`KNOWN_SIGNATURE`."""
    if not _known_linear_forward():
        yield
        return
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
