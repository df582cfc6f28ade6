"""The PPO clip's settings have one home (``entflow.core.clip_settings``): one default ε that every layer uses,
and one rule that the loss (``LossSpec``), the trainer's config (``TrainConfig``) and the clip
methods' parameters all enforce, including the inf rule (inf = that side unclipped; allowed for
ε_low and ε_high, never a finite ε_low above 1); inf bounds give the unclipped loss −A·r."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import entflow as ef
from entflow.core import estimators
from entflow.core.clip_settings import CLIP_EPS, CLIP_RANGES, NO_CLIP, clip_value_ok
from entflow.errors import ConfigError, ParameterError
from entflow.lab.config import LabConfig
from entflow.trainer.config import TrainConfig, build_config, key_info

INF, NAN = math.inf, math.nan
ALLOWED = [
    ("clip_low", 0.0),
    ("clip_low", 0.2),
    ("clip_low", 1.0),
    ("clip_low", 1),
    ("clip_low", INF),
    ("clip_high", 0.0),
    ("clip_high", 0.28),
    ("clip_high", 5.0),
    ("clip_high", INF),
    ("dual_clip", None),
    ("dual_clip", 1.5),
    ("dual_clip", 3),
    ("dual_clip", INF),
]
REFUSED = [
    ("clip_low", -0.1),
    ("clip_low", 1.5),  # finite and above 1: refused, only inf switches the side off
    ("clip_low", 1e9),
    ("clip_low", -INF),
    ("clip_low", NAN),
    ("clip_low", True),
    ("clip_low", "0.2"),
    ("clip_high", -0.01),
    ("clip_high", -INF),
    ("clip_high", NAN),
    ("clip_high", None),
    ("dual_clip", 1.0),
    ("dual_clip", 0.5),
    ("dual_clip", NAN),
]


def _loss_spec_accepts(name, value) -> bool:
    try:
        ef.LossSpec(**{name: value})
    except ParameterError as e:
        assert e.param == name and "LossSpec" in str(e) and repr(value) in str(e)
        return False
    return True


def _config_accepts(name, value) -> bool:
    try:
        build_config({name: value}, cls=LabConfig)
    except ConfigError as e:
        assert e.key == name
        return False
    return True


def _method_accepts(name, value) -> bool:
    try:
        ef.get_method("clip_extreme", **{name: value})
    except ParameterError as e:
        assert e.param == name and repr(value) in str(e)
        return False
    return True


@pytest.mark.parametrize(("name", "value"), ALLOWED, ids=[f"{n}={v!r}" for n, v in ALLOWED])
def test_the_rule_allows(name, value):
    assert clip_value_ok(name, value)
    assert _loss_spec_accepts(name, value)
    if name == "dual_clip" or not isinstance(value, float):  # a clip_low / clip_high key is typed float
        return
    assert _config_accepts(name, value)
    assert _method_accepts(name, value)


@pytest.mark.parametrize(("name", "value"), REFUSED, ids=[f"{n}={v!r}" for n, v in REFUSED])
def test_the_rule_refuses_everywhere(name, value):
    assert not clip_value_ok(name, value)
    assert not _loss_spec_accepts(name, value)
    assert not _config_accepts(name, value)  # a wrong type is refused by the type check, naming the key
    if name != "dual_clip":  # only the loss and the config have a dual clip
        assert not _method_accepts(name, value)


def test_the_rule_in_words_is_the_one_the_errors_and_the_help_show():
    with pytest.raises(ParameterError, match=r"\[0, 1\], or inf"):
        ef.LossSpec(clip_low=1.5)
    with pytest.raises(ConfigError, match=r"\[0, 1\], or inf"):
        build_config({"clip_low": 1.5}, cls=LabConfig)
    with pytest.raises(ParameterError, match=r"\[0, 1\], or inf"):
        ef.get_method("clip_lower", clip_low=1.5)
    for name in ("clip_low", "clip_high", "dual_clip"):
        assert key_info(TrainConfig, name)[1] == CLIP_RANGES[name]
    with pytest.raises(KeyError):
        clip_value_ok("clip", 0.2)


def test_every_layer_defaults_to_the_one_eps():
    assert CLIP_EPS == 0.2  # PPO's ε (Schulman et al. 2017 §6.1) and GRPO's
    assert ef.LossSpec().clip == (CLIP_EPS, CLIP_EPS, None)
    cfg = TrainConfig()
    assert (cfg.clip_low, cfg.clip_high) == (CLIP_EPS, CLIP_EPS)
    assert cfg.loss_spec() == ef.LossSpec()
    assert ef.get_method("clip_higher").clip_low == CLIP_EPS
    assert ef.get_method("clip_lower").clip_high == CLIP_EPS
    for fn in (estimators.policy_weight, estimators.entropy_change):
        params = inspect.signature(fn).parameters
        assert params["clip_low"].default == params["clip_high"].default == CLIP_EPS, fn.__name__


def test_infinite_bounds_give_the_unclipped_loss(gen):
    """ε_low = ε_high = inf: the token-mean loss is mean(−A·r) over valid tokens, by hand in float64."""
    n, t = 4, 6
    old = -torch.rand(n, t, generator=gen, dtype=torch.float64) - 0.1
    logp = (old + 2.0 * torch.randn(n, t, generator=gen, dtype=torch.float64)).requires_grad_()
    adv = torch.tensor([1.0, -1.0, 0.5, -2.0], dtype=torch.float64)
    mask = torch.ones(n, t, dtype=torch.float64)
    mask[1, 4:] = 0
    batch = ef.TokenBatch(logp=logp, old_logp=old, advantages=adv, mask=mask)
    out = ef.policy_loss(batch, spec=ef.LossSpec(NO_CLIP, NO_CLIP))
    r = torch.exp(logp.detach() - old)
    expected = (-adv[:, None] * r * mask).sum() / mask.sum()
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-12)
    # with the default ε the ratios far from 1 are clipped, so the two losses differ
    assert ef.policy_loss(batch, spec=ef.LossSpec()).loss.item() != pytest.approx(expected.item(), rel=1e-6)
