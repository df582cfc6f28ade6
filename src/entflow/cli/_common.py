"""Argument helpers shared by the lab commands."""

from __future__ import annotations

import argparse
from typing import Any


def add_config_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML file of config keys (see `entflow train --help` for keys)")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config overrides, e.g. lr=3e-4 steps=40 method.lambda_min=0.5",
    )


def base_config(args: argparse.Namespace) -> dict[str, Any]:
    from entflow.trainer.config import load_yaml

    return load_yaml(args.config) if args.config else {}


def config_keys_help() -> str:
    import dataclasses

    from entflow.trainer.config import TrainConfig

    keys = [
        f"{f.name}={f.default if f.default is not dataclasses.MISSING else '{}'}"
        for f in dataclasses.fields(TrainConfig)
    ]
    return "config keys (defaults): " + ", ".join(keys)
