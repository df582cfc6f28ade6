"""Seeds and intervals (analysis/stats.py and the report's seed groups): t-interval against a hand
computation, windowed best, seed groups in the report (mean ± half-width), `compare seeds=…` end to
end on a micro config."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from entflow.analysis.report import summarize_run, write_report
from entflow.analysis.stats import aggregate_seeds


def _run(root: Path, name: str, group: str, seed: int, accs, entropy: float) -> Path:
    run = root / name
    run.mkdir(parents=True)
    cfg = {"name": name, "group": group, "method": group, "seed": seed, "task": "countdown"}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    lines = [{"step": 0, "val/acc": 0.2}]
    for s in range(1, 21):
        rec = {"step": s, "entropy": 1.0 if s == 1 else entropy, "reward/mean": 0.5}
        if s % 5 == 0:
            rec["val/acc"] = accs[s // 5 - 1]
            rec["diag/distinct_n"] = 0.5
            rec |= {f"diag/pos_entropy/{k}/b{i}": 0.1 * i for k in ("correct", "incorrect") for i in range(5)}
        lines.append(rec)
    import json

    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return run


def test_seed_groups_aggregate_with_intervals(tmp_path: Path):
    runs = [
        _run(tmp_path, "a-s0", "a", 0, [0.3, 0.4, 0.5, 0.5], 0.2),
        _run(tmp_path, "a-s1", "a", 1, [0.3, 0.5, 0.6, 0.6], 0.4),
        _run(tmp_path, "b", "b", 0, [0.3, 0.3, 0.3, 0.3], 0.9),
    ]
    summaries = [summarize_run(r) for r in runs]
    assert summaries[0]["val_acc_best_window"] == pytest.approx(1.4 / 3)
    assert summaries[0]["val_acc_gain_window"] == pytest.approx(1.4 / 3 - 0.2)
    rows = {r["group"]: r for r in aggregate_seeds(summaries)}
    assert rows["a"]["seeds"] == [0, 1] and rows["b"]["seeds"] == [0]
    # retention: first 5 % of 20 steps = step 1 (H = 1), last 20 % = H_final → 0.2 and 0.4
    mean, half, n = rows["a"]["entropy_retention"]
    assert (mean, n) == (pytest.approx(0.3), 2) and half == pytest.approx(
        12.706204736174698 * 0.1 / math.sqrt(2) * math.sqrt(2)
    )
    report = write_report(runs, tmp_path / "rep")
    md = (tmp_path / "rep" / "summary.md").read_text()
    assert "0.30 ± 1.27" in md  # retention of a: mean ± t_{0.975,1}·s/√2 with s = 0.1414
    assert (tmp_path / "rep" / "plots" / "entropy_band.png").exists()
    assert (tmp_path / "rep" / "plots" / "val_acc_band.png").exists()
    assert "Over seeds" in report.read_text()
    assert (tmp_path / "rep" / "plots" / "positional_entropy.png").exists()
    assert summaries[0]["pos_entropy_last"]["correct"] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])


def test_compare_with_seeds_names_and_seeds_runs(tmp_path: Path):
    from entflow.errors import ConfigError
    from entflow.settings.compare import compare_configs, parse_seeds

    assert parse_seeds("0,1,2") == [0, 1, 2] and parse_seeds([3, 4]) == [3, 4] and parse_seeds(5) == [5]
    for bad in ("0,0", "a", "-1", ""):
        with pytest.raises(ConfigError):
            parse_seeds(bad)
    cfgs = compare_configs("c", ["grpo", "steer"], {}, ["steps=2"], out_dir=str(tmp_path), seeds=[0, 1, 2])
    assert [(c.run_name, c.group, c.seed) for c in cfgs] == [
        (f"{m}-s{s}", m, s) for m in ("grpo", "steer") for s in (0, 1, 2)
    ]
    single = compare_configs("c", ["grpo"], {"seed": 7}, [], out_dir=str(tmp_path), seeds=None)
    assert single[0].run_name == "grpo" and single[0].seed == 7
