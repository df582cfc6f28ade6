"""Install profiles: the map from an optional module to its extra agrees with pyproject.toml, and a
command whose extra is missing says in one line which one to install (exit 2) before doing any work.
A missing module is simulated the way Python itself marks one unimportable: ``sys.modules[name] = None``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from entflow.cli import extras
from entflow.cli.main import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]
# distribution name -> import name, where they differ
IMPORT_NAME = {
    "reasoning-gym": "reasoning_gym",
    "math-verify": "math_verify",
    "TransferQueue": "transfer_queue",
    "pyzmq": "zmq",
}


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_extra_modules_are_pyprojects_extras():
    declared = pyproject()["optional-dependencies"]
    for extra, modules in extras.EXTRA_MODULES.items():
        dists = [re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] for d in declared[extra]]
        assert tuple(IMPORT_NAME.get(d, d) for d in dists) == modules, extra


def test_the_core_install_has_what_analyze_plots_with():
    core = [re.split(r"[<>=!~; ]", d, maxsplit=1)[0] for d in pyproject()["dependencies"]]
    assert "matplotlib" in core
    assert set(extras.COMMAND_EXTRA) == {"run", "pretrain", "train", "compare", "reproduce", "eval"}
    assert set(extras.COMMAND_EXTRA) < set(COMMANDS)  # methods, estimators, doctor, analyze: core only


def test_extra_of_module():
    assert extras.extra_of_module("transformers.models.llama", prefer="real") == "real"
    assert extras.extra_of_module("transformers") == "lab"  # the first extra that installs it
    assert extras.extra_of_module("gguf") == "real"
    assert extras.extra_of_module("tensorboard.backend") == "lab"
    assert extras.extra_of_module("no_such_thing") is None and extras.extra_of_module(None) is None


@pytest.mark.parametrize(
    "argv,extra",
    [
        (["train", "steps=2"], "lab"),
        (["run"], "lab"),
        (["pretrain"], "lab"),
        (["compare", "--methods", "grpo"], "lab"),
        (["reproduce", "--quick"], "lab"),
        (["eval", "runs/x"], "lab"),
        (["train", "--model", "smollm2"], "real"),
        (["run", "--preset", "real"], "real"),
        (["eval", "--model", "smollm2", "--data", "basic_arithmetic"], "real"),
    ],
)
def test_a_missing_extra_is_one_line_before_any_work(argv, extra, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    gone = "transformers"
    monkeypatch.setitem(__import__("sys").modules, gone, None)
    assert main(argv) == 2
    out = capsys.readouterr()
    lines = [ln for ln in (out.out + out.err).splitlines() if ln.strip()]
    assert lines == [
        f"entflow {argv[0]}: error: needs the [{extra}] extra (transformers not installed): "
        f"pip install 'entflow[{extra}]'"
    ]
    assert not any(tmp_path.iterdir())  # nothing trained, nothing written


def test_core_commands_do_not_ask_for_an_extra(monkeypatch, capsys):
    """`methods` runs with every optional module gone."""
    import sys

    for mods in extras.EXTRA_MODULES.values():
        for m in mods:
            monkeypatch.setitem(sys.modules, m, None)
    assert main(["methods", "grpo"]) == 0
    assert "grpo" in capsys.readouterr().out


def test_an_optional_module_reached_later_names_its_extra(monkeypatch, capsys, tmp_path):
    """A module imported inside a command (here TensorBoard, to read event files) that is missing:
    the same one line naming its extra, not a traceback."""
    import sys

    from entflow.cli import analyze

    def read_tensorboard(*a, **k):
        import tensorboard  # noqa: F401  (made unimportable below)

    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setattr(analyze, "analyze_one", read_tensorboard)
    (tmp_path / "events.out.tfevents.1").write_bytes(b"")
    assert main(["analyze", str(tmp_path / "events.out.tfevents.1"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "entflow analyze: error: needs the [lab] extra (tensorboard not installed): pip install 'entflow[lab]'"
    ]


def test_a_missing_module_no_extra_provides_is_a_bug_and_raises(monkeypatch):
    from entflow.cli import methods

    def broken(args):
        import entflow_no_such_module  # noqa: F401

    monkeypatch.setattr(methods, "run", broken)
    with pytest.raises(ModuleNotFoundError):
        main(["methods"])
