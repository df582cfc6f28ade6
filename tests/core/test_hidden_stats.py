"""token_stats_from_hidden: values and gradients w.r.t. hidden, weight and bias equal
float64 autograd through explicit logits ``h @ W.T + b`` (``tests/support/hidden_ref.py``), and equal
``token_stats`` on the materialised logits.

Tolerances (absolute, stated per check): float32 input 1e-5 on values and 1e-5 · max(1, max|∇_ref|)
on gradients; bf16 input: values 1e-5 against the float64 reference on the bf16-rounded inputs
(the arithmetic is float32), gradients 1e-2 · max|∇_ref| (they are returned in bf16, whose
rounding alone is 2⁻⁹ relative); float64 input 1e-10.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import entflow as ef
from entflow.core.hidden_stats import token_stats_from_hidden
from entflow.errors import NonFiniteError, ParameterError, ShapeError
from support.hidden_ref import NAMES, make_inputs, objective, reference
from support.triton_subprocess import run_check_file

TWO = ("logp", "entropy")


def _err(a, b):
    return (a.detach().double() - b).abs().max().item()


def _check(out, vals, stats, tol):
    for i, name in enumerate(NAMES):
        got = getattr(out, name)
        if name not in stats:
            assert got is None, name
        else:
            assert _err(got, vals[i]) <= tol, name


def _grad_tol(ref_grads, dtype):
    scale = max(g.abs().max().item() for g in ref_grads)
    return 1e-2 * scale if dtype == torch.bfloat16 else 1e-5 * max(1.0, scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("stats", [NAMES, TWO, ("sum_p2_logp",), ("entropy", "sum_p2")])
def test_values_and_gradients_match_float64(gen, dtype, temperature, stats):
    """Chunks that divide neither N = 15 nor V = 53 (4 rows × 11 columns: 4 row chunks, 5 vocabulary chunks)."""
    h, w, b, ids, coef = make_inputs(gen)
    x = [t.to(dtype).requires_grad_(True) for t in (h, w, b)]
    out = token_stats_from_hidden(*x[:2], ids, x[2], temperature, stats=stats, chunk_rows=4, chunk_vocab=11)
    got = torch.autograd.grad(objective(out, coef, stats), x)
    vals, ref = reference(*(t.detach() for t in x), ids, temperature, coef, stats)  # on the rounded inputs
    _check(out, vals, stats, 1e-5)
    assert all(getattr(out, n).dtype == torch.float32 for n in stats)
    tol = _grad_tol(ref, dtype)
    for name, g, r in zip(("hidden", "weight", "bias"), got, ref, strict=True):
        assert g.dtype == dtype and g.shape == r.shape
        assert _err(g, r) <= tol, name
    assert min(r.abs().max().item() for r in ref) > 1e-2  # the gradients are not trivially zero


def test_float64_is_exact_and_one_chunk_equals_many(gen):
    h, w, _, ids, coef = make_inputs(gen, bias=False)
    vals, ref = reference(h, w, None, ids, 1.3, coef)
    results = []
    for rows, cols in ((4, 11), (None, None), (1, 1)):
        x = [t.clone().requires_grad_(True) for t in (h, w)]
        out = token_stats_from_hidden(*x, ids, temperature=1.3, chunk_rows=rows, chunk_vocab=cols)
        assert out.logp.dtype == torch.float64
        _check(out, vals, NAMES, 1e-10)
        got = torch.autograd.grad(objective(out, coef), x)
        for g, r in zip(got, ref, strict=True):
            assert _err(g, r) <= 1e-10
        results.append(torch.stack(list(out)))
    assert torch.allclose(results[0], results[2], atol=1e-12, rtol=0)


def test_equals_token_stats_on_materialised_logits(gen):
    """The library's own token_stats on ``h @ W.T + b`` (float32) gives the same statistics and gradients."""
    h, w, b, ids, coef = make_inputs(gen, lead=(2, 9), d=16, v=300)
    res = []
    for fn in ("hidden", "logits"):
        x = [t.float().requires_grad_(True) for t in (h, w, b)]
        if fn == "hidden":
            out = token_stats_from_hidden(*x[:2], ids, x[2], 0.8, chunk_vocab=64)
        else:
            out = ef.token_stats(x[0] @ x[1].T + x[2], ids, 0.8)
        res.append((out, torch.autograd.grad(objective(out, coef), x)))
    (a, ga), (b_, gb) = res
    for name in NAMES:
        assert _err(getattr(a, name), getattr(b_, name).double()) <= 1e-5, name
    for g1, g2 in zip(ga, gb, strict=True):
        assert _err(g1, g2.double()) <= 1e-5 * max(1.0, g2.abs().max().item())


