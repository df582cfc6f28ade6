"""The README opens with the two commands, and CI runs exactly the second one, then the TRL tests
against the oldest supported TRL release (``.ci/trl-range``) and the built wheel's install profiles
(``.ci/wheel``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block, "README.md must open with a bash block of the two commands"
    return [ln for ln in block.group(1).splitlines() if ln and not ln.startswith("#")]


def test_readme_opens_with_demo_and_test_commands():
    demo, tests = readme_commands()
    assert demo.endswith("entflow run") and "pytest" in tests


def ci_steps() -> list[str]:
    """``.ci/run``'s steps: one per line, after its ``set`` and ``cd`` lines."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [ln for ln in lines if ln and not ln.startswith(("#", "set ", "cd "))]


def test_ci_runs_exactly_the_readme_test_command():
    """The first step is the README's test command, made fatal on failure (bash's ``set -e`` does not
    stop at a failing command inside an ``a && b`` list that is not the script's last line)."""
    steps = ci_steps()
    assert steps[0] == readme_commands()[1] + " || exit 1"
    assert "bash .ci/trl-range" in steps and "bash .ci/wheel" in steps
    for step in steps:  # every other step is a plain command, which `set -e` stops at
        assert step == steps[0] or " && " not in step, step
    assert "set -euo pipefail" in (ROOT / ".ci" / "run").read_text()


def test_ci_run_stops_at_the_first_failing_step(tmp_path):
    """.ci/run's own text with its steps stubbed: a failure anywhere (the first command of the README
    chain included) exits non-zero, and no later step runs."""
    import subprocess

    text = (ROOT / ".ci" / "run").read_text().replace('cd "$(dirname "$0")/.."', f"cd {tmp_path}")
    steps = ci_steps()
    first = steps[0].split(" && ")[0]  # python3.11 -m venv .venv
    for i in range(len(steps)):
        script = text
        for j, step in enumerate(steps):
            if j == 0:  # keep the README line's && chain; fail (or stub) its first command, stub the rest
                stub = steps[0].replace(first, "false" if i == 0 else "echo ran-0", 1)
                for cmd in steps[0].split(" && ")[1:]:
                    stub = stub.replace(cmd.removesuffix(" || exit 1"), "echo chain", 1)
                script = script.replace(step, stub)
            else:
                script = script.replace(step, "false" if i == j else f"echo ran-{j}")
        res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
        assert res.returncode != 0, (i, script)
        assert not any(f"ran-{j}" in res.stdout for j in range(i + 1, len(steps))), (i, res.stdout)


def test_the_trl_range_script_tests_the_lower_bound_of_the_pin():
    """``.ci/trl-range`` installs exactly the lower bound of pyproject.toml's ``trl>=`` pin."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pin = next(d for d in extras["trl"] if d.startswith("trl>="))
    lower = pin.removeprefix("trl>=").split(",")[0]
    script = (ROOT / ".ci" / "trl-range").read_text()
    assert f'TRL_VERSION="${{TRL_VERSION:-{lower}' in script, (pin, lower)
    assert "<2" in pin  # the next minor releases install without waiting for us


def test_setup_never_asks_for_an_unpinned_torch():
    for cmd in readme_commands():
        assert "torch==2.13.0" in cmd  # an unpinned torch pulls GBs of CUDA wheels on a CPU machine
