"""What ``entflow analyze`` can say about a log too short for the law fit, and the method metrics a
log carries.

The entropy–reward law (:mod:`entflow.analysis.law`) needs :data:`~entflow.analysis.law.MIN_POINTS`
steps that log both the entropy and the reward. A shorter log (a 3-step smoke run of verl's trainer,
say) still has a defined answer: :func:`short_log` reports its entropy and reward, first and last,
the entropy retention ``H_last / H_first`` when there are two points or more, and the verdict it can
make: ``too short to fit the law: N points, needs 4``. A log with no such step at all is a
:class:`~entflow.errors.LogError` naming the file.

:func:`method_metrics` lists the ``entflow/*`` metrics a log carries (``entflow/<method>/...``, or
``actor/entflow/...`` in verl's log): how many steps logged each, its first and its last value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from entflow.analysis.law import MIN_POINTS
from entflow.analysis.log_keys import resolve_keys
from entflow.analysis.log_readers import LogData
from entflow.errors import LogError

__all__ = ["MethodMetric", "ShortLog", "method_metrics", "short_log"]

VERDICT = "too_short"


@dataclass(frozen=True)
class ShortLog:
    """A log with fewer than :data:`MIN_POINTS` steps carrying both the entropy and the reward.

    ``steps``, ``entropy``, ``reward``: ``[n]`` (``1 <= n < MIN_POINTS``), at the steps that log
    both; ``retention``: ``entropy[-1] / entropy[0]`` (None for one point or a zero first entropy).
    """

    path: str
    format: str
    keys: dict[str, str]
    steps: np.ndarray
    entropy: np.ndarray
    reward: np.ndarray
    retention: float | None
    warnings: list[str]

    @property
    def n_points(self) -> int:
        return int(self.steps.size)

    @property
    def reason(self) -> str:
        return f"too short to fit the law: {self.n_points} point{'s' * (self.n_points != 1)}, needs {MIN_POINTS}"

    def lines(self) -> list[str]:
        """What the terminal shows: entropy, reward, retention and the verdict, one line each."""

        def span(v: np.ndarray) -> str:
            return f"{v[0]:.4g}" if v.size == 1 else f"{v[0]:.4g} -> {v[-1]:.4g}"

        steps = f"step {self.steps[0]:g}" if self.n_points == 1 else f"steps {self.steps[0]:g}-{self.steps[-1]:g}"
        out = [
            f"{self.path} ({self.format}, {self.n_points} point{'s' * (self.n_points != 1)}, {steps})",
            f"  entropy ({self.keys['entropy']}): {span(self.entropy)}",
            f"  reward ({self.keys['reward']}): {span(self.reward)}",
        ]
        if self.retention is not None:
            out.append(f"  entropy retention (last / first): {self.retention:.3f}")
        out.append(f"verdict: {self.reason}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": VERDICT,
            "reason": self.reason,
            "n_points": self.n_points,
            "min_points": MIN_POINTS,
            "source": {"path": self.path, "format": self.format, "keys": self.keys, "warnings": self.warnings},
            "steps": self.steps.tolist(),
            "entropy": self.entropy.tolist(),
            "reward": self.reward.tolist(),
            "retention": self.retention,
        }


def short_log(
    log: LogData,
    *,
    entropy_key: str | None = None,
    reward_key: str | None = None,
    strict: bool = False,
) -> ShortLog | None:
    """The short-log summary of ``log``, or None when it has enough points for the law fit.

    The points are the steps where both the entropy and the reward are logged and finite (a NaN or
    inf is dropped and counted in ``warnings``; with ``strict`` it is refused).

    Raises:
        LogError: no entropy / reward key (:func:`resolve_keys`), a non-finite value under
            ``strict``, or no step logging both (naming the file and the keys).
    """
    notes = list(log.notes)
    keys = resolve_keys(log, {"entropy": entropy_key, "reward": reward_key})
    log.notes[:] = notes  # resolve_keys notes the keys it picked; analyze_log notes them once
    kh, kr = keys["entropy"], keys["reward"]
    warnings: list[str] = []
    cols = []
    for key in (kh, kr):
        s, v = log.series[key]
        bad = ~np.isfinite(v)
        if bad.any():
            if strict:
                i = int(np.flatnonzero(bad)[0])
                raise LogError(log.path, key, f"{int(bad.sum())} non-finite value(s), first at step {s[i]:g} (strict)")
            warnings.append(f"dropped {int(bad.sum())} step(s) where {key} is NaN or inf")
        cols.append((s[~bad], v[~bad]))
    (hs, hv), (rs, rv) = cols
    steps, ih, ir = np.intersect1d(hs, rs, assume_unique=True, return_indices=True)
    if steps.size == 0:
        raise LogError(log.path, kh, f"no logged step carries both {kh} and {kr} with finite values: nothing to report")
    if steps.size >= MIN_POINTS:
        return None
    H, R = hv[ih], rv[ir]
    retention = float(H[-1] / H[0]) if steps.size > 1 and H[0] != 0 else None
    return ShortLog(str(log.path), log.format, {"entropy": kh, "reward": kr}, steps, H, R, retention, warnings)


@dataclass(frozen=True)
class MethodMetric:
    """One ``entflow/*`` metric of a log: the steps that logged it, its first and last value."""

    key: str
    n_steps: int
    first: float
    last: float


def method_metrics(log: LogData) -> list[MethodMetric]:
    """The ``entflow/*`` metrics of ``log`` (keys starting with ``entflow/`` or containing
    ``/entflow/``), sorted by key; a metric whose values are all NaN is left out."""
    out = []
    for key in sorted(log.keys()):
        if not (key.startswith("entflow/") or "/entflow/" in key):
            continue
        v = log.series[key][1]
        v = v[np.isfinite(v)]
        if v.size:
            out.append(MethodMetric(key, int(v.size), float(v[0]), float(v[-1])))
    return out
