"""The per-step scores of the entropy-change estimators (docs/design.md §9): how well each §5
estimator predicted the change of token entropy that one training step actually caused."""

from __future__ import annotations

import math

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
