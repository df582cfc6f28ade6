"""``entflow eval``: avg@k, pass@k and greedy accuracy of a run's final policy on the held-out set.

With ``--model NAME_OR_PATH --data TASK_OR_FILE`` it evaluates a real Hugging Face model instead
(avg@k, pass@k, maj@k, greedy, each with its standard error): see :mod:`entflow.hf.evaluate`."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", help="a run directory or a saved policy directory (lab); omit with --model")
    p.add_argument("--task", help="task (default: the run's)")
    p.add_argument("--k", type=int, default=8, help="samples per prompt [8]")
    p.add_argument("--seed", type=int, default=0, help="sampling seed [0]")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the run's, else 1)")
    from entflow.hf.evaluate import add_arguments as add_real_model_arguments

    add_real_model_arguments(p)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "model", None) is not None:
        from entflow.cli._common import data_argument, model_argument
        from entflow.hf.evaluate import run_cli

        model_argument("--model", args.model)
        if args.data:
            data_argument("--data", args.data)
        return run_cli(args)
    from pathlib import Path

    from entflow.cli._common import existing_path
    from entflow.errors import ConfigError

    if args.path is None:
        raise ConfigError("path", "give a run directory, or --model NAME_OR_PATH --data TASK_OR_FILE")
    path = existing_path("PATH", args.path, kind="dir")
    return eval_lab_policy(Path(path), args.task, args.k, args.seed, args.temperature)


def lab_eval_settings(path, task_name: str | None = None, temperature: float | None = None):
    """(policy directory, task, temperature) for ``entflow eval PATH``.

    A run directory is scored on exactly the task it trained on — its ``task`` *and*
    ``task_params`` from ``config.yaml`` — at its sampling ``temperature``, using
    ``checkpoints/final``; ``task_name`` / ``temperature`` override (a different task name drops the
    run's task_params). A bare policy directory uses ``task_name`` (default countdown) at
    temperature 1 unless given.
    """
    from pathlib import Path

    from entflow.errors import ConfigError
    from entflow.lab.tasks import get_task
    from entflow.trainer.config import load_yaml

    path = Path(path)
    params: dict = {}
    run_temperature = 1.0
    if (path / "config.yaml").exists():
        cfg = load_yaml(path / "config.yaml")
        run_task = cfg.get("task") or "countdown"
        if task_name is None or task_name == run_task:
            task_name, params = run_task, dict(cfg.get("task_params") or {})
        run_temperature = float(cfg.get("temperature") or 1.0)
        path = path / "checkpoints" / "final"
    if not path.exists():
        raise ConfigError("path", f"{path} does not exist")
    t = run_temperature if temperature is None else float(temperature)
    if not t > 0:
        raise ConfigError("temperature", f"must be > 0, got {t}")
    return path, get_task(task_name or "countdown", **params), t


def eval_lab_policy(
    path, task_name: str | None = None, k: int = 8, seed: int = 0, temperature: float | None = None
) -> int:
    """Evaluate a lab run (or saved lab policy) on its held-out set and print the table."""
    import torch
    from rich.console import Console
    from rich.table import Table

    from entflow.errors import ConfigError
    from entflow.lab.policy import load_policy
    from entflow.lab.pretrain import evaluate

    if k < 1:
        raise ConfigError("k", f"must be >= 1, got {k}")
    policy_dir, task, temp = lab_eval_settings(path, task_name, temperature)
    model, tok = load_policy(policy_dir)
    torch.manual_seed(seed)
    res = evaluate(model, tok, task, task.validation_set(), k=k, temperature=temp, seed=seed)
    console = Console()
    console.print(f"{policy_dir}: {task!r}, {len(task.validation_set())} held-out prompts, k={k}, temperature {temp:g}")
    names = {"acc": f"avg@{k}", "pass@k": f"pass@{k} (unbiased)", "acc_greedy": "greedy accuracy"}
    table = Table()
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, v in res.items():
        if key not in ("k", "n_problems"):
            table.add_row(names.get(key, key), f"{v:.4f}")
    console.print(table)
    return 0
