"""Verifiable rewards (docs/design.md §11) with TRL's reward-function signature.

Every reward here is ``reward(completions, **kwargs) -> list[float]``: ``completions`` are the
response texts (or TRL's conversational form, a list of messages per completion — the last
message's ``content`` is scored), and the dataset's columns arrive as keyword lists of the same
length (``answer=[...]``; ``prompts=[...]`` too, unused here). So they plug into
``trl.GRPOTrainer(reward_funcs=[...])`` unchanged, and the entflow trainer calls them the same way.

- :func:`math_verify_reward` — ``math-verify``: the response's answer (a ``\\boxed{}`` expression
  if there is one, else the last number or expression) is compared symbolically with the gold
  answer (parsed once per distinct gold string). 1 if equal, else 0.
- :func:`exact_match_reward` — the response's final answer (the last ``\\boxed{}`` content, else
  the last number literal, else the whole stripped text) equals the gold answer: as numbers when
  both are numbers (``25.0`` = ``25``, ``1,000`` = ``1000``), else as strings. For procedural
  tasks whose answer is one value (``basic_arithmetic``): unlike math-verify it never *evaluates*
  an expression, so restating the question ("2 + 9") is not an answer.
- :func:`format_reward` — 1 if the response puts an answer in ``\\boxed{...}``.

:class:`GuardedReward` wraps any of them (or your own): each completion is scored on its own, and
a call that raises or runs past ``timeout_s`` scores 0 and is counted (``errors``, ``timeouts``)
instead of crashing the run. ``math-verify``'s own ``signal.alarm`` timeouts are switched off
here because the guard owns the timer (one process has one ``SIGALRM``).
"""

from __future__ import annotations

import functools
import logging
import re
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from entflow.errors import ConfigError, RewardTimeoutError, UnknownMethodError

__all__ = [
    "REWARDS",
    "GuardedReward",
    "RewardTimeoutError",
    "answers_equal",
    "completion_text",
    "exact_match_reward",
    "final_answer",
    "format_reward",
    "get_reward",
    "math_verify_reward",
    "parse_answer",
]

RewardFn = Callable[..., list[float]]
logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled" notices: the guard times out


def completion_text(completion: Any) -> str:
    """The text of one completion: a string, or TRL's conversational ``[{role, content}, ...]``."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list | tuple) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"a completion must be a string or a list of messages, got {type(completion).__name__}")


@functools.lru_cache(maxsize=65536)
def _parse_gold(answer: str) -> tuple:
    from math_verify import parse

    return tuple(parse(answer, parsing_timeout=None))


def parse_answer(text: str) -> list:
    """``math-verify``'s parse of a response: ``[sympy value, extracted string]``, or ``[]`` when
    the response holds no answer it can read (a boxed expression first, else the last number)."""
    from math_verify import parse

    return parse(text, parsing_timeout=None)


def _warm_up_verifier() -> None:
    """Import ``math-verify`` (and sympy) and run one parse, so that a time limit measures the
    responses, not the imports (seconds on a loaded machine)."""
    try:
        answers_equal(_parse_gold("1"), parse_answer("1"))
    except ImportError:
        pass  # the reward itself will report it


def answers_equal(gold: Sequence, pred: Sequence) -> bool:
    """Symbolic equality of two parsed answers (``math_verify.verify``, no own timeout)."""
    from math_verify import verify

    return bool(gold) and bool(pred) and bool(verify(list(gold), list(pred), timeout_seconds=None))


def _column(kwargs: dict[str, Any], name: str, n: int, reward: str) -> list:
    if name not in kwargs or kwargs[name] is None:
        raise ConfigError(name, f"the {reward} reward needs a dataset column {name!r} (passed as {name}=[...])")
    col = list(kwargs[name])
    if len(col) != n:
        raise ConfigError(name, f"has {len(col)} entries for {n} completions")
    return col


def math_verify_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 where the completion's answer equals ``answer`` (symbolically, via math-verify), else 0.0."""
    answers = _column(kwargs, "answer", len(completions), "math_verify")
    out = []
    for c, a in zip(completions, answers, strict=True):
        gold = _parse_gold(str(a))
        out.append(1.0 if answers_equal(gold, parse_answer(completion_text(c))) else 0.0)
    return out


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def final_answer(text: str) -> str | None:
    """The last ``\\boxed{...}`` content, else the last number literal, else the stripped text
    (``None`` if empty)."""
    boxed = _boxed_contents(text)
    if boxed:
        return boxed[-1].strip()
    numbers = _NUMBER.findall(text)
    if numbers:
        return numbers[-1]
    return text.strip() or None


def _as_number(s: str) -> Decimal | None:
    try:
        return Decimal(s.replace(",", "").strip())
    except InvalidOperation:
        return None


