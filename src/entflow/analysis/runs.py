"""Reading run directories (docs/design.md §10): the one place that parses their files.

Conventions of ``metrics.jsonl`` as read by :func:`load_metrics`:

* one JSON object per line; a truncated (unparseable) **last** line is skipped (a crash
  mid-write); an unparseable line elsewhere is an error. ``null`` (how the trainer writes NaN) is
  read as NaN by :func:`series`. If a step appears twice (a resumed run re-logging the steps after
  its last checkpoint) the later line wins; records are returned sorted by step.
* The ``step: 0`` line is the warm-started model before training (validation keys); training
  statistics (entropy, reward …) are taken from whatever lines carry them.

:func:`read_jsonl` is the lenient reader the trainer uses for its own files (every complete line,
in file order). Nothing here computes a statistic: see :mod:`entflow.analysis.stats`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from entflow.errors import RunDirError

__all__ = [
    "AUDIT_ESTIMATORS",  # noqa: F822 (resolved by the module __getattr__ below)
    "audit_estimators",
    "is_training_line",
    "last_value",
    "law_points",
    "load_config",
    "load_metrics",
    "metric_float",
    "n_position_bins",
    "read_jsonl",
    "series",
    "wall_time",
]


def __getattr__(name: str) -> Any:
    """``AUDIT_ESTIMATORS``: the docs/design.md §5 estimators the lab audits (``core.estimators.ESTIMATORS``),
    imported on first use so that reading logs never imports torch."""
    if name == "AUDIT_ESTIMATORS":
        from entflow.core.estimator_names import ESTIMATORS

        return ESTIMATORS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def metric_float(v: Any) -> float:
    """A metric value as float; None / non-numbers → NaN (a bool is 0.0 / 1.0)."""
    if v is None or isinstance(v, bool):
        return math.nan if v is None else float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def read_jsonl(path: Path) -> list[Any]:
    """Every complete JSON line of ``path`` in file order; [] if the file is absent.

    Lenient: any line that is not valid JSON (a crash can leave a truncated last line) is skipped.
    Read as UTF-8 with undecodable bytes replaced (entflow writes ASCII JSON).
    """
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def jsonl_values(text: str, bad_line: Callable[[int, str], Exception]) -> Iterator[tuple[int, Any]]:
    """(line number from 1, value) of each non-blank line of the JSON-lines ``text``. A last line
    that is not valid JSON is skipped (the line in flight when the writer died); any other raises
    ``bad_line(number, what json saw)``."""
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                continue  # truncated last line: the step in flight when the run died
            raise bad_line(i + 1, e.msg) from None
        yield i + 1, value


def load_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Records of ``run_dir/metrics.jsonl`` sorted by step (see the module docstring).

    Raises:
        RunDirError: the file is missing, or a line other than the last is not valid JSON.
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise RunDirError(path, "not found (is this a run directory?)")
    by_step: dict[Any, dict[str, Any]] = {}
    unstepped: list[dict[str, Any]] = []
    text = path.read_text(encoding="utf-8", errors="replace")
    for n, rec in jsonl_values(text, lambda n, msg: RunDirError(path, f"line {n} is not valid JSON ({msg})")):
        if not isinstance(rec, dict):
            raise RunDirError(path, f"line {n} is not a JSON object")
        if "step" in rec and isinstance(rec["step"], int | float):
            by_step[rec["step"]] = rec  # a re-logged step (resume): the later line wins
        else:
            unstepped.append(rec)
    return [by_step[k] for k in sorted(by_step)] + unstepped


def load_config(run_dir: str | os.PathLike) -> dict[str, Any]:
    """``run_dir/config.yaml`` as a dict (empty if the file is absent).

    Raises:
        RunDirError: the file is not valid YAML or not a mapping.
    """
    return _mapping_file(Path(run_dir) / "config.yaml", yaml.safe_load, "YAML")


def load_coverage(run_dir: str | os.PathLike) -> dict[str, Any]:
    """``run_dir/coverage.json`` (the pass@k curves of the warm start and the final policy, written
    when ``coverage_n`` > 0) as a dict; empty if the file is absent.

    Raises:
        RunDirError: the file is not valid JSON or not a mapping.
    """
    return _mapping_file(Path(run_dir) / "coverage.json", json.loads, "JSON")


def _mapping_file(path: Path, parse: Any, kind: str) -> dict[str, Any]:
    """A run-directory file that holds one mapping: {} if absent or empty."""
    if not path.is_file():
        return {}
    try:
        data = parse(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise RunDirError(path, f"not valid {kind} ({e})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RunDirError(path, f"expected a mapping, got {type(data).__name__}")
    return data


def series(
    records: Sequence[dict[str, Any]], key: str, *, min_step: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(steps ``[K]``, values ``[K]``) of ``key`` over the records that carry a finite value of it."""
    xs, ys = [], []
    for r in records:
        if key not in r:
            continue
        v, s = metric_float(r[key]), metric_float(r.get("step"))
        if not math.isfinite(v) or not math.isfinite(s) or (min_step is not None and s < min_step):
            continue
        xs.append(s)
        ys.append(v)
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)


