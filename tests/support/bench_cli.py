"""Running a benchmark script of ``benchmarks/`` as a user does, for the benchmarks' tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def from_json(script: str, *paths: Path) -> str:
    """What ``python benchmarks/<script>.py --from-json PATHS...`` prints (it must exit 0)."""
    res = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{script}.py"), "--from-json", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def from_json_and_imports(script: str, *paths: Path) -> tuple[str, set[str]]:
    """What ``--from-json`` prints, and the top-level packages it imported (from ``-X importtime``)."""
    return printed_and_imports(script, "--from-json", *map(str, paths))


def printed_and_imports(script: str, *argv: str) -> tuple[str, set[str]]:
    """What ``python benchmarks/<script>.py ARGV...`` prints (it must exit 0), and the top-level
    packages it imported (from ``-X importtime``)."""
    res = subprocess.run(
        [sys.executable, "-X", "importtime", str(BENCHMARKS / f"{script}.py"), *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    names = {line.rsplit("|", 1)[1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    return res.stdout, {n.split(".")[0] for n in names}


def main_output(main: Callable[[], None], monkeypatch: Any, capsys: Any, *argv: str) -> str:
    """What a benchmark's ``main()`` prints, run in this process with ``sys.argv`` = ``argv`` (the
    script's name first), as a user's command line runs it."""
    monkeypatch.setattr(sys, "argv", list(argv))
    main()
    return capsys.readouterr().out
