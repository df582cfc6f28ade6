"""Training logs of TRL, verl, W&B/MLflow exports and entflow → named series → :func:`analyze_series`.

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

Which log key is the entropy, the reward, the validation metric and the validation entropy comes
from :data:`KEY_TABLE` (first match wins; ``*`` matches anything, ``/`` included), which users may
extend with :func:`add_key`, or from the ``--entropy-key`` / ``--reward-key`` / ``--val-key``
overrides. Every problem is a :class:`entflow.errors.LogError` naming the file and the key: an
empty log, no entropy or reward key, non-finite values of a key used, fewer points than the fit
needs, steps going backwards in one file, or several runs in one folder.
"""

from __future__ import annotations

import csv
import fnmatch
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from entflow.analysis.collapse import CollapseAnalysis, analyze_series
from entflow.errors import AnalysisError, LogError

__all__ = [
    "KEY_TABLE",
    "MONITOR_KEYS",
    "READERS",
    "CollapseMonitor",
    "LogData",
    "LogReader",
    "add_key",
    "analyze_log",
    "log_from_records",
    "read_log",
    "resolve_keys",
]

# role -> log keys, most specific first (docs/analyze.md). Extend with add_key().
KEY_TABLE: dict[str, list[str]] = {
    "entropy": ["entropy", "train/entropy", "actor/entropy"],
    "reward": [
        "reward/mean",  # entflow
        "reward",  # TRL (trainer_state.json)
        "train/reward",  # TRL through TensorBoard / W&B
        "critic/score/mean",  # verl: the verifier's score
        "critic/rewards/mean",  # verl: the reward after KL-in-reward
        "rewards/*/mean",  # TRL: one reward function
        "train/rewards/*/mean",
    ],
    "val": [
        "val/acc",  # entflow
        "eval_reward",  # TRL (trainer_state.json)
        "eval/reward",  # TRL through TensorBoard / W&B
        "val-core/*/acc/mean@*",  # verl
        "val-core/*/reward/mean@*",
        "val/test_score/*",  # older verl
    ],
    "val_entropy": ["val/entropy", "eval_entropy", "eval/entropy"],
    # shown in the plots and source.keys, not fitted
    "response_length": [
        "response/len_mean",
        "completions/mean_length",
        "train/completions/mean_length",
        "response_length/mean",
    ],
    "clip": ["clip_ratio/region_mean", "train/clip_ratio/region_mean", "actor/pg_clipfrac", "clip/frac_high"],
}


def add_key(role: str, pattern: str, *, first: bool = True) -> None:
    """Add a log key (or ``*`` pattern) for ``role`` to :data:`KEY_TABLE`, tried first by default."""
    if role not in KEY_TABLE:
        raise LogError("KEY_TABLE", role, f"unknown role; known: {', '.join(KEY_TABLE)}")
    keys = KEY_TABLE[role]
    if pattern in keys:
        keys.remove(pattern)
    keys.insert(0 if first else len(keys), pattern)


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


def _num(v: Any) -> float:
    if v is None:
        return math.nan
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


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
                x[-1] = _num(v)
                continue
            s.append(step)
            x.append(_num(v))
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
        lines = target.read_bytes().splitlines()
        while lines and not lines[-1].strip():
            lines.pop()
        recs = []
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                if i == len(lines) - 1:
                    continue  # the line in flight when the run died
                raise LogError(target, None, f"line {i + 1} is not valid JSON ({e.msg})") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("data"), dict):
                raise LogError(target, None, f"line {i + 1} is not a verl file-logger record {{step, data}}")
            recs.append((_num(rec.get("step")), rec["data"]))
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
                per_key.setdefault(r[ik], []).append((_num(r[istep]), _num(r[iv])))
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
            rec = {k: _num(r[j]) for j, k in cols.items() if j < len(r) and r[j].strip() != ""}
            recs.append((_num(r[istep]), rec))
        return _from_records(target, self.name, recs)


