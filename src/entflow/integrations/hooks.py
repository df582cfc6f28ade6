"""Signature checks for the library internals the adapters override, call or wrap (docs/architecture.md,
"Library internals entflow patches").

The TRL adapter overrides private methods of TRL's ``GRPOTrainer`` and the verl trainer mode private
methods of verl's ``PPOTrainerSync``; ``cpu.py`` wraps a verl function. A library release that renames
such a method, or changes its parameters, would otherwise surface as a ``TypeError`` or an
``AttributeError`` in the middle of training. These checks run where the adapter is built and raise
:class:`~entflow.errors.UnsupportedVersionError` naming the library, its version and the method.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from entflow.errors import UnsupportedVersionError

__all__ = ["SUPPORTED", "Hook", "check_attributes", "check_hooks", "library_version", "signature_of", "wraps_known"]

_P = inspect.Parameter
_POSITIONAL = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)
_BY_NAME = (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY)


@dataclass(frozen=True)
class Hook:
    """A library method an adapter relies on.

    Attributes:
        name: the method's name on the library's class.
        args: the names of the parameters the adapter passes positionally, in order (after ``self``).
        kwargs: the names of the parameters it passes by keyword.
        overridden: True when the adapter overrides the method (the library then calls the adapter's
            version with the arguments its own signature admits); False when the adapter only calls it.
    """

    name: str
    args: tuple[str, ...] = ()
    kwargs: tuple[str, ...] = ()
    overridden: bool = True


def library_version(distribution: str) -> str:
    """The version of ``distribution``: its imported module's ``__version__`` when imported (the
    code that runs), else the installed metadata's; ``"not installed"`` when absent."""
    module = sys.modules.get(distribution)
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def signature_of(fn: Any) -> inspect.Signature | None:
    """``inspect.signature(fn)``, None where it cannot be read (a builtin without text signature)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _binds_the_call(sig: inspect.Signature, hook: Hook) -> bool:
    """Whether ``hook``'s call binds to ``sig`` with every positional argument landing in the
    parameter the adapter means."""
    markers = [object() for _ in hook.args]
    try:
        bound = sig.bind(*markers, **{k: object() for k in hook.kwargs})
    except TypeError:
        return False
    return all(bound.arguments.get(name) is m for name, m in zip(hook.args, markers, strict=True))


def _accepts_every_call(override: inspect.Signature, base: inspect.Signature) -> bool:
    """Whether every call that ``base``'s signature admits also binds to ``override`` the same way
    (the library calls an overridden method as it would call its own)."""
    o, b = list(override.parameters.values()), list(base.parameters.values())
    o_varargs = any(p.kind is _P.VAR_POSITIONAL for p in o)
    o_varkw = any(p.kind is _P.VAR_KEYWORD for p in o)
    if any(p.kind is _P.VAR_POSITIONAL for p in b) and not o_varargs:
        return False
    if any(p.kind is _P.VAR_KEYWORD for p in b) and not o_varkw:
        return False
    o_pos = [p for p in o if p.kind in _POSITIONAL]
    for i, p in enumerate(q for q in b if q.kind in _POSITIONAL):
        if i >= len(o_pos):
            if not o_varargs:
                return False
        elif o_pos[i].name != p.name and p.kind is _P.POSITIONAL_OR_KEYWORD:
            return False  # the same slot under another name: a call by keyword lands elsewhere
    o_names = {p.name for p in o if p.kind in _BY_NAME}
    if not o_varkw and any(p.name not in o_names for p in b if p.kind in _BY_NAME):
        return False
    # the override requires nothing the library may leave out (a parameter it lacks or has a default for)
    b_required = {p.name for p in b if p.default is _P.empty and p.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)}
    return not any(
        p.default is _P.empty and p.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD) and p.name not in b_required
        for p in o
    )


def _says_nothing(sig: inspect.Signature) -> bool:
    """A signature of ``*args`` and/or ``**kwargs`` only (a decorator without ``functools.wraps``)."""
    return all(p.kind in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD) for p in sig.parameters.values())


def _bound(cls: type, name: str) -> Any:
    """``cls``'s own attribute ``name`` as an instance would see it (``self`` bound, so signatures
    start after it; a static method stays as it is)."""
    raw = vars(cls)[name]
    get = getattr(raw, "__get__", None)
    return get(object(), cls) if get is not None else raw


def _base_owner(cls: type, adapter: type, name: str) -> type | None:
    """The class after ``adapter`` in ``cls``'s method resolution order that defines ``name``."""
    mro = cls.__mro__
    start = mro.index(adapter) + 1 if adapter in mro else 0
    return next((k for k in mro[start:] if name in vars(k)), None)


def check_hooks(cls: type, adapter: type, hooks: Iterable[Hook], library: str, base_name: str) -> None:
    """Check each of ``hooks`` against the implementation that ``adapter``'s ``super()`` reaches in
    ``cls`` (the class being built, ``adapter`` or a subclass): it exists, it binds the call the
    adapter makes, and (for an overridden one) the adapter's override accepts every call the
    library's signature admits.

    Raises:
        UnsupportedVersionError: naming ``library`` and its installed version, ``base_name.hook``, the
            signature found and what entflow passes.
    """
    version = library_version(library)
    for hook in hooks:
        where = f"{base_name}.{hook.name}"
        owner = _base_owner(cls, adapter, hook.name)
        if owner is None:
            raise UnsupportedVersionError(
                library, version, where, "does not exist, and entflow's adapter relies on it; " + _supported(library)
            )
        sig = signature_of(_bound(owner, hook.name))
        if sig is None or _says_nothing(sig):
            continue  # unreadable (a builtin), or a bare (*args, **kwargs) wrapper: nothing to compare
        call = ", ".join([*hook.args, *(f"{k}=…" for k in hook.kwargs)])
        if not _binds_the_call(sig, hook):
            raise UnsupportedVersionError(
                library,
                version,
                f"{where}{sig}",
                f"does not take the arguments entflow's adapter passes ({call}); " + _supported(library),
            )
        if hook.overridden and hook.name in vars(adapter):
            mine = signature_of(_bound(adapter, hook.name))
            if mine is not None and not _accepts_every_call(mine, sig):
                raise UnsupportedVersionError(
                    library,
                    version,
                    f"{where}{sig}",
                    f"has parameters entflow's override {adapter.__name__}.{hook.name}{mine} does not take; "
                    + _supported(library),
                )


def check_attributes(obj: Any, names: Sequence[str], library: str, base_name: str) -> None:
    """Check that ``obj`` (a library trainer, once built) has each attribute of ``names`` the adapter
    reads or writes. Raises :class:`~entflow.errors.UnsupportedVersionError` naming the first missing one."""
    missing = [n for n in names if not hasattr(obj, n)]
    if missing:
        raise UnsupportedVersionError(
            library,
            library_version(library),
            base_name,
            f"has no attribute {', '.join(missing)}, which entflow's adapter reads; " + _supported(library),
        )


# the versions each adapter is tested with (pyproject.toml), named in the errors
SUPPORTED = {"trl": "1.8 … 1.16", "verl": "0.9.0 and 0.9.1"}


def _supported(library: str) -> str:
    tested = SUPPORTED.get(library)
    return f"entflow is tested with {library} {tested}" if tested else f"entflow does not know this {library}"


def wraps_known(fn: Callable[..., Any], known: Iterable[tuple[str, ...]]) -> inspect.Signature | None:
    """``fn``'s signature when its parameter names are one of ``known``, else None."""
    sig = signature_of(fn)
    return sig if sig is not None and tuple(sig.parameters) in set(known) else None
