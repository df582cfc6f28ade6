"""Verdicts that decide: a smallest effect of interest, a group-sequential rule over fresh seeds,
and the power plan that sets each claim's seeds (docs/reproduction.md, "Decisions").

A claim says a number lies on one side of a bound b (:attr:`Claim.rule`, :attr:`Claim.bound`). On
its claimed side write each seed's value as the margin ``m = s·(x − b)`` (s = +1 for a claim of the
higher side, −1 for the lower), so the claim is E[m] > 0. Its smallest effect of interest δ > 0 is
the least margin that would matter. After n seeds, with mean m̄, sample std s_m and the one-sided
Student-t quantile t = t_{1−α', n−1} at the look's nominal level α':

- **reproduced** when m̄ − t·s_m/√n > 0: the interval clears the bound;
- **not reproduced** when m̄ + t·s_m/√n < δ: the interval excludes a margin of δ (an equivalence
  test, TOST-style; an interval entirely on the wrong side is the extreme case);
- otherwise the claim **continues** to its next look; at its last look (its declared maximum) it
  is **inconclusive**. A claim whose planned seeds exceed the budget's maximum is declared
  **not decidable at this budget** before any of its runs, and never run.

Reproduced is checked first: an interval inside (0, δ) shows an effect, smaller than δ (the row
says so). Both rules use the same α' at every look: **Pocock's boundary** (Pocock 1977,
Biometrika 64:191–199), the constant nominal level whose family-wise one-sided error over the
declared looks is α. For the t statistic of the first n_1 < … < n_K seeds it is solved exactly as
the α-quantile of min_k p_k under the null (:func:`pocock_level`, by simulation with a fixed seed),
so α' depends only on the look sizes. By symmetry the same α' holds the error of "not reproduced"
at an effect of δ to α.

A family (Holm) is tested group-sequentially by the Holm procedure of Maurer & Bretz (2013,
Stat. Biopharm. Res. 5:311–320): every open member at level α/(m − r) after r of the family's m
members are reproduced, re-solved at each look until no new member is reproduced.

The power plan (:func:`plan_claim`) picks, for a noise σ of the margin estimated from earlier draws,
the fewest looks (a prefix of :data:`LADDER`) whose simulated chance of "reproduced" at m = δ is at least
the target power (80 %); a maximum above the budget's makes the claim not decidable at this budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "ALPHA",
    "CONTINUE",
    "INCONCLUSIVE",
    "LADDER",
    "NOT_DECIDABLE",
    "NOT_REPRODUCED",
    "POWER",
    "REPRODUCED",
    "SIMULATIONS",
    "VERDICTS",
    "Design",
    "LookResult",
    "family_decisions",
    "look_decision",
    "margins",
    "plan_claim",
    "pocock_level",
    "sequential_decision",
    "simulate",
]

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"  # only at the declared maximum
CONTINUE = "continue"  # between looks: more seeds are due
NOT_DECIDABLE = "not decidable at this budget"  # declared before running; never run
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, CONTINUE, NOT_DECIDABLE)

ALPHA = 0.025  # one-sided family-wise error of each side, over the looks (the 95 % interval's side)
POWER = 0.80  # the chance of "reproduced" at an effect of δ that the plan aims for
SIMULATIONS = 200_000  # null series behind Pocock's level (its Monte Carlo error: ~3e-4 on α)
_SEED = 20261207  # the simulations' seed: the same α' and power on every machine
# the seed counts at which a series may be looked at: a design's looks are a prefix of it. Looks every
# 3 seeds while a claim is cheap to decide, then sparser (each look lowers Pocock's level for all)
LADDER = (3, 6, 9, 12, 18, 24, 30, 40, 50, 60, 80, 100)


def margins(values: Sequence[float | None], rule: str, bound: float) -> np.ndarray:
    """The finite per-seed ``values`` as margins on the claimed side, ``[n]``: s·(x − b), s = +1 for
    ``greater`` / ``at_least``, −1 for ``less`` / ``at_most`` (b = 0 for greater / less)."""
    if rule not in ("greater", "less", "at_least", "at_most"):
        raise ValueError(f"unknown rule {rule!r}")
    b = 0.0 if rule in ("greater", "less") else float(bound)
    sign = 1.0 if rule in ("greater", "at_least") else -1.0
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    return sign * (x - b)


@dataclass(frozen=True)
class Design:
    """A claim's sequential design: the seed counts at which it is looked at (the last is its
    maximum), the family-wise one-sided error ``alpha`` over them, and the resulting Pocock level."""

    looks: tuple[int, ...]
    alpha: float = ALPHA

    def __post_init__(self) -> None:
        if not self.looks or any(n < 3 for n in self.looks) or list(self.looks) != sorted(set(self.looks)):
            raise ValueError(f"looks must be increasing seed counts of at least 3, got {self.looks}")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha must be in (0, 0.5), got {self.alpha}")

    @property
    def maximum(self) -> int:
        return self.looks[-1]

    @property
    def level(self) -> float:
        """Pocock's nominal one-sided level α' at every look (:func:`pocock_level`)."""
        return pocock_level(self.looks, self.alpha)


def _null_min_p(looks: tuple[int, ...], sims: int, seed: int) -> np.ndarray:
    """min over the looks of the one-sided p-value of the t statistic, for ``sims`` null series ``[sims]``."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    z = rng.standard_normal((sims, looks[-1]))
    out = np.ones(sims)
    for n in looks:
        x = z[:, :n]
        t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(n))
        out = np.minimum(out, stats.t.sf(t, n - 1))
    return out


