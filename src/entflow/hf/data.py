"""Prompt/answer data for real models (docs/design.md §11): files, ``datasets``, reasoning-gym, lab tasks.

``load_data(spec, **params)`` returns a :class:`PromptData`: a ``train`` sampler, a fixed
``validation`` list and the reward that fits the data. ``spec`` is one of

- a **reasoning-gym** task name (``gsm_symbolic``, ``basic_arithmetic``, or any other registered
  reasoning-gym dataset): procedurally generated, with two fixed seeds — the validation split is
  ``val_size`` problems drawn with seed ``val_seed``; the train split draws with ``train_seed``
  from ``train_size`` problems and never yields a validation question. Extra ``params`` go to
  the reasoning-gym config (e.g. ``max_terms=2`` for ``basic_arithmetic``).
  With ``held_out`` (a list of ``{name, seed, size}``) the task has several named held-out sets
  instead (e.g. ``design_eval`` and ``judge``): each is ``size`` distinct problems drawn with its
  own ``seed``, none of them in a set listed before it (problems compared by
  :func:`normalize_problem`); ``eval_split`` names the one that is the validation list, and the
  train split never yields a problem of any of them (:class:`SplitGymData`).
- a **lab** task name (``countdown``, ``arithmetic``): the lab's generator, validation set and
  verifier, under the same interface.
- a **file**: ``.jsonl`` (one JSON object per line; a malformed line is reported by number) or
  ``.parquet``, or a directory written by ``datasets.Dataset.save_to_disk``; or a
  ``datasets.Dataset`` / list of dicts passed from Python. Rows need ``prompt`` and ``answer``
  (other names via ``prompt_field=`` / ``answer_field=``); every row is both train and validation
  data unless ``val_size`` holds out that many rows (seeded by ``val_seed``).

Nothing is downloaded: a hub dataset id is used only with ``allow_hub=True``.

:class:`ChatTask` adapts a :class:`PromptData` to the lab's task protocol (``sample_problems``,
``validation_set``, ``reward``, ``max_response_len``) for one tokenizer: prompts go through the
chat template and rewards through a :class:`~entflow.hf.rewards.GuardedReward`.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from entflow.errors import ConfigError, UnknownMethodError
from entflow.trainer.task import Problem

__all__ = [
    "GYM_TASKS",
    "MATH_SUFFIX",
    "ChatTask",
    "Example",
    "PromptData",
    "SplitGymData",
    "lab_task_reward",
    "load_data",
    "normalize_problem",
    "read_jsonl_examples",
]

#: appended to math prompts by default (the instruction of the Qwen2.5-Math / DeepSeek-R1 evaluations)
MATH_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."
#: reasoning-gym tasks with a tested default reward; any other reasoning-gym name also loads
#: (basic_arithmetic: exact match of the final number — math-verify would evaluate a restated
#: "2 + 9" in the response and reward it)
GYM_TASKS = {"gsm_symbolic": "math_verify", "basic_arithmetic": "exact_match"}


@dataclass
class Example:
    """One problem: the question as shown to the user (no chat template), its gold answer as a
    string, and any other columns (passed to reward functions as keyword lists)."""

    prompt: str
    answer: str
    columns: dict[str, Any] = field(default_factory=dict)


class PromptData:
    """Train sampler + fixed validation list + default reward and prompt suffix."""

    def __init__(
        self,
        name: str,
        validation: Sequence[Example],
        reward: Any,
        train: Sequence[Example] | None = None,
        suffix: str = "",
    ):
        self.name, self.validation, self.reward, self.suffix = name, list(validation), reward, suffix
        self._train = train if train is not None else self.validation
        self._val_prompts = frozenset(e.prompt for e in self.validation)

    def sample_train(self, n: int, rng: random.Random) -> list[Example]:
        """``n`` training examples drawn with ``rng`` (with replacement)."""
        return [self._train[rng.randrange(len(self._train))] for _ in range(n)]

    def __len__(self) -> int:
        return len(self.validation)

    def __repr__(self) -> str:
        return f"PromptData({self.name!r}, validation={len(self.validation)})"


class _GymData(PromptData):
    """A reasoning-gym dataset: validation = ``val_size`` items of seed ``val_seed``; training
    items come from seed ``train_seed`` (``train_size`` of them), skipping validation questions."""

    def __init__(self, name: str, val_size: int, val_seed: int, train_seed: int, train_size: int, **params: Any):
        import reasoning_gym

        try:
            self._train_ds = reasoning_gym.create_dataset(name, seed=train_seed, size=train_size, **params)
            val_ds = reasoning_gym.create_dataset(name, seed=val_seed, size=val_size, **params)
        except TypeError as e:
            raise ConfigError("data_params", f"{name}: {e}") from e
        validation = [self._example(val_ds[i]) for i in range(val_size)]
        super().__init__(name, validation, GYM_TASKS.get(name, "math_verify"), suffix=MATH_SUFFIX)
        self._val_prompts = frozenset(e.prompt for e in validation)
        self.train_size = train_size

    @staticmethod
    def _example(entry: dict[str, Any]) -> Example:
        return Example(entry["question"], str(entry["answer"]))

    def _held_out(self, prompt: str) -> bool:
        """Whether a training draw must be skipped: it is a validation question."""
        return prompt in self._val_prompts

    def sample_train(self, n: int, rng: random.Random) -> list[Example]:
        out: list[Example] = []
        for _ in range(100 * n + 100):
            if len(out) == n:
                break
            ex = self._example(self._train_ds[rng.randrange(self.train_size)])
            if not self._held_out(ex.prompt):
                out.append(ex)
        if len(out) < n:
            raise ConfigError("train_size", f"{self.name}: too few training problems outside the held-out problems")
        return out


def normalize_problem(text: str) -> str:
    """The text two problems are compared by: lower case, runs of whitespace as one space, stripped."""
    return " ".join(text.lower().split())


class SplitGymData(_GymData):
    """A reasoning-gym dataset with named, pairwise disjoint held-out sets and a train split that
    avoids all of them.

    ``held_out``: ``[{"name": ..., "seed": ..., "size": ...}, ...]``. Set j is the first ``size``
    distinct problems (by :func:`normalize_problem`) of the generator seeded with ``seed`` that are
    in no set listed before it, so a set depends only on its own seed and the sets before it.
    ``eval_split`` names the validation list (its first ``val_size`` problems). Training problems
    come from ``train_seed`` and skip every held-out problem, whichever set is evaluated: the
    train split is the same for a design run and a judged run. :attr:`splits` holds each set's
    :class:`Example` list (``name -> [Example]``).
    """

    def __init__(
        self,
        name: str,
        held_out: Sequence[dict[str, Any]],
        eval_split: str,
        val_size: int | None,
        train_seed: int,
        train_size: int,
        **params: Any,
    ):
        import reasoning_gym

        self.splits: dict[str, list[Example]] = {}
        seen: set[str] = set()
        for j, spec in enumerate(held_out):
            if not isinstance(spec, dict) or set(spec) != {"name", "seed", "size"}:
                raise ConfigError("held_out", f"entry {j} must have exactly the keys name, seed, size, got {spec!r}")
            size = _positive(f"held_out[{j}].size", spec["size"])
            if spec["name"] in self.splits:
                raise ConfigError("held_out", f"the name {spec['name']!r} is used twice")
            try:
                ds = reasoning_gym.create_dataset(name, seed=int(spec["seed"]), size=50 * size + 1000, **params)
            except TypeError as e:
                raise ConfigError("data_params", f"{name}: {e}") from e
            split: list[Example] = []
            for i in range(len(ds)):
                if len(split) == size:
                    break
                ex = self._example(ds[i])
                key = normalize_problem(ex.prompt)
                if key not in seen:
                    seen.add(key)
                    split.append(ex)
            if len(split) < size:
                raise ConfigError(
                    f"held_out[{j}].size", f"{name}: only {len(split)} distinct problems outside the earlier sets"
                )
            self.splits[spec["name"]] = split
        if eval_split not in self.splits:
            raise ConfigError("eval_split", f"must name a held_out set ({', '.join(self.splits)}), got {eval_split!r}")
        evaluated = self.splits[eval_split]
        if val_size is not None and val_size > len(evaluated):
            raise ConfigError("val_size", f"{eval_split!r} holds {len(evaluated)} problems, got val_size={val_size}")
        self.eval_split = eval_split
        try:
            self._train_ds = reasoning_gym.create_dataset(name, seed=train_seed, size=train_size, **params)
        except TypeError as e:
            raise ConfigError("data_params", f"{name}: {e}") from e
        PromptData.__init__(
            self, name, evaluated[: val_size or len(evaluated)], GYM_TASKS.get(name, "math_verify"), suffix=MATH_SUFFIX
        )
        self._held_out_keys = frozenset(seen)
        self.train_size = train_size

    def _held_out(self, prompt: str) -> bool:
        """Whether a training draw must be skipped: it is in a held-out set (normalised text)."""
        return normalize_problem(prompt) in self._held_out_keys

    def train_problems(self, limit: int | None = None) -> list[Example]:
        """The train split's problems in generator order (the first ``limit`` indices, all by
        default), held-out problems skipped: what :meth:`sample_train` draws from."""
        stop = self.train_size if limit is None else min(limit, self.train_size)
        out = []
        for i in range(stop):
            ex = self._example(self._train_ds[i])
            if not self._held_out(ex.prompt):
                out.append(ex)
        return out


def lab_task_reward(task: Any):
    """The lab task's own verifier with TRL's signature; rows carry the lab ``Problem`` in the
    ``problem`` column."""

    def reward(completions: Sequence[Any], problem: Sequence[Problem], **kwargs: Any) -> list[float]:
        from entflow.hf.rewards import completion_text

        return [task.reward(p, completion_text(c)) for c, p in zip(completions, problem, strict=True)]

    reward.__name__ = f"{task.name}_verifier"
    return reward


class _LabData(PromptData):
    def __init__(self, name: str, **params: Any):
        from entflow.trainer.task import load_task

        self.task = load_task(name, **params)
        validation = [self._example(p) for p in self.task.validation_set()]
        super().__init__(name, validation, lab_task_reward(self.task))

    @staticmethod
    def _example(p: Problem) -> Example:
        answer = p.answer if isinstance(p.answer, int | str) else getattr(p.answer, "target", p.answer)
        return Example(p.prompt, str(answer), {"problem": p})

    def sample_train(self, n: int, rng: random.Random) -> list[Example]:
        return [self._example(p) for p in self.task.sample_problems(n, rng)]


# --------------------------------------------------------------------------------------------
# files and datasets


def read_jsonl_examples(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a line that is not a JSON object raises naming its line number."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError("data", f"{path}: line {i} is not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ConfigError("data", f"{path}: line {i} is not a JSON object")
            rows.append(row)
    return rows


def _rows_to_examples(
    rows: Sequence[dict[str, Any]], where: str, prompt_field: str, answer_field: str
) -> list[Example]:
    if len(rows) == 0:
        raise ConfigError("data", f"{where} has no rows")
    out = []
    for i, row in enumerate(rows):
        for fld in (prompt_field, answer_field):
            if fld not in row or row[fld] is None:
                raise ConfigError(
                    fld, f"{where}: row {i + 1} has no {fld!r} field (fields seen: {', '.join(sorted(row))})"
                )
        prompt = row[prompt_field]
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigError(prompt_field, f"{where}: row {i + 1} has an empty or non-string prompt: {prompt!r}")
        columns = {k: v for k, v in row.items() if k not in (prompt_field, answer_field)}
        out.append(Example(prompt, str(row[answer_field]), columns))
    return out


def _load_rows(spec: Any, allow_hub: bool, split: str) -> tuple[list[dict[str, Any]], str]:
    if isinstance(spec, list | tuple):
        return list(spec), "the given rows"
    if hasattr(spec, "column_names") and hasattr(spec, "to_list"):  # a datasets.Dataset
        return spec.to_list(), "the given dataset"
    path = Path(str(spec)).expanduser()
    if path.is_file():
        if path.suffix in (".jsonl", ".json"):
            return read_jsonl_examples(path), str(path)
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist(), str(path)
        raise ConfigError("data", f"{str(path)!r}: unsupported file type (use .jsonl, .parquet or a datasets dir)")
    if path.is_dir():
        import datasets

        try:
            ds = datasets.load_from_disk(str(path))
        except FileNotFoundError as e:
            raise ConfigError("data", f"{str(path)!r} is not a dataset saved with save_to_disk ({e})") from None
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise ConfigError("split", f"{str(path)!r} has splits {sorted(ds)}, not {split!r}")
            ds = ds[split]
        return ds.to_list(), str(path)
    if allow_hub:
        import datasets

        return datasets.load_dataset(str(spec), split=split).to_list(), str(spec)
    raise ConfigError("data", f"no such file or directory: {str(spec)!r}")


def _known_names() -> list[str]:
    from entflow.trainer.task import task_classes

    return sorted(set(GYM_TASKS) | set(task_classes()))


def _is_gym_name(name: str) -> bool:
    if name in GYM_TASKS:
        return True
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:  # pragma: no cover - reasoning-gym is in the `real` extra
        return False
    return name in DATASETS


def load_data(
    spec: Any,
    *,
    prompt_field: str = "prompt",
    answer_field: str = "answer",
    val_size: int | None = None,
    val_seed: int | None = None,
    train_seed: int | None = None,
    train_size: int = 100_000,
    reward: Any = None,
    allow_hub: bool = False,
    split: str = "train",
    held_out: Sequence[dict[str, Any]] | None = None,
    eval_split: str | None = None,
    **params: Any,
) -> PromptData:
    """A :class:`PromptData` for ``spec`` (see the module docstring). Bad input — an unknown name,
    a missing file, rows without ``prompt``/``answer``, a malformed JSONL line — raises a
    :class:`~entflow.errors.ConfigError` naming the field (and the line) before any work."""
    if isinstance(spec, str) and not Path(spec).expanduser().exists():
        from entflow.trainer.task import task_classes

        seed_of = lambda part: zlib.crc32(f"{spec}/{part}".encode())  # noqa: E731
        if spec in task_classes():
            data: PromptData = _LabData(spec, **params)
        elif _is_gym_name(spec) and held_out is not None:
            if eval_split is None:
                raise ConfigError("eval_split", "names the held_out set to evaluate on; got none")
            if val_seed is not None:
                raise ConfigError("val_seed", f"held_out sets carry their own seeds; got val_seed={val_seed!r} as well")
            data = SplitGymData(
                spec,
                held_out,
                eval_split,
                None if val_size is None else _positive("val_size", val_size),
                train_seed=seed_of("train") if train_seed is None else train_seed,
                train_size=_positive("train_size", train_size),
                **params,
            )
        elif _is_gym_name(spec):
            data = _GymData(
                spec,
                val_size=200 if val_size is None else _positive("val_size", val_size),
                val_seed=seed_of("validation") if val_seed is None else val_seed,
                train_seed=seed_of("train") if train_seed is None else train_seed,
                train_size=_positive("train_size", train_size),
                **params,
            )
        elif allow_hub or "." in spec or "/" in spec:
            data = _file_data(spec, prompt_field, answer_field, val_size, val_seed, allow_hub, split, params)
        else:
            raise UnknownMethodError(spec, _known_names(), kind="task (or data file)")
    else:
        data = _file_data(spec, prompt_field, answer_field, val_size, val_seed, allow_hub, split, params)
    if (held_out is not None or eval_split is not None) and not isinstance(data, SplitGymData):
        raise ConfigError(
            "held_out", f"named held-out sets need a reasoning-gym task with both held_out and eval_split, got {spec!r}"
        )
    if reward is not None:
        data.reward = reward
    return data


def _positive(key: str, v: int) -> int:
    if not isinstance(v, int) or v < 1:
        raise ConfigError(key, f"must be a positive integer, got {v!r}")
    return v


def _file_data(spec, prompt_field, answer_field, val_size, val_seed, allow_hub, split, params) -> PromptData:
    if params:
        raise ConfigError(",".join(sorted(params)), "unknown data parameter(s) for a file or dataset")
    rows, where = _load_rows(spec, allow_hub, split)
    examples = _rows_to_examples(rows, where, prompt_field, answer_field)
    name = Path(where).stem if Path(where).exists() else where
    if val_size is None:
        return PromptData(name, examples, "math_verify")
    if not 1 <= val_size < len(examples):
        raise ConfigError("val_size", f"must be in [1, {len(examples) - 1}] for {len(examples)} rows, got {val_size}")
    order = list(range(len(examples)))
    random.Random(0 if val_seed is None else val_seed).shuffle(order)
    val = [examples[i] for i in order[:val_size]]
    train = [examples[i] for i in order[val_size:]]
    return PromptData(name, val, "math_verify", train=train)


# --------------------------------------------------------------------------------------------
# the lab's task protocol for a real tokenizer


class ChatTask:
    """:class:`PromptData` as a lab task for one tokenizer (prompts through the chat template).

    ``Problem.prompt`` is the templated text the model sees; ``Problem.answer`` is the
    :class:`Example`. ``reward(problem, response)`` calls the guarded reward with the example's
    columns; :meth:`pop_metrics` reports how many reward calls failed or timed out since the last
    call (``reward/errors``, ``reward/timeouts``).
    """

    def __init__(
        self,
        data: PromptData,
        tokenizer: Any,
        max_new_tokens: int,
        system_prompt: str | None = None,
        prompt_suffix: str | None = None,
        reward: Any = None,
        timeout_s: float | None = 5.0,
        val_size: int | None = None,
        few_shot: Sequence[Sequence[str]] | None = None,
    ):
        from entflow.hf.rewards import get_reward

        self.data, self.tokenizer = data, tokenizer
        self.name = data.name
        self.max_response_len = max_new_tokens
        self.system_prompt = system_prompt
        self.suffix = data.suffix if prompt_suffix is None else prompt_suffix
        # worked examples as earlier chat turns; each question gets the same suffix as the problems
        self.few_shot = tuple((str(q) + self.suffix, str(a)) for q, a in few_shot or ())
        self.reward_fn = get_reward(reward if reward is not None else data.reward, timeout_s)
        self._val = [self.problem(e) for e in data.validation[: val_size or len(data.validation)]]

    def problem(self, ex: Example) -> Problem:
        from entflow.hf.models import chat_prompt

        return Problem(chat_prompt(self.tokenizer, ex.prompt + self.suffix, self.system_prompt, self.few_shot), ex)

    def sample_problems(self, n: int, rng: random.Random) -> list[Problem]:
        return [self.problem(e) for e in self.data.sample_train(n, rng)]

    def validation_set(self) -> list[Problem]:
        return list(self._val)

    def coverage_set(self, n: int) -> list[Problem]:
        """The first ``n`` held-out problems (the coverage evaluation's; the validation set is the
        first ``val_size`` of them)."""
        if n > len(self.data.validation):
            raise ConfigError(
                "coverage_size", f"{self.name} holds {len(self.data.validation)} held-out problems, got {n}"
            )
        return self._val[:n] if n <= len(self._val) else [self.problem(e) for e in self.data.validation[:n]]

    def reward(self, problem: Problem, response: str) -> float:
        return self.rewards([problem], [response])[0]

    def rewards(self, problems: Sequence[Problem], responses: Sequence[str]) -> list[float]:
        """Scores of ``responses`` (one per problem, in order) with TRL's calling convention."""
        exs = [p.answer for p in problems]
        columns = {k: [e.columns.get(k) for e in exs] for k in {k for e in exs for k in e.columns}}
        return self.reward_fn(
            list(responses), prompts=[e.prompt for e in exs], answer=[e.answer for e in exs], **columns
        )

    def pop_metrics(self) -> dict[str, float]:
        c = self.reward_fn.pop_counts()
        return {"reward/errors": float(c["errors"]), "reward/timeouts": float(c["timeouts"])}

    def __repr__(self) -> str:
        return f"ChatTask({self.name!r})"
