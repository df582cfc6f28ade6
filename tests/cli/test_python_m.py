"""``python -m entflow`` is the ``entflow`` command: src/entflow/__main__.py runs the console
script's own ``entflow.cli.main:main``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import entflow


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=120)


def test_python_m_entflow_prints_the_console_scripts_version():
    exe = Path(sys.executable).parent / "entflow"
    script = [str(exe)] if exe.exists() else [shutil.which("entflow") or "entflow"]
    as_module, as_script = _run([sys.executable, "-m", "entflow"]), _run(script)
    assert as_module.returncode == 0 and as_script.returncode == 0, (as_module.stderr, as_script.stderr)
    assert as_module.stdout == as_script.stdout
    assert as_module.stdout.strip() == f"entflow {entflow.__version__}"
