"""The rollout–training mismatch corrections (methods/corrections.py).

- ``tis``, ``icepop`` and the four ``rs_*`` against verl 0.9.1's own functions of
  ``verl/trainer/ppo/rollout_corr_helper.py`` over their option grid (levels × threshold forms ×
  batch normalisation; levels × k1/k2/k3 × bounds; chained criteria; the whole
  ``compute_rollout_correction_and_rejection_mask``): weights, masks and every metric verl reports,
  float64, to 1e-6 relative; and the loss against verl's ``vanilla`` policy loss fed verl's weights
  and mask. Those tests skip when verl is not installed (``pytest.importorskip``).
- every method against a float64 hand reference written from its published definition (Python
  loops over tokens, autograd for the gradient): TIS, IcePop, token rejection, KPop (AReaL's
  binary-KL rejection), M2PO (Trinity-RFT), IPO (prime-rl); loss and gradient w.r.t. ``logp``.
- global statistics (``prepare_statistics`` over micro-batches) equal one call on the whole batch;
  the missing field is named; compositions run with grpo and the entropy methods, and the ones
  that cannot work are refused with their reason.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch

import entflow as ef
from entflow.errors import CompositionError, MissingInputError, ParameterError
from entflow.methods.needs import needs_of
from support.methods_ref import rows

D = torch.float64
RTOL, ATOL = 1e-6, 1e-9
CORRECTIONS = ("tis", "icepop", "rs_token", "rs_seq_sum", "rs_seq_mean", "rs_seq_max", "kpop", "m2po", "ipo")


def corr_batch(seed: int = 0, n: int = 12, t: int = 9, spread: float = 0.5, move: float = 0.25) -> ef.TokenBatch:
    """A float64 batch: ragged masks (row 0 full, row 1 empty), the engine's log-probs ``spread``
    away from the trainer's (row 2 off by 3 per token: sequence log-ratios past ±20), the current
    policy ``move`` away from old, GRPO-like advantages per row, entropies; padding holds garbage."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, t, generator=g, dtype=D) * 3 - 0.02
    roll = (old + spread * torch.randn(n, t, generator=g, dtype=D)).clamp(max=-1e-4)
    roll[2] = (old[2] - 3.0).clamp(max=-1e-4)
    logp = (old + move * torch.randn(n, t, generator=g, dtype=D)).clamp(max=-1e-4)
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    lengths[0], lengths[1], lengths[2] = t, 0, t
    mask = (torch.arange(t)[None] < lengths[:, None]).to(D)
    pad = mask == 0
    old, roll = old.masked_fill(pad, 50.0), roll.masked_fill(pad, -60.0)  # garbage: never read
    adv = torch.randn(n, generator=g, dtype=D)
    adv[3] = 0.0
    H = torch.rand(n, t, generator=g, dtype=D) * 2
    return ef.TokenBatch(logp.requires_grad_(True), old, adv, mask, old_entropy=H, rollout_logp=roll)


def fresh(b: ef.TokenBatch) -> ef.TokenBatch:
    return dataclasses.replace(b, logp=b.logp.detach().clone().requires_grad_(True))


def run(b: ef.TokenBatch, method, spec: ef.LossSpec | None = None) -> tuple[ef.LossOutput, torch.Tensor]:
    b = fresh(b)
    spec = ef.LossSpec() if spec is None else spec
    out = ef.policy_loss(b, method, spec)
    (grad,) = torch.autograd.grad(out.loss, b.logp)
    return out, grad


def close(a: float, b: float, rtol: float = RTOL, atol: float = ATOL) -> bool:
    return abs(a - b) <= atol + rtol * abs(b)


def assert_metrics(ours: dict[str, float], verl: dict[str, float], mapping: dict[str, str]) -> None:
    """Every verl metric in ``mapping`` (verl key → entflow key) equals ours."""
    assert mapping, "no metric compared"
    bad = {v: (ours.get(e), verl[v]) for v, e in mapping.items() if e not in ours or not close(ours[e], verl[v])}
    assert not bad, bad


