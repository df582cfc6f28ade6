"""The interleaved schedule the side-by-side benchmarks share, and their measurements in fresh
processes (a script that runs ``python SCRIPT --worker ...`` once per measurement)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

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


def alternating(variants: Sequence[T], runs: int) -> Iterator[tuple[int, list[T]]]:
    """``(repetition, order)`` for each of ``runs`` repetitions: the variants in order on even
    repetitions, reversed on odd ones."""
    items = list(variants)
    for rep in range(runs):
        yield rep, items[::-1] if rep % 2 else items


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


def interleaved_runs(
    variants: Sequence[T],
    runs: int,
    measure: Callable[[T], dict[str, Any]],
    line: Callable[[T, dict[str, Any]], str],
    prefix: str = "",
    schedule: Callable[[Sequence[T], int], Iterable[tuple[int, list[T]]]] = interleaved,
) -> dict[T, list[dict[str, Any]]]:
    """Every record ``measure(variant)`` returns over ``runs`` repetitions of ``schedule`` (by default
    :func:`interleaved`), per variant in order; after each, the progress line
    ``{prefix}run {repetition}/{runs} {line(variant, record)}``."""
    records: dict[T, list[dict[str, Any]]] = {v: [] for v in variants}
    for rep, order in schedule(variants, runs):
        for v in order:
            r = measure(v)
            records[v].append(r)
            print(f"{prefix}run {rep + 1}/{runs} {line(v, r)}", flush=True)
    return records


def in_fresh_process(script: str, argv: list[str], threads: int | None = None) -> dict[str, Any]:
    """The record a fresh ``python SCRIPT ARGV...`` prints as its last line (JSON), with
    ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` = ``threads`` where given; a process that fails
    raises ``RuntimeError`` with the end of its stderr."""
    env = dict(os.environ)
    if threads is not None:
        env |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    res = subprocess.run([sys.executable, os.path.abspath(script), *argv], capture_output=True, text=True, env=env)
    if res.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])
