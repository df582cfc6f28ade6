"""The entropy-change estimators against the truth (docs/design.md §9): the true change of token
entropy one step causes, and how well each §5 estimator predicted it.

Every audit of the estimators measures through this module: the trainer's per-step audit
(``audit/*``: the run's own optimizer step, scored by :func:`score_estimators`), the clean audit of
``entflow reproduce`` (``evidence/audit.py``: a network's parameters or free logit rows) and the
tabular experiment of ``entflow estimators`` (``trainer/tabular.py``) — the last two through
:func:`entropy_change_of_step`, the one plain SGD step (:func:`sgd_step`) with the entropy measured
before and after it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from entflow.analysis.correlation import pearson, scale_fitted_mse, spearman
from entflow.core.batch import TokenBatch
from entflow.core.estimators import ESTIMATORS, entropy_change
from entflow.core.ppo import LossSpec


def score_estimators(
    true_dH: torch.Tensor, batch: TokenBatch, weights: torch.Tensor, spec: LossSpec
) -> dict[str, float]:
    """Pearson, Spearman and scale-fitted MSE of every §5 estimator against the measured change.

    ``true_dH`` ``[N, T]`` is H(after the step) − H(rollout policy) per token; ``batch`` the whole
    rollout batch with its advantages; ``weights`` ``[N, T]`` the method's token weights the update
    applied; ``spec`` the loss's settings (its clip defines I_t). Estimates are taken at the rollout
    policy (r = 1) and multiplied by ``weights``, i.e. for the gradient the update actually applied.
    Returns ``audit/*`` metrics.
    """
    valid = batch.valid
    truth = true_dH[valid]
    out = {"audit/true_dH_mean": float(truth.mean()) if truth.numel() else math.nan}
    for name in ESTIMATORS:
        est = (entropy_change(name, batch, *spec.clip) * weights)[valid]
        out[f"audit/{name}/pearson"] = pearson(est, truth)
        out[f"audit/{name}/spearman"] = spearman(est, truth)
        out[f"audit/{name}/mse"] = scale_fitted_mse(est, truth)[0]
    return out


def sgd_step(tensors: Iterable[torch.Tensor], lr: float) -> None:
    """One plain SGD step in place, ``p ← p − lr·∂L/∂p``, for every tensor with a gradient (a
    network's parameters, or free logit rows)."""
    with torch.no_grad():
        for p in tensors:
            if p.grad is not None:
                p.sub_(lr * p.grad)


def entropy_change_of_step(
    tensors: Iterable[torch.Tensor],
    loss: torch.Tensor,
    entropy: Callable[[], torch.Tensor],
    lr: float,
    before: torch.Tensor | None = None,
) -> torch.Tensor:
    """The true entropy change one SGD step on ``loss`` causes: ``loss`` back-propagated into
    ``tensors`` (their old gradients dropped), :func:`sgd_step` with ``lr``, and ``entropy()`` (no
    grad) after the step minus ``before`` (default: ``entropy()`` before it)."""
    tensors = list(tensors)
    if before is None:
        with torch.no_grad():
            before = entropy()
    for p in tensors:
        p.grad = None
    loss.backward()
    sgd_step(tensors, lr)
    with torch.no_grad():
        return entropy() - before
