"""Check ``token_stats`` (logp, entropy, Σπ², Σπ² log π and their gradient) on a device.

Every variant (dtype × torch unchunked / torch chunked / Triton) is compared with a float64
``log_softmax`` reference computed from the very same (already rounded) logits, so the error
measured is the computation's own, not the input's rounding. Formulas: docs/design.md §3.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from entflow.core.token_stats import STAT_NAMES, TokenStats, token_stats
from entflow.doctor.result import CheckResult, compared, max_relative_to_peak, max_scaled_error, skipped, timed

# largest error allowed: forward = max |got − ref| / max(1, |ref|) over the four statistics
# (every dtype is computed in float32 from the exact input values, so one bound serves all);
# gradient = max |got − ref| / max |ref| (the gradient is returned in the logits' dtype: bf16
# rounding, 2^-8 relative, sets its bound)
FORWARD_TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-5, torch.float16: 2e-5}
GRAD_TOL = {torch.float32: 2e-5, torch.bfloat16: 8e-3, torch.float16: 2e-3}
TEMPERATURE = 0.8

TokenStatsFn = Callable[..., TokenStats]


def shape_for(device: torch.device, quick: bool) -> tuple[int, int, int]:
    """``(B, T, V)`` of the checked logits: a real vocabulary (Qwen's 151,936) on a GPU."""
    if device.type == "cpu":
        return (2, 8, 3001) if quick else (4, 16, 32003)
    return (2, 64, 151936) if quick else (2, 256, 151936)


def reference_token_stats(logits: torch.Tensor, ids: torch.Tensor, temperature: float) -> TokenStats:
    """The four statistics of ``logits`` ``[B, T, V]`` at ``ids`` ``[B, T]``, from float64
    ``log_softmax`` (autograd-differentiable): logp = log π_k, H = −Σ π log π, Σπ², Σπ² log π."""
    log_pi = torch.log_softmax(logits.double() / temperature, dim=-1)
    pi = log_pi.exp()
    logp = log_pi.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    return TokenStats(logp, -(pi * log_pi).sum(-1), (pi * pi).sum(-1), (pi * pi * log_pi).sum(-1))


def make_logits(shape: tuple[int, int, int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logits [B, T, V] float64, ids [B, T], upstream [4, B, T])`` on the CPU: logits with a
    spread like a trained model's (a few dominant tokens per row), sampled ids, random weights
    for the four statistics' gradients."""
    B, T, V = shape
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64) * 2.0
    top = torch.randint(0, V, (B, T, 4), generator=g)
    logits.scatter_add_(-1, top, 8.0 + 4.0 * torch.rand(B, T, 4, generator=g, dtype=torch.float64))
    ids = torch.multinomial(torch.softmax(logits.view(-1, V) / TEMPERATURE, -1), 1, generator=g).view(B, T)
    upstream = torch.randn(4, B, T, generator=g, dtype=torch.float64)
    return logits, ids, upstream


def _variants(device: torch.device) -> list[tuple[str, dict | str]]:
    """``(variant, token_stats options)``, or ``(variant, why it is skipped)`` for the Triton
    kernel where it cannot run."""
    triton_skip = triton_skip_reason(device)
    return [
        ("unchunked", {"backend": "torch", "chunk_size": 1 << 30}),
        ("chunked", {"backend": "torch", "chunk_size": 3}),  # chunks cross sequence boundaries
        ("triton", triton_skip if triton_skip else {"backend": "triton"}),
    ]


def triton_skip_reason(device: torch.device, kernel_needs: str = "the Triton kernel needs") -> str | None:
    """Why entflow's Triton kernels cannot run on ``device`` (``kernel_needs`` a CUDA device, or triton is
    not installed), or None where they can."""
    from entflow.core import triton_token_stats

    if not triton_token_stats.available():
        return "triton not installed"
    if device.type != "cuda":
        return f"{kernel_needs} a CUDA device (this is {device.type})"
    return None


def check_one(
    fn: TokenStatsFn, device: torch.device, dtype: torch.dtype, options: dict, shape: tuple[int, int, int]
) -> tuple[float, float]:
    """(forward error, gradient error) of ``fn(logits, ids, TEMPERATURE, **options)`` against the
    float64 reference on the same rounded logits."""
    logits64, ids, upstream = make_logits(shape)
    x = logits64.to(device=device, dtype=dtype).requires_grad_()
    ref_device = device if device.type == "cuda" else torch.device("cpu")  # MPS has no float64
    x_ref = x.detach().to(ref_device, torch.float64).requires_grad_()
    got = fn(x, ids.to(device), TEMPERATURE, **options)
    ref = reference_token_stats(x_ref, ids.to(ref_device), TEMPERATURE)
    fwd = forward_error_then_backward(got, ref, upstream)
    return fwd, max_relative_to_peak(x.grad, x_ref.grad)


def forward_error_then_backward(got: TokenStats, ref: TokenStats, upstream: torch.Tensor) -> float:
    """The forward error of ``got`` against the float64 reference ``ref`` (the largest
    :func:`max_scaled_error` of the four statistics); then the backward of both through the same
    random weights ``upstream [4, N]`` of the four statistics (float32 for ``got``), so that the
    callers compare the gradients of their inputs."""
    fwd = max(max_scaled_error(getattr(got, s), getattr(ref, s)) for s in STAT_NAMES)
    device, ref_device = got.logp.device, ref.logp.device
    w = upstream.to(device=device, dtype=torch.float32)
    sum(
        ((getattr(got, s).float() * w[i]).sum() for i, s in enumerate(STAT_NAMES)), torch.zeros((), device=device)
    ).backward()
    w64 = upstream.to(ref_device)
    sum((getattr(ref, s) * w64[i]).sum() for i, s in enumerate(STAT_NAMES)).backward()
    return fwd


def dtype_variant_checks(
    family: str,
    device: torch.device,
    shape: tuple[int, ...],
    shape_label: str,
    variants: list[tuple[str, dict | str]],
    check_one: Callable[[torch.dtype, dict], tuple[float, float]],
    forward_tol: dict[torch.dtype, float],
    grad_tol: dict[torch.dtype, float],
) -> list[CheckResult]:
    """One result per dtype (float32, bf16) × variant: ``check_one(dtype, options)`` gives the
    (forward, gradient) errors against float64, each judged against its dtype's tolerance
    (``forward_tol``, ``grad_tol``). A variant
    whose options are a string is skipped with that reason. Shared by ``token_stats`` and
    ``hidden_stats``."""
    results: list[CheckResult] = []
    for dtype in (torch.float32, torch.bfloat16):
        dname = str(dtype).removeprefix("torch.")
        for variant, options in variants:
            name = f"{family}[{device.type},{dname},{variant}]"
            if isinstance(options, str):
                results.append(skipped(name, options))
                continue

            def run(name=name, options=options, dtype=dtype) -> CheckResult:
                fwd, grad = check_one(dtype, options)
                e_f, e_g = fwd / forward_tol[dtype], grad / grad_tol[dtype]
                r = compared(name, max(e_f, e_g), 1.0, "worst error/tol")
                r.detail = (
                    f"forward {fwd:.1e} (tol {forward_tol[dtype]:.0e}), gradient {grad:.1e} "
                    f"(tol {grad_tol[dtype]:.0e}) at {shape_label}={'×'.join(map(str, shape))}"
                )
                r.error, r.tolerance = max(e_f, e_g), 1.0
                r.measurements = {"forward_error": fwd, "gradient_error": grad}
                return r

            results += timed(name, run)
    return results


def check_token_stats(
    device: str | torch.device, quick: bool = False, fn: TokenStatsFn = token_stats
) -> list[CheckResult]:
    """One result per dtype (float32, bf16) × variant (torch unchunked, torch chunked, Triton on
    CUDA): forward and gradient error against float64, each within its dtype's tolerance.

    ``fn`` is the function under test (``token_stats``'s signature); tests pass a faulty one."""
    device = torch.device(device)
    shape = shape_for(device, quick)
    return dtype_variant_checks(
        "token_stats",
        device,
        shape,
        "B×T×V",
        _variants(device),
        lambda dtype, options: check_one(fn, device, dtype, options, shape),
        FORWARD_TOL,
        GRAD_TOL,
    )
