"""The verl / TRL loss modes (methods/loss_modes.py) against float64 hand formulas and TRL's own
static helpers; the ``aggregation`` hook; global statistics; bad parameters; TRL's ``delta`` as
the loss's dual clip.

Hand references loop over responses and tokens with Python floats where that is clearer than
tensor code, and differentiate with autograd; tolerance 1e-10 (float64, same formulas, different
summation order). verl's own functions are the reference in
tests/integrations/test_verl_loss_modes.py, TRL's trainer in tests/integrations/test_trl_loss_modes.py.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import entflow as ef
from entflow.errors import CompositionError, ParameterError
from entflow.methods.base import Composite, Method
from support.methods_ref import make_batch

TOL = 1e-10


def grad_of(loss: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    (g,) = torch.autograd.grad(loss, x)
    return g


def fresh(b: ef.TokenBatch) -> ef.TokenBatch:
    return dataclasses.replace(b, logp=b.logp.detach().clone().requires_grad_(True))


def ours(b: ef.TokenBatch, method, **kw) -> tuple[float, torch.Tensor]:
    b = fresh(b)
    out = ef.policy_loss(b, method, ef.LossSpec(**kw))
    return float(out.loss.detach()), grad_of(out.loss, b.logp)


def rows(b: ef.TokenBatch):
    """(i, valid token indices) for every response."""
    for i in range(b.logp.shape[0]):
        yield i, [t for t in range(b.logp.shape[1]) if bool(b.mask[i, t])]


def agg_hand(per_token, b: ef.TokenBatch, agg: str) -> torch.Tensor:
    """docs/design.md §4's three aggregations of a per-token loss function ``(i, t) -> scalar``."""
    per_row = {i: [per_token(i, t) for t in ts] for i, ts in rows(b)}
    nonempty = [i for i in per_row if per_row[i]]
    if agg == "token-mean":
        return sum(sum(v) for v in per_row.values()) / sum(len(v) for v in per_row.values())
    if agg == "seq-mean-token-mean":
        return sum(sum(per_row[i]) / len(per_row[i]) for i in nonempty) / len(nonempty)
    return sum(sum(v) for v in per_row.values()) / (b.logp.shape[0] * b.logp.shape[1])


AGGS = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


# --------------------------------------------------------------------------------------------
# The per-token losses
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("dual", [None, 2.0])
@pytest.mark.parametrize("mode", ["dppo_tv", "dppo_kl"])
def test_dppo_against_the_hand_formula(gen, mode, dual, agg):
    b = make_batch(gen, off_policy=0.6)
    b = dataclasses.replace(b, old_logp=b.old_logp.clamp(max=-1e-3))  # probabilities: old log-probs < 0
    lo, hi = (0.05, 0.08) if mode == "dppo_tv" else (0.01, 0.02)
    L, A, old = b.logp.detach(), b.token_advantages(), b.old_logp

    def keep(i, t):
        p, q = math.exp(float(L[i, t])), math.exp(float(old[i, t]))
        if mode == "dppo_tv":
            return p - q <= hi if A[i, t] > 0 else p - q >= -lo
        kl = q * (math.log(q) - math.log(p)) + (1 - q) * math.log((1 - q + 1e-8) / (1 - p + 1e-8))
        return (kl <= hi or p <= q) if A[i, t] > 0 else (kl <= lo or p >= q)

    lp = L.detach().clone().requires_grad_(True)

    def ell(i, t):
        r = math.exp(float(lp[i, t].detach() - old[i, t]))
        w = r if dual is None else min(r, dual)
        return -A[i, t] * w * lp[i, t] * float(keep(i, t))

    ref = agg_hand(ell, b, agg)
    loss, g = ours(b, mode, clip_low=lo, clip_high=hi, dual_clip=dual, agg=agg)
    assert loss == pytest.approx(float(ref), abs=TOL)
    assert torch.allclose(g, grad_of(ref, lp), atol=TOL)
    kept = [keep(i, t) for i, ts in rows(b) for t in ts if A[i, t] != 0]
    assert any(kept) and not all(kept)  # the trust region acts on this batch