# --------------------------------------------------------------------------------------------
# verl 0.9.1: importance weights (TIS, IcePop)
# --------------------------------------------------------------------------------------------

IS_GRID = [
    ("tis", {"threshold": 2.0}, 2.0),
    ("tis", {"threshold": 1.3}, 1.3),
    ("icepop", {}, "0.5_5.0"),
    ("icepop", {"lower": 0.4, "upper": 1.6}, "0.4_1.6"),
]


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize(("name", "params", "verl_threshold"), IS_GRID)
def test_is_weights_and_metrics_equal_verl(name, params, verl_threshold, level, normalize):
    helper = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper")
    b = corr_batch(seed=1)
    method = ef.get_method(name, level=level, batch_normalize=normalize, **params)
    out, _ = run(b, method)
    mask = b.mask.bool()
    w_verl, m_verl = helper.compute_rollout_correction_weights(
        b.old_logp - b.rollout_logp, b.mask, level, verl_threshold, normalize
    )
    torch.testing.assert_close(out.token_weights, w_verl * b.mask, rtol=RTOL, atol=ATOL)
    assert bool((out.token_weights[mask] != 1).any())  # the weights act
    mapping = {k: f"{name}/{k.removeprefix('rollout_is_')}" for k in m_verl}
    assert_metrics(out.metrics, m_verl, mapping)


def test_is_metrics_equal_verl_compute_is_metrics_directly():
    helper = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper")
    from entflow.core.mismatch import is_metrics, is_weights, log_ratio

    b = corr_batch(seed=2)
    valid = b.mask.bool()
    for level, upper, lower in itertools.product(("token", "sequence"), (2.0, 1.5), (None, 0.7)):
        w = is_weights(log_ratio(b.old_logp, b.rollout_logp, valid), valid, level, upper, lower)
        ours = {k: float(v) for k, v in is_metrics(w, valid, level, upper, lower).items()}
        verl = helper.compute_is_metrics(w.weights, w.raw, w.metric_log_ratio, b.mask, level, upper, lower)
        assert_metrics(ours, verl, {k: k.removeprefix("rollout_is_") for k in verl})


# --------------------------------------------------------------------------------------------
# verl 0.9.1: rejection sampling
# --------------------------------------------------------------------------------------------

# (entflow method, params, verl option, verl threshold)
RS_GRID = [
    ("rs_token", {}, "token_k1", "0.5_2.0"),  # the default
    ("rs_token", {"threshold": 1.5}, "token_k1", 1.5),  # one bound: lower = 1/upper
    ("rs_token", {"threshold": 1.8, "threshold_lower": 0.9}, "token_k1", "0.9_1.8"),
    ("rs_token", {"statistic": "k2", "threshold": 0.05}, "token_k2", 0.05),
    ("rs_token", {"statistic": "k3", "threshold": 0.05}, "token_k3", 0.05),
    ("rs_seq_sum", {}, "seq_sum_k1", "0.5_2.0"),
    ("rs_seq_sum", {"statistic": "k2", "threshold": 0.3}, "seq_sum_k2", 0.3),
    ("rs_seq_sum", {"statistic": "k3", "threshold": 0.4}, "seq_sum_k3", 0.4),
    ("rs_seq_mean", {}, "seq_mean_k3", 0.01),
    ("rs_seq_mean", {"statistic": "k1", "threshold": 1.15, "threshold_lower": 0.85}, "seq_mean_k1", "0.85_1.15"),
    ("rs_seq_mean", {"statistic": "k2", "threshold": 0.03}, "seq_mean_k2", 0.03),
    ("rs_seq_max", {}, "seq_max_k2", 0.5 * math.log(2) ** 2),
    ("rs_seq_max", {"statistic": "k3", "threshold": 0.2}, "seq_max_k3", 0.2),
]


