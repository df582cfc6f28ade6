"""Typed errors (docs/design.md §13): each names the field and what was seen.

All inherit from :class:`EntflowError` and from the matching built-in (``ValueError`` /
``KeyError``) so generic handlers keep working.
"""

from __future__ import annotations


class EntflowError(Exception):
    """Base class of every error entflow raises on purpose."""


class ShapeError(EntflowError, ValueError):
    """A tensor's shape does not match what the field requires."""

    def __init__(self, field: str, expected: str, seen: tuple[int, ...] | str):
        self.field, self.expected, self.seen = field, expected, seen
        shown = seen if isinstance(seen, str) else tuple(seen)
        super().__init__(f"{field}: expected shape {expected}, got {shown}")


class NonFiniteError(EntflowError, ValueError):
    """A tensor holds NaN or ±inf where finite values are required."""

    def __init__(self, field: str, n_nan: int, n_inf: int):
        self.field, self.n_nan, self.n_inf = field, n_nan, n_inf
        super().__init__(f"{field}: must be finite, found {n_nan} NaN and {n_inf} inf values")


class MissingInputError(EntflowError, ValueError):
    """A computation needs an optional field of the batch that was not given."""

    def __init__(self, field: str, needed_by: str):
        self.field, self.needed_by = field, needed_by
        super().__init__(f"{field}: required by {needed_by} but not given (None)")


class UnknownMethodError(EntflowError, KeyError):
    """No method (or estimator) is registered under that name."""

    def __init__(self, name: str, known: list[str], kind: str = "method"):
        self.name, self.known = name, known
        super().__init__(f"unknown {kind} {name!r}; known: {', '.join(known)}")

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return self.args[0]


class ParameterError(EntflowError, ValueError):
    """A parameter name is unknown, or its value is outside the allowed range."""

    def __init__(self, owner: str, param: str, message: str):
        self.owner, self.param = owner, param
        super().__init__(f"{owner}: parameter {param!r} {message}")


class CompositionError(EntflowError, ValueError):
    """Two composed methods conflict in a way the composition rules do not settle."""


class ConfigError(EntflowError, ValueError):
    """A configuration key is unknown, has the wrong type, or an impossible value."""

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message
        super().__init__(f"config key {key!r}: {message}")


class UnsupportedVersionError(EntflowError, RuntimeError):
    """An installed library (TRL, verl, transformers, torch) lacks, or has changed the signature of, an
    internal that entflow overrides, calls or wraps. Raised where the adapter is built, never in the
    middle of training; names the library, its version and the object."""

    def __init__(self, library: str, version: str, obj: str, message: str):
        self.library, self.version, self.object = library, version, obj
        super().__init__(f"{library} {version}: {obj} {message}")


class StatefulMethodWarning(UserWarning):
    """A stateful or stochastic method was passed by name, so it is rebuilt on every call."""


class EmulatedBF16Warning(UserWarning):
    """Training is set to autocast to bfloat16 on a CPU without bfloat16 instructions, which
    emulates it several times slower than float32."""


class LogError(EntflowError, ValueError):
    """A training log cannot be read or analysed: empty, missing a key, non-finite values, too few
    points, or several runs in one folder. Names the file and the key."""

    def __init__(self, path: object, key: str | None, message: str):
        self.path, self.key = str(path), key
        where = f"{self.path} [{key}]" if key else self.path
        super().__init__(f"{where}: {message}")


class PathError(EntflowError, ValueError):
    """A path given on the command line is missing, or is a file where a folder is needed (or the
    reverse). Names the flag and the path."""

    def __init__(self, flag: str, path: object, message: str):
        self.flag, self.path = flag, str(path)
        super().__init__(f"{flag} {self.path}: {message}")


class MissingExtraError(EntflowError, ImportError):
    """A command needs an optional dependency group (an extra) that is not installed."""

    def __init__(self, extra: str, missing: list[str], what: str = ""):
        self.extra, self.missing, self.what = extra, list(missing), what
        super().__init__(
            f"{what + ' ' if what else ''}needs the [{extra}] extra ({', '.join(missing)} not installed): "
            f"pip install 'entflow[{extra}]'"
        )


class AnalysisError(EntflowError, ValueError):
    """The data given to an analysis cannot define the requested quantity (too few points, mismatched
    lengths, non-finite values …). Names the field."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


class RunDirError(EntflowError, ValueError):
    """A run directory is missing a file or holds a malformed one. Names the path."""

    def __init__(self, path: object, message: str):
        from pathlib import Path

        self.path = Path(str(path))
        super().__init__(f"{path}: {message}")


class ExpressionError(EntflowError, ValueError):
    """An arithmetic expression (a lab task's answer) cannot be parsed; names the token seen."""


class RewardTimeoutError(EntflowError, TimeoutError):
    """A reward function ran past its time limit."""


class EvidenceError(EntflowError, ValueError):
    """A committed evidence file (a claims JSON, a per-run facts record) is missing or malformed.
    Names the file and, where one is at fault, the field."""

    def __init__(self, path: object, field: str | None, message: str):
        self.path, self.field = str(path), field
        where = f"{self.path} [{field}]" if field else self.path
        super().__init__(f"{where}: {message}")