def last_value(records: Sequence[dict[str, Any]], key: str) -> float:
    """The last finite value of ``key`` (NaN if none)."""
    _, v = series(records, key)
    return float(v[-1]) if v.size else math.nan


def is_training_line(rec: dict[str, Any]) -> bool:
    """True for a line that carries training statistics (not only validation or timing keys)."""
    return any(k != "step" and not k.startswith(("val/", "time/")) for k in rec)


def n_position_bins(records: Sequence[dict[str, Any]]) -> int:
    """Number of relative-position bins of the logged ``diag/pos_entropy/correct/b{i}`` keys."""
    n = 0
    while any(f"diag/pos_entropy/correct/b{n}" in r for r in records):
        n += 1
    return n


def audit_estimators(records: Sequence[dict[str, Any]]) -> list[str]:
    """Estimators with audit metrics: the docs/design.md §5 ones first (in order), then any other."""
    seen: list[str] = []
    for r in records:
        for k in r:
            if k.startswith("audit/") and k.count("/") == 2:
                est = k.split("/")[1]
                if est not in seen:
                    seen.append(est)
    if not seen:
        return []
    from entflow.core.estimator_names import ESTIMATORS  # torch-free

    return [e for e in ESTIMATORS if e in seen] + [e for e in seen if e not in ESTIMATORS]


def law_points(records: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(steps ``[K]``, entropy ``[K]``, val acc ``[K]``) for the entropy–performance law, and the
    entropy source.

    Uses ``val/entropy`` — the policy's token entropy on the validation samples, measured by the
    same evaluation, on the same checkpoint, as ``val/acc`` (step 0, the warm start, included).
    The rollout ``entropy`` logged on the same line belongs to the rollout sampled *before*
    that step's update and does not exist at step 0, so it is only the fallback when fewer than
    3 lines carry ``val/entropy``.
    """
    for key in ("val/entropy", "entropy"):
        s, h, r = [], [], []
        for rec in records:
            H, R, st = metric_float(rec.get(key)), metric_float(rec.get("val/acc")), metric_float(rec.get("step"))
            if math.isfinite(H) and math.isfinite(R):
                s.append(st)
                h.append(H)
                r.append(R)
        if len(h) >= 3 or key == "entropy":
            return np.asarray(s), np.asarray(h), np.asarray(r), key
    raise AssertionError("unreachable")


def _elapsed_total(values: Sequence[float]) -> float:
    """Total time from a file-ordered ``time/elapsed_s`` column whose clock restarts on resume."""
    total, seg, prev = 0.0, 0.0, -math.inf
    seen = False
    for v in values:
        if not math.isfinite(v):
            continue
        seen = True
        if v < prev:  # the clock restarted (resumed run): close the segment
            total += seg
        seg = v
        prev = v
    return total + seg if seen else math.nan


def wall_time(run_dir: str | os.PathLike, records: Sequence[dict[str, Any]] | None = None) -> float:
    """Training wall time in seconds from ``time/elapsed_s``.

    Read from ``metrics.jsonl`` when it carries the key, else from the lab's ``timing.jsonl``
    (file order, unparseable lines skipped). The trainer's clock restarts on ``--resume``; each
    restart closes a segment and the segments are summed. NaN when neither file has the key.
    """
    recs = load_metrics(run_dir) if records is None else records
    vals = [metric_float(r.get("time/elapsed_s")) for r in recs if "time/elapsed_s" in r]
    if not vals:
        timing = read_jsonl(Path(run_dir) / "timing.jsonl")
        vals = [metric_float(r["time/elapsed_s"]) for r in timing if isinstance(r, dict) and "time/elapsed_s" in r]
    return _elapsed_total(vals)