def rs_mapping(name: str, option: str, verl: dict[str, float]) -> dict[str, str]:
    prefix = f"rollout_rs_{option}_"
    mapping = {k: f"{name}/{k.removeprefix(prefix)}" for k in verl if k.startswith(prefix)}
    mapping["rollout_rs_masked_fraction"] = f"{name}/masked_fraction"  # one criterion: the batch's is its own
    mapping["rollout_rs_seq_masked_fraction"] = f"{name}/batch_seq_masked_fraction"
    return mapping


@pytest.mark.parametrize(("name", "params", "option", "threshold"), RS_GRID, ids=[g[2] + str(g[1]) for g in RS_GRID])
def test_rejection_masks_and_metrics_equal_verl(name, params, option, threshold):
    helper = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper")
    b = corr_batch(seed=3)
    out, _ = run(b, ef.get_method(name, **params))
    mask_verl, m_verl = helper.compute_rollout_rejection_mask(b.old_logp - b.rollout_logp, b.mask, option, threshold)
    kept = out.token_weights > 0  # grpo's weight 1 on the kept tokens, 0 on the dropped ones
    assert torch.equal(kept, mask_verl.bool())
    assert 0 < int(kept.sum()) < int(b.mask.sum())  # the criterion rejects some, not all
    assert out.metrics["n_tokens"] == float(mask_verl.sum())  # rejected tokens left the denominator
    assert_metrics(out.metrics, m_verl, rs_mapping(name, option, m_verl))


def test_chained_criteria_equal_verl():
    """verl's ``rollout_rs="token_k1,seq_mean_k3,seq_max_k2"`` is ``rs_token+rs_seq_mean+rs_seq_max``."""
    helper = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper")
    b = corr_batch(seed=4, spread=0.3)
    m = ef.get_method("rs_token+rs_seq_mean+rs_seq_max", **{"rs_seq_mean.threshold": 0.02})
    out, _ = run(b, m)
    mask_verl, m_verl = helper.compute_rollout_rejection_mask(
        b.old_logp - b.rollout_logp, b.mask, "token_k1,seq_mean_k3,seq_max_k2", f"0.5_2.0,0.02,{0.5 * math.log(2) ** 2}"
    )
    assert torch.equal(out.token_weights > 0, mask_verl.bool())
    mapping: dict[str, str] = {}
    for name, option in (("rs_token", "token_k1"), ("rs_seq_mean", "seq_mean_k3"), ("rs_seq_max", "seq_max_k2")):
        prefix = f"rollout_rs_{option}_"
        mapping |= {k: f"{name}/{k.removeprefix(prefix)}" for k in m_verl if k.startswith(prefix)}
    assert_metrics(out.metrics, m_verl, mapping)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_the_whole_rollout_correction_equals_verl(level):
    """verl's ``compute_rollout_correction_and_rejection_mask`` (IS weights + two rejection
    criteria + the off-policy metrics) against ``tis+rs_token+rs_seq_sum`` and ``offpolicy_metrics``."""
    helper = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper")
    from entflow.core.mismatch import offpolicy_metrics

    b = corr_batch(seed=5, spread=0.35)
    m = ef.get_method("rs_token+rs_seq_sum+tis", level=level, **{"rs_seq_sum.threshold": 3.0})
    out, _ = run(b, m)
    proto, mask_verl, m_verl = helper.compute_rollout_correction_and_rejection_mask(
        b.old_logp, b.rollout_logp, b.mask, level, 2.0, False, "token_k1,seq_sum_k1", "0.5_2.0,3.0"
    )
    kept = mask_verl.bool()
    assert torch.equal(out.token_weights > 0, kept)
    w_verl = proto.batch["rollout_is_weights"]
    torch.testing.assert_close(out.token_weights[kept], w_verl[kept], rtol=RTOL, atol=ATOL)
    ours = dict(out.metrics)
    ours |= {f"mismatch/{k}": float(v) for k, v in offpolicy_metrics(b.old_logp, b.rollout_logp, b.mask.bool()).items()}
    mapping = {f"rollout_corr/rollout_is_{k}": f"tis/{k}" for k in ("mean", "eff_sample_size", "seq_std", "max")}
    mapping |= {f"rollout_corr/rollout_rs_seq_sum_k1_{k}": f"rs_seq_sum/{k}" for k in ("mean", "std", "seq_max")}
    mapping |= {f"rollout_corr/rollout_rs_token_k1_{k}": f"rs_token/{k}" for k in ("masked_fraction", "fraction_low")}
    mapping |= {
        f"rollout_corr/{k}": f"mismatch/{k}"
        for k in ("kl", "k3_kl", "training_ppl", "rollout_ppl", "log_ppl_diff", "ppl_ratio", "chi2_token", "chi2_seq")
    }
    assert_metrics(ours, m_verl, mapping)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_the_loss_equals_verl_vanilla_with_its_weights_and_mask(agg):
    """verl's ``vanilla`` PPO loss fed verl's IS weights and its rejected response mask is
    ``grpo+rs_token+tis``'s loss (dual clip c = 3 on both sides), value and gradient; a response
    the mask empties leaves the response mean in both. (seq-mean-token-sum-norm's denominators
    differ by design, N·T against verl's non-empty responses × T: the verl plugin rescales.)"""
    helper = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper")
    from verl.trainer.ppo import core_algos
    from verl.workers.config import PolicyLossConfig

    from support.verl_util import actor_config

    b = corr_batch(seed=6, spread=0.4)
    proto, mask_verl, _ = helper.compute_rollout_correction_and_rejection_mask(
        b.old_logp, b.rollout_logp, b.mask, "token", 2.0, False, "token_k1", "0.5_2.0"
    )
    cfg = actor_config(PolicyLossConfig(loss_mode="vanilla"), loss_agg_mode=agg)
    adv = b.token_advantages() * b.mask
    lp = b.logp.detach().clone().requires_grad_(True)
    verl_loss = core_algos.compute_policy_loss_vanilla(
        b.old_logp, lp, adv, mask_verl, agg, cfg, rollout_is_weights=proto.batch["rollout_is_weights"]
    )[0]
    (verl_grad,) = torch.autograd.grad(verl_loss, lp)
    out, grad = run(b, ef.get_method("grpo+rs_token+tis"), ef.LossSpec(0.2, 0.2, 3.0, agg, b.mask.shape[1]))
    assert close(float(out.loss.detach()), float(verl_loss.detach()))
    torch.testing.assert_close(grad, verl_grad, rtol=RTOL, atol=ATOL)


