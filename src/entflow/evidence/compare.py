"""Run several methods on the same task, seed and prompts, side by side (``entflow compare``,
``entflow run``, the runs of ``entflow reproduce``).

Each method gets its own run directory under ``out_dir/NAME/``; runs go in parallel worker
processes (one torch thread each), and the parent shows one progress bar per run by reading
their ``metrics.jsonl`` files. The report is written to ``out_dir/NAME/``. A comparison's runs are
trained by a setting kind of :mod:`entflow.evidence.settings` (``lab`` by default; ``real`` for a
real model's configs).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from entflow.errors import ConfigError
from entflow.lab.config import LabConfig, build_config
from entflow.trainer.config import TrainConfig
from entflow.trainer.progress import ProgressBar
from entflow.trainer.rundir import read_jsonl


def method_specs(methods: list[Any]) -> list[dict[str, Any]]:
    """Normalise ``["grpo", {"method": "steer", "params": {...}, "name": "steer_05"}]``."""
    specs = []
    for m in methods:
        if isinstance(m, str):
            specs.append({"method": m, "params": {}, "name": m.replace("+", "_")})
        elif isinstance(m, dict) and "method" in m:
            unknown = set(m) - {"method", "params", "name"}
            if unknown:
                raise ConfigError("methods", f"unknown keys {sorted(unknown)} in {m}")
            specs.append(
                {"method": m["method"], "params": dict(m.get("params") or {}), "name": m.get("name") or m["method"]}
            )
        else:
            raise ConfigError("methods", f"each entry is a name or a mapping with 'method', got {m!r}")
    names = [s["name"] for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError("methods", f"run names must be unique, got {names}")
    if not specs:
        raise ConfigError("methods", "at least one method is needed")
    return specs


def parse_seeds(value: Any) -> list[int]:
    """``0,1,2`` / ``"0,1,2"`` / ``[0, 1, 2]`` / ``3`` → a list of distinct integer seeds."""
    items = value if isinstance(value, list | tuple) else str(value).replace(" ", "").split(",")
    try:
        seeds = [int(x) for x in items if str(x) != ""]
    except ValueError:
        raise ConfigError("seeds", f"expected integers like 0,1,2, got {value!r}") from None
    if not seeds or len(set(seeds)) != len(seeds) or any(x < 0 for x in seeds):
        raise ConfigError("seeds", f"expected distinct integers >= 0, got {value!r}")
    return seeds


def compare_configs(
    name: str,
    methods: list[Any],
    base: dict[str, Any],
    overrides: list[str],
    out_dir: str = "runs",
    seeds: list[int] | None = None,
    cls: type[TrainConfig] = LabConfig,
) -> list[TrainConfig]:
    """One validated config per method (× seed), identical except for method, params, name and
    seed. With several ``seeds`` a run is named ``<method>-s<seed>`` and carries ``group=<method>``,
    which the report uses to average over seeds. ``cls``: the config class (the lab's, or a real
    model's ``entflow.hf.setup.RealTrainConfig``)."""
    configs = []
    for spec in method_specs(methods):
        for seed in seeds or [None]:
            values = dict(base) | {"method": spec["method"], "out_dir": str(Path(out_dir) / name)}
            values["name"] = spec["name"] if seed is None or len(seeds or []) == 1 else f"{spec['name']}-s{seed}"
            values["group"] = spec["name"]
            values["method_params"] = dict(base.get("method_params") or {}) | spec["params"]
            cfg = build_config(values, overrides, cls=cls)
            if seed is not None:
                cfg.seed = seed
            configs.append(cfg)
    return configs


def compare_run_configs(
    base: dict[str, Any], methods_arg: str | None, name: str, overrides: list[str], cls: type | None = None
) -> tuple[list[TrainConfig], str]:
    """The validated configs of a comparison (one per method and seed) and its ``out_dir``:
    ``base["methods"]`` (or ``methods_arg``, comma-separated) on ``base`` with the overrides;
    ``cls``: the config class (default the lab's). ``out_dir=`` and ``seeds=`` overrides are the
    comparison's (``seeds=0,1,2``: every method once per seed; ``seed=`` one seed for every run)."""
    from entflow.trainer.config import parse_override

    base = dict(base)
    methods = methods_arg.split(",") if methods_arg else base.pop("methods", None)
    base.pop("methods", None)
    if not methods:
        raise ConfigError("methods", "give --methods a,b,c or a `methods:` list in --config")
    out_dir = base.pop("out_dir", "runs")
    seeds_value = base.pop("seeds", None)
    rest = []
    for text in overrides:  # out_dir is the comparison's folder; name is per run
        key, value = parse_override(text)
        if key == "out_dir":
            out_dir = str(value)
        elif key == "seeds":  # seeds=0,1,2: every method once per seed
            seeds_value = text.split("=", 1)[1]
        elif key == "seed":  # one seed for every run: overrides the config's seeds list
            seeds_value = None
            rest.append(text)
        elif key == "name":
            raise ConfigError("name", "each run is named after its method; use --name for the comparison")
        else:
            rest.append(text)
    overrides = rest
    seeds = parse_seeds(seeds_value) if seeds_value is not None else None
    extra = {} if cls is None else {"cls": cls}
    configs = compare_configs(name, methods, base, overrides, out_dir=out_dir, seeds=seeds, **extra)
    return configs, out_dir


def compare_and_report(
    base: dict[str, Any],
    methods_arg: str | None,
    name: str,
    overrides: list[str],
    jobs: int,
    resume: bool,
    overwrite: bool,
    kind: str = "lab",
) -> tuple[list[Path], Path]:
    """Train the methods of ``base["methods"]`` (or ``methods_arg``) side by side and write the
    report to ``out_dir/name``. ``kind``: the setting kind (:mod:`entflow.evidence.settings`) whose
    config class the configs are and which trains them (``real``: a real model's). Returns the run
    directories and the report's path."""
    from entflow.analysis.report import write_report
    from entflow.evidence.settings import get_setting_kind

    runner = get_setting_kind(kind)
    configs, out_dir = compare_run_configs(base, methods_arg, name, overrides, runner.config_class())
    if jobs < 1:
        raise ConfigError("jobs", f"must be >= 1, got {jobs}")
    run_dirs = runner.train(configs, jobs=jobs, resume=resume, overwrite=overwrite)
    return run_dirs, write_report(run_dirs, Path(out_dir) / name)


def run_compare(
    configs: list[LabConfig],
    jobs: int = 2,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    on_done: Callable[[int, Path], None] | None = None,
) -> list[Path]:
    """Train every lab config (``jobs`` at a time) from one warm start and return their run
    directories (``on_done``: as :func:`train_side_by_side`)."""
    from entflow.lab.setup import resolve_policy, train_lab

    if not configs:
        return []
    policy = resolve_policy(configs[0])  # pretrain once, before the workers start
    for cfg in configs:
        cfg.policy_path = cfg.policy_path or str(policy)
    return train_side_by_side(configs, train_lab, jobs, resume, overwrite, progress, on_done)


def train_side_by_side(
    configs: list[TrainConfig],
    train: Callable[..., Any],
    jobs: int,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    on_done: Callable[[int, Path], None] | None = None,
) -> list[Path]:
    """Train ``configs`` with ``train(cfg, resume=, overwrite=, on_step=)`` (a module-level function:
    ``entflow.lab.setup.train_lab``, ``entflow.hf.setup.train_real``), ``jobs`` at a time in spawned
    worker processes (``jobs`` = 1: in this process), with one progress row per run. ``on_done(i,
    run_dir)`` is called in this process as soon as ``configs[i]`` has finished (so what it writes
    survives an interruption of the runs after it). Returns the run directories in the order of
    ``configs``."""
    if not configs:
        return []
    for cfg in configs:
        cfg.progress = False
    bar = _CompareProgress(configs) if progress else None
    done = on_done or (lambda i, d: None)
    if jobs <= 1:
        dirs = []
        for i, c in enumerate(configs):
            dirs.append(Path(train(c, resume=resume, overwrite=overwrite, on_step=bar.refresh if bar else None)))
            done(i, dirs[-1])
    else:
        payloads = [(type(c), dataclasses.asdict(c)) for c in configs]
        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
            futures = [pool.submit(_train_worker, train, cls, p, resume, overwrite) for cls, p in payloads]
            reported: set[int] = set()
            while len(reported) < len(futures):
                for i, f in enumerate(futures):
                    if i not in reported and f.done():
                        reported.add(i)
                        done(i, Path(f.result()))  # a failed run raises here, as before
                if bar:
                    bar.refresh()
                if len(reported) < len(futures):
                    time.sleep(0.5)
            dirs = [Path(f.result()) for f in futures]
    if bar:
        bar.refresh()
        bar.close()
    return dirs


def _train_worker(
    train: Callable[..., Any], cls: type[TrainConfig], cfg_dict: dict[str, Any], resume: bool, overwrite: bool
) -> str:
    return str(train(cls(**cfg_dict), resume=resume, overwrite=overwrite))


class _CompareProgress:
    """One progress row per run (:class:`~entflow.trainer.progress.ProgressBar`), fed from the
    runs' metrics files."""

    def __init__(self, configs: list[TrainConfig]):
        self.configs = configs
        self._bar = ProgressBar()
        self._rows = [self._bar.add(c.run_name, total=c.steps) for c in configs]
        self._last = [0] * len(configs)

    def refresh(self, _record: dict[str, Any] | None = None) -> None:
        for i, (cfg, row) in enumerate(zip(self.configs, self._rows, strict=True)):
            rows = [r for r in read_jsonl(cfg.run_dir / "metrics.jsonl") if r.get("step", 0) > 0]
            if not rows or rows[-1]["step"] == self._last[i]:
                continue
            last = rows[-1]
            self._last[i] = last["step"]
            info = f"reward {last.get('reward/mean') or 0:.2f}  H {last.get('entropy') or 0:.3f}"
            vals = [r["val/acc"] for r in rows if r.get("val/acc") is not None]
            if vals:
                info += f"  val {vals[-1]:.2f}"
            self._bar.update(row, completed=last["step"], info=info)

    def close(self) -> None:
        self._bar.close()
