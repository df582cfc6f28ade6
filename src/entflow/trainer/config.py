"""Training configuration: one flat dataclass, YAML + ``key=value`` overrides, validated before any
work (docs/design.md §10, §13). The lab and real models subclass it with their task checks."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from entflow.core.clip_settings import CLIP_CHECKS, CLIP_EPS
from entflow.core.loss_names import AGG_MODES, SCALES
from entflow.core.rules import Check, above, at_least, at_most_of, choice, or_null
from entflow.errors import ConfigError, EntflowError

if typing.TYPE_CHECKING:
    from entflow.core.ppo import LossSpec
    from entflow.methods.base import Method


def key_help(help: str, allowed: Check | None = None) -> dict[str, Any]:
    """A config key's field metadata: its ``help`` line and, where the key has one, the
    :class:`~entflow.core.rules.Check` of its allowed values: one object whose words ``entflow train
    --help`` prints (:func:`describe_keys`) and whose test :func:`check_keys` makes, so the two
    cannot drift."""
    return {"help": help, "check": allowed}


def setting(default: Any, help: str, *, allowed: Check | None = None) -> Any:
    """A config key with an immutable default: a dataclass field carrying :func:`key_help`'s metadata
    (a mutable default is ``field(default_factory=..., metadata=key_help(...))``)."""
    return field(default=default, metadata=key_help(help, allowed))


def key_checks(cls: type) -> dict[str, Check]:
    """The :class:`~entflow.core.rules.Check` of every key of the config class ``cls`` that has one,
    in field order (a subclass that only changes a key's default keeps its base class's check)."""
    out = {}
    for f in dataclasses.fields(cls):
        check = key_info_field(cls, f.name).get("check")
        if check is not None:
            out[f.name] = check
    return out


def check_keys(config: Any, error: Callable[[str, str], Exception] | None = None) -> None:
    """Raise ``error(key, message)`` (default :class:`ConfigError`) for the first key of ``config``
    whose value its :class:`~entflow.core.rules.Check` refuses: ``must be <its words>, got <value>``,
    and the values of the other keys a check reads."""
    for key, check in key_checks(type(config)).items():
        value = getattr(config, key)
        if not check.allows(value, config):
            read = ", ".join(f"{k}={getattr(config, k)!r}" for k in check.reads)
            message = f"must be {check.describe}{f' ({read})' if read else ''}, got {value!r}"
            raise (error or ConfigError)(key, message)


MISMATCH_KINDS = ("temperature", "quantize")


def rollout_mismatch_spec(spec: Any) -> tuple[str, float] | None:
    """``(kind, value)`` of a ``rollout_mismatch`` setting (None: none), checked: ``kind`` one of
    :data:`MISMATCH_KINDS`, ``value`` a finite number > 0, no other key; else :class:`ConfigError`."""
    if spec is None:
        return None
    allowed = f"{{kind: {' | '.join(MISMATCH_KINDS)}, value: a number > 0}}"
    if not isinstance(spec, dict) or set(spec) != {"kind", "value"}:
        raise ConfigError("rollout_mismatch", f"must be null or {allowed}, got {spec!r}")
    kind, value = spec["kind"], spec["value"]
    if kind not in MISMATCH_KINDS:
        raise ConfigError("rollout_mismatch", f"kind must be one of {MISMATCH_KINDS}, got {kind!r}")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise ConfigError("rollout_mismatch", f"value must be a finite number > 0, got {value!r}")
    return kind, float(value)


def _mismatch_ok(spec: Any) -> bool:
    try:
        rollout_mismatch_spec(spec)
    except ConfigError:
        return False
    return True


MISMATCH_CHECK = Check(f"null or {{kind: {' | '.join(MISMATCH_KINDS)}, value: > 0}}", _mismatch_ok)
"""``rollout_mismatch``'s rule: :func:`rollout_mismatch_spec`, which says what is wrong in detail."""


