"""Every subcommand on bad input: exit code 2, exactly one line of output naming what was wrong, and
no traceback (docs/design.md §13). Each input fails before any work is done (no training, no
analysis), so the whole table runs in seconds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from entflow.cli.main import COMMANDS, build_parser, main


def run_cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    """``entflow ARGV`` in-process: (exit code, non-empty output lines of stdout and stderr together)."""
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's usage errors
        code = e.code
    out = capsys.readouterr()
    return code, [ln for ln in (out.out + out.err).splitlines() if ln.strip()]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """A plain file, a malformed YAML file, a folder that is not a run, a TRL log and a folder that
    looks like a saved model."""
    from support.log_writers import write_trainer_state

    plain = tmp_path / "plain.txt"
    plain.write_text("not a folder\n")
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("steps: [1\n")
    not_a_run = tmp_path / "empty"
    not_a_run.mkdir()
    log = write_trainer_state(tmp_path / "trl" / "trainer_state.json", 40)
    model = tmp_path / "model"  # what --model accepts as a saved model folder (never loaded here)
    model.mkdir()
    (model / "config.json").write_text("{}")
    two_methods = tmp_path / "two_methods.yaml"  # a comparison's preset: `train` takes one of its methods
    two_methods.write_text("methods: [grpo, kl_cov]\nsteps: 2\n")
    return {
        "plain": plain, "bad_yaml": bad_yaml, "not_a_run": not_a_run, "log": log, "model": model,
        "two_methods": two_methods,
    }  # fmt: skip


# (argv with {placeholders} for the fixture's paths, words the one line must contain)
CASES = [
    (["run", "--config", "/no/such.yaml"], ["--config", "/no/such.yaml", "no such file"]),
    (["run", "--preset", "nope"], ["--preset", "nope"]),
    (["run", "nokey=3"], ["nokey", "unknown key"]),
    (["pretrain", "--task", "nope"], ["unknown task", "nope", "countdown"]),
    (["pretrain", "--steps", "abc"], ["--steps", "abc"]),
    (["train", "--config", "/no/such.yaml"], ["--config", "/no/such.yaml"]),
    (["train", "--config", "{bad_yaml}"], ["--config", "bad.yaml", "not valid YAML"]),
    (["train", "--config", "{not_a_run}"], ["--config", "empty", "is a directory"]),
    (["train", "--config", "{two_methods}"], ["'methods'", "2 methods (grpo, kl_cov)", "--method NAME", "compare"]),
    (["train", "--resume", "/no/such/run"], ["--resume", "/no/such/run", "no such file"]),
    (["train", "--resume", "{not_a_run}"], ["--resume", "empty", "not a run directory"]),
    (["train", "lr=abc"], ["'lr'", "expected a number", "'abc'"]),
    (["train", "seed=1.5"], ["'seed'", "expected an integer"]),
    (["train", "coverage_k=abc"], ["'coverage_k'", "expected a list of integers or null"]),
    (["train", "--method", "nope"], ["unknown method 'nope'", "grpo"]),
    (["train", "--data", "gsm_symbolic"], ["--data needs --model"]),
    (["train", "--model", "/no/such/model"], ["--model /no/such/model: not a directory", "smollm2"]),
    (["train", "--model", "{not_a_run}"], ["--model", "empty", "without config.json"]),
    (["eval", "--model", "./no/such", "--data", "gsm_symbolic"], ["--model ./no/such: not a directory"]),
    (["train", "--model", "{model}", "--data", "/no/such.jsonl"], ["--data /no/such.jsonl: no such file"]),
    (["eval", "--model", "{model}", "--data", "./nope.parquet"], ["--data ./nope.parquet: no such file"]),
    (["compare", "--config", "/no/such.yaml"], ["--config", "/no/such.yaml"]),
    (["compare", "--methods", "grpo", "--jobs", "0"], ["jobs", ">= 1"]),
    (["compare"], ["give --methods"]),
    (["eval", "/no/such/run"], ["PATH", "/no/such/run", "no such file"]),
    (["eval", "{plain}"], ["PATH", "plain.txt", "expected a directory"]),
    (["eval", "--k", "abc"], ["--k", "abc"]),
    (["estimators", "--states", "1"], ["states", ">= 2"]),
    (["estimators", "--lr", "abc"], ["--lr", "invalid float value"]),
    (["methods", "nope"], ["unknown method 'nope'", "steer"]),
    (["analyze", "/no/such/log"], ["/no/such/log", "no such file"]),
    (["analyze", "{log}", "--out", "{plain}"], ["--out", "plain.txt", "not a directory"]),
    (["analyze", "{log}", "--entropy-key", "nope"], ["--entropy-key", "nope", "the log has: ", "entropy, "]),
    (["analyze", "{log}", "--reward-key", "rewardd"], ["--reward-key", "rewardd", "keys like it: ", "reward"]),
    (["analyze", "{log}", "--strict", "--early-frac", "2"], ["early_frac", "must be in (0, 1)"]),
    (["analyze", "{log}", "--early-frac", "abc"], ["--early-frac", "abc"]),
    (["reproduce", "--seeds", "a,b"], ["seeds", "a,b"]),
    (["reproduce", "--claims", "nope"], ["unknown claim ids", "nope"]),
    (["reproduce", "--config", "/no/such.yaml"], ["--config", "/no/such.yaml"]),
    (["doctor", "--only", "nope"], ["only", "nope", "token_stats"]),
    (["doctor", "--device", "nope"], ["device", "nope"]),
    (["doctor", "--bogus"], ["unrecognized arguments", "--bogus"]),
]


@pytest.mark.parametrize("argv,words", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_exits_2_with_one_line(argv, words, files, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written anywhere else, and a run folder would show up here
    argv = [a.format(**files) for a in argv]
    code, lines = run_cli(argv, capsys)
    assert code == 2, (code, lines)
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not (tmp_path / "runs").exists()  # refused before any work


def test_every_subcommand_has_a_bad_input_case():
    assert {a[0] for a, _ in CASES} == set(COMMANDS)


def test_bad_input_through_the_console_script(tmp_path):
    """The installed entry point (a fresh interpreter, as a user runs it): one line on stderr, exit 2."""
    import subprocess

    res = subprocess.run(
        [sys.executable, "-m", "entflow.cli.main", "train", "--resume", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert res.returncode == 2 and res.stdout == "", (res.stdout, res.stderr)
    assert res.stderr.strip().splitlines() == [
        f"entflow train: error: --resume {tmp_path / 'missing'}: no such file or directory"
    ]


def test_every_option_has_help():
    """Every option and positional of every subcommand has a help text (``entflow X --help`` explains it)."""
    import argparse

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [
        f"{name} {action.option_strings or action.dest}"
        for name, p in sub.choices.items()
        for action in p._actions
        if not isinstance(action, argparse._HelpAction) and not (action.help or "").strip()
    ]
    assert missing == []
