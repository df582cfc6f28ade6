"""The run (docs/design.md §10): train, resume, checkpoints, and what a run directory receives.

A run is step 0 (the starting policy's validation) and steps 1…``steps`` of
:func:`entflow.trainer.step.train_step`; after each, ``method.update(metrics)``, the record into
``metrics.jsonl`` (and TensorBoard), samples, timings and a checkpoint.

Every step reseeds from (seed, step), and checkpoints hold the trainable weights, optimizer,
method state and RNG states, so ``resume`` reproduces an uninterrupted run bit for bit on the CPU.

Checkpoint policy (:func:`_due_checkpoint`): a checkpoint is written after every
``checkpoint_every``-th step, after any step that ends ``checkpoint_minutes`` or more after the
last checkpoint, and after the last step. It is one atomic file (``checkpoints/last.pt``), so a
kill at any moment loses at most the steps since the last checkpoint: their records are already
in ``metrics.jsonl``, and ``--resume`` recomputes them from the checkpoint (the same numbers,
written once). The lab checkpoints every step (its policy is ~1 M parameters); a real model's
checkpoint is the size of its trainable weights plus two AdamW moments (1.6 GB for SmolLM2-135M,
84 GB for a fully fine-tuned 7B model, a few MB for a LoRA adapter), so real runs checkpoint
by time (``entflow.hf.setup.RealTrainConfig``). Frozen parameters (a LoRA adapter's base) are
never written: they come back from the policy the run starts from.

A finished run copied without its checkpoints (the per-run files committed under docs/results)
resumes as it is (:func:`finished_without_checkpoint`): nothing is trained, so ``entflow reproduce``
over such folders judges the committed runs themselves.
"""

from __future__ import annotations

import dataclasses
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from entflow.errors import ConfigError
from entflow.files import unfinished_writes, write_json
from entflow.methods import Method
from entflow.trainer.collect import method_step, schedule_steps
from entflow.trainer.config import TrainConfig
from entflow.trainer.determinism import deterministic_kernels
from entflow.trainer.faults import kill_point
from entflow.trainer.progress import ProgressBar, quiet_transformers
from entflow.trainer.rollout import Rollout
from entflow.trainer.rundir import (
    JsonlWriter,
    load_checkpoint,
    load_trainable_state,
    read_jsonl,
    rng_state,
    save_checkpoint,
    set_rng_state,
    trainable_state,
    write_config,
)
from entflow.trainer.seeds import STEP, stream_seed
from entflow.trainer.step import StepPlan, plan_steps, train_step

