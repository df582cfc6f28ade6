"""Lab tasks (docs/design.md §10): tiny, procedurally generated, seeded problems with exact verifiers.

Both tasks are written for a *character-level* policy, so prompts and answers are kept very short
("3 5 7>15:" → "3*5"). That is why the generators here are our own rather than reasoning-gym's:
reasoning-gym's ``countdown`` and ``basic_arithmetic`` produce natural-language prompts of a few
hundred characters with 4–6 numbers up to 100 and targets up to 999, and its countdown scorer
parses with sympy (milliseconds per call, partial credit 0.01/0.05, all numbers required). Our
rules are a strict subset of its countdown rules except that using *some* of the numbers is
allowed (that is what gives several correct answers per prompt); ``tests/lab/test_tasks.py``
cross-checks our verifier against reasoning-gym's scorer on answers that use every number.

- ``countdown`` (default): ``n_numbers`` digits and a target; the response is an expression with
  ``+ - *`` and parentheses over some of the numbers (each at most once) that evaluates to the
  target. Targets are chosen to have at least ``min_solutions`` distinct solution strings.
- ``arithmetic``: ``a+b=`` / ``a-b=`` / ``a*b=`` (operands 0–19, multiplier 0–9 by default); the
  response is the integer, one correct answer per prompt (the contrast to countdown).
"""

from __future__ import annotations

import functools
import itertools
import random
import zlib
from typing import Any, NamedTuple

from entflow.errors import ExpressionError, ParameterError
from entflow.trainer import task as trainer_task
from entflow.trainer.task import Problem

#: one alphabet for every lab task, so one tokenizer (and one cached policy format) serves all
LAB_ALPHABET = "0123456789+-*() >:="
_MAX_RESPONSE_CHARS = 64  # verifiers reject anything longer without parsing it


class LabTask(trainer_task.Task):
    """Base class of the lab's tasks: a :class:`~entflow.trainer.task.Task` written over the lab's
    one alphabet, with solution and wrong traces for the warm start. Subclasses set ``name``,
    ``max_response_len`` and implement ``_sample_one``, ``reward`` and ``solution_traces``."""

    alphabet: str = LAB_ALPHABET
    max_response_len: int = 16  # characters = tokens, including the eos token

    def solution_traces(self, problem: Problem, rng: random.Random, k: int) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def wrong_traces(self, problem: Problem, rng: random.Random, k: int) -> list[str]:  # pragma: no cover
        """``k`` well-formed but *incorrect* responses (the warm start's noise, see ``PretrainConfig.wrong_frac``)."""
        raise NotImplementedError


# --------------------------------------------------------------------------------------------
# expression parsing / evaluation (exact integers, no eval)


def _tokenize(s: str) -> list[str]:
    toks: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == " ":
            i += 1
        elif c.isdigit() and c.isascii():
            j = i
            while j < len(s) and s[j].isdigit() and s[j].isascii():
                j += 1
            toks.append(s[i:j])
            i = j
        elif c in "+-*()":
            toks.append(c)
            i += 1
        else:
            raise ExpressionError(c)
    return toks


def uses_given_numbers(used: list[int], numbers: list[int]) -> bool:
    """Whether ``used`` (the numbers an expression uses) takes each of ``numbers`` at most once."""
    pool = list(numbers)
    for u in used:
        if u not in pool:
            return False
        pool.remove(u)
    return True


def parse_expression(s: str) -> tuple[int, list[int]]:
    """Evaluate ``s`` (integers, ``+ - *``, parentheses, usual precedence, no unary minus, no
    leading zeros). Returns (value, the integer literals used). Raises ``ValueError`` on anything
    else."""
    try:
        toks = _tokenize(s)
        pos = 0
        used: list[int] = []

        def peek() -> str | None:
            return toks[pos] if pos < len(toks) else None

        def factor() -> int:
            nonlocal pos
            t = peek()
            if t is None:
                raise ExpressionError("end")
            if t == "(":
                pos += 1
                v = expr()
                if peek() != ")":
                    raise ExpressionError(")")
                pos += 1
                return v
            if t.isdigit():
                if len(t) > 1 and t[0] == "0":
                    raise ExpressionError("leading zero")
                pos += 1
                used.append(int(t))
                return int(t)
            raise ExpressionError(t)

        def term() -> int:
            nonlocal pos
            v = factor()
            while peek() == "*":
                pos += 1
                v *= factor()
            return v

        def expr() -> int:
            nonlocal pos
            v = term()
            while peek() in ("+", "-"):
                op = toks[pos]
                pos += 1
                r = term()
                v = v + r if op == "+" else v - r
            return v

        value = expr()
        if pos != len(toks):
            raise ExpressionError("trailing")
        return value, used
    except (ExpressionError, RecursionError) as e:
        raise ValueError(f"not a valid expression: {s!r}") from e


