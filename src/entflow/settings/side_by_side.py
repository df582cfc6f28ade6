"""Several runs side by side: ``jobs`` at a time in spawned worker processes (one torch thread
each), with one progress row per run read from its ``metrics.jsonl`` (``entflow compare``,
``entflow run``, the runs of ``entflow reproduce``). Every setting trains its runs through it
(:meth:`entflow.settings.base.SettingKind.train`)."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from entflow.trainer.config import TrainConfig
from entflow.trainer.progress import ProgressBar
from entflow.trainer.rundir import read_jsonl

__all__ = ["train_side_by_side"]


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