# --------------------------------------------------------------------------------------------
# What a run is made of
# --------------------------------------------------------------------------------------------


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """``cfg.optimizer`` (AdamW or SGD) over ``model``'s trainable parameters (all of them, unless
    some are frozen, as a LoRA adapter's base weights are)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    # adamw_fused: the same update in one fused kernel (float round-off apart, not bitwise)
    fused = {"fused": True} if cfg.optimizer == "adamw_fused" else {}
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **fused)


@dataclass
class RunSetup:
    """What a run trains: the task, the policy, where the policy came from, how to load a frozen
    reference copy, and how to validate. ``entflow.lab.setup.lab_setup`` builds the lab's;
    ``entflow.hf.setup.real_setup`` builds one for a Hugging Face model and real data."""

    task: Any
    model: Any
    tokenizer: Any
    policy_path: str
    load_reference: Callable[[], Any]
    validate: Callable[..., dict[str, float]]  # (model, tokenizer, task, cfg, step) -> val/* metrics
    # (model, tokenizer, task, cfg) -> {split: {...pass@k curve...}}, run when cfg.coverage_n > 0
    coverage: Callable[..., dict[str, Any]] | None = None
    # a folder where the warm start's coverage may be cached (the warm start is immutable there, so
    # runs that share it, their seed and the coverage settings share one evaluation); None: never
    warm_coverage_cache: Path | None = None
    # what else the warm start's coverage depends on, added to the cache key (a real model's
    # generation and reward settings); None: only the trainer's keys (the lab's)
    warm_coverage_key: dict[str, Any] | None = None


def _due_eval(cfg: TrainConfig, step: int) -> bool:
    """Validate (and log the §9 diagnostics) every ``eval_every`` steps and at the last."""
    return step == cfg.steps or (cfg.eval_every > 0 and step % cfg.eval_every == 0)


def train(
    cfg: TrainConfig,
    resume: bool = False,
    overwrite: bool = False,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    *,
    setup: Callable[[TrainConfig], RunSetup],
) -> Path:
    """Run (or resume) a training run; returns its run directory. ``setup`` builds the task and
    policy: :func:`entflow.lab.setup.lab_setup` or :func:`entflow.hf.setup.real_setup`."""
    method = cfg.validate()  # the run's one build of its method
    torch.set_num_threads(cfg.threads)
    # with several threads, torch's accumulating index kernels sum in the order the threads reach
    # them; serially here, so a run repeats bit for bit (trainer/determinism.py)
    with quiet_transformers(), deterministic_kernels():
        cfg = dataclasses.replace(cfg, schedule_steps=_anchored_schedule_steps(cfg, cfg.run_dir, resume))
        if resume and finished_without_checkpoint(cfg):
            return cfg.run_dir  # its logs are all there is, and all a report or a claim reads
        prepare_run_dir(cfg.run_dir, resume, overwrite)
        parts = setup(cfg)
        state = _start_state(parts, cfg, resume, method)
        log = RunLog(cfg.run_dir, on_step)
        bar = ProgressBar(cfg.progress)
        bar.add(cfg.run_name, total=cfg.steps, completed=state.start)
        try:
            if state.start == 0:
                log.metrics({"step": 0, **parts.validate(parts.model, parts.tokenizer, parts.task, cfg, 0)})
                _write_coverage(parts, cfg, "warm", 0)
            for step in range(state.start + 1, cfg.steps + 1):
                record = _run_step(parts, state, cfg, step, log)
                bar.update(completed=step, info=_progress_info(record))
            _write_coverage(parts, cfg, "final", cfg.steps)
        finally:
            bar.close()
            log.close()
        final = parts.model.merge_and_unload() if hasattr(parts.model, "merge_and_unload") else parts.model
        final.save_pretrained(cfg.run_dir / "checkpoints" / "final")  # an adapter (LoRA) merged into its base
        parts.tokenizer.save_pretrained(cfg.run_dir / "checkpoints" / "final")
    return cfg.run_dir


@dataclass
class _State:
    """What a run carries from step to step besides the model."""

    method: Method
    plan: StepPlan  # what every step needs from the method, decided once per run
    optimizer: torch.optim.Optimizer
    ref_model: Any
    start: int  # the last finished step (0: a fresh run)
    last_checkpoint: float = dataclasses.field(default_factory=lambda: _now())  # when it was written


def _start_state(parts: RunSetup, cfg: TrainConfig, resume: bool, method: Method) -> _State:
    """The run's state around ``method`` (built once, by ``cfg.validate()``): its step plan, the
    optimizer and the frozen reference model, restored from the last checkpoint on resume (after
    which the config must match the run's, see :func:`_check_resumable`)."""
    plan = plan_steps(method, cfg)
    if plan.needs.greedy_baseline:  # ReMax: a greedy rollout per prompt, which train_step does not draw
        raise ConfigError(
            "method",
            f"{cfg.method}: {', '.join(plan.needs.greedy_baseline)} takes the reward of a greedy response to "
            "each prompt as its baseline (arXiv 2310.10505), an extra rollout this trainer does not draw; "
            "use rloo or grpo, or verl's own adv_estimator=remax",
        )
    ref_model = None
    if plan.needs.ref_logp:
        ref_model = parts.load_reference()
        ref_model.eval().requires_grad_(False)
    optimizer = make_optimizer(parts.model, cfg)
    start = 0
    ckpt_path = checkpoint_path(cfg.run_dir)
    if resume and ckpt_path.exists():
        ck = load_checkpoint(ckpt_path)
        load_trainable_state(parts.model, ck["model"], ckpt_path)
        optimizer.load_state_dict(ck["optimizer"])
        method.load_state_dict(ck["method"])
        set_rng_state(ck["rng"])
        start = int(ck["step"])
        _say(f"resuming {cfg.run_dir} from step {start} ({ckpt_path.relative_to(cfg.run_dir)}, its last checkpoint)")
    elif resume and (cfg.run_dir / "metrics.jsonl").exists():
        _say(f"resuming {cfg.run_dir} from step 0: it has no checkpoint yet")
    resolved = cfg.to_dict() | {"policy_path": str(parts.policy_path)}
    if resume:
        _check_resumable(cfg.run_dir, resolved, type(cfg)().to_dict() if _defaults_buildable(cfg) else None)
    write_config(cfg.run_dir, resolved)
    return _State(method, plan, optimizer, ref_model, start)


def _run_step(parts: RunSetup, state: _State, cfg: TrainConfig, step: int, log: RunLog) -> dict[str, Any]:
    """One step of the run: train, update the method's controllers, validate when due, write the
    record, samples and timings, checkpoint. Returns the step's record."""
    # the global RNGs the step runs under, torch's and Python's (whose states the checkpoint holds:
    # Python's, never seeded, was the interpreter's own random state, another in every process)
    torch.manual_seed(stream_seed(cfg.seed, STEP, step))
    random.seed(stream_seed(cfg.seed, STEP, step))
    due = _due_eval(cfg, step)
    metrics, roll, timings = train_step(
        parts.model,
        parts.tokenizer,
        parts.task,
        state.method,
        state.optimizer,
        cfg,
        step,
        state.ref_model,
        due,
        plan=state.plan,
    )
    state.method.update({**metrics, "step": method_step(step)})
    record = {"step": step, **metrics}
    if due:
        t0 = time.perf_counter()
        record.update(parts.validate(parts.model, parts.tokenizer, parts.task, cfg, step))
        timings["time/eval_s"] = time.perf_counter() - t0
    log.step(record, roll, cfg, timings, whole_groups=due)
    if _due_checkpoint(cfg, step, _now() - state.last_checkpoint):
        save_checkpoint(
            checkpoint_path(cfg.run_dir),
            model=trainable_state(parts.model),
            optimizer=state.optimizer.state_dict(),
            method=state.method.state_dict(),
            rng=rng_state(),
            step=step,
        )
        state.last_checkpoint = _now()
    return record


def _say(line: str) -> None:
    """One line about the run on stderr (where the progress bar writes)."""
    print(line, file=sys.stderr, flush=True)


def _now() -> float:
    """The checkpoint policy's clock (monotonic seconds)."""
    return time.monotonic()


def _due_checkpoint(cfg: TrainConfig, step: int, since_last_s: float) -> bool:
    """The checkpoint policy: every ``checkpoint_every`` steps, whenever ``checkpoint_minutes`` have
    passed since the last checkpoint (``since_last_s`` seconds ago), and after the last step."""
    if step == cfg.steps or step % cfg.checkpoint_every == 0:
        return True
    return cfg.checkpoint_minutes is not None and since_last_s >= 60.0 * cfg.checkpoint_minutes


def _write_coverage(parts: RunSetup, cfg: TrainConfig, which: str, step: int) -> None:
    """When ``cfg.coverage_n > 0`` and the setup has a coverage evaluation, add the policy's pass@k
    curves per split as ``which`` ("warm" at step 0, "final" after the last step) to the run
    directory's ``coverage.json`` (the warm start's entry survives a resume)."""
    if cfg.coverage_n <= 0 or parts.coverage is None:
        return
    import json

    path = cfg.run_dir / "coverage.json"
    data = json.loads(path.read_text()) if which != "warm" and path.exists() else {}
    same = data.get("n") == cfg.coverage_n and data.get("temperature") == cfg.temperature
    if which == "final" and same and (data.get("final") or {}).get("step") == step:
        return  # a finished run resumed: this policy was evaluated already
    data |= {"n": cfg.coverage_n, "temperature": cfg.temperature}
    if which == "warm" and parts.warm_coverage_cache is not None:
        splits = _cached_warm_coverage(parts, cfg)
    else:
        splits = parts.coverage(parts.model, parts.tokenizer, parts.task, cfg)
    data[which] = {"step": step, "splits": splits}
    write_json(path, data, indent=1)


# part of the warm-coverage cache key: bump it when what a coverage evaluation returns changes
WARM_COVERAGE_FORMAT = 1


def _cached_warm_coverage(parts: RunSetup, cfg: TrainConfig) -> dict[str, Any]:
    """The warm start's coverage from ``parts.warm_coverage_cache``, computed and stored on a miss.
    The evaluation runs under its own seeds in a forked RNG, so a hit changes nothing that follows;
    the key is everything the evaluation reads besides the (immutable) warm start."""
    import hashlib
    import json

    from entflow.trainer.evaluate import coverage_seed

    key = {
        "seed": coverage_seed(cfg),
        "n": cfg.coverage_n,
        "k": cfg.coverage_k,
        "temperature": cfg.temperature,
        "task": cfg.task,
        "task_params": cfg.task_params,
        "format": WARM_COVERAGE_FORMAT,
    }
    if parts.warm_coverage_key is not None:
        key["setup"] = parts.warm_coverage_key
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = Path(parts.warm_coverage_cache) / f"coverage-{digest}.json"
    if path.exists():
        return json.loads(path.read_text())["splits"]
    splits = parts.coverage(parts.model, parts.tokenizer, parts.task, cfg)
    write_json(path, {"key": key, "splits": splits}, indent=1)
    return splits


def _progress_info(record: dict[str, Any]) -> str:
    info = f"reward {record.get('reward/mean', float('nan')):.2f}  H {record.get('entropy', float('nan')):.3f}"
    if "val/acc" in record:
        info += f"  val {record['val/acc']:.2f}"
    return info


# --------------------------------------------------------------------------------------------
# The run directory
# --------------------------------------------------------------------------------------------


def checkpoint_path(run_dir: Path) -> Path:
    """The checkpoint a run resumes from."""
    return run_dir / "checkpoints" / "last.pt"


def finished_without_checkpoint(cfg: TrainConfig) -> bool:
    """Whether ``cfg.run_dir`` holds this config's run, finished (``metrics.jsonl`` records step
    ``cfg.steps`` and, with ``coverage_n`` > 0, ``coverage.json`` its final evaluation there) but
    without the checkpoint a resume starts from: a finished run's committed files (such as
    ``docs/results/real-v2/<run>``), which a resume judges as they are instead of training again.
    A config that differs from the run's raises :class:`ConfigError`, as any resume does."""
    import json

    run_dir = cfg.run_dir
    if checkpoint_path(run_dir).exists() or not (run_dir / "config.yaml").exists():
        return False
    if cfg.steps not in {int(r["step"]) for r in read_jsonl(run_dir / "metrics.jsonl") if "step" in r}:
        return False
    if cfg.coverage_n > 0:
        path = run_dir / "coverage.json"
        final = (json.loads(path.read_text()).get("final") or {}) if path.exists() else {}
        if final.get("step") != cfg.steps:
            return False
    resolved = cfg.to_dict()
    if resolved.get("policy_path") is None:  # the setup's default policy, resolved when the run was trained
        resolved.pop("policy_path", None)
    _check_resumable(run_dir, resolved, type(cfg)().to_dict() if _defaults_buildable(cfg) else None)
    return True


def prepare_run_dir(run_dir: Path, resume: bool, overwrite: bool) -> None:
    """Create ``run_dir``; refuse to start over a finished one unless ``overwrite`` (which removes
    it first). A run resumed before its first checkpoint starts again from step 0 and, like any
    resumed run, reproduces the steps already in its logs without writing them twice."""
    metrics_path = run_dir / "metrics.jsonl"
    if not resume and metrics_path.exists():
        if not overwrite:
            raise ConfigError("name", f"run directory {run_dir} exists; pass --resume or --overwrite, or another name")
        import shutil

        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if resume:  # what a process killed inside an atomic write left: never read, removed
        for target in (checkpoint_path(run_dir), run_dir / "config.yaml", run_dir / "coverage.json"):
            for tmp in unfinished_writes(target):
                size = tmp.stat().st_size
                tmp.unlink()
                _say(f"removed {tmp.name} from {tmp.parent}: an unfinished write of {target.name} ({size} bytes)")


class RunLog:
    """The run directory's logs: ``metrics.jsonl`` (+ TensorBoard, + ``on_step``), ``samples.jsonl``
    and ``timing.jsonl``.

    A step is logged samples, timings, TensorBoard scalars, and its ``metrics.jsonl`` line last:
    that line marks the step logged. Opening the logs of a killed run repairs them to the marked
    steps: a half-written last line is dropped, the samples and timings of a step without its
    line are cut off, and TensorBoard is told to purge its scalars from the first unmarked step
    on (``purge_step``); the resumed run writes them once, whole. A marked step is not written
    again: the resumed run recomputes it from the checkpoint (the same numbers)."""

    def __init__(self, run_dir: Path, on_step: Callable[[dict[str, Any]], None] | None = None) -> None:
        self._metrics = JsonlWriter(run_dir / "metrics.jsonl")  # a torn last line dropped first
        self.done_steps = {int(r["step"]) for r in read_jsonl(run_dir / "metrics.jsonl") if "step" in r}
        self._samples, self._timing = (
            JsonlWriter(run_dir / f, keep_steps=self.done_steps) for f in ("samples.jsonl", "timing.jsonl")
        )
        resumed = any(run_dir.glob("events.out.tfevents.*"))
        self._tb = _tensorboard(run_dir, purge_step=max(self.done_steps, default=-1) + 1 if resumed else None)
        self._on_step = on_step
        self._t0 = time.perf_counter()

    def step(
        self, record: dict[str, Any], roll: Rollout, cfg: TrainConfig, timings: dict[str, float], whole_groups: bool
    ) -> None:
        """A training step's samples, timings and record, in that order (the record marks it logged)."""
        self.samples(record["step"], roll, cfg, whole_groups)
        self.timings(record["step"], timings)
        self.metrics(record)

    def metrics(self, record: dict[str, Any]) -> None:
        if record["step"] in self.done_steps:
            return
        if self._tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, float) and math.isfinite(v):
                    self._tb.add_scalar(k, v, record["step"])
            self._tb.flush()
        written = self._metrics.write(record)  # the step's mark, written last
        kill_point("metrics", record["step"], self._metrics.file, written)  # a test hook (trainer/faults.py)
        if self._on_step is not None:
            self._on_step(record)

    def samples(self, step: int, roll: Rollout, cfg: TrainConfig, whole_groups: bool) -> None:
        """Responses of the first ``samples_logged`` prompts: whole groups when ``whole_groups``
        (validation steps: diversity needs them), one response per prompt otherwise."""
        if step in self.done_steps:
            return
        for i in range(min(cfg.samples_logged, cfg.prompts_per_step)):
            first = i * cfg.group_size
            for j in range(first, first + (cfg.group_size if whole_groups else 1)):
                written = self._samples.write(
                    {
                        "step": step,
                        "group": i,
                        "prompt": roll.prompts[j],
                        "response": roll.texts[j],
                        "reward": float(roll.rewards[j]),
                    }
                )
                kill_point("samples", step, self._samples.file, written)  # a test hook (trainer/faults.py)

    def timings(self, step: int, timings: dict[str, float]) -> None:
        if step not in self.done_steps:
            self._timing.write({"step": step, **timings, "time/elapsed_s": time.perf_counter() - self._t0})

    def close(self) -> None:
        for w in (self._metrics, self._samples, self._timing):
            w.close()
        if self._tb is not None:
            self._tb.close()


