"""siren (arXiv 2509.25133), entropic (arXiv 2511.15248) and aepo (arXiv 2510.08141) against
float64 references written here with explicit loops, independently of the method code.

Each loss and its gradient is checked on batches with padding (holding inf / NaN-prone values),
degenerate responses (one token, all-equal entropies, no valid token) and A = 0; the controllers
on hand-computed multi-step trajectories, and their state through a state_dict round trip.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

import entflow as ef
from entflow.cli.main import main
from entflow.errors import MissingInputError, ParameterError
from entflow.methods.aepo import AEPO
from entflow.methods.siren import topp_entropy

D = torch.float64
TOL = 1e-12


def mask_of(lengths: list[int], t: int) -> torch.Tensor:
    return (torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]).to(D)


# ------------------------------------------------------------------------------------------
# topp_entropy
# ------------------------------------------------------------------------------------------


def ref_topp(z: list[float], top_p: float) -> tuple[float, list[float]]:
    """Nucleus entropy and its gradient d H / d z by hand: S = most probable tokens while the
    mass before them is < top_p; q = π restricted to S, renormalised; dH/dz_b = −q_b(log q_b + H)
    on S (softmax entropy over S), 0 elsewhere."""
    m = max(z)
    e = [math.exp(v - m) for v in z]
    p = [v / sum(e) for v in e]
    order = sorted(range(len(z)), key=lambda b: -p[b])
    S, mass = [], 0.0
    for b in order:
        if mass < top_p or not S:
            S.append(b)
        mass += p[b]
    tot = sum(p[b] for b in S)
    q = {b: p[b] / tot for b in S}
    H = -sum(v * math.log(v) for v in q.values())
    grad = [(-q[b] * (math.log(q[b]) + H) if b in q else 0.0) for b in range(len(z))]
    return H, grad


def test_topp_entropy_hand_case():
    z = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=D))
    # top_p 0.7: mass before the 2nd token 0.5 < 0.7 (in), before the 3rd 0.8 (out) → q = (5/8, 3/8)
    assert float(topp_entropy(z, 0.7)) == pytest.approx(-(0.625 * math.log(0.625) + 0.375 * math.log(0.375)), abs=TOL)
    assert float(topp_entropy(z, 0.4)) == 0.0  # the top token alone already exceeds 0.4
    assert float(topp_entropy(z, 1.0)) == pytest.approx(-sum(v * math.log(v) for v in (0.5, 0.3, 0.15, 0.05)), abs=TOL)


def test_topp_entropy_and_gradient_match_reference(gen):
    z = torch.randn(3, 4, 9, generator=gen, dtype=D) * 2
    for top_p in (0.3, 0.8, 0.95, 1.0):
        x = z.clone().requires_grad_(True)
        H = topp_entropy(x, top_p)
        Hd = H.detach()
        H.sum().backward()
        for idx in [(i, j) for i in range(3) for j in range(4)]:
            h, g = ref_topp(z[idx].tolist(), top_p)
            assert float(Hd[idx].detach()) == pytest.approx(h, abs=TOL)
            assert torch.allclose(x.grad[idx], torch.tensor(g, dtype=D), atol=TOL, rtol=0)
    full = ef.entropy_from_logits(z)
    assert torch.allclose(topp_entropy(z, 1.0), full, atol=TOL, rtol=0)
    # temperature divides the logits first; half precision is computed in float32
    assert torch.allclose(topp_entropy(z, 0.8, temperature=0.7), topp_entropy(z / 0.7, 0.8), atol=TOL, rtol=0)
    assert topp_entropy(z.to(torch.bfloat16), 0.8).dtype == torch.float32


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan"), True])
def test_topp_entropy_rejects_bad_top_p(bad):
    with pytest.raises(ParameterError, match="top_p"):
        topp_entropy(torch.zeros(2, 3), bad)


# ------------------------------------------------------------------------------------------
# siren
# ------------------------------------------------------------------------------------------

T = 6
SIREN_LENGTHS = [6, 4, 3, 1, 0]  # row 2: all-equal entropies, row 3: one token, row 4: empty


def siren_entropy(gen: torch.Generator) -> torch.Tensor:
    H = torch.rand(5, T, generator=gen, dtype=D) * 2
    H[2, :3] = 0.7  # ties: nothing exceeds its own quantile
    H[:, 5][1:] = math.inf  # padding garbage (rows 1-4 have no token 5)
    H[4] = math.inf
    return H


def ref_siren(H: torch.Tensor, lengths: list[int], q: float, c: float, a: float, agg: str):
    """(loss, dloss/dH) by hand: per-response linear-interpolation quantile, strict >."""
    grad = torch.zeros_like(H)
    rows = []
    for i, n in enumerate(lengths):
        vals = sorted(H[i, :n].tolist())
        if not vals:
            continue
        pos = q * (n - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        thr = vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)
        sel = [t for t in range(n) if float(H[i, t]) > thr]
        if sel:
            rows.append((i, sel))
    if not rows:
        return 0.0, grad
    if agg == "seq-mean-token-mean":
        Hbar = sum(sum(float(H[i, t]) for t in s) / len(s) for i, s in rows) / len(rows)
        d = {(i, t): 1 / (len(rows) * len(s)) for i, s in rows for t in s}
    else:
        k = sum(len(s) for _, s in rows)
        Hbar = sum(float(H[i, t]) for i, s in rows for t in s) / k
        d = {(i, t): 1 / k for i, s in rows for t in s}
    for (i, t), v in d.items():
        grad[i, t] = 2 * c * (Hbar - a) * v
    return c * (Hbar - a) ** 2, grad


def siren_batch(gen: torch.Generator, H: torch.Tensor) -> ef.TokenBatch:
    m = mask_of(SIREN_LENGTHS, T)
    logp = (-torch.rand(5, T, generator=gen, dtype=D) * 2).requires_grad_(True)
    return ef.TokenBatch(logp, logp.detach() + 0.1, torch.tensor([1.0, -1.0, 0.5, 0.0, 1.0], dtype=D), m,
                         entropy=H.clone().requires_grad_(True))  # fmt: skip


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "token-mean"])
@pytest.mark.parametrize("q", [0.8, 0.5, 0.0])
def test_siren_loss_and_gradient_match_reference(gen, agg, q):
    H = siren_entropy(gen)
    b = siren_batch(gen, H)
    m = ef.get_method("siren", c=0.3, quantile=q, anchor=0.25, agg=agg)
    out = ef.policy_loss(b, m)
    out.loss.backward()
    loss, grad = ref_siren(H, SIREN_LENGTHS, q, 0.3, 0.25, agg)
    assert loss > 0  # the case selects something
    assert out.metrics["siren/loss"] == pytest.approx(loss, abs=TOL)
    assert out.metrics["loss"] == pytest.approx(out.metrics["pg_loss"] + loss, abs=TOL)
    assert torch.allclose(b.entropy.grad, grad, atol=TOL, rtol=0)
    # the policy-gradient part is untouched: same logp gradient as grpo
    logp2 = b.logp.detach().clone().requires_grad_(True)
    ef.policy_loss(ef.TokenBatch(logp2, b.old_logp, b.advantages, b.mask), "grpo").loss.backward()
    assert torch.equal(b.logp.grad, logp2.grad)


def test_siren_nothing_selected_gives_zero_term(gen):
    H = torch.full((2, 3), 0.5, dtype=D)  # every response all-equal: nothing above its quantile
    logp = torch.full((2, 3), -1.0, dtype=D, requires_grad=True)
    b = ef.TokenBatch(logp, logp.detach(), torch.ones(2, dtype=D), torch.ones(2, 3, dtype=D),
                      entropy=H.clone().requires_grad_(True))  # fmt: skip
    out = ef.policy_loss(b, ef.get_method("siren", anchor=0.1))
    out.loss.backward()
    assert out.metrics["siren/loss"] == 0.0 and out.metrics["siren/selected_frac"] == 0.0
    assert float(b.entropy.grad.abs().max()) == 0.0


def test_siren_self_anchor_and_resume(gen):
    H0 = siren_entropy(gen)
    m = ef.get_method("siren", c=0.5)
    assert m.anchor_value is None
    b0 = siren_batch(gen, H0)
    out = ef.policy_loss(b0, m)  # first call: the anchor is this H̄ → term and gradient 0
    out.loss.backward()
    assert float(b0.entropy.grad.abs().max()) == 0.0
    a_ref = ref_siren(H0, SIREN_LENGTHS, 0.8, 1.0, 0.0, "seq-mean-token-mean")[0] ** 0.5  # H̄ (c = 1, a = 0)
    assert float(m.anchor_value) == pytest.approx(a_ref, abs=TOL)
    assert out.metrics["siren/loss"] == 0.0 and out.metrics["siren/anchor"] == pytest.approx(a_ref, abs=TOL)
    saved = copy.deepcopy(m.state_dict())
    H1 = H0.clone()
    H1[0, :6] += 0.2
    H1[1, :4] -= 0.1
    b1 = siren_batch(gen, H1)
    out1 = ef.policy_loss(b1, m)
    out1.loss.backward()
    loss1, grad1 = ref_siren(H1, SIREN_LENGTHS, 0.8, 0.5, a_ref, "seq-mean-token-mean")
    assert loss1 > 0 and out1.metrics["siren/loss"] == pytest.approx(loss1, abs=TOL)
    assert torch.allclose(b1.entropy.grad, grad1, atol=TOL, rtol=0)
    # resume: a new method loaded with the state continues with the same anchor; a fresh one re-anchors
    resumed, fresh = ef.get_method("siren", c=0.5), ef.get_method("siren", c=0.5)
    resumed.load_state_dict(saved)
    assert ef.policy_loss(siren_batch(gen, H1), resumed).metrics["siren/loss"] == pytest.approx(loss1, abs=TOL)
    assert ef.policy_loss(siren_batch(gen, H1), fresh).metrics["siren/loss"] == 0.0
    with pytest.raises(ParameterError, match="anchor_value"):
        fresh.load_state_dict({})


# ------------------------------------------------------------------------------------------
# entropic
# ------------------------------------------------------------------------------------------


def entropic_batch(H_level: float = 0.3):
    """Rows: 5 valid / 3 valid / 4 valid (A = 0) / empty; high-probability tokens (p > 0.95),
    one exactly at p = 0.95 (not high), high-probability values in the padding."""
    lp = torch.tensor(
        [
            [-0.01, -0.04, -0.06, -1.0, math.log(0.95), -0.02],
            [-0.03, -2.0, -0.001, -0.01, -0.01, -0.01],
            [-0.02, -0.5, -0.03, -0.8, -0.01, -0.01],
            [-0.01, -0.01, -0.01, -0.01, -0.01, -0.01],
        ],
        dtype=D,
    )
    old = lp + torch.tensor([0.02, -0.03, 0.01, 0.05, -0.02, 0.0], dtype=D)
    old[:, 5] = math.inf  # garbage in padding
    adv = torch.tensor([1.5, -0.8, 0.0, 2.0], dtype=D)
    m = mask_of([5, 3, 4, 0], 6)
    Hold = torch.full((4, 6), H_level, dtype=D)
    logp = lp.clone().requires_grad_(True)
    return ef.TokenBatch(logp, old, adv, m, old_entropy=Hold), lp, old, adv, m


def ref_entropic_term(lp, old, adv, m, alpha, agg, p_high=0.95):
    """α·agg(−r|A| on p > p_high) and its gradient w.r.t. logp, by hand."""
    n, t = lp.shape
    grad = torch.zeros(n, t, dtype=D)
    vals = torch.zeros(n, t, dtype=D)
    for i in range(n):
        for j in range(t):
            if m[i, j] and lp[i, j] > math.log(p_high):
                r = math.exp(lp[i, j] - old[i, j])
                vals[i, j] = -r * abs(float(adv[i]))
                grad[i, j] = vals[i, j]  # d(−r|A|)/dlogp = −r|A|
    if agg == "token-mean":
        w = torch.full((n, t), 1 / float(m.sum()), dtype=D)
    else:
        rows = [i for i in range(n) if m[i].sum() > 0]
        w = torch.zeros(n, t, dtype=D)
        for i in rows:
            w[i] = 1 / (len(rows) * float(m[i].sum()))
    return alpha * float((vals * w).sum()), alpha * grad * w


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_entropic_loss_and_gradient_match_reference(agg):
    m = ef.get_method("entropic", target=0.1, kp=0.5, ki=0.2)
    m.update({"entropy": 0.6})  # integral 0.5
    b, lp, old, adv, mask = entropic_batch(0.3)
    out = ef.policy_loss(b, m, ef.LossSpec(agg=agg))
    out.loss.backward()
    alpha = 0.5 * (0.3 - 0.1) + 0.2 * 0.5  # K_p·e + K_i·I = 0.2
    term, g = ref_entropic_term(lp, old, adv, mask, alpha, agg)
    assert term != 0 and out.metrics["entropic/alpha"] == pytest.approx(alpha, abs=TOL)
    assert out.metrics["entropic/loss"] == pytest.approx(term, abs=TOL)
    b2, *_ = entropic_batch(0.3)
    ef.policy_loss(b2, "grpo", ef.LossSpec(agg=agg)).loss.backward()
    assert torch.allclose(b.logp.grad - b2.logp.grad, g, atol=TOL, rtol=0)
    assert out.metrics["entropic/high_frac"] == pytest.approx(6 / 12, abs=TOL)  # 2 + 2 + 2 of 12 valid


def test_entropic_is_a_weight_one_plus_minus_alpha_on_high_probability_tokens():
    """Inside the clip, the term moves the weight of high-probability positive tokens to 1 + α and
    of negative ones to 1 − α (α > 0 lowers entropy)."""
    m = ef.get_method("entropic", target=0.0, kp=1.0, ki=0.0)
    b, lp, _, adv, mask = entropic_batch(0.25)  # α = 0.25
    ef.policy_loss(b, m).loss.backward()
    b2, *_ = entropic_batch(0.25)
    ef.policy_loss(b2, "grpo").loss.backward()
    high = mask.bool() & (lp > math.log(0.95))
    sign = torch.sign(adv)[:, None].expand_as(lp)
    ratio = torch.where(high, b.logp.grad / b2.logp.grad.where(b2.logp.grad != 0, torch.ones_like(lp)), 1.0)
    want = torch.where(high & (sign != 0), 1 + 0.25 * sign, torch.ones_like(lp))
    assert torch.allclose(ratio[high & (sign != 0)], want[high & (sign != 0)], atol=1e-12, rtol=0)


def test_entropic_pi_trajectory_and_resume():
    """K_p = 1, K_i = 0.5, α_max = 0.6, H* = 0.1, batch entropies 0.5, 0.3, 0.05, 0.02, 0.9:
    e = 0.4, 0.2, −0.05, −0.08, 0.8; I (before the step) = 0, 0.4, 0.6, 0.55, 0.47;
    α = e + I/2 = 0.4, 0.4, 0.25, 0.195, 1.035 → clipped to 0.6."""
    Hs = [0.5, 0.3, 0.05, 0.02, 0.9]
    alphas = [0.4, 0.4, 0.25, 0.195, 0.6]
    integrals = [0.4, 0.6, 0.55, 0.47, 1.27]
    m = ef.get_method("entropic", target=0.1, kp=1.0, ki=0.5, alpha_max=0.6)
    resumed = None
    for k, H in enumerate(Hs):
        for meth in [m] + ([resumed] if resumed is not None else []):
            out = ef.policy_loss(entropic_batch(H)[0], meth)
            assert out.metrics["entropic/alpha"] == pytest.approx(alphas[k], abs=TOL)
            meth.update({"entropy": out.metrics["entropy"], "step": k})
            assert meth.integral == pytest.approx(integrals[k], abs=TOL)
        if k == 2:  # checkpoint after step 2: a resumed controller continues exactly
            resumed = ef.get_method("entropic", target=0.1, kp=1.0, ki=0.5, alpha_max=0.6)
            resumed.load_state_dict(copy.deepcopy(m.state_dict()))
            assert resumed.integral == m.integral
    assert ef.get_method("entropic", target=0.1, kp=1.0, ki=0.5).integral == 0.0


# ------------------------------------------------------------------------------------------
# aepo
# ------------------------------------------------------------------------------------------


def test_aepo_controller_trajectory_and_resume():
    m = ef.get_method("aepo", target=0.5, t_high=1.3, t_low=0.7, n_samples=10)
    assert (m.temperature, m.sample_budget) == (1.3, 10)  # no entropy yet counts as 0: sample hot
    steps = [(0.4, 1.3, 10), (0.5, 1.3, 10), (0.7, 0.7, 5), (0.9, 0.7, 5), (0.3, 1.3, 10)]
    saved = None
    for k, (H, temp, budget) in enumerate(steps):
        m.update({"entropy": H, "step": k})
        assert (m.temperature, m.sample_budget) == (temp, budget)
        if k == 2:
            saved = copy.deepcopy(m.state_dict())
    resumed = ef.get_method("aepo", target=0.5, t_high=1.3, t_low=0.7, n_samples=10)
    assert resumed.temperature == 1.3
    resumed.load_state_dict(saved)
    assert (resumed.temperature, resumed.sample_budget, resumed.last_entropy) == (0.7, 5, 0.7)
    assert m.n_prompts(16) == 4 and m.n_prompts(3) == 1


def temperature_batch(rewards: list[float], lengths: list[int], t: int = 5) -> ef.TokenBatch:
    n = len(rewards)
    logp = -torch.arange(1, n * t + 1, dtype=D).reshape(n, t) / (n * t)
    return ef.TokenBatch(logp, logp.clone(), None, mask_of(lengths, t), rewards=torch.tensor(rewards, dtype=D),
                         group_index=torch.arange(n) // 4)  # fmt: skip


@pytest.mark.parametrize(
    ("threshold", "raising", "kept"),
    [
        # group 0 rewards 1,0,1,0: A = ±0.866; group 1 1,1,1,0: A = 0.5, 0.5, 0.5, −1.5; group 2 all 1: A = 0
        (0.05, True, [0, 2, 4, 5]),  # 5 rewarded (0, 2, 4, 5, 6), budget min(5, 4) = 4, batch order
        (0.05, False, [0, 2]),  # above target: budget 4 // 2 = 2
        (0.6, True, [0, 2]),  # A = 0.5 no longer exceeds the threshold
    ],
)
def test_aepo_reinforce_advantages(threshold, raising, kept):
    m = ef.get_method("aepo", target=0.5, n_samples=4, threshold=threshold, alpha=0.7)
    if not raising:
        m.update({"entropy": 0.9})
    b = temperature_batch([1, 0, 1, 0, 1, 1, 1, 0, 1, 1, 1, 1], [5, 3, 1, 5, 2, 5, 5, 4, 5, 5, 5, 5])
    adv, keep = m.reinforce_advantages(b)
    assert keep.tolist() == [i in kept for i in range(12)]
    want = torch.zeros(12, 5, dtype=D)
    for i in kept:
        want[i] = 0.7 * b.mask[i]
    assert torch.equal(adv, want)


def test_aepo_loss_on_the_merged_batch_matches_reinforce_reference():
    """Regular rows (GRPO advantages) + kept temperature rows (advantage α): the loss is PPO-clip
    token-mean over all rows; its gradient on a kept row is −α·r·I/Σm (REINFORCE, ratio-weighted)."""
    m = ef.get_method("aepo", n_samples=4, alpha=0.7)
    tb = temperature_batch([1, 0, 1, 0, 1, 1, 1, 0], [5, 3, 1, 5, 2, 5, 5, 4])
    adv_t, keep = m.reinforce_advantages(tb)
    idx = keep.nonzero().squeeze(1)
    g = torch.Generator().manual_seed(3)
    n_reg = 4
    lp_reg = -torch.rand(n_reg, 5, generator=g, dtype=D)
    adv_reg = torch.tensor([1.2, -0.4, 0.0, -0.8], dtype=D)[:, None].expand(n_reg, 5)
    lp = torch.cat([lp_reg, tb.logp[idx]])
    old = lp + 0.3 * torch.randn(lp.shape, generator=g, dtype=D)
    mask = torch.cat([mask_of([5, 4, 2, 5], 5), tb.mask[idx]])
    adv = torch.cat([adv_reg, adv_t[idx]]) * mask
    logp = lp.clone().requires_grad_(True)
    out = ef.policy_loss(ef.TokenBatch(logp, old, adv, mask), m)
    out.loss.backward()
    loss, grad = 0.0, torch.zeros_like(lp)
    n_tok = float(mask.sum())
    for i in range(lp.shape[0]):
        for t in range(5):
            if not mask[i, t]:
                continue
            A, r = float(adv[i, t]), math.exp(lp[i, t] - old[i, t])
            loss += max(-A * r, -A * min(max(r, 0.8), 1.2)) / n_tok
            cut = (A > 0 and r > 1.2) or (A < 0 and r < 0.8)
            grad[i, t] = 0.0 if cut else -A * r / n_tok
    assert float(out.loss.detach()) == pytest.approx(loss, abs=TOL)
    assert torch.allclose(logp.grad, grad, atol=TOL, rtol=0)
    assert bool((grad[n_reg:] != 0).any())  # the REINFORCE rows carry gradient
    assert out.metrics["aepo/n_kept"] == 4.0 and out.metrics["aepo/temperature"] == 1.2


# ------------------------------------------------------------------------------------------
# parameters, missing inputs, CLI
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "param", "value"),
    [
        ("siren", "c", -0.1),
        ("siren", "top_p", 0.0),
        ("siren", "top_p", 1.5),
        ("siren", "quantile", 1.0),
        ("siren", "anchor", -1.0),
        ("siren", "agg", "sum"),
        ("entropic", "target", -0.1),
        ("entropic", "kp", -1.0),
        ("entropic", "ki", -0.01),
        ("entropic", "p_high", 1.0),
        ("entropic", "alpha_max", -1.0),
        ("aepo", "target", -0.5),
        ("aepo", "t_high", 0.0),
        ("aepo", "alpha", -1.0),
        ("aepo", "n_samples", 0),
        ("aepo", "n_samples", 2.5),
        ("aepo", "prompt_fraction", 0.0),
        ("aepo", "t_low", 1.5),  # cross-parameter: t_low <= t_high
    ],
)
def test_bad_parameters_raise_parameter_error(name, param, value):
    with pytest.raises(ParameterError) as e:
        ef.get_method(name, **{param: value})
    assert e.value.param == param and f"'{param}'" in str(e.value)


def test_missing_inputs_are_named(gen):
    H = siren_entropy(gen)
    b = siren_batch(gen, H)
    bare = ef.TokenBatch(b.logp, b.old_logp, b.advantages, b.mask)
    with pytest.raises(MissingInputError, match="entropy"):
        ef.policy_loss(bare, ef.get_method("siren"))
    with pytest.raises(MissingInputError, match="old_entropy"):
        ef.policy_loss(bare, ef.get_method("entropic"))
    for name in ("entropic", "aepo"):
        with pytest.raises(MissingInputError, match="entropy"):
            ef.get_method(name).update({"step": 1})
    with pytest.raises(MissingInputError, match="rewards"):
        AEPO().reinforce_advantages(bare)


def test_cli_lists_them(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    for name in ("siren", "entropic", "aepo"):
        assert f" {name} " in out
    assert main(["methods", "entropic"]) == 0
    assert "arXiv 2511.15248" in capsys.readouterr().out