@pytest.mark.parametrize("agg", AGGS)
def test_gpg_and_dro_against_the_hand_formula(gen, agg):
    b = make_batch(gen)
    A, old = b.token_advantages(), b.old_logp
    lp = b.logp.detach().clone().requires_grad_(True)
    ref = agg_hand(lambda i, t: -A[i, t] * lp[i, t], b, agg)
    loss, g = ours(b, "gpg", agg=agg)
    assert loss == pytest.approx(float(ref), abs=TOL) and torch.allclose(g, grad_of(ref, lp), atol=TOL)
    beta = 0.7
    ref = agg_hand(lambda i, t: -(A[i, t] * lp[i, t] - 0.5 * beta * (lp[i, t] - old[i, t]) ** 2), b, agg)
    loss, g = ours(b, ef.get_method("dro", dro_beta=beta), agg=agg)
    assert loss == pytest.approx(float(ref), abs=TOL) and torch.allclose(g, grad_of(ref, lp), atol=TOL)


def vespo_phi_hand(b: ef.TokenBatch, i: int, a: float, k_pos, lam_pos, k_neg, lam_neg) -> float:
    s = sum(
        max(-20.0, min(20.0, float(b.logp[i, t] - b.old_logp[i, t]))) for t in next(r for j, r in rows(b) if j == i)
    )
    log_w = min(max(s, math.log(1e-8)), 20.0)
    k, lam = (k_pos, lam_pos) if a >= 0 else (k_neg, lam_neg)
    return math.exp(lam) * math.exp(log_w) ** k * math.exp(-lam * math.exp(log_w))  # φ(w) = e^λ w^k e^{−λw}


@pytest.mark.parametrize("params", [{}, {"k_pos": 1.0, "lambda_pos": 0.5, "k_neg": 4.0, "lambda_neg": 6.0}])
def test_vespo_against_the_hand_formula_and_trls_gamma_weights(gen, params):
    b = make_batch(gen, off_policy=0.15)
    m = ef.get_method("vespo", **params)
    A = b.token_advantages()
    lp = b.logp.detach().clone().requires_grad_(True)
    phi = {i: vespo_phi_hand(b, i, float(A[i, 0]), m.k_pos, m.lambda_pos, m.k_neg, m.lambda_neg) for i, _ in rows(b)}
    ref = agg_hand(lambda i, t: -phi[i] * A[i, t] * lp[i, t], b, "token-mean")
    loss, g = ours(b, m)
    assert loss == pytest.approx(float(ref), abs=TOL) and torch.allclose(g, grad_of(ref, lp), atol=TOL)
    assert len({round(v, 6) for v in phi.values()}) > 2  # the weights differ between responses

    trl = pytest.importorskip("trl")
    from trl.trainer.grpo_trainer import GRPOTrainer

    mask = b.mask.to(torch.float64)
    trl_phi = GRPOTrainer.get_gamma_weights(
        A[:, :1], (b.logp - b.old_logp).detach() * mask, mask, None, m.k_pos, m.lambda_pos, m.k_neg, m.lambda_neg
    )
    assert trl is not None
    assert torch.allclose(
        trl_phi.squeeze(-1), torch.tensor([phi[i] for i in sorted(phi)], dtype=torch.float64), rtol=1e-12
    )


@pytest.mark.parametrize("dual", [None, 1.3])
def test_luspo_against_trls_sequence_loss(gen, dual):
    """TRL's luspo with sequence-level IS: s_i = exp(mean log r), ℓ_i = −min(s_i·A, clip(s_i)·A)
    (with ``delta``: min(s_i, δ) in the first term), loss = mean_i |y_i|·ℓ_i; whatever ``agg``."""
    b = make_batch(gen, off_policy=0.3)
    lo, hi = 0.05, 0.1
    A = b.token_advantages()
    lp = b.logp.detach().clone().requires_grad_(True)
    total = 0.0
    for i, ts in rows(b):
        s = torch.exp(sum(lp[i, t] - b.old_logp[i, t] for t in ts) / len(ts))
        s1 = s if dual is None else torch.clamp(s, max=dual)
        a = A[i, ts[0]]
        total = total + len(ts) * -torch.minimum(s1 * a, torch.clamp(s, 1 - lo, 1 + hi) * a)
    ref = total / b.logp.shape[0]
    g_ref = grad_of(ref, lp)
    for agg in AGGS:  # the method fixes the response mean
        loss, g = ours(b, "luspo", clip_low=lo, clip_high=hi, dual_clip=dual, agg=agg)
        assert loss == pytest.approx(float(ref), abs=TOL)
        assert torch.allclose(g, g_ref, atol=TOL)