# --------------------------------------------------------------------------------------------
# Resume
# --------------------------------------------------------------------------------------------


# keys a resumed run may change: they do not alter what the finished steps computed
# (``steps`` may grow or shrink; schedules stay anchored to ``schedule_steps``, see below)
RESUME_MAY_CHANGE = (
    "steps",
    "progress",
    "eval_every",
    "audit_every",
    "checkpoint_every",
    "checkpoint_minutes",
    "samples_logged",
    "threads",  # the steps to come may round differently, the finished ones are what they are
    "out_dir",
    "name",
    "group",
)


def _anchored_schedule_steps(cfg: TrainConfig, run_dir: Path, resume: bool) -> int:
    """The ``total_steps`` schedules use: ``schedule_steps`` if set, else ``steps`` — except on
    resume, where it is the value the run was started with, so that a changed ``steps`` (training
    longer or shorter) never shifts a schedule that depends on total_steps (pos_adv_reweight's
    stage and epoch schedules): finished steps stay reproducible and the schedule continues as
    planned (after its planned end it stays at its final value)."""
    import yaml

    path = run_dir / "config.yaml"
    if resume and path.exists():
        old = yaml.safe_load(path.read_text()) or {}
        anchored = old.get("schedule_steps") or old.get("steps")
        if anchored is not None:
            if cfg.schedule_steps is not None and cfg.schedule_steps != anchored:
                raise ConfigError(
                    "schedule_steps", f"the run in {run_dir} was started with {anchored}, got {cfg.schedule_steps}"
                )
            return int(anchored)
    return schedule_steps(cfg)


