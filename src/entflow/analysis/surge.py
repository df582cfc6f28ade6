"""Entropy surges: a sustained rise of the policy entropy after a stable phase, and which of the
curves verl's and TRL's users are asked for (clip fractions, response length, grad norm, learning
rate, rollout/trainer mismatch) moved first. Pure NumPy on arrays; :func:`triage_surges` is what
``entflow analyze`` calls (through :func:`entflow.analysis.collapse.analyze_log`); docs/analyze.md §2
("Entropy surges") defines every number.

**Detection** (:func:`find_surges`), on the entropy series ``H`` ``[n]`` at its logged steps, with
``B`` = ``stable`` and ``W`` = ``sustain`` logged steps (:func:`window_sizes`: 10 % and 3 % of them):

* ``S`` = running median of ``H`` over ``smooth`` (5) logged steps, centred, the end values repeated;
* a **stable window** is ``B`` consecutive points of ``H``: its median ``b``, its noise ``σ``
  (:func:`noise_scale`: the larger of ``1.4826·MAD(ΔH)/√2`` from its first differences and
  ``1.4826·MAD`` of its residuals from its least-squares line, which catches noise that wanders
  over several steps), its threshold
  ``h = max(k·σ, rel·|b|)`` (k = 6, rel = 0.1) and its trend (that line's slope);
* a **candidate** is an index ``i`` where ``S`` stays above ``b + h`` over ``[i, i+W)``, for the
  stable window ending at ``i`` or the one ending ``B/2`` points earlier (a slow rise already fills
  the first);
* its **start** is the first point after the last one in ``[i−B, i)`` where ``S`` was still within
  ``h/4`` of ``b``; the stable window is then taken again as the ``B`` points right before that
  start, and the start dated again with it (until it stays, at most 3 times);
* the candidate is a **surge** when its start has ``B`` logged points before it, ``S`` was back at
  that level somewhere in ``[i−B, i)`` (the rise took less than ``B`` steps), the rise
  ``min S[i:i+W] − b`` exceeds ``h`` for the final stable window, and that window's own trend,
  carried on to ``i``, accounts for less than a third of it (a steady rise is no surge; a declining
  entropy, as in a collapse, never rises above its own recent median by ``h``);
* its **end** is the first point after ``i + W`` where ``S`` fell back below ``b + h/2`` (None: up
  to the last step); its **peak** the largest ``S`` from the start to the end; its **level** the
  median of ``H`` over ``[i, i+W)``. Size: ``peak − b`` and ``peak / b − 1``.

The next surge is looked for only after a new stable window following the end of the last.

**Which curve moved first** (:func:`curve_departure`): each curve is measured against its own
median over the first half of the surge's stable window (``[start − B, start − B/2)`` in steps), with
its own noise σ and threshold ``max(k·σ, rel·|median|)``; it **departs** at the first of its logged
points from ``start − B/2`` (so up to ``B/2`` logged steps before the entropy) to ``start + B``
where its running median stays beyond the threshold, up or down, for ``W`` of its points; the
departure is dated back, like the entropy's start, to the first point after the last one within a
quarter of the threshold of its median. The first mover is the earliest departure, the entropy's
start included; departures within ``tie`` (2) logged steps of the earliest are a tie.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from entflow.analysis.arrays import finite_vector
from entflow.errors import AnalysisError
from entflow.files import json_safe

__all__ = [
    "CURVES",
    "K_NOISE",
    "MIN_REL",
    "SMOOTH",
    "TIE",
    "CurveMove",
    "Surge",
    "SurgeTriage",
    "curve_departure",
    "find_surges",
    "noise_scale",
    "running_median",
    "surge_lines",
    "triage_surges",
    "window_sizes",
]

# the curves a surge is triaged with, in the order they are listed: role of log_keys.KEY_TABLE -> label
CURVES: dict[str, str] = {
    "clip_high": "clip fraction, high bound",
    "clip_low": "clip fraction, low bound",
    "clip": "clip fraction, either bound",
    "clip_dual": "dual-clip fraction",
    "response_length": "response length",
    "grad_norm": "grad norm",
    "lr": "learning rate",
    "mismatch": "rollout/trainer mismatch",
}

K_NOISE = 6.0  # the threshold in noise scales (σ of the stable window)
MIN_REL = 0.1  # ... and at least this share of the stable window's median
SMOOTH = 5  # running-median width, logged steps
TIE = 2  # departures within this many logged steps of the earliest are a tie
STABLE_FRAC, STABLE_MIN, STABLE_MAX = 0.1, 20, 200  # the stable window B: 10 % of the logged steps
SUSTAIN_FRAC, SUSTAIN_MIN, SUSTAIN_MAX = 0.03, 5, 50  # how long a rise must last W: 3 % of them
MIN_BASELINE = 4  # fewest points of a curve in its baseline window
_FLOOR = 1e-9  # the smallest threshold (a series exactly constant in its stable window)
_MAD = 1.4826  # MAD → σ of a normal distribution


def window_sizes(n: int, stable: int | None = None, sustain: int | None = None) -> tuple[int, int]:
    """``(B, W)``: the stable window and the sustain length in logged steps for a series of ``n``:
    ``B = clip(round(0.1·n), 20, 200)``, ``W = clip(round(0.03·n), 5, 50)`` unless given."""
    B = stable if stable is not None else int(np.clip(round(STABLE_FRAC * n), STABLE_MIN, STABLE_MAX))
    W = sustain if sustain is not None else int(np.clip(round(SUSTAIN_FRAC * n), SUSTAIN_MIN, SUSTAIN_MAX))
    if B < MIN_BASELINE or W < 1:
        raise AnalysisError("stable", f"needs stable >= {MIN_BASELINE} and sustain >= 1, got {B} and {W}")
    return B, W


def running_median(x: Any, width: int = SMOOTH) -> np.ndarray:
    """The centred running median of ``x`` over ``width`` (odd) points, the end values repeated."""
    a = np.asarray(x, dtype=np.float64)
    if width <= 1 or a.size == 0:
        return a.copy()
    half = width // 2
    padded = np.concatenate([np.full(half, a[0]), a, np.full(half, a[-1])])
    return np.median(sliding_window_view(padded, 2 * half + 1), axis=1)


def _window_noise(win: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`noise_scale` of each row of ``win`` ``[m, B]``, and its least-squares slope per index."""
    B = win.shape[1]
    d = np.diff(win, axis=1)
    white = _MAD * np.median(np.abs(d - np.median(d, axis=1)[:, None]), axis=1) / math.sqrt(2)
    xc = np.arange(B) - (B - 1) / 2
    slope = win @ xc / float(xc @ xc)
    resid = win - win.mean(axis=1)[:, None] - slope[:, None] * xc
    wander = _MAD * np.median(np.abs(resid - np.median(resid, axis=1)[:, None]), axis=1)
    return np.maximum(white, wander), slope


