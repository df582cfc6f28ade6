"""PPO-clip per-token loss, clip indicator and loss aggregation (SPEC §4)."""

from __future__ import annotations

import torch

from entflow.errors import ParameterError

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
NO_CLIP = float("inf")


def check_clip_bounds(owner: str, clip_low: float, clip_high: float, dual_clip: float | None) -> None:
    """Validate ε_low ∈ [0, 1], ε_high ≥ 0 (inf = unclipped) and dual clip c > 1."""
    if not (0 <= clip_low <= 1 or clip_low == NO_CLIP):
        raise ParameterError(owner, "clip_low", f"must be in [0, 1] (or inf for no clipping), got {clip_low}")
    if not clip_high >= 0:
        raise ParameterError(owner, "clip_high", f"must be >= 0 (inf for no clipping), got {clip_high}")
    if dual_clip is not None and not dual_clip > 1:
        raise ParameterError(owner, "dual_clip", f"must be > 1 or None, got {dual_clip}")


def ppo_clip_loss(
    adv: torch.Tensor,
    ratio: torch.Tensor,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None = None,
) -> torch.Tensor:
    """Per-token PPO-clip loss (minimised), ``[N, T]``.

    ℓ_t = max(−A_t·r_t, −A_t·clip(r_t, 1−ε_low, 1+ε_high)); with dual clip c > 1,
    ℓ_t = min(ℓ_t, −A_t·c) where A_t < 0.
    """
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    if dual_clip is not None:
        loss = torch.where(adv < 0, torch.minimum(loss, -adv * dual_clip), loss)
    return loss


def clip_indicator(
    adv: torch.Tensor,
    ratio: torch.Tensor,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None = None,
) -> torch.Tensor:
    """``I_t`` [N, T] float: 0 where the clip cuts the gradient, else 1.

    Cut when A>0 and r>1+ε_high, or A<0 and r<1−ε_low; with dual clip c, also when A<0 and
    r>c (the dual clip's flat branch).
    """
    r = ratio.detach()
    cut = ((adv > 0) & (r > 1 + clip_high)) | ((adv < 0) & (r < 1 - clip_low))
    if dual_clip is not None:
        cut = cut | ((adv < 0) & (r > dual_clip))
    return (~cut).to(r.dtype)


def aggregate(loss: torch.Tensor, mask: torch.Tensor, agg: str = "token-mean") -> torch.Tensor:
    """Reduce a per-token loss ``[N, T]`` to a scalar over ``mask`` [N, T].

    ``"token-mean"``: Σ ℓ m / Σ m (DAPO); ``"seq-mean-token-mean"``: mean over responses
    with at least one valid token of their token means (GRPO); ``"seq-mean-token-sum-norm"``:
    Σ ℓ m / (N · T) (Dr. GRPO, T = the padded length). An all-zero mask gives 0 (with grad).
    """
    m = mask.to(loss.dtype)
    total = (loss * m).sum()
    if agg == "token-mean":
        return total / m.sum().clamp(min=1)
    if agg == "seq-mean-token-mean":
        per_seq_n = m.sum(-1)
        per_seq = (loss * m).sum(-1) / per_seq_n.clamp(min=1)
        n_seq = (per_seq_n > 0).sum().clamp(min=1)
        return per_seq.sum() / n_seq
    if agg == "seq-mean-token-sum-norm":
        return total / max(loss.shape[0] * loss.shape[-1], 1)
    raise ParameterError("policy_loss", "agg", f"must be one of {AGG_MODES}, got {agg!r}")
