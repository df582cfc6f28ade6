"""The one map from an optional module to the extra that installs it (pyproject.toml's
``[project.optional-dependencies]``), and the extra each subcommand needs.

``pip install entflow`` serves ``methods``, ``estimators``, ``doctor`` and ``analyze``; the lab
commands need ``[lab]``, a real model (``--model``) needs ``[real]``. :func:`entflow.cli.main.main`
checks a command's extra before running it, and turns a later ``ModuleNotFoundError`` of an
optional module into the same one-line message.
"""

from __future__ import annotations

import argparse
import importlib.util

from entflow.errors import MissingExtraError

# extra -> the import names of its distributions (tests/cli/test_extras.py keeps this equal to pyproject.toml)
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "lab": ("transformers", "tokenizers", "reasoning_gym", "tensorboard"),
    "trl": ("trl", "transformers", "datasets", "accelerate", "jmespath"),
    "verl": ("verl", "transfer_queue", "fastapi", "uvicorn", "zmq", "msgspec", "cachetools"),
    "triton": ("triton",),
    "real": ("transformers", "datasets", "accelerate", "gguf", "math_verify", "reasoning_gym", "peft"),
}

# subcommand -> the extra it cannot run without (the others need only the core install)
COMMAND_EXTRA: dict[str, str] = {
    "run": "lab",
    "pretrain": "lab",
    "train": "lab",
    "compare": "lab",
    "reproduce": "lab",
    "eval": "lab",
}


def command_extra(command: str, args: argparse.Namespace) -> str | None:
    """The extra ``entflow COMMAND`` needs with these arguments: a training or evaluation command's
    setting's (:func:`entflow.settings.registry.kind_of`: ``[real]`` for ``train --model``,
    ``eval --model``; ``run --preset real`` trains the ``real`` setting), else
    :data:`COMMAND_EXTRA`'s entry."""
    from entflow.settings.registry import get_setting_kind, kind_of

    if command in ("train", "eval"):
        return kind_of(vars(args)).extra
    if command == "run" and getattr(args, "preset", None) == "real":
        return get_setting_kind("real").extra
    return COMMAND_EXTRA.get(command)


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (found without importing them)."""
    return [m for m in EXTRA_MODULES[extra] if importlib.util.find_spec(m) is None]


def require_extra(extra: str, what: str = "") -> None:
    """Raise :class:`MissingExtraError` if any module of ``extra`` is missing."""
    if missing := missing_modules(extra):
        raise MissingExtraError(extra, missing, what)


def extra_of_module(module: str | None, prefer: str | None = None) -> str | None:
    """The extra that installs ``module`` (a dotted name is looked up by its top package):
    ``prefer`` when it is one of them, else the first in :data:`EXTRA_MODULES`; None for a module
    no extra provides."""
    top = (module or "").split(".")[0]
    if prefer in EXTRA_MODULES and top in EXTRA_MODULES[prefer]:
        return prefer
    return next((extra for extra, mods in EXTRA_MODULES.items() if top in mods), None)
