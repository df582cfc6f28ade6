"""``entflow train``: one lab run with one method (or a composition); with ``--model`` a real
Hugging Face model on real data, same run directory. The registry of settings
(:func:`entflow.settings.registry.kind_of`) chooses which from the run's keys."""

from __future__ import annotations

import argparse

from entflow.cli._common import add_config_arguments, base_config, existing_path, read_config


def add_arguments(p: argparse.ArgumentParser) -> None:
    from entflow.settings.registry import config_keys_help

    p.epilog = config_keys_help()
    p.add_argument("--method", help="method name or composition a+b (default: grpo)")
    p.add_argument("--name", help="run name (directory under out_dir; default: the method)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    p.add_argument("--model", help="train a real model: smollm2, a saved model dir, or a hub id (allow_hub=true)")
    p.add_argument("--data", help="with --model: basic_arithmetic | gsm_symbolic | a lab task | a .jsonl/.parquet file")
    add_config_arguments(p)


def run(args: argparse.Namespace) -> int:
    from entflow.errors import PathError
    from entflow.settings.compare import one_run_of
    from entflow.trainer.config import build_config, parse_override

    if args.resume:
        run_dir = existing_path("--resume", args.resume, kind="dir")
        if not (run_dir / "config.yaml").is_file():
            raise PathError("--resume", run_dir, "is not a run directory (no config.yaml)")
        base = read_config("--resume", run_dir / "config.yaml")
        base["out_dir"], base["name"] = str(run_dir.parent), run_dir.name
    else:  # a comparison's preset (`methods:`) trains the one method it or the command names
        chosen = bool(args.method) or any(parse_override(o)[0] == "method" for o in args.overrides)
        base = one_run_of(base_config(args), method_chosen=chosen)
    if args.method:
        base["method"] = args.method
    if args.name:
        base["name"] = args.name
    kind = setting_of(base, args)
    cfg = build_config(base, args.overrides, cls=kind.config_class())
    run_dir = kind.train_run(cfg, resume=bool(args.resume), overwrite=args.overwrite)
    print(f"run written to {run_dir}  (entflow analyze {run_dir})")
    return 0


def setting_of(base: dict, args: argparse.Namespace):
    """The setting of the run (:func:`entflow.settings.registry.kind_of`): a real model's when
    ``--model`` is given or the run being resumed was a real-model run, else the lab's. ``--model``
    and ``--data`` are written into ``base``."""
    from entflow.settings.registry import kind_of

    if args.model:
        from entflow.cli._common import model_argument

        base["model"] = model_argument("--model", args.model)
    if args.data:
        if "model" not in base:
            from entflow.errors import ConfigError

            raise ConfigError("data", "--data needs --model (lab runs choose their task with task=...)")
        from entflow.cli._common import data_argument

        base["task"] = data_argument("--data", args.data)
    return kind_of(base)