def noise_scale(x: Any) -> float:
    """The noise σ of ``x``: the larger of ``1.4826·MAD(Δx)/√2`` (from its first differences: the
    step-to-step noise, whatever the trend) and ``1.4826·MAD`` of its residuals from its
    least-squares line (noise that wanders over several steps, which differences miss; a jump in
    ``x`` raises it: it errs towards a larger threshold); 0 for fewer than 3 points."""
    a = np.asarray(x, dtype=np.float64)
    if a.size < 3:
        return 0.0
    return float(_window_noise(a[None, :])[0][0])


def _threshold(b: float, sigma: float, k: float, rel: float) -> float:
    return max(k * sigma, rel * abs(b), _FLOOR)


@dataclass(frozen=True)
class CurveMove:
    """When one curve departed from its pre-surge baseline (:func:`curve_departure`).

    ``status``: ``moved``, ``did not move`` (not beyond its threshold for ``W`` points within the
    search range), ``no baseline`` (fewer than 4 points logged in its baseline window) or
    ``not in the log``. ``step`` the departure step, ``lead`` = ``step`` − the entropy's start
    (negative: before it), ``censored`` when it departed at the first point searched (it may have
    moved earlier), ``direction`` ``up`` / ``down``, ``baseline`` its median and ``after`` its
    median over the ``W`` points from the departure.
    """

    role: str
    label: str
    key: str | None
    status: str
    step: float | None = None
    lead: float | None = None
    censored: bool = False
    direction: str | None = None
    baseline: float = math.nan
    noise: float = math.nan
    threshold: float = math.nan
    after: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class Surge:
    """One entropy surge (:func:`find_surges`): indices into the series, steps, the stable window
    before it and its size. ``end_step`` is None when the entropy is still up at the last step.
    :func:`triage_surges` adds the curves' departures (``moves``), the roles that moved first
    (``first``) and the steps where departures were looked for (``search_from_step`` to
    ``search_to_step``; a curve's baseline is ``baseline_from_step`` to ``search_from_step``)."""

    start_index: int
    confirm_index: int
    end_index: int | None
    start_step: float
    confirm_step: float
    end_step: float | None
    baseline_from_step: float
    baseline_to_step: float
    n_baseline: int
    before: float
    noise: float
    threshold: float
    peak: float
    peak_step: float
    level: float
    moves: tuple[CurveMove, ...] = ()
    first: tuple[str, ...] = ()
    search_from_step: float | None = None
    search_to_step: float | None = None

    @property
    def rise(self) -> float:
        """``peak − before``."""
        return self.peak - self.before

    @property
    def rel_rise(self) -> float:
        """``peak / before − 1`` (NaN when ``before`` <= 0)."""
        return self.peak / self.before - 1 if self.before > 0 else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_step": self.start_step,
            "confirm_step": self.confirm_step,
            "end_step": self.end_step,
            "baseline": {
                "from_step": self.baseline_from_step,
                "to_step": self.baseline_to_step,
                "n": self.n_baseline,
                "median": self.before,
                "noise": self.noise,
                "threshold": self.threshold,
            },
            "before": self.before,
            "peak": self.peak,
            "peak_step": self.peak_step,
            "level": self.level,
            "rise": self.rise,
            "rel_rise": self.rel_rise,
            "curves": {
                "baseline": [self.baseline_from_step, self.search_from_step],
                "search": [self.search_from_step, self.search_to_step],
                "moves": [m.to_dict() for m in self.moves],
            },
            "first": list(self.first),
        }