# --------------------------------------------------------------------------------------------
# float64 hand references
# --------------------------------------------------------------------------------------------


def tokens(b: ef.TokenBatch):
    for i in range(b.logp.shape[0]):
        for t in range(b.logp.shape[1]):
            if b.mask[i, t] > 0:
                yield i, t


def ppo_term(lp, b: ef.TokenBatch, i: int, t: int, eps: float = 0.2):
    """PPO-clip's ℓ_t (docs/design.md §4) as a differentiable scalar."""
    r = torch.exp(lp[i, t] - float(b.old_logp[i, t]))
    a = float(b.token_advantages()[i, t])
    return torch.maximum(-a * r, -a * r.clamp(1 - eps, 1 + eps))


def hand_loss(b: ef.TokenBatch, term, counted) -> tuple[float, torch.Tensor]:
    """token-mean of ``term(lp, i, t)`` over the valid tokens, divided by the number of tokens
    ``counted(i, t)`` says stay in the denominator; (value, gradient)."""
    lp = b.logp.detach().clone().requires_grad_(True)
    terms = [term(lp, i, t) for i, t in tokens(b)]
    n = sum(1 for i, t in tokens(b) if counted(i, t))
    loss = sum(terms) / n
    (g,) = torch.autograd.grad(loss, lp)
    return float(loss.detach()), g


def rho(b: ef.TokenBatch, i: int, t: int) -> float:
    return math.exp(max(-20.0, min(20.0, float(b.old_logp[i, t] - b.rollout_logp[i, t]))))


