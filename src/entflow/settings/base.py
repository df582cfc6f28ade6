"""What a setting is: where a run's task and policy come from, as one object (docs/architecture.md §1).

A setting (the lab's tiny policy, a real model) answers every question the commands and the claims
harness ask about its runs: which config class its presets and runs build, where its presets live,
the setup a run trains from, how one run and several runs side by side are trained, how a policy is
evaluated, and which install extra it needs. Each setting is one module of this package
(``lab.py``, ``real.py``) with one subclass of :class:`SettingKind`, and one entry in
:mod:`entflow.settings.registry`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from entflow.trainer.loop import RunSetup

__all__ = ["OnDone", "SettingKind"]

# called in the training process as soon as the i-th run has finished, with its run directory
OnDone = Callable[[int, Path], None] | None


class SettingKind:
    """One setting: its config class, setup, training, evaluation and presets (one registry entry)."""

    name: ClassVar[str] = ""
    # the install extra (pyproject.toml) its commands cannot run without
    extra: ClassVar[str] = ""
    # the overrides every reproduce run of this kind takes, before the user's
    common_overrides: ClassVar[tuple[str, ...]] = ()
    # reproduce trains this kind's runs ``--jobs`` at a time (False: one at a time)
    parallel: ClassVar[bool] = True
    # how ``entflow train --help`` introduces the keys this kind adds to the default kind's
    keys_heading: ClassVar[str] = ""
    # the package whose ``configs/`` folder holds this kind's presets
    presets_package: ClassVar[str] = ""

    def describes(self, config: Mapping[str, Any]) -> bool:
        """Whether ``config`` (a run's keys, or a command's options) is a run of this setting
        (:func:`entflow.settings.registry.kind_of` asks every kind but the default)."""
        return False

    def presets(self) -> Path:
        """The folder of this kind's preset files (a setting's ``config`` names one of them):
        ``configs/`` of :attr:`presets_package`."""
        return Path(str(files(self.presets_package) / "configs"))

    def config_class(self) -> type:
        """The config class its presets and runs build (a :class:`~entflow.trainer.config.TrainConfig`)."""
        raise NotImplementedError

    def setup(self, cfg: Any) -> RunSetup:
        """The task, policy and validation one run trains from (:class:`~entflow.trainer.loop.RunSetup`)."""
        raise NotImplementedError

    def train_run(self, cfg: Any, resume: bool = False, overwrite: bool = False, on_step: Any = None) -> Path:
        """Train (or resume) one run from :meth:`setup` (:func:`entflow.trainer.loop.train`); returns
        its run directory."""
        from entflow.trainer.loop import train

        return train(cfg, resume=resume, overwrite=overwrite, on_step=on_step, setup=self.setup)

    def train(self, configs: list[Any], jobs: int, resume: bool, overwrite: bool, on_done: OnDone = None) -> list[Path]:
        """Train ``configs`` (``jobs`` at a time) and return their run directories, in order;
        ``on_done(i, run_dir)`` as soon as ``configs[i]`` has finished (reproduce writes the run's
        facts record then)."""
        raise NotImplementedError

    def evaluate(self, **options: Any) -> Any:
        """Evaluate a policy of this setting (``entflow eval``): a result whose ``table()`` the
        command prints."""
        raise NotImplementedError
