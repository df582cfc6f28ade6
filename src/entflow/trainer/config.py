"""Training configuration: one flat dataclass, YAML + ``key=value`` overrides, validated before any
work (docs/design.md §10, §13). The lab and real models subclass it with their task checks."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from entflow.errors import ConfigError, EntflowError

if typing.TYPE_CHECKING:
    from entflow.core.ppo import LossSpec


@dataclass
class TrainConfig:
    """Everything a training run needs; ``config.yaml`` in the run directory is this, resolved.

    The trainer reads every key except ``task``, ``task_params`` and ``policy_path``, which the
    run's setup reads; each setup's config subclass gives ``task`` its default and adds its own keys
    (the lab: :class:`~entflow.lab.config.LabConfig`; real models:
    :class:`~entflow.hf.setup.RealTrainConfig`)."""

    # identity
    name: str | None = None  # run directory name (default: the method name)
    out_dir: str = "runs"
    seed: int = 0
    # task and policy
    task: str | None = None  # the task's name; the setup's config subclass gives the default
    task_params: dict[str, Any] = field(default_factory=dict)  # e.g. {validation_size: 32}
    policy_path: str | None = None  # a saved policy; None = the setup's default policy
    # method
    method: str = "grpo"  # any registered name or composition "a+b"
    method_params: dict[str, Any] = field(default_factory=dict)
    group: str | None = None  # label shared by the seeds of one method in a comparison (report grouping)
    # rollout
    steps: int = 140
    schedule_steps: int | None = None  # total_steps of step schedules (None: steps; kept on resume)
    prompts_per_step: int = 16
    group_size: int = 16  # G responses per prompt
    temperature: float = 1.0
    # update
    ppo_epochs: int = 1
    mini_batches: int = 4  # optimizer steps per rollout batch (per epoch)
    # one optimizer step per rollout batch (r ≡ 1): the update then ignores ppo_epochs and mini_batches
    # (trainer.step.update_passes, which also honours a method that requires it)
    strict_on_policy: bool = False
    optimizer: str = "adamw"  # adamw | adamw_fused (torch's fused kernel: ≈ 4× faster on a CPU, not bitwise) | sgd
    lr: float = 2e-4
    weight_decay: float = 0.0
    grad_clip: float | None = 1.0
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    agg: str = "token-mean"
    adv_scale: str = "group"  # group | batch | none
    # rewards drawn Bernoulli(1/2) per response, independent of it (Park et al. 2025, arXiv 2509.26114:
    # what clipping does to entropy when the reward carries no signal); validation still scores truly
    random_reward: bool = False
    # diagnostics
    audit: bool = True  # true entropy change vs every estimator …
    audit_every: int = 1  # … every audit_every-th step and every validation step (0: validation steps only)
    eval_every: int = 10
    eval_k: int = 8  # samples per validation prompt at temperature 1
    samples_logged: int = 4  # responses written to samples.jsonl per step
    # final coverage evaluation (coverage.json): n samples per validation (and hard-split) problem at
    # the training temperature for the warm start and the final policy; 0 = off (pre-registered: 256)
    coverage_n: int = 0
    coverage_k: list[int] | None = None  # the pass@k curve's k (default 1, 2, 4, …, up to coverage_n)
    # machinery
    # checkpoint policy (entflow.trainer.loop): after every checkpoint_every-th step, after any step that
    # ends checkpoint_minutes (wall clock) after the last checkpoint, and after the last step
    checkpoint_every: int = 1
    checkpoint_minutes: float | None = None
    threads: int = 1  # torch threads (may change on resume; the same value resumes bit for bit)
    chunk_size: int | None = None  # token_stats chunking
    # update forwards' token statistics from the last hidden state and the LM head's weight
    # (token_stats_from_hidden; no [N, T, V] logits) when the head is a plain nn.Linear; equal to
    # float32 round-off, not bitwise, so off by default to keep the lab's metrics bit-identical
    hidden_stats: bool = False
    # each distinct prompt runs once per forward (generation, update, re-scoring) and its KV cache
    # serves every row that repeats it (trainer/shared_prompts.py); equal to float32 round-off, not
    # bitwise, so off by default for the lab
    share_prompts: bool = False
    progress: bool = True

    @property
    def run_name(self) -> str:
        return self.name or self.method.replace("+", "_")

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / self.run_name

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the key for any impossible value."""
        from entflow.core.advantages import SCALES
        from entflow.core.ppo import AGG_MODES
        from entflow.methods import get_method

        def need(ok: bool, key: str, what: str) -> None:
            if not ok:
                raise ConfigError(key, f"{what}, got {getattr(self, key)!r}")

        need(self.steps >= 1, "steps", "must be >= 1")
        need(self.prompts_per_step >= 1, "prompts_per_step", "must be >= 1")
        need(self.group_size >= 2, "group_size", "must be >= 2 (group advantages need G >= 2)")
        need(self.temperature > 0, "temperature", "must be > 0")
        need(self.ppo_epochs >= 1, "ppo_epochs", "must be >= 1")
        need(self.mini_batches >= 1, "mini_batches", "must be >= 1")
        need(
            self.mini_batches <= self.prompts_per_step * self.group_size,
            "mini_batches",
            f"must be <= prompts_per_step * group_size = {self.prompts_per_step * self.group_size}",
        )
        need(self.optimizer in ("adamw", "adamw_fused", "sgd"), "optimizer", "must be 'adamw', 'adamw_fused' or 'sgd'")
        need(self.lr > 0, "lr", "must be > 0")
        need(self.weight_decay >= 0, "weight_decay", "must be >= 0")
        need(self.grad_clip is None or self.grad_clip > 0, "grad_clip", "must be > 0 or null")
        need(0 <= self.clip_low <= 1, "clip_low", "must be in [0, 1]")
        need(self.clip_high >= 0, "clip_high", "must be >= 0")
        need(self.dual_clip is None or self.dual_clip > 1, "dual_clip", "must be > 1 or null")
        need(self.agg in AGG_MODES, "agg", f"must be one of {AGG_MODES}")
        need(self.adv_scale in SCALES, "adv_scale", f"must be one of {SCALES}")
        need(self.eval_every >= 0, "eval_every", "must be >= 0 (0 = only at start and end)")
        need(self.audit_every >= 0, "audit_every", "must be >= 0 (0 = validation steps only)")
        need(self.eval_k >= 1, "eval_k", "must be >= 1")
        need(self.coverage_n >= 0, "coverage_n", "must be >= 0 (0 = no coverage evaluation)")
        need(
            self.coverage_k is None or all(isinstance(k, int) and 1 <= k <= self.coverage_n for k in self.coverage_k),
            "coverage_k",
            f"must be null or integers in [1, coverage_n = {self.coverage_n}]",
        )
        need(self.samples_logged >= 0, "samples_logged", "must be >= 0")
        need(self.checkpoint_every >= 1, "checkpoint_every", "must be >= 1")
        need(
            self.checkpoint_minutes is None or self.checkpoint_minutes > 0, "checkpoint_minutes", "must be > 0 or null"
        )
        need(self.threads >= 1, "threads", "must be >= 1")
        need(self.chunk_size is None or self.chunk_size >= 1, "chunk_size", "must be >= 1 or null")
        need(bool(self.run_name) and "/" not in self.run_name, "name", "must be a plain directory name")
        self.validate_task()
        need(self.schedule_steps is None or self.schedule_steps >= 1, "schedule_steps", "must be >= 1 or null")
        try:
            get_method(self.method, **self.method_params)
        except EntflowError as e:
            key = "method" if "param" not in type(e).__name__.lower() else "method_params"
            raise ConfigError(key, str(e)) from e

    def validate_task(self) -> None:
        """Checks of ``task`` and ``task_params`` (and a subclass's own keys), which only the code that
        builds the task can make: the lab's :class:`~entflow.lab.config.LabConfig` and the real-model
        :class:`~entflow.hf.setup.RealTrainConfig` override it. Raises :class:`ConfigError`."""
        if not isinstance(self.task, str) or not self.task:
            raise ConfigError("task", f"must name a task, got {self.task!r}")

    def loss_spec(self) -> LossSpec:
        """The loss's settings: ``clip_low``, ``clip_high``, ``dual_clip``, ``agg``."""
        from entflow.core.ppo import LossSpec

        return LossSpec(self.clip_low, self.clip_high, self.dual_clip, self.agg)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "a mapping"}


