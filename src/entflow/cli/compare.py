"""``entflow compare``: several methods, same task, seed and prompts; one table and overlaid curves."""

from __future__ import annotations

import argparse
from pathlib import Path

from entflow.cli._common import add_config_arguments, base_config, cli_console


def add_arguments(p: argparse.ArgumentParser) -> None:
    from entflow.settings.registry import config_keys_help

    p.epilog = config_keys_help(added=False)
    p.add_argument("--methods", help="comma-separated method names (or a `methods:` list in --config)")
    p.add_argument("--name", default="compare", help="comparison name: runs go to out_dir/NAME/<method> [compare]")
    p.add_argument("--jobs", type=int, default=2, help="runs trained in parallel [2]")
    p.epilog += "; seeds=0,1,2 runs every method once per seed and reports mean ± 95 % t-interval"
    p.add_argument("--resume", action="store_true", help="resume every run from its last checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace existing run directories")
    add_config_arguments(p)


def run(args: argparse.Namespace) -> int:
    from entflow.settings.compare import compare_and_report

    trained = compare_and_report(
        base_config(args), args.methods, args.name, args.overrides, args.jobs, args.resume, args.overwrite
    )
    return print_report(*trained)


def print_report(run_dirs: list[Path], report: Path) -> int:
    """The summary of a comparison's runs (:func:`entflow.settings.compare.compare_and_report`'s
    result) and its report's path."""
    from entflow.analysis.report import print_summary

    print_summary(run_dirs, cli_console())
    print(f"report: {report}")
    return 0
