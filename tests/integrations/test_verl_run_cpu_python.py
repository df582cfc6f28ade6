"""Which Python ``examples/verl/run_cpu.sh`` runs, without verl: ``PYTHON`` if set, else an active
virtualenv's ``python3``, else the checkout's ``.venv/bin/python`` (the README's install), else
``python3``; and a Python without verl is named in the one line that refuses it. Fake interpreters
in a copied checkout stand in for the real ones, so nothing here needs verl or starts Ray."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "verl" / "run_cpu.sh"


def _fake_python(path: Path, name: str) -> Path:
    """An executable that says which it is (and how it was called) on stderr and exits 2, as
    cpu_prepare.py's check does on bad input."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "{name} ran: $*" >&2\nexit 2\n')
    path.chmod(0o755)
    return path


def _run(script: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
    full = base | {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "OUT": str(tmp_path / "out")} | env
    return subprocess.run(["bash", str(script)], env=full, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("venv", "env", "expected"),
    [
        (True, {}, "venv"),  # the README's install, not activated: the checkout's .venv
        (False, {}, "path python3"),  # no .venv: python3 on PATH
        (True, {"PYTHON": "{other}"}, "other"),  # PYTHON wins
        (True, {"VIRTUAL_ENV": "/some/venv"}, "path python3"),  # an active virtualenv: its python3
    ],
    ids=["checkout-venv", "no-venv", "PYTHON-set", "venv-activated"],
)
def test_run_cpu_picks_its_python(tmp_path, venv, env, expected):
    checkout = tmp_path / "checkout"
    script = checkout / "examples" / "verl" / "run_cpu.sh"
    script.parent.mkdir(parents=True)
    shutil.copy(SCRIPT, script)
    _fake_python(tmp_path / "bin" / "python3", "path python3")
    other = _fake_python(tmp_path / "other" / "python", "other")
    if venv:
        _fake_python(checkout / ".venv" / "bin" / "python", "venv")
    r = _run(script, tmp_path, **{k: v.format(other=other) for k, v in env.items()})
    assert r.returncode == 2, (r.stdout, r.stderr)
    ran = [line for line in r.stderr.splitlines() if " ran: " in line]
    assert ran == [f"{expected} ran: {script.parent / 'cpu_prepare.py'} check grpo  {tmp_path / 'out'}"], r.stderr
    assert not (tmp_path / "out").exists()


def test_a_python_without_verl_is_named_in_one_line(tmp_path):
    """PYTHON runs this interpreter with no site-packages (-S, so no verl): run_cpu.sh refuses it
    in one line naming that interpreter, before anything is written."""
    no_site = tmp_path / "bin" / "python-no-site"
    no_site.parent.mkdir(parents=True)
    no_site.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    no_site.chmod(0o755)
    r = _run(SCRIPT, tmp_path, PYTHON=str(no_site))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.strip().splitlines() == [
        f"run_cpu.sh: verl and its rollout stack are not installed in the Python {sys.executable}: "
        "pip install 'entflow[verl]' into it, or set PYTHON to the Python that has them"
    ]
    assert not (tmp_path / "out").exists()


def test_a_python_that_is_not_there_is_one_line(tmp_path):
    r = _run(SCRIPT, tmp_path, PYTHON=str(tmp_path / "no" / "python"))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"run_cpu.sh: PYTHON={tmp_path / 'no' / 'python'}: no such Python (set PYTHON to the Python with entflow[verl])"
    ]
