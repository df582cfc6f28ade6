"""``entflow compare``: several methods, same task, seed and prompts; one table and overlaid curves."""

from __future__ import annotations

import argparse
from typing import Any

from entflow.cli._common import add_config_arguments, base_config, config_keys_help


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


def compare_run_configs(
    base: dict[str, Any], methods_arg: str | None, name: str, overrides: list[str], cls: type | None = None
) -> tuple[list[Any], str]:
    """The validated configs of a comparison (one per method and seed) and its ``out_dir``:
    ``base["methods"]`` (or ``methods_arg``, comma-separated) on ``base`` with the overrides;
    ``cls``: the config class (default the lab's)."""
    from entflow.errors import ConfigError
    from entflow.lab.compare import compare_configs, parse_seeds
    from entflow.trainer.config import parse_override

    base = dict(base)
    methods = methods_arg.split(",") if methods_arg else base.pop("methods", None)
    base.pop("methods", None)
    if not methods:
        raise ConfigError("methods", "give --methods a,b,c or a `methods:` list in --config")
    out_dir = base.pop("out_dir", "runs")
    seeds_value = base.pop("seeds", None)
    rest = []
    for text in overrides:  # out_dir is the comparison's folder; name is per run
        key, value = parse_override(text)
        if key == "out_dir":
            out_dir = str(value)
        elif key == "seeds":  # seeds=0,1,2: every method once per seed
            seeds_value = text.split("=", 1)[1]
        elif key == "seed":  # one seed for every run: overrides the config's seeds list
            seeds_value = None
            rest.append(text)
        elif key == "name":
            raise ConfigError("name", "each run is named after its method; use --name for the comparison")
        else:
            rest.append(text)
    overrides = rest
    seeds = parse_seeds(seeds_value) if seeds_value is not None else None
    extra = {} if cls is None else {"cls": cls}
    configs = compare_configs(name, methods, base, overrides, out_dir=out_dir, seeds=seeds, **extra)
    return configs, out_dir


def compare_and_report(
    base: dict[str, Any],
    methods_arg: str | None,
    name: str,
    overrides: list[str],
    jobs: int,
    resume: bool,
    overwrite: bool,
    real: Any = None,
) -> int:
    """Train the methods of ``base["methods"]`` (or ``methods_arg``), then print and write the report.
    ``real`` (``entflow.lab.reproduce.RealRuns``): the configs are a real model's, trained ``jobs``
    at a time (``entflow.lab.reproduce.run_real_configs``)."""
    from pathlib import Path

    from entflow.errors import ConfigError
    from entflow.lab import compare, reproduce

    cls = None if real is None else real.config_cls
    configs, out_dir = compare_run_configs(base, methods_arg, name, overrides, cls)
    if jobs < 1:
        raise ConfigError("jobs", f"must be >= 1, got {jobs}")
    if real is not None:
        run_dirs = reproduce.run_real_configs(configs, real.train, resume=resume and not overwrite, jobs=jobs)
    else:
        run_dirs = compare.run_compare(configs, jobs=jobs, resume=resume, overwrite=overwrite)
    from entflow.analysis.report import print_summary, write_report

    report = write_report(run_dirs, Path(out_dir) / name)
    print_summary(run_dirs)
    print(f"report: {report}")
    return 0
