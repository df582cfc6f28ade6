"""Time of ``entflow analyze PATH --json`` on 10,000 logged steps, per log format (target: ≤ 5 s).

    .venv/bin/python benchmarks/analyze_logs.py [--steps 10000] [--rounds 3] [--logs DIR] [--baseline-src DIR] \
        [--out FILE]
    .venv/bin/python benchmarks/analyze_logs.py --table FILE    # print a saved result's tables (docs/analyze.md)

Writes one log per format with the real writers of tests/support/log_writers.py (TensorBoard through
``SummaryWriter`` with TRL's tag names, verl's ``Tracking`` file logger and TensorBoard, TRL's
``trainer_state.json`` through ``TrainerState.save_to_json``, entflow's ``metrics.jsonl``, a W&B
panel CSV and an MLflow metric-history CSV), each with extra keys per step as the real trainers log
(TRL ~25, verl ~60). Then, in interleaved rounds (the format order rotated each round), runs the
whole command in a fresh process — Python start-up and imports included, as a user sees it — and
reports per format the median wall time and the min–max, plus in-process medians of three parts
(reading the log; ``analyze_series``; the two PNG plots). CPU = user + system time of the command
and its children (the TensorBoard data server included), which depends far less on the other jobs
of a shared machine than wall time. ``python -c "import entflow"`` runs in
the same rounds: the start-up floor every entflow command pays. Each command's child also reports
whether it imported torch (``torch`` column; ``python -X importtime`` shows the rest), and the
load average before and after the rounds is printed. ``--logs DIR`` keeps the logs in DIR (reused
when already written there) for ``python -X importtime -m entflow.cli.main analyze DIR/...``.
``--baseline-src DIR`` (another checkout's ``src``, e.g. ``git archive COMMIT src | tar -x -C /tmp/base``)
runs every command a second time on that source, interleaved with this one (which goes first
alternates by round), and prints the medians side by side with their ratios. ``--out FILE`` saves
every measurement (each call's wall and CPU time, with the date, machine and command) as JSON;
``--table FILE`` prints the tables of such a file again, which is how docs/analyze.md shows them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_logs(root: Path, n: int) -> dict[str, Path]:
    sys.path.insert(0, str(ROOT / "tests"))
    from support.log_writers import (
        write_entflow_run,
        write_mlflow_csv,
        write_tensorboard,
        write_trainer_state,
        write_verl,
        write_wandb_csv,
    )

    logs = {
        "trl-state": write_trainer_state(
            root / "trl" / "checkpoint-1" / "trainer_state.json", n, extra=20
        ).parent.parent,
        "tensorboard (TRL tags)": write_tensorboard(root / "trl_tb", n, val_tag="eval/reward", extra=20),
        "entflow-run": write_entflow_run(root / "entflow", n),
        "csv (W&B)": write_wandb_csv(root / "wandb.csv", n, extra=5),
        "csv (MLflow)": write_mlflow_csv(root / "mlflow.csv", n),
    }
    verl = write_verl(root / "verl", n, backends=("file", "tensorboard"), extra=55)
    logs["verl-jsonl"] = verl["file"]
    logs["tensorboard (verl)"] = verl["tensorboard"]
    return logs


# run in the child after the command: report whether it imported torch (on stderr, last line)
_TORCH_PROBE = "import atexit, sys; atexit.register(lambda: print('torch', 'torch' in sys.modules, file=sys.stderr))"
_COMMAND = "from entflow.cli.main import main; sys.argv[0] = 'entflow'; sys.exit(main())"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", type=Path, default=None, help="print the tables of a saved result and exit")
    ap.add_argument("--out", type=Path, default=None, help="save every measurement as JSON")
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--logs", type=Path, default=None, help="keep the logs in this folder (reused if present)")
    ap.add_argument("--baseline-src", type=Path, default=None, help="also time the commands on this src folder")
    a = ap.parse_args()
    if a.table is not None:
        if not a.table.is_file():
            ap.error(f"--table: no such file: {a.table}")
        print(render(json.loads(a.table.read_text())), end="")
        return
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    sources = {"this": env}
    if a.baseline_src is not None:
        sources["baseline"] = dict(env, PYTHONPATH=str(a.baseline_src.resolve()))
    with contextlib.ExitStack() as stack:
        if a.logs is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        else:
            root = a.logs / str(a.steps)
        t0 = time.perf_counter()
        marker = root / "logs-written"
        if marker.is_file():
            logs = {k: root / v for k, v in (line.split("\t") for line in marker.read_text().splitlines())}
        else:
            logs = build_logs(root, a.steps)
            marker.write_text("".join(f"{k}\t{v.relative_to(root)}\n" for k, v in logs.items()))
        print(f"{len(logs)} logs of {a.steps} steps ready in {time.perf_counter() - t0:.1f} s ({root})")
        load_before = os.getloadavg()
        names = list(logs)
        floor = "(floor: python -c 'import entflow')"
        keys = [(name, src) for name in [*names, floor] for src in sources]
        wall: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
        cpu: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
        torch_imported: dict[tuple[str, str], set[str]] = {k: set() for k in keys}
        for r in range(a.rounds):
            order = [*names, floor]
            order = order[r % len(order) :] + order[: r % len(order)]
            srcs = list(sources) if r % 2 == 0 else list(reversed(sources))
            for name, src in ((name, src) for name in order for src in srcs):
                if name == floor:
                    cmd = [sys.executable, "-c", f"{_TORCH_PROBE}; import entflow"]
                else:
                    out = root / "out" / src / name.replace(" ", "_")
                    args = ["analyze", str(logs[name]), "--json", "--out", str(out)]
                    cmd = [sys.executable, "-c", f"{_TORCH_PROBE}; {_COMMAND}", *args]
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                p = subprocess.run(cmd, env=sources[src], capture_output=True, text=True)
                wall[name, src].append(time.perf_counter() - t)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name, src].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
                if p.returncode != 0:
                    raise SystemExit(f"{name} ({src}): exit {p.returncode}\n{p.stderr}")
                torch_imported[name, src].add(p.stderr.strip().splitlines()[-1].split()[-1])
        load_after = os.getloadavg()
        sys.path.insert(0, str(ROOT / "src"))
        from entflow.analysis.collapse import analyze_log
        from entflow.analysis.log_readers import read_log
        from entflow.analysis.plots import write_collapse_plots

        parts: dict[str, tuple[float, float, float]] = {}
        for name in names:
            reads, fits, plots = [], [], []
            for _ in range(a.rounds):
                t = time.perf_counter()
                log = read_log(logs[name])
                reads.append(time.perf_counter() - t)
                t = time.perf_counter()
                _, an = analyze_log(log)
                fits.append(time.perf_counter() - t)
                t = time.perf_counter()
                write_collapse_plots(log, an, root / "plots")
                plots.append(time.perf_counter() - t)
            parts[name] = (statistics.median(reads), statistics.median(fits), statistics.median(plots))
        sizes = {
            k: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size
            for k, p in logs.items()
        }
    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.node()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        "command": "python benchmarks/analyze_logs.py " + " ".join(sys.argv[1:]),
        "steps": a.steps,
        "rounds": a.rounds,
        "load_average_before": list(load_before),
        "load_average_after": list(load_after),
        "baseline_src": str(a.baseline_src) if a.baseline_src is not None else None,
        "formats": {
            name: {
                "size_bytes": sizes.get(name),
                "read_s": parts[name][0] if name in parts else None,
                "analysis_s": parts[name][1] if name in parts else None,
                "plots_s": parts[name][2] if name in parts else None,
                **{
                    src: {
                        "wall_s": wall[name, src],
                        "cpu_s": cpu[name, src],
                        "torch": sorted(torch_imported[name, src]),
                    }
                    for src in sources
                },
            }
            for name in [*names, floor]
        },
    }
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(render(result), end="")


def render(result: dict) -> str:
    """The tables of one saved run: per format the size, wall median and range, CPU median, whether torch
    was imported and the in-process medians of its parts; then, with a baseline, both sides' medians."""
    med = statistics.median
    fmt = result["formats"]
    names = list(fmt)
    lines = [
        f"Measured {result['date']} on {result['machine']}, load average (1, 5, 15 min) "
        f"{_load(result['load_average_before'])} before and {_load(result['load_average_after'])} after. "
        f"Command: `{result['command']}`. `entflow analyze PATH --json` on {result['steps']} logged steps, "
        f"{result['rounds']} interleaved rounds, a fresh process each.",
        "",
        "| format | size | wall median (s) | min–max (s) | CPU median (s) | torch imported | read (s) "
        "| analysis (s) | plots (s) |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for name in names:
        f, this = fmt[name], fmt[name]["this"]
        w = this["wall_s"]
        size = f"{f['size_bytes'] / 2**20:.1f} MiB" if f.get("size_bytes") is not None else ""
        parts = (
            f"{f['read_s']:.2f} | {f['analysis_s']:.3f} | {f['plots_s']:.2f}"
            if f.get("read_s") is not None
            else " | | "
        )
        lines.append(
            f"| {name} | {size} | {med(w):.2f} | {min(w):.2f}–{max(w):.2f} | {med(this['cpu_s']):.2f} | "
            f"{_yes_no(this['torch'])} | {parts} |"
        )
    if result.get("baseline_src"):
        lines += [
            "",
            f"Side by side with the baseline source {result['baseline_src']} (medians of the same rounds; "
            "ratio = baseline / this):",
            "",
            "| format | wall this (s) | wall baseline (s) | ratio | CPU this (s) | CPU baseline (s) | ratio "
            "| baseline imported torch |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for name in names:
            this, base = fmt[name]["this"], fmt[name]["baseline"]
            wt, wb = med(this["wall_s"]), med(base["wall_s"])
            ct, cb = med(this["cpu_s"]), med(base["cpu_s"])
            lines.append(
                f"| {name} | {wt:.2f} | {wb:.2f} | {wb / wt:.1f}× | {ct:.2f} | {cb:.2f} | {cb / ct:.1f}× | "
                f"{_yes_no(base['torch'])} |"
            )
    return "\n".join(lines) + "\n"


def _yes_no(flags: list[str]) -> str:
    """The child's ``torch True/False`` report(s) as ``yes`` / ``no`` (``yes/no`` if the rounds differed)."""
    return "/".join({"True": "yes", "False": "no"}.get(f, f) for f in flags)


def _load(avg: tuple[float, float, float]) -> str:
    return ", ".join(f"{x:.1f}" for x in avg)


if __name__ == "__main__":
    main()
