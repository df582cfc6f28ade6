"""``entflow doctor``: self-checks on this machine's devices (docs/gpu.md).

Prints a table (or ``--json``); exits 1 if any check failed, 0 otherwise (skipped checks say why).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="smaller shapes, fewer repetitions (< 1 min on 2 CPU cores)")
    p.add_argument("--device", default=None, help="check only this device (cpu, cuda, cuda:1, mps) [every visible one]")
    p.add_argument(
        "--only",
        default=None,
        help="comma-separated check families "
        "(token_stats,hidden_stats,gradients,distributed,real_model,trl,verl,speed)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON (attach this to a bug report)")


def environment() -> dict[str, str]:
    """Versions and devices, for the JSON report."""
    import importlib.metadata
    import platform

    import torch

    env = {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__}
    for pkg in ("entflow", "transformers", "trl", "verl", "triton"):
        try:
            env[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            env[pkg] = "not installed"
    if torch.cuda.is_available():
        env["cuda"] = str(torch.version.cuda)
        env["gpus"] = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return env


def run(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from entflow.cli._common import cli_console
    from entflow.doctor import run_checks

    only = None if args.only is None else [s.strip() for s in args.only.split(",") if s.strip()]
    t0 = time.perf_counter()
    # progress on one transient status line (a terminal only): each check is printed once, in the table
    with cli_console(stderr=True).status("entflow doctor: running checks") as status:

        def progress(r) -> None:
            status.update(f"entflow doctor: {escape(r.name)} {r.status} ({r.seconds:.1f}s), next check")

        results = run_checks(device=args.device, quick=args.quick, only=only, on_result=progress)
    failed = [r for r in results if not r.ok]
    total = time.perf_counter() - t0
    if args.json:
        report = {
            "ok": not failed,
            "quick": args.quick,
            "seconds": total,
            "environment": environment(),
            "checks": [r.to_dict() for r in results],
        }
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        table = Table(title=f"entflow doctor{' --quick' if args.quick else ''}")
        for col in ("check", "status", "detail", "s"):
            table.add_column(col, justify="right" if col == "s" else "left", overflow="fold", no_wrap=col != "detail")
        style = {"PASS": "green", "FAIL": "bold red", "SKIP": "yellow"}
        for r in results:
            table.add_row(escape(r.name), f"[{style[r.status]}]{r.status}[/]", escape(r.detail), f"{r.seconds:.1f}")
        console = cli_console()
        console.print(table)
        n_skip = sum(r.status == "SKIP" for r in results)
        n_pass = len(results) - len(failed) - n_skip
        verdict = f"[bold red]{len(failed)} FAILED[/]" if failed else "[green]all passed[/]"
        console.print(f"{verdict}: {n_pass} passed, {len(failed)} failed, {n_skip} skipped in {total:.0f}s")
        if failed:
            console.print("Report it with the output of `entflow doctor --json` attached (docs/gpu.md).")
    return 1 if failed else 0
