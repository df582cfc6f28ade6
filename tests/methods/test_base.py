"""The method registry's state rules (methods/base.py): a stateful or stochastic method passed to
``policy_loss`` by name is rebuilt on every call, so it warns once per name with the fix."""

from __future__ import annotations

import warnings

import pytest
import torch

import entflow as ef
from entflow.methods import base as methods_base

D = torch.float64


# -- state rules: a stateful or stochastic method passed by name warns once, with the fix --------


@pytest.mark.parametrize("name", ["clip_cov", "adaptive_entropy", "pos_adv_reweight", "grpo+quadrant"])
def test_stateful_method_by_name_warns_once_with_the_fix(monkeypatch, gen, name):
    monkeypatch.setattr(methods_base, "_WARNED_BY_NAME", set())
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