_PREC = {"+": 1, "-": 1, "*": 2}


def _trees(leaves: tuple[tuple[int, str, int], ...]):
    """All binary expression trees over ``leaves`` in this order, rendered with minimal parentheses."""
    if len(leaves) == 1:
        yield leaves[0]
        return
    for i in range(1, len(leaves)):
        for lv, ls, lp in _trees(leaves[:i]):
            for rv, rs, rp in _trees(leaves[i:]):
                for op in "+-*":
                    p = _PREC[op]
                    left = f"({ls})" if lp < p else ls
                    right = f"({rs})" if (rp < p or (rp == p and op == "-")) else rs
                    v = lv + rv if op == "+" else lv - rv if op == "-" else lv * rv
                    yield v, left + op + right, p


@functools.lru_cache(maxsize=8192)
def countdown_solutions(numbers: tuple[int, ...]) -> dict[int, tuple[str, ...]]:
    """value → every distinct expression string over ≥ 2 of ``numbers`` (each used at most once,
    any order, any bracketing, minimal parentheses) that evaluates to it. Cached on the multiset."""
    out: dict[int, set[str]] = {}
    for k in range(2, len(numbers) + 1):
        for perm in itertools.permutations(range(len(numbers)), k):
            leaves = tuple((numbers[i], str(numbers[i]), 3) for i in perm)
            for v, s, _ in _trees(leaves):
                out.setdefault(v, set()).add(s)
    return {v: tuple(sorted(s)) for v, s in out.items()}


def _solutions_for(numbers: tuple[int, ...]) -> dict[int, tuple[str, ...]]:
    return countdown_solutions(tuple(sorted(numbers)))


class CountdownAnswer(NamedTuple):
    numbers: tuple[int, ...]
    target: int


