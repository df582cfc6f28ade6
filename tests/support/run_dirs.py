"""Synthetic run directories with known values (docs/design.md §10 layout) for the analysis tests."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

N_STEPS = 40
VAL_STEPS = (10, 20, 30, 40)


def entropy_at(step: int, offset: float) -> float:
    """The synthetic runs' rollout entropy at ``step`` (shifted by ``offset``)."""
    # first 5 % of 40 steps = 2 steps: 1.0, 0.8; last 20 % = 8 steps: alternating 0.2 / 0.3
    if step == 1:
        return 1.0 + offset
    if step == 2:
        return 0.8 + offset
    if step > 32:
        return (0.2 if step % 2 else 0.3) + offset
    return 0.9 - 0.02 * step + offset


def make_run(
    root: Path,
    name: str,
    method: str,
    *,
    offset: float = 0.0,
    val_acc: tuple[float, ...] = (0.4, 0.55, 0.5, 0.52),
    greedy: tuple[float, ...] = (0.45, 0.6, 0.62, 0.61),
    method_key: str | None = None,
) -> Path:
    run = root / name
    run.mkdir(parents=True)
    cfg = {"method": method, "name": name, "task": "countdown", "seed": 3, "steps": N_STEPS, "lr": 1e-3}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    lines = [{"step": 0, "val/acc": 0.3, "val/acc_greedy": 0.35, "val/pass@k": 0.6, "val/entropy": 1.1}]
    for s in range(1, N_STEPS + 1):
        rec = {
            "step": s,
            "time/elapsed_s": 2.5 * s,
            "reward/mean": 0.3 + 0.01 * s,
            "response/len_mean": 12.0 + s % 3,
            "entropy": entropy_at(s, offset),
            "loss": 0.1,
            "clip/frac_high": 0.01,
            "clip/frac_low": 0.005,
            "flow/lambda_star": 0.1,
            # steer Spearman: 0.6 on odd steps, 0.7 on even; step 5 is null (NaN), step 6 missing
            "audit/steer/spearman": None if s == 5 else (0.6 if s % 2 else 0.7),
            "audit/steer/pearson": 0.5,
            "audit/cov/spearman": 0.05,
            "audit/cov/pearson": 0.02,
            "audit/opefo/spearman": None,  # never defined → NaN mean
        }
        if s == 6:
            del rec["audit/steer/spearman"]
        if method_key:
            rec[method_key] = 0.9
        if s in VAL_STEPS:
            i = VAL_STEPS.index(s)
            rec.update({"val/acc": val_acc[i], "val/acc_greedy": greedy[i], "val/pass@k": 0.7 + 0.01 * i})
        lines.append(rec)
    text = "".join(json.dumps(r) + "\n" for r in lines)
    # a crash mid-write: truncated last line that would otherwise set best acc 0.99 and 41 steps
    text += '{"step": 41, "entropy": 0.01, "val/acc": 0.99, "val/acc_gr'
    (run / "metrics.jsonl").write_text(text)
    return run


def fake_train(cfg, resume: bool = False, overwrite: bool = False, on_step=None) -> str:
    """A stand-in for ``train_lab`` in ``train_side_by_side`` (module level, so spawned workers can
    load it): makes the run folder, writes ``done``; a config named ``fail`` raises."""
    if cfg.name == "fail":
        raise RuntimeError("the run failed")
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    (cfg.run_dir / "done").write_text(cfg.name)
    return str(cfg.run_dir)
