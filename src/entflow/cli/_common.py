"""Helpers shared by the commands: the one rich Console they print through (:func:`cli_console`)
and the argument checks of the lab commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entflow.errors import PathError

if TYPE_CHECKING:
    from rich.console import Console

# The width of a console that is not a terminal (a pipe, a file, pytest's capture): rich lays a table
# out within the console's width, squeezing its columns and cutting a number ("gree…") when it does
# not fit, so a pipe gets a width no table reaches; tables are drawn at their natural width (none of
# entflow's expands) and every other line is printed whole (soft wrap), however long.
PIPE_WIDTH = 10_000


def _is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (its own ``isatty``, not rich's guess: FORCE_COLOR makes
    rich treat a CI log as one, at 80 columns)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def cli_console(*, stderr: bool = False, width: int | None = None) -> Console:
    """The ``rich`` Console a command prints through, on stdout (stderr with ``stderr``); made
    when the command runs, so that it looks at the stream of that moment (pytest's capture included).

    On a terminal it is rich's own: ``width`` if given, else ``COLUMNS``, else the terminal's.
    Elsewhere (piped to a file, captured) nothing is wrapped, whatever ``COLUMNS`` says: every line
    is printed whole and a table at its natural width (:data:`PIPE_WIDTH`), so that a script or a
    test finds a phrase or a path on one line.
    """
    from rich.console import Console

    if _is_terminal(sys.stderr if stderr else sys.stdout):
        return Console(stderr=stderr, width=width)
    return Console(stderr=stderr, width=PIPE_WIDTH, soft_wrap=True)


def add_config_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter  # the epilog's list of keys keeps its lines
    p.add_argument("--config", help="YAML file of config keys (see `entflow train --help` for keys)")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config overrides, e.g. lr=3e-4 steps=40 method.lambda_min=0.5",
    )


def base_config(args: argparse.Namespace) -> dict[str, Any]:
    return read_config("--config", args.config) if args.config else {}


def existing_path(flag: str, value: str | Path, kind: str = "any") -> Path:
    """``value`` as a Path that exists (``kind``: "file", "dir" or "any"), else :class:`PathError`
    naming ``flag`` and the path."""
    path = Path(value)
    if not path.exists():
        raise PathError(flag, path, "no such file or directory")
    if kind == "file" and not path.is_file():
        raise PathError(flag, path, "is a directory, expected a file")
    if kind == "dir" and not path.is_dir():
        raise PathError(flag, path, "is a file, expected a directory")
    return path


def output_dir(flag: str, value: str | Path) -> Path:
    """``value`` as a Path to write a folder into: absent or a directory, else :class:`PathError`."""
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise PathError(flag, path, "exists and is not a directory")
    for parent in path.parents:  # the first existing ancestor must be a folder
        if parent.exists():
            if not parent.is_dir():
                raise PathError(flag, path, f"{parent} is a file, not a directory")
            break
    return path


def model_argument(flag: str, value: str) -> str:
    """``value`` of ``flag`` (``--model``) when it can name a model: a short name, a saved model
    directory, or something a hub id could be (whether the hub is allowed is checked later, as a
    config key). A path that is no model raises :class:`PathError` naming the flag and the path."""
    from entflow.errors import ConfigError
    from entflow.settings.registry import kind_of

    try:
        kind_of({"model": value}).check_model(value)
    except ConfigError as e:
        message = str(e).removeprefix(f"config key {e.key!r}: ").removeprefix(f"no model at {value!r}: ")
        raise PathError(flag, value, message) from None
    return value


def data_argument(flag: str, value: str) -> str:
    """``value`` of ``flag`` (``--data``): a task name, a hub id or a data file / folder. One that
    is plainly a path (starts with ``.``, ``/`` or ``~``, or ends in .jsonl, .json or .parquet) must
    exist, else :class:`PathError` naming the flag and the path."""
    path = Path(value).expanduser()
    if (value.startswith((".", "/", "~")) or path.suffix in (".jsonl", ".json", ".parquet")) and not path.exists():
        raise PathError(flag, value, "no such file or directory")
    return value


def read_config(flag: str, value: str | Path) -> dict[str, Any]:
    """The YAML mapping in the file ``value`` given by ``flag``; a missing, unreadable or malformed
    file raises :class:`PathError` naming the flag."""
    import yaml

    from entflow.trainer.config import load_yaml

    path = existing_path(flag, value, kind="file")
    try:
        return load_yaml(path)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise PathError(flag, path, f"not valid YAML{line}") from e
    except (OSError, UnicodeDecodeError) as e:
        raise PathError(flag, path, f"cannot be read ({type(e).__name__})") from e
