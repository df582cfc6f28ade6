"""``entflow eval``: avg@k, pass@k and greedy accuracy of a run's final policy on the held-out set.

With ``--model NAME_OR_PATH --data TASK_OR_FILE`` it evaluates a real Hugging Face model instead
(avg@k, pass@k, maj@k, greedy, each with its standard error): see :mod:`entflow.evaluation`."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", help="a run directory or a saved policy directory (lab); omit with --model")
    p.add_argument("--task", help="task (default: the run's)")
    p.add_argument("--k", type=int, default=8, help="samples per prompt [8]")
    p.add_argument("--seed", type=int, default=0)
    from entflow.evaluation import add_arguments as add_real_model_arguments

    add_real_model_arguments(p)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "model", None) is not None:
        from entflow.evaluation import run_cli

        return run_cli(args)
    from pathlib import Path

    import torch
    from rich.console import Console
    from rich.table import Table

    from entflow.errors import ConfigError
    from entflow.lab.config import load_yaml
    from entflow.lab.policy import load_policy
    from entflow.lab.pretrain import evaluate
    from entflow.lab.tasks import get_task

    if args.path is None:
        raise ConfigError("path", "give a run directory, or --model NAME_OR_PATH --data TASK_OR_FILE")
    path = Path(args.path)
    task_name = args.task
    if (path / "config.yaml").exists():
        task_name = task_name or load_yaml(path / "config.yaml").get("task")
        path = path / "checkpoints" / "final"
    if not path.exists():
        raise ConfigError("path", f"{path} does not exist")
    if args.k < 1:
        raise ConfigError("k", f"must be >= 1, got {args.k}")
    task = get_task(task_name or "countdown")
    model, tok = load_policy(path)
    torch.manual_seed(args.seed)
    res = evaluate(model, tok, task, task.validation_set(), k=args.k)
    console = Console()
    console.print(f"{path}: {task.name}, {len(task.validation_set())} held-out prompts, k={args.k}, temperature 1")
    names = {"acc": f"avg@{args.k}", "pass@k": f"pass@{args.k} (unbiased)", "acc_greedy": "greedy accuracy"}
    table = Table()
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in res.items():
        if k not in ("k", "n_problems"):
            table.add_row(names.get(k, k), f"{v:.4f}")
    console.print(table)
    return 0
