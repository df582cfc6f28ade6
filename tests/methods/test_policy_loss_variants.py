"""cispo, gspo, sapo, ce_gppo and archer against float64 references written here from the papers.

Each reference builds the per-token (GSPO: per-response) objective with explicit loops over
tokens, straight from the paper's formula, and aggregates it by hand; its gradient comes from
autograd on the reference. A second, closed-form gradient (derived by hand) checks CISPO, SAPO,
CE-GPPO and GSPO once more. The batch holds every case the formulas branch on: ratios clipped on
both sides, ratios exactly at the bounds (r = 1.25 and 0.75, exact in float64 — asserted), A = 0,
ragged masks, an all-masked response whose padding holds NaN / inf, and a response with a single
valid token. Tolerances: rtol 1e-10, atol 1e-12 (float64, the same formulas in another order).
"""

from __future__ import annotations

import math

import pytest
import torch

import entflow as ef
from entflow.cli.main import main as cli_main
from entflow.errors import CompositionError, MissingInputError, ParameterError
from entflow.methods.policy_loss_variants import row_quantile

D = torch.float64
LO = HI = 0.25  # clip bounds used throughout: 1 − ε = 0.75, 1 + ε = 1.25 (both exact ratios below)
AGGS = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
NAN, INF = float("nan"), float("inf")
TOL = dict(rtol=1e-10, atol=1e-12)


def fields(seed: int = 0) -> dict:
    """Float64 [7, 5] batch. Rows: 0 all masked (NaN/inf padding), 1 A = 0, 2 four tokens at
    r = 1.25 exactly with A > 0, 3 two tokens at r = 0.75 exactly with A < 0, 4–6 random (ratios
    clipped on both sides), 6 a single valid token."""
    g = torch.Generator().manual_seed(seed)
    N, T = 7, 5
    old = -(torch.rand(N, T, generator=g, dtype=D) * 2 + 0.1)
    logp = old + 0.45 * torch.randn(N, T, generator=g, dtype=D)
    lengths = torch.tensor([0, 5, 4, 3, 5, 4, 1])
    mask = (torch.arange(T)[None] < lengths[:, None]).to(D)
    adv = torch.tensor([0.7, 0.0, 1.1, -0.8, 0.9, -1.4, 0.5], dtype=D)
    old[2, :4] = -0.25
    logp[2, :4] = -0.25 + math.log(1.25)
    old[3, :2] = -0.25
    logp[3, :2] = -0.25 + math.log(0.75)
    logp[5, 0] = old[5, 0] - 0.5  # A < 0, r ≈ 0.61: below the lower bound
    H = torch.rand(N, T, generator=g, dtype=D) * 2
    H[4, 1] = H[4, 3]  # a tie inside a response
    H[4, 0] = 5.0  # the highest entropy of response 4 (A > 0), with r = 1.4: clipped by 0.25, not by 0.5
    logp[4, 0] = old[4, 0] + math.log(1.4)
    ref = old + 0.3 * torch.randn(N, T, generator=g, dtype=D)
    pad = mask == 0
    logp[pad], old[pad], H[pad], ref[pad] = NAN, INF, NAN, NAN  # padding may hold anything
    return dict(logp=logp, old=old, adv=adv, mask=mask, H=H, ref=ref)


def batch(f: dict, logp: torch.Tensor) -> ef.TokenBatch:
    return ef.TokenBatch(logp, f["old"], f["adv"], f["mask"], old_entropy=f["H"], ref_logp=f["ref"])


def leaf(f: dict) -> torch.Tensor:
    return f["logp"].detach().clone().requires_grad_(True)


def ours(f: dict, method, agg: str = "token-mean", lo: float = LO, hi: float = HI, dual=None):
    x = leaf(f)
    out = ef.policy_loss(batch(f, x), method, ef.LossSpec(lo, hi, dual, agg))
    (g,) = torch.autograd.grad(out.loss, x)
    return out, g


