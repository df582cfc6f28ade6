"""PPO-clip per-token loss, clip indicator and loss aggregation (docs/design.md §4)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

# NO_CLIP and check_clip_bounds live in core/clip_settings.py; they stay importable from here, as in 0.2
from entflow.core.clip_settings import CLIP_EPS
from entflow.core.clip_settings import NO_CLIP as NO_CLIP
from entflow.core.clip_settings import check_clip_bounds as check_clip_bounds
from entflow.core.loss_names import AGG_MODES as AGG_MODES  # its 0.2 path, kept importable
from entflow.errors import ParameterError


@dataclass(frozen=True)
class LossSpec:
    """The settings of the PPO-clip loss (docs/design.md §4), validated once when made.

    ``clip_low``, ``clip_high``: ε_low ∈ [0, 1] or inf, ε_high ∈ [0, inf] (inf = that side unclipped;
    the rule is :func:`entflow.core.clip_settings.clip_value_ok`; a method that sets clip bounds overrides
    both, :meth:`for_method`); ``dual_clip``: the dual-clip constant c > 1 for A < 0,
    or None; ``agg``: one of :data:`AGG_MODES`; ``max_len``: the fixed T_max of
    ``seq-mean-token-sum-norm`` (Dr. GRPO: the generation limit), or None for the batch's padded
    length. The defaults are GRPO's. A bad value raises :class:`ParameterError` naming the field
    and the value; ``dataclasses.replace(spec, agg=...)`` validates again.
    """

    clip_low: float = CLIP_EPS
    clip_high: float = CLIP_EPS
    dual_clip: float | None = None
    agg: str = "token-mean"
    max_len: int | None = None

    def __post_init__(self) -> None:
        check_clip_bounds("LossSpec", self.clip_low, self.clip_high, self.dual_clip)
        if self.agg not in AGG_MODES:
            raise ParameterError("LossSpec", "agg", f"must be one of {AGG_MODES}, got {self.agg!r}")
        check_max_len(self.max_len, 1, owner="LossSpec")

    @property
    def clip(self) -> tuple[float, float, float | None]:
        """``(clip_low, clip_high, dual_clip)``."""
        return self.clip_low, self.clip_high, self.dual_clip

    def for_method(self, method: Any) -> LossSpec:
        """The spec ``method``'s loss runs under: the clip bounds ``method.clip_bounds()`` and the
        aggregation ``method.aggregation()`` (a sequence-level loss fixes the response mean) where
        the method fixes them, this spec's elsewhere. The one place that decides them; ``method``
        is any object with those two methods (an entflow ``Method``)."""
        bounds, agg = method.clip_bounds(), method.aggregation()
        if bounds is None and agg is None:
            return self
        low, high = bounds or (self.clip_low, self.clip_high)
        return replace(self, clip_low=low, clip_high=high, agg=agg or self.agg)


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


def aggregation_count(mask: torch.Tensor, agg: str, max_len: int | None = None) -> torch.Tensor:
    """The part of an aggregation's denominator one micro-batch contributes, a 0-d tensor:
    Σ m (token-mean), the number of responses with a valid token (seq-mean-token-mean), or N
    (seq-mean-token-sum-norm; the denominator is N·max_len). Summed over micro-batches and
    ranks it is the global denominator."""
    m = mask.to(torch.float64)
    if agg == "token-mean":
        return m.sum()
    if agg == "seq-mean-token-mean":
        return (m.sum(-1) > 0).to(torch.float64).sum()
    if agg == "seq-mean-token-sum-norm":
        return torch.full((), float(mask.shape[0]), dtype=torch.float64, device=mask.device)  # a fill: no copy
    raise ParameterError("policy_loss", "agg", f"must be one of {AGG_MODES}, got {agg!r}")


def check_max_len(max_len: int | None, length: int, owner: str = "policy_loss") -> None:
    """``max_len`` (the fixed T of seq-mean-token-sum-norm) must be a positive int >= the padded length."""
    if max_len is None:
        return
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ParameterError(owner, "max_len", f"must be a positive integer or None, got {max_len!r}")
    if length > max_len:
        raise ParameterError(owner, "max_len", f"must be >= the padded response length T = {length}, got {max_len}")


def aggregate(
    loss: torch.Tensor,
    mask: torch.Tensor,
    agg: str = "token-mean",
    max_len: int | None = None,
    denominator: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss ``[N, T]`` to a scalar over ``mask`` [N, T].

    ``"token-mean"``: Σ ℓ m / Σ m (DAPO); ``"seq-mean-token-mean"``: mean over responses
    with at least one valid token of their token means (GRPO); ``"seq-mean-token-sum-norm"``:
    Σ ℓ m / (N · T_max) (Dr. GRPO) with ``T_max = max_len`` when given, else this batch's
    padded length T (which drifts between batches: give ``max_len`` — the generation limit —
    for a fixed scale). An all-zero mask gives 0 (with grad).

    ``denominator`` (0-d tensor) replaces the batch's own count (Σ m, the number of non-empty
    responses, or N) with the global one from ``prepare_statistics``, so that the sum of the
    micro-batch losses is the loss of the whole optimisation batch. Half-precision losses are
    reduced in float32 (the result is float32).
    """
    if loss.dtype in (torch.float16, torch.bfloat16):
        loss = loss.float()  # reduce half-precision losses in float32 (token counts exceed bf16's 8 bits)
    m = mask.to(loss.dtype)
    if agg not in AGG_MODES:
        raise ParameterError("policy_loss", "agg", f"must be one of {AGG_MODES}, got {agg!r}")
    check_max_len(max_len, loss.shape[-1])
    if agg == "seq-mean-token-mean":
        per_seq_n = m.sum(-1)
        numer = ((loss * m).sum(-1) / per_seq_n.clamp(min=1)).sum()
    else:
        numer = (loss * m).sum()
    if denominator is None:
        denominator = aggregation_count(mask, agg)
    denom = denominator.to(loss.dtype).clamp(min=1)
    if agg == "seq-mean-token-sum-norm":
        denom = denom * (max_len if max_len is not None else max(loss.shape[-1], 1))
    return numer / denom