@dataclass(frozen=True)
class SurgeTriage:
    """Every surge of one entropy series with its curves (:func:`triage_surges`); ``settings`` holds
    the detector's parameters; :meth:`to_dict` is ``analysis.json``'s ``surge``."""

    entropy_key: str
    surges: tuple[Surge, ...]
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return json_safe(
            {"entropy_key": self.entropy_key, "settings": self.settings, "surges": [s.to_dict() for s in self.surges]}
        )


def _date_back(S: np.ndarray, i: int, level: float, lo: int, above: bool) -> int:
    """The first index after the last one in ``[lo, i)`` where ``S`` was still on the baseline side
    of ``level`` (``lo`` when it never was)."""
    seg = S[lo:i]
    back = np.flatnonzero(seg <= level if above else seg >= level)
    return lo + int(back[-1]) + 1 if back.size else lo


def find_surges(
    steps: Any,
    entropy: Any,
    *,
    stable: int | None = None,
    sustain: int | None = None,
    k: float = K_NOISE,
    rel: float = MIN_REL,
    smooth: int = SMOOTH,
) -> list[Surge]:
    """Every entropy surge of one series (see the module docstring for the definition).

    Args:
        steps: ``[n]`` logged steps, increasing.
        entropy: ``[n]`` entropy at those steps, finite.
        stable: ``B``, the stable window in logged steps (default :func:`window_sizes`).
        sustain: ``W``, how many logged steps the rise must last.
        k: the threshold in noise scales; ``rel``: at least this share of the stable median.
        smooth: the running median's width.

    Returns:
        The surges in step order, without their curves (:func:`triage_surges` adds them).
    """
    s = finite_vector(steps, "steps")
    H = finite_vector(entropy, "entropy", s.size)
    n = H.size
    B, W = window_sizes(n, stable, sustain)
    if n < B + W:
        return []
    S = running_median(H, smooth)
    win = sliding_window_view(H, B)  # win[j] = H[j:j+B]: the stable window of index i = j + B
    med = np.median(win, axis=1)
    sig, slope = _window_noise(win)
    h = np.maximum(np.maximum(k * sig, rel * np.abs(med)), _FLOOR)
    low = sliding_window_view(S, W).min(axis=1)  # low[i] = min S[i:i+W]
    # candidates: S above a stable window ending at i, or B/2 earlier (a slow rise is in the first)
    G = B // 2
    idx = np.arange(B, n - W + 1)
    near = low[idx] > med[idx - B] + h[idx - B]
    gapped = np.zeros_like(near)
    far = idx - B - G >= 0
    gapped[far] = low[idx[far]] > med[idx[far] - B - G] + h[idx[far] - B - G]

    surges: list[Surge] = []
    i_from = B
    for i, is_near in zip(idx[near | gapped].tolist(), near[near | gapped].tolist(), strict=True):
        if i < i_from:
            continue
        base_from = i - B if is_near else i - B - G
        start = _date_back(S, i, med[base_from] + h[base_from] / 4, i - B, True)
        for _ in range(3):  # the stable window right before the start, and the start dated with it
            if start < B or start - B == base_from:
                break
            base_from = start - B
            start = _date_back(S, i, med[base_from] + h[base_from] / 4, i - B, True)
        b, sigma, thr = float(med[base_from]), float(sig[base_from]), float(h[base_from])
        # a surge follows a stable phase (B logged steps before its start) that it leaves within B
        # steps, and rises above it by the threshold, at least twice what the stable window's own
        # trend, carried on to the confirmation, accounts for (a steady rise is no surge)
        if start < B or start == i - B:
            continue
        rise = float(low[i]) - b
        trend = float(slope[base_from]) * (i - (base_from + (B - 1) / 2))
        if rise <= thr or trend >= rise / 3:
            continue
        after = np.flatnonzero(S[i + W :] < b + thr / 2)
        end = int(i + W + after[0]) if after.size else None
        seg = S[start : end if end is not None else n]
        p = start + int(np.argmax(seg))
        surges.append(
            Surge(
                start_index=start,
                confirm_index=i,
                end_index=end,
                start_step=float(s[start]),
                confirm_step=float(s[i]),
                end_step=float(s[end]) if end is not None else None,
                baseline_from_step=float(s[base_from]),
                baseline_to_step=float(s[base_from + B - 1]),
                n_baseline=B,
                before=b,
                noise=sigma,
                threshold=thr,
                peak=float(S[p]),
                peak_step=float(s[p]),
                level=float(np.median(H[i : i + W])),
            )
        )
        if end is None:
            break
        i_from = end + B
    return surges