def aggregate(token_loss, x: torch.Tensor, m: torch.Tensor, agg: str) -> torch.Tensor:
    """``agg`` over the tokens of ``m`` of ``token_loss(i, t, x)`` (a 0-d tensor built from the
    leaf ``x``), written with loops."""
    N, T = m.shape
    rows = [[token_loss(i, t, x) for t in range(T) if m[i, t] > 0] for i in range(N)]
    n_tok = sum(len(r) for r in rows)
    if agg == "token-mean":
        return sum((v for r in rows for v in r), torch.zeros((), dtype=D)) / max(n_tok, 1)
    if agg == "seq-mean-token-mean":
        means = [sum(r, torch.zeros((), dtype=D)) / len(r) for r in rows if r]
        return sum(means, torch.zeros((), dtype=D)) / max(len(means), 1)
    # seq-mean-token-sum-norm: Σ / (N · T)
    return sum((v for r in rows for v in r), torch.zeros((), dtype=D)) / (N * T)


def reference(f: dict, token_loss, agg: str, extra=None):
    """(loss, grad) of ``agg`` over ``token_loss(i, t, logp_it, ctx)`` (a 0-d tensor built from
    the leaf) written with loops; ``extra(x)`` adds a scalar (e.g. a KL term) afterwards."""
    x = leaf(f)
    total = aggregate(token_loss, x, f["mask"], agg)
    if extra is not None:
        total = total + extra(x, agg)
    (g,) = torch.autograd.grad(total, x)
    return total.detach(), g


def ratio(f, i, t, x):
    return torch.exp(x[i, t] - f["old"][i, t])


def ppo(A: float, r: torch.Tensor, lo: float, hi: float, dual: float | None = None) -> torch.Tensor:
    out = torch.maximum(-A * r, -A * torch.clamp(r, 1 - lo, 1 + hi))
    if dual is not None and A < 0:
        out = torch.minimum(out, torch.tensor(-A * dual, dtype=D))
    return out


def test_the_batch_has_every_case():
    f = fields()
    r = torch.exp(f["logp"] - f["old"])
    v = f["mask"].bool()
    A = f["adv"][:, None].expand_as(r)
    assert bool((r[2, :4] == 1 + HI).all()) and bool((r[3, :2] == 1 - LO).all())  # exactly at the bounds
    assert bool(((A > 0) & (r > 1 + HI) & v).any()) and bool(((A < 0) & (r < 1 - LO) & v).any())  # clipped
    assert bool(((A > 0) & (r < 1 - LO) & v).any()) and bool(((A < 0) & (r > 1 + HI) & v).any())  # PPO keeps these
    assert not bool(v[0].any()) and bool(f["logp"][0].isnan().all())


# --------------------------------------------------------------------------------------------
# CISPO (arXiv 2506.13585 §3.1): J = sg(clip(r, 1−ε_low, 1+ε_high))·A·log π
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("agg", AGGS)
def test_cispo_matches_reference(agg):
    f = fields()

    def tok(i, t, x):
        w = float(torch.clamp(ratio(f, i, t, x).detach(), 1 - LO, 1 + HI))
        return -w * float(f["adv"][i]) * x[i, t]

    out, g = ours(f, "cispo", agg)
    lr, gr = reference(f, tok, agg)
    torch.testing.assert_close(out.loss.detach(), lr, **TOL)
    torch.testing.assert_close(g, gr, **TOL)
    assert torch.isfinite(g).all() and bool((g[0] == 0).all())


def test_cispo_gradient_closed_form_every_token_keeps_its_gradient():
    f = fields()
    out, g = ours(f, "cispo")
    r = torch.exp(f["logp"] - f["old"]).nan_to_num(1.0)
    m, A = f["mask"], f["adv"][:, None]
    expected = -r.clamp(1 - LO, 1 + HI) * A * m / m.sum()  # ∂ℓ/∂logp = −r̂·A, token-mean
    torch.testing.assert_close(g, expected, **TOL)
    clipped = ((A > 0) & (r > 1 + HI) | (A < 0) & (r < 1 - LO)) & m.bool()
    assert bool((g[clipped] != 0).all())  # PPO-clip would zero these
    n_trunc = ((r != r.clamp(1 - LO, 1 + HI)) & m.bool()).sum()
    assert out.metrics["cispo/weight_clipped_frac"] == pytest.approx(float(n_trunc / m.sum()))


# --------------------------------------------------------------------------------------------
# GSPO (arXiv 2507.18071 §4.1): the sequence-level objective with s_i = exp(mean_t log r_i,t)
# --------------------------------------------------------------------------------------------


