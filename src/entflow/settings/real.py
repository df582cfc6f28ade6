"""The real setting: a Hugging Face model on real data (docs/real-models.md).

Its config class is :class:`~entflow.hf.setup.RealTrainConfig`, its presets ``entflow/hf/configs``
(``real.yaml``, ``real_v2.yaml``, ``real_v2_design.yaml``), its setup
:func:`entflow.hf.setup.real_setup` (the model its config names, no lab warm start); reproduce trains
its runs one at a time, since each uses the preset's ``threads`` cores, and a model is evaluated by
:func:`entflow.hf.evaluate.run_eval`. A config is a real one when it names a ``model``. The real
model's modules are imported when they are used, so that reading the registry imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from entflow.settings.base import OnDone, SettingKind

__all__ = ["REAL_COMMON_OVERRIDES", "RealKind"]

# the overrides a reproduce run of a real setting takes: no audit (no claim reads it, and it costs an
# extra forward on every validation step), but a real run keeps its own checkpoint policy
# (RealTrainConfig: every 5 minutes of wall clock and after the last step), since a full
# fine-tune's checkpoint is its weights plus two AdamW moments (1.6 GB at 135M parameters)
REAL_COMMON_OVERRIDES = ["audit=false"]


class RealKind(SettingKind):
    """A real model, trained by :func:`entflow.hf.setup.train_real` from the model its preset names
    (no lab warm start). In :meth:`train` a run is resumed only when ``resume`` is asked without
    ``overwrite``; any other existing run is replaced."""

    name = "real"
    extra = "real"
    presets_package = "entflow.hf"
    common_overrides = tuple(REAL_COMMON_OVERRIDES)
    parallel = False
    keys_heading = "With --model (a real model, docs/real-models.md; task is the data, --data) also these keys:"

    def describes(self, config: Mapping[str, Any]) -> bool:
        return config.get("model") is not None

    def config_class(self) -> type:
        from entflow.hf.setup import RealTrainConfig

        return RealTrainConfig

    def setup(self, cfg: Any) -> Any:
        from entflow.hf.setup import real_setup

        return real_setup(cfg)

    def train(self, configs: list[Any], jobs: int, resume: bool, overwrite: bool, on_done: OnDone = None) -> list[Path]:
        from entflow.hf.setup import train_real
        from entflow.settings import side_by_side

        again = resume and not overwrite
        return side_by_side.train_side_by_side(
            configs, train_real, jobs, resume=again, overwrite=not again, on_done=on_done
        )

    def evaluate(self, sampling: Mapping[str, Any] | None = None, **options: Any) -> Any:
        """:func:`entflow.hf.evaluate.run_eval` with ``sampling`` the keys of its
        :class:`~entflow.hf.evaluate.SamplingConfig`."""
        from entflow.hf.evaluate import run_eval

        return run_eval(sampling=self.sampling_class()(**(sampling or {})), **options)

    def sampling_class(self) -> type:
        """The evaluation's sampling settings (:class:`~entflow.hf.evaluate.SamplingConfig`)."""
        from entflow.hf.evaluate import SamplingConfig

        return SamplingConfig

    def check_model(self, value: str) -> str:
        """``value`` when it can name a model (a short name, a saved model directory, or what a hub id
        could be; whether the hub is allowed is checked later, as a config key), else
        :class:`~entflow.errors.ConfigError`."""
        from entflow.hf.models import resolve_model

        resolve_model(value, allow_hub=True, convert=False)
        return value
