"""Checks of the fused Triton kernels of token_stats_from_hidden (``backend="triton"``) against the
float64 reference.

Not collected by itself (no ``test_`` prefix): ``tests/core/test_token_stats_from_hidden.py`` runs
this file in a fresh process under ``TRITON_INTERPRET=1`` (Triton reads it when first imported), on
CPU tensors, and, when a GPU is present, once more without the interpreter on CUDA tensors.
Small shapes (the interpreter runs the kernels in Python): N = 10 rows in chunks of 4, V = 45 in
chunks of 20 (vocabulary tiles of 20, 20 and 5 columns; kernel blocks of 32 and 8), so the online
rescaling across tiles, partial blocks and a last narrow tile are all exercised.
Tolerances as in the torch tests: values 1e-5; gradients 1e-5 · max(1, max|∇_ref|) for float32,
1e-2 · max|∇_ref| for bf16.
"""

from __future__ import annotations

import os

import pytest
import torch

from entflow.core.hidden_stats import token_stats_from_hidden
from support.hidden_ref import NAMES, make_inputs, objective, reference

pytest.importorskip("triton")
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICES = ["cpu"] if INTERPRET else (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def _err(a, b):
    return (a.detach().double() - b).abs().max().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("stats", [NAMES, ("logp", "entropy")])
def test_triton_values_and_gradients_match_float64(gen, device, dtype, stats):
    h, w, b, ids, coef = make_inputs(gen, lead=(2, 5), d=6, v=45)
    b[7] = float("-inf")  # a masked vocabulary entry
    b[30:33] = -1e30
    ids = torch.where((ids == 7) | ((ids >= 30) & (ids < 33)), 8, ids)
    x = [t.to(device, dtype).requires_grad_(True) for t in (h, w, b)]
    out = token_stats_from_hidden(
        *x[:2], ids.to(device), x[2], 0.7, stats=stats, chunk_rows=4, chunk_vocab=20, backend="triton"
    )
    out = type(out)(*(None if o is None else o.cpu() for o in out))
    got = [g.cpu() for g in torch.autograd.grad(objective(out, coef, stats), x)]
    vals, ref = reference(*(t.detach().cpu() for t in x), ids, 0.7, coef, stats, floor=-1e30)
    for i, name in enumerate(NAMES):
        if name in stats:
            assert getattr(out, name).dtype == torch.float32
            assert _err(getattr(out, name), vals[i]) <= 1e-5, name
        else:
            assert getattr(out, name) is None
    scale = max(r.abs().max().item() for r in ref)
    tol = 1e-2 * scale if dtype == torch.bfloat16 else 1e-5 * max(1.0, scale)
    for name, g, r in zip(("hidden", "weight", "bias"), got, ref, strict=True):
        assert g.dtype == dtype and bool(torch.isfinite(g).all())
        assert _err(g, r) <= tol, name
    assert bool((got[2][7] == 0).all())


@pytest.mark.parametrize("stats", [("sum_p2",), ("entropy", "sum_p2_logp")])
def test_triton_equals_torch_backend(gen, device, stats):
    """The two backends agree on values and gradients (with row_mask), to float32 rounding (on an H100
    the gradients differed by 1.2e-6 at a largest gradient of 1.01)."""
    h, w, b, ids, coef = make_inputs(gen, lead=(2, 5), d=6, v=45)
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[0, 1] = mask[1, 4] = False
    res = []
    for backend in ("triton", "torch"):
        x = [t.to(device, torch.float32).requires_grad_(True) for t in (h, w, b)]
        out = token_stats_from_hidden(
            *x[:2], ids.to(device), x[2], 1.4, stats=stats, chunk_rows=4, chunk_vocab=20, row_mask=mask.to(device),
            backend=backend,
        )  # fmt: skip
        out = type(out)(*(None if o is None else o.cpu() for o in out))
        grads = [g.cpu() for g in torch.autograd.grad(objective(out, coef, stats), x)]
        res.append(([getattr(out, s) for s in stats], grads))
    (va, ga), (vb, gb) = res
    for a, b_ in zip(va, vb, strict=True):
        assert _err(a, b_.double()) <= 1e-6
    for a, b_ in zip(ga, gb, strict=True):  # a few float32 ulps: the backends round exp and log differently
        assert _err(a, b_.double()) <= 4e-6 * max(1.0, b_.abs().max().item())


# The fused kernels at tiles far smaller than the shapes: 16 × 16 tiles with 16 of D per dot, so
# N = 37 rows span three row tiles (the last of 5 rows), D = 40 three dot steps (the last of 8),
# and V = 100 two vocabulary splits of four and three tiles (the last of 4 columns): the on-chip
# fold rescales across tiles, the splits are merged, and every edge is ragged.
SMALL_TILES = {"BM": 16, "BN": 16, "BK": 16, "num_warps": 4, "num_stages": 1}


@pytest.fixture(
    params=[{"flat": False}, {"flat": True}, {"flat": False, "waves": 2}], ids=["tile_loop", "flat_loop", "waves2"]
)
def small_tiles(request, monkeypatch):
    """Both forms of the forward kernel (a loop over D inside a loop over tiles, and one flat loop), and
    the splits sized in waves (2 waves of the interpreter's 4 "SMs" over 3 row tiles: 2 splits)."""
    from entflow.core import _triton_hidden_kernels as fused

    for kind in fused.CONFIGS:
        tiles = SMALL_TILES if kind.endswith("_grad") else {**SMALL_TILES, **request.param}
        monkeypatch.setitem(fused.CONFIGS, kind, tiles)
    return fused


def _fused_case(gen, device, dtype, stats, chunks):
    h, w, b, ids, coef = make_inputs(gen, lead=(37,), d=40, v=100, scale=0.5)
    b[7] = float("-inf")  # a masked vocabulary entry
    b[60:63] = -1e30
    ids = torch.where((ids == 7) | ((ids >= 60) & (ids < 63)), 8, ids)
    x = [t.to(device, dtype).requires_grad_(True) for t in (h, w, b)]
    out = token_stats_from_hidden(*x[:2], ids.to(device), x[2], 0.7, stats=stats, backend="triton", **chunks)
    out = type(out)(*(None if o is None else o.cpu() for o in out))
    got = [g.cpu() for g in torch.autograd.grad(objective(out, coef, stats), x)]
    vals, ref = reference(*(t.detach().cpu() for t in x), ids, 0.7, coef, stats, floor=-1e30)
    val_err = max(_err(getattr(out, n), vals[i]) for i, n in enumerate(NAMES) if n in stats)
    scale = max(r.abs().max().item() for r in ref)
    grad_err = max(_err(g, r) for g, r in zip(got, ref, strict=True)) / max(1.0, scale)
    return val_err, grad_err, got, ref


def test_fused_kernel_splits_and_ragged_tiles(small_tiles, device):
    h = torch.randn(37, 40, device=device)
    w = torch.randn(100, 40, device=device)
    ids = torch.zeros(37, dtype=torch.long, device=device)
    m = small_tiles.hidden_fold(h, w, None, ids, 1.0, (True, True, True))[0]
    assert m.shape == (2, 37)  # two vocabulary splits to merge


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("stats", [NAMES, ("logp", "entropy")])
@pytest.mark.parametrize("chunks", [{}, {"chunk_rows": 20, "chunk_vocab": 48}])
def test_fused_kernel_small_tiles_match_float64(gen, device, small_tiles, dtype, stats, chunks):
    """Values to 1e-5; gradients to 1e-5 (float32) or 1e-2 (bf16: the inputs' rounding) of the
    largest reference gradient; the backward's row and vocabulary chunks are ragged too."""
    val_err, grad_err, got, _ = _fused_case(gen, device, dtype, stats, chunks)
    assert val_err <= 1e-5
    assert grad_err <= (1e-2 if dtype == torch.bfloat16 else 1e-5)
    assert bool((got[2][7] == 0).all())  # the masked entry gets no gradient


def test_fused_kernel_fault_a_tile_left_out_is_caught(gen, device, small_tiles, monkeypatch):
    """An injected fault, the fold starting one tile late in each split, must fail the float64 check."""
    val_err, grad_err, _, _ = _fused_case(gen, device, torch.float32, NAMES, {})
    assert val_err <= 1e-5 and grad_err <= 1e-5
    monkeypatch.setattr(small_tiles, "_FAULT_SKIP_TILES", 1)
    val_err, _, _, _ = _fused_case(gen, device, torch.float32, NAMES, {})
    assert val_err > 1e-2