def gspo_reference(f: dict, agg: str, lo: float = LO, hi: float = HI):
    """The paper's sequence-level GSPO: per response ℓ_i = max(−A s_i, −A clip(s_i)) with s_i
    differentiated through the mean over its tokens; every token of response i carries ℓ_i
    (so each aggregation weighs responses as it weighs their tokens)."""
    m = f["mask"]
    cache: dict[int, torch.Tensor] = {}

    def tok(i, t, x):
        if i not in cache:
            idx = [u for u in range(x.shape[1]) if m[i, u] > 0]
            log_s = sum((x[i, u] - f["old"][i, u] for u in idx), torch.zeros((), dtype=D)) / len(idx)
            cache[i] = ppo(float(f["adv"][i]), torch.exp(log_s), lo, hi)
        return cache[i]

    return reference(f, tok, agg)


@pytest.mark.parametrize("agg", AGGS)
def test_gspo_token_form_equals_the_sequence_objective(agg):
    f = fields()
    s = torch.exp(((f["logp"] - f["old"]).nan_to_num(0) * f["mask"]).sum(-1) / f["mask"].sum(-1).clamp(min=1))
    assert float(s[2]) == 1 + HI  # response 2 sits exactly at the upper bound
    A = f["adv"]
    assert bool(((A > 0) & (s > 1 + 0.05)).any()) and bool(((A != 0) & (s < 1 + 0.05) & (s > 1 - 0.05)).any())
    for lo, hi in ((LO, HI), (0.05, 0.05)):  # the second clips some responses
        out, g = ours(f, "gspo", agg, lo, hi, dual=1.5)  # dual clip: not part of GSPO, ignored
        lr, gr = gspo_reference(f, agg, lo, hi)
        torch.testing.assert_close(out.loss.detach(), lr, **TOL)
        torch.testing.assert_close(g, gr, **TOL)


def test_gspo_gradient_closed_form():
    """token-mean: ∂/∂logp_{i,t} = −A_i·s_i·[s_i not clipped against A_i] / Σm (the GSPO-token
    gradient: each token carries the response ratio)."""
    f = fields()
    m = f["mask"]
    s = torch.exp(((f["logp"] - f["old"]).nan_to_num(0) * m).sum(-1) / m.sum(-1).clamp(min=1))
    A = f["adv"]
    lo = hi = 0.05
    kept = ~(((A > 0) & (s > 1 + hi)) | ((A < 0) & (s < 1 - lo)))
    out, g = ours(f, "gspo", "token-mean", lo, hi)
    expected = (-A * s * kept)[:, None] * m / m.sum()
    torch.testing.assert_close(g, expected, **TOL)
    clipped_tokens = (~kept)[:, None].expand_as(m)[m.bool()]
    assert out.metrics["gspo/clip_frac"] == pytest.approx(float(clipped_tokens.double().mean()))


# --------------------------------------------------------------------------------------------
# SAPO (arXiv 2511.20347 §3): ℓ = −σ(τ(r−1))·4/τ·A, τ by the sign of A
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("taus", [(1.0, 1.05), (0.5, 3.0)])
def test_sapo_matches_reference(agg, taus):
    f = fields()
    tp, tn = taus

    def tok(i, t, x):
        A = float(f["adv"][i])
        tau = tp if A > 0 else tn
        return -torch.sigmoid(tau * (ratio(f, i, t, x) - 1)) * (4 / tau) * A

    out, g = ours(f, ef.get_method("sapo", tau_pos=tp, tau_neg=tn), agg)
    lr, gr = reference(f, tok, agg)
    torch.testing.assert_close(out.loss.detach(), lr, **TOL)
    torch.testing.assert_close(g, gr, **TOL)


def test_sapo_gate_derivative_and_no_hard_clip():
    """∂ℓ/∂logp = −4σ(1−σ)·r·A (σ at τ(r−1)): GRPO's −r·A at r = 1, smaller away from 1, never 0."""
    f = fields()
    out, g = ours(f, "sapo", dual=2.0)
    m, A = f["mask"], f["adv"][:, None].expand_as(f["mask"])
    r = torch.exp(f["logp"] - f["old"]).nan_to_num(1.0)
    tau = torch.full_like(r, 1.05).masked_fill(A > 0, 1.0)
    sig = torch.sigmoid(tau * (r - 1))
    expected = -4 * sig * (1 - sig) * r * A * m / m.sum()
    torch.testing.assert_close(g, expected, **TOL)
    nz = (A != 0) & m.bool()
    assert bool((g[nz] != 0).all())  # no token loses its gradient
    assert out.metrics["clip/frac_high"] == 0 and out.metrics["clip/frac_low"] == 0  # no hard clip


