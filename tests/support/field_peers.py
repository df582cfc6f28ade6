"""Shared pieces of the field-method tests (maxrl, asymre, topr, positive_nll, chord, clipb):
a float64 batch with the degenerate groups the peers treat specially, entflow's loss and its
gradient, and the peers' PPO losses on the same tensors.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

import entflow as ef
from support.methods_ref import D, make_batch
from support.peers import skyrl_algorithm_config, skyrl_ppo_utils, trinity

# four groups of four: mixed, all-zero, all-equal (all correct), mixed
REWARDS = torch.tensor([1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0, 0], dtype=D)
GROUPS = torch.arange(16) // 4
AGGS = ["token-mean", "seq-mean-token-mean"]
# relative tolerance of the peer comparisons (float64 both sides); the absolute floor covers
# entries that are 0 on one side and round-off on the other
RTOL, ATOL = 1e-6, 1e-12


def field_batch(gen: torch.Generator, rewards: torch.Tensor = REWARDS, groups: torch.Tensor = GROUPS, **extra: Any):
    """A ragged float64 batch (every row has at least two valid tokens) with ``rewards`` and ``groups``."""
    n = rewards.shape[0]
    b = make_batch(gen, n=n, t=9, group=4, off_policy=0.5, rewards=rewards, group_index=groups, **extra)
    return b


def with_advantages(b: ef.TokenBatch, adv: torch.Tensor) -> ef.TokenBatch:
    return dataclasses.replace(b, advantages=adv.detach(), logp=b.logp.detach().clone().requires_grad_(True))


def grpo_batch(gen: torch.Generator, **extra: Any) -> ef.TokenBatch:
    """:func:`field_batch` (``extra`` passed on) with its GRPO advantages."""
    b = field_batch(gen, **extra)
    return with_advantages(b, ef.compute_advantages(b, "grpo"))


def ours(b: ef.TokenBatch, method: Any, **spec: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """entflow's loss and its gradient w.r.t. ``logp`` on ``b`` (advantages as given)."""
    b = dataclasses.replace(b, logp=b.logp.detach().clone().requires_grad_(True))
    out = ef.policy_loss(b, method, ef.LossSpec(**spec))
    (g,) = torch.autograd.grad(out.loss, b.logp)
    return out.loss.detach(), g


def skyrl_ppo(adv: torch.Tensor, b: ef.TokenBatch, agg: str) -> tuple[torch.Tensor, torch.Tensor]:
    """SkyRL 0.4.0's PPO loss (``ppo_policy_loss``, eps 0.2) after its loss reduction
    (``apply_loss_reduction_to_advantages_minibatch``: token_mean or sequence_mean), and its gradient."""
    ppo = skyrl_ppo_utils()
    cfg = skyrl_algorithm_config(policy_loss_type="regular", eps_clip_low=0.2, eps_clip_high=0.2)
    reduction = {"token-mean": "token_mean", "seq-mean-token-mean": "sequence_mean"}[agg]
    n, t = b.logp.shape
    scaled = ppo.apply_loss_reduction_to_advantages_minibatch(adv, b.mask, reduction, n, t)
    logp = b.logp.detach().clone().requires_grad_(True)
    loss, _ = ppo.ppo_policy_loss(logp, b.old_logp, scaled, cfg, loss_mask=b.mask)
    return loss_and_grad(loss, logp)


def trinity_loss(fn: Any, b: ef.TokenBatch, adv: torch.Tensor, mask: torch.Tensor | None = None, **kw: Any):
    """A Trinity-RFT policy loss function ``fn`` on ``b`` (``mask`` replaces ``b.mask``), and its
    gradient w.r.t. the log-probs."""
    logp = b.logp.detach().clone().requires_grad_(True)
    m = b.mask if mask is None else mask
    loss, _ = fn(logprob=logp, old_logprob=b.old_logp, action_mask=m, advantages=adv, **kw)
    return loss_and_grad(loss, logp)


def trinity_ppo(agg: str, dual_clip: float = 3.0) -> Any:
    """Trinity-RFT's ``PPOPolicyLossFn`` (clip 0.2; its dual clip c is always on, default 3)."""
    mod = trinity("algorithm.policy_loss_fn.ppo_policy_loss")
    return mod.PPOPolicyLossFn(clip_range=0.2, clip_ratio_c=dual_clip, loss_agg_mode=agg)


def assert_matches_hand(got: tuple[torch.Tensor, torch.Tensor], hand: tuple[torch.Tensor, torch.Tensor]) -> None:
    """entflow's (loss, gradient) equal the hand formula's, both float64, to round-off."""
    for a, b in zip(got, hand, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def loss_and_grad(loss: torch.Tensor, logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``loss`` detached, and its gradient w.r.t. ``logp``."""
    (g,) = torch.autograd.grad(loss, logp)
    return loss.detach(), g


def rows_loss_and_grad(rows: list[list[Any]], agg: str, logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The hand loss of the per-token terms ``rows`` (:func:`aggregate_rows`), detached, and its
    gradient w.r.t. ``logp``."""
    return loss_and_grad(aggregate_rows(rows, agg), logp)


def aggregate_rows(rows: list[list[Any]], agg: str) -> Any:
    """A hand loss from per-token terms, one list per response (empty responses left out):
    ``token-mean`` Σ_i Σ_t ℓ_it / Σ_i T_i; ``seq-mean-token-mean`` the mean over responses of
    Σ_t ℓ_it / T_i."""
    rows = [r for r in rows if r]
    if agg == "token-mean":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    return sum(sum(r) / len(r) for r in rows) / len(rows)


def assert_bad_parameter_is_named(method: str, param: str, bad: Any) -> None:
    """``param=bad`` is a ParameterError naming ``param`` from ``ef.get_method`` and a ConfigError
    naming it through a run's config (``method_params``)."""
    import pytest

    from entflow.errors import ConfigError, ParameterError
    from entflow.lab.config import LabConfig

    with pytest.raises(ParameterError, match=param):
        ef.get_method(method, **{param: bad})
    with pytest.raises(ConfigError, match=param):
        LabConfig(method=method, method_params={param: bad}).validate()