def type_in_words(hint: Any) -> str:
    """A type annotation as a user reads it: ``float | None`` → "a number or null"."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        words = [type_in_words(t) for t in typing.get_args(hint) if t is not type(None)]
        null = type(None) in typing.get_args(hint)
        return " or ".join(words + (["null"] if null else []))
    base = origin or hint
    if base is list or base is tuple:
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return "a list" + (f" of {type_in_words(args[0]).removeprefix('an ').removeprefix('a ')}s" if args else "")
    return _TYPE_WORDS.get(base, getattr(base, "__name__", str(base)))


def _check_type(key: str, value: Any, cls: type = TrainConfig) -> Any:
    """Coerce/verify ``value`` against the annotation of field ``key`` of ``cls``."""
    hint = typing.get_type_hints(cls)[key]
    origin = typing.get_origin(hint)
    allowed = typing.get_args(hint) if origin in (typing.Union, types.UnionType) else (hint,)
    if value is None:
        if type(None) in allowed:
            return None
        raise ConfigError(key, f"must not be null (expected {type_in_words(hint)})")
    for t in allowed:
        base = typing.get_origin(t) or t
        if base is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if base is bool and isinstance(value, bool):
            return value
        if base in (int, float, str, dict, list) and isinstance(value, base) and not isinstance(value, bool):
            return value
    raise ConfigError(key, f"expected {type_in_words(hint)}, got {type(value).__name__} {value!r}")


def parse_override(text: str) -> tuple[str, Any]:
    """``"lr=1e-3"`` → ("lr", 0.001); values parsed as YAML scalars. ``method.lambda_min=0.5``
    sets a method parameter."""
    if "=" not in text:
        raise ConfigError(text, "overrides are written key=value")
    key, raw = text.split("=", 1)
    raw = raw.strip()
    for number in (int, float):  # YAML 1.1 reads "3e-4" as a string; a user means a number
        try:
            return key.strip(), number(raw)
        except ValueError:
            pass
    return key.strip(), yaml.safe_load(raw) if raw else None


def build_config(
    base: dict[str, Any] | None = None, overrides: list[str] | None = None, cls: type[TrainConfig] = TrainConfig
) -> TrainConfig:
    """A validated :class:`TrainConfig` (or subclass ``cls``) from a dict (e.g. YAML) plus
    ``key=value`` overrides.

    Unknown keys, wrong types and impossible values raise :class:`ConfigError` naming the key,
    before any work is done.
    """
    values: dict[str, Any] = dict(base or {})
    params: dict[str, Any] = dict(values.pop("method_params", None) or {})
    for text in overrides or []:
        key, value = parse_override(text)
        if key.startswith("method."):
            params[key.removeprefix("method.")] = value
        else:
            values[key] = value
    if "method_params" in values:  # given as an override: method_params={a: 1}
        extra = values.pop("method_params")
        if not isinstance(extra, dict):
            raise ConfigError("method_params", f"expected a mapping, got {extra!r}")
        params |= extra
    known = {f.name for f in dataclasses.fields(cls)}
    for key in values:
        if key not in known:
            raise ConfigError(key, f"unknown key; known keys: {', '.join(sorted(known))}")
    if not isinstance(params, dict):
        raise ConfigError("method_params", f"expected a mapping, got {params!r}")
    typed = {k: _check_type(k, v, cls) for k, v in values.items()}
    cfg = cls(**typed, method_params=params)
    cfg.validate()
    return cfg


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into a dict (empty file → {})."""
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), "a config file must hold a mapping of key: value")
    return data
