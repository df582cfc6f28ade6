"""What one doctor check reports, and the error measures every check uses.

A check compares entflow's result on the user's device with an independent float64 reference
computed in the same process and passes when the largest error is within a tolerance fixed per
dtype (docs/gpu.md lists them). A check that raises is reported as failed, never as passed.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch


@dataclass
class CheckResult:
    """One line of ``entflow doctor``.

    Attributes:
        name: what was checked, e.g. ``"token_stats[cpu,float32,chunked]"``.
        ok: False when the check failed (or raised); True when it passed or was skipped.
        detail: the measured error against its tolerance, or what went wrong.
        seconds: wall time the check took.
        skipped_reason: why the check did not run (e.g. ``"triton not installed"``), else None.
        error: the largest error measured (None when skipped or not a comparison).
        tolerance: the bound ``error`` had to stay within.
        measurements: further numbers (times, memory, ratios) for ``--json``.
    """

    name: str
    ok: bool
    detail: str = ""
    seconds: float = 0.0
    skipped_reason: str | None = None
    error: float | None = None
    tolerance: float | None = None
    measurements: dict[str, float] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """``"PASS"``, ``"FAIL"`` or ``"SKIP"``."""
        if self.skipped_reason is not None:
            return "SKIP"
        return "PASS" if self.ok else "FAIL"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types; a non-finite number becomes its string (``"inf"``, ``"nan"``)."""

        def plain(v: Any) -> Any:
            if isinstance(v, float) and not math.isfinite(v):
                return str(v)
            if isinstance(v, dict):
                return {k: plain(x) for k, x in v.items()}
            return v

        return {k: plain(v) for k, v in asdict(self).items()} | {"status": self.status}


def skipped(name: str, reason: str) -> CheckResult:
    """A check that did not run, saying why."""
    return CheckResult(name, True, f"skipped: {reason}", 0.0, reason)


def compared(name: str, error: float, tolerance: float, what: str = "max error", **measurements: float) -> CheckResult:
    """Pass iff ``error <= tolerance`` (a NaN error fails)."""
    ok = bool(error <= tolerance)  # NaN compares False
    detail = f"{what} {error:.2e} {'<=' if ok else '>'} tol {tolerance:.0e}"
    return CheckResult(name, ok, detail, error=float(error), tolerance=float(tolerance), measurements=measurements)


def timed(name: str, check: Callable[[], CheckResult | list[CheckResult]]) -> list[CheckResult]:
    """Run ``check``; time it; turn an exception into a failed result naming it."""
    t0 = time.perf_counter()
    try:
        out = check()
        results = out if isinstance(out, list) else [out]
    except Exception as e:  # a check that crashes has failed: report it, keep going
        tb = traceback.extract_tb(e.__traceback__)
        where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
        results = [CheckResult(name, False, f"raised {type(e).__name__}: {e}{where}")]
    seconds = time.perf_counter() - t0
    for r in results:
        if not r.seconds:
            r.seconds = seconds / len(results)
    return results


def max_scaled_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """``max |got − ref| / max(1, |ref|)`` elementwise, in float64 on the CPU (NaN/inf → inf).

    For quantities of order one or more (log-probs, entropies, losses): relative for large
    values, absolute for small ones."""
    g, r = got.detach().to("cpu", torch.float64), ref.detach().to("cpu", torch.float64)
    if g.shape != r.shape:
        raise ValueError(f"shape {tuple(g.shape)} != reference shape {tuple(r.shape)}")
    if g.numel() == 0:
        return 0.0
    if not bool(torch.isfinite(g).all()):
        return float("inf")
    return float(((g - r).abs() / r.abs().clamp(min=1.0)).max())


def max_relative_to_peak(got: torch.Tensor, ref: torch.Tensor) -> float:
    """``max |got − ref| / max |ref|`` in float64 on the CPU (NaN/inf → inf): for gradients,
    whose entries are small and whose scale is the largest entry."""
    g, r = got.detach().to("cpu", torch.float64), ref.detach().to("cpu", torch.float64)
    if g.shape != r.shape:
        raise ValueError(f"shape {tuple(g.shape)} != reference shape {tuple(r.shape)}")
    if not bool(torch.isfinite(g).all()):
        return float("inf")
    peak = float(r.abs().max()) if r.numel() else 0.0
    return float((g - r).abs().max()) / max(peak, 1e-30) if r.numel() else 0.0