class CountdownTask(LabTask):
    """Reach ``target`` with some of ``numbers`` (each at most once) and ``+ - *``, parentheses.

    Prompt ``"3 5 7>15:"``; correct responses include ``"3*5"``, ``"5*3"``, ``"3+5+7"``, ``"7+5+3"``…
    """

    name = "countdown"

    def __init__(
        self,
        n_numbers: int = 3,
        max_value: int = 9,
        min_target: int = 10,
        max_target: int = 99,
        min_solutions: int = 4,
        validation_size: int = 64,
    ):
        def need(ok: bool, param: str, what: str, v: Any) -> None:
            if not ok:
                raise ParameterError("countdown", param, f"{what}, got {v!r}")

        need(2 <= n_numbers <= 4, "n_numbers", "must be in [2, 4]", n_numbers)
        need(1 <= max_value <= 99, "max_value", "must be in [1, 99]", max_value)
        need(min_target >= 0, "min_target", "must be >= 0", min_target)
        need(max_target >= min_target, "max_target", "must be >= min_target", max_target)
        need(min_solutions >= 1, "min_solutions", "must be >= 1", min_solutions)
        need(validation_size >= 1, "validation_size", "must be >= 1", validation_size)
        self.n_numbers, self.max_value = n_numbers, max_value
        self.min_target, self.max_target, self.min_solutions = min_target, max_target, min_solutions
        self.validation_size = validation_size
        digits = len(str(max_value))
        # longest trace: n numbers, n-1 operators, 2(n-2) parentheses; + eos + 1 spare
        self.max_response_len = n_numbers * digits + (n_numbers - 1) + 2 * max(0, n_numbers - 2) + 2

    def _params(self) -> tuple:
        return (self.n_numbers, self.max_value, self.min_target, self.max_target, self.min_solutions)

    def _good_targets(self, numbers: tuple[int, ...]) -> list[int]:
        sols = _solutions_for(numbers)
        return sorted(
            v
            for v, s in sols.items()
            if self.min_target <= v <= self.max_target and v not in numbers and len(s) >= self.min_solutions
        )

    def _sample_one(self, rng: random.Random) -> Problem:
        for _ in range(10_000):
            numbers = tuple(rng.randint(1, self.max_value) for _ in range(self.n_numbers))
            good = self._good_targets(numbers)
            if good:
                target = rng.choice(good)
                prompt = " ".join(map(str, numbers)) + f">{target}:"
                return Problem(prompt, CountdownAnswer(numbers, target))
        raise ParameterError("countdown", "min_solutions", "no problem satisfies these parameters")

    def reward(self, problem: Problem, response: str) -> float:
        if not isinstance(response, str) or not response.strip() or len(response) > _MAX_RESPONSE_CHARS:
            return 0.0
        numbers, target = problem.answer
        try:
            value, used = parse_expression(response.strip())
        except ValueError:
            return 0.0
        if not uses_given_numbers(used, numbers):
            return 0.0
        return 1.0 if value == target else 0.0

    def solutions(self, problem: Problem) -> tuple[str, ...]:
        """Every correct response in canonical (minimal-parentheses) form."""
        numbers, target = problem.answer
        return _solutions_for(tuple(numbers)).get(target, ())

    def solution_traces(self, problem: Problem, rng: random.Random, k: int) -> list[str]:
        """``k`` correct responses, as diverse as possible: all distinct while ``k`` ≤ the number
        of solutions, then cycling through fresh shuffles."""
        sols = list(self.solutions(problem))
        if not sols:
            raise ParameterError("countdown", "problem", f"has no solution: {problem.prompt!r}")
        out: list[str] = []
        while len(out) < k:
            batch = sols[:]
            rng.shuffle(batch)
            out.extend(batch[: k - len(out)])
        return out

    def wrong_traces(self, problem: Problem, rng: random.Random, k: int) -> list[str]:
        """``k`` expressions over some of the prompt's numbers (each used at most once) that evaluate
        to anything *but* the target, drawn uniformly from all such expression strings."""
        numbers, target = problem.answer
        wrong = _wrong_expressions(tuple(sorted(numbers)), target)
        return [rng.choice(wrong) for _ in range(k)]


@functools.lru_cache(maxsize=8192)
def _wrong_expressions(numbers: tuple[int, ...], target: int) -> tuple[str, ...]:
    return tuple(s for v, sols in sorted(countdown_solutions(numbers).items()) if v != target for s in sols)


class ArithmeticTask(LabTask):
    """``"17+8="`` → ``"25"``: one correct answer per prompt (exact match after stripping spaces)."""

    name = "arithmetic"

    # max_value 19 (not 99): with 0–99 operands the default warm start reaches only ~7 % accuracy
    # (too little reward signal for GRPO); with 0–19 it reaches ~21 % with entropy ~0.74 nats.
    def __init__(self, max_value: int = 19, ops: str = "+-*", max_multiplier: int = 9, validation_size: int = 64):
        if not (1 <= max_value <= 999):
            raise ParameterError("arithmetic", "max_value", f"must be in [1, 999], got {max_value!r}")
        if not ops or any(o not in "+-*" for o in ops):
            raise ParameterError("arithmetic", "ops", f"must be a non-empty subset of '+-*', got {ops!r}")
        if max_multiplier < 1:
            raise ParameterError("arithmetic", "max_multiplier", f"must be >= 1, got {max_multiplier!r}")
        self.max_value, self.ops, self.max_multiplier = max_value, ops, max_multiplier
        self.validation_size = validation_size
        longest = len(str(max_value * max(max_multiplier, 1))) + 1  # '-' sign possible for a-b
        self.max_response_len = longest + 2  # eos + 1 spare

    def _params(self) -> tuple:
        return (self.max_value, self.ops, self.max_multiplier)

    def _sample_one(self, rng: random.Random) -> Problem:
        op = rng.choice(self.ops)
        a = rng.randint(0, self.max_value)
        b = rng.randint(0, self.max_multiplier if op == "*" else self.max_value)
        value = a + b if op == "+" else a - b if op == "-" else a * b
        return Problem(f"{a}{op}{b}=", value)

    def reward(self, problem: Problem, response: str) -> float:
        if not isinstance(response, str) or len(response) > _MAX_RESPONSE_CHARS:
            return 0.0
        return 1.0 if response.strip() == str(problem.answer) else 0.0

    def solution_traces(self, problem: Problem, rng: random.Random, k: int) -> list[str]:
        return [str(problem.answer)] * k

    def wrong_traces(self, problem: Problem, rng: random.Random, k: int) -> list[str]:
        """``k`` integers near the answer (off by 1–10 either way), never the answer itself."""
        return [str(problem.answer + rng.choice([-1, 1]) * rng.randint(1, 10)) for _ in range(k)]