_LEVELS: dict[tuple[tuple[int, ...], float, int], float] = {}


def pocock_level(looks: Sequence[int], alpha: float = ALPHA, sims: int = SIMULATIONS) -> float:
    """Pocock's constant nominal one-sided level α' for looks after ``looks`` seeds: the α-quantile
    of min_k p_k, p_k = P(T_{n_k−1} ≥ t_k) the one-sided p-value of the t statistic of the first n_k
    null draws, so that P(some look has p_k ≤ α') = α. One look: α itself. Cached."""
    looks = tuple(int(n) for n in looks)
    if len(looks) == 1:
        return float(alpha)
    key = (looks, float(alpha), int(sims))
    if key not in _LEVELS:
        _LEVELS[key] = float(np.quantile(_null_min_p(looks, sims, _SEED), alpha, method="lower"))
    return _LEVELS[key]


@dataclass(frozen=True)
class LookResult:
    """One look at a claim: its verdict, the seeds it used, the mean margin and the one-sided bounds
    on the margin at level α' (``low`` > 0 reproduces, ``high`` < δ rules the effect out)."""

    verdict: str
    n: int
    mean: float
    low: float
    high: float
    level: float

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "n": self.n, "mean": self.mean, "low": self.low, "high": self.high,
                "level": self.level}  # fmt: skip


def look_decision(m: Sequence[float], delta: float, level: float, last: bool = False) -> LookResult:
    """The decision at one look from the margins ``m`` ``[n]`` (:func:`margins`): reproduced, not
    reproduced, else continue (inconclusive when ``last``). Fewer than 3 margins: continue."""
    from scipy import stats

    if not delta > 0:
        raise ValueError(f"delta must be > 0, got {delta}")
    a = np.asarray(m, dtype=np.float64)
    n = int(a.size)
    if n < 3:
        return LookResult(INCONCLUSIVE if last else CONTINUE, n, math.nan, math.nan, math.nan, level)
    mean = float(a.mean())
    half = float(stats.t.ppf(1 - level, n - 1) * a.std(ddof=1) / math.sqrt(n))
    low, high = mean - half, mean + half
    if low > 0:
        verdict = REPRODUCED
    elif high < delta:
        verdict = NOT_REPRODUCED
    else:
        verdict = INCONCLUSIVE if last else CONTINUE
    return LookResult(verdict, n, mean, low, high, level)


def sequential_decision(m: Sequence[float], delta: float, design: Design, level: float | None = None) -> LookResult:
    """A claim's verdict from its margins in seed order ``m`` (the fresh series): each declared look
    whose seeds are all in, in order, until one decides. Fewer seeds than the next look: the last
    look's result with verdict ``continue``. ``level``: α' (default the design's Pocock level)."""
    level = design.level if level is None else level
    a = np.asarray(m, dtype=np.float64)
    result = LookResult(CONTINUE, 0, math.nan, math.nan, math.nan, level)
    for i, n in enumerate(design.looks):
        if a.size < n:
            return LookResult(CONTINUE, result.n, result.mean, result.low, result.high, level)
        result = look_decision(a[:n], delta, level, last=i == len(design.looks) - 1)
        if result.verdict != CONTINUE:
            return result
    return result