def seq_rho(b: ef.TokenBatch, i: int) -> float:
    s = sum(float(b.old_logp[i, t] - b.rollout_logp[i, t]) for t in range(b.mask.shape[1]) if b.mask[i, t] > 0)
    return math.exp(max(-20.0, min(20.0, s)))


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("normalize", [False, True])
def test_tis_against_the_hand_formula(level, normalize):
    b = corr_batch(seed=7)
    C = 1.6
    w = {(i, t): min(rho(b, i, t) if level == "token" else seq_rho(b, i), C) for i, t in tokens(b)}
    if normalize:
        if level == "token":
            mean = sum(w.values()) / len(w)
        else:
            rows = sorted({i for i, _ in w})
            mean = sum(next(w[k] for k in w if k[0] == i) for i in rows) / len(rows)
        w = {k: v / mean for k, v in w.items()}
    assert any(v != 1 for v in w.values())
    loss, grad = hand_loss(b, lambda lp, i, t: w[i, t] * ppo_term(lp, b, i, t), lambda i, t: True)
    out, g = run(b, ef.get_method("tis", level=level, threshold=C, batch_normalize=normalize))
    assert close(float(out.loss.detach()), loss)
    torch.testing.assert_close(g, grad, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_icepop_against_the_hand_formula(level):
    b = corr_batch(seed=8)
    lo, hi = 0.6, 1.7
    r = {(i, t): rho(b, i, t) if level == "token" else seq_rho(b, i) for i, t in tokens(b)}
    w = {k: v if lo <= v <= hi else 0.0 for k, v in r.items()}
    assert any(v == 0 for v in w.values()) and any(v > 0 for v in w.values())
    # zeroed tokens keep their place in the denominator (a token weight, as verl's weights)
    loss, grad = hand_loss(b, lambda lp, i, t: w[i, t] * ppo_term(lp, b, i, t), lambda i, t: True)
    out, g = run(b, ef.get_method("icepop", level=level, lower=lo, upper=hi))
    assert close(float(out.loss.detach()), loss)
    torch.testing.assert_close(g, grad, rtol=RTOL, atol=ATOL)


def test_token_rejection_against_the_hand_formula():
    b = corr_batch(seed=9)
    k3 = {(i, t): rho(b, i, t) - 1 - math.log(rho(b, i, t)) for i, t in tokens(b)}
    keep = {k: v <= 0.06 for k, v in k3.items()}
    assert not all(keep.values()) and any(keep.values())
    # rejected tokens leave the loss and its denominator
    loss, grad = hand_loss(b, lambda lp, i, t: ppo_term(lp, b, i, t) * keep[i, t], lambda i, t: keep[i, t])
    out, g = run(b, ef.get_method("rs_token", statistic="k3", threshold=0.06))
    assert close(float(out.loss.detach()), loss)
    torch.testing.assert_close(g, grad, rtol=RTOL, atol=ATOL)


def crafted(rho_or_pairs, adv: float = 1.0) -> ef.TokenBatch:
    """One response per given token: ``(π_old, π_rollout)`` probability pairs, or ratios ρ on
    π_rollout = 0.1; the current policy at π_old (r = 1), advantage ``adv``."""
    pairs = [(0.1 * x, 0.1) if isinstance(x, float) else x for x in rho_or_pairs]
    old = torch.tensor([[math.log(p)] for p, _ in pairs], dtype=D)
    roll = torch.tensor([[math.log(q)] for _, q in pairs], dtype=D)
    n = len(pairs)
    return ef.TokenBatch(old.clone(), old, torch.full((n,), adv, dtype=D), torch.ones(n, 1, dtype=D), rollout_logp=roll)


def test_icepop_keeps_its_band_bounds_inclusive():
    """verl keeps lower ≤ ρ ≤ upper: ratios just inside either bound keep their weight ρ, just outside get 0."""
    rhos = [0.5 * 1.03, 0.5 * 0.97, 5.0 * 0.97, 5.0 * 1.03, 1.0]  # (exactly at a bound: float rounding decides)
    out, _ = run(crafted(rhos), ef.get_method("icepop"))
    want = torch.tensor([[r if 0.5 <= r <= 5.0 else 0.0] for r in rhos], dtype=D)
    torch.testing.assert_close(out.token_weights, want, rtol=1e-12, atol=0)


def test_kpop_masks_on_the_larger_of_the_two_kls():
    """π_old = 0.1, π_rollout = 0.3: KL(Bern 0.1‖Bern 0.3) ≈ 0.116 ≤ φ = 0.13 < KL(Bern 0.3‖Bern 0.1) ≈ 0.154,
    so only the larger KL masks it (and its mirror pair); a pair below φ both ways is kept."""
    pairs = [(0.1, 0.3), (0.3, 0.1), (0.2, 0.25)]
    assert binary_kl(0.1, 0.3) <= 0.13 < binary_kl(0.3, 0.1)
    out, _ = run(crafted(pairs), ef.get_method("kpop", threshold=0.13))
    torch.testing.assert_close(out.token_weights[:, 0], torch.tensor([0.0, 0.0, 0.2 / 0.25], dtype=D))


def binary_kl(p: float, q: float) -> float:
    p, q = (min(max(x, 1e-8), 1 - 1e-8) for x in (p, q))
    return p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))


