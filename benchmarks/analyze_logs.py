"""Time of ``entflow analyze PATH --json`` on 10,000 logged steps, per log format (issue 22: ≤ 5 s).

    .venv/bin/python benchmarks/analyze_logs.py [--steps 10000] [--rounds 3] [--logs DIR] [--baseline-src DIR]

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
alternates by round), and prints the medians side by side with their ratios.
"""

from __future__ import annotations

import argparse
import contextlib
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
sys.path.insert(0, str(ROOT / "tests"))

from support.log_writers import (  # noqa: E402
    write_entflow_run,
    write_mlflow_csv,
    write_tensorboard,
    write_trainer_state,
    write_verl,
    write_wandb_csv,
)


def build_logs(root: Path, n: int) -> dict[str, Path]:
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
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--logs", type=Path, default=None, help="keep the logs in this folder (reused if present)")
    ap.add_argument("--baseline-src", type=Path, default=None, help="also time the commands on this src folder")
    a = ap.parse_args()
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
    print(
        f"\n{time.strftime('%Y-%m-%d')}  {platform.node()}  {platform.processor() or platform.machine()}  "
        f"{os.cpu_count()} CPUs  python {platform.python_version()}"
    )
    print(f"entflow analyze PATH --json, {a.steps} steps, {a.rounds} interleaved rounds (fresh process each)")
    print(f"load average (1, 5, 15 min) before {_load(load_before)}, after {_load(load_after)}\n")
    print(
        "| format | size | wall median (s) | min–max (s) | CPU median (s) | torch imported | read (s) "
        "| analysis (s) | plots (s) |"
    )
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|")
    for name in names:
        size, w = sizes[name], wall[name, "this"]
        print(
            f"| {name} | {size / 2**20:.1f} MiB | {statistics.median(w):.2f} | {min(w):.2f}–{max(w):.2f} | "
            f"{statistics.median(cpu[name, 'this']):.2f} | {'/'.join(sorted(torch_imported[name, 'this']))} | "
            f"{parts[name][0]:.2f} | {parts[name][1]:.3f} | {parts[name][2]:.2f} |"
        )
    w = wall[floor, "this"]
    c = statistics.median(cpu[floor, "this"])
    t = "/".join(sorted(torch_imported[floor, "this"]))
    print(f"| {floor} | | {statistics.median(w):.2f} | {min(w):.2f}–{max(w):.2f} | {c:.2f} | {t} | | | |")
    if "baseline" in sources:
        print(f"\nside by side with the baseline source {a.baseline_src} (medians; ratio = baseline / this)\n")
        print(
            "| format | wall this (s) | wall baseline (s) | wall ratio | CPU this (s) | CPU baseline (s) | CPU ratio "
            "| baseline imported torch |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        for name in [*names, floor]:
            wt, wb = statistics.median(wall[name, "this"]), statistics.median(wall[name, "baseline"])
            ct, cb = statistics.median(cpu[name, "this"]), statistics.median(cpu[name, "baseline"])
            tb = "/".join(sorted(torch_imported[name, "baseline"]))
            print(f"| {name} | {wt:.2f} | {wb:.2f} | {wb / wt:.1f}× | {ct:.2f} | {cb:.2f} | {cb / ct:.1f}× | {tb} |")


def _load(avg: tuple[float, float, float]) -> str:
    return ", ".join(f"{x:.1f}" for x in avg)


if __name__ == "__main__":
    main()