def curve_departure(
    role: str,
    key: str | None,
    steps: Any,
    values: Any,
    *,
    baseline: tuple[float, float],
    search: tuple[float, float],
    reference: float,
    sustain: int,
    k: float = K_NOISE,
    rel: float = MIN_REL,
    smooth: int = SMOOTH,
) -> CurveMove:
    """When one curve departed from its baseline (module docstring, "Which curve moved first").

    Args:
        role, key: the curve's role (:data:`CURVES`) and log key.
        steps, values: its logged steps and values (non-finite values are left out).
        baseline: ``[from, to)`` steps of its baseline window.
        search: ``[from, to]`` steps where a departure is looked for (``from`` >= the baseline's end).
        reference: the entropy's start step (``lead`` = departure − it).
        sustain: ``W``, how many of its points it must stay beyond the threshold.
    """
    label = CURVES.get(role, role)
    s = np.asarray(steps, dtype=np.float64)
    x = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(s)
    s, x = s[keep], x[keep]
    in_base = (s >= baseline[0]) & (s < baseline[1])
    if int(in_base.sum()) < MIN_BASELINE:
        return CurveMove(role, label, key, "no baseline")
    b = float(np.median(x[in_base]))
    sigma = noise_scale(x[in_base])
    thr = _threshold(b, sigma, k, rel)
    S = running_median(x, smooth)
    dev = S - b
    m = max(1, min(sustain, s.size))
    common = {"baseline": b, "noise": sigma, "threshold": thr}
    if s.size < m:
        return CurveMove(role, label, key, "did not move", **common)
    up = sliding_window_view(dev > thr, m).all(axis=1)
    down = sliding_window_view(dev < -thr, m).all(axis=1)
    t_idx = np.arange(up.size)
    cand = t_idx[(s[: up.size] >= search[0]) & (s[: up.size] <= search[1]) & (up | down)]
    if not cand.size:
        return CurveMove(role, label, key, "did not move", **common)
    t = int(cand[0])
    is_up = bool(up[t])
    first_searched = int(np.searchsorted(s, search[0], side="left"))
    level = b + thr / 4 if is_up else b - thr / 4
    t = _date_back(S, t, level, first_searched, is_up)
    return CurveMove(
        role,
        label,
        key,
        "moved",
        step=float(s[t]),
        lead=float(s[t] - reference),
        censored=t == first_searched,
        direction="up" if is_up else "down",
        after=float(np.median(x[t : t + m])),
        **common,
    )


