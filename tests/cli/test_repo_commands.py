"""The README opens with the two commands, and CI runs exactly the second one, with the other checks
beside it (the oldest supported TRL release, the docs site, the transformers range of the real-model
path, the built wheel's install profiles)."""

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


CI_SCRIPTS = {".ci/trl-range", ".ci/docs", ".ci/real-range", ".ci/wheel"}
AFTER_TESTS = {".ci/verl-cpu", ".ci/verl-nodes"}  # run in the README test command's venv, after it


def ci_lanes() -> dict[str, list[str]]:
    """``.ci/run``'s background lanes: name → the scripts it runs in order (``lane NAME SCRIPT... &``)."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return {ln.split()[1]: ln.split()[2:-1] for ln in lines if ln.startswith("lane ") and ln.endswith(" &")}


def test_ci_runs_exactly_the_readme_test_command_and_every_check():
    """One line is the README's test command, made fatal on failure (bash's ``set -e`` does not stop at
    a failing command inside an ``a && b`` list); the lanes run every other check exactly once."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert lines.count(readme_commands()[1] + " || exit 1") == 1
    scripts = [s for lane in ci_lanes().values() for s in lane]
    assert sorted(scripts) == sorted(CI_SCRIPTS)
    assert all((ROOT / s).is_file() for s in scripts)


def _run_ci_with_stubs(tmp_path: Path, failing: str | None) -> tuple[int, str]:
    """``.ci/run``'s own text in ``tmp_path/.ci`` with the README command and each check replaced by a
    stub that prints ``ran <name>`` and fails when its name is ``failing``."""
    import subprocess

    ci = tmp_path / ".ci"
    ci.mkdir(exist_ok=True)
    readme = readme_commands()[1]
    code = "false" if failing == "readme" else "true"
    text = (ROOT / ".ci" / "run").read_text().replace(readme, f"echo ran readme && {code}")
    (ci / "run").write_text(text)
    for script in CI_SCRIPTS | AFTER_TESTS:
        name = script.removeprefix(".ci/")
        (ci / name).write_text(f"echo ran {name}\n{'exit 1' if failing == name else 'exit 0'}\n")
    res = subprocess.run(["bash", str(ci / "run")], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    return res.returncode, res.stdout


def test_ci_run_passes_only_when_every_check_passes(tmp_path):
    """All stubs pass: exit 0, every check ran. One stub fails (the README command or any lane's
    script): exit non-zero, and no later script of that lane ran."""
    code, out = _run_ci_with_stubs(tmp_path, None)
    assert code == 0, out
    assert {f"ran {s.removeprefix('.ci/')}" for s in CI_SCRIPTS | AFTER_TESTS} | {"ran readme"} <= set(out.splitlines())
    for failing in ["readme", *(s.removeprefix(".ci/") for s in CI_SCRIPTS | AFTER_TESTS)]:
        code, out = _run_ci_with_stubs(tmp_path, failing)
        assert code != 0, (failing, out)
        for lane in ci_lanes().values():
            names = [s.removeprefix(".ci/") for s in lane]
            if failing in names:
                assert not any(f"ran {n}" in out for n in names[names.index(failing) + 1 :]), (failing, out)


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