def test_geo_mean_against_the_hand_formula(gen):
    b = make_batch(gen, off_policy=0.3)
    lo, hi = 0.1, 0.15
    A = b.token_advantages()
    lp = b.logp.detach().clone().requires_grad_(True)
    total = 0.0
    for i, ts in rows(b):
        cs = []
        for t in ts:
            x = lp[i, t] - b.old_logp[i, t]
            a = float(A[i, t])
            cs.append(torch.clamp(x, max=hi) if a > 0 else torch.clamp(x, min=-lo) if a < 0 else 0.0 * x)
        total = total - float(A[i, ts].mean()) * torch.exp(sum(cs) / len(ts))
    ref = total / b.logp.shape[0]
    g_ref = grad_of(ref, lp)
    for agg in AGGS:
        loss, g = ours(b, "geo_mean", clip_low=lo, clip_high=hi, agg=agg)
        assert loss == pytest.approx(float(ref), abs=TOL)
        assert torch.allclose(g, g_ref, atol=TOL)


def test_off_policy_mask_against_trls_mask(gen):
    b = make_batch(gen, off_policy=0.3)
    delta = 0.05
    A = b.token_advantages()
    mask = b.mask.to(torch.float64)
    kl = {i: sum(float(b.old_logp[i, t] - b.logp[i, t]) for t in ts) / len(ts) for i, ts in rows(b)}
    keep = torch.tensor([[float(A[i, 0] >= 0 or kl[i] <= delta)] for i in sorted(kl)], dtype=torch.float64)
    assert 0 < float(keep.sum()) < keep.numel()  # some responses dropped, some kept
    out = ef.policy_loss(fresh(b), ef.get_method("off_policy_mask", threshold=delta))
    assert torch.equal(out.token_weights, keep * mask)
    from_trl = pytest.importorskip("trl.trainer.grpo_trainer").GRPOTrainer.get_off_policy_mask(
        A[:, :1], b.logp.detach(), b.old_logp, mask, delta
    )
    assert torch.equal(from_trl, keep)
    # a token weighter: with grpo it is GRPO's loss with the dropped responses' gradient removed
    g_mask = ours(b, ef.get_method("off_policy_mask", threshold=delta))[1]
    g_grpo = ours(b, "grpo")[1]
    assert torch.allclose(g_mask, g_grpo * keep, atol=TOL)


# --------------------------------------------------------------------------------------------
# TRL's delta is the loss's dual clip
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("delta", [1.25, 1.6])
def test_trls_two_sided_clip_is_the_dual_clip(gen, delta):
    """INTELLECT-2 / TRL ``delta``: ℓ = −min(min(r, δ)·A, clip(r, 1−ε, 1+ε_h)·A) equals PPO with the
    dual clip c = δ whenever δ > 1 + ε_h (TRL's recommendation; the adapter refuses the rest)."""
    b = make_batch(gen, off_policy=0.5)
    lo, hi = 0.2, 0.2
    A = b.token_advantages()
    lp = b.logp.detach().clone().requires_grad_(True)
    r = torch.exp(lp - b.old_logp)
    per = -torch.minimum(torch.clamp(r, max=delta) * A, torch.clamp(r, 1 - lo, 1 + hi) * A)
    ref = (per * b.mask).sum() / b.mask.sum()
    loss, g = ours(b, "grpo", clip_low=lo, clip_high=hi, dual_clip=delta)
    assert loss == pytest.approx(float(ref), abs=TOL) and torch.allclose(g, grad_of(ref, lp), atol=TOL)
    assert bool(((A < 0) & (r.detach() > delta) & b.valid).any())  # the cap acts on this batch


# --------------------------------------------------------------------------------------------
# The aggregation hook
# --------------------------------------------------------------------------------------------


class FixesTokenMean(Method):
    name = "test_fixes_token_mean"

    def aggregation(self) -> str:
        return "token-mean"