# --------------------------------------------------------------------------------------------
# CE-GPPO (arXiv 2509.20712 §4; official code): bounded gradients outside the clip
# --------------------------------------------------------------------------------------------


def ce_gppo_tok(f, b1, b2, lo=LO, hi=HI, dual=None):
    def tok(i, t, x):
        A = float(f["adv"][i])
        r = ratio(f, i, t, x)
        delta = r / r.detach()  # value 1, gradient ∂ log π
        if A < 0 and float(r.detach()) < 1 - lo:
            out = -b1 * (1 - lo) * delta * A
        elif A > 0 and float(r.detach()) > 1 + hi:
            out = -b2 * (1 + hi) * delta * A
        else:
            out = -r * A
        if dual is not None and A < 0:
            out = torch.minimum(out, torch.tensor(-A * dual, dtype=D))
        return out

    return tok


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("betas", [(0.75, 1.0), (0.3, 0.6), (0.0, 0.0)])
def test_ce_gppo_matches_reference(agg, betas):
    f = fields()
    b1, b2 = betas
    for dual in (None, 1.3):  # response 5 has A < 0 and r > 1.3: the dual clip acts there
        out, g = ours(f, ef.get_method("ce_gppo", beta1=b1, beta2=b2), agg, dual=dual)
        lr, gr = reference(f, ce_gppo_tok(f, b1, b2, dual=dual), agg)
        torch.testing.assert_close(out.loss.detach(), lr, **TOL)
        torch.testing.assert_close(g, gr, **TOL)


def test_ce_gppo_gradient_closed_form_and_limits():
    f = fields()
    m, A = f["mask"], f["adv"][:, None].expand_as(f["mask"])
    r = torch.exp(f["logp"] - f["old"]).nan_to_num(1.0)
    low, high = (A < 0) & (r < 1 - LO) & m.bool(), (A > 0) & (r > 1 + HI) & m.bool()
    assert bool(low.any()) and bool(high.any())
    b1, b2 = 0.4, 0.9
    out, g = ours(f, ef.get_method("ce_gppo", beta1=b1, beta2=b2))
    expected = torch.where(low, -b1 * (1 - LO) * A, torch.where(high, -b2 * (1 + HI) * A, -r * A)) * m / m.sum()
    torch.testing.assert_close(g, expected, **TOL)
    # at the bounds (rows 2, 3) the strict inequalities keep the plain −r·A gradient
    torch.testing.assert_close(g[2, :4], (-(1 + HI) * A[2, :4]) / m.sum(), **TOL)
    assert out.metrics["ce_gppo/frac_low"] == pytest.approx(float(low.sum() / m.sum()))
    # β₁ = β₂ = 0 is PPO-clip exactly: the kept gradients vanish again
    _, g0 = ours(f, ef.get_method("ce_gppo", beta1=0.0, beta2=0.0))
    _, g_ppo = ours(f, "grpo")
    torch.testing.assert_close(g0, g_ppo, **TOL)


# --------------------------------------------------------------------------------------------
# Archer (arXiv 2507.15778 §3; official code): per-response entropy quantile, dual constraints
# --------------------------------------------------------------------------------------------


