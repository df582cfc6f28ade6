"""A test hook: the run SIGKILLs itself at a named point (the kill-and-resume tests,
``tests/trainer/test_kill_resume.py`` and ``tests/hf/test_kill_resume_real.py``).

``ENTFLOW_TEST_KILL_AT="PHASE:STEP"`` in the environment of an ``entflow train`` process makes it
send itself SIGKILL — no handler, no ``finally``, no flush runs, as when the machine kills it —
the first time the run reaches ``PHASE`` at training step ``STEP``:

``rollout``     after the step's responses are generated, before their statistics
``update``      after the step's first optimizer step (the weights in memory have moved)
``checkpoint``  inside the checkpoint's atomic write, after ``torch.save``, before the rename:
                the temporary file is left torn (its second half cut off)
``metrics``     while the step's ``metrics.jsonl`` line is written: the line is left torn
``samples``     while the step's first ``samples.jsonl`` line is written: the line is left torn

A kill from outside at a random time hits these points by luck only (a step of a tiny run is a
few ms of its seconds); the hook hits each one every time. The variable is read once, when this
module is imported; unset (every real run), :func:`kill_point` returns at its first comparison.
"""

from __future__ import annotations

import os
import signal
from typing import IO, Any

PHASES = ("rollout", "update", "checkpoint", "metrics", "samples")


def _parse(value: str | None) -> tuple[str, int] | None:
    if not value:
        return None
    phase, _, step = value.partition(":")
    if phase not in PHASES or not step.isdigit():
        raise ValueError(f"ENTFLOW_TEST_KILL_AT={value!r}: expected PHASE:STEP with PHASE one of {PHASES}")
    return phase, int(step)


_KILL_AT = _parse(os.environ.get("ENTFLOW_TEST_KILL_AT"))


def kill_point(phase: str, step: Any, file: IO[Any] | None = None, written: int = 0) -> None:
    """SIGKILL this process if ``ENTFLOW_TEST_KILL_AT`` names ``phase`` at ``step``; with ``file``,
    first cut the second half of its last ``written`` bytes off (a write the kill tore)."""
    if _KILL_AT is None or _KILL_AT != (phase, step):
        return
    if file is not None:
        file.flush()
        fd = file.fileno()
        os.ftruncate(fd, os.fstat(fd).st_size - written // 2)
        os.fsync(fd)
    os.kill(os.getpid(), signal.SIGKILL)
