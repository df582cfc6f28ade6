"""token_stats / entropy_from_logits against an independent float64 explicit-softmax reference (docs/design.md §3)."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

import entflow as ef
from support.core_ref import ref_softmax_stats

V = 37  # vocabulary of the test logits
SHAPE = (3, 5)  # N, T → N·T = 15 rows


def _logits(gen, dtype=torch.float32, scale=3.0, shape=SHAPE, vocab=V):
    return (torch.randn(*shape, vocab, generator=gen, dtype=torch.float64) * scale).to(dtype)


def _ids(gen, shape=SHAPE, vocab=V):
    return torch.randint(0, vocab, shape, generator=gen)


def _assert_close(got, want, tol, what):
    assert got.shape == want.shape, what
    err = (got.double() - want.double()).abs().max().item()
    assert err <= tol, f"{what}: max abs error {err:.3e} > {tol:.0e}"


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.6])
@pytest.mark.parametrize("chunk_size", [None, 4])
def test_values_match_float64_reference(gen, temperature, chunk_size):
    logits, ids = _logits(gen), _ids(gen)
    got = ef.token_stats(logits, ids, temperature=temperature, chunk_size=chunk_size)
    want = ref_softmax_stats(logits, ids, temperature)
    for name, g, w in zip(got._fields, got, want, strict=True):
        assert g.dtype == torch.float32
        # float32 evaluation of O(1) quantities over V=37 terms: 1e-4 absolute (docs/design.md §3 round-off)
        _assert_close(g, w, 1e-4, name)
    # sanity of the reference itself: entropy in [0, log V], sum_p2 in (0, 1]
    assert bool((want[1] >= -1e-12).all()) and bool((want[1] <= torch.log(torch.tensor(float(V))) + 1e-9).all())
    assert bool((want[2] > 0).all()) and bool((want[2] <= 1 + 1e-12).all())


def test_temperature_changes_the_result(gen):
    """The temperature is actually applied (otherwise the test above could pass by accident at T≈1)."""
    logits, ids = _logits(gen), _ids(gen)
    a = ef.token_stats(logits, ids, temperature=1.0).entropy
    b = ef.token_stats(logits, ids, temperature=2.0).entropy
    assert (a - b).abs().max().item() > 0.05
    _assert_close(b, ref_softmax_stats(logits / 2.0, ids)[1], 1e-4, "entropy at T=2 vs logits/2")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("chunk_size", [None, 6])
def test_half_precision_input_returns_float32(gen, dtype, chunk_size):
    logits, ids = _logits(gen, dtype=dtype), _ids(gen)
    got = ef.token_stats(logits, ids, temperature=0.9, chunk_size=chunk_size)
    want = ref_softmax_stats(logits, ids, 0.9)  # reference of the same (already rounded) logits
    for name, g, w in zip(got._fields, got, want, strict=True):
        assert g.dtype == torch.float32, name
        _assert_close(g, w, 1e-4, f"{dtype} {name}")  # computed in float32 → float32 round-off, 1e-4
    ent = ef.entropy_from_logits(logits, chunk_size=chunk_size)
    assert ent.dtype == torch.float32
    _assert_close(ent, ref_softmax_stats(logits, ids)[1], 1e-4, f"{dtype} entropy_from_logits")


def test_float64_input_stays_float64(gen):
    logits, ids = _logits(gen, dtype=torch.float64), _ids(gen)
    got = ef.token_stats(logits, ids, chunk_size=4)
    for g, w in zip(got, ref_softmax_stats(logits, ids), strict=True):
        assert g.dtype == torch.float64
        _assert_close(g, w, 1e-12, "float64")  # float64 round-off


def _grads(logits, ids, coef, chunk_size, temperature=1.0):
    x = logits.clone().requires_grad_(True)
    out = ef.token_stats(x, ids, temperature=temperature, chunk_size=chunk_size)
    obj = sum((c * o).sum() for c, o in zip(coef, out, strict=True))
    (g,) = torch.autograd.grad(obj, x)
    return out, g


# 15 rows: 1, 2, 4, 7 and 14 do not divide 15; 5 does; 15 and 100 cover "one chunk" and "chunk > rows"
@pytest.mark.parametrize("chunk_size", [1, 2, 4, 5, 7, 14, 15, 100])
@pytest.mark.parametrize("temperature", [1.0, 0.8])
def test_chunked_equals_unchunked_values_and_gradients(gen, chunk_size, temperature):
    logits, ids = _logits(gen), _ids(gen)
    coef = [torch.randn(SHAPE, generator=gen) for _ in range(4)]  # random linear combination of all four
    ref_out, ref_g = _grads(logits, ids, coef, None, temperature)
    out, g = _grads(logits, ids, coef, chunk_size, temperature)
    for name, a, b in zip(out._fields, out, ref_out, strict=True):
        _assert_close(a, b, 1e-5, f"chunk={chunk_size} {name}")  # float32 round-off: 1e-5
    _assert_close(g, ref_g, 1e-5, f"chunk={chunk_size} gradient")
    assert g.abs().max().item() > 1e-3  # the gradient is not trivially zero


@pytest.mark.parametrize("chunk_size", [None, 3, 7])
@pytest.mark.parametrize("which", [0, 1, 2, 3, None])
def test_gradients_match_float64_autograd_of_reference(gen, chunk_size, which):
    """Each output alone (which=0..3) and all four combined (None), vs float64 autograd."""
    logits, ids = _logits(gen), _ids(gen)
    coef = [torch.randn(SHAPE, generator=gen) for _ in range(4)]
    if which is not None:
        coef = [c if i == which else torch.zeros_like(c) for i, c in enumerate(coef)]
    _, g = _grads(logits, ids, coef, chunk_size, temperature=1.3)
    x64 = logits.double().requires_grad_(True)
    ref = ref_softmax_stats(x64, ids, 1.3)
    obj = sum((c.double() * o).sum() for c, o in zip(coef, ref, strict=True))
    (g64,) = torch.autograd.grad(obj, x64)
    assert g.dtype == torch.float32
    _assert_close(g, g64, 2e-5, f"gradient of output {which}")  # float32 vs float64: 2e-5 absolute


def test_only_some_outputs_used_in_backward(gen):
    """Backward through a chunked call where only ``logp`` is used (other grads are None)."""
    logits, ids = _logits(gen), _ids(gen)
    x = logits.clone().requires_grad_(True)
    ef.token_stats(x, ids, chunk_size=4).logp.sum().backward()
    x64 = logits.double().requires_grad_(True)
    ref_softmax_stats(x64, ids)[0].sum().backward()
    _assert_close(x.grad, x64.grad, 1e-5, "logp-only gradient")


@pytest.mark.parametrize("chunk_size", [None, 1, 4, 7])
def test_entropy_from_logits(gen, chunk_size):
    logits = _logits(gen, shape=(2, 3, 5))  # 3-D leading shape
    ids = torch.zeros(2, 3, 5, dtype=torch.long)
    x = logits.clone().requires_grad_(True)
    ent = ef.entropy_from_logits(x, chunk_size=chunk_size)
    assert ent.shape == (2, 3, 5) and ent.dtype == torch.float32
    x64 = logits.double().requires_grad_(True)
    ref = ref_softmax_stats(x64, ids)[1]
    _assert_close(ent, ref, 1e-4, "entropy_from_logits")  # 1e-4 as above
    c = torch.randn(2, 3, 5, generator=gen)
    (g,) = torch.autograd.grad((c * ent).sum(), x)
    (g64,) = torch.autograd.grad((c.double() * ref).sum(), x64)
    _assert_close(g, g64, 2e-5, "entropy_from_logits gradient")


def test_extreme_logits_are_finite(gen):
    """Very peaked rows (p ≈ 1) and very large logits do not produce NaN/inf values or gradients."""
    logits = _logits(gen, scale=1.0)
    logits[0, 0, 3] = 80.0  # p ≈ 1 on token 3
    logits[1] *= 1e3  # huge spread
    ids = _ids(gen)
    ids[0, 0] = 3
    coef = [torch.randn(SHAPE, generator=gen) for _ in range(4)]
    for chunk in (None, 4):
        out, g = _grads(logits, ids, coef, chunk)
        assert all(bool(torch.isfinite(o).all()) for o in out)
        assert bool(torch.isfinite(g).all())
        assert abs(out.logp[0, 0].item()) < 1e-6 and out.entropy[0, 0].item() < 1e-6
        want = ref_softmax_stats(logits, ids)
        for name, a, b in zip(out._fields, out, want, strict=True):
            _assert_close(a, b, 1e-4, f"extreme {name}")


def test_policy_loss_through_chunked_token_stats(gen):
    """End to end: the gradient of policy_loss w.r.t. the logits is the same chunked or not."""
    logits, ids = _logits(gen), _ids(gen)
    adv = torch.randn(SHAPE[0], generator=gen)
    grads = []
    for chunk in (None, 4):
        x = logits.clone().requires_grad_(True)
        st = ef.token_stats(x, ids, chunk_size=chunk)
        old = st.logp.detach() + 0.1 * torch.randn(SHAPE, generator=torch.Generator().manual_seed(5))
        batch = ef.TokenBatch(st.logp, old, adv, torch.ones(SHAPE), entropy=st.entropy, old_entropy=st.entropy.detach())
        loss = ef.policy_loss(batch).loss - 0.01 * st.entropy.mean()  # PPO term + an entropy bonus
        (g,) = torch.autograd.grad(loss, x)
        grads.append(g)
    _assert_close(grads[1], grads[0], 1e-6, "policy_loss gradient w.r.t. logits")  # float32 round-off
    assert grads[0].abs().max().item() > 1e-4


# --------------------------------------------------------------------------------------------
# Only what is asked (stats=), memory-safe defaults, −inf logits, validate=False
# --------------------------------------------------------------------------------------------

ALL = ef.TokenStats._fields


@pytest.mark.parametrize(
    "stats", [("logp",), ("entropy",), ("logp", "entropy"), ("sum_p2",), ("sum_p2_logp",), ("entropy", "sum_p2")]
)
@pytest.mark.parametrize("chunk_size", [None, 4])
def test_stats_subset_computes_only_what_is_asked(gen, stats, chunk_size):
    """Unrequested fields are None; requested ones and their gradients equal the full call's."""
    logits, ids = _logits(gen), _ids(gen)
    coef = {s: torch.randn(SHAPE, generator=gen) for s in stats}
    got, full = {}, {}
    for which, res in ((stats, got), (ALL, full)):
        x = logits.clone().requires_grad_(True)
        out = ef.token_stats(x, ids, temperature=0.9, chunk_size=chunk_size, stats=which)
        (g,) = torch.autograd.grad(sum((coef[s] * getattr(out, s)).sum() for s in stats), x)
        res.update(out=out, grad=g)
    for name in ALL:
        if name in stats:
            _assert_close(getattr(got["out"], name), getattr(full["out"], name), 1e-6, name)
        else:
            assert getattr(got["out"], name) is None, name
    _assert_close(got["grad"], full["grad"], 1e-6, f"gradient of {stats}")
    assert got["grad"].abs().max().item() > 1e-3


