"""Composition rules of docs/design.md §6 with real methods: clip bounds from the last setter, token
weights multiply, advantage shapers left to right, loss terms add, per-part state, parameter
routing, and the conflict errors."""

from __future__ import annotations

import copy

import pytest
import torch

import entflow as ef
from entflow.errors import CompositionError, ParameterError
from support.methods_ref import make_batch


def test_clip_higher_plus_steer_uses_clip_higher_bounds_and_steer_weights(gen):
    b = make_batch(gen, off_policy=0.8)
    both = ef.policy_loss(b, "clip_higher+steer")
    steer_alone = ef.policy_loss(b, "steer", ef.LossSpec(clip_high=0.28))
    torch.testing.assert_close(both.token_weights, steer_alone.token_weights, rtol=0, atol=0)
    torch.testing.assert_close(both.loss, steer_alone.loss, rtol=0, atol=0)
    assert ef.get_method("clip_higher+steer").clip_bounds() == (0.2, 0.28)
    assert ef.get_method("clip_higher+clip_lower").clip_bounds() == (0.28, 0.2)  # last setter wins


def test_steer_plus_opefo_weights_multiply(gen):
    b = make_batch(gen)
    w_s = ef.policy_loss(b, "steer").token_weights
    w_o = ef.policy_loss(b, "opefo").token_weights
    out = ef.policy_loss(b, "steer+opefo")
    torch.testing.assert_close(out.token_weights, w_s * w_o, rtol=1e-12, atol=0)
    assert "steer/weight_mean" in out.metrics and "opefo/lambda" in out.metrics
    w_f = ef.policy_loss(b, ef.get_method("forking_tokens")).token_weights
    three = ef.policy_loss(b, "steer+opefo+forking_tokens").token_weights
    torch.testing.assert_close(three, w_s * w_o * w_f, rtol=1e-12, atol=0)


def test_w_reinforce_then_ppl_shaping_applies_left_to_right(gen):
    b = make_batch(gen)
    m = ef.get_method("w_reinforce+ppl_shaping", alpha=0.2)
    got = ef.compute_advantages(b, m)
    base = ef.compute_advantages(b, "w_reinforce")
    scaled = ef.get_method("ppl_shaping", alpha=0.2).shape_advantages(base.clone(), b)
    torch.testing.assert_close(got, scaled * b.mask, rtol=1e-12, atol=0)
    # order matters for non-commuting shapers
    a1 = ef.compute_advantages(b, "entropy_advantage+position_shaping")
    a2 = ef.compute_advantages(b, "position_shaping+entropy_advantage")
    assert not torch.allclose(a1, a2)


def test_reward_builders_must_come_first_and_alone():
    with pytest.raises(CompositionError, match="w_reinforce"):
        ef.get_method("ppl_shaping+w_reinforce")
    with pytest.raises(CompositionError):
        ef.get_method("w_reinforce+gtpo")
    with pytest.raises(CompositionError):
        ef.get_method("unlikeliness+w_reinforce")
    ef.get_method("steer+w_reinforce+edge_grpo")  # token weighting does not count as shaping


def test_duplicates_and_unknown_parts():
    with pytest.raises(CompositionError, match="twice"):
        ef.get_method("steer+steer")
    with pytest.raises(ef.UnknownMethodError, match="stear"):
        ef.get_method("clip_higher+stear")


def test_loss_terms_add(gen):
    b = make_batch(gen)
    plain = ef.policy_loss(b, "grpo")
    out = ef.policy_loss(b, "entropy_bonus+kl_ref")
    total = plain.metrics["pg_loss"] + out.metrics["entropy_bonus/loss"] + out.metrics["kl_ref/loss"]
    assert out.metrics["loss"] == pytest.approx(total, rel=1e-12)


def test_parameter_routing():
    m = ef.get_method("steer+opefo", lambda_min=0.5, variant="static")
    assert m.parts[0].lambda_min == 0.5 and m.parts[1].variant == "static"
    with pytest.raises(ParameterError, match="ambiguous"):
        ef.get_method("clip_cov+rand_pos_clip", ratio=0.1)
    m = ef.get_method("clip_cov+rand_pos_clip", **{"clip_cov.ratio": 0.1, "rand_pos_clip.seed": 3})
    assert m.parts[0].ratio == 0.1 and m.parts[1].seed == 3
    with pytest.raises(ParameterError, match="estimator"):
        ef.get_method("steer+opefo", estimator="opefo")
    with pytest.raises(ParameterError, match="nonsense"):
        ef.get_method("steer+opefo", nonsense=1)


def test_composite_state_round_trip(gen):
    b = make_batch(gen, n=16, t=20)
    kw = {"clip_cov.ratio": 0.01, "clip_cov.cov_low": 0.05, "clip_cov.cov_high": 0.8}
    m = ef.get_method("clip_cov+adaptive_entropy+quadrant", preset="uplift", **kw)
    for k in range(3):
        ef.policy_loss(b, m)
        m.update({"entropy": 0.1, "step": k})
    state = copy.deepcopy(m.state_dict())
    assert set(state) == {"clip_cov", "adaptive_entropy", "quadrant"}
    fresh = ef.get_method("clip_cov+adaptive_entropy+quadrant", preset="uplift", **kw)
    fresh.load_state_dict(state)
    for k in range(3):
        a, c = ef.policy_loss(b, m), ef.policy_loss(b, fresh)
        assert torch.equal(a.token_weights, c.token_weights)
        assert a.metrics["adaptive_entropy/coef"] == c.metrics["adaptive_entropy/coef"]
        m.update({"entropy": 0.3, "step": 3 + k})
        fresh.update({"entropy": 0.3, "step": 3 + k})


def test_composite_needs_are_the_union(gen):
    m = ef.get_method("kl_ref+entropy_bonus+w_reinforce")
    assert set(m.needs) == {"ref_logp", "entropy"}
    assert m.advantage_needs == ("rewards",)
