"""``entflow train``: one lab run with one method (or a composition)."""

from __future__ import annotations

import argparse

from entflow.cli._common import add_config_arguments, base_config, config_keys_help


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = config_keys_help()
    p.add_argument("--method", help="method name or composition a+b (default: grpo)")
    p.add_argument("--name", help="run name (directory under out_dir; default: the method)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    add_config_arguments(p)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from entflow.lab.config import build_config, load_yaml
    from entflow.lab.trainer import train

    if args.resume:
        run_dir = Path(args.resume)
        base = load_yaml(run_dir / "config.yaml")
        base["out_dir"], base["name"] = str(run_dir.parent), run_dir.name
    else:
        base = base_config(args)
    if args.method:
        base["method"] = args.method
    if args.name:
        base["name"] = args.name
    cfg = build_config(base, args.overrides)
    run_dir = train(cfg, resume=bool(args.resume), overwrite=args.overwrite)
    print(f"run written to {run_dir}  (entflow analyze {run_dir})")
    return 0
