"""Allowed values as data: a :class:`Check` says them in words and tests a value, one object, so that
the help a user reads and the check that refuses a value cannot drift. A method's parameters
(``methods/base.py``'s ``param``) and every config key (``trainer/config.py``'s ``setting``: the
trainer's, the lab's, a real model's, the warm start's and an evaluation's sampling settings) carry
one.

Pure Python (no torch), so a config can be read, checked and explained (``--help``) without
importing torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Check",
    "above",
    "at_least",
    "at_least_of",
    "at_most_of",
    "choice",
    "in_range",
    "integer",
    "interval",
    "one_of",
    "optional",
    "or_null",
]


@dataclass(frozen=True)
class Check:
    """An allowed set of values: ``describe`` says it in words, ``ok`` tests a value.

    A check whose bound is another key of the same config (``mini_batches <= prompts_per_step *
    group_size``) names those keys in ``reads``; its ``ok`` then takes ``(value, owner)``, the
    owner being the config. :meth:`allows` calls either form."""

    describe: str
    ok: Callable[..., bool]
    reads: tuple[str, ...] = ()

    def allows(self, value: Any, owner: Any = None) -> bool:
        """Whether ``value`` is allowed (``owner``: the config whose other keys ``reads`` names)."""
        return bool(self.ok(value, owner) if self.reads else self.ok(value))

    def __and__(self, other: Check) -> Check:
        """Both checks: ``">= 1 and <= prompts_per_step * group_size"``."""
        return Check(
            f"{self.describe} and {other.describe}",
            lambda v, owner=None: self.allows(v, owner) and other.allows(v, owner),
            tuple(dict.fromkeys(self.reads + other.reads)),
        )


def _number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float) and not math.isnan(v)


# ----------------------------------------------------------------------------- method parameters
def interval(lo: float = -math.inf, hi: float = math.inf, lo_open: bool = False, hi_open: bool = False) -> Check:
    """Real numbers between ``lo`` and ``hi`` (bounds closed unless ``*_open``)."""
    text = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"

    def ok(v: Any) -> bool:
        if not _number(v):
            return False
        return (lo < v if lo_open else lo <= v) and (v < hi if hi_open else v <= hi)

    return Check(f"a number in {text}", ok)


def one_of(*choices: Any) -> Check:
    return Check(f"one of {', '.join(repr(c) for c in choices)}", lambda v: v in choices)


def optional(check: Check) -> Check:
    return Check(f"None or {check.describe}", lambda v: v is None or check.ok(v))


def integer(lo: int = 0) -> Check:
    return Check(f"an integer >= {lo}", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= lo)


# ----------------------------------------------------------------------------- config keys
# written as a config's reader writes them: ">= 1", "> 0 or null", "adamw | sgd"


def at_least(lo: float) -> Check:
    """Numbers ``>= lo``."""
    return Check(f">= {lo:g}", lambda v: _number(v) and v >= lo)


def above(lo: float) -> Check:
    """Numbers ``> lo`` (finite)."""
    return Check(f"> {lo:g}", lambda v: _number(v) and lo < v < math.inf)


def in_range(lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> Check:
    """Numbers in ``[lo, hi]`` (a bound open with ``*_open``: ``in (0, 1]``)."""
    return Check(
        f"in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}",
        lambda v: _number(v) and (lo < v if lo_open else lo <= v) and (v < hi if hi_open else v <= hi),
    )


def at_least_of(expr: str, bound: Callable[[Any], float], reads: tuple[str, ...]) -> Check:
    """Numbers ``>= bound(config)``, a bound made of the config's keys ``reads``; ``expr`` says it."""
    return Check(f">= {expr}", lambda v, owner: _number(v) and v >= bound(owner), reads)


def at_most_of(expr: str, bound: Callable[[Any], float], reads: tuple[str, ...]) -> Check:
    """Numbers ``<= bound(config)``, a bound made of the config's keys ``reads``; ``expr`` says it."""
    return Check(f"<= {expr}", lambda v, owner: _number(v) and v <= bound(owner), reads)


def choice(*names: str) -> Check:
    """One of ``names``, written ``a | b | c``."""
    return Check(" | ".join(names), lambda v: v in names)


def or_null(check: Check) -> Check:
    """``check``'s values, or null (None)."""
    return Check(f"{check.describe} or null", lambda v, owner=None: v is None or check.allows(v, owner), check.reads)
