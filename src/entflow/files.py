"""Writing files safely, for every layer (docs/architecture.md §1): JSON without NaN, and atomic
replacement.

* :func:`json_safe` — a value JSON can hold: NaN and ±inf become ``null`` (JSON has no NaN; ``null``
  means "not defined"), NumPy scalars become Python numbers, tuples become lists, recursively.
* :func:`atomic_file` — the one atomic writer: a binary file to write (streamed, e.g.
  ``torch.save`` straight into it) that replaces the target only when the block ends without an
  error; a reader sees the old file or the new one, never half of one: the data goes to a
  temporary file in the same folder, is flushed and ``fsync``-ed, then renamed over the target
  (``os.replace``, atomic on POSIX and Windows).
* :func:`atomic_write_bytes` / :func:`atomic_write_text` / :func:`write_json` — whole contents
  through :func:`atomic_file`.
* :func:`unfinished_writes` — the temporary files :func:`atomic_file` left beside a target when
  its process was killed mid-write (no ``except`` runs on SIGKILL), for a resumed run to remove.

Standard library only: importing this module costs nothing (``entflow analyze`` imports no torch).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_file", "atomic_write_bytes", "atomic_write_text", "json_safe", "unfinished_writes", "write_json"]


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None, recursively through dicts, lists and
    tuples (tuples become lists); NumPy scalars (anything with ``item()`` and no length) become
    Python numbers. Dict keys JSON cannot hold (neither str, int, float, bool nor None) become
    ``str(key)``."""
    if isinstance(value, dict):
        return {_key(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _key(k: Any) -> Any:
    return k if k is None or isinstance(k, str | int | float | bool) else str(k)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[IO[bytes]]:
    """A binary file to write that replaces ``path`` only when the block ends without an error (a
    temporary file in the same folder, flushed and fsynced, then ``os.replace``): a reader, or a
    process killed at any moment, sees the old file or the new one, never half. Creates the parent
    folders; on an error the temporary file is removed and ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def unfinished_writes(path: str | os.PathLike) -> list[Path]:
    """The temporary files of :func:`atomic_file` writes of ``path`` that never finished (their
    process was killed before the rename), sorted: never read, safe to remove once no process
    writes ``path``."""
    import glob

    path = Path(path)
    if not path.parent.is_dir():
        return []
    return sorted(p for p in path.parent.glob(glob.escape(f".{path.name}.") + "*") if p.is_file())


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_file`."""
    with atomic_file(path) as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` in UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(
    path: str | os.PathLike, value: Any, *, indent: int | None = 2, default: Callable[[Any], Any] | None = None
) -> None:
    """Write :func:`json_safe` ``(value)`` as JSON (``indent``; ``default`` for objects JSON cannot
    hold, as :func:`json.dumps`) and a final newline, atomically."""
    text = json.dumps(json_safe(value), indent=indent, allow_nan=False, default=default)
    atomic_write_text(path, text + "\n")
