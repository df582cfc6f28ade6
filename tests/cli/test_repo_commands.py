"""The README opens with the two commands, and CI runs exactly the second one, then the TRL tests
against the oldest supported TRL release (``.ci/trl-range``, issue 20)."""

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


def test_ci_runs_exactly_the_readme_test_command():
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    ci = [ln for ln in lines if ln and not ln.startswith(("#", "set ", "cd "))]
    assert ci == [readme_commands()[1], "bash .ci/trl-range"]


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