def test_stats_names_are_checked():
    x, ids = torch.zeros(2, 5), torch.zeros(2, dtype=torch.long)
    for bad in (("logp", "entropies"), ()):
        with pytest.raises(ef.ParameterError, match="stats"):
            ef.token_stats(x, ids, stats=bad)


class _LargestTensor(TorchFunctionMode):
    """Records the largest number of elements of any new tensor a torch function returns
    (views of an argument, which allocate nothing, are not counted)."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        for o in out if isinstance(out, tuple | list) else (out,):
            if isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() not in inputs:
                self.numel = max(self.numel, o.numel())
        return out


def test_default_chunk_is_bounded_and_a_sliced_view_is_not_copied(gen, monkeypatch):
    """chunk_size=None bounds every intermediate to one [auto_chunk, V] buffer, and a
    ``logits[:, :-1]`` slice of model output is read in place (before: the whole [N·T, V]
    softmax was materialised and the slice copied in full)."""
    from entflow.core import token_stats as ts

    k_real = ts.auto_chunk_size(151_936)
    assert 1 <= k_real and k_real * 151_936 * 4 <= 32 * 2**20  # the real default: one buffer ≤ 32 MiB
    monkeypatch.setitem(ts.AUTO_CHUNK_ELEMENTS, "cpu", 1 << 14)  # same mechanism at a test-sized budget
    vocab = 1 << 11
    k = ts.auto_chunk_size(vocab)
    assert k == 8
    full = torch.randn(3, k + 1, vocab, generator=gen)
    logits = full[:, :-1]  # non-contiguous [3, k, V]: 3k rows
    ids = torch.randint(0, vocab, (3, k), generator=gen)
    with _LargestTensor() as probe:
        got = ef.token_stats(logits, ids, temperature=1.2)
    assert probe.numel <= k * vocab == logits.numel() // 3
    want = ref_softmax_stats(logits[:, :2], ids[:, :2], 1.2)  # float64 reference on a few rows
    for name, g, w in zip(ALL, got, want, strict=True):
        _assert_close(g[:, :2], w, 1e-4, f"auto chunk {name}")
    # gradient through the view equals the gradient through a contiguous copy
    coef = [torch.randn(3, k, generator=gen) for _ in range(4)]
    grads = []
    for src in (full, full.contiguous()):
        x = src.clone().requires_grad_(True)
        out = ef.token_stats(x[:, :-1], ids, temperature=1.2)
        (g,) = torch.autograd.grad(sum((c * o).sum() for c, o in zip(coef, out, strict=True)), x)
        grads.append(g)
    _assert_close(grads[0], grads[1], 0.0, "gradient through a sliced view")
    assert bool((grads[0][:, -1] == 0).all())


def _with_neg_inf(gen):
    logits, ids = _logits(gen), _ids(gen)
    logits[0, 0, :30] = float("-inf")  # 7 finite entries left in this row
    logits[1, 2, 5] = float("-inf")
    logits[2, :, 0] = float("-inf")
    ids[0, 0] = 33
    ids[1, 2] = 6
    ids[2] = torch.where(ids[2] == 0, 1, ids[2])
    return logits, ids


@pytest.mark.parametrize("chunk_size", [None, 4])
@pytest.mark.parametrize("validate", [True, False])
def test_neg_inf_logits_give_finite_statistics_and_gradients(gen, chunk_size, validate):
    """A −inf logit is a token of probability 0: every statistic and gradient is finite and equals
    the float64 reference with that token left out of the softmax (before: NonFiniteError)."""
    logits, ids = _with_neg_inf(gen)
    coef = [torch.randn(SHAPE, generator=gen) for _ in range(4)]
    out, g = _grads(logits, ids, coef, chunk_size, temperature=0.8) if validate else (None, None)
    if not validate:
        x = logits.clone().requires_grad_(True)
        out = ef.token_stats(x, ids, temperature=0.8, chunk_size=chunk_size, validate=False)
        (g,) = torch.autograd.grad(sum((c * o).sum() for c, o in zip(coef, out, strict=True)), x)
    x64 = logits.double().masked_fill(torch.isinf(logits), -1e4).requires_grad_(True)  # exp(−1e4) = 0 exactly
    ref = ref_softmax_stats(x64, ids, 0.8)
    (g64,) = torch.autograd.grad(sum((c.double() * r).sum() for c, r in zip(coef, ref, strict=True)), x64)
    for name, o, r in zip(ALL, out, ref, strict=True):
        assert bool(torch.isfinite(o).all()), name
        _assert_close(o, r, 1e-4, f"-inf {name}")
    assert bool(torch.isfinite(g).all())
    _assert_close(g, g64, 2e-5, "-inf gradient")
    assert bool((g[torch.isinf(logits)] == 0).all())


def test_non_finite_logits_are_rejected(gen):
    logits, ids = _logits(gen), _ids(gen)
    for value, n_nan, n_inf in ((float("nan"), 1, 0), (float("inf"), 0, 1)):
        bad = logits.clone()
        bad[1, 1, 3] = value
        with pytest.raises(ef.NonFiniteError, match="logits") as err:
            ef.token_stats(bad, ids)
        assert (err.value.n_nan, err.value.n_inf) == (n_nan, n_inf)
    dead = logits.clone()
    dead[2, 3] = float("-inf")  # no finite logit in this row: the softmax is undefined
    with pytest.raises(ef.NonFiniteError, match="logits"):
        ef.token_stats(dead, ids)
    masked = logits.clone()
    masked[0, 1, ids[0, 1]] = float("-inf")  # the sampled token itself has probability 0
    with pytest.raises(ef.ShapeError, match="token_ids"):
        ef.token_stats(masked, ids)


class _HostSyncs(TorchFunctionMode):
    """Counts the calls that copy a device value to the host."""

    SYNCS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__")

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.SYNCS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_validate_false_makes_no_host_sync(gen):
    logits, ids = _logits(gen), _ids(gen)
    x = logits.clone().requires_grad_(True)
    with _HostSyncs() as syncs:
        out = ef.token_stats(x, ids, chunk_size=4, validate=False)
        sum(o.sum() for o in out).backward()
    assert syncs.count == 0
    with _HostSyncs() as syncs:
        ef.token_stats(logits, ids)  # the default validates (and the counter sees it)
    assert syncs.count > 0
    _assert_close(x.grad, _grads(logits, ids, [torch.ones(SHAPE)] * 4, 4)[1], 0.0, "validate=False gradient")


def test_row_mask_zeroes_rows_and_their_gradient(gen):
    logits, ids = _logits(gen), _ids(gen)
    mask = torch.rand(SHAPE, generator=gen) > 0.4
    x = logits.clone().requires_grad_(True)
    out = ef.token_stats(x, ids, row_mask=mask, chunk_size=4)
    sum((k + 1.0) * o.sum() for k, o in enumerate(out)).backward()
    ref = ref_softmax_stats(logits, ids)
    for name, o, r in zip(ALL, out, ref, strict=True):
        _assert_close(o, torch.where(mask, r, 0.0), 1e-4, f"row_mask {name}")
    assert bool((x.grad[~mask] == 0).all()) and x.grad[mask].abs().max() > 1e-3


def test_entropy_from_logits_ignores_the_placeholder_token(gen):
    """entropy_from_logits has no sampled token: a −inf at index 0 is a valid masked entry."""
    logits = _logits(gen)
    logits[..., 0] = float("-inf")
    ent = ef.entropy_from_logits(logits)
    want = ref_softmax_stats(logits.double().masked_fill(torch.isinf(logits), -1e4), _ids(gen))[1]
    _assert_close(ent, want, 1e-4, "entropy with index 0 masked")
