"""Checks of the Triton kernel of token_stats against the float64 reference.

Not collected by itself (no ``test_`` prefix): ``tests/core/test_triton_token_stats.py`` runs
this file in a fresh process, on CPU under Triton's interpreter (``TRITON_INTERPRET=1`` must be
set before Triton is first imported, which a shared test process cannot guarantee) and, when a
GPU is present, once more on CUDA without the interpreter.

Small shapes on purpose: the interpreter runs the kernel in Python. V = 37 with a V tile of 16
makes every row span three tiles, so the online-softmax rescaling is exercised.
"""

from __future__ import annotations

import os

import pytest
import torch
from core_ref import ref_softmax_stats

import entflow as ef

pytest.importorskip("triton")

from entflow.core.triton_token_stats import token_stats_triton

B, T, V, BLOCK = 2, 3, 37, 16
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICES = ["cpu"] if INTERPRET else (["cuda"] if torch.cuda.is_available() else [])
TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2}  # float32 / bf16 input vs float64


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def _inputs(gen, dtype, device):
    """Non-contiguous ``[B, T, V]`` logits (a ``[:, :-1]`` slice) with one −inf entry, and ids."""
    full = torch.randn(B, T + 1, V, generator=gen, dtype=torch.float64) * 3
    full[0, 1, 5] = float("-inf")  # a masked vocabulary entry
    logits = full.to(dtype)[:, :-1]
    ids = torch.randint(0, V, (B, T), generator=gen)
    ids[0, 1] = 6
    return logits.to(device), ids.to(device)


def _reference(logits, ids, temperature, coef):
    """float64 values and gradient of Σ coef·stats; a −inf logit is the limit (π = 0), i.e. -1e4."""
    x64 = logits.detach().cpu().double().masked_fill(torch.isinf(logits.cpu()), -1e4).requires_grad_(True)
    ref = ref_softmax_stats(x64, ids.cpu(), temperature)
    (g,) = torch.autograd.grad(sum((c.cpu().double() * r).sum() for c, r in zip(coef, ref, strict=True)), x64)
    return [r.detach() for r in ref], g


def _err(a, b):
    return (a.detach().cpu().double() - b).abs().max().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("masked", [False, True])
def test_kernel_values_and_gradients_match_float64(gen, device, dtype, temperature, masked):
    logits, ids = _inputs(gen, dtype, device)
    mask = torch.ones(B, T, dtype=torch.bool)
    if masked:
        mask[1, 0] = mask[0, 2] = False
    coef = [torch.randn(B, T, generator=gen) for _ in range(4)]
    x = logits.clone().requires_grad_(True)  # clone keeps the [:, :-1] strides
    outs = token_stats_triton(
        x, ids.reshape(-1), 1.0 / temperature, (True,) * 4, mask.reshape(-1).to(device) if masked else None, BLOCK
    )
    outs = [o.reshape(B, T) for o in outs]
    obj = sum((c.to(device) * o).sum() for c, o in zip(coef, outs, strict=True))
    (g,) = torch.autograd.grad(obj, x)
    ref, g64 = _reference(logits, ids, temperature, [c * mask for c in coef])
    tol = TOL[dtype]
    for name, o, r in zip(ef.TokenStats._fields, outs, ref, strict=True):
        assert o.dtype == torch.float32
        assert _err(o, torch.where(mask, r, 0.0)) <= tol, name
    assert g.dtype == dtype and bool(torch.isfinite(g).all())
    assert _err(g, g64) <= tol, "gradient"
    assert g64.abs().max() > 1e-2  # not trivially zero
    if masked:
        assert bool((g[~mask.to(device)] == 0).all())


@pytest.mark.parametrize("stats", [("logp",), ("logp", "entropy"), ("entropy", "sum_p2_logp")])
def test_kernel_subsets_through_token_stats(gen, device, stats):
    """``ef.token_stats(backend="triton")`` with a subset equals the torch path (values, gradient)."""
    logits, ids = _inputs(gen, torch.float32, device)
    res = {}
    for backend in ("triton", "torch"):
        x = logits.clone().requires_grad_(True)
        out = ef.token_stats(x, ids, temperature=1.3, stats=stats, backend=backend)
        got = [getattr(out, s) for s in stats]
        assert all(getattr(out, s) is None for s in ef.TokenStats._fields if s not in stats)
        (g,) = torch.autograd.grad(sum((k + 1.0) * o.sum() for k, o in enumerate(got)), x)
        res[backend] = (got, g)
    for a, b in zip(res["triton"][0], res["torch"][0], strict=True):
        assert _err(a, b.detach().cpu().double()) <= 1e-5
    assert _err(res["triton"][1], res["torch"][1].cpu().double()) <= 1e-5