_TRIAGE_FIELDS = ("moves", "first", "search_from_step", "search_to_step")


def triage_surges(
    steps: Any,
    entropy: Any,
    curves: Mapping[str, tuple[str | None, Any, Any] | None] | None = None,
    *,
    entropy_key: str = "entropy",
    stable: int | None = None,
    sustain: int | None = None,
    k: float = K_NOISE,
    rel: float = MIN_REL,
    smooth: int = SMOOTH,
    tie: int = TIE,
) -> SurgeTriage:
    """:func:`find_surges`, then for each surge when each curve departed and which moved first.

    Args:
        steps, entropy: the entropy series (``[n]`` each).
        curves: ``{role: (key, steps, values)}`` (None: not in the log), the roles of :data:`CURVES`;
            curves given with the same key as an earlier one are left out.
        entropy_key: the entropy's log key (shown).
        tie: departures within this many logged steps (times the median step spacing) of the
            earliest are a tie.

    Returns:
        :class:`SurgeTriage`; each :class:`Surge` carries ``moves`` (one per role, in the order of
        ``curves``) and ``first`` (the roles that moved first, ``"entropy"`` included, in step order).
    """
    s = finite_vector(steps, "steps")
    n = s.size
    B, W = window_sizes(max(n, 1), stable, sustain)
    settings = {
        "stable": B,
        "sustain": W,
        "k": k,
        "rel": rel,
        "smooth": smooth,
        "tie": tie,
        "n_steps": n,
    }
    surges = find_surges(s, entropy, stable=B, sustain=W, k=k, rel=rel, smooth=smooth)
    spacing = float(np.median(np.diff(s))) if n > 1 else 1.0
    out = []
    for sg in surges:
        half = sg.start_index - B // 2
        base = (sg.baseline_from_step, float(s[max(half, 0)]))
        search = (float(s[max(half, 0)]), float(s[min(sg.start_index + B, n - 1)]))
        moves: list[CurveMove] = []
        seen: set[str] = set()
        for role, curve in (curves or {}).items():
            if curve is None or curve[0] is None:
                moves.append(CurveMove(role, CURVES.get(role, role), None, "not in the log"))
                continue
            key, cs, cv = curve
            if key in seen:
                continue
            seen.add(key)
            moves.append(
                curve_departure(
                    role,
                    key,
                    cs,
                    cv,
                    baseline=base,
                    search=search,
                    reference=sg.start_step,
                    sustain=W,
                    k=k,
                    rel=rel,
                    smooth=smooth,
                )
            )
        when = [("entropy", sg.start_step)] + [(m.role, m.step) for m in moves if m.status == "moved"]
        earliest = min(t for _, t in when)
        first = tuple(r for r, t in sorted(when, key=lambda rt: rt[1]) if t <= earliest + tie * spacing)
        out.append(
            Surge(
                **{f: getattr(sg, f) for f in sg.__dataclass_fields__ if f not in _TRIAGE_FIELDS},
                moves=tuple(moves),
                first=first,
                search_from_step=search[0],
                search_to_step=search[1],
            )
        )
    return SurgeTriage(entropy_key, tuple(out), settings)


