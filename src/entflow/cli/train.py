"""``entflow train``: one lab run with one method (or a composition); with ``--model`` a real
Hugging Face model on real data (:mod:`entflow.hf.setup`), same run directory."""

from __future__ import annotations

import argparse

from entflow.cli._common import add_config_arguments, base_config, config_keys_help, existing_path, read_config


def real_keys_help() -> str:
    """The keys a real-model run (``--model``) adds, and the defaults it changes, from
    :class:`~entflow.hf.setup.RealTrainConfig`'s fields (imported lazily: no torch for ``--help``)."""
    import dataclasses

    from entflow.lab.config import LabConfig
    from entflow.trainer.config import describe_keys

    try:
        from entflow.hf.setup import RealTrainConfig
    except ImportError:  # an install without the real-model extra
        return "With --model (a real model, docs/real-models.md): pip install 'entflow[real]'."
    lab = {f.name: f for f in dataclasses.fields(LabConfig)}
    real = dataclasses.fields(RealTrainConfig)
    added = [f.name for f in real if f.name not in lab]
    changed = [f.name for f in real if f.name in lab and f.default != lab[f.name].default]
    return "\n".join(
        [
            "With --model (a real model, docs/real-models.md; task is the data, --data) also these keys:",
            *describe_keys(RealTrainConfig, added),
            "and these defaults change:",
            *describe_keys(RealTrainConfig, changed),
        ]
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = config_keys_help() + "\n\n" + real_keys_help()
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
