"""Old import paths of names that moved in 0.2 (docs/architecture.md §6, "Old import paths").

Each old module is a shim of three lines whose module ``__getattr__`` (PEP 562) finds a name in
its new home and warns once with a ``DeprecationWarning`` naming the new path. No module of
entflow imports a shim; they exist for users' code only.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def forward(old: str, *new: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the deprecated module ``old`` whose names now live in ``new``
    (searched in order)."""

    def module_getattr(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        for target in new:
            module = importlib.import_module(target)
            if hasattr(module, name):
                warnings.warn(
                    f"{old}.{name} moved to {target}.{name}; the old path will be removed in a future release",
                    DeprecationWarning,
                    stacklevel=2,
                )
                return getattr(module, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r} (it moved to {', '.join(new)})")

    return module_getattr
