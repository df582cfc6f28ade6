"""The lab plugged into the trainer (docs/design.md §10): its task, its cached warm-started tiny
policy, and its validation (avg@k, pass@k, greedy accuracy at every evaluation step)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entflow.lab.config import LabConfig
from entflow.trainer import seeds
from entflow.trainer.loop import train as train_run

if TYPE_CHECKING:
    from entflow.trainer.loop import RunSetup


def resolve_policy(cfg: LabConfig) -> Path:
    """The warm-started policy this run starts from (pretrained and cached on first use)."""
    if cfg.policy_path:
        return Path(cfg.policy_path)
    from entflow.lab.pretrain import pretrain

    return pretrain(cfg.pretrain_config(), progress=cfg.progress)


def validate_policy(model, tokenizer, task, cfg: LabConfig, step: int) -> dict[str, float]:
    """Held-out accuracy at temperature 1 over ``eval_k`` samples (avg@k, pass@k), greedy
    accuracy, entropy and distinct correct answers, as ``val/*`` metrics."""
    from entflow.lab.pretrain import evaluate

    res = evaluate(
        model,
        tokenizer,
        task,
        task.validation_set(),
        k=cfg.eval_k,
        temperature=cfg.temperature,
        greedy=True,
        seed=seeds.stream_seed(cfg.seed, seeds.VALIDATION, step),
    )
    out = {f"val/{k}": float(v) for k, v in res.items() if k not in ("k", "n_problems") and v is not None}
    if hasattr(task, "hard_set"):  # avg@k on the harder held-out split (docs/regime.md); own seed, own RNG fork
        out["val/hard_acc"] = float(evaluate_hard_set(model, tokenizer, task, cfg, step)["acc"])
    return out


def evaluate_hard_set(
    model: Any, tokenizer: Any, task: Any, cfg: LabConfig, step: int, stream: int = seeds.HARD_SET
) -> dict[str, float]:
    """The metrics of :func:`entflow.lab.pretrain.evaluate` (avg@k as ``acc``, pass@k, …) on the
    task's harder held-out split ``task.hard_set()`` (docs/regime.md): ``eval_k`` samples per problem
    at the training temperature, under a forked RNG seeded by ``stream`` at ``step``
    (:mod:`entflow.trainer.seeds`: ``HARD_SET`` for the lab's ``val/hard_acc``, ``REGIME_HARD_SET``
    for the regime experiment's ``hard/*``)."""
    from entflow.lab.pretrain import evaluate

    return evaluate(
        model,
        tokenizer,
        task,
        task.hard_set(),
        k=cfg.eval_k,
        temperature=cfg.temperature,
        seed=seeds.stream_seed(cfg.seed, stream, step),
    )


def coverage_splits(model, tokenizer, task, cfg: LabConfig) -> dict[str, dict[str, Any]]:
    """Pass@k curves of the policy on the validation split and, when the task has ``hard_set()``,
    the hard split (:func:`entflow.trainer.evaluate.coverage_curves`, up to 512 rows per
    ``generate`` call)."""
    from entflow.trainer.evaluate import coverage_curves

    return coverage_curves(model, tokenizer, task, cfg, batch_size=512)


def lab_setup(cfg: LabConfig) -> RunSetup:
    """The lab task and the cached warm-started tiny policy."""
    from entflow.lab.pretrain import load_policy
    from entflow.lab.tasks import get_task
    from entflow.trainer.loop import RunSetup
    from entflow.trainer.rundir import cache_folder_of

    task = get_task(cfg.task, **cfg.task_params)
    policy_path = resolve_policy(cfg)
    model, tokenizer = load_policy(policy_path)
    return RunSetup(
        task,
        model,
        tokenizer,
        str(policy_path),
        lambda: load_policy(policy_path)[0],
        validate_policy,
        coverage_splits,
        warm_coverage_cache=cache_folder_of(policy_path),
    )


def train_lab(
    cfg: LabConfig,
    resume: bool = False,
    overwrite: bool = False,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> Path:
    """Run (or resume) a lab run; returns its run directory (:func:`entflow.trainer.loop.train`
    with :func:`lab_setup`)."""
    return train_run(cfg, resume=resume, overwrite=overwrite, on_step=on_step, setup=lab_setup)
