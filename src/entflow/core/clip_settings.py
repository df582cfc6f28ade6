"""The PPO clip's settings, in one place: the default ε, the value that switches a side off, and the
one rule every layer validates ε_low, ε_high and the dual-clip constant with (docs/design.md §4).

Pure Python (no torch), so a config can be read and checked without importing torch.

The rule:

- ``clip_low`` (ε_low, the ratio is kept above 1 − ε_low): a number in [0, 1], or ``inf``;
- ``clip_high`` (ε_high, the ratio is kept below 1 + ε_high): a number in [0, inf];
- ``dual_clip`` (c, the bound on −A·r for A < 0): a number > 1, or None (off).

``inf`` (:data:`NO_CLIP`) means that side is not clipped; it is allowed for both bounds because the
clip-free methods (``clip_free``, KL-Cov, TOPR, …) set it. ε_low between 1 and inf is refused: with
ε_low = 1 the floor 1 − ε_low is 0, which a ratio never goes below, so a larger finite value would
only look like a stronger setting. NaN, booleans and non-numbers are refused everywhere.
"""

from __future__ import annotations

import math
from typing import Any

from entflow.core.rules import Check
from entflow.errors import ParameterError

CLIP_EPS = 0.2
"""The PPO clip ε (Schulman et al. 2017, Eq. 7), GRPO's and TRL's and verl's default: the default of
both ε_low and ε_high in the loss, the trainer's config, the clip methods and the adapters."""

NO_CLIP = math.inf
"""A clip bound that switches its side off: the ratio is not clipped on that side."""

CLIP_RANGES = {
    "clip_low": "a number in [0, 1], or inf for no clipping below",
    "clip_high": "a number in [0, inf], inf for no clipping above",
    "dual_clip": "a number > 1, or None (null in a config) for off",
}
"""The rule of :func:`clip_value_ok` in words, per setting (error messages and help text)."""


def clip_value_ok(name: str, value: Any) -> bool:
    """Whether ``value`` is allowed for the clip setting ``name`` (``"clip_low"``, ``"clip_high"`` or
    ``"dual_clip"``): the rule of this module's docstring. An unknown ``name`` raises ``KeyError``."""
    if name not in CLIP_RANGES:
        raise KeyError(name)
    if name == "dual_clip" and value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return False
    if name == "clip_low":
        return 0 <= value <= 1 or value == NO_CLIP
    if name == "clip_high":
        return value >= 0
    return value > 1


CLIP_CHECKS = {name: Check(text, lambda v, name=name: clip_value_ok(name, v)) for name, text in CLIP_RANGES.items()}
"""The rule of :func:`clip_value_ok` as one :class:`~entflow.core.rules.Check` per setting (a config
key's help and its validation)."""


def check_clip_bounds(owner: str, clip_low: Any, clip_high: Any, dual_clip: Any) -> None:
    """Raise :class:`ParameterError` naming ``owner``, the field and the value for the first of
    ``clip_low``, ``clip_high``, ``dual_clip`` that :func:`clip_value_ok` refuses."""
    for name, value in (("clip_low", clip_low), ("clip_high", clip_high), ("dual_clip", dual_clip)):
        if not clip_value_ok(name, value):
            raise ParameterError(owner, name, f"must be {CLIP_RANGES[name]}, got {value!r}")