@pytest.mark.parametrize("phi", [0.02, 0.1])
def test_kpop_against_the_hand_formula(phi):
    """AReaL's binary-KL rejection (areal/utils/functional/functional.py): a token is masked when
    the larger of its two Bernoulli KLs exceeds φ; kept tokens weighted by ρ; the denominator
    counts every valid token (AReaL divides by the token count before rejection)."""
    b = corr_batch(seed=10, spread=0.3)
    w = {}
    for i, t in tokens(b):
        p, q = math.exp(float(b.old_logp[i, t])), math.exp(float(b.rollout_logp[i, t]))
        kept = max(binary_kl(p, q), binary_kl(q, p)) <= phi
        w[i, t] = math.exp(float(b.old_logp[i, t] - b.rollout_logp[i, t])) if kept else 0.0
    assert any(v == 0 for v in w.values()) and any(v > 0 for v in w.values())
    loss, grad = hand_loss(b, lambda lp, i, t: w[i, t] * ppo_term(lp, b, i, t), lambda i, t: True)
    out, g = run(b, ef.get_method("kpop", threshold=phi))
    assert close(float(out.loss.detach()), loss)
    torch.testing.assert_close(g, grad, rtol=RTOL, atol=ATOL)
    n = sum(1 for _ in tokens(b))
    assert close(out.metrics["kpop/masked_frac"], sum(v == 0 for v in w.values()) / n)


def m2po_dropped(b: ef.TokenBatch, tau: float) -> set[tuple[int, int]]:
    """Trinity-RFT's M2PO mask: the PPO-active tokens (A·log r > 0, r = π_θ/π_rollout) sorted by
    (log r)² (ties: earlier token first); the longest prefix whose mean is ≤ τ is kept."""
    A = b.token_advantages()
    active = []
    for i, t in tokens(b):
        lr = float(b.logp.detach()[i, t] - b.rollout_logp[i, t])
        if (A[i, t] > 0 and lr > 0) or (A[i, t] < 0 and lr < 0):
            active.append((lr * lr, i * b.mask.shape[1] + t, (i, t)))
    if not active or sum(v for v, _, _ in active) / len(active) <= tau:
        return set()
    active.sort(key=lambda x: (x[0], x[1]))
    keep, total = 0, 0.0
    for j, (v, _, _) in enumerate(active):
        total += v
        if total / (j + 1) <= tau:
            keep = j + 1
    return {k for _, _, k in active[keep:]}


