"""``entflow estimators``: in-process through ``entflow.cli.main.main`` and once as the console script."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from entflow.cli.main import main

ESTIMATOR_NAMES = ("steer", "sampled_logit", "opefo", "tabular", "cov")


def _rows(text: str) -> dict[str, float]:
    """estimator → relative error (as a fraction) parsed from the printed table."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^\W*(\w+)\W+([-+0-9.]+)%", line)
        if m and m.group(1) in ESTIMATOR_NAMES:
            rows[m.group(1)] = float(m.group(2)) / 100
    return rows


def test_estimators_prints_all_five_and_tabular_is_exact(capsys):
    rc = main(["estimators"])  # default lr
    out = capsys.readouterr().out
    assert rc == 0
    rows = _rows(out)
    assert set(rows) == set(ESTIMATOR_NAMES), out
    assert rows["tabular"] <= 0.01, out  # first-order exact: ≤ 1 % at the default lr
    assert min(v for k, v in rows.items() if k != "tabular") > 0.05, out  # the approximations are not


def test_estimators_smaller_lr_smaller_error(capsys):
    main(["estimators", "--states", "64", "--vocab", "16", "--lr", "5"])
    big = _rows(capsys.readouterr().out)["tabular"]
    main(["estimators", "--states", "64", "--vocab", "16", "--lr", "0.5"])
    small = _rows(capsys.readouterr().out)["tabular"]
    assert 0 < small < big / 3


@pytest.mark.parametrize(
    ("argv", "param"),
    [
        (["--lr", "-1"], "lr"),
        (["--lr", "0"], "lr"),
        (["--states", "1"], "states"),
        (["--vocab", "0"], "vocab"),
        (["--samples", "1"], "samples"),
    ],
)
def test_bad_value_exit_code_2_names_parameter(capsys, argv, param):
    rc = main(["estimators", *argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"'{param}'" in err, err


def test_unparsable_value_exit_code_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["estimators", "--lr", "abc"])
    assert e.value.code == 2
    assert "--lr" in capsys.readouterr().err


def test_console_script_subprocess():
    """One run of the installed console script (a few seconds: it imports torch)."""
    exe = Path(sys.executable).parent / "entflow"
    cmd = [str(exe)] if exe.exists() else [shutil.which("entflow") or "entflow"]
    env = dict(os.environ, COLUMNS="40")  # a pipe: every row on one line, whatever COLUMNS says
    res = subprocess.run([*cmd, "estimators", "--states", "64"], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = _rows(res.stdout)
    assert set(rows) == set(ESTIMATOR_NAMES), res.stdout
