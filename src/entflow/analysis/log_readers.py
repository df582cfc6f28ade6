"""Training logs of entflow, TRL, verl and W&B/MLflow exports → named series (:class:`LogData`).

A user passes a path and does not name the format: each reader in :data:`READERS` says whether it
can read the path (:meth:`LogReader.find`) and, if so, reads it. Tried in this order:

========================  ==================================================================================
``entflow-run``           an entflow run directory: ``metrics.jsonl`` (read by ``entflow.analysis.report``)
``trl-state``             TRL / ``transformers``: ``trainer_state.json`` (its ``log_history``) in the folder,
                          or in its latest ``checkpoint-N/``
``verl-jsonl``            verl's ``file`` logger: a JSONL of ``{"step": s, "data": {key: value}}`` lines
``csv``                   a CSV exported from a W&B run (wide: a step column ``_step``/``Step``/``step``, one
                          column per metric, ``RUN - key`` headers and ``__MIN``/``__MAX`` columns allowed) or
                          from MLflow (long: columns ``key``, ``value``, ``step``)
``tensorboard``           TensorBoard event files (TRL ``report_to="tensorboard"``, verl ``trainer.logger``
                          with ``tensorboard``), read by TensorBoard's own ``EventAccumulator``
========================  ==================================================================================

Every problem is a :class:`entflow.errors.LogError` naming the file: an empty log, steps going
backwards in one file, or several runs in one folder. Which key plays which role is
:mod:`entflow.analysis.log_keys`' job; the analysis is :func:`entflow.analysis.collapse.analyze_log`.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from entflow.analysis.runs import jsonl_values, metric_float
from entflow.analysis.tensorboard import read_scalars
from entflow.errors import LogError

__all__ = ["LOOKED_FOR", "READERS", "LogData", "LogReader", "log_from_records", "read_log"]


@dataclass
class LogData:
    """One run's log: ``series[key] = (steps [n], values [n])`` with steps non-decreasing as read.

    ``path`` is the file (or run directory) read, ``format`` the reader's name.
    """

    path: Path
    format: str
    series: dict[str, tuple[np.ndarray, np.ndarray]]
    notes: list[str] = field(default_factory=list)

    def keys(self) -> list[str]:
        """The logged keys, sorted."""
        return sorted(self.series)


def _from_records(
    path: Path,
    fmt: str,
    records: Iterable[tuple[float, dict[str, Any]]],
    skip: Sequence[str] = (),
    null_is_nan: bool = True,
) -> LogData:
    """Series from (step, {key: value}) records in file order; numbers only, ``skip`` keys left out.

    ``null``: NaN (verl's orjson writes NaN as null) or, with ``null_is_nan=False``, not logged at
    that step (entflow's metrics.jsonl). A key logged twice at one step keeps the later value (a
    resumed run re-logging); a key whose step goes backwards means two runs in one file.
    """
    steps: dict[str, list[float]] = {}
    values: dict[str, list[float]] = {}
    for step, rec in records:
        for k, v in rec.items():
            if k in skip or isinstance(v, str | dict | list) or (v is None and not null_is_nan):
                continue
            s, x = steps.setdefault(k, []), values.setdefault(k, [])
            if s and step <= s[-1]:
                if step < s[-1]:
                    raise LogError(
                        path, k, f"step {step:g} follows step {s[-1]:g}: several runs in one log? pass one run's log"
                    )
                x[-1] = metric_float(v)
                continue
            s.append(step)
            x.append(metric_float(v))
    series = {k: (np.asarray(steps[k]), np.asarray(values[k])) for k in steps}
    if not series:
        raise LogError(path, None, "empty log: no numeric values logged")
    return LogData(path, fmt, series)


class LogReader:
    """A log format: :meth:`find` the file(s) it reads under a path (None: not this format), then :meth:`read`."""

    name = ""

    def find(self, path: Path) -> Path | None:  # pragma: no cover - interface
        raise NotImplementedError

    def read(self, target: Path) -> LogData:  # pragma: no cover - interface
        raise NotImplementedError


class EntflowRunReader(LogReader):
    """entflow's run directory (docs/design.md §10), read by ``entflow.analysis.runs.load_metrics``."""

    name = "entflow-run"

    def find(self, path: Path) -> Path | None:
        if path.is_dir() and (path / "metrics.jsonl").is_file():
            return path
        if path.is_file() and path.name == "metrics.jsonl":
            return path.parent
        return None

    def read(self, target: Path) -> LogData:
        from entflow.analysis.runs import load_metrics

        recs = load_metrics(target)
        stepped = ((float(r["step"]), r) for r in recs if isinstance(r.get("step"), int | float))
        return _from_records(target / "metrics.jsonl", self.name, stepped, skip=("step",), null_is_nan=False)


class TrlStateReader(LogReader):
    """``trainer_state.json`` of ``transformers.Trainer`` (TRL's trainers): its ``log_history``.

    In an output folder without one, the latest ``checkpoint-N/trainer_state.json`` (the highest N
    holds the whole history up to it).
    """

    name = "trl-state"

    def find(self, path: Path) -> Path | None:
        if path.is_file():
            return path if path.name == "trainer_state.json" else None
        if (path / "trainer_state.json").is_file():
            return path / "trainer_state.json"
        ckpts = []
        for p in path.glob("checkpoint-*/trainer_state.json"):
            m = re.fullmatch(r"checkpoint-(\d+)", p.parent.name)
            if m:
                ckpts.append((int(m.group(1)), p))
        return max(ckpts)[1] if ckpts else None

    def read(self, target: Path) -> LogData:
        try:
            state = json.loads(target.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise LogError(target, None, f"not valid JSON ({e})") from None
        hist = state.get("log_history") if isinstance(state, dict) else None
        if not isinstance(hist, list):
            raise LogError(target, "log_history", "missing or not a list: not a trainer_state.json?")
        if not hist:
            raise LogError(target, "log_history", "empty log: no records")
        recs = ((float(r["step"]), r) for r in hist if isinstance(r, dict) and isinstance(r.get("step"), int | float))
        return _from_records(target, self.name, recs, skip=("step", "epoch"))


class VerlJsonlReader(LogReader):
    """verl's ``file`` logger (``verl.utils.tracking.FileLogger``): ``{"step": s, "data": {...}}`` per line."""

    name = "verl-jsonl"

    @staticmethod
    def _is_verl(p: Path) -> bool:
        try:
            with p.open("rb") as f:
                first = f.readline()
            rec = json.loads(first)
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return False
        return isinstance(rec, dict) and "step" in rec and isinstance(rec.get("data"), dict)

    def find(self, path: Path) -> Path | None:
        if path.is_file():
            return path if path.suffix == ".jsonl" and self._is_verl(path) else None
        files = sorted(p for p in path.glob("*.jsonl") if self._is_verl(p))
        if len(files) > 1:
            names = ", ".join(p.name for p in files)
            raise LogError(path, None, f"{len(files)} verl logs in one folder ({names}): several runs? pass one file")
        return files[0] if files else None

    def read(self, target: Path) -> LogData:
        text = target.read_text(encoding="utf-8", errors="replace")
        recs = []
        for n, rec in jsonl_values(text, lambda n, msg: LogError(target, None, f"line {n} is not valid JSON ({msg})")):
            if not isinstance(rec, dict) or not isinstance(rec.get("data"), dict):
                raise LogError(target, None, f"line {n} is not a verl file-logger record {{step, data}}")
            recs.append((metric_float(rec.get("step")), rec["data"]))
        if not recs:
            raise LogError(target, None, "empty log: no records")
        return _from_records(target, self.name, recs)


STEP_COLUMNS = ("_step", "step", "Step", "global_step", "trainer/global_step")


class CsvReader(LogReader):
    """A CSV exported from W&B (wide) or MLflow (long: ``key``, ``value``, ``step``)."""

    name = "csv"

    def find(self, path: Path) -> Path | None:
        if path.is_file():
            return path if path.suffix.lower() == ".csv" else None
        files = sorted(path.glob("*.csv"))
        if len(files) > 1:
            names = ", ".join(p.name for p in files)
            raise LogError(path, None, f"{len(files)} CSV files in one folder ({names}): several runs? pass one file")
        return files[0] if files else None

    def read(self, target: Path) -> LogData:
        with target.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        if len(rows) < 2:
            raise LogError(target, None, "empty log: no rows under the header")
        head = [h.strip() for h in rows[0]]
        if {"key", "value", "step"} <= set(head):
            return self._long(target, head, rows[1:])
        return self._wide(target, head, rows[1:])

    def _long(self, target: Path, head: list[str], rows: list[list[str]]) -> LogData:
        ik, iv, istep = head.index("key"), head.index("value"), head.index("step")
        if "run_id" in head:
            runs = {r[head.index("run_id")] for r in rows if r}
            if len(runs) > 1:
                raise LogError(target, "run_id", f"{len(runs)} runs in one export: export one run")
        per_key: dict[str, list[tuple[float, float]]] = {}
        for r in rows:
            if r:
                per_key.setdefault(r[ik], []).append((metric_float(r[istep]), metric_float(r[iv])))
        recs = sorted(((s, {k: v}) for k, pts in per_key.items() for s, v in pts), key=lambda t: t[0])
        return _from_records(target, self.name, recs)

    def _wide(self, target: Path, head: list[str], rows: list[list[str]]) -> LogData:
        istep = next((head.index(c) for c in STEP_COLUMNS if c in head), None)
        if istep is None:
            raise LogError(target, "step", f"no step column (looked for {', '.join(STEP_COLUMNS)})")
        cols: dict[int, str] = {}
        runs = set()
        for j, h in enumerate(head):
            if j == istep or h.endswith(("__MIN", "__MAX")) or h.startswith("_"):
                continue
            if " - " in h:  # W&B panel export: "RUN NAME - key"
                run, h = h.split(" - ", 1)
                runs.add(run)
            cols[j] = h
        if len(runs) > 1:
            raise LogError(target, None, f"{len(runs)} runs in one export ({', '.join(sorted(runs))}): export one run")
        recs = []
        for r in rows:
            if not r or istep >= len(r) or not r[istep].strip():
                continue
            rec = {k: metric_float(r[j]) for j, k in cols.items() if j < len(r) and r[j].strip() != ""}
            recs.append((metric_float(r[istep]), rec))
        return _from_records(target, self.name, recs)


class TensorBoardReader(LogReader):
    """TensorBoard event files, read by TensorBoard's own readers (:mod:`entflow.analysis.tensorboard`).

    One run = one folder of ``events.out.tfevents.*`` files; event files in several folders under
    the path are several runs (TRL writes ``runs/<date>_<host>/`` per run).
    """

    name = "tensorboard"
    fast = True  # False: always EventAccumulator

    def find(self, path: Path) -> Path | None:
        if path.is_file():
            return path if path.name.startswith("events.out.tfevents") else None
        dirs = sorted({p.parent for p in path.rglob("events.out.tfevents*")})
        if len(dirs) > 1:
            names = ", ".join(str(d.relative_to(path)) for d in dirs[:5])
            raise LogError(path, None, f"TensorBoard runs in {len(dirs)} folders ({names}): several runs? pass one")
        return dirs[0] if dirs else None

    def read(self, target: Path) -> LogData:
        if target.is_file():  # one events file: read its folder (the run)
            target = target.parent
        series = read_scalars(target, fast=self.fast)
        if not series:
            raise LogError(target, None, "empty log: no scalar in the event files")
        return LogData(target, self.name, series)


LOOKED_FOR = (
    "an entflow run's metrics.jsonl, trainer_state.json, a verl file-logger .jsonl, a .csv export, "
    "TensorBoard events.out.tfevents.*"
)
READERS: list[LogReader] = [EntflowRunReader(), TrlStateReader(), VerlJsonlReader(), CsvReader(), TensorBoardReader()]


def read_log(path: str | os.PathLike) -> LogData:
    """Read a log, detecting the format (see the module docstring).

    Raises:
        LogError: the path does not exist, no reader recognises it, or it is empty / malformed.
    """
    p = Path(path)
    if not p.exists():
        raise LogError(p, None, f"no such file or directory (expected {LOOKED_FOR})")
    for reader in READERS:
        target = reader.find(p)
        if target is not None:
            return reader.read(target)
    raise LogError(p, None, f"no training log found (looked for {LOOKED_FOR})")


def log_from_records(
    records: Iterable[Mapping[str, Any]], path: str | os.PathLike = "<records>", fmt: str = "records"
) -> LogData:
    """A :class:`LogData` from in-memory records that carry a numeric ``step`` (TRL's ``state.log_history``,
    entflow's metrics lines, a verl driver's ``{"step": s, **metrics}``); the others are ignored."""
    stepped = (
        (float(r["step"]), r) for r in records if isinstance(r, Mapping) and isinstance(r.get("step"), int | float)
    )
    return _from_records(Path(path), fmt, stepped, skip=("step", "epoch"))