@pytest.mark.parametrize("tau", [0.04, 0.2, 0.0])
def test_m2po_against_the_hand_formula(tau):
    b = corr_batch(seed=11, spread=0.4)
    dropped = m2po_dropped(b, tau)
    assert dropped
    A = b.token_advantages()

    def term(lp, i, t):
        if (i, t) in dropped:
            return lp[i, t] * 0.0
        return -float(A[i, t]) * torch.exp(lp[i, t] - float(b.rollout_logp[i, t]))  # no clip

    loss, grad = hand_loss(b, term, lambda i, t: True)  # dropped tokens stay in the denominator
    out, g = run(b, ef.get_method("m2po", threshold=tau))
    assert close(float(out.loss.detach()), loss)
    torch.testing.assert_close(g, grad, rtol=RTOL, atol=ATOL)
    n = sum(1 for _ in tokens(b))
    assert close(out.metrics["m2po/masked_fraction"], len(dropped) / n)
    assert out.metrics["m2po/m2_after"] <= tau + 1e-12


@pytest.mark.parametrize(("tau", "adv_tau", "kl_tau"), [(0.1, 1.0, 1e-3), (0.05, 0.5, 0.1)])
def test_ipo_against_the_hand_formula(tau, adv_tau, kl_tau):
    """prime-rl's ipo_loss_fn (src/prime_rl/trainer/rl/loss.py): the pg term on the tokens whose
    probability moved at most τ from the engine's, the (log r)² penalty on every valid token."""
    b = corr_batch(seed=12, spread=0.3)
    A = b.token_advantages()

    def term(lp, i, t):
        roll = float(b.rollout_logp[i, t])
        lr = lp[i, t] - roll
        keep = abs(math.exp(float(lp.detach()[i, t])) - math.exp(roll)) <= tau
        return -(adv_tau * float(A[i, t]) * torch.exp(lr)) * keep + kl_tau * lr**2

    masked = sum(
        abs(math.exp(float(b.logp.detach()[i, t])) - math.exp(float(b.rollout_logp[i, t]))) > tau for i, t in tokens(b)
    )
    assert masked > 0
    loss, grad = hand_loss(b, term, lambda i, t: True)
    out, g = run(b, ef.get_method("ipo", threshold=tau, adv_tau=adv_tau, kl_tau=kl_tau))
    assert close(float(out.loss.detach()), loss)
    torch.testing.assert_close(g, grad, rtol=RTOL, atol=ATOL)
    assert close(out.metrics["ipo/masked_frac"], masked / sum(1 for _ in tokens(b)))


def test_entropy_quartile_metrics_count_what_the_method_removed():
    """``icepop/masked_frac_q*``: per quartile of the valid tokens' old entropy (torch.quantile's
    interpolation), the share of its tokens that got weight 0."""
    b = corr_batch(seed=13)
    out, _ = run(b, ef.get_method("icepop", lower=0.8, upper=1.25))
    valid = b.mask.bool()
    H = b.old_entropy[valid]
    cuts = torch.quantile(H, torch.tensor([0.25, 0.5, 0.75], dtype=D))
    zero = (out.token_weights == 0)[valid]
    for k in range(4):
        lo = -math.inf if k == 0 else float(cuts[k - 1])
        hi = math.inf if k == 3 else float(cuts[k])
        members = (H > lo) & (H <= hi)
        assert close(out.metrics[f"icepop/masked_frac_q{k + 1}"], float(zero[members].double().mean()))
    assert out.metrics["icepop/oob_ratio"] > 0