def test_masked_rows_cost_nothing_and_get_zero(gen):
    h, w, b, ids, coef = make_inputs(gen)
    mask = torch.rand(ids.shape, generator=gen) > 0.4
    mask[0, 0], mask[1, 2] = False, True
    x = [t.float().requires_grad_(True) for t in (h, w, b)]
    out = token_stats_from_hidden(*x[:2], ids, x[2], row_mask=mask, chunk_rows=4, chunk_vocab=11)
    got = torch.autograd.grad(objective(out, coef), x)
    vals, ref = reference(h, w, b, ids, 1.0, coef * mask)  # masked rows carry no gradient
    for i, name in enumerate(NAMES):
        o = getattr(out, name)
        assert bool((o[~mask] == 0).all()), name
        assert _err(o[mask], vals[i][mask]) <= 1e-5, name
    for g, r in zip(got, ref, strict=True):
        assert _err(g, r) <= 1e-5 * max(1.0, r.abs().max().item())
    assert bool((got[0][~mask] == 0).all())


class _Largest(TorchDispatchMode):
    """Records the element count of the largest tensor any op produces."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_logits_never_exist(gen):
    """No op in the forward or backward produces a tensor as large as the [N, V] logits: the largest
    is the ∇W result [V, D] or a [chunk_rows, chunk_vocab] tile."""
    n, d, v, rows, cols = 64, 8, 500, 16, 64
    h, w, b, ids, coef = make_inputs(gen, lead=(n,), d=d, v=v)
    x = [t.float().requires_grad_(True) for t in (h, w, b)]
    with _Largest() as rec:
        out = token_stats_from_hidden(*x[:2], ids, x[2], chunk_rows=rows, chunk_vocab=cols)
        torch.autograd.grad(objective(out, coef), x)
    assert rec.largest == max(v * d, rows * cols)
    assert rec.largest < n * v / 6
    with _Largest() as rec:  # the mode does see an [N, V] tensor when one exists
        ef.token_stats(x[0] @ x[1].T, ids)
    assert rec.largest >= n * v


def test_very_negative_and_minus_inf_bias_are_masked_vocabulary(gen):
    """Bias entries of −1e30 and −inf give π = 0: the statistics equal those of the vocabulary
    without those entries (an independent reference), and their weight/bias rows get zero gradient."""
    h, w, b, ids, coef = make_inputs(gen, v=40)
    dead = torch.tensor([0, 3, 17, 18, 19, 39])
    b[dead[:3]] = -1e30
    b[dead[3:]] = float("-inf")
    alive = torch.ones(40, dtype=torch.bool)
    alive[dead] = False
    ids = torch.where(alive[ids], ids, 5)
    new_id = torch.cumsum(alive.long(), 0) - 1  # index in the reduced vocabulary
    vals, ref = reference(h, w[alive], b[alive], new_id[ids], 0.9, coef)
    x = [t.float().requires_grad_(True) for t in (h, w, b)]
    out = token_stats_from_hidden(*x[:2], ids, x[2], 0.9, chunk_rows=4, chunk_vocab=3)  # an all-dead tile: 18..20
    got = torch.autograd.grad(objective(out, coef), x)
    _check(out, vals, NAMES, 1e-5)
    assert all(bool(torch.isfinite(g).all()) for g in got)
    assert _err(got[0], ref[0]) <= 1e-5 * max(1.0, ref[0].abs().max().item())
    assert _err(got[1][alive], ref[1]) <= 1e-5 * max(1.0, ref[1].abs().max().item())
    assert _err(got[2][alive], ref[2]) <= 1e-5
    assert bool((got[1][dead] == 0).all()) and bool((got[2][dead] == 0).all())


@pytest.mark.parametrize("scale", [1e-6, 300.0])
def test_extreme_magnitudes(gen, scale):
    """Near-uniform (logits ~1e-6: H ≈ log V) and near-one-hot (logits ~1e3) rows; tolerance
    1e-5 · max(1, max|z|) (float32 rounding of the matmul grows with the logits)."""
    h, w, _, ids, coef = make_inputs(gen, bias=False, scale=scale)
    z_max = (h @ w.T).abs().max().item()
    vals, ref = reference(h, w, None, ids, 1.0, coef)
    x = [t.float().requires_grad_(True) for t in (h, w)]
    out = token_stats_from_hidden(*x, ids, chunk_rows=4, chunk_vocab=11)
    got = torch.autograd.grad(objective(out, coef), x)
    tol = 1e-5 * max(1.0, z_max)
    _check(out, vals, NAMES, tol)
    for g, r in zip(got, ref, strict=True):
        assert _err(g, r) <= 1e-5 * max(1.0, r.abs().max().item()) * max(1.0, z_max / 100)
    if scale > 1:
        assert vals[1].max() < 1e-3 and out.logp.min() < -100  # really one-hot, and the tails are far
    else:
        assert torch.allclose(vals[1], torch.full_like(vals[1], torch.log(torch.tensor(53.0)).item()), atol=1e-4)


def test_overflowing_logits_are_reported(gen):
    h, w, _, ids, _ = make_inputs(gen, bias=False)
    h = h.float() * 1e20
    with pytest.raises(NonFiniteError, match=r"hidden @ weight\.T"):
        token_stats_from_hidden(h, w.float() * 1e20, ids)


def test_tied_embedding_gradient_accumulates(gen):
    """weight shared with the input embedding: its gradient is the sum of both uses (float64 autograd
    through explicit logits as the reference)."""
    v, d = 37, 6
    emb = torch.randn(v, d, generator=gen, dtype=torch.float64)
    mix = torch.randn(d, d, generator=gen, dtype=torch.float64)
    inp = torch.randint(0, v, (4, 5), generator=gen)
    ids = torch.randint(0, v, (4, 5), generator=gen)
    coef = torch.randn(4, 4, 5, generator=gen, dtype=torch.float64)

    def grads(use_hidden: bool, dtype):
        e = emb.to(dtype).requires_grad_(True)
        hidden = torch.tanh(e[inp] @ mix.to(dtype))  # the embedding feeds the hidden state
        if use_hidden:
            out = token_stats_from_hidden(hidden, e, ids, chunk_rows=3, chunk_vocab=8)
            obj = objective(out, coef)
        else:
            from support.core_ref import ref_softmax_stats

            vals = ref_softmax_stats(hidden @ e.T, ids)
            obj = sum((coef[i] * vals[i]).sum() for i in range(4))
        (g,) = torch.autograd.grad(obj, e)
        return g

    ref = grads(False, torch.float64)
    got = grads(True, torch.float32)
    assert _err(got, ref) <= 1e-5 * max(1.0, ref.abs().max().item())
    # both uses contribute: the head-only gradient (hidden detached) is far from the total
    e = emb.float().requires_grad_(True)
    hidden = torch.tanh(emb[inp] @ mix).float()
    (head_only,) = torch.autograd.grad(objective(token_stats_from_hidden(hidden, e, ids), coef), e)
    assert _err(head_only, ref) > 100 * 1e-5 * max(1.0, ref.abs().max().item())


def test_frozen_weight_and_partial_gradients(gen):
    """Only hidden requires grad, and only the entropy is differentiated (logp is used detached)."""
    h, w, b, ids, coef = make_inputs(gen)
    hx = h.float().requires_grad_(True)
    out = token_stats_from_hidden(hx, w.float(), ids, b.float(), stats=TWO, chunk_rows=4, chunk_vocab=11)
    (g,) = torch.autograd.grad((coef[1] * out.entropy).sum() + out.logp.detach().sum(), hx)
    _, ref = reference(h, w, b, ids, 1.0, coef, stats=("entropy",))
    assert _err(g, ref[0]) <= 1e-5 * max(1.0, ref[0].abs().max().item())


def test_empty_rows(gen):
    h, w, _, _, _ = make_inputs(gen)
    hx, wx = h.float()[:0].requires_grad_(True), w.float().requires_grad_(True)
    out = token_stats_from_hidden(hx, wx, torch.zeros(0, 5, dtype=torch.long))
    assert out.logp.shape == (0, 5)
    gh, gw = torch.autograd.grad(sum(o.sum() for o in out), (hx, wx))
    assert gh.shape == hx.shape and bool((gw == 0).all())


def test_bad_input_names_the_argument(gen):
    h, w, b, ids, _ = make_inputs(gen)
    h, w, b = h.float(), w.float(), b.float()
    cases = [
        (ShapeError, "weight", dict(weight=w[:, :-1])),
        (ShapeError, "token_ids", dict(token_ids=ids[:, :-1])),
        (ShapeError, "bias", dict(bias=b[:-1])),
        (ShapeError, "row_mask", dict(row_mask=torch.ones(2, 2, dtype=torch.bool))),
        (ShapeError, "token_ids", dict(token_ids=ids.clone().fill_(53))),
        (ShapeError, "token_ids", dict(token_ids=ids.clone().fill_(-1))),
        (ParameterError, "token_ids", dict(token_ids=ids.float())),
        (ParameterError, "temperature", dict(temperature=0.0)),
        (ParameterError, "chunk_rows", dict(chunk_rows=0)),
        (ParameterError, "chunk_vocab", dict(chunk_vocab=2.5)),
        (ParameterError, "stats", dict(stats=("logp", "varentropy"))),
        (ParameterError, "backend", dict(backend="cuda")),
    ]
    nan_h, inf_w, nan_b, pinf_b, dead_b = h.clone(), w.clone(), b.clone(), b.clone(), b.clone()
    nan_h[1, 2, 3] = float("nan")
    inf_w[4, 0] = float("inf")
    nan_b[7] = float("nan")
    pinf_b[8] = float("inf")
    dead_b[ids[0, 0]] = float("-inf")  # a sampled token's logit would be −inf
    cases += [
        (NonFiniteError, "hidden", dict(hidden=nan_h)),
        (NonFiniteError, "weight", dict(weight=inf_w)),
        (NonFiniteError, "bias", dict(bias=nan_b)),
        (NonFiniteError, "bias", dict(bias=pinf_b)),
        (NonFiniteError, "bias", dict(bias=torch.full_like(b, float("-inf")))),
        (ShapeError, "token_ids", dict(bias=dead_b)),
    ]
    base = dict(hidden=h, weight=w, token_ids=ids, bias=b)
    for err, field, change in cases:
        kw = {**base, **change}
        with pytest.raises(err) as info:
            token_stats_from_hidden(**kw)
        assert field in str(info.value), (field, str(info.value))
        if hasattr(info.value, "field"):
            assert info.value.field == field
    token_stats_from_hidden(**base)  # the unchanged input is accepted


ROOT = Path(__file__).resolve().parents[2]
CHECKS = ROOT / "tests" / "support" / "hidden_triton_checks.py"


def _run_triton_checks(interpret: bool) -> None:
    run_check_file(CHECKS, 36, interpret)


def test_triton_tile_kernels_on_cpu_interpreter():
    """The Triton backend under TRITON_INTERPRET=1 in a fresh process (Triton reads the variable
    when first imported); every check in ``hidden_triton_checks.py`` must run and pass."""
    _run_triton_checks(interpret=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_triton_tile_kernels_on_cuda():
    _run_triton_checks(interpret=False)


def test_hidden_as_a_strided_view(gen):
    """``last_hidden_state[:, :-1]`` (a non-contiguous view) gives the same statistics and gradient
    as its contiguous copy."""
    full = torch.randn(3, 6, 7, generator=gen)
    w = torch.randn(53, 7, generator=gen)
    ids = torch.randint(0, 53, (3, 5), generator=gen)
    coef = torch.randn(4, 3, 5, generator=gen, dtype=torch.float64)
    res = []
    for contiguous in (False, True):
        x = full.clone().requires_grad_(True)
        h = x[:, :-1].contiguous() if contiguous else x[:, :-1]
        out = token_stats_from_hidden(h, w, ids, chunk_rows=4, chunk_vocab=11)
        res.append((torch.stack(list(out)), torch.autograd.grad(objective(out, coef), x)[0]))
    assert torch.equal(res[0][0], res[1][0]) and torch.equal(res[0][1], res[1][1])
    assert res[0][1][:, -1].abs().max() == 0 and res[0][1][:, :-1].abs().max() > 1e-3


@pytest.mark.parametrize("rows", [None, 4])
def test_bf16_weight_gradient_one_or_many_row_chunks(gen, rows):
    """bf16 weights: ∇W is written once per vocabulary chunk (one row chunk) or accumulated in
    float32 over row chunks; both match float64 to bf16 rounding (1e-2 · max|∇_ref|)."""
    h, w, b, ids, coef = make_inputs(gen)
    x = [t.to(torch.bfloat16).requires_grad_(True) for t in (h, w, b)]
    out = token_stats_from_hidden(*x[:2], ids, x[2], chunk_rows=rows, chunk_vocab=11)
    got = torch.autograd.grad(objective(out, coef), x)
    _, ref = reference(*(t.detach() for t in x), ids, 1.0, coef)
    for g, r in zip(got, ref, strict=True):
        assert g.dtype == torch.bfloat16
        assert _err(g, r) <= 1e-2 * r.abs().max().item()
