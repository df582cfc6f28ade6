"""Synthetic runs whose entropy surges with a known cause (tests/analysis/test_surge.py, the docs'
example log of docs/analyze.md "Entropy surges", benchmarks/analyze_surge.py).

A case is a run of ``n`` steps: the entropy declines from ``h_start`` towards ``h_level`` (a
collapse's shape, time constant n/8) with normal noise of ``noise × h_level``, then from step
``t0`` rises by ``size × h_level`` along a linear ramp of ``ramp`` steps and stays up. The curves
verl's maintainers ask for are logged next to it with their own noise; the ``leader`` curve departs
``lead`` steps before ``t0`` (with the same ramp), the ``followers`` ``lag`` steps after it, the
others stay flat; the ``omit`` roles are not logged. ``leader="entropy"``: no curve moves before
the entropy. The keys are verl's (``actor/entflow/clip/*``: entflow's loss inside verl, which logs
the two clip bounds apart).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# role -> (verl key, baseline, noise, how it moves: ("add", Δ) or ("mul", ×))
VERL_CURVES: dict[str, tuple[str, float, float, tuple[str, float]]] = {
    "clip_high": ("actor/entflow/clip/frac_high", 0.002, 0.0004, ("add", 0.015)),
    "clip_low": ("actor/entflow/clip/frac_low", 0.0008, 0.0002, ("add", 0.004)),
    "clip": ("actor/pg_clipfrac", 0.003, 0.0005, ("add", 0.02)),
    "clip_dual": ("actor/pg_clipfrac_lower", 0.0002, 0.0001, ("add", 0.002)),
    "response_length": ("response_length/mean", 450.0, 12.0, ("add", 250.0)),
    "grad_norm": ("actor/grad_norm", 0.25, 0.08, ("mul", 3.0)),  # noise: log-normal σ
    "lr": ("actor/lr", 1e-6, 0.0, ("mul", 5.0)),
    "mismatch": ("rollout_corr/k3_kl", 0.001, 0.0002, ("add", 0.01)),
}


@dataclass(frozen=True)
class SurgeCase:
    """One synthetic run (see the module docstring); ``seed`` draws every noise."""

    seed: int
    n: int = 300
    t0: int = 150
    size: float = 1.0
    ramp: int = 1
    noise: float = 0.02
    leader: str = "clip_high"
    lead: int = 10
    followers: tuple[str, ...] = ("response_length",)
    lag: int = 4
    h_start: float = 1.2
    h_level: float = 0.45
    reward: bool = True
    omit: tuple[str, ...] = ()  # roles not logged

    def series(self) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """(steps [n], entropy [n], {role: values [n]}) of the run."""
        rng = np.random.default_rng(self.seed)
        steps = np.arange(1, self.n + 1, dtype=np.float64)

        def ramp(at: int) -> np.ndarray:
            return np.clip((steps - at) / max(self.ramp, 1), 0.0, 1.0) * (steps >= at)

        decline = self.h_level + (self.h_start - self.h_level) * np.exp(-steps / (self.n / 8))
        H = decline + rng.normal(0, self.noise * self.h_level, self.n) + self.size * self.h_level * ramp(self.t0)
        curves = {}
        for role, (_, base, sd, (how, by)) in VERL_CURVES.items():
            if role in self.omit:
                continue
            if role == self.leader:
                r = ramp(self.t0 - self.lead)
            elif role in self.followers:
                r = ramp(self.t0 + self.lag)
            else:
                r = np.zeros(self.n)
            if role == "grad_norm":
                x = base * np.exp(rng.normal(0, sd, self.n))
            else:
                x = base + rng.normal(0, sd, self.n) if sd else np.full(self.n, base)
            x = x * (1 + (by - 1) * r) if how == "mul" else x + by * r
            curves[role] = np.abs(x) if role != "lr" else x
        return steps, H, curves

    def verl_records(self) -> list[tuple[int, dict[str, float]]]:
        """One ``(step, metrics)`` per step with verl's keys (the reward follows the law of
        support.log_writers, flat once the entropy has settled)."""
        steps, H, curves = self.series()
        rng = np.random.default_rng(self.seed + 10_000)
        R = 0.6 - 0.1 * np.exp(np.minimum(H, 1.3)) + rng.normal(0, 0.01, self.n)
        out = []
        for i, s in enumerate(steps.astype(int).tolist()):
            m = {"actor/entropy": float(H[i])}
            if self.reward:
                m["critic/score/mean"] = float(R[i])
            m.update({VERL_CURVES[role][0]: float(v[i]) for role, v in curves.items()})
            out.append((s, m))
        return out


def write_verl_jsonl(path: Path, case: SurgeCase, *, tracking: bool = True) -> Path:
    """The case as verl's ``file`` logger writes it: through verl's own ``Tracking`` when
    ``tracking`` (verl installed), else the same ``{"step": s, "data": {...}}`` lines by hand."""
    path.parent.mkdir(parents=True, exist_ok=True)
    records = case.verl_records()
    if not tracking:
        path.write_text("".join(json.dumps({"step": s, "data": m}) + "\n" for s, m in records))
        return path
    import os

    from verl.utils.tracking import Tracking

    old = os.environ.get("VERL_FILE_LOGGER_PATH")
    os.environ["VERL_FILE_LOGGER_PATH"] = str(path)
    try:
        t = Tracking("entflow-test", "surge", default_backend=["file"])
        for s, m in records:
            t.log(data=m, step=s)
        t.finish()
    finally:
        if old is None:
            os.environ.pop("VERL_FILE_LOGGER_PATH", None)
        else:
            os.environ["VERL_FILE_LOGGER_PATH"] = old
    return path


# the ten cases of tests/analysis/test_surge.py: seeds, lengths, noise levels, surge sizes, ramps
# and which curve leads (the entropy itself in one)
CASES: tuple[SurgeCase, ...] = tuple(
    SurgeCase(*row)
    for row in (
        # seed, n, t0, size, ramp, noise, leader, lead, followers, lag
        (1, 300, 150, 1.0, 1, 0.02, "clip_high", 10, ("response_length",), 4),
        (2, 300, 180, 0.6, 10, 0.03, "response_length", 12, ("clip_high", "grad_norm"), 4),
        (3, 200, 110, 1.5, 5, 0.015, "grad_norm", 8, ("response_length", "clip"), 4),
        (4, 400, 220, 0.8, 15, 0.04, "mismatch", 12, ("clip_high",), 4),
        (5, 300, 200, 0.5, 20, 0.05, "clip_high", 8, ("response_length", "grad_norm"), 6),
        (6, 250, 140, 2.0, 3, 0.02, "lr", 10, ("grad_norm", "clip_high"), 4),
        (7, 300, 160, 1.0, 6, 0.03, "entropy", 0, ("response_length", "clip_high", "grad_norm"), 8),
        (8, 300, 170, 0.4, 8, 0.02, "response_length", 14, ("clip",), 4),
        (9, 500, 300, 1.2, 25, 0.04, "grad_norm", 15, ("clip_high", "response_length"), 4),
        (10, 500, 260, 0.7, 12, 0.03, "clip_high", 10, ("mismatch",), 5),
    )
)

# the example of docs/analyze.md: a verl log with verl's own keys only (no entflow loss: the clip
# fraction is verl's actor/pg_clipfrac, either bound), whose clip fraction rises before the entropy
DOCS_CASE = SurgeCase(
    *(2738, 300, 170, 1.2, 6, 0.03, "clip", 12, ("response_length", "grad_norm"), 4),  # as CASES
    omit=("clip_high", "clip_low"),
)
