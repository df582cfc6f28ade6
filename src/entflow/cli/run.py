"""``entflow run``: the demo — warm-start a tiny policy, then watch GRPO's entropy collapse next
to methods that control it, and write a report (config: ``entflow/lab/configs/demo.yaml``)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="a compare config to use instead of the built-in demo")
    p.add_argument("--jobs", type=int, default=2, help="runs trained in parallel [2]")
    p.add_argument("--name", default="demo", help="output name under runs/ [demo; demo-sN for seed=N]")
    p.add_argument("--fresh", action="store_true", help="retrain runs that already exist (default: resume them)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for every run")


def run(args: argparse.Namespace) -> int:
    from importlib.resources import files

    from entflow.cli.compare import compare_and_report
    from entflow.trainer.config import load_yaml, parse_override

    path = args.config or str(files("entflow.lab") / "configs" / "demo.yaml")
    base = load_yaml(path)
    name = args.name
    for text in args.overrides:  # `entflow run seed=1` gets its own folder (demo-s1) unless --name is given
        key, value = parse_override(text)
        if key == "seed" and name == "demo" and value != base.get("seed", 0):
            name = f"demo-s{value}"
    return compare_and_report(base, None, name, args.overrides, args.jobs, not args.fresh, args.fresh)
