"""Quadrant interventions: mask or boost a random fraction of the tokens of a (sign A, p)
quadrant (paper 000 App. C.3, Fig. 14–16).

Quadrants: I A>0, p>hi (confident, reinforced: entropy down); II A>0, p<lo (unlikely,
reinforced: entropy up); III A<0, p<lo (unlikely, punished: entropy down); IV A<0, p>hi
(confident, punished: entropy up). Masking I and III and boosting II and IV raises entropy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entflow.core.distributed import Reducer
from entflow.core.flow import QUADRANTS, quadrant_masks
from entflow.errors import ParameterError
from entflow.methods.base import (
    SEED,
    UNIT,
    Check,
    LossContext,
    Method,
    Stochastic,
    one_of,
    optional,
    param,
    register,
)

ACTION_WEIGHT = {"mask": 0.0, "boost": 2.0}
PRESETS = {
    "uplift": {"I": "mask:0.1", "II": "boost:0.1", "III": "mask:0.1", "IV": "boost:0.1"},
    "suppress": {"I": "boost:0.1", "II": "mask:0.1", "III": "boost:0.1", "IV": "mask:0.1"},
}


def parse_action(spec: str) -> tuple[str, float]:
    """``"mask:F"`` / ``"boost:F"`` → (action, F); raises ValueError when malformed."""
    action, _, frac = spec.partition(":")
    f = float(frac)
    if action not in ACTION_WEIGHT or not 0.0 <= f <= 1.0:
        raise ValueError(spec)
    return action, f


def _valid_action(v: object) -> bool:
    if not isinstance(v, str):
        return False
    try:
        parse_action(v)
    except ValueError:
        return False
    return True


ACTION = optional(Check("'mask:F' or 'boost:F' with F in [0, 1]", _valid_action))


@register
@dataclass(repr=False)
class Quadrant(Stochastic, Method):
    """Per quadrant, an action on a random fraction F of its tokens: ``mask`` (weight 0) or
    ``boost`` (weight 2). Each token of the quadrant is picked independently with probability F
    (a Bernoulli draw from the seeded generator in the state). Presets: ``uplift`` = mask I &
    III, boost II & IV at F=0.1 (raises entropy); ``suppress`` = boost I & III, mask II & IV
    (lowers it). An explicit ``I``…``IV`` overrides the preset's entry; with neither, nothing
    changes. p is the current probability of the sampled token (detached).
    """

    name = "quadrant"
    formula = "w_t = 0 (mask) or 2 (boost) on a random fraction F of the tokens of a chosen (sign A, p) quadrant"
    paper = "paper 000 App. C.3, Fig. 14–16 (STEER quadrant interventions)"
    state_fields = ("generator",)

    preset: str | None = param(None, optional(one_of(*PRESETS)), "uplift (entropy up) or suppress (down)")
    I: str | None = param(None, ACTION, "quadrant I (A>0, p>hi) action")
    II: str | None = param(None, ACTION, "quadrant II (A>0, p<lo) action")
    III: str | None = param(None, ACTION, "quadrant III (A<0, p<lo) action")
    IV: str | None = param(None, ACTION, "quadrant IV (A<0, p>hi) action")
    hi: float = param(0.8, UNIT, "p above which a token is confident")
    lo: float = param(0.2, UNIT, "p below which a token is unlikely")
    seed: int = param(0, SEED, "seed of the selection generator")

    def validate(self) -> None:
        if self.lo > self.hi:
            raise ParameterError(self.name, "lo", f"must be <= hi = {self.hi}, got {self.lo}")

    def actions(self) -> dict[str, tuple[str, float]]:
        """Quadrant → (action, fraction) after applying the preset and the overrides."""
        spec = dict(PRESETS[self.preset]) if self.preset else {}
        for q in QUADRANTS:
            if getattr(self, q) is not None:
                spec[q] = getattr(self, q)
        return {q: parse_action(s) for q, s in spec.items()}

    def token_weights(self, ctx: LossContext) -> torch.Tensor | None:
        acts = self.actions()
        if not acts:
            return None
        masks = quadrant_masks(ctx.adv, ctx.p, ctx.valid, self.hi, self.lo)  # App. C.3 quadrants
        u = ctx.stat(self)["u"]
        w = torch.ones_like(ctx.adv)
        for q, (action, f) in acts.items():
            sel = masks[q] & (u < f)  # each token of the quadrant with probability f
            w = torch.where(sel, ACTION_WEIGHT[action], w)
            ctx.metrics[f"quadrant/{q}/n_selected"] = sel.sum().to(torch.float64)
        return w

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]] | None:
        """One U(0, 1) draw per token (float64), from the global draw in global mode."""
        if not self.actions():
            return None
        return [{"u": u} for u in reducer.rand(self.generator(reducer.device, reducer.shared))]