class CountdownRoutesTask(CountdownTask):
    """Countdown with a second held-out split of *route-requiring* problems (docs/regime.md).

    A problem *requires the route* ``route`` (a character, default ``"*"``) when every one of its
    correct responses contains it: ``"3 5 7>22:"`` (only ``3*5+7`` and its reorderings) does,
    ``"3 5 7>15:"`` (``3+5+7`` is correct) does not. Training problems come from the countdown
    distribution with both held-out splits removed:

    - ``validation_set()``: ``validation_size`` problems of the training distribution;
    - ``hard_set()``: ``hard_size`` route-requiring problems (the harder split that measures
      whether RL found the route a warm start trained without it under-covers, see
      ``PretrainConfig.trace_exclude``).
    """

    name = "countdown_routes"

    def __init__(self, route: str = "*", hard_size: int = 128, validation_size: int = 64, **kwargs: Any):
        super().__init__(validation_size=validation_size, **kwargs)
        if not isinstance(route, str) or len(route) != 1 or route not in "+-*":
            raise ParameterError("countdown_routes", "route", f"must be one of '+', '-', '*', got {route!r}")
        if hard_size < 1:
            raise ParameterError("countdown_routes", "hard_size", f"must be >= 1, got {hard_size!r}")
        self.route, self.hard_size = route, hard_size

    def _params(self) -> tuple:
        return (*super()._params(), self.route)

    def requires_route(self, problem: Problem) -> bool:
        """True when every correct response of ``problem`` contains ``self.route``."""
        return all(self.route in s for s in self.solutions(problem))

    def hard_set(self) -> list[Problem]:
        """Fixed held-out route-requiring problems, disjoint from ``validation_set()`` (seeded by
        the task name and parameters like it)."""
        if getattr(self, "_hard", None) is None:
            val = {p.prompt for p in self.validation_set()}
            rng = random.Random(zlib.crc32(repr((self.name, "hard", self._params())).encode()))
            seen: dict[str, Problem] = {}
            tries = 0
            while len(seen) < self.hard_size:
                p = self._sample_one(rng)
                if p.prompt not in val and self.requires_route(p):
                    seen.setdefault(p.prompt, p)
                tries += 1
                if tries > 1000 * self.hard_size:
                    raise ParameterError(self.name, "hard_size", "exceeds the number of route-requiring problems")
            self._hard = list(seen.values())
            self._hard_prompts = frozenset(seen)
        return list(self._hard)

    def _held_out_prompts(self) -> frozenset[str]:
        """Training never draws from ``validation_set()`` or ``hard_set()``."""
        self.hard_set()
        return super()._held_out_prompts() | self._hard_prompts


TASKS: dict[str, type[LabTask]] = {
    "countdown": CountdownTask,
    "arithmetic": ArithmeticTask,
    "countdown_routes": CountdownRoutesTask,
}


def get_task(name: str = "countdown", **kwargs: Any) -> LabTask:
    """Build a registered task; unknown names and parameters raise typed errors."""
    return trainer_task.build_task(TASKS, name, **kwargs)