# --------------------------------------------------------------------------------------------
# global statistics, missing input, composition
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params"),
    [("m2po", {}), ("tis", {"batch_normalize": True}), ("icepop", {"batch_normalize": True, "level": "sequence"})],
)
def test_global_statistics_over_micro_batches_equal_the_whole_batch(name, params):
    b = corr_batch(seed=14, spread=0.4)
    whole, g_whole = run(b, ef.get_method(name, **params))
    parts = [slice(0, 5), slice(5, 12)]
    micro = [rows(b, s, logp=b.logp.detach()[s]) for s in parts]
    m = ef.get_method(name, **params)
    stats = ef.prepare_statistics(micro, m)
    lp = b.logp.detach().clone().requires_grad_(True)
    total = sum(
        ef.policy_loss(dataclasses.replace(mb, logp=lp[s]), m, stats=st).loss
        for mb, st, s in zip(micro, stats, parts, strict=True)
    )
    (g,) = torch.autograd.grad(total, lp)
    assert close(float(total.detach()), float(whole.loss.detach()))
    torch.testing.assert_close(g, g_whole, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", CORRECTIONS)
def test_a_correction_without_rollout_logp_names_the_field(name):
    b = dataclasses.replace(corr_batch(seed=15), rollout_logp=None)
    with pytest.raises(MissingInputError, match="rollout_logp") as e:
        ef.policy_loss(b, name)
    assert e.value.field == "rollout_logp"
    assert needs_of(name).rollout_logp


@pytest.mark.parametrize("name", CORRECTIONS)
@pytest.mark.parametrize("other", ["grpo", "steer", "entropy_bonus", "forking_tokens", "clip_higher"])
def test_each_correction_composes_with_grpo_and_entropy_methods(name, other):
    b = corr_batch(seed=16)
    b = dataclasses.replace(b, entropy=b.old_entropy.clone().requires_grad_(True))
    composed, _ = run(b, ef.get_method(f"{other}+{name}"))
    alone, _ = run(b, ef.get_method(name))
    assert math.isfinite(float(composed.loss.detach()))
    if other in ("grpo", "clip_higher") and name in ("m2po", "ipo"):  # their loss ignores the PPO clip
        assert close(float(composed.loss.detach()), float(alone.loss.detach()))
    if other == "forking_tokens" and name in ("tis", "icepop", "kpop"):  # token weights multiply
        fork, _ = run(b, ef.get_method("forking_tokens"))
        torch.testing.assert_close(composed.token_weights, alone.token_weights * fork.token_weights)
    if other == "grpo":
        assert close(float(composed.loss.detach()), float(alone.loss.detach()))


REWEIGHTING = ("tis", "icepop", "kpop", "m2po", "ipo")


@pytest.mark.parametrize(("a", "b"), list(itertools.combinations(REWEIGHTING, 2)))
def test_two_mismatch_reweightings_are_refused(a, b):
    with pytest.raises(CompositionError, match=r"twice|both replace the per-token loss"):
        ef.get_method(f"{a}+{b}")


@pytest.mark.parametrize("name", ["m2po", "ipo"])
@pytest.mark.parametrize("other", ["kl_cov", "gpg", "dppo_kl", "geo_mean", "cispo"])
def test_a_loss_replacing_correction_refuses_another_loss(name, other):
    with pytest.raises(CompositionError, match="both replace the per-token loss"):
        ef.get_method(f"{name}+{other}")


@pytest.mark.parametrize("name", REWEIGHTING)
def test_rejection_masks_compose_with_every_correction(name):
    b = corr_batch(seed=17)
    out, _ = run(b, ef.get_method(f"rs_seq_max+{name}"))
    assert out.metrics["n_tokens"] < float(b.mask.sum())  # the mask removed tokens first


@pytest.mark.parametrize(
    ("name", "params", "param"),
    [
        ("tis", {"threshold": 0.0}, "threshold"),
        ("tis", {"level": "seq"}, "level"),
        ("icepop", {"lower": 2.0, "upper": 1.5}, "lower"),
        ("rs_token", {"statistic": "k4"}, "statistic"),
        ("rs_seq_mean", {"statistic": "k1"}, "threshold"),  # the default bound is k3's
        ("rs_seq_max", {"statistic": "k1", "threshold": 2.0}, "statistic"),
        ("rs_token", {"statistic": "k3", "threshold": 0.1, "threshold_lower": 0.05}, "threshold_lower"),
        ("kpop", {"threshold": -1.0}, "threshold"),
        ("m2po", {"threshold": -0.1}, "threshold"),
        ("ipo", {"kl_tau": -1.0}, "kl_tau"),
    ],
)
def test_bad_parameters_are_named(name, params, param):
    with pytest.raises(ParameterError, match=param):
        ef.get_method(name, **params)
