"""GRPO and the clip-bound variants (docs/design.md §6, first rows).

The clip decides which tokens' gradients are cut (I_t = 0): a higher ε_high lets
low-probability positive tokens grow (entropy up); a lower bound further from 1 lets negative
tokens shrink (entropy down).
"""

from __future__ import annotations

from dataclasses import dataclass

from entflow.core.clip_settings import CLIP_EPS, CLIP_RANGES, NO_CLIP, clip_value_ok
from entflow.methods.base import Check, Method, param, register

# the one rule of core/clip_settings.py, as the parameter checks of the methods
EPS_LOW = Check(CLIP_RANGES["clip_low"], lambda v: clip_value_ok("clip_low", v))
EPS_HIGH = Check(CLIP_RANGES["clip_high"], lambda v: clip_value_ok("clip_high", v))


@register
@dataclass(repr=False)
class GRPO(Method):
    """Plain PPO-clip with the loss's bounds (ε_low = ε_high = 0.2 by default)."""

    name = "grpo"
    formula = "ℓ = max(−A·r, −A·clip(r, 1−ε_low, 1+ε_high))"
    paper = "GRPO (Shao et al. 2024); DAPO token-mean aggregation"


@dataclass(repr=False)
class ClipBounds(Method):
    """A method that only sets the clip bounds (ε_low, ε_high)."""

    clip_low: float = param(CLIP_EPS, EPS_LOW, "ε_low: ratio floor is 1 − ε_low")
    clip_high: float = param(CLIP_EPS, EPS_HIGH, "ε_high: ratio ceiling is 1 + ε_high")

    def clip_bounds(self) -> tuple[float, float]:
        return (self.clip_low, self.clip_high)


@register
@dataclass(repr=False)
class ClipHigher(ClipBounds):
    name = "clip_higher"
    formula = "ε_high = 0.28 (ε_low = 0.2)"
    paper = "DAPO (Yu et al. 2025) clip-higher; paper 002 App. D.1"
    clip_high: float = param(0.28, EPS_HIGH, "ε_high")


@register
@dataclass(repr=False)
class ClipLower(ClipBounds):
    name = "clip_lower"
    formula = "ε_low = 0.28 (ε_high = 0.2)"
    paper = "paper 002 App. D.1 (Clip-Lower)"
    clip_low: float = param(0.28, EPS_LOW, "ε_low")


@register
@dataclass(repr=False)
class ClipTighter(ClipBounds):
    name = "clip_tighter"
    formula = "ε_low = 0.12 (ε_high = 0.2)"
    paper = "paper 002 App. D.1 (Clip-Tighter)"
    clip_low: float = param(0.12, EPS_LOW, "ε_low")


@register
@dataclass(repr=False)
class ClipFree(Method):
    name = "clip_free"
    formula = "ℓ = −A·r (no clipping)"
    paper = "paper 002 App. D.1 (Clip-Free)"

    def clip_bounds(self) -> tuple[float, float]:
        return (NO_CLIP, NO_CLIP)


@register
@dataclass(repr=False)
class ClipExtreme(ClipBounds):
    name = "clip_extreme"
    formula = "ε_high = 5, ε_low = 0.99"
    paper = "paper 000 §6 (extreme clip setting)"
    clip_low: float = param(0.99, EPS_LOW, "ε_low")
    clip_high: float = param(5.0, EPS_HIGH, "ε_high")