@dataclass
class TrainConfig:
    """Everything a training run needs; ``config.yaml`` in the run directory is this, resolved.

    The trainer reads every key except ``task``, ``task_params`` and ``policy_path``, which the
    run's setup reads; each setup's config subclass gives ``task`` its default and adds its own keys
    (the lab: :class:`~entflow.lab.config.LabConfig`; real models:
    :class:`~entflow.hf.setup.RealTrainConfig`)."""

    # identity
    name: str | None = setting(None, "run directory name under out_dir (default: the method name)")
    out_dir: str = setting("runs", "folder that holds the run directories")
    seed: int = setting(0, "seed of the run: rollouts, the method's random draws, validation")
    # task and policy
    task: str | None = setting(None, "the task's name (its data on a real model); the setup's config gives the default")
    task_params: dict[str, Any] = field(
        default_factory=dict, metadata=key_help("parameters of the task (or the data), e.g. {validation_size: 32}")
    )
    policy_path: str | None = setting(None, "a saved policy to start from; null: the setup's default policy")
    # method
    method: str = setting("grpo", "any registered method or a composition a+b (entflow methods lists them)")
    method_params: dict[str, Any] = field(
        default_factory=dict,
        metadata=key_help("the method's parameters, also given as method.KEY=VALUE (entflow methods lists them)"),
    )
    group: str | None = setting(None, "label shared by the seeds of one method in a comparison (report grouping)")
    # rollout
    steps: int = setting(140, "rollout steps (each: sample, score, update)", allowed=at_least(1))
    schedule_steps: int | None = setting(
        None, "total steps of the step schedules (null: steps; kept on resume)", allowed=or_null(at_least(1))
    )
    prompts_per_step: int = setting(16, "prompts sampled per step", allowed=at_least(1))
    group_size: int = setting(16, "G: responses per prompt (group advantages need G >= 2)", allowed=at_least(2))
    temperature: float = setting(1.0, "sampling temperature of the rollouts and of validation", allowed=above(0))
    # update
    ppo_epochs: int = setting(1, "passes over each rollout batch", allowed=at_least(1))
    mini_batches: int = setting(
        4,
        "optimizer steps per rollout batch (per epoch)",
        allowed=at_least(1)
        & at_most_of(
            "prompts_per_step * group_size",
            lambda c: c.prompts_per_step * c.group_size,
            ("prompts_per_step", "group_size"),
        ),
    )
    # one optimizer step per rollout batch (r ≡ 1): the update then ignores ppo_epochs and mini_batches
    # (trainer.step.update_passes, which also honours a method that requires it)
    strict_on_policy: bool = setting(
        False, "one optimizer step per rollout batch (ratio r = 1): ignores ppo_epochs and mini_batches"
    )
    optimizer: str = setting(
        "adamw",
        "adamw, adamw_fused (torch's fused kernel: about 4x faster on a CPU, not bitwise) or sgd",
        allowed=choice("adamw", "adamw_fused", "sgd"),
    )
    lr: float = setting(2e-4, "learning rate", allowed=above(0))
    weight_decay: float = setting(0.0, "weight decay of the optimizer", allowed=at_least(0))
    grad_clip: float | None = setting(
        1.0, "clip the gradient norm to this value; null: no clipping", allowed=or_null(above(0))
    )
    clip_low: float = setting(
        CLIP_EPS, "PPO clip ε_low: the ratio is kept above 1 − clip_low", allowed=CLIP_CHECKS["clip_low"]
    )
    clip_high: float = setting(
        CLIP_EPS, "PPO clip ε_high: the ratio is kept below 1 + clip_high", allowed=CLIP_CHECKS["clip_high"]
    )
    dual_clip: float | None = setting(
        None, "dual-clip bound c on negative-advantage tokens; null: off", allowed=CLIP_CHECKS["dual_clip"]
    )
    agg: str = setting("token-mean", "how the per-token loss is reduced (docs/design.md)", allowed=choice(*AGG_MODES))
    adv_scale: str = setting(
        "group",
        "advantages divided by the std of their group, of the batch, or not at all",
        allowed=choice(*SCALES),
    )
    # a rollout–training mismatch injected into the sampler (trainer/rollout.py SamplingMismatch): the
    # rollout is drawn from a perturbed law and carries its log-probs as rollout_logp, while old_logp
    # stays the trainer's; null: the sampler is the trainer's own law (and rollout_logp = old_logp)
    rollout_mismatch: dict[str, Any] | None = field(
        default=None,
        metadata=key_help(
            "inject a rollout–training mismatch: {kind: temperature, value: 1.1} samples from softmax(z / (1.1·T)), "
            "{kind: quantize, value: 0.5} from logits rounded to multiples of 0.5; the rollout's rollout_logp is "
            "that law's, old_logp the trainer's (null: none)",
            MISMATCH_CHECK,
        ),
    )
    # rewards drawn Bernoulli(1/2) per response, independent of it (Park et al. 2025, arXiv 2509.26114:
    # what clipping does to entropy when the reward carries no signal); validation still scores truly
    random_reward: bool = setting(
        False, "train on rewards drawn Bernoulli(1/2) per response, independent of it; validation still scores truly"
    )
    # diagnostics
    audit: bool = setting(True, "measure the true entropy change of a step against every estimator")
    audit_every: int = setting(
        1, "audit every audit_every-th step and every validation step (0: validation steps only)", allowed=at_least(0)
    )
    eval_every: int = setting(
        10, "validate every eval_every steps (0: only at the start and the end)", allowed=at_least(0)
    )
    eval_k: int = setting(8, "samples per validation prompt at the training temperature", allowed=at_least(1))
    samples_logged: int = setting(4, "responses written to samples.jsonl per step", allowed=at_least(0))
    # final coverage evaluation (coverage.json): n samples per validation (and hard-split) problem at
    # the training temperature for the warm start and the final policy; 0 = off (pre-registered: 256)
    coverage_n: int = setting(
        0,
        "samples per validation problem for the start's and the final policy's pass@k curves (coverage.json); 0: off",
        allowed=at_least(0),
    )
    coverage_k: list[int] | None = field(
        default=None,
        metadata=key_help(
            "the k of the pass@k curve (null: 1, 2, 4, … up to coverage_n)",
            or_null(
                Check(
                    "integers in [1, coverage_n]",
                    lambda v, c: all(isinstance(k, int) and 1 <= k <= c.coverage_n for k in v),
                    ("coverage_n",),
                )
            ),
        ),
    )
    # machinery
    # checkpoint policy (entflow.trainer.loop): after every checkpoint_every-th step, after any step that
    # ends checkpoint_minutes (wall clock) after the last checkpoint, and after the last step
    checkpoint_every: int = setting(
        1, "checkpoint after every checkpoint_every-th step (and the last)", allowed=at_least(1)
    )
    checkpoint_minutes: float | None = setting(
        None,
        "also checkpoint after a step that ends this many minutes after the last checkpoint",
        allowed=or_null(above(0)),
    )
    threads: int = setting(
        1, "torch threads (may change on resume; the same value resumes bit for bit)", allowed=at_least(1)
    )
    chunk_size: int | None = setting(
        None, "token rows per chunk of the token statistics; null: no chunking", allowed=or_null(at_least(1))
    )
    # update forwards' token statistics from the last hidden state and the LM head's weight
    # (token_stats_from_hidden; no [N, T, V] logits) when the head is a plain nn.Linear; equal to
    # float32 round-off, not bitwise, so off by default to keep the lab's metrics bit-identical
    hidden_stats: bool = setting(
        False,
        "token statistics of the update from the last hidden state, without [N, T, V] logits (equal to float32 "
        "round-off, not bitwise)",
    )
    # each distinct prompt runs once per forward (generation, update, re-scoring) and its KV cache
    # serves every row that repeats it (trainer/shared_prompts.py); equal to float32 round-off, not
    # bitwise, so off by default for the lab
    share_prompts: bool = setting(
        False, "run each distinct prompt once per forward and share its KV cache (equal to float32 round-off)"
    )
    progress: bool = setting(True, "show a progress line while training")

    @property
    def run_name(self) -> str:
        return self.name or self.method.replace("+", "_")

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / self.run_name

    def validate(self) -> Method:
        """Raise :class:`ConfigError` naming the key for any impossible value. Returns the run's
        method, built here from ``method`` and ``method_params``: the one build of a run
        (:func:`~entflow.trainer.loop.train` trains this object)."""
        from entflow.methods import get_method
        from entflow.methods.needs import needs_of

        rollout_mismatch_spec(self.rollout_mismatch)  # what is wrong in detail, before its Check's words
        check_keys(self)  # every key's Check (its field metadata): the rule --help prints
        if not (self.run_name and "/" not in self.run_name):
            raise ConfigError("name", f"must be a plain directory name, got {self.name!r}")
        self.validate_task()
        try:
            method = get_method(self.method, **self.method_params)
        except EntflowError as e:
            key = "method" if "param" not in type(e).__name__.lower() else "method_params"
            raise ConfigError(key, str(e)) from e
        if needs_of(method).expert_rows:  # CHORD: the rollout would have to append the task's reference solutions
            raise ConfigError(
                "method",
                f"{self.method!r} trains on expert rows (TokenBatch.expert_mask), which this trainer's rollout "
                "does not supply; use the method through your own loop (docs/methods.md)",
            )
        return method

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
        """The config as ``config.yaml`` holds it; a key of :data:`OMITTED_WHEN_NULL` is left out while
        null, so a config that does not use it hashes as it did before the key existed."""
        d = dataclasses.asdict(self)
        for key in OMITTED_WHEN_NULL:
            if d.get(key, 0) is None:
                del d[key]
        return d


