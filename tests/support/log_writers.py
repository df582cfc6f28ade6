"""Training logs with a known entropy–performance law, written by the real writers of each format:
``torch.utils.tensorboard.SummaryWriter``, verl's ``Tracking`` (its ``file`` and ``tensorboard``
loggers), ``transformers.TrainerState.save_to_json`` (TRL's trainer_state.json), entflow's
``JsonlWriter`` (run directories), and CSV files in the layout W&B's and MLflow's exports use.
Shared by tests/analysis/test_logs.py and benchmarks/analyze_logs.py."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

A, B = 0.1, 0.6  # the law the series follow: R = −A·e^H + B


def law_series(n: int, sigma: float = 0.003, seed: int = 0, val_every: int = 10):
    """(steps [n], H [n], R [n], val_steps [m], val [m]): H decays, R = −A·e^H + B + noise, and a
    validation metric on every ``val_every``-th step following the same law (less noise)."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1)
    H = 0.2 + 1.3 * np.exp(-steps / (n / 6))
    R = -A * np.exp(H) + B + rng.normal(0, sigma, n)
    vi = np.arange(val_every - 1, n, val_every)
    val = -A * np.exp(H[vi]) + B + rng.normal(0, sigma / 3, vi.size)
    return steps, H, R, steps[vi], val


def write_tensorboard(log_dir: Path, n: int, tags=("train/entropy", "train/reward"), val_tag=None, extra=0) -> Path:
    """TensorBoard events with ``SummaryWriter`` (TRL's tag names by default); ``extra`` more tags per step."""
    from torch.utils.tensorboard import SummaryWriter

    steps, H, R, vs, val = law_series(n)
    w = SummaryWriter(str(log_dir))
    vset = dict(zip(vs.tolist(), val.tolist(), strict=True))
    for s, h, r in zip(steps.tolist(), H.tolist(), R.tolist(), strict=True):
        w.add_scalar(tags[0], h, s)
        w.add_scalar(tags[1], r, s)
        for j in range(extra):
            w.add_scalar(f"train/extra_{j}", r * j, s)
        if val_tag and s in vset:
            w.add_scalar(val_tag, vset[s], s)
    w.close()
    return log_dir


def verl_metrics(n: int, extra: int = 0):
    """verl-style metrics dicts of a run, one per step: (step, metrics)."""
    steps, H, R, vs, val = law_series(n)
    vset = dict(zip(vs.tolist(), val.tolist(), strict=True))
    for s, h, r in zip(steps.tolist(), H.tolist(), R.tolist(), strict=True):
        m = {"actor/entropy": h, "critic/score/mean": r, "response_length/mean": 100.0, "actor/pg_clipfrac": 0.01}
        for j in range(extra):
            m[f"perf/extra_{j}"] = float(j)
        if s in vset:
            m["val-core/openai/gsm8k/acc/mean@1"] = vset[s]
        yield s, m


def write_verl(root: Path, n: int, backends=("file",), extra: int = 0) -> dict[str, Path]:
    """Log a run through verl's own ``Tracking``; returns {"file": jsonl path, "tensorboard": dir}."""
    from verl.utils.tracking import Tracking

    paths = {"file": root / "verl_run.jsonl", "tensorboard": root / "tb"}
    old = {k: os.environ.get(k) for k in ("VERL_FILE_LOGGER_PATH", "TENSORBOARD_DIR")}
    os.environ["VERL_FILE_LOGGER_PATH"] = str(paths["file"])
    os.environ["TENSORBOARD_DIR"] = str(paths["tensorboard"])
    try:
        tracking = Tracking("entflow-test", "law", default_backend=list(backends))
        for s, m in verl_metrics(n, extra):
            tracking.log(data=m, step=s)
        tracking.finish()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {k: v for k, v in paths.items() if k in backends}


def trl_history(n: int, extra: int = 0) -> list[dict]:
    """A TRL GRPOTrainer-shaped ``log_history``: training records and ``eval_`` records."""
    steps, H, R, vs, val = law_series(n)
    vset = dict(zip(vs.tolist(), val.tolist(), strict=True))
    hist = []
    for s, h, r in zip(steps.tolist(), H.tolist(), R.tolist(), strict=True):
        rec = {"loss": 0.0, "reward": r, "reward_std": 0.1, "entropy": h, "completions/mean_length": 8.0}
        rec.update({f"extra_{j}": float(j) for j in range(extra)})
        hist.append(rec | {"epoch": s / n, "step": s})
        if s in vset:
            hist.append({"eval_reward": vset[s], "eval_entropy": h, "epoch": s / n, "step": s})
    return hist


def write_trainer_state(path: Path, n: int, extra: int = 0) -> Path:
    """``trainer_state.json`` written by ``transformers.TrainerState.save_to_json``."""
    from transformers import TrainerState

    path.parent.mkdir(parents=True, exist_ok=True)
    TrainerState(global_step=n, max_steps=n, log_history=trl_history(n, extra)).save_to_json(str(path))
    return path


def write_entflow_run(run_dir: Path, n: int) -> Path:
    """An entflow run directory's ``metrics.jsonl`` via the trainer's ``JsonlWriter``."""
    from entflow.trainer.rundir import JsonlWriter

    steps, H, R, vs, val = law_series(n)
    vset = dict(zip(vs.tolist(), val.tolist(), strict=True))
    run_dir.mkdir(parents=True, exist_ok=True)
    w = JsonlWriter(run_dir / "metrics.jsonl")
    for s, h, r in zip(steps.tolist(), H.tolist(), R.tolist(), strict=True):
        rec = {"step": s, "entropy": h, "reward/mean": r}
        if s in vset:
            rec |= {"val/acc": vset[s], "val/entropy": h}
        w.write(rec)
    w.close()
    return run_dir


def write_wandb_csv(path: Path, n: int, run: str = "grpo-run", extra: int = 0) -> Path:
    """A W&B "Export CSV" of a panel: ``Step`` and ``RUN - key`` columns with ``__MIN``/``__MAX``."""
    steps, H, R, _, _ = law_series(n)
    keys = ["train/entropy", "train/reward"] + [f"train/extra_{j}" for j in range(extra)]
    head = ["Step"]
    for k in keys:
        head += [f"{run} - {k}", f"{run} - {k}__MIN", f"{run} - {k}__MAX"]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        for i, s in enumerate(steps.tolist()):
            vals = [float(H[i]), float(R[i])] + [float(j) for j in range(extra)]
            w.writerow([s] + [x for v in vals for x in (repr(v), repr(v), repr(v))])
    return path


def write_mlflow_csv(path: Path, n: int) -> Path:
    """MLflow's long metric-history layout: ``run_id,key,value,step,timestamp``."""
    steps, H, R, _, _ = law_series(n)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run_id", "key", "value", "step", "timestamp"])
        for i, s in enumerate(steps.tolist()):
            w.writerow(["r1", "entropy", repr(float(H[i])), s, 1000 + s])
            w.writerow(["r1", "reward", repr(float(R[i])), s, 1000 + s])
    return path
