"""The lab setting: the lab's tiny policy, trained from its cached warm start (docs/lab.md).

Its config class is :class:`~entflow.lab.config.LabConfig`, its presets ``entflow/lab/configs``
(``demo.yaml``, ``regime.yaml``), its setup :func:`entflow.lab.setup.lab_setup`; several of its runs
are trained ``jobs`` at a time from one warm start, pretrained once before the workers start
(:func:`train_lab_runs`), and a policy is evaluated by :func:`entflow.lab.evaluate.evaluate_run`.
The lab's modules are imported when they are used, so that reading the registry imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from entflow.settings.base import OnDone, SettingKind

__all__ = ["COMMON_OVERRIDES", "LabKind", "train_lab_runs"]

# every lab reproduce run: the per-step audit is replaced by the clean audit run once at the end
# (the full run's steps are each setting's, from the claim registry: demo 80, regime 120)
COMMON_OVERRIDES = ["audit=false", "checkpoint_every=20"]


class LabKind(SettingKind):
    """The lab's tiny policy, trained from its cached warm start (pretrained once, before the workers)."""

    name = "lab"
    extra = "lab"
    presets_package = "entflow.lab"
    common_overrides = tuple(COMMON_OVERRIDES)

    def describes(self, config: Mapping[str, Any]) -> bool:
        return config.get("model") is None

    def config_class(self) -> type:
        from entflow.lab.config import LabConfig

        return LabConfig

    def setup(self, cfg: Any) -> Any:
        from entflow.lab.setup import lab_setup

        return lab_setup(cfg)

    def train(self, configs: list[Any], jobs: int, resume: bool, overwrite: bool, on_done: OnDone = None) -> list[Path]:
        return train_lab_runs(configs, jobs=jobs, resume=resume, overwrite=overwrite, on_done=on_done)

    def evaluate(self, **options: Any) -> Any:
        """:func:`entflow.lab.evaluate.evaluate_run`: a run's final policy (or a saved policy) on its
        task's held-out set."""
        from entflow.lab.evaluate import evaluate_run

        return evaluate_run(**options)

    def warm_start_class(self) -> type:
        """The warm start's config class (:class:`~entflow.lab.pretrain.PretrainConfig`, a lab
        config's ``pretrain`` keys)."""
        from entflow.lab.pretrain import PretrainConfig

        return PretrainConfig

    def warm_start(self, progress: bool = True, **keys: Any) -> Path:
        """The cached warm start of these :class:`~entflow.lab.pretrain.PretrainConfig` keys,
        pretrained if missing (``entflow pretrain``); returns its folder."""
        from entflow.lab.pretrain import pretrain

        return pretrain(self.warm_start_class()(**keys), progress=progress)


def train_lab_runs(
    configs: list[Any],
    jobs: int = 2,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    on_done: OnDone = None,
) -> list[Path]:
    """Train every lab config (``jobs`` at a time) from one warm start and return their run
    directories (``on_done``: as :func:`~entflow.settings.side_by_side.train_side_by_side`)."""
    from entflow.lab.setup import resolve_policy, train_lab
    from entflow.settings import side_by_side

    if not configs:
        return []
    policy = resolve_policy(configs[0])  # pretrain once, before the workers start
    for cfg in configs:
        cfg.policy_path = cfg.policy_path or str(policy)
    return side_by_side.train_side_by_side(configs, train_lab, jobs, resume, overwrite, progress, on_done)
