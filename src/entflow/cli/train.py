"""``entflow train``: one lab run with one method (or a composition); with ``--model`` a real
Hugging Face model on real data (:mod:`entflow.hf.setup`), same run directory."""

from __future__ import annotations

import argparse

from entflow.cli._common import add_config_arguments, base_config, config_keys_help, existing_path, read_config


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = config_keys_help() + (
        ". With --model (a real model, docs/real-models.md) also: model, allow_hub=False, dtype=float32, "
        "max_new_tokens=48, system_prompt, prompt_suffix, reward, reward_timeout_s=5.0, val_size=16; "
        "task is the data (--data) and task_params its parameters"
    )
    p.add_argument("--method", help="method name or composition a+b (default: grpo)")
    p.add_argument("--name", help="run name (directory under out_dir; default: the method)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    p.add_argument("--model", help="train a real model: smollm2, a saved model dir, or a hub id (allow_hub=true)")
    p.add_argument("--data", help="with --model: basic_arithmetic | gsm_symbolic | a lab task | a .jsonl/.parquet file")
    add_config_arguments(p)


def run(args: argparse.Namespace) -> int:
    from entflow.errors import PathError
    from entflow.trainer.config import build_config
    from entflow.trainer.loop import train

    if args.resume:
        run_dir = existing_path("--resume", args.resume, kind="dir")
        if not (run_dir / "config.yaml").is_file():
            raise PathError("--resume", run_dir, "is not a run directory (no config.yaml)")
        base = read_config("--resume", run_dir / "config.yaml")
        base["out_dir"], base["name"] = str(run_dir.parent), run_dir.name
    else:
        base = base_config(args)
    if args.method:
        base["method"] = args.method
    if args.name:
        base["name"] = args.name
    cls, setup = config_class_and_setup(base, args)
    cfg = build_config(base, args.overrides, cls=cls)
    run_dir = train(cfg, resume=bool(args.resume), overwrite=args.overwrite, setup=setup)
    print(f"run written to {run_dir}  (entflow analyze {run_dir})")
    return 0


def config_class_and_setup(base: dict, args: argparse.Namespace):
    """The lab's config and setup, or the real-model ones when ``--model`` is given or the run
    being resumed was a real-model run."""
    from entflow.lab.config import LabConfig
    from entflow.lab.setup import lab_setup

    if args.model:
        from entflow.cli._common import model_argument

        base["model"] = model_argument("--model", args.model)
    if args.data:
        if "model" not in base:
            from entflow.errors import ConfigError

            raise ConfigError("data", "--data needs --model (lab runs choose their task with task=...)")
        from entflow.cli._common import data_argument

        base["task"] = data_argument("--data", args.data)
    if "model" not in base:
        return LabConfig, lab_setup
    from entflow.hf.setup import RealTrainConfig, real_setup

    return RealTrainConfig, real_setup
