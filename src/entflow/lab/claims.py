"""The claim registry of ``entflow reproduce``: load and validate ``claims.yaml`` (package data),
and the named metric functions a claim's ``metric`` refers to
(docs/reproduction.md, "Pre-registration").

A claim is measured once per seed from that seed's *run facts* (``{run: {fact: number}}``, see
:func:`entflow.lab.reproduce.run_facts`) and judged from the 95 % Student-t interval of the
per-seed values (:func:`entflow.lab.reproduce.verdict`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from entflow.errors import ConfigError

__all__ = [
    "DESIGN_SEEDS",
    "FACTS",
    "METRICS",
    "Claim",
    "Setting",
    "load_claims",
    "load_settings",
    "registry_path",
]

# seeds used to design the regime (docs/regime.md): never part of a verdict
DESIGN_SEEDS = frozenset({100, 101, 102})

# what entflow.lab.reproduce.run_facts provides for one run (summarize_run's keys a claim reads, plus
# the facts run_facts adds); a fact a claim needs that is not here must be declared `pending`
FACTS = frozenset(
    {
        "entropy_retention",
        "entropy_final",
        "val_acc_best_window",
        "val_acc_final",
        "val_acc_warm",
        "val_pass_at_k_final",
        "law_r2",
        "law_predict_final_abs_err",
        "gain_first_half_share",
        "opefo_lambda_mean",
        "target_rel_err",
        "dH_clipped_low_mean",
        "dH_clipped_high_mean",
        # coverage.json (coverage_n = 256) and the hard split's val/hard_acc
        "val_pass_at_256_final",
        "val_pass_at_256_warm",
        "hard_pass_at_256_final",
        "hard_acc_best_window",
        # early prediction (paper 003 App. B.3): |law error| − |naive forecast error| for the final accuracy, fitted on
        # the first 15 / 30 / 50 % of the evaluations
        *(f"predict_{pct}_law_minus_{naive}" for pct in (15, 30, 50) for naive in ("last_value", "linear")),
    }
)

Facts = Mapping[str, Mapping[str, Any]]  # one seed: {run: {fact: value}}

KINDS = ("greater", "less", "threshold", "no_worse")
DIRECTIONS = ("higher", "lower")
_STATUS = re.compile(r"^pre-registered \d{4}-\d{2}-\d{2}\b")
_KEYS = {"id", "paper", "statement", "measured", "metric", "runs", "criterion", "direction", "seeds", "status"}
_OPTIONAL = {"note", "pending", "setting"}
DEFAULT_SETTING = "demo"


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


def _facts_read(metric: dict[str, Any]) -> list[str]:
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
class Claim:
    """One registry entry. ``rule`` / ``bound`` is the verdict rule it reduces to
    (:func:`entflow.lab.reproduce.verdict`): greater → (greater, 0), less → (less, 0),
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

    def key(self, run: str) -> str:
        """The run's key in reproduce's facts and run folders: ``run`` in the demo setting,
        ``<setting>/<run>`` in another (the same method in two settings is two runs)."""
        return run if self.setting == DEFAULT_SETTING else f"{self.setting}/{run}"

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
    """Where a claim is measured: a lab preset of ``entflow/lab/configs`` and the number of steps
    of the full run (``--quick`` and explicit overrides replace the steps)."""

    name: str
    config: str
    steps: int

    def base(self) -> dict[str, Any]:
        """The preset's config keys (its ``methods`` / ``seeds`` lists dropped) with ``steps``."""
        return preset_base(str(files("entflow.lab") / "configs" / self.config)) | {"steps": self.steps}


def preset_base(path: str) -> dict[str, Any]:
    """A lab config file as a reproduce base: its keys without the ``methods`` / ``seeds`` lists."""
    from entflow.trainer.config import load_yaml

    return {k: v for k, v in load_yaml(path).items() if k not in ("methods", "seeds")}


# ---------------------------------------------------------------------------- loading
def registry_path() -> Path:
    """The packaged registry, ``entflow/lab/claims.yaml``."""
    return Path(str(files("entflow.lab") / "claims.yaml"))


def load_claims(path: str | Path | None = None, known_runs: Sequence[str] | None = None) -> tuple[Claim, ...]:
    """Read and validate a claim registry (default: the packaged one).

    ``known_runs`` (default: the run types of :data:`entflow.lab.reproduce.RUNS`) are the runs a
    claim that is not ``pending`` may name. Raises :class:`~entflow.errors.ConfigError` with key
    ``claims[<id>].<field>`` for a bad entry (``claims`` for a bad file)."""
    if known_runs is None:
        from entflow.lab.reproduce import RUNS

        known_runs = list(RUNS)
    path = Path(path) if path is not None else registry_path()
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError("claims", f"cannot read the claim registry {path}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("claims"), list) or not data["claims"]:
        raise ConfigError("claims", f"{path}: expected a mapping with a non-empty list `claims`")
    settings = _parse_settings(data.get("settings"), path)
    claims: list[Claim] = []
    seen: set[str] = set()
    for i, entry in enumerate(data["claims"]):
        claim = _parse_claim(entry, i, set(known_runs), set(settings))
        if claim.id in seen:
            raise ConfigError(f"claims[{claim.id}].id", f"{path}: duplicate claim id {claim.id!r}")
        seen.add(claim.id)
        claims.append(claim)
    return tuple(claims)


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
    presets = {p.name for p in Path(str(files("entflow.lab") / "configs")).glob("*.yaml")}
    for name, spec in raw.items():
        ok = isinstance(spec, dict) and set(spec) == {"config", "steps"} and spec.get("config") in presets
        steps = spec.get("steps") if isinstance(spec, dict) else None
        if not ok or isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError(
                f"settings.{name}",
                f"expected {{config: one of {sorted(presets)}, steps: an integer >= 1}}, got {spec!r}",
            )
        out[str(name)] = Setting(str(name), spec["config"], steps)
    return out


def _parse_claim(entry: Any, index: int, known_runs: set[str], known_settings: set[str] | None = None) -> Claim:
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
    if pending is None and (unknown_facts := [x for x in _facts_read(metric) if x not in FACTS]):
        raise bad("metric", f"unknown facts {unknown_facts} (known: {', '.join(sorted(FACTS))}; or mark it pending)")

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
    )