def exact_match_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 where the completion's :func:`final_answer` equals ``answer`` (as numbers when both
    are numbers, else as stripped strings), else 0.0."""
    answers = _column(kwargs, "answer", len(completions), "exact_match")
    out = []
    for c, a in zip(completions, answers, strict=True):
        got, gold = final_answer(completion_text(c)), str(a).strip()
        if got is None:
            out.append(0.0)
            continue
        x, y = _as_number(got), _as_number(gold)
        out.append(1.0 if (x == y if x is not None and y is not None else got == gold) else 0.0)
    return out


def _boxed_contents(text: str) -> list[str]:
    """Contents of every balanced, non-empty ``\\boxed{...}`` in ``text``, in order."""
    out = []
    for m in re.finditer(r"\\boxed\{", text):
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth == 0 and text[m.end() : j - 1].strip():
            out.append(text[m.end() : j - 1])
    return out


def format_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 where the completion gives its answer in a non-empty, balanced ``\\boxed{...}``."""
    return [1.0 if _boxed_contents(completion_text(c)) else 0.0 for c in completions]


REWARDS: dict[str, RewardFn] = {
    "math_verify": math_verify_reward,
    "exact_match": exact_match_reward,
    "format": format_reward,
}


@dataclass
class GuardedReward:
    """Call ``fn`` on one completion at a time; an exception or a timeout scores 0 and is counted.

    ``timeout_s`` uses ``SIGALRM`` and therefore applies only in the main thread (elsewhere calls
    run without a limit). ``calls``, ``errors``, ``timeouts`` accumulate; :meth:`pop_counts`
    returns and resets them. Keyword columns that are lists of length ``len(completions)`` are
    sliced per completion; anything else is passed through unchanged.
    """

    fn: RewardFn
    timeout_s: float | None = 5.0
    name: str = ""
    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    last_error: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.name = self.name or getattr(self.fn, "__name__", "reward")
        self.__name__ = self.name  # TRL logs reward functions by __name__

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        if self.calls == 0 and getattr(self.fn, "__module__", None) == __name__:
            _warm_up_verifier()  # the first parse imports sympy and builds grammars: not the response's time
        n = len(completions)
        out = []
        for i in range(n):
            one = {k: [v[i]] if isinstance(v, list | tuple) and len(v) == n else v for k, v in kwargs.items()}
            out.append(self._score_one(completions[i], one))
        return out

    def _score_one(self, completion: Any, kwargs: dict[str, Any]) -> float:
        self.calls += 1
        try:
            with _TimeLimit(self.timeout_s):
                value = self.fn([completion], **kwargs)[0]
            value = float(value) if value is not None else 0.0
            if value != value:  # NaN
                raise ValueError("reward is NaN")
            return value
        except RewardTimeoutError:
            self.timeouts += 1
        except ConfigError:
            raise  # a missing column is the caller's mistake, not a bad completion
        except Exception as e:  # a reward must never crash the run (docs/design.md §11)
            self.errors += 1
            self.last_error = f"{type(e).__name__}: {e}"
        return 0.0

    def pop_counts(self) -> dict[str, int]:
        out = {"calls": self.calls, "errors": self.errors, "timeouts": self.timeouts}
        self.calls = self.errors = self.timeouts = 0
        return out


class _TimeLimit:
    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.active = bool(seconds) and threading.current_thread() is threading.main_thread()

    def __enter__(self) -> None:
        if self.active:
            self._old = signal.signal(signal.SIGALRM, self._raise)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc: Any) -> None:
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old)

    @staticmethod
    def _raise(signum: int, frame: Any) -> None:
        raise RewardTimeoutError()


def get_reward(spec: str | RewardFn, timeout_s: float | None = 5.0) -> GuardedReward:
    """A guarded reward from a name (``math_verify``, ``exact_match``, ``format``), a weighted sum
    of names (``"math_verify+0.1*format"``), or a callable with TRL's signature."""
    if callable(spec):
        return GuardedReward(spec, timeout_s)
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError("reward", f"expected a reward name or callable, got {spec!r}")
    parts: list[tuple[float, RewardFn]] = []
    for term in spec.split("+"):
        weight, _, name = term.strip().rpartition("*")
        if name not in REWARDS:
            raise UnknownMethodError(name, sorted(REWARDS), kind="reward")
        try:
            w = float(weight) if weight else 1.0
        except ValueError:
            raise ConfigError("reward", f"bad weight {weight!r} in {spec!r}") from None
        parts.append((w, REWARDS[name]))
    if len(parts) == 1 and parts[0][0] == 1.0:
        return GuardedReward(parts[0][1], timeout_s, name=spec.strip())

    def weighted(completions: Sequence[Any], **kwargs: Any) -> list[float]:
        totals = [0.0] * len(completions)
        for w, fn in parts:
            for i, v in enumerate(fn(completions, **kwargs)):
                totals[i] += w * v
        return totals

    return GuardedReward(weighted, timeout_s, name=spec.strip())