def _g(v: float | None) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v:.4g}"


def _step(v: float | None) -> str:
    return "—" if v is None else f"{v:g}"


def _first_sentence(sg: Surge, labels: dict[str, str], tie: int) -> str:
    by_role = {m.role: m for m in sg.moves}
    if sg.first == ("entropy",):
        moved = [m for m in sg.moves if m.status == "moved"]
        return "moved first: the entropy itself" + (
            "; every logged curve that moved did so after it" if moved else "; no logged curve moved"
        )
    if len(sg.first) == 1:
        m = by_role[sg.first[0]]
        before = "at least " if m.censored else ""
        return (
            f"moved first: {labels[m.role]} ({m.key}), {m.direction} at step {_step(m.step)}, "
            f"{before}{-m.lead:g} steps before the entropy"
        )
    names = ["the entropy" if r == "entropy" else f"{labels[r]} (step {_step(by_role[r].step)})" for r in sg.first]
    return f"moved first: a tie (within {tie} logged steps): " + ", ".join(names)


def surge_lines(triage: SurgeTriage) -> list[str]:
    """What the terminal and ``report.html`` show: per surge its start and size, its stable window
    and the rule, which curve moved first, then one row per curve: where it departed from its
    baseline (the logged step, and the steps before (−) or after (+) the entropy's start; ``≤``: at
    the first step searched, it may have moved earlier), its baseline and the median after, and its
    key; or that it did not move (with its threshold), had no baseline, or is not in the log. One
    line when there is no surge."""
    st = triage.settings
    if not triage.surges:
        return [
            f"entropy surge: none (no rise above the median + max({st['k']:g} σ, {st['rel']:.0%} of it) of "
            f"{st['stable']} stable logged steps, held for {st['sustain']})"
        ]
    labels = dict(CURVES)
    out = []
    for no, sg in enumerate(triage.surges, 1):
        head = "entropy surge" + (f" {no} of {len(triage.surges)}" if len(triage.surges) > 1 else "")
        until = "up to the last step" if sg.end_step is None else f"back near the baseline at {_step(sg.end_step)}"
        rel = f", {sg.rel_rise:+.0%}" if math.isfinite(sg.rel_rise) else ""
        out += [
            f"{head} from step {_step(sg.start_step)} (confirmed by {_step(sg.confirm_step)}, {until}; "
            "the verdict judges collapse only)",
            f"  {triage.entropy_key} {_g(sg.before)} → peak {_g(sg.peak)} at step {_step(sg.peak_step)}: "
            f"{sg.rise:+.4g}{rel}",
            f"  stable window: steps {_step(sg.baseline_from_step)}–{_step(sg.baseline_to_step)} "
            f"({sg.n_baseline} logged), median {_g(sg.before)}, noise σ {_g(sg.noise)}",
            f"  threshold: median +{_g(sg.threshold)} = max({st['k']:g} σ, {st['rel']:.0%} of the median), "
            f"held for {st['sustain']} logged steps",
            "  " + _first_sentence(sg, labels, st["tie"]),
        ]
        rows = [("curve", "departs", "vs entropy", "baseline → after", "key")]
        rows.append(("entropy", _step(sg.start_step), "0", f"{_g(sg.before)} → {_g(sg.level)} up", triage.entropy_key))
        for m in sg.moves:
            if m.status == "moved":
                lead = ("≤ " if m.censored else "") + f"{m.lead:+g}"
                change = f"{_g(m.baseline)} → {_g(m.after)} {m.direction}"
                rows.append((m.label, _step(m.step), lead, change, m.key or ""))
            elif m.status == "did not move":
                rows.append((m.label, "—", "", f"{_g(m.baseline)}, did not move (±{_g(m.threshold)})", m.key or ""))
            else:
                rows.append((m.label, "—", "", m.status, m.key or ""))
        w = [max(len(r[c]) for r in rows) for c in range(4)]
        for label, when, lead, change, key in rows:
            line = f"    {label:<{w[0]}}  {when:>{w[1]}}  {lead:>{w[2]}}  {change:<{w[3]}}  {key}"
            out.append(line.rstrip())
    return out
