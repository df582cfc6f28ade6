"""``entflow analyze``, the report and ``entflow reproduce`` read the same run directory and give the
same early prediction and the same entropy retention: all three call ``entflow.analysis.law``.
Checked against a hand computation (least squares through three points, window means)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from entflow.analysis.collapse import analyze_log
from entflow.analysis.report import summarize_run
from entflow.evidence.facts import run_facts

STEPS, EVAL_EVERY = 80, 10  # the demo's: 9 evaluations, step 0 included


def law_run(root: Path) -> tuple[Path, np.ndarray, np.ndarray, np.ndarray]:
    """An entflow run directory whose validation points follow the law with noise; returns it with the
    validation entropies and accuracies ``[9]`` and the training entropies ``[80]``."""
    rng = np.random.default_rng(7)
    run = root / "grpo_law-s0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"method": "grpo", "name": run.name, "seed": 0}))
    train_h = 1.4 * np.exp(-np.arange(1, STEPS + 1) / 30) + 0.2 + rng.normal(0, 0.01, STEPS)
    val_h = np.r_[1.6, train_h[EVAL_EVERY - 1 :: EVAL_EVERY]] + 0.05
    val_acc = -0.15 * np.exp(val_h) + 0.9 + rng.normal(0, 0.02, val_h.size)
    lines = [{"step": 0, "val/acc": val_acc[0], "val/entropy": val_h[0]}]
    for s in range(1, STEPS + 1):
        rec = {"step": s, "entropy": train_h[s - 1], "reward/mean": 0.3 + 0.004 * s}
        if s % EVAL_EVERY == 0:
            rec |= {"val/acc": val_acc[s // EVAL_EVERY], "val/entropy": val_h[s // EVAL_EVERY]}
        lines.append(rec)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return run, val_h, val_acc, train_h


def test_analyze_report_and_reproduce_agree_on_early_prediction_and_retention(tmp_path):
    run, val_h, val_acc, train_h = law_run(tmp_path)
    _, analysis = analyze_log(run)
    summary = summarize_run(run)
    facts = run_facts(run, summary)

    # by hand: the law through the first max(3, ceil(0.15 · 9)) = 3 evaluations (OLS on e^H)
    slope, intercept = np.polyfit(np.exp(val_h[:3]), val_acc[:3], 1)
    law_error = slope * np.exp(val_h[-1]) + intercept - val_acc[-1]
    steps = np.arange(0, STEPS + 1, EVAL_EVERY)
    line = np.polyval(np.polyfit(steps[:3], val_acc[:3], 1), STEPS)
    last_error, linear_error = val_acc[2] - val_acc[-1], line - val_acc[-1]

    pred = analysis.prediction
    assert analysis.target == "val" and pred["n_fit"] == 3
    analyze_law = pred["by_model"]["law"]["error"]
    assert analyze_law == pytest.approx(law_error, abs=1e-12)
    assert summary["law_predict_error"] == analyze_law
    assert facts["predict_15_abs_err_law"] == abs(analyze_law)
    for name, hand in (("last_value", last_error), ("linear", linear_error)):
        assert pred["baselines"][name]["error"] == pytest.approx(hand, abs=1e-12)
        assert facts[f"predict_15_abs_err_{name}"] == abs(pred["baselines"][name]["error"])
        assert facts[f"predict_15_law_minus_{name}"] == abs(analyze_law) - abs(pred["baselines"][name]["error"])

    # retention: the last 20 % of the 80 training entropies (16) over the first 5 % (4)
    hand = train_h[-16:].mean() / train_h[:4].mean()
    assert analysis.entropy["retention"] == pytest.approx(hand, rel=1e-12)
    assert summary["entropy_retention"] == analysis.entropy["retention"]
    assert facts["entropy_retention"] == analysis.entropy["retention"]