def quantile_by_hand(values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (as numpy / torch.quantile)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


def archer_reference(f, agg, q=0.8, hlo=0.5, hhi=0.5, beta=0.001, beta_h=0.0, lo=LO, hi=HI, dual=None):
    m, H = f["mask"], f["H"]
    N, T = m.shape
    high = torch.zeros(N, T, dtype=torch.bool)
    for i in range(N):
        idx = [t for t in range(T) if m[i, t] > 0]
        if idx:
            thr = quantile_by_hand([float(H[i, t]) for t in idx], q)
            for t in idx:
                high[i, t] = float(H[i, t]) > thr

    def tok(i, t, x):
        A = float(f["adv"][i])
        r = ratio(f, i, t, x)
        return ppo(A, r, hlo, hhi, dual) if high[i, t] else ppo(A, r, lo, hi, dual)

    def kl(x, agg):
        def k3(i, t, xx):
            d = f["ref"][i, t] - xx[i, t]
            return (beta_h if high[i, t] else beta) * (torch.exp(d) - d - 1)

        return aggregate(k3, x, m, agg)

    return reference(f, tok, agg, extra=kl), high


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize(
    "params",
    [{}, {"quantile": 0.5, "high_clip_low": 0.9, "high_clip_high": 2.0, "kl_coef": 0.3, "high_kl_coef": 0.05}],
    ids=["defaults", "custom"],
)
def test_archer_matches_reference(agg, params):
    f = fields()
    keys = dict(quantile="q", high_clip_low="hlo", high_clip_high="hhi", kl_coef="beta", high_kl_coef="beta_h")
    for dual in (None, 1.3):
        out, g = ours(f, ef.get_method("archer", **params), agg, dual=dual)
        (lr, gr), high = archer_reference(f, agg, dual=dual, **{keys[k]: v for k, v in params.items()})
        torch.testing.assert_close(out.loss.detach(), lr, **TOL)
        torch.testing.assert_close(g, gr, **TOL)
    assert 0 < int(high.sum()) < int(f["mask"].sum())  # both classes present
    assert not bool(high[6].any())  # one valid token: it is its own quantile, so low-entropy
    assert out.metrics["archer/high_frac"] == pytest.approx(float(high.sum() / f["mask"].sum()))


@pytest.mark.parametrize("q", [0.8, 0.5, 0.13, 0.999])
def test_row_quantile_equals_torch_quantile(q):
    g = torch.Generator().manual_seed(7)
    H = torch.rand(9, 13, generator=g, dtype=D)
    H[3, 2:6] = H[3, 1]  # ties
    valid = torch.arange(13)[None] < torch.tensor([13, 1, 2, 5, 0, 7, 13, 3, 11])[:, None]
    got = row_quantile(H.masked_fill(~valid, NAN), valid, q)
    for i in range(9):
        want = torch.quantile(H[i][valid[i]], q) if valid[i].any() else torch.zeros((), dtype=D)
        torch.testing.assert_close(got[i], want, **TOL)


def test_archer_classes_change_the_gradient_where_they_should():
    """The loose clip acts only on high-entropy tokens: against plain PPO-clip + the same KL on
    every token, the gradients differ exactly where a high-entropy token is clipped by (0.25,
    0.25) but not by (0.5, 0.5)."""
    f = fields()
    _, high = archer_reference(f, "token-mean")
    _, g = ours(f, ef.get_method("archer", kl_coef=0.0))
    _, g_ppo = ours(f, "grpo")
    A = f["adv"][:, None].expand_as(f["mask"])
    r = torch.exp(f["logp"] - f["old"]).nan_to_num(1.0)
    cut_tight = ((A > 0) & (r > 1 + HI)) | ((A < 0) & (r < 1 - LO))
    cut_loose = ((A > 0) & (r > 1.5)) | ((A < 0) & (r < 0.5))
    differs = high & cut_tight & ~cut_loose & f["mask"].bool()
    assert bool(differs.any())
    assert torch.equal((g - g_ppo).abs() > 1e-15, differs)


def test_archer_needs_ref_logp_and_an_entropy():
    f = fields()
    x = leaf(f)
    with pytest.raises(MissingInputError, match="ref_logp"):
        ef.policy_loss(ef.TokenBatch(x, f["old"], f["adv"], f["mask"], old_entropy=f["H"]), "archer")
    with pytest.raises(MissingInputError, match="old_entropy"):
        ef.policy_loss(ef.TokenBatch(x, f["old"], f["adv"], f["mask"], ref_logp=f["ref"]), "archer")


# --------------------------------------------------------------------------------------------
# All five: degenerate input, global statistics, composition, parameters, CLI
# --------------------------------------------------------------------------------------------

FIVE = ["cispo", "gspo", "sapo", "ce_gppo", "archer"]


@pytest.mark.parametrize("name", FIVE)
def test_empty_batch_gives_zero_loss_with_grad(name):
    f = fields()
    f["mask"] = torch.zeros_like(f["mask"])
    f["logp"], f["H"] = f["logp"].nan_to_num(0.0), f["H"].nan_to_num(0.0)
    out, g = ours(f, name)
    assert float(out.loss.detach()) == 0.0 and out.metrics["empty_batch"] == 1.0
    assert bool((g == 0).all())


@pytest.mark.parametrize("name", FIVE)
def test_zero_advantages_give_zero_policy_gradient(name):
    f = fields()
    f["adv"] = torch.zeros_like(f["adv"])
    method = ef.get_method(name, **({"kl_coef": 0.0} if name == "archer" else {}))
    out, g = ours(f, method)
    assert bool((g == 0).all()) and torch.isfinite(out.loss)


@pytest.mark.parametrize("name", FIVE)
def test_micro_batches_with_global_statistics_sum_to_the_full_batch(name):
    f = fields()
    full, g_full = ours(f, name, "seq-mean-token-mean")
    x = leaf(f)
    parts = [slice(0, 3), slice(3, 7)]
    mbs = [
        ef.TokenBatch(x[s], f["old"][s], f["adv"][s], f["mask"][s], old_entropy=f["H"][s], ref_logp=f["ref"][s])
        for s in parts
    ]
    method = ef.get_method(name)
    spec = ef.LossSpec(LO, HI, None, "seq-mean-token-mean")
    stats = ef.prepare_statistics(mbs, method, spec)
    total = sum(ef.policy_loss(b, method, spec, stats=s).loss for b, s in zip(mbs, stats, strict=True))
    (g,) = torch.autograd.grad(total, x)
    torch.testing.assert_close(total.detach(), full.loss.detach(), **TOL)
    torch.testing.assert_close(g, g_full, **TOL)


def test_composition_rules():
    # all five replace the per-token loss: two of them cannot compose
    with pytest.raises(CompositionError, match="replace the per-token loss"):
        ef.get_method("cispo+gspo")
    # SAPO fixes "no clip" as part of its formula: a clip setter after it is refused, before it is overridden
    with pytest.raises(CompositionError, match="sapo"):
        ef.get_method("sapo+clip_higher")
    assert ef.get_method("clip_higher+sapo").clip_bounds() == (math.inf, math.inf)
    # a clip setter before cispo sets the weight's bounds
    f = fields()
    _, g = ours(f, "clip_higher+cispo")
    _, g2 = ours(f, "cispo", lo=0.2, hi=0.28)
    torch.testing.assert_close(g, g2, **TOL)


@pytest.mark.parametrize(
    "name,params,param",
    [
        ("sapo", {"tau_pos": 0.0}, "tau_pos"),
        ("sapo", {"tau_neg": -1.0}, "tau_neg"),
        ("ce_gppo", {"beta1": -0.1}, "beta1"),
        ("ce_gppo", {"beta2": float("nan")}, "beta2"),
        ("archer", {"quantile": 0.0}, "quantile"),
        ("archer", {"quantile": 1.0}, "quantile"),
        ("archer", {"quantile": 1.5}, "quantile"),
        ("archer", {"high_clip_low": 1.2}, "high_clip_low"),
        ("archer", {"high_clip_high": -0.5}, "high_clip_high"),
        ("archer", {"kl_coef": -1e-3}, "kl_coef"),
        ("archer", {"high_kl_coef": -1.0}, "high_kl_coef"),
        ("cispo", {"clip_high": 0.3}, "clip_high"),  # cispo takes the loss's bounds, no parameters
    ],
)
def test_bad_parameters_name_the_parameter(name, params, param):
    with pytest.raises(ParameterError) as e:
        ef.get_method(name, **params)
    assert e.value.param == param and e.value.owner == name


def test_cli_lists_them_and_shows_one(capsys):
    assert cli_main(["methods"]) == 0
    out = capsys.readouterr().out
    for name in FIVE:
        assert f" {name} " in out, name
    assert cli_main(["methods", "archer"]) == 0
    out = capsys.readouterr().out
    assert "needed by policy_loss: ref_logp" in out and "old_entropy" in out and "arXiv 2507.15778" in out
    assert cli_main(["methods", "sapo"]) == 0
    out = capsys.readouterr().out
    assert "tau_neg" in out and "1.05" in out and "token_loss" in out and "clip_bounds" in out