class TensorBoardReader(LogReader):
    """TensorBoard event files, read by TensorBoard's own readers.

    One run = one folder of ``events.out.tfevents.*`` files; event files in several folders under
    the path are several runs (TRL writes ``runs/<date>_<host>/`` per run). The reader is
    TensorBoard's data server (``tensorboard_data_server``, the Rust loader behind
    ``tensorboard --load_fast``: about 0.5 M scalars a second here), loaded once with every scalar
    kept, and queried over its gRPC API; where it cannot run, ``EventAccumulator`` (pure Python:
    about 20 k scalars a second, so a 10,000-step log of 60 tags takes ~30 s). A step logged twice
    (a resumed run) keeps its latest value.
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
        series = _read_data_server(target) if self.fast else None
        if series is None:
            series = _read_event_accumulator(target)
        if not series:
            raise LogError(target, None, "empty log: no scalar in the event files")
        return LogData(target, self.name, series)


def _latest_per_step(steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted by step; of a step logged twice, the value written last."""
    order = np.lexsort((walls, steps))
    steps, values = steps[order], values[order]
    keep = np.ones(steps.size, dtype=bool)
    keep[:-1] = steps[1:] != steps[:-1]
    return steps[keep], values[keep]


def _read_event_accumulator(target: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(target), size_guidance={"scalars": 0})
    acc.Reload()
    series = {}
    for tag in acc.Tags().get("scalars", []):
        ev = acc.Scalars(tag)
        steps = np.fromiter((e.step for e in ev), dtype=np.float64, count=len(ev))
        walls = np.fromiter((e.wall_time for e in ev), dtype=np.float64, count=len(ev))
        vals = np.fromiter((e.value for e in ev), dtype=np.float64, count=len(ev))
        series[tag] = _latest_per_step(steps, walls, vals)
    return series


def _wait_for_load(proc: Any, drain: Any, timeout_s: float) -> bool:
    """True once the data server logs the end of its (only) load cycle; False if it exits first or
    ``timeout_s`` passes. Its stderr is read to the end by the thread ``drain`` (so a silent server
    cannot hang us, nor a chatty one fill the pipe)."""
    import threading

    done = threading.Event()

    def read() -> None:
        for raw in proc.stderr:
            if b"Finished load cycle" in raw:
                done.set()
        done.set()  # end of stderr: the server exited

    drain.append(threading.Thread(target=read, daemon=True))
    drain[0].start()
    return done.wait(timeout_s) and proc.poll() is None


def _read_data_server(target: Path, timeout_s: float = 120.0) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """All scalars of the run in ``target`` through TensorBoard's data server; None if it cannot run."""
    import subprocess
    import tempfile

    try:
        import grpc
        from tensorboard.data import grpc_provider
        from tensorboard.data.proto import data_provider_pb2
        from tensorboard_data_server import server_binary
    except ImportError:
        return None
    binary = server_binary()
    if not binary or not os.path.isfile(binary):
        return None
    with tempfile.TemporaryDirectory(prefix="entflow_tb_") as tmp:
        port_file = Path(tmp) / "port"
        args = [binary, f"--logdir={target}", "--reload=once", "--port=0", f"--port-file={port_file}"]
        args += ["--samples-per-plugin=scalars=all", "--die-after-stdin", "--verbose"]
        try:
            proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError:
            return None
        drain: list[Any] = []
        loaded = False
        try:
            loaded = _wait_for_load(proc, drain, timeout_s)
            if not loaded:
                return None
            port = int(port_file.read_text().strip())
            channel = grpc.insecure_channel(f"localhost:{port}", options=[("grpc.max_receive_message_length", 1 << 30)])
            stub = grpc_provider.make_stub(channel)
            req = data_provider_pb2.ReadScalarsRequest()
            req.plugin_filter.plugin_name = "scalars"
            req.downsample.num_points = 2**31 - 1
            res = stub.ReadScalars(req, timeout=timeout_s)
            channel.close()
        except (grpc.RpcError, OSError, ValueError):
            return None
        finally:
            if not loaded:
                proc.kill()
            if proc.stdin:
                proc.stdin.close()  # --die-after-stdin
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if drain:
                drain[0].join(timeout=2)
            if proc.stderr and not (drain and drain[0].is_alive()):  # closing blocks on a pending read
                proc.stderr.close()
    series = {}
    for run in res.runs:
        for tag in run.tags:
            d = tag.data
            series[tag.tag_name] = _latest_per_step(
                np.asarray(d.step, dtype=np.float64), np.asarray(d.wall_time), np.asarray(d.value, dtype=np.float64)
            )
    return series


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


