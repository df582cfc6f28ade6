"""The lab's run configuration: :class:`~entflow.trainer.config.TrainConfig` with the lab's task
and warm-start checks (docs/design.md §10)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from entflow.errors import ConfigError, EntflowError
from entflow.trainer import config as trainer_config
from entflow.trainer.config import key_help


@dataclass
class LabConfig(trainer_config.TrainConfig):
    """A lab run: a task of :data:`entflow.lab.tasks.TASKS` and the tiny warm-started policy
    (``policy_path`` None: the cached warm start, pretrained if missing)."""

    task: str = "countdown"
    pretrain: dict[str, Any] = field(
        default_factory=dict,
        metadata=key_help(
            "warm-start keys for the cached warm start, e.g. {steps: 400} (entflow pretrain --help lists them)"
        ),
    )

    def validate_task(self) -> None:
        from entflow.lab.tasks import TASKS, get_task

        if self.task not in TASKS:
            raise ConfigError("task", f"must be one of {sorted(TASKS)}, got {self.task!r}")
        try:
            get_task(self.task, **self.task_params)
        except (EntflowError, TypeError) as e:
            raise ConfigError("task_params", str(e)) from e
        try:
            self.pretrain_config().validate()
        except (EntflowError, TypeError) as e:
            raise ConfigError("pretrain", str(e)) from e

    def pretrain_config(self):
        """The warm start this run uses when ``policy_path`` is not given."""
        from entflow.lab.pretrain import PretrainConfig

        return PretrainConfig(**({"task": self.task, "task_params": self.task_params} | self.pretrain))


def build_config(
    base: dict[str, Any] | None = None,
    overrides: list[str] | None = None,
    cls: type[trainer_config.TrainConfig] = LabConfig,
) -> trainer_config.TrainConfig:
    """A validated :class:`LabConfig` from a dict (e.g. YAML) plus ``key=value`` overrides
    (:func:`entflow.trainer.config.build_config` with the lab's class)."""
    return trainer_config.build_config(base, overrides, cls=cls)
