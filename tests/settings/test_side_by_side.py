"""`entflow compare` shows one progress row per run (the shared ProgressBar), read from each run's
metrics.jsonl; off a terminal it prints plain lines, once per new step."""

from __future__ import annotations

import json

import pytest

from entflow.lab.config import LabConfig
from entflow.settings.side_by_side import _CompareProgress


def test_compare_progress_follows_each_runs_metrics_file(tmp_path, capsys):
    configs = [LabConfig(name=n, out_dir=str(tmp_path), steps=5) for n in ("grpo", "steer")]
    bar = _CompareProgress(configs)
    configs[0].run_dir.mkdir(parents=True)
    rows = [
        {"step": 0, "val/acc": 0.1},
        {"step": 1, "reward/mean": 0.25, "entropy": 1.5},
        {"step": 2, "reward/mean": 0.5, "entropy": 1.2, "val/acc": 0.3},
    ]
    (configs[0].run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    bar.refresh()
    bar.refresh()  # nothing new: no second line
    bar.close()
    lines = [line.split("  (")[0] for line in capsys.readouterr().err.splitlines()]
    assert lines == ["grpo step 2/5  reward 0.50  H 1.200  val 0.30"]  # steer has no metrics yet


@pytest.mark.parametrize("jobs", [1, 2])
def test_each_finished_run_is_reported_before_the_others_end(tmp_path, jobs):
    from entflow.settings.side_by_side import train_side_by_side
    from support.run_dirs import fake_train

    configs = [LabConfig(name=n, out_dir=str(tmp_path), steps=1) for n in ("a", "b", "c")]
    seen: list[tuple[int, str]] = []
    dirs = train_side_by_side(configs, fake_train, jobs, progress=False, on_done=lambda i, d: seen.append((i, d.name)))
    assert sorted(seen) == [(0, "a"), (1, "b"), (2, "c")] and [d.name for d in dirs] == ["a", "b", "c"]
    # a failing run: the ones that finished before it were reported (one at a time: in order)
    seen.clear()
    configs = [LabConfig(name=n, out_dir=str(tmp_path), steps=1) for n in ("a", "fail", "c")]
    with pytest.raises(RuntimeError, match="failed"):
        train_side_by_side(configs, fake_train, 1, progress=False, on_done=lambda i, d: seen.append((i, d.name)))
    assert seen == [(0, "a")]
