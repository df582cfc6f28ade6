"""The registry of settings: the one place that chooses between the lab and a real model.

A setting is found by name, as verl finds a policy loss (:func:`get_setting_kind`), or by the keys
of a run (:func:`kind_of`: a config that names a ``model`` is a real model's). ``entflow train``,
``entflow eval``, ``entflow compare``, ``entflow run`` and ``entflow reproduce`` all ask it; a setting
of the claim registry (``claims.yaml``, ``settings``) names its entry as its ``kind``.

Adding a setting is one module of this package with a subclass of
:class:`~entflow.settings.base.SettingKind`, and one entry in :data:`_KINDS` below (a caller's own
kind, a test's, registers with ``@register_setting_kind(name)``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from entflow.errors import ConfigError
from entflow.settings.base import SettingKind
from entflow.settings.lab import LabKind
from entflow.settings.real import RealKind

__all__ = [
    "config_keys_help",
    "get_setting_kind",
    "kind_of",
    "kind_overrides",
    "register_setting_kind",
    "setting_kinds",
]

# name -> its setting; the first is the default, the kind of a run that names no other (the lab)
_KINDS: dict[str, SettingKind] = {kind.name: kind for kind in (LabKind(), RealKind())}


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


def kind_of(config: Mapping[str, Any]) -> SettingKind:
    """The setting whose run ``config`` describes (a run's keys, or a command's options): the first
    kind after the default that :meth:`~SettingKind.describes` it, else the default (the lab)."""
    default, *others = _KINDS.values()
    return next((kind for kind in others if kind.describes(config)), default)


def kind_overrides(kind: str, overrides: Sequence[str]) -> list[str]:
    """``overrides`` without the entries of another kind's common overrides that this ``kind`` does
    not take, the first occurrence of each: ``entflow reproduce`` puts the lab's common overrides
    first in every run's overrides, and a user's own equal override after them stays."""
    own = get_setting_kind(kind).common_overrides
    out = list(overrides)
    others = dict.fromkeys(o for k in _KINDS.values() if k.name != kind for o in k.common_overrides)
    for o in others:
        if o not in own and o in out:
            out.remove(o)
    return out


def config_keys_help(added: bool = True) -> str:
    """Every config key of a run of the default setting (the lab) with its default, help and
    allowed range, then (``added``) the keys each other setting adds and the defaults it changes
    (:func:`entflow.trainer.config.describe_keys`, from the config classes' field metadata)."""
    import dataclasses

    from entflow.trainer.config import describe_keys

    default, *others = _KINDS.values()
    base = default.config_class()
    lines = ["config keys (key=default; set them in --config FILE or as key=value):", *describe_keys(base)]
    for kind in others if added else []:
        try:
            cls = kind.config_class()
        except ImportError:  # an install without the setting's extra
            lines += ["", f"{kind.keys_heading} pip install 'entflow[{kind.extra}]'."]
            continue
        own = {f.name: f for f in dataclasses.fields(base)}
        fields = dataclasses.fields(cls)
        new = [f.name for f in fields if f.name not in own]
        changed = [f.name for f in fields if f.name in own and f.default != own[f.name].default]
        lines += ["", kind.keys_heading, *describe_keys(cls, new), "and these defaults change:"]
        lines += describe_keys(cls, changed)
    return "\n".join(lines)
