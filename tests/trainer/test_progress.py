"""The one progress bar and the one transformers quiet mode (entflow.trainer.progress)."""

from __future__ import annotations

import pytest

from entflow.trainer.progress import ProgressBar, quiet_transformers


def test_off_a_terminal_rows_print_plain_lines(capsys):
    bar = ProgressBar(terminal=False, unit="step", line_every_s=0.0)
    a = bar.add("grpo", total=3)
    b = bar.add("steer", total=2, completed=1)
    bar.update(a, completed=1, info="reward 0.25")
    bar.update(b, advance=1)
    bar.update(a, advance=2)
    bar.close()
    bar.update(a, completed=3)  # after close: nothing
    err = capsys.readouterr().err.splitlines()
    assert [line.split("  (")[0] for line in err] == [
        "grpo step 1/3  reward 0.25",
        "steer step 2/2",
        "grpo step 3/3  reward 0.25",
    ]


def test_plain_lines_are_throttled_but_a_finished_row_always_prints(capsys):
    bar = ProgressBar(terminal=False, unit="sample", line_every_s=3600.0)
    row = bar.add("generating", total=10)
    for _ in range(10):
        bar.update(row, advance=1)
    err = capsys.readouterr().err.splitlines()
    assert [line.split("  (")[0] for line in err] == ["generating sample 1/10", "generating sample 10/10"]


def test_disabled_shows_nothing(capsys):
    with ProgressBar(enabled=False) as bar:
        row = bar.add("x", total=2)
        bar.update(row, advance=2, info="done")
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_on_a_terminal_it_is_one_rich_bar_with_a_task_per_row():
    bar = ProgressBar(terminal=True)
    a, b = bar.add("grpo", total=4), bar.add("steer", total=4, completed=2)
    bar.update(a, completed=3, info="H 1.2")
    bar.update(b, advance=1)
    tasks = bar._live.tasks
    assert [(t.description, t.completed, t.total) for t in tasks] == [("grpo", 3, 4), ("steer", 3, 4)]
    assert tasks[0].fields["info"] == "H 1.2"
    bar.close()
    assert bar._live is None


def test_quiet_transformers_silences_and_restores():
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    hf_logging.set_verbosity_warning()
    with quiet_transformers():
        assert not hf_logging.is_progress_bar_enabled()
        assert hf_logging.get_verbosity() == hf_logging.ERROR
    assert hf_logging.is_progress_bar_enabled() and hf_logging.get_verbosity() == hf_logging.WARNING
    with pytest.raises(RuntimeError), quiet_transformers():
        raise RuntimeError("boom")
    assert hf_logging.is_progress_bar_enabled() and hf_logging.get_verbosity() == hf_logging.WARNING


def test_one_progress_bar_and_one_quiet_helper_in_the_package():
    """No module but entflow.trainer.progress builds a rich Progress, imports tqdm, or switches
    transformers' progress bars or logging itself (a host's own ``disable_tqdm=True`` option, which
    turns the host's bar off, is allowed)."""
    from pathlib import Path

    import entflow

    src = Path(entflow.__file__).parent
    offenders = [
        f"{p.relative_to(src)}: {needle}"
        for p in sorted(src.rglob("*.py"))
        if p.name != "progress.py"
        for needle in ("rich.progress", "import tqdm", "from tqdm", "tqdm(", "disable_progress_bar", "set_verbosity")
        if needle in p.read_text()
    ]
    assert offenders == []