def _match(log: LogData, patterns: Sequence[str]) -> tuple[str | None, list[str]]:
    """The first key matching the first pattern that matches any (sorted), and the other matches."""
    keys = log.keys()
    for pat in patterns:
        hits = [k for k in keys if fnmatch.fnmatchcase(k, pat)]
        if hits:
            return hits[0], hits[1:]
    return None, []


def resolve_keys(
    log: LogData, overrides: dict[str, str | None] | None = None, table: dict[str, list[str]] | None = None
) -> dict[str, str | None]:
    """Which log key plays each role of :data:`KEY_TABLE` (an override wins; it must be in the log).

    Raises:
        LogError: an override names a key the log lacks, or no key is found for ``entropy`` or ``reward``.
    """
    table = KEY_TABLE if table is None else table
    out: dict[str, str | None] = {}
    for role, patterns in table.items():
        given = (overrides or {}).get(role)
        if given:
            if given not in log.series:
                near = [k for k in log.keys() if given.split("/")[-1] in k][:8]
                raise LogError(log.path, given, f"--{role.replace('_', '-')}-key not in the log; similar: {near}")
            out[role] = given
            continue
        key, others = _match(log, patterns)
        out[role] = key
        if others:
            log.notes.append(f"{role}: using {key}; also in the log: {', '.join(others[:5])}")
    for role in ("entropy", "reward"):
        if out[role] is None:
            shown = ", ".join(log.keys()[:25])
            raise LogError(
                log.path,
                role,
                f"no {role} key (looked for {', '.join(table[role])}); the log has: {shown}; pass --{role}-key",
            )
    return out


def _finite(log: LogData, key: str) -> tuple[np.ndarray, np.ndarray]:
    s, v = log.series[key]
    bad = ~np.isfinite(v)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise LogError(log.path, key, f"{int(bad.sum())} non-finite value(s), first at step {s[i]:g} ({v[i]})")
    return s, v


def analyze_log(
    path: str | os.PathLike | LogData,
    *,
    entropy_key: str | None = None,
    reward_key: str | None = None,
    val_key: str | None = None,
    val_entropy_key: str | None = None,
    **kwargs: Any,
) -> tuple[LogData, CollapseAnalysis]:
    """Read a log (or take a :class:`LogData`) and run :func:`analyze_series` on its series.

    The training series are the steps where both the entropy and the reward key were logged; the
    validation series is the ``val`` key with the ``val_entropy`` key at the same steps (else the
    training entropy at the nearest step). ``kwargs`` go to :func:`analyze_series`. The result's
    ``source`` holds ``format``, ``path`` and ``keys``.

    Raises:
        LogError: anything :func:`read_log` / :func:`resolve_keys` raise, non-finite values of a
            key used, or too few points for the fit (naming the file and the key).
    """
    log = path if isinstance(path, LogData) else read_log(path)
    keys = resolve_keys(
        log, {"entropy": entropy_key, "reward": reward_key, "val": val_key, "val_entropy": val_entropy_key}
    )
    es, ev = _finite(log, keys["entropy"])
    rs, rv = _finite(log, keys["reward"])
    steps, ie, ir = np.intersect1d(es, rs, assume_unique=True, return_indices=True)
    val_args: dict[str, Any] = {}
    if keys["val"] is not None:
        vs, vv = _finite(log, keys["val"])
        val_args = {"val_steps": vs, "val": vv}
        if keys["val_entropy"] is not None:
            hs, hv = _finite(log, keys["val_entropy"])
            common, _, ih = np.intersect1d(vs, hs, assume_unique=True, return_indices=True)
            if common.size == vs.size:
                val_args["val_entropy"] = hv[ih]
            else:
                keys["val_entropy"] = None
    field_key = {
        "steps": keys["entropy"],
        "entropy": keys["entropy"],
        "reward": keys["reward"],
        "val": keys["val"],
        "val_steps": keys["val"],
        "val_entropy": keys["val_entropy"],
    }
    try:
        result = analyze_series(steps, ev[ie], rv[ir], **val_args, **kwargs)
    except AnalysisError as e:
        key = field_key.get(e.field, e.field)
        msg = str(e).split(": ", 1)[-1]
        if e.field in ("entropy", "steps") and steps.size < len(es):
            msg += f" ({steps.size} steps carry both {keys['entropy']} and {keys['reward']})"
        raise LogError(log.path, key, msg) from None
    keys_used = {k: v for k, v in keys.items() if v is not None}
    if result.target == "reward":
        keys_used = {k: v for k, v in keys_used.items() if k not in ("val", "val_entropy")}
        if keys["val"] is not None:
            log.notes.append(f"{keys['val']} has fewer points than the fit needs: R is the training reward")
    source = {"format": log.format, "path": str(log.path), "keys": keys_used, "notes": list(log.notes)}
    return log, replace(result, source=source)


