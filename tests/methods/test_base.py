"""The method protocol of ``methods/base.py``: registry, parameter validation, composition rules,
state round-trips, the denominator a zeroed token keeps (docs/design.md §4, §6, §7), and the state
rules: a stateful or stochastic method passed to ``policy_loss`` by name warns once, with the fix."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

import entflow as ef
from entflow.errors import CompositionError, ParameterError, UnknownMethodError
from entflow.methods import base
from entflow.methods.base import Method, interval, param, register, seeded_generator
from support.core_ref import make_batch_tensors


@pytest.fixture
def registry(monkeypatch):
    """A private copy of the registry, so test-local methods never leak into other tests."""
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    return base._REGISTRY


# --- test-local methods (registered per test through the fixture) ---------------------------


@dataclass(repr=False)
class WeightA(Method):
    """Loss weight 2 on tokens with A > 0."""

    name = "tst_weight_a"
    factor: float = param(2.0, interval(0, 10), "weight on A > 0")

    def token_weights(self, ctx):
        return torch.where(ctx.adv > 0, torch.full_like(ctx.adv, self.factor), torch.ones_like(ctx.adv))


@dataclass(repr=False)
class WeightB(Method):
    """Loss weight 0.5 on even time steps."""

    name = "tst_weight_b"

    def token_weights(self, ctx):
        w = torch.ones_like(ctx.adv)
        w[:, ::2] = 0.5
        return w


@dataclass(repr=False)
class ShiftAdv(Method):
    name = "tst_shift"
    shift: float = param(1.0, None, "added to A")

    def shape_advantages(self, adv, batch):
        return adv + self.shift


@dataclass(repr=False)
class ScaleAdv(Method):
    name = "tst_scale"
    scale: float = param(3.0, None, "multiplies A")

    def shape_advantages(self, adv, batch):
        return adv * self.scale


@dataclass(repr=False)
class TermA(Method):
    name = "tst_term_a"

    def loss_terms(self, ctx, agg):
        return {"tst_a/term": agg(ctx.batch.logp * 0 + 0.5)}  # = 0.5, attached to the graph


@dataclass(repr=False)
class TermB(Method):
    name = "tst_term_b"

    def loss_terms(self, ctx, agg):
        return {"tst_b/term": agg(-0.25 * ctx.batch.logp)}  # = 0.25 · nll, gradient −0.25/Σm


@dataclass(repr=False)
class Counter(Method):
    """A stateful controller with a seeded generator."""

    name = "tst_counter"
    state_fields: ClassVar[tuple[str, ...]] = ("count", "level", "gen")
    seed: int = param(7, base.SEED, "seed")

    def __post_init__(self):
        super().__post_init__()
        self.count, self.level, self.gen = 0, 0.0, seeded_generator(self.seed)

    def update(self, metrics):
        self.count += 1
        self.level += metrics["entropy"] + float(torch.rand(1, generator=self.gen))


TEST_METHODS = (WeightA, WeightB, ShiftAdv, ScaleAdv, TermA, TermB, Counter)


@pytest.fixture
def local_methods(registry):
    for cls in TEST_METHODS:
        register(cls)
    return registry


def _batch(gen, **kw):
    logp, old_logp, adv, mask, _entropy, old_entropy = make_batch_tensors(gen, n=6, t=6, spread=0.6)
    return ef.TokenBatch(logp.clone().requires_grad_(True), old_logp, adv, mask, old_entropy=old_entropy, **kw)


# --- registry and parameter validation --------------------------------------------------------


def test_registry_lists_grpo_and_clip_variants():
    names = ef.list_methods()
    assert names == sorted(names)
    for n in ("grpo", "clip_higher", "clip_lower", "clip_tighter", "clip_free", "clip_extreme"):
        assert n in names
        assert ef.get_method(n).name == n


def test_register_makes_a_method_available(local_methods):
    assert "tst_weight_a" in ef.list_methods()
    m = ef.get_method("tst_weight_a", factor=3)
    assert isinstance(m, WeightA) and m.factor == 3.0 and isinstance(m.factor, float)


def test_registry_fixture_does_not_leak():
    assert "tst_weight_a" not in ef.list_methods()


def test_unknown_method_names_it():
    with pytest.raises(UnknownMethodError, match="no_such_method"):
        ef.get_method("no_such_method")
    with pytest.raises(UnknownMethodError, match="nope"):
        ef.get_method("clip_higher+nope")


def test_unknown_parameter_names_it():
    with pytest.raises(ParameterError, match="bogus") as e:
        ef.get_method("clip_higher", bogus=1)
    assert e.value.param == "bogus"
    with pytest.raises(ParameterError, match="bogus"):
        ef.get_method("clip_higher+grpo", bogus=1)


@pytest.mark.parametrize(
    ("name", "kw", "param_name", "range_text"),
    [
        ("clip_higher", {"clip_high": -1}, "clip_high", "[0, inf]"),
        ("clip_lower", {"clip_low": 1.5}, "clip_low", "[0, 1]"),
        ("clip_tighter", {"clip_low": -0.1}, "clip_low", "[0, 1]"),
        ("clip_extreme", {"clip_high": float("nan")}, "clip_high", "[0, inf]"),
        ("clip_higher", {"clip_high": "big"}, "clip_high", "[0, inf]"),
    ],
)
def test_out_of_range_parameter_names_parameter_and_range(name, kw, param_name, range_text):
    with pytest.raises(ParameterError) as e:
        ef.get_method(name, **kw)
    msg = str(e.value)
    assert param_name in msg and range_text in msg and name in msg, msg
    assert e.value.param == param_name


def test_out_of_range_in_test_local_method(local_methods):
    with pytest.raises(ParameterError, match=r"factor.*\[0, 10\]"):
        ef.get_method("tst_weight_a", factor=11)


# --- composition -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "bounds"),
    [
        ("clip_higher+grpo", (0.2, 0.28)),  # grpo sets no bounds: clip_higher's stand
        ("grpo+clip_higher", (0.2, 0.28)),
        ("clip_higher+clip_lower", (0.28, 0.2)),  # last setter wins
        ("clip_lower+clip_higher", (0.2, 0.28)),
        ("clip_extreme+clip_tighter", (0.12, 0.2)),
    ],
)
def test_composition_clip_bounds_from_last_setter(name, bounds):
    assert ef.get_method(name).clip_bounds() == bounds


def test_composition_parameter_routing():
    m = ef.get_method("clip_lower+clip_higher", **{"clip_higher.clip_high": 0.4, "clip_lower.clip_low": 0.3})
    assert m.clip_bounds() == (0.2, 0.4)
    assert m.parts[0].clip_low == 0.3
    with pytest.raises(ParameterError, match="ambiguous"):
        ef.get_method("clip_lower+clip_higher", clip_high=0.4)  # both parts take clip_high


@pytest.mark.parametrize("name", ["grpo+grpo", "clip_higher+grpo+clip_higher"])
def test_duplicated_method_is_a_composition_error(name):
    with pytest.raises(CompositionError, match="twice"):
        ef.get_method(name)


def test_token_weights_multiply(local_methods, gen):
    batch = _batch(gen)
    A = batch.advantages.unsqueeze(-1).expand(6, 6)
    wa = torch.where(A > 0, 2.0, 1.0).double()
    wb = torch.ones(6, 6, dtype=torch.float64)
    wb[:, ::2] = 0.5
    mask = batch.mask
    out = ef.policy_loss(batch, method="tst_weight_a+tst_weight_b")
    assert torch.equal(out.token_weights, wa * wb * mask)
    # loss = token-mean of w·ℓ (clip 0.2/0.2), by hand
    r = torch.exp(batch.logp.detach() - batch.old_logp)
    ell = torch.maximum(-A * r, -A * r.clamp(0.8, 1.2))
    assert out.loss.item() == pytest.approx(((wa * wb * ell * mask).sum() / mask.sum()).item(), abs=1e-12)
    # gradient scales by the product of the weights
    (g,) = torch.autograd.grad(out.loss, batch.logp)
    (g0,) = torch.autograd.grad(ef.policy_loss(batch).loss, batch.logp)
    assert torch.allclose(g, g0 * wa * wb, atol=1e-12)


def test_advantage_shapers_apply_left_to_right(local_methods, gen):
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    groups = torch.tensor([4, 4, 4, 9, 9, 9])
    batch = _batch(gen, rewards=rewards, group_index=groups)
    base_adv = ef.compute_advantages(batch)  # GRPO broadcast, 0 off-mask
    mask = batch.valid
    a1 = ef.compute_advantages(batch, "tst_shift+tst_scale")
    a2 = ef.compute_advantages(batch, "tst_scale+tst_shift")
    assert torch.allclose(a1, ((base_adv + 1) * 3).masked_fill(~mask, 0), atol=1e-12)
    assert torch.allclose(a2, (base_adv * 3 + 1).masked_fill(~mask, 0), atol=1e-12)
    # the base itself is GRPO of the rewards, by hand: group 4 = [1,0,1] → mean 2/3, std √(1/3)
    s = (1 / 3) ** 0.5
    assert base_adv[0, 0].item() == pytest.approx((1 - 2 / 3) / (s + 1e-6), abs=1e-9)


def test_loss_terms_add(local_methods, gen):
    batch = _batch(gen)
    mask = batch.mask
    plain = ef.policy_loss(batch)
    out = ef.policy_loss(batch, method="tst_term_a+tst_term_b")
    nll = -(batch.logp.detach() * mask).sum() / mask.sum()
    assert out.metrics["tst_a/term"] == pytest.approx(0.5, abs=1e-12)
    assert out.metrics["tst_b/term"] == pytest.approx(0.25 * nll.item(), abs=1e-12)
    assert out.loss.item() == pytest.approx(plain.loss.item() + 0.5 + 0.25 * nll.item(), abs=1e-12)
    (g,) = torch.autograd.grad(out.loss, batch.logp)
    (g0,) = torch.autograd.grad(plain.loss, batch.logp)
    assert torch.allclose(g, g0 - 0.25 * mask / mask.sum(), atol=1e-12)


def test_state_dict_round_trip(local_methods):
    m = ef.get_method("tst_counter+clip_higher")
    for h in (0.1, 0.3):
        m.update({"entropy": h, "step": 0})
    state = m.state_dict()
    twin = ef.get_method("tst_counter+clip_higher")
    twin.load_state_dict(state)
    c, tc = m.parts[0], twin.parts[0]
    assert (tc.count, tc.level) == (c.count, c.level) == (2, c.level)
    # the generator continues identically: the next updates agree exactly
    m.update({"entropy": 0.2, "step": 2})
    twin.update({"entropy": 0.2, "step": 2})
    assert tc.level == c.level
    fresh = ef.get_method("tst_counter")
    fresh.update({"entropy": 0.1, "step": 0})
    assert fresh.level != c.level
    with pytest.raises(ParameterError, match="count"):
        ef.get_method("tst_counter").load_state_dict({"level": 0.0})


def test_a_method_instance_works_without_registration(gen):
    batch = _batch(gen)
    out = ef.policy_loss(batch, method=WeightB())
    assert out.token_weights[:, 0].tolist() == [0.5] * 6


@dataclass(repr=False)
class ZeroFirstToken(Method):
    name = "tst_zero_first"

    def token_weights(self, ctx):
        w = torch.ones_like(ctx.adv)
        w[:, 0] = 0.0
        return w


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_zeroed_tokens_still_count_in_the_denominator(gen, agg):
    """docs/design.md §4: a token a method zeroes keeps its place in the denominator (Clip-Cov, forking)."""
    batch = _batch(gen)
    (g0,) = torch.autograd.grad(ef.policy_loss(batch, spec=ef.LossSpec(agg=agg)).loss, batch.logp)
    out = ef.policy_loss(batch, method=ZeroFirstToken(), spec=ef.LossSpec(agg=agg))
    (g,) = torch.autograd.grad(out.loss, batch.logp)
    assert bool((g[:, 0] == 0).all())
    # every other token's gradient is unchanged: same denominator as without the method
    assert torch.allclose(g[:, 1:], g0[:, 1:], rtol=0, atol=1e-15)


D = torch.float64


# -- state rules: a stateful or stochastic method passed by name warns once, with the fix --------


@pytest.mark.parametrize("name", ["clip_cov", "adaptive_entropy", "pos_adv_reweight", "grpo+quadrant"])
def test_stateful_method_by_name_warns_once_with_the_fix(monkeypatch, gen, name):
    monkeypatch.setattr(base, "_WARNED_BY_NAME", set())
    n, t = 4, 3
    b = ef.TokenBatch(
        -torch.rand(n, t, generator=gen, dtype=D), -torch.rand(n, t, generator=gen, dtype=D),
        torch.randn(n, generator=gen, dtype=D), torch.ones(n, t), entropy=torch.rand(n, t, dtype=D),
    )  # fmt: skip
    with pytest.warns(ef.StatefulMethodWarning, match=r"get_method\(") as rec:
        ef.policy_loss(b, name)
    assert len(rec) == 1 and "rebuilt on every call" in str(rec[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ef.policy_loss(b, name)  # once per name
        ef.policy_loss(b, ef.get_method(name))  # objects are the documented way: silent
        ef.policy_loss(b, "steer+clip_higher")  # stateless by name: silent
