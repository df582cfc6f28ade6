"""``entflow compare``: several methods, same task, seed and prompts; one table and overlaid curves."""

from __future__ import annotations

import argparse
from typing import Any

from entflow.cli._common import add_config_arguments, base_config, cli_console, config_keys_help


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = config_keys_help()
    p.add_argument("--methods", help="comma-separated method names (or a `methods:` list in --config)")
    p.add_argument("--name", default="compare", help="comparison name: runs go to out_dir/NAME/<method> [compare]")
    p.add_argument("--jobs", type=int, default=2, help="runs trained in parallel [2]")
    p.epilog += "; seeds=0,1,2 runs every method once per seed and reports mean ± 95 % t-interval"
    p.add_argument("--resume", action="store_true", help="resume every run from its last checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace existing run directories")
    add_config_arguments(p)


def run(args: argparse.Namespace) -> int:
    return compare_and_report(
        base_config(args), args.methods, args.name, args.overrides, args.jobs, args.resume, args.overwrite
    )


def compare_and_report(
    base: dict[str, Any],
    methods_arg: str | None,
    name: str,
    overrides: list[str],
    jobs: int,
    resume: bool,
    overwrite: bool,
    kind: str = "lab",
) -> int:
    """Train and report a comparison (``entflow.evidence.compare.compare_and_report``), then print
    the summary and the report's path. ``kind``: the setting kind that trains the runs."""
    from entflow.analysis.report import print_summary
    from entflow.evidence.compare import compare_and_report as train_and_report

    run_dirs, report = train_and_report(base, methods_arg, name, overrides, jobs, resume, overwrite, kind=kind)
    print_summary(run_dirs, cli_console())
    print(f"report: {report}")
    return 0