def log_from_records(
    records: Iterable[Mapping[str, Any]], path: str | os.PathLike = "<records>", fmt: str = "records"
) -> LogData:
    """A :class:`LogData` from in-memory records that carry a numeric ``step`` (TRL's ``state.log_history``,
    entflow's metrics lines, a verl driver's ``{"step": s, **metrics}``); the others are ignored."""
    stepped = (
        (float(r["step"]), r) for r in records if isinstance(r, Mapping) and isinstance(r.get("step"), int | float)
    )
    return _from_records(Path(path), fmt, stepped, skip=("step", "epoch"))


MONITOR_KEYS = ("entflow/law_ceiling", "entflow/pred_final", "entflow/entropy_retention")


class CollapseMonitor:
    """The live side of :func:`analyze_log`, shared by the TRL callback and the verl monitor.

    :meth:`check` analyses the log so far and returns the ``entflow/*`` metrics of
    :data:`MONITOR_KEYS` (``entflow/pred_final`` only when the early prediction exists) and, the
    first time the verdict is ``collapsed`` (entropy retention below ``retention_threshold`` while
    the reward has stalled), a warning message; later calls return no message. A log still too
    short (or otherwise unusable) gives ``({}, None)`` and keeps the reason in ``last_error``.
    """

    def __init__(
        self,
        *,
        retention_threshold: float = 0.5,
        stall_ratio: float = 0.1,
        early_frac: float = 0.15,
        entropy_key: str | None = None,
        reward_key: str | None = None,
        val_key: str | None = None,
    ):
        self.options = {
            "retention_threshold": retention_threshold,
            "stall_ratio": stall_ratio,
            "early_frac": early_frac,
            "entropy_key": entropy_key,
            "reward_key": reward_key,
            "val_key": val_key,
        }
        self.warned = False
        self.last_error: str | None = None
        self.last: CollapseAnalysis | None = None

    def check(self, log: LogData) -> tuple[dict[str, float], str | None]:
        """(metrics to log, warning message or None) for the log so far."""
        try:
            _, analysis = analyze_log(log, **self.options)
        except LogError as e:
            self.last_error = str(e)
            return {}, None
        self.last, self.last_error = analysis, None
        out = {"entflow/law_ceiling": analysis.ceiling, "entflow/entropy_retention": analysis.entropy["retention"]}
        pred = analysis.prediction["final"]
        if math.isfinite(pred):
            out["entflow/pred_final"] = pred
        out = {k: float(v) for k, v in out.items() if math.isfinite(v)}
        message = None
        if analysis.collapse["collapsed"] and not self.warned:
            self.warned = True
            sug = analysis.suggestion
            message = (
                f"entflow: entropy collapse at step {analysis.steps[1]:g}: "
                + "; ".join(analysis.collapse["evidence"])
                + f". Suggestion: {sug['trl']} ({sug['why']})"
            )
        return out, message
