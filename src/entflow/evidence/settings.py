"""The registry of setting kinds: how the runs of a setting are configured and trained.

A *setting* of the claim registry (``claims.yaml``, ``settings``: ``demo``, ``regime``, ``real``)
names a preset file, the steps of its full run and its ``kind``. The kind is an entry of this
registry, found by name as verl finds a policy loss (``register_setting_kind`` /
``get_setting_kind``): where its presets live, which config class they build, the overrides every
reproduce run of it takes, and how a list of its configs is trained. ``entflow reproduce``,
``entflow run`` and ``entflow compare`` all train through it, so no caller passes a runner in.

Two kinds are registered:

- ``lab``: the lab's tiny policy (:class:`~entflow.lab.config.LabConfig`, presets in
  ``entflow/lab/configs``), trained ``jobs`` at a time from one cached warm start
  (:func:`entflow.evidence.compare.run_compare`);
- ``real``: a real model (``entflow.hf.setup.RealTrainConfig``, presets in
  ``entflow/evidence/configs``), trained by ``entflow.hf.setup.train_real``; reproduce trains its
  runs one at a time, since each uses the preset's ``threads`` cores.

A new kind is a subclass of :class:`SettingKind` decorated with ``@register_setting_kind(name)``;
a setting of ``claims.yaml`` then names it as its ``kind``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any, ClassVar

from entflow.errors import ConfigError

__all__ = [
    "COMMON_OVERRIDES",
    "REAL_COMMON_OVERRIDES",
    "LabKind",
    "RealKind",
    "SettingKind",
    "get_setting_kind",
    "kind_overrides",
    "register_setting_kind",
    "setting_kinds",
]

# every lab reproduce run: the per-step audit is replaced by the clean audit run once at the end
# (the full run's steps are each setting's, from the registry: demo 80, regime 120)
COMMON_OVERRIDES = ["audit=false", "checkpoint_every=20"]
# the ones a run of a `real` setting takes: no audit either (no claim reads it, and it costs an
# extra forward on every validation step), but a real run keeps its own checkpoint policy
# (RealTrainConfig: every 5 minutes of wall clock and after the last step), since a full
# fine-tune's checkpoint is its weights plus two AdamW moments (1.6 GB at 135M parameters)
REAL_COMMON_OVERRIDES = ["audit=false"]


class SettingKind:
    """How the runs of the settings of one kind are configured and trained (one registry entry)."""

    name: ClassVar[str] = ""
    # the overrides every reproduce run of this kind takes, before the user's
    common_overrides: ClassVar[tuple[str, ...]] = ()
    # reproduce trains this kind's runs ``--jobs`` at a time (False: one at a time)
    parallel: ClassVar[bool] = True

    def presets(self) -> Path:
        """The folder of this kind's preset files (a setting's ``config`` names one of them)."""
        raise NotImplementedError

    def config_class(self) -> type:
        """The config class its presets and runs build (a :class:`~entflow.trainer.config.TrainConfig`)."""
        raise NotImplementedError

    def train(
        self,
        configs: list[Any],
        jobs: int,
        resume: bool,
        overwrite: bool,
        on_done: Callable[[int, Path], None] | None = None,
    ) -> list[Path]:
        """Train ``configs`` (``jobs`` at a time) and return their run directories, in order;
        ``on_done(i, run_dir)`` as soon as ``configs[i]`` has finished (reproduce writes the run's
        facts record then)."""
        raise NotImplementedError


_KINDS: dict[str, SettingKind] = {}


def register_setting_kind(name: str) -> Callable[[type[SettingKind]], type[SettingKind]]:
    """Class decorator: register a :class:`SettingKind` subclass under ``name``."""

    def decorator(cls: type[SettingKind]) -> type[SettingKind]:
        if name in _KINDS:
            raise ValueError(f"setting kind {name!r} is already registered")
        cls.name = name
        _KINDS[name] = cls()
        return cls

    return decorator


def get_setting_kind(name: str) -> SettingKind:
    """The registered kind ``name``; :class:`~entflow.errors.ConfigError` (key ``kind``) listing the
    known kinds otherwise."""
    if name not in _KINDS:
        raise ConfigError("kind", f"unknown setting kind {name!r}; known: {', '.join(_KINDS)}")
    return _KINDS[name]


def setting_kinds() -> tuple[str, ...]:
    """The registered kinds' names, in registration order."""
    return tuple(_KINDS)


@register_setting_kind("lab")
class LabKind(SettingKind):
    """The lab's tiny policy, trained from its cached warm start (pretrained once, before the workers)."""

    common_overrides = tuple(COMMON_OVERRIDES)

    def presets(self) -> Path:
        return Path(str(files("entflow.lab") / "configs"))

    def config_class(self) -> type:
        from entflow.lab.config import LabConfig

        return LabConfig

    def train(
        self,
        configs: list[Any],
        jobs: int,
        resume: bool,
        overwrite: bool,
        on_done: Callable[[int, Path], None] | None = None,
    ) -> list[Path]:
        from entflow.evidence import compare

        return compare.run_compare(configs, jobs=jobs, resume=resume, overwrite=overwrite, on_done=on_done)


@register_setting_kind("real")
class RealKind(SettingKind):
    """A real model, trained by ``entflow.hf.setup.train_real`` from the model its preset names (no
    lab warm start). A run is resumed only when ``resume`` is asked without ``overwrite``; any other
    existing run is replaced."""

    common_overrides = tuple(REAL_COMMON_OVERRIDES)
    parallel = False

    def presets(self) -> Path:
        return Path(str(files("entflow.evidence") / "configs"))

    def config_class(self) -> type:
        from entflow.hf.setup import RealTrainConfig

        return RealTrainConfig

    def train(
        self,
        configs: list[Any],
        jobs: int,
        resume: bool,
        overwrite: bool,
        on_done: Callable[[int, Path], None] | None = None,
    ) -> list[Path]:
        from entflow.evidence import compare
        from entflow.hf.setup import train_real

        again = resume and not overwrite
        return compare.train_side_by_side(configs, train_real, jobs, resume=again, overwrite=not again, on_done=on_done)


def kind_overrides(kind: str, overrides: Sequence[str]) -> list[str]:
    """``overrides`` without the entries of another kind's common overrides that this ``kind`` does
    not take, the first occurrence of each: ``entflow reproduce`` puts the lab's
    :data:`COMMON_OVERRIDES` first in every run's overrides, and a user's own equal override after
    them stays."""
    own = get_setting_kind(kind).common_overrides
    out = list(overrides)
    for o in COMMON_OVERRIDES:
        if o not in own and o in out:
            out.remove(o)
    return out