def family_decisions(
    members: Mapping[str, tuple[Sequence[float], float, Design]], alpha: float = ALPHA
) -> dict[str, LookResult]:
    """Holm across a family, group-sequentially (Maurer & Bretz 2013): ``members`` maps an id to
    (margins in seed order, δ, design). At each look every open member is judged at α/(m − r), r
    the members reproduced so far, re-solved until no new one is reproduced. A member's own design
    gives its looks; its level is Pocock's for its looks at the current share of α."""
    m = len(members)
    decided: dict[str, LookResult] = {}

    def open_at(cid: str, n: int) -> bool:
        vals, _, design = members[cid]
        undecided = cid not in decided or decided[cid].verdict == CONTINUE
        return undecided and n in design.looks and len(vals) >= n

    def judged(cid: str, n: int, share: float) -> LookResult:
        vals, delta, design = members[cid]
        level = pocock_level(design.looks, share)
        return look_decision(np.asarray(vals, dtype=np.float64)[:n], delta, level, last=n == design.maximum)

    for n in sorted({k for _, _, d in members.values() for k in d.looks}):
        # step-down: reproduce at α/(m − r) until no member more is reproduced at this look ...
        while True:
            share = alpha / max(1, m - sum(r.verdict == REPRODUCED for r in decided.values()))
            new = {cid: r for cid in members if open_at(cid, n) and (r := judged(cid, n, share)).verdict == REPRODUCED}
            decided.update(new)
            if not new:
                break
        # ... then the other open members' verdicts at the level reached
        for cid in members:
            if open_at(cid, n):
                decided[cid] = judged(cid, n, share)
    for cid, (_, _, design) in members.items():
        if cid not in decided:
            decided[cid] = LookResult(CONTINUE, 0, math.nan, math.nan, math.nan, pocock_level(design.looks, alpha / m))
    return decided


def simulate(
    design: Design, effect: float, delta: float, sigma: float = 1.0, sims: int = 20_000, seed: int = _SEED + 1
) -> dict[str, float]:
    """The chances of each verdict of ``design`` for normal margins of mean ``effect`` and std
    ``sigma`` (``sims`` simulated series), and the mean seeds used: ``reproduced``,
    ``not reproduced``, ``inconclusive``, ``mean_n``."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    x = rng.normal(effect, sigma, size=(sims, design.maximum))
    level = design.level
    verdict = np.full(sims, "", dtype=object)
    used = np.full(sims, design.maximum, dtype=np.float64)
    open_ = np.ones(sims, dtype=bool)
    for i, n in enumerate(design.looks):
        a = x[:, :n]
        mean = a.mean(axis=1)
        half = stats.t.ppf(1 - level, n - 1) * a.std(axis=1, ddof=1) / math.sqrt(n)
        rep = open_ & (mean - half > 0)
        nrep = open_ & ~rep & (mean + half < delta)
        verdict[rep], verdict[nrep] = REPRODUCED, NOT_REPRODUCED
        used[rep | nrep] = n
        open_ &= ~(rep | nrep)
        if i == len(design.looks) - 1:
            verdict[open_] = INCONCLUSIVE
    return {
        REPRODUCED: float(np.mean(verdict == REPRODUCED)),
        NOT_REPRODUCED: float(np.mean(verdict == NOT_REPRODUCED)),
        INCONCLUSIVE: float(np.mean(verdict == INCONCLUSIVE)),
        "mean_n": float(used.mean()),
    }


def plan_claim(
    sigma: float,
    delta: float,
    max_seeds: int,
    *,
    ladder: Sequence[int] = LADDER,
    alpha: float = ALPHA,
    power: float = POWER,
    sims: int = 20_000,
) -> dict[str, Any]:
    """The shortest prefix of ``ladder`` (the looks' seed counts) whose simulated chance of
    "reproduced" at a margin of δ, for noise ``sigma``, reaches ``power`` at family-wise level
    ``alpha``. ``decidable`` False (with the smallest schedule's power at ``max_seeds``) when no
    schedule up to ``max_seeds`` seeds does. Returns looks, maximum, Pocock level, the power at δ,
    the error at a margin of 0, and the seeds a fixed-size one-look test would need (for reference)."""
    from scipy import stats

    if not (sigma > 0 and delta > 0):
        raise ValueError(f"sigma and delta must be > 0, got sigma={sigma}, delta={delta}")
    # the fixed-sample one-sided t test's seeds for the same power (reference, no looks)
    fixed = 3
    while fixed < 10_000:
        nc = delta / sigma * math.sqrt(fixed)
        if stats.nct.sf(stats.t.ppf(1 - alpha, fixed - 1), fixed - 1, nc) >= power:
            break
        fixed += 1
    looks: list[int] = []
    best: dict[str, Any] | None = None
    for n in (k for k in ladder if k <= max_seeds):
        looks.append(n)
        design = Design(tuple(looks), alpha)
        at_delta = simulate(design, delta, delta, sigma, sims)
        best = {"looks": list(looks), "maximum": n, "level": design.level, "power": at_delta[REPRODUCED],
                "mean_n_at_delta": at_delta["mean_n"]}  # fmt: skip
        if at_delta[REPRODUCED] >= power:
            null = simulate(design, 0.0, delta, sigma, sims)
            return {**best, "decidable": True, "error_at_zero": null[REPRODUCED],
                    "not_reproduced_at_zero": null[NOT_REPRODUCED], "mean_n_at_zero": null["mean_n"],
                    "fixed_sample_seeds": fixed}  # fmt: skip
    out = best or {"looks": [], "maximum": 0, "level": math.nan, "power": 0.0, "mean_n_at_delta": math.nan}
    return {**out, "decidable": False, "fixed_sample_seeds": fixed}
