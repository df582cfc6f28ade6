"""What the trainer needs of a task (docs/design.md §10), and the registry of named tasks.

A task is a seeded, unlimited generator of :class:`Problem` s with a fixed held-out validation
set and a verifier: the trainer calls ``sample_problems(n, rng)``, ``validation_set()``,
``reward(problem, response)`` and reads ``max_response_len`` (optionally ``pop_metrics()`` for
per-step task metrics). :class:`Task` implements the split and the sampling once; a subclass
implements ``_sample_one`` and ``reward``.

Named tasks are found through the ``entflow.tasks`` entry point group, so a package (the lab, or
a user's) adds tasks without the trainer importing it: ``countdown = "entflow.lab.tasks:CountdownTask"``
in ``pyproject.toml``.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, ClassVar, TypeVar

from entflow.errors import ParameterError, UnknownMethodError

ENTRY_POINT_GROUP = "entflow.tasks"
T = TypeVar("T")


@dataclass(frozen=True)
class Problem:
    prompt: str  # the text fed to the model (short)
    answer: Any  # what the verifier needs


class Task:
    """Base class of a generated task. Subclasses set ``name``, ``max_response_len`` and
    ``validation_size`` and implement ``_sample_one`` and ``reward``."""

    name: ClassVar[str] = "task"
    max_response_len: int = 16  # tokens, including the eos token
    validation_size: int = 64

    def _sample_one(self, rng: random.Random) -> Problem:  # pragma: no cover - abstract
        raise NotImplementedError

    def reward(self, problem: Problem, response: str) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- shared machinery --------------------------------------------------------------------
    def _params(self) -> tuple:
        return ()

    def validation_set(self) -> list[Problem]:
        """Fixed held-out problems: the same list for every call and every instance with the same
        parameters (seeded by the task name and parameters, not by any global RNG)."""
        if getattr(self, "_val", None) is None:
            seed = zlib.crc32(repr((self.name, "validation", self._params())).encode())
            rng = random.Random(seed)
            seen: dict[str, Problem] = {}
            tries = 0
            while len(seen) < self.validation_size:
                p = self._sample_one(rng)
                seen.setdefault(p.prompt, p)
                tries += 1
                if tries > 100 * self.validation_size:  # pragma: no cover - tiny problem spaces only
                    raise ParameterError(self.name, "validation_size", "exceeds the number of distinct problems")
            self._val = list(seen.values())
            self._val_prompts = frozenset(seen)
        return list(self._val)

    def is_validation(self, problem: Problem) -> bool:
        self.validation_set()
        return problem.prompt in self._val_prompts

    def _held_out_prompts(self) -> frozenset[str]:
        """The prompts training never draws: the validation set's (a task with a further held-out
        split adds its prompts)."""
        self.validation_set()
        return self._val_prompts

    def sample_problems(self, n: int, rng: random.Random) -> list[Problem]:
        """``n`` training problems drawn with ``rng`` (repeats possible), never a held-out one (the
        validation set's, :meth:`_held_out_prompts`)."""
        if n < 0:
            raise ParameterError(self.name, "n", f"must be >= 0, got {n}")
        held_out = self._held_out_prompts()
        out: list[Problem] = []
        while len(out) < n:
            p = self._sample_one(rng)
            if p.prompt not in held_out:
                out.append(p)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._params()}"


def task_classes() -> dict[str, type[Task]]:
    """Every task registered under the ``entflow.tasks`` entry point group, by name."""
    return {ep.name: ep.load() for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_task(name: str, **params: Any) -> Task:
    """Build the registered task ``name``; unknown names and parameters raise typed errors."""
    return build_task(task_classes(), name, **params)


def build_task(classes: Mapping[str, type[T]], name: str, **params: Any) -> T:
    """``classes[name](**params)``: an unknown name raises :class:`UnknownMethodError` naming the
    known ones, a parameter the class does not take :class:`ParameterError` (a registry of tasks:
    the entry points' of :func:`load_task`, the lab's ``TASKS``)."""
    if name not in classes:
        raise UnknownMethodError(name, sorted(classes), kind="task")
    try:
        return classes[name](**params)
    except TypeError as e:
        raise ParameterError(name, ",".join(sorted(params)), f"not accepted: {e}") from e
