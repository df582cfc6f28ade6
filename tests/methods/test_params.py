"""Every docs/design.md §6 method is registered with its defaults; unknown and out-of-range
parameters raise ParameterError naming the parameter and its allowed range; missing batch
fields raise MissingInputError naming the field; generic contract of every method on a
random batch (finite loss, detached weights, 0 off-mask, empty batch)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import entflow as ef
from entflow.errors import MissingInputError, ParameterError
from entflow.methods.base import method_class
from support.method_defaults import BUILD, DESIGN_DEFAULTS, DESIGN_NAMES
from support.methods_ref import make_batch

BAD_VALUES = [-1.0, -1e-9, 1.5, 2.0, 1e9, -1e9, float("nan"), "x", None, 0.5, 3, True, "mask:2"]


def test_every_spec_method_is_registered_with_spec_defaults():
    assert set(DESIGN_NAMES) <= set(ef.list_methods())
    for name, defaults in DESIGN_DEFAULTS.items():
        cls = method_class(name)
        got = {f.name: f.default for f in dataclasses.fields(cls)}
        for k, v in defaults.items():
            assert got[k] == v, (name, k)
        assert cls.formula and cls.paper and cls.__doc__, name


@pytest.mark.parametrize("name", DESIGN_NAMES)
def test_unknown_parameter(name):
    with pytest.raises(ParameterError, match="'bogus'") as e:
        ef.get_method(name, bogus=1)
    assert e.value.param == "bogus"


@pytest.mark.parametrize("name", DESIGN_NAMES)
def test_out_of_range_parameters_name_parameter_and_range(name):
    cls = method_class(name)
    base = BUILD.get(name, {})
    for f in dataclasses.fields(cls):
        check = f.metadata.get("check")
        assert check is not None, f"{name}.{f.name} has no check"
        bad = [v for v in BAD_VALUES if not check.ok(v)]
        assert bad, f"no rejected sample for {name}.{f.name}"
        for v in bad:
            with pytest.raises(ParameterError) as e:
                ef.get_method(name, **{**base, f.name: v})
            assert e.value.param == f.name
            assert f"'{f.name}'" in str(e.value) and check.describe in str(e.value)


@pytest.mark.parametrize(
    "name,param,value,allowed",
    [
        ("steer", "lambda_min", 0.0, "(0, 1]"),
        ("steer", "lambda_min", 1.01, "(0, 1]"),
        ("clip_cov", "ratio", 1.5, "[0, 1]"),
        ("kl_cov", "ratio", -0.1, "[0, 1]"),
        ("rand_pos_clip", "ratio", 2.0, "[0, 1]"),
        ("forking_tokens", "rho", 0.0, "(0, 1]"),
        ("opefo_target", "lam_max", 1.5, "[0, 1]"),
        ("pos_adv_reweight", "init", 1.2, "[0, 1]"),
        ("clip_higher", "clip_high", -0.1, "[0, inf]"),
        ("entropy_bonus", "c", -1.0, "[0, inf]"),
        ("quadrant", "hi", 1.1, "[0, 1]"),
        ("steer", "mapping", "cubic", "'exp'"),
        ("opefo", "variant", "both", "'adaptive'"),
        ("position_shaping", "d", 0, "1, -1"),
    ],
)
def test_spec_ranges(name, param, value, allowed):
    with pytest.raises(ParameterError, match=param) as e:
        ef.get_method(name, **{**BUILD.get(name, {}), param: value})
    assert allowed in str(e.value)


def test_cross_parameter_checks():
    with pytest.raises(ParameterError, match="cov_low"):
        ef.get_method("clip_cov", cov_low=5.0, cov_high=1.0)
    with pytest.raises(ParameterError, match="c0"):
        ef.get_method("adaptive_entropy", c0=0.01)
    with pytest.raises(ParameterError, match="lo"):
        ef.get_method("quadrant", lo=0.9, hi=0.8)
    assert ef.get_method("steer", lambda_min=1.0).lambda_min == 1.0


def _full_batch(gen):
    return make_batch(gen, step=2, total_steps=10)


@pytest.mark.parametrize("name", DESIGN_NAMES)
def test_every_method_on_a_random_batch(gen, name):
    b = _full_batch(gen)
    m = ef.get_method(name, **BUILD.get(name, {}))
    adv = ef.compute_advantages(b, m)
    assert torch.isfinite(adv).all() and bool((adv[~b.mask.bool()] == 0).all())
    b2 = ef.TokenBatch(
        b.logp, b.old_logp, adv, b.mask, entropy=b.entropy, old_entropy=b.old_entropy, ref_logp=b.ref_logp,
        step=2, total_steps=10,
    )  # fmt: skip
    out = ef.policy_loss(b2, m)
    out.loss.backward()
    assert torch.isfinite(out.loss) and torch.isfinite(b.logp.grad).all()
    assert not out.token_weights.requires_grad
    assert bool((out.token_weights[~b.mask.bool()] == 0).all())
    assert all(isinstance(v, float) for v in out.metrics.values())
    # a batch with no valid token: loss 0 with grad, flagged
    empty = ef.TokenBatch(b.logp, b.old_logp, adv, torch.zeros_like(b.mask), entropy=b.entropy,
                          old_entropy=b.old_entropy, ref_logp=b.ref_logp, step=2, total_steps=10)  # fmt: skip
    e = ef.policy_loss(empty, m)
    assert float(e.loss.detach()) == 0.0 and e.loss.requires_grad and e.metrics["empty_batch"] == 1.0


LOSS_FIELD = {
    "entropy_bonus": "entropy",
    "adaptive_entropy": "entropy",
    "kl_ref": "ref_logp",
    "steer": "old_entropy",
    "opefo": "old_entropy",
    "opefo_target": "old_entropy",
    "forking_tokens": "old_entropy",
}
ADV_FIELD = {
    "w_reinforce": "rewards",
    "unlikeliness": "rewards",
    "gtpo": "rewards",
    "edge_grpo": "group_index",
    "ppl_shaping": "group_index",
    "entropy_advantage": "old_entropy",
}


@pytest.mark.parametrize("name", sorted(LOSS_FIELD))
def test_missing_loss_fields_are_named(gen, name):
    b = make_batch(gen)
    bare = ef.TokenBatch(b.logp, b.old_logp, b.advantages, b.mask)
    with pytest.raises(MissingInputError, match=LOSS_FIELD[name]) as e:
        ef.policy_loss(bare, ef.get_method(name, **BUILD.get(name, {})))
    assert e.value.field == LOSS_FIELD[name]


@pytest.mark.parametrize("name", sorted(ADV_FIELD))
def test_missing_advantage_fields_are_named(gen, name):
    b = make_batch(gen)
    bare = ef.TokenBatch(b.logp, b.old_logp, b.advantages, b.mask)
    with pytest.raises(MissingInputError) as e:
        ef.compute_advantages(bare, name)
    assert e.value.field == ADV_FIELD[name]
    assert name in str(e.value)