def _defaults_buildable(cfg: TrainConfig) -> bool:
    """Whether ``type(cfg)()`` builds (every field has a default)."""
    return all(
        f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        for f in dataclasses.fields(cfg)
    )


def _check_resumable(run_dir: Path, resolved: dict[str, Any], defaults: dict[str, Any] | None = None) -> None:
    """Refuse to resume a run under a config that would not reproduce its finished steps. A key the
    run's ``config.yaml`` lacks (written by an earlier entflow, before the key existed) counts as
    its default in ``defaults``."""
    import yaml

    path = run_dir / "config.yaml"
    if not path.exists():
        return
    old = (defaults or {}) | (yaml.safe_load(path.read_text()) or {})
    changed = sorted(k for k in resolved if k not in RESUME_MAY_CHANGE and old.get(k) != resolved[k])
    if changed:
        diffs = ", ".join(f"{k}: {old.get(k)!r} -> {resolved[k]!r}" for k in changed)
        raise ConfigError(changed[0], f"differs from the run being resumed in {run_dir} ({diffs}); start a fresh run")


def _tensorboard(run_dir: Path, purge_step: int | None = None):
    """A TensorBoard writer into ``run_dir``; ``purge_step``: a resumed run's first unlogged step,
    from which TensorBoard hides what the killed process's event files hold."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is in the `lab` extra; metrics.jsonl has everything anyway
        return None
    return SummaryWriter(log_dir=str(run_dir), purge_step=purge_step)
