"""The lab plugged into the trainer (docs/design.md §10): its task, its cached warm-started tiny
policy, and its validation (avg@k, pass@k, greedy accuracy at every evaluation step, and the
coverage curves: :mod:`entflow.lab.evaluate`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entflow.lab.config import LabConfig
from entflow.trainer.loop import train as train_run

if TYPE_CHECKING:
    from entflow.trainer.loop import RunSetup


def resolve_policy(cfg: LabConfig) -> Path:
    """The warm-started policy this run starts from (pretrained and cached on first use)."""
    if cfg.policy_path:
        return Path(cfg.policy_path)
    from entflow.lab.pretrain import pretrain

    return pretrain(cfg.pretrain_config(), progress=cfg.progress)


def lab_setup(cfg: LabConfig) -> RunSetup:
    """The lab task and the cached warm-started tiny policy, validated and its coverage measured
    by :mod:`entflow.lab.evaluate`."""
    from entflow.lab.evaluate import coverage_splits, validate_policy
    from entflow.lab.policy import load_policy
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