def test_parts_fixing_different_aggregations_do_not_compose():
    with pytest.raises(CompositionError, match="aggregation"):
        Composite([ef.get_method("geo_mean"), FixesTokenMean()])
    assert Composite([ef.get_method("geo_mean"), ef.get_method("clip_higher")]).aggregation() == "seq-mean-token-mean"


def test_the_spec_a_method_runs_under_is_decided_by_loss_spec():
    """``LossSpec.for_method``: the method's clip bounds and aggregation where it fixes them, the
    spec's elsewhere; policy_loss runs under it, whatever aggregation the caller's spec names."""
    spec = ef.LossSpec(clip_low=0.1, clip_high=0.3, dual_clip=3.0, agg="seq-mean-token-sum-norm", max_len=16)
    assert spec.for_method(ef.get_method("grpo")) is spec
    fixed = spec.for_method(ef.get_method("geo_mean+clip_higher"))
    assert (fixed.clip_low, fixed.clip_high, fixed.dual_clip) == (0.2, 0.28, 3.0)
    assert (fixed.agg, fixed.max_len) == ("seq-mean-token-mean", 16)
    assert spec.for_method(ef.get_method("clip_higher")).agg == "seq-mean-token-sum-norm"


@dataclasses.dataclass(repr=False)
class SeesTheSpec(Method):
    """Records the ``LossContext.spec`` its ``token_loss`` hook is given; changes nothing."""

    name = "test_sees_the_spec"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.seen: list[ef.LossSpec] = []

    def token_loss(self, loss: torch.Tensor, ctx) -> torch.Tensor:
        self.seen.append(ctx.spec)
        return loss


def test_the_loss_carries_its_spec_whole_to_the_hooks_and_the_statistics(gen):
    """The hooks see ``LossSpec.for_method``'s spec as one object (``ctx.clip_low`` … read it);
    ``prepare_statistics`` keeps it whole, with the fixed T_max of seq-mean-token-sum-norm in
    ``max_len``, and ``policy_loss`` under those statistics hands the hooks that T_max."""
    b = make_batch(gen, off_policy=0.3)
    spec = ef.LossSpec(clip_low=0.1, clip_high=0.3, dual_clip=3.0, agg="seq-mean-token-sum-norm")
    seer = SeesTheSpec()
    method = Composite([seer, ef.get_method("clip_higher")])
    want = spec.for_method(method)
    assert want == ef.LossSpec(clip_low=0.2, clip_high=0.28, dual_clip=3.0, agg="seq-mean-token-sum-norm")
    ef.policy_loss(fresh(b), method, spec)
    assert seer.seen == [want]
    ctx_fields = {f.name for f in dataclasses.fields(ef.methods.base.LossContext)}
    assert ctx_fields.isdisjoint({"clip_low", "clip_high", "dual_clip", "agg", "max_len"})  # no loose copies
    (stats,) = ef.prepare_statistics([fresh(b)], method, spec)
    assert stats.spec == want and stats.clip == (0.2, 0.28, 3.0) and stats.agg == "seq-mean-token-sum-norm"
    assert stats.max_len == b.logp.shape[1]  # the longest micro-batch stands in for the missing max_len
    seer.seen.clear()
    ef.policy_loss(fresh(b), method, spec, stats=stats)
    assert seer.seen == [dataclasses.replace(want, max_len=b.logp.shape[1])]
    with pytest.raises(ParameterError, match="clip bounds"):
        ef.policy_loss(fresh(b), method, dataclasses.replace(spec, dual_clip=4.0), stats=stats)


@pytest.mark.parametrize("agg", AGGS)
def test_a_sequence_loss_ignores_the_callers_aggregation(gen, agg):
    b = make_batch(gen, off_policy=0.3)
    want = ours(b, "geo_mean", agg="seq-mean-token-mean")
    got = ours(b, "geo_mean", agg=agg)
    assert got[0] == want[0] and torch.equal(got[1], want[1])


def test_no_earlier_method_fixes_an_aggregation():
    new = {"geo_mean", "luspo"}
    for name in ef.list_methods():
        if name not in new:
            cls = ef.methods.base.method_class(name)
            assert cls.aggregation is Method.aggregation, name


