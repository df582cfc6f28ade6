"""The interleaved schedule the side-by-side benchmarks share."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
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


def interleaved_times(fns: dict[str, Callable[[], object]], reps: int) -> dict[str, list[float]]:
    """Seconds of each call of each function over ``reps`` repetitions, each function once per
    repetition in :func:`interleaved`'s order, after one warm-up call each."""
    for f in fns.values():
        f()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _, order in interleaved(list(fns), reps):
        for k in order:
            t0 = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
    return times


def interleaved_medians(fns: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """Median seconds per call of each function over :func:`interleaved_times`' repetitions."""
    return {k: statistics.median(v) for k, v in interleaved_times(fns, reps).items()}
