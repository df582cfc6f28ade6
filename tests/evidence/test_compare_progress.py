"""`entflow compare` shows one progress row per run (the shared ProgressBar), read from each run's
metrics.jsonl; off a terminal it prints plain lines, once per new step."""

from __future__ import annotations

import json

from entflow.evidence.compare import _CompareProgress
from entflow.lab.config import LabConfig


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
