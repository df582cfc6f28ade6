"""Before/after CPU time per lab training step, interleaved in one run.

    .venv/bin/python benchmarks/lab_step_ab.py BEFORE_SRC AFTER_SRC [--reps 4] [--steps 4] [key=value ...]

Each repetition trains ``--steps`` GRPO steps (default lab config, 1 torch thread, one shared warm
start) once with each ``src`` directory first on ``PYTHONPATH`` (separate subprocesses), order
swapped every repetition. ``time.perf_counter`` is replaced by ``time.process_time`` in the child,
so the per-phase timings in ``timing.jsonl`` are CPU seconds (robust to a shared, loaded machine).
Prints the median over repetitions of each variant's per-step phase medians, and after / before;
``eval`` (the validation at the last step: ``eval_k`` samples per held-out problem plus a greedy
pass) is reported on its own row, outside the step total.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PHASES = ("rollout", "reward", "update", "audit")

CHILD = r"""
import json, statistics, sys, tempfile, time
time.perf_counter = time.process_time  # CPU seconds: the machine is shared
import entflow
from entflow.lab.config import build_config
from entflow.trainer.rundir import read_jsonl
from entflow.lab.setup import train_lab
steps, policy, overrides = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
with tempfile.TemporaryDirectory() as out:
    base = {"out_dir": out, "steps": steps, "threads": 1, "progress": False, "eval_every": 0}
    cfg = build_config(base, overrides)
    cfg.policy_path = policy
    rows = read_jsonl(train_lab(cfg) / "timing.jsonl")
med = {p: statistics.median(r[f"time/{p}_s"] for r in rows) for p in ("rollout", "reward", "update", "audit")}
med["eval"] = statistics.median(r["time/eval_s"] for r in rows if "time/eval_s" in r)  # the last step validates
print(json.dumps({"entflow": entflow.__file__, **med}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before_src")
    ap.add_argument("after_src")
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    from entflow.lab.config import build_config
    from entflow.lab.setup import resolve_policy

    policy = str(resolve_policy(build_config({}, args.overrides)))  # warm start outside the timing
    results: dict[str, list[dict]] = {"before": [], "after": []}
    for rep in range(args.reps):
        order = ["before", "after"] if rep % 2 == 0 else ["after", "before"]
        for name in order:
            src = args.before_src if name == "before" else args.after_src
            env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1"}
            cmd = [sys.executable, "-c", CHILD, str(args.steps), policy, *args.overrides]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            res = json.loads(proc.stdout.splitlines()[-1])
            res["total"] = sum(res[p] for p in PHASES)
            results[name].append(res)
            print(f"rep {rep} {name}: {json.dumps(res)}", flush=True)

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    ratios = [a["total"] / b["total"] for a, b in zip(results["after"], results["before"], strict=True)]
    print(f"\n| phase | before, s CPU/step (median of {args.reps}) | after | after / before |\n|---|---:|---:|---:|")
    for key in (*PHASES, "total", "eval"):
        b, a = med("before", key), med("after", key)
        print(f"| {key} | {b:.3f} | {a:.3f} | {a / b:.2f} |")
    print(f"\nper-repetition after/before (total): {', '.join(f'{r:.2f}' for r in ratios)}")


if __name__ == "__main__":
    main()
