"""The claim registry of ``entflow reproduce``, as pure data and rules (docs/reproduction.md,
"Pre-registration"): the runs (:data:`RUNS`), the settings, the claims of ``claims.yaml`` (package
data, read when :func:`load_registry` is called, never at import), the named metric functions a
claim's ``metric`` refers to, and the verdict rule (:meth:`Claim.verdict`).

The pipeline flows one way: ``claims`` (this module: of the evidence package it imports only the
registry of settings, :mod:`entflow.settings.registry`) → :mod:`entflow.evidence.facts` (a run
directory → facts) → :mod:`entflow.evidence.reproduce` (select → train → facts → verdicts → write).
A claim is measured once per seed from that seed's facts (``{run: {fact: number}}``) and judged
from the 95 % Student-t interval of the per-seed values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from entflow.errors import ConfigError
from entflow.settings.base import SettingKind
from entflow.settings.registry import get_setting_kind, setting_kinds

__all__ = [
    "DEFAULT_SETTING",
    "DESIGN_SEEDS",
    "HOLM_ALPHA",
    "METRICS",
    "MIN_SEEDS",
    "NOT_JUDGED",
    "RUNS",
    "Claim",
    "Headline",
    "Registry",
    "Setting",
    "any_of_verdict",
    "holm",
    "holm_verdict",
    "interval_row",
    "interval_verdict",
    "load_claims",
    "load_registry",
    "load_settings",
    "one_sided_p",
    "registry_path",
    "run_key",
    "split_key",
]

# seeds used to design the regime (docs/regime.md): never part of a verdict
DESIGN_SEEDS = frozenset({100, 101, 102})
# a claim's verdict needs at least this many seeds with a value; with fewer its runs still train and
# its per-seed values are reported, with the verdict NOT_JUDGED
MIN_SEEDS = 3
NOT_JUDGED = "not judged"

# run name -> (method, params, extra config keys): each run's paper setting on top of the lab's
RUNS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "grpo": ("grpo", {}, {}),
    # paper 003's law, measured with 4× the validation prompts: the demo's 64 prompts × 8 samples
    # leave ±3 points of evaluation noise, as large as the late gains the law has to fit
    # (docs/reproduction.md). The warm start is the demo's (trained with the usual 64 held out).
    "grpo_law": ("grpo", {}, {"task_params": {"validation_size": 256}}),
    "clip_higher": ("clip_higher", {}, {}),
    # paper 003 uses ratios 2e-4 / 2e-3 of ~10^6-token batches; the lab's ~2,000-token batches
    # would select a single token, so the ratios are scaled up (as in the demo)
    "clip_cov": ("clip_cov", {"ratio": 0.02}, {}),
    "kl_cov": ("kl_cov", {"ratio": 0.05}, {}),
    "positive_only": ("positive_only", {}, {}),
    "negative_only": ("negative_only", {}, {}),
    # entropy-guided schedule / adaptive bonus with a target the lab's entropy crosses (it starts at
    # ~1.5 nats and GRPO takes it to ~0.5): with the design default 0.2 (docs/design.md §6) neither would ever act here
    "pos_adv_reweight": ("pos_adv_reweight", {"schedule": "entropy", "target": 0.8}, {}),
    # λ_min 0.7, paper 000 App. D's setting throughout (0.1.0 ran the library default 0.8)
    "steer": ("steer", {"lambda_min": 0.7}, {}),
    "quadrant_uplift": ("quadrant", {"preset": "uplift"}, {}),
    "quadrant_suppress": ("quadrant", {"preset": "suppress"}, {}),
    "grpo_strict": ("grpo", {}, {"strict_on_policy": True}),
    # Park et al. 2025 (arXiv 2509.26114): GRPO with rewards that carry no signal (Bernoulli 1/2)
    "grpo_random_reward": ("grpo", {}, {"random_reward": True}),
    "opefo_strict": ("opefo", {}, {"strict_on_policy": True}),
    "ppl_shaping": ("ppl_shaping", {}, {}),
    "position_shaping": ("position_shaping", {"gamma": 1.0}, {}),
    "adaptive_entropy": ("adaptive_entropy", {"target": 0.8, "delta": 0.01, "c_max": 0.3}, {}),
    # the field's methods since the five papers (docs/methods.md), at their papers' defaults
    "cispo": ("cispo", {}, {}),
    "gspo": ("gspo", {}, {}),
    "sapo": ("sapo", {}, {}),
    "ce_gppo": ("ce_gppo", {}, {}),
    "archer": ("archer", {}, {}),
    "siren": ("siren", {}, {}),
    "entropic": ("entropic", {}, {}),
    "aepo": ("aepo", {}, {}),
    # the objectives aimed at pass@k (docs/methods.md), at their defaults: k = 4 of the regime's
    # groups of 16 for the two pass@k advantages (the papers' k ≪ n settings)
    "passk_training": ("passk_training", {"k": 4}, {}),
    "pkpo": ("pkpo", {"k": 4}, {}),
    "simko": ("simko", {}, {}),
    "erc": ("erc", {}, {}),
    "aer": ("aer", {}, {}),
    # verl 0.9.1's policy-loss modes (docs/methods.md), at verl's defaults: the loss's clip
    # bounds 0.2 (GMPO's log-space clip, DPPO's TV thresholds) and DPPO's IS truncation clip_ratio_c = 3
    "geo_mean": ("geo_mean", {}, {}),
    "dppo_tv": ("dppo_tv", {}, {"dual_clip": 3.0}),
    # the methods the field shipped since (docs/methods.md), at their defaults
    "maxrl": ("maxrl", {}, {}),
    "topr": ("topr", {}, {}),
    "stare": ("stare", {}, {}),
    # the knob sweep's selections where they differ from the paper's setting (experiments/regime/sweep.py;
    # chosen on validation pass@256 on design seeds, docs/reproduction.md "The knob sweep")
    "clip_cov_r05": ("clip_cov", {"ratio": 0.05}, {}),
    # KL-Cov at paper 003's ratio for Qwen2.5-7B (App. C): at the real-v2 batch (~80 response tokens
    # a mini-batch) k = max(⌊2e-3·N⌋, 1) is one token a mini-batch (docs/real-models.md, real-v2 design)
    "kl_cov_paper": ("kl_cov", {"ratio": 2e-3}, {}),
    "steer_lmin05": ("steer", {"lambda_min": 0.5}, {}),
    "clip_higher_h35": ("clip_higher", {"clip_high": 0.35}, {}),
}

Facts = Mapping[str, Mapping[str, Any]]  # one seed: {run: {fact: value}}

KINDS = ("greater", "less", "threshold", "no_worse")
DIRECTIONS = ("higher", "lower")
_STATUS = re.compile(r"^pre-registered \d{4}-\d{2}-\d{2}\b")
_KEYS = {"id", "paper", "statement", "measured", "metric", "runs", "criterion", "direction", "seeds", "status"}
_OPTIONAL = {"note", "pending", "setting", "family", "superseded", "headline", "retired"}
_DECLARED = re.compile(r"^declared \d{4}-\d{2}-\d{2}\b")
DEFAULT_SETTING = "demo"


def run_key(setting: str, run: str) -> str:
    """A run's key in reproduce's facts and run folders: ``run`` in the demo setting,
    ``<setting>/<run>`` in another (the same method in two settings is two runs)."""
    return run if setting == DEFAULT_SETTING else f"{setting}/{run}"


def split_key(key: str) -> tuple[str, str]:
    """(setting, run) of a :func:`run_key`."""
    setting, _, run = key.rpartition("/")
    return setting or DEFAULT_SETTING, run


def interval_verdict(rule: str, mean: float, half: float, bound: float = 0.0) -> str:
    """The verdict of an interval ``mean ± half`` under ``rule`` (greater / less: than 0; at_least /
    at_most: than ``bound``): ``reproduced`` if the whole interval is on the claimed side, ``not
    reproduced`` if it is entirely on the other, else ``inconclusive`` (so too without a finite
    interval)."""
    if not math.isfinite(mean) or not math.isfinite(half):
        return "inconclusive"
    lo, hi = mean - half, mean + half
    if rule == "greater":
        return "reproduced" if lo > 0 else "not reproduced" if hi < 0 else "inconclusive"
    if rule == "less":
        return "reproduced" if hi < 0 else "not reproduced" if lo > 0 else "inconclusive"
    if rule == "at_least":
        return "reproduced" if lo >= bound else "not reproduced" if hi < bound else "inconclusive"
    if rule == "at_most":
        return "reproduced" if hi <= bound else "not reproduced" if lo > bound else "inconclusive"
    raise ValueError(rule)


def interval_row(values: Sequence[float], rule: str, bound: float = 0.0, level: float = 0.95) -> dict[str, Any]:
    """A claim's numbers from its per-seed ``values`` ``[S]``: ``values``, ``mean``, the half-width
    ``half`` of the Student-t interval at ``level`` (:func:`entflow.analysis.stats.t_interval`),
    ``ci_low``, ``ci_high``, ``n``, ``level`` and the ``verdict`` (:func:`interval_verdict`).
    ``entflow reproduce`` judges with it and ``entflow reproduce --verify`` recomputes with it."""
    from entflow.analysis.stats import t_interval

    vals = list(values)
    mean, half, n = t_interval(vals, level)
    return {
        "values": vals,
        "mean": mean,
        "half": half,
        "ci_low": mean - half,
        "ci_high": mean + half,
        "n": n,
        "level": level,
        "verdict": interval_verdict(rule, mean, half, bound),
    }


def any_of_verdict(rule: str, components: Sequence[Mapping[str, Any]]) -> tuple[str, int]:
    """The verdict of an ``any_of`` claim from its components' rows (:func:`interval_row`, each at
    level 1 − 0.05/m) and the index of the one its row reports: ``reproduced`` if one is on the
    claimed side, ``not reproduced`` if all are on the other, else ``inconclusive``; the reported
    one has the highest lower bound (the lowest upper bound for a claim of the lower side)."""
    verdicts = [r["verdict"] for r in components]
    overall = (
        "reproduced"
        if "reproduced" in verdicts
        else "not reproduced"
        if all(v == "not reproduced" for v in verdicts)
        else "inconclusive"
    )
    if rule in ("less", "at_most"):  # the claimed side is below: the best has the lowest upper bound
        high = [r["ci_high"] if math.isfinite(r["ci_high"]) else math.inf for r in components]
        return overall, int(np.argmin(high))
    low = [r["ci_low"] if math.isfinite(r["ci_low"]) else -math.inf for r in components]
    return overall, int(np.argmax(low))


# ---------------------------------------------------------------------------- families (Holm)
# the one-sided level that matches the verdict's two-sided 95 % interval: the interval lies on the
# claimed side exactly when the one-sided p-value of the same t statistic is below 0.025
HOLM_ALPHA = 0.025


def one_sided_p(values: Sequence[float], rule: str, bound: float = 0.0) -> float:
    """The one-sided p-value of a claim from its per-seed ``values`` ``[S]`` (the finite ones, n of
    them), from the same Student-t statistic as its interval: t = (mean − b) / (s / √n), s the
    sample std (ddof 1), b the rule's bound (0 for greater / less); p = P(T_{n−1} ≥ t) for a claim
    of the higher side (greater, at_least), P(T_{n−1} ≤ t) for the lower side (less, at_most).
    NaN with fewer than 2 finite values; 0 or 1 when s = 0 and the mean is off the bound."""
    from scipy import stats

    a = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if a.size < 2:
        return math.nan
    b = 0.0 if rule in ("greater", "less") else float(bound)
    higher = rule in ("greater", "at_least")
    if rule not in ("greater", "less", "at_least", "at_most"):
        raise ValueError(rule)
    se = a.std(ddof=1) / math.sqrt(a.size)
    diff = float(a.mean()) - b
    if se == 0.0:
        if diff == 0.0:
            return 1.0
        return 0.0 if (diff > 0) == higher else 1.0
    t = diff / se
    return float(stats.t.sf(t, a.size - 1) if higher else stats.t.cdf(t, a.size - 1))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni step-down adjusted p-values (Holm 1979, Scand. J. Statist. 6:65–70), in
    input order, ``[m]`` → ``[m]``: with p sorted ascending p_(1) ≤ … ≤ p_(m),
    adj_(i) = min(1, max_{j ≤ i} (m − j + 1) · p_(j)). A NaN p (a claim without an interval)
    counts as 1, so it never helps another claim pass."""
    p = np.asarray([1.0 if not math.isfinite(x) else float(x) for x in pvalues], dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    adj = np.empty(m, dtype=np.float64)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adj[i] = running
    return [float(x) for x in adj]


def holm_verdict(verdict: str, holm_p: float, alpha: float = HOLM_ALPHA) -> str:
    """A claim's verdict after the family's correction: ``reproduced`` stays only if its Holm
    p-value is at most ``alpha`` (else ``inconclusive``); ``not reproduced``, ``inconclusive``,
    ``not run`` and ``not judged`` are unchanged (the correction guards against claiming too much, never upgrades)."""
    if verdict != "reproduced":
        return verdict
    return "reproduced" if math.isfinite(holm_p) and holm_p <= alpha else "inconclusive"


# ---------------------------------------------------------------------------- metric functions
def fact(f: Facts, *, fact: str, run: str) -> float:
    """One run's fact."""
    return float(f[run][fact])


def paired_difference(f: Facts, *, fact: str, run: str, baseline: str) -> float:
    """``run`` − ``baseline`` on the same seed (the same prompts every step)."""
    return float(f[run][fact]) - float(f[baseline][fact])


def change_from_warm(f: Facts, *, fact: str, run: str) -> float:
    """A run's ``<fact>_final`` − its ``<fact>_warm`` (the warm start, evaluated at step 0)."""
    return float(f[run][f"{fact}_final"]) - float(f[run][f"{fact}_warm"])


def any_of_components(*, facts: Sequence[str], pairs: Sequence[Sequence[str]]) -> list[dict[str, str]]:
    """The paired differences an ``any_of`` metric compares: every (fact, (run, baseline))."""
    return [{"fact": x, "run": r, "baseline": b} for x in facts for r, b in pairs]


# name -> (function of one seed's facts, or None for a metric evaluated over components, its keys)
METRICS: dict[str, tuple[Callable[..., float] | None, tuple[str, ...]]] = {
    "fact": (fact, ("fact", "run")),
    "paired_difference": (paired_difference, ("fact", "run", "baseline")),
    "change_from_warm": (change_from_warm, ("fact", "run")),
    "any_of": (None, ("facts", "pairs")),
}


def facts_read(metric: dict[str, Any]) -> list[str]:
    """The facts a claim's ``metric`` reads."""
    if metric["name"] == "any_of":
        return list(metric["facts"])
    if metric["name"] == "change_from_warm":
        return [f"{metric['fact']}_final", f"{metric['fact']}_warm"]
    return [metric["fact"]]


def _runs_read(metric: dict[str, Any]) -> list[str]:
    if metric["name"] == "any_of":
        return [r for pair in metric["pairs"] for r in pair]
    return [metric[k] for k in ("run", "baseline") if k in metric]


# ---------------------------------------------------------------------------- the claim
@dataclass(frozen=True)
class Headline:
    """A headline claim's smallest effect of interest: ``delta`` > 0 on the claimed side of the
    bound (a margin of the claim's own metric), the ``reason`` for it, and ``declared`` (the date,
    before any run of its fresh series)."""

    delta: float
    reason: str
    declared: str


@dataclass(frozen=True)
class Claim:
    """One registry entry. ``rule`` / ``bound`` is the verdict rule it reduces to
    (:meth:`verdict`, :func:`interval_verdict`): greater → (greater, 0), less → (less, 0),
    threshold c → (at_least | at_most, c), no_worse m → (at_least, −m) | (at_most, +m)."""

    id: str
    paper: str
    statement: str
    measured: str
    metric: dict[str, Any]
    runs: tuple[str, ...]
    kind: str
    direction: str
    threshold: float | None
    margin: float | None
    seeds: tuple[int, ...]
    status: str
    note: str = ""
    pending: str | None = None
    setting: str = DEFAULT_SETTING
    family: str | None = None
    superseded: str | None = None  # why its verdict no longer stands and what replaced it
    # a paper's central statement: its smallest effect of interest δ (on the claimed side), the
    # reason, and when it was declared (docs/reproduction.md, "Decisions"; evidence/decision.py)
    headline: Headline | None = None
    retired: str | None = None  # why its measurement is no longer a verdict of its own (never counted)

    def key(self, run: str) -> str:
        """The run's key in reproduce's facts and run folders (:func:`run_key` in its setting)."""
        return run_key(self.setting, run)

    def facts_read(self) -> list[str]:
        """The facts its metric reads."""
        return facts_read(self.metric)

    def verdict(self, mean: float, half: float) -> str:
        """The verdict of the interval ``mean ± half`` of its per-seed values (:func:`interval_verdict`)."""
        return interval_verdict(self.rule, mean, half, self.bound)

    @property
    def rule(self) -> str:
        if self.kind in ("greater", "less"):
            return self.kind
        return "at_least" if self.direction == "higher" else "at_most"

    @property
    def bound(self) -> float:
        if self.kind == "threshold":
            return float(self.threshold)  # type: ignore[arg-type]
        if self.kind == "no_worse":
            m = float(self.margin)  # type: ignore[arg-type]
            return -m if self.direction == "higher" else m
        return 0.0

    def value(self, facts: Facts) -> float:
        """The claim's number on one seed (single-value metrics only; KeyError if a fact is missing)."""
        fn, keys = METRICS[self.metric["name"]]
        if fn is None:
            raise TypeError(f"claim {self.id!r}: metric {self.metric['name']!r} is evaluated over components")
        return fn(facts, **{k: self.metric[k] for k in keys})

    def components(self) -> list[dict[str, str]]:
        """The paired differences of an ``any_of`` metric (empty for other metrics)."""
        if self.metric["name"] != "any_of":
            return []
        return any_of_components(facts=self.metric["facts"], pairs=self.metric["pairs"])


# ---------------------------------------------------------------------------- the setting
@dataclass(frozen=True)
class Setting:
    """Where a claim is measured: a preset file and the number of steps of the full run (``--quick``
    and explicit overrides replace the steps). ``kind`` names the entry of the registry of settings
    (:mod:`entflow.settings.registry`) that says where its preset lives, which config class it
    builds and how its runs are trained: ``lab`` (a preset of ``entflow/lab/configs``,
    :class:`~entflow.lab.config.LabConfig` keys; the tiny policy) or ``real`` (a preset of
    ``entflow/hf/configs``, ``entflow.hf.setup.RealTrainConfig`` keys; a real model,
    ``train_real``)."""

    name: str
    config: str
    steps: int
    kind: str = "lab"

    @property
    def runner(self) -> SettingKind:
        """How its runs are configured and trained: its kind's registry entry."""
        return get_setting_kind(self.kind)

    def base(self) -> dict[str, Any]:
        """The preset's config keys (its ``methods`` / ``seeds`` lists dropped) with ``steps``."""
        return preset_base(str(self.runner.presets() / self.config)) | {"steps": self.steps}


def preset_base(path: str) -> dict[str, Any]:
    """A lab config file as a reproduce base: its keys without the ``methods`` / ``seeds`` lists."""
    from entflow.trainer.config import load_yaml

    return {k: v for k, v in load_yaml(path).items() if k not in ("methods", "seeds")}


# ---------------------------------------------------------------------------- loading
def registry_path() -> Path:
    """The packaged registry, ``entflow/evidence/claims.yaml``."""
    return Path(str(files("entflow.evidence") / "claims.yaml"))


@dataclass(frozen=True)
class Registry:
    """A loaded claim registry: its file, its claims (file order) and its settings by name."""

    path: Path
    claims: tuple[Claim, ...]
    settings: dict[str, Setting]


def load_registry(
    path: str | Path | None = None,
    known_runs: Collection[str] | None = None,
    known_facts: Collection[str] | None = None,
) -> Registry:
    """Read and validate a claim registry (default: the packaged one), once.

    ``known_runs`` (default: :data:`RUNS`) are the runs a claim that is not ``pending`` may name;
    ``known_facts``, when given (``entflow.evidence.facts.FACTS``), the facts it may read. Raises
    :class:`~entflow.errors.ConfigError` with key ``claims[<id>].<field>`` for a bad entry
    (``claims`` for a bad file)."""
    known_runs = list(RUNS) if known_runs is None else known_runs
    path = Path(path) if path is not None else registry_path()
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError("claims", f"cannot read the claim registry {path}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("claims"), list) or not data["claims"]:
        raise ConfigError("claims", f"{path}: expected a mapping with a non-empty list `claims`")
    settings = _parse_settings(data.get("settings"), path)
    facts = None if known_facts is None else set(known_facts)
    claims: list[Claim] = []
    seen: set[str] = set()
    for i, entry in enumerate(data["claims"]):
        claim = _parse_claim(entry, i, set(known_runs), set(settings), facts)
        if claim.id in seen:
            raise ConfigError(f"claims[{claim.id}].id", f"{path}: duplicate claim id {claim.id!r}")
        seen.add(claim.id)
        claims.append(claim)
    return Registry(path, tuple(claims), settings)


def load_claims(
    path: str | Path | None = None,
    known_runs: Collection[str] | None = None,
    known_facts: Collection[str] | None = None,
) -> tuple[Claim, ...]:
    """The claims of :func:`load_registry`."""
    return load_registry(path, known_runs, known_facts).claims


def load_settings(path: str | Path | None = None) -> dict[str, Setting]:
    """The registry's settings (default: the packaged registry's), by name."""
    path = Path(path) if path is not None else registry_path()
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError("settings", f"cannot read the claim registry {path}: {e}") from None
    return _parse_settings((data or {}).get("settings") if isinstance(data, dict) else None, path)


def _parse_settings(raw: Any, path: Path) -> dict[str, Setting]:
    """The ``settings`` block; a registry without one measures everything in the demo (80 steps)."""
    if raw is None:
        return {DEFAULT_SETTING: Setting(DEFAULT_SETTING, "demo.yaml", 80)}
    if not isinstance(raw, dict) or DEFAULT_SETTING not in raw:
        raise ConfigError("settings", f"{path}: expected a mapping `settings` with at least {DEFAULT_SETTING!r}")
    out = {}
    kinds = setting_kinds()
    for name, spec in raw.items():
        keys = set(spec) if isinstance(spec, dict) else set()
        ok = isinstance(spec, dict) and {"config", "steps"} <= keys <= {"config", "steps", "kind"}
        kind = spec.get("kind", "lab") if ok else "lab"
        if kind not in kinds:
            raise ConfigError(f"settings.{name}.kind", f"expected one of {list(kinds)}, got {kind!r}")
        # the kind says where its presets live (entflow/lab/configs, entflow/hf/configs)
        presets = {p.name for p in get_setting_kind(kind).presets().glob("*.yaml")}
        ok = ok and spec.get("config") in presets
        steps = spec.get("steps") if isinstance(spec, dict) else None
        if not ok or isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError(
                f"settings.{name}",
                f"expected {{config: one of {sorted(presets)} (kind {kind!r}), steps: an integer >= 1, "
                f"kind: optional, one of {list(kinds)}}}, got {spec!r}",
            )
        out[str(name)] = Setting(str(name), spec["config"], steps, kind)
    return out


def _parse_claim(
    entry: Any,
    index: int,
    known_runs: set[str],
    known_settings: set[str] | None = None,
    known_facts: set[str] | None = None,
) -> Claim:
    if not isinstance(entry, dict):
        raise ConfigError(f"claims[{index}]", f"expected a mapping, got {type(entry).__name__}")
    cid = entry.get("id")
    if not isinstance(cid, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", cid):
        raise ConfigError(f"claims[{index}].id", f"expected a name of letters, digits, '-', '_', '.', got {cid!r}")

    def bad(fld: str, message: str) -> ConfigError:
        return ConfigError(f"claims[{cid}].{fld}", message)

    missing = sorted(_KEYS - set(entry))
    if missing:
        raise bad(missing[0], f"missing (required: {', '.join(sorted(_KEYS))})")
    unknown = sorted(set(entry) - _KEYS - _OPTIONAL)
    if unknown:
        raise bad(unknown[0], f"unknown field (known: {', '.join(sorted(_KEYS | _OPTIONAL))})")
    for fld in ("paper", "statement", "measured", "status"):
        if not isinstance(entry[fld], str) or not entry[fld].strip():
            raise bad(fld, f"expected a non-empty string, got {entry[fld]!r}")
    if not _STATUS.match(entry["status"]):
        raise bad("status", f"expected 'pre-registered YYYY-MM-DD …', got {entry['status']!r}")
    pending = entry.get("pending")
    if pending is not None and (not isinstance(pending, str) or not pending.strip()):
        raise bad("pending", f"expected the reason the claim cannot be measured yet, got {pending!r}")

    runs = entry["runs"]
    if not isinstance(runs, list) or not runs or not all(isinstance(r, str) for r in runs):
        raise bad("runs", f"expected a non-empty list of run names, got {runs!r}")
    if pending is None and (unknown_runs := [r for r in runs if r not in known_runs]):
        raise bad("runs", f"unknown runs {unknown_runs} (known: {', '.join(sorted(known_runs))}; or mark it pending)")

    metric = entry["metric"]
    if not isinstance(metric, dict) or metric.get("name") not in METRICS:
        raise bad("metric", f"expected {{name: one of {', '.join(METRICS)}, …}}, got {metric!r}")
    keys = METRICS[metric["name"]][1]
    extra_keys = sorted(set(metric) - set(keys) - {"name"})
    if extra_keys or any(k not in metric for k in keys):
        raise bad("metric", f"metric {metric['name']!r} takes exactly {', '.join(keys)}; got {sorted(metric)}")
    if metric["name"] == "any_of":
        ok = isinstance(metric["facts"], list) and metric["facts"] and isinstance(metric["pairs"], list)
        ok = ok and bool(metric["pairs"]) and all(isinstance(p, list) and len(p) == 2 for p in metric["pairs"])
        if not ok:
            raise bad("metric", f"any_of needs facts: [..] and pairs: [[run, baseline], ..], got {metric!r}")
    elif not all(isinstance(metric[k], str) for k in keys):
        raise bad("metric", f"expected names for {', '.join(keys)}, got {metric!r}")
    if not_in_runs := [r for r in _runs_read(metric) if r not in runs]:
        raise bad("metric", f"reads runs {not_in_runs} that `runs` does not list ({runs})")
    unknown_facts = [x for x in facts_read(metric) if known_facts is not None and x not in known_facts]
    if pending is None and unknown_facts:
        known = ", ".join(sorted(known_facts or ()))
        raise bad("metric", f"unknown facts {unknown_facts} (known: {known}; or mark it pending)")

    crit = entry["criterion"]
    if not isinstance(crit, dict) or crit.get("kind") not in KINDS:
        raise bad("criterion", f"expected {{kind: one of {', '.join(KINDS)}, …}}, got {crit!r}")
    kind = crit["kind"]
    direction = entry["direction"]
    if direction not in DIRECTIONS:
        raise bad("direction", f"expected one of {', '.join(DIRECTIONS)}, got {direction!r}")
    if (kind, direction) in (("greater", "lower"), ("less", "higher")):
        raise bad("direction", f"criterion {kind!r} claims the {'higher' if kind == 'greater' else 'lower'} side")
    needs = {"threshold": "threshold", "no_worse": "margin"}.get(kind)
    allowed = {"kind"} | ({needs} if needs else set())
    if set(crit) != allowed:
        raise bad("criterion", f"kind {kind!r} takes exactly {sorted(allowed)}, got {sorted(crit)}")
    number = crit.get(needs) if needs else None
    if needs and (isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number)):
        raise bad("criterion", f"{needs} must be a finite number, got {number!r}")
    if kind == "no_worse" and number < 0:
        raise bad("criterion", f"margin must be >= 0, got {number!r}")

    seeds = entry["seeds"]
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise bad("seeds", f"expected a list of distinct integers >= 0, got {seeds!r}")
    if design := sorted(set(seeds) & DESIGN_SEEDS):
        raise bad("seeds", f"design seeds {design} are never used for verdicts (docs/regime.md)")
    note = entry.get("note", "")
    if not isinstance(note, str):
        raise bad("note", f"expected a string, got {note!r}")
    setting = entry.get("setting", DEFAULT_SETTING)
    if setting not in (known_settings or {DEFAULT_SETTING}):
        raise bad("setting", f"expected one of {sorted(known_settings or {DEFAULT_SETTING})}, got {setting!r}")

    superseded = entry.get("superseded")
    if superseded is not None and (not isinstance(superseded, str) or not superseded.strip()):
        raise bad("superseded", f"expected the reason and what replaced the claim, got {superseded!r}")

    family = entry.get("family")
    if family is not None and (not isinstance(family, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", family)):
        raise bad("family", f"expected a name of letters, digits, '-', '_', '.', got {family!r}")
    if family is not None and metric["name"] == "any_of":
        raise bad("family", "an any_of claim is already corrected within itself (Bonferroni); it cannot join a family")

    headline = entry.get("headline")
    if headline is not None:
        if not isinstance(headline, dict) or set(headline) != {"delta", "reason", "declared"}:
            raise bad("headline", f"expected {{delta, reason, declared}}, got {headline!r}")
        delta = headline["delta"]
        if isinstance(delta, bool) or not isinstance(delta, int | float) or not (math.isfinite(delta) and delta > 0):
            raise bad("headline", f"delta must be a finite number > 0, got {delta!r}")
        if not isinstance(headline["reason"], str) or not headline["reason"].strip():
            raise bad("headline", f"expected the reason for delta, got {headline['reason']!r}")
        if not isinstance(headline["declared"], str) or not _DECLARED.match(headline["declared"]):
            raise bad("headline", f"expected declared: 'declared YYYY-MM-DD …', got {headline['declared']!r}")
        if metric["name"] == "any_of":
            raise bad("headline", "an any_of claim has no single margin to plan for")
        headline = Headline(float(delta), headline["reason"].strip(), headline["declared"])
    retired = entry.get("retired")
    if retired is not None and (not isinstance(retired, str) or not retired.strip()):
        raise bad("retired", f"expected why the claim no longer counts as a verdict, got {retired!r}")

    return Claim(
        id=cid,
        paper=entry["paper"],
        statement=entry["statement"],
        measured=entry["measured"],
        metric=dict(metric),
        runs=tuple(runs),
        kind=kind,
        direction=direction,
        threshold=float(number) if kind == "threshold" else None,
        margin=float(number) if kind == "no_worse" else None,
        seeds=tuple(seeds),
        status=entry["status"],
        note=note,
        pending=pending,
        setting=setting,
        family=family,
        superseded=superseded,
        headline=headline,
        retired=retired,
    )
