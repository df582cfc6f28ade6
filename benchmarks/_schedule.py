"""The interleaved schedule the side-by-side benchmarks share."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def interleaved(variants: Sequence[T], runs: int) -> Iterator[tuple[int, list[T]]]:
    """``(repetition, order)`` for each of ``runs`` repetitions: every variant once per repetition, the
    order rotated by one each repetition and reversed on odd ones, so that no variant always runs first
    or last, nor always after the same neighbour."""
    items = list(variants)
    for rep in range(runs):
        k = rep % len(items)
        order = items[k:] + items[:k]
        yield rep, order[::-1] if rep % 2 else order
