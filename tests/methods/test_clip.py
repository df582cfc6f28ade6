"""The clip methods of ``methods/clip.py`` (docs/design.md §6, first rows), checked through the
gradient: on a grid of ratios and both signs of A, the tokens whose gradient ``policy_loss`` cuts are
exactly those outside each method's (ε_low, ε_high), composed setters included; ``clip_free`` cuts
none."""

from __future__ import annotations

import pytest
import torch

import entflow as ef

RATIOS = [0.005, 0.5, 0.75, 0.85, 0.9, 1.0, 1.1, 1.15, 1.25, 1.3, 5.5, 7.0]


def _zero_grad_tokens(method):
    """Tokens (A, r) whose gradient policy_loss cuts, over a fixed grid of ratios and both signs of A."""
    r = torch.tensor(RATIOS, dtype=torch.float64)
    old_logp = torch.full((2, len(RATIOS)), -2.0, dtype=torch.float64)
    logp = (old_logp + torch.log(r)).clone().requires_grad_(True)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    out = ef.policy_loss(ef.TokenBatch(logp, old_logp, adv, torch.ones(2, len(RATIOS))), method=method)
    (g,) = torch.autograd.grad(out.loss, logp)
    return {
        (int(a), rr) for a, row in zip((1, -1), g, strict=True) for rr, gv in zip(RATIOS, row, strict=False) if gv == 0
    }


def _expected_cut(lo, hi):
    return {(1, r) for r in RATIOS if r > 1 + hi} | {(-1, r) for r in RATIOS if r < 1 - lo}


@pytest.mark.parametrize(
    ("method", "lo", "hi"),
    [
        ("grpo", 0.2, 0.2),
        ("clip_higher", 0.2, 0.28),
        ("clip_lower", 0.28, 0.2),
        ("clip_tighter", 0.12, 0.2),
        ("clip_extreme", 0.99, 5.0),
        ("clip_higher+grpo", 0.2, 0.28),
        ("clip_higher+clip_lower", 0.28, 0.2),
    ],
)
def test_clip_variant_bounds_through_gradient(method, lo, hi):
    assert ef.get_method(method).clip_bounds() in (None, (lo, hi))
    got = _zero_grad_tokens(method)
    assert got == _expected_cut(lo, hi)
    assert got  # every variant cuts something on this grid


def test_clip_free_cuts_nothing():
    assert _zero_grad_tokens("clip_free") == set()
    # and the distinguishing tokens: r=1.25 (A>0) flows under clip_higher, r=0.75 (A<0) under clip_lower
    assert (1, 1.25) not in _zero_grad_tokens("clip_higher") and (1, 1.25) in _zero_grad_tokens("grpo")
    assert (-1, 0.75) not in _zero_grad_tokens("clip_lower") and (-1, 0.75) in _zero_grad_tokens("grpo")
    assert (-1, 0.85) in _zero_grad_tokens("clip_tighter")
    assert (1, 5.5) not in _zero_grad_tokens("clip_extreme") and (1, 7.0) in _zero_grad_tokens("clip_extreme")
