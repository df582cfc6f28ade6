"""Clip, entropy-flow and quadrant statistics reported on every update (docs/design.md §8)."""

from __future__ import annotations

import torch

from entflow.core.batch import TokenBatch
from entflow.core.estimators import entropy_change
from entflow.core.ppo import NO_CLIP

QUADRANTS = ("I", "II", "III", "IV")


def flow_sums(dH: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """S+ = Σ_{ΔH>0} ΔH and S− = Σ_{ΔH<0} |ΔH| over the valid tokens of ``dH`` [N, T] (0-d tensors)."""
    d = dH.masked_fill(~valid, 0)
    return d.clamp(min=0).sum(), (-d).clamp(min=0).sum()


def balance(s_pos: torch.Tensor, s_neg: torch.Tensor) -> torch.Tensor:
    """λ* = (S− − S+) / max(S− + S+, 1e-12) (OPEFO Eq. 9), a 0-d tensor."""
    total = s_neg + s_pos
    # where: in float16 the 1e-12 floor underflows to 0, and an all-zero flow would give 0/0
    return torch.where(total > 0, (s_neg - s_pos) / total.clamp(min=1e-12), torch.zeros_like(total))


def flow_balance(dH: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Entropy flow of an estimate ``dH`` [N, T] → (S+, S−, λ*) as 0-d tensors (OPEFO Eq. 9).

    S+ = Σ_{ΔH>0} ΔH, S− = Σ_{ΔH<0} |ΔH|, λ* = (S− − S+) / max(S− + S+, 1e-12).
    """
    s_pos, s_neg = flow_sums(dH, valid)
    return s_pos, s_neg, balance(s_pos, s_neg)


def quadrant_masks(adv: torch.Tensor, p: torch.Tensor, valid: torch.Tensor, hi: float = 0.8, lo: float = 0.2):
    """Boolean ``[N, T]`` masks of the four (sign A, p) quadrants (STEER App. C.3).

    I: A>0, p>hi; II: A>0, p<lo; III: A<0, p<lo; IV: A<0, p>hi.
    """
    pos, neg = (adv > 0) & valid, (adv < 0) & valid
    return {"I": pos & (p > hi), "II": pos & (p < lo), "III": neg & (p < lo), "IV": neg & (p > hi)}


def update_statistics(
    batch: TokenBatch, clip_low: float, clip_high: float, dual_clip: float | None = None
) -> dict[str, torch.Tensor]:
    """The §8 metrics for one loss evaluation, as 0-d detached tensors (no host sync).

    Always: ``clip/frac_high``, ``clip/frac_low``, ``nll``. With an entropy in the batch
    (``old_entropy`` or ``entropy``) also ``entropy``, ``flow/*`` and ``quadrant/*``.
    """
    valid = batch.valid
    n = valid.sum().to(torch.float64).clamp(min=1)
    adv = batch.token_advantages()
    logp = batch.logp.detach().masked_fill(~valid, 0)
    ratio = torch.exp(logp - batch.old_logp.detach().masked_fill(~valid, 0))
    cut_high = (adv > 0) & (ratio > 1 + clip_high) & valid
    cut_low = (adv < 0) & (ratio < 1 - clip_low) & valid
    out = {
        "clip/frac_high": cut_high.sum() / n,
        "clip/frac_low": cut_low.sum() / n,
        "nll": -logp.sum() / n,
    }
    if batch.old_entropy is None and batch.entropy is None:
        return out
    H = batch.entropy_for_reading("entropy metric")
    out["entropy"] = H.masked_fill(~valid, 0).sum() / n
    dH = entropy_change("opefo", batch, clip_low, clip_high, dual_clip)
    out["flow/S_pos"], out["flow/S_neg"], out["flow/lambda_star"] = flow_balance(dH, valid)
    dH_unclipped = entropy_change("opefo", batch, NO_CLIP, NO_CLIP)  # what the clip removed
    out["flow/dH_clipped_high"] = dH_unclipped.masked_fill(~cut_high, 0).sum()
    out["flow/dH_clipped_low"] = dH_unclipped.masked_fill(~cut_low, 0).sum()
    omega = entropy_change("steer", batch, clip_low, clip_high, dual_clip)
    for q, m in quadrant_masks(adv, logp.exp(), valid).items():
        out[f"quadrant/{q}/frac"] = m.sum() / n
        out[f"quadrant/{q}/dH"] = omega.masked_fill(~m, 0).sum()
    return out
