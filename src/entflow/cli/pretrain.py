"""``entflow pretrain``: warm-start the tiny policy on the task's solution traces (cached)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    from entflow.settings.registry import get_setting_kind
    from entflow.trainer.config import describe_keys

    p.formatter_class = argparse.RawDescriptionHelpFormatter  # the epilog's list of keys keeps its lines
    keys = describe_keys(get_setting_kind("lab").warm_start_class())
    p.epilog = "\n".join(["warm-start keys (a lab run's config sets them as pretrain: {KEY: VALUE}):", *keys])
    p.add_argument("--task", default="countdown", help="task name [countdown]")
    p.add_argument("--steps", type=int, help="supervised steps (default: the config's)")
    p.add_argument("--seed", type=int, default=0, help="seed [0]")


def run(args: argparse.Namespace) -> int:
    import json

    from entflow.settings.registry import get_setting_kind

    kw = {"task": args.task, "seed": args.seed} | ({"steps": args.steps} if args.steps else {})
    path = get_setting_kind("lab").warm_start(progress=True, **kw)
    info = path / "warmstart.json"
    print(f"policy: {path}")
    if info.exists():
        print(json.dumps(json.loads(info.read_text()).get("eval", {}), indent=1))
    return 0