def test_a_sequence_loss_composes_with_token_weights_and_terms(gen):
    """geo_mean + off_policy_mask + entropy_bonus: each response's L_i is scaled by its mean token
    weight (here 0 or 1), the bonus is added with the response-mean aggregation."""
    b = make_batch(gen, off_policy=0.3)
    m = ef.get_method("geo_mean+off_policy_mask+entropy_bonus", threshold=0.05, c=0.01)
    out = ef.policy_loss(fresh(b), m, ef.LossSpec(agg="token-mean"))
    w = ef.policy_loss(fresh(b), ef.get_method("off_policy_mask", threshold=0.05)).token_weights
    seq = ef.policy_loss(fresh(b), "geo_mean", metrics="none")
    kept = (w.sum(-1) > 0).to(torch.float64)
    assert 0 < float(kept.sum()) < len(kept)
    n = b.valid.sum(-1).to(torch.float64)
    H = (b.entropy.detach() * b.mask).sum(-1) / n
    # per-response L_i from geo_mean alone: undo its response mean with a one-hot advantage mask
    L = torch.stack([ef.policy_loss(fresh(dataclasses.replace(b, mask=b.mask * (torch.arange(len(n)) == i)[:, None])),
                                    "geo_mean").loss.detach() for i in range(len(n))])  # fmt: skip
    assert float(L.mean()) == pytest.approx(float(seq.loss), abs=TOL)
    expected = (L * kept).mean() - 0.01 * H.mean()
    assert float(out.loss) == pytest.approx(float(expected), abs=TOL)


@pytest.mark.parametrize("mode", ["geo_mean", "luspo"])
def test_global_statistics_of_a_sequence_loss_equal_one_batch(gen, mode):
    """Two micro-batches with ``prepare_statistics``: the summed losses and gradients are the full
    batch's (the response-mean denominator is global), whatever ``agg`` the caller gives."""
    b = make_batch(gen, n=8, off_policy=0.3)
    full_loss, full_g = ours(b, mode, agg="token-mean")
    halves = [
        dataclasses.replace(
            b,
            **{f: getattr(b, f)[s] for f in ("logp", "old_logp", "advantages", "mask", "entropy", "old_entropy")},
            ref_logp=None, rewards=None, group_index=None,
        )
        for s in (slice(0, 3), slice(3, 8))
    ]  # fmt: skip
    method = ef.get_method(mode)
    stats = ef.prepare_statistics(halves, method, ef.LossSpec(agg="token-mean"))
    total, grads = 0.0, []
    for h, st in zip(halves, stats, strict=True):
        h = fresh(h)
        out = ef.policy_loss(h, method, ef.LossSpec(agg="token-mean"), stats=st)
        total += float(out.loss)
        grads.append(grad_of(out.loss, h.logp))
    assert total == pytest.approx(full_loss, abs=TOL)
    assert torch.allclose(torch.cat(grads), full_g, atol=TOL)


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "param", "value"),
    [
        ("dro", "dro_beta", None),
        ("dro", "dro_beta", 0.0),
        ("dro", "dro_beta", -0.1),
        ("vespo", "lambda_pos", 0.0),
        ("vespo", "lambda_neg", -1.0),
        ("vespo", "k_pos", -0.5),
        ("vespo", "k_neg", float("nan")),
        ("off_policy_mask", "threshold", None),
        ("off_policy_mask", "threshold", 0.0),
        ("off_policy_mask", "threshold", -0.5),
    ],
)
def test_bad_parameters_raise_a_typed_error_naming_them(name, param, value):
    base = {"dro": {"dro_beta": 0.1}, "off_policy_mask": {"threshold": 0.5}}.get(name, {})
    with pytest.raises(ParameterError) as e:
        ef.get_method(name, **{**base, param: value})
    assert e.value.param == param and name in str(e.value)


def test_defaults_are_the_peers():
    trl_config = pytest.importorskip("trl").GRPOConfig
    fields = {f.name: f.default for f in dataclasses.fields(trl_config)}
    m = ef.get_method("vespo")
    assert (m.k_pos, m.lambda_pos, m.k_neg, m.lambda_neg) == (
        fields["vespo_k_pos"],
        fields["vespo_lambda_pos"],
        fields["vespo_k_neg"],
        fields["vespo_lambda_neg"],
    )
