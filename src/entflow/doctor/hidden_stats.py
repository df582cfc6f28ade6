"""Check ``token_stats_from_hidden`` (the four statistics straight from the last hidden state and
the LM head's weight, and their gradients w.r.t. hidden, weight and bias) on a device.

Every variant (dtype × torch tiles / the fused Triton kernels) is compared with float64 autograd through the
explicit logits ``hidden @ weight.T + bias`` of the very same (already rounded) inputs, so the
error measured is the computation's own. Formulas: docs/design.md §3; the tiling: docs/benchmarks.md
(token_stats_from_hidden).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from entflow.core.hidden_stats import token_stats_from_hidden
from entflow.core.token_stats import TokenStats
from entflow.doctor.result import CheckResult, max_relative_to_peak
from entflow.doctor.token_stats import (
    TEMPERATURE,
    dtype_variant_checks,
    forward_error_then_backward,
    reference_token_stats,
    triton_skip_reason,
)

# largest error allowed: forward = max |got − ref| / max(1, |ref|) over the four statistics (every
# dtype is computed in float32 from the exact input values; the D-term dot products add float32
# round-off to the logits, hence a little more room than token_stats' 2e-5); gradient =
# max |got − ref| / max |ref| over ∇hidden, ∇weight, ∇bias (returned in the inputs' dtype: bf16
# rounding, 2^-8 relative, sets its bound)
FORWARD_TOL = {torch.float32: 5e-5, torch.bfloat16: 5e-5}
GRAD_TOL = {torch.float32: 5e-5, torch.bfloat16: 8e-3}

HiddenStatsFn = Callable[..., TokenStats]


def shape_for(device: torch.device, quick: bool) -> tuple[int, int, int]:
    """``(N, D, V)`` of the checked hidden states and head: Qwen2.5-0.5B's head on a GPU."""
    if device.type == "cpu":
        return (24, 32, 3001) if quick else (64, 64, 32003)
    return (128, 896, 151936) if quick else (512, 896, 151936)


def make_inputs(shape: tuple[int, int, int], seed: int = 0) -> dict[str, torch.Tensor]:
    """float64 CPU inputs: ``hidden [N, D]``, ``weight [V, D]``, ``bias [V]`` giving logits of
    spread ~3 with a few dominant tokens (large bias entries), sampled ``ids [N]`` and random
    weights ``upstream [4, N]`` for the four statistics' gradients."""
    n, d, v = shape
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=g, dtype=torch.float64)
    weight = torch.randn(v, d, generator=g, dtype=torch.float64) * (2.5 / d**0.5)
    bias = torch.randn(v, generator=g, dtype=torch.float64)
    bias[torch.randint(0, v, (8,), generator=g)] += 8.0
    logits = torch.addmm(bias, hidden, weight.t())
    ids = torch.multinomial(torch.softmax(logits / TEMPERATURE, -1), 1, generator=g).view(n)
    upstream = torch.randn(4, n, generator=g, dtype=torch.float64)
    return {"hidden": hidden, "weight": weight, "bias": bias, "ids": ids, "upstream": upstream}


def _variants(device: torch.device) -> list[tuple[str, dict | str]]:
    """``(variant, options)``, or ``(variant, why it is skipped)``: small tiles (several row and
    vocabulary chunks, the last ones ragged) with torch ops, and the fused Triton kernels on CUDA."""
    tiles = {"chunk_rows": 7, "chunk_vocab": 1000} if device.type == "cpu" else {"chunk_rows": 96, "chunk_vocab": 8192}
    triton_skip = triton_skip_reason(device, "the fused Triton kernels need")
    return [
        ("tiled", {"backend": "torch", **tiles}),
        ("triton", triton_skip if triton_skip else {"backend": "triton", **tiles}),
    ]


def check_one(
    fn: HiddenStatsFn, device: torch.device, dtype: torch.dtype, options: dict, shape: tuple[int, int, int]
) -> tuple[float, float]:
    """(forward error, gradient error) of ``fn(hidden, weight, ids, bias, TEMPERATURE, **options)``
    against float64 autograd through ``hidden @ weight.T + bias`` on the same rounded inputs."""
    x = make_inputs(shape)
    ref_device = device if device.type == "cuda" else torch.device("cpu")  # MPS has no float64
    leaves = {k: x[k].to(device=device, dtype=dtype).requires_grad_() for k in ("hidden", "weight", "bias")}
    refs = {k: v.detach().to(ref_device, torch.float64).requires_grad_() for k, v in leaves.items()}
    ids = x["ids"]
    got = fn(leaves["hidden"], leaves["weight"], ids.to(device), leaves["bias"], TEMPERATURE, **options)
    logits = torch.addmm(refs["bias"], refs["hidden"], refs["weight"].t())  # the explicit [N, V] logits
    ref = reference_token_stats(logits, ids.to(ref_device), TEMPERATURE)
    fwd = forward_error_then_backward(got, ref, x["upstream"])
    grad = max(max_relative_to_peak(leaves[k].grad, refs[k].grad) for k in leaves)
    return fwd, grad


def check_hidden_stats(
    device: str | torch.device, quick: bool = False, fn: HiddenStatsFn = token_stats_from_hidden
) -> list[CheckResult]:
    """One result per dtype (float32, bf16) × variant (torch tiles, the fused Triton kernels on CUDA):
    forward and gradient error against float64, each within its dtype's tolerance.

    ``fn`` is the function under test (``token_stats_from_hidden``'s signature); tests pass a
    faulty one."""
    device = torch.device(device)
    shape = shape_for(device, quick)
    return dtype_variant_checks(
        "hidden_stats",
        device,
        shape,
        "N×D×V",
        _variants(device),
        lambda dtype, options: check_one(fn, device, dtype, options, shape),
        FORWARD_TOL,
        GRAD_TOL,
    )