# keys added after configs were recorded (evidence/records.py hashes config.yaml): written only when set
OMITTED_WHEN_NULL = ("rollout_mismatch",)


def key_info_field(cls: type, name: str) -> dict[str, Any]:
    """The metadata of config key ``name`` of ``cls``: its field's, else the nearest base class's (a
    subclass that only changes a key's default keeps its help and check); {} when no class in the
    chain documents it."""
    for klass in cls.__mro__:
        if dataclasses.is_dataclass(klass):
            f = next((f for f in dataclasses.fields(klass) if f.name == name), None)
            if f is not None and f.metadata.get("help"):
                return dict(f.metadata)
    return {}


def key_info(cls: type, name: str) -> tuple[str, str | None]:
    """(help, allowed values in words) of config key ``name`` of the config class ``cls``
    (:func:`key_info_field`); ("", None) when no class in the chain documents it."""
    meta = key_info_field(cls, name)
    check = meta.get("check")
    return meta.get("help", ""), check.describe if check is not None else None


def default_text(value: Any) -> str:
    """A default as a user writes it on the command line or in YAML: ``null``, ``true``, ``{}``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a nested config: its keys
        return "{" + ", ".join(f"{k}: {default_text(v)}" for k, v in dataclasses.asdict(value).items()) + "}"
    return str(value)


def describe_keys(cls: type, names: list[str] | None = None, width: int = 100) -> list[str]:
    """One entry per config key of ``cls`` (or only ``names``), as ``entflow train --help`` prints
    them: ``key=default`` on its line, then the help and the allowed range, indented and wrapped to
    ``width`` columns."""
    import textwrap

    fields = {f.name: f for f in dataclasses.fields(cls)}
    lines = []
    for name in names if names is not None else list(fields):
        f = fields[name]
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
        help_text, allowed = key_info(cls, name)
        text = help_text + (f" (allowed: {allowed})" if allowed else "")
        lines.append(f"  {name}={default_text(default)}")
        lines += textwrap.wrap(text, width, initial_indent="      ", subsequent_indent="      ")
    return lines


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
