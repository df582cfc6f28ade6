"""What a run shows on the terminal: one progress bar and one quiet mode for transformers.

:class:`ProgressBar` is the one progress display of entflow (training, warm start, comparisons,
evaluation): a rich bar with one row per tracked job on a terminal; elsewhere (a log file, nohup,
CI) plain lines on stderr, at most one per ``line_every_s`` seconds per row plus one when a row
finishes. :func:`quiet_transformers` silences transformers' own progress bars and warnings
(weight loading and saving) while entflow shows its own, and restores them afterwards.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' progress bars and its logging below ``ERROR`` inside the block;
    restore both on exit (also on an exception)."""
    from transformers.utils import logging as hf_logging

    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()
        hf_logging.set_verbosity(level)


class ProgressBar:
    """A progress display with one row per job: ``add`` a row, ``update`` it, ``close`` at the end.

    ``enabled=False`` shows nothing (every call is a no-op). ``terminal`` (default: whether stderr
    is a terminal, as rich sees it) picks the rich bar; off a terminal each row prints
    ``"<name> <completed>/<total> <info> (<elapsed> s)"`` lines instead. ``transient`` removes the
    bar from the terminal when it closes. Usable as a context manager.
    """

    def __init__(
        self,
        enabled: bool = True,
        *,
        unit: str = "step",
        transient: bool = False,
        terminal: bool | None = None,
        line_every_s: float = 5.0,
    ) -> None:
        self.enabled = enabled
        self._unit = unit
        self._line_every_s = line_every_s
        self._rows: list[dict[str, Any]] = []
        self._t0 = time.perf_counter()
        self._live = None
        if not enabled:
            return
        from rich.console import Console

        console = Console(stderr=True)
        if terminal is None:
            terminal = console.is_terminal
        if terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self._live = Progress(
                TextColumn("[bold]{task.description:<22}"),
                BarColumn(),
                TextColumn(f"{unit} {{task.completed:>3}}/{{task.total}}"),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
                transient=transient,
            )
            self._live.start()

    def add(self, name: str, total: int, completed: int = 0) -> int:
        """A new row ``name`` counting up to ``total``; returns its id for :meth:`update`."""
        row = {"name": name, "total": total, "completed": completed, "info": "", "printed": float("-inf")}
        if self._live is not None:
            row["task"] = self._live.add_task(name, total=total, completed=completed, info="")
        self._rows.append(row)
        return len(self._rows) - 1

    def update(self, row: int = 0, *, completed: int | None = None, advance: int = 0, info: str | None = None) -> None:
        """Set row ``row`` to ``completed`` (or move it on by ``advance``) and its text to ``info``."""
        if not self.enabled:
            return
        r = self._rows[row]
        r["completed"] = (r["completed"] if completed is None else completed) + advance
        if info is not None:
            r["info"] = info
        if self._live is not None:
            self._live.update(r["task"], completed=r["completed"], info=r["info"])
            return
        now = time.perf_counter()
        if r["completed"] >= r["total"] or now - r["printed"] >= self._line_every_s:
            r["printed"] = now
            text = f"{r['name']} {self._unit} {r['completed']}/{r['total']}"
            if r["info"]:
                text += f"  {r['info']}"
            print(f"{text}  ({now - self._t0:.0f} s)", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Stop the display (idempotent)."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        self.enabled = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
