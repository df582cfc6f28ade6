"""VAPO's positive-example NLL and CHORD (methods/imitation.py).

positive_nll: no peer is importable here (NeMo-RL's ``ClippedPGLossFn``, whose
``positive_example_nll_weight`` branch this was read against, needs its Ray/Megatron stack), so an
independent float64 reference of VAPO's positive-example LM loss (arXiv 2504.05118) in NeMo-RL's
reading: a token mean of −log π over the valid tokens of responses with reward > 0, whatever the
aggregation, 0 when none.
chord: a float64 hand formula, and Trinity-RFT 0.6.0's ``MIXCHORDPolicyLossFn`` and
``mu_schedule_function`` on the same tensors (loss and gradient w.r.t. the log-probs to 1e-6
relative, token-mean and seq-mean-token-mean, ragged masks, an all-zero and an all-equal group).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import entflow as ef
from entflow.errors import ConfigError, MissingInputError, ParameterError, ShapeError
from entflow.lab.config import LabConfig
from support.field_peers import (
    AGGS,
    ATOL,
    RTOL,
    assert_bad_parameter_is_named,
    assert_matches_hand,
    field_batch,
    grpo_batch,
    loss_and_grad,
    ours,
    trinity_loss,
)
from support.methods_ref import D
from support.peers import trinity

EXPERT = torch.tensor([i % 4 == 1 for i in range(16)])  # one expert row per group


def hand_rows(b: ef.TokenBatch, logp: torch.Tensor, rows: list[int], per_token, agg: str) -> torch.Tensor:
    """``agg`` of ``per_token(i, t)`` over the valid tokens of ``rows`` (their own denominator)."""
    sums = [[per_token(i, t) for t in range(logp.shape[1]) if b.mask[i, t] > 0] for i in rows]
    sums = [s for s in sums if s]
    if not sums:
        return torch.zeros((), dtype=D)
    if agg == "token-mean":
        return sum(sum(s) for s in sums) / sum(len(s) for s in sums)
    return sum(sum(s) / len(s) for s in sums) / len(sums)


def ppo_token(b: ef.TokenBatch, logp: torch.Tensor, dual_clip: float | None = None):
    A = b.token_advantages()

    def f(i, t):
        r = torch.exp(logp[i, t] - b.old_logp[i, t])
        loss = torch.maximum(-A[i, t] * r, -A[i, t] * r.clamp(0.8, 1.2))
        if dual_clip is not None and A[i, t] < 0:
            loss = torch.minimum(loss, -A[i, t] * dual_clip)
        return loss

    return f


# --------------------------------------------------------------------------------------------
# positive_nll
# --------------------------------------------------------------------------------------------


def hand_positive_nll(b: ef.TokenBatch, agg: str, weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    logp = b.logp.detach().clone().requires_grad_(True)
    n = b.logp.shape[0]
    loss = hand_rows(b, logp, list(range(n)), ppo_token(b, logp), agg)
    pos = [(i, t) for i in range(n) for t in range(logp.shape[1]) if b.mask[i, t] > 0 and b.rewards[i] > 0]
    if pos:  # VAPO: the LM loss on the correct responses, one token mean
        loss = loss + weight * (-sum(logp[i, t] for i, t in pos) / len(pos))
    return loss_and_grad(loss, logp)


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("weight", [0.1, 1.0])
def test_positive_nll_against_the_reference(gen, weight, agg):
    b = grpo_batch(gen)
    loss, grad = ours(b, ef.get_method("positive_nll", positive_example_nll_weight=weight), agg=agg)
    assert_matches_hand((loss, grad), hand_positive_nll(b, agg, weight))
    # the all-equal group is all correct: its rows get the NLL gradient only (A = 0)
    n_pos = int((b.valid & (b.rewards > 0).unsqueeze(-1)).sum())
    torch.testing.assert_close(grad[8:12][b.valid[8:12]], torch.full_like(grad[8:12][b.valid[8:12]], -weight / n_pos))


def test_positive_nll_is_one_token_mean_whatever_the_aggregation(gen):
    b = grpo_batch(gen)
    nll = {agg: ef.policy_loss(b, "positive_nll", ef.LossSpec(agg=agg)).metrics["positive_nll/nll"] for agg in AGGS}
    assert nll["token-mean"] == nll["seq-mean-token-mean"]
    pos = b.valid & (b.rewards > 0).unsqueeze(-1)
    assert nll["token-mean"] == pytest.approx(float(-b.logp.detach()[pos].mean()), rel=1e-12)


def test_positive_nll_is_zero_when_nothing_is_correct(gen):
    b = grpo_batch(gen)
    b = dataclasses.replace(b, rewards=torch.zeros_like(b.rewards))
    with_nll = ef.policy_loss(b, ef.get_method("positive_nll", positive_example_nll_weight=5.0))
    plain = ef.policy_loss(b, "grpo")
    assert with_nll.metrics["positive_nll/loss"] == 0.0
    assert with_nll.loss.item() == plain.loss.item()


def test_positive_nll_needs_rewards_in_the_loss(gen):
    b = grpo_batch(gen)
    with pytest.raises(MissingInputError, match="rewards"):
        ef.policy_loss(dataclasses.replace(b, rewards=None), "positive_nll")


# --------------------------------------------------------------------------------------------
# chord
# --------------------------------------------------------------------------------------------


def hand_mu(step: int, warmup: int, decay: int, peak: float, valley: float) -> float:
    """CHORD-μ (arXiv 2508.11408): linear warm-up to the peak, cosine decay to the valley, then the valley."""
    if step < warmup:
        return peak * step / warmup
    if step >= warmup + decay:
        return valley
    return valley + (peak - valley) * (1 + math.cos(math.pi * (step - warmup) / decay)) / 2


SCHEDULES = [(0, 0, 0.1, 0.1), (4, 6, 0.5, 0.05), (3, 0, 0.9, 0.2), (0, 5, 0.3, 0.0)]


@pytest.mark.parametrize(("warmup", "decay", "peak", "valley"), SCHEDULES)
def test_chord_mu_follows_the_schedule(warmup, decay, peak, valley):
    m = ef.get_method("chord", mu_warmup_steps=warmup, mu_decay_steps=decay, mu_peak=peak, mu_valley=valley)
    for step in range(0, 14):
        assert m.mu(step) == pytest.approx(hand_mu(step, warmup, decay, peak, valley), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(("warmup", "decay", "peak", "valley"), SCHEDULES)
def test_chord_mu_equals_trinity(warmup, decay, peak, valley):
    mod = trinity("algorithm.policy_loss_fn.chord_policy_loss")
    m = ef.get_method("chord", mu_warmup_steps=warmup, mu_decay_steps=decay, mu_peak=peak, mu_valley=valley)
    for step in range(0, 14):
        assert m.mu(step) == mod.mu_schedule_function(step, warmup, decay, peak, valley)


def hand_chord(b: ef.TokenBatch, agg: str, mu: float, phi: bool, dual_clip=None) -> tuple[torch.Tensor, torch.Tensor]:
    logp = b.logp.detach().clone().requires_grad_(True)
    n = b.logp.shape[0]
    usual = [i for i in range(n) if not b.expert_mask[i]]
    expert = [i for i in range(n) if b.expert_mask[i]]

    def sft(i, t):
        p = math.exp(float(logp[i, t].detach()))
        return -(p * (1 - p) if phi else 1.0) * logp[i, t]  # CHORD-φ: φ = p(1 − p), detached

    loss = (1 - mu) * hand_rows(b, logp, usual, ppo_token(b, logp, dual_clip), agg) + mu * hand_rows(
        b, logp, expert, sft, agg
    )
    return loss_and_grad(loss, logp)


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("phi", [True, False])
@pytest.mark.parametrize("step", [0, 2, 5, 12])
def test_chord_against_the_hand_formula(gen, step, phi, agg):
    b = dataclasses.replace(grpo_batch(gen, expert_mask=EXPERT), step=step)
    m = ef.get_method(
        "chord", mu_warmup_steps=4, mu_decay_steps=6, mu_peak=0.5, mu_valley=0.05, enable_phi_function=phi
    )
    loss, grad = ours(b, m, agg=agg)
    assert_matches_hand((loss, grad), hand_chord(b, agg, hand_mu(step, 4, 6, 0.5, 0.05), phi))
    if step > 0:
        assert grad[EXPERT].abs().sum() > 0  # the expert rows train by SFT
    out = ef.policy_loss(b, m, ef.LossSpec(agg=agg))
    assert out.metrics["n_tokens"] == int(b.valid[~EXPERT].sum())  # expert rows left the GRPO loss


def trinity_chord(b: ef.TokenBatch, agg: str, step: int, **params) -> tuple[torch.Tensor, torch.Tensor]:
    """Trinity-RFT's ``MIXCHORDPolicyLossFn`` with one micro-batch that holds the whole mini-batch
    (gradient accumulation 1, ``train_batch_size_usual`` and ``..._expert`` the row counts), so its
    per-micro-batch weights are 1."""
    mod = trinity("algorithm.policy_loss_fn.chord_policy_loss")
    n_expert = int(b.expert_mask.sum())
    fn = mod.MIXCHORDPolicyLossFn(
        clip_range=0.2,
        use_dynamic_bsz=False,
        ppo_mini_batch_size=1,
        ppo_micro_batch_size_per_gpu=1,
        ngpus_trainer=1,
        train_batch_size_usual=b.mask.shape[0] - n_expert,
        train_batch_size_expert=n_expert,
        loss_agg_mode=agg,
        **params,
    )
    step_t = torch.full((b.mask.shape[0],), step)
    return trinity_loss(fn, b, b.token_advantages(), expert_mask=b.expert_mask, step=step_t)


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("phi", [True, False])
@pytest.mark.parametrize("step", [1, 5, 20])
def test_chord_equals_trinity(gen, step, phi, agg):
    params = dict(mu_warmup_steps=3, mu_decay_steps=8, mu_peak=0.6, mu_valley=0.1, enable_phi_function=phi)
    b = dataclasses.replace(grpo_batch(gen, expert_mask=EXPERT), step=step)
    loss, grad = ours(b, ef.get_method("chord", **params), agg=agg, dual_clip=3.0)  # Trinity's PPO: dual clip 3
    loss_p, grad_p = trinity_chord(b, agg, step, **params)
    torch.testing.assert_close(loss, loss_p, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(grad, grad_p, rtol=RTOL, atol=ATOL)
    assert grad[EXPERT].abs().sum() > 0 and grad[~EXPERT].abs().sum() > 0


def test_chord_without_expert_rows_has_no_sft_term_and_keeps_the_factor(gen):
    b = dataclasses.replace(grpo_batch(gen, expert_mask=torch.zeros(16, dtype=torch.bool)), step=5)
    m = ef.get_method("chord", mu_peak=0.3, mu_valley=0.3)
    out = ef.policy_loss(b, m)
    plain = ef.policy_loss(b, "grpo")
    assert out.metrics["chord/sft_term"] == 0.0
    assert out.loss.item() == pytest.approx(0.7 * plain.loss.item(), rel=1e-12)


def test_chord_without_expert_mask_names_the_field(gen):
    b = grpo_batch(gen)
    with pytest.raises(MissingInputError, match="expert_mask"):
        ef.policy_loss(b, "chord")
    with pytest.raises(MissingInputError, match="expert_mask"):
        ef.prepare_statistics([b], ef.get_method("chord"))


@pytest.mark.parametrize(("mask", "seen"), [(torch.ones(15, dtype=torch.bool), r"\(15,\)"), (torch.ones(16), "float")])
def test_a_malformed_expert_mask_names_the_field(gen, mask, seen):
    with pytest.raises(ShapeError, match=f"expert_mask.*{seen}"):
        field_batch(gen, expert_mask=mask)


@pytest.mark.parametrize(
    ("param", "bad"),
    [("mu_peak", 1.5), ("mu_peak", -0.1), ("mu_valley", 2.0), ("mu_warmup_steps", -1), ("mu_decay_steps", 2.5)],
)
def test_bad_chord_parameters_name_the_parameter(param, bad):
    assert_bad_parameter_is_named("chord", param, bad)


def test_bad_positive_nll_weight_names_the_parameter():
    with pytest.raises(ParameterError, match="positive_example_nll_weight"):
        ef.get_method("positive_nll", positive_example_nll_weight=-0.1)
    with pytest.raises(ConfigError, match="positive_example_nll_weight"):
        LabConfig(method="positive_nll", method_params={"positive_example_nll_weight": -1}).validate()
