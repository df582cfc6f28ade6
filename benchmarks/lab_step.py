"""Time per lab training step, split into rollout, reward, update and audit (default config).

    .venv/bin/python benchmarks/lab_step.py [--steps 12] [--threads 1] [key=value ...]

Trains ``--steps`` steps of GRPO with the default lab config from the cached warm start
(pretraining first if needed; not timed), then reports per-phase medians over the steps from
``timing.jsonl``:

- rollout: ``generate`` of prompts_per_step × group_size responses (KV cache, keeping its
  per-step logits) + decoding + scoring;
- reward: the old statistics (log-probs, entropy, Σπ², Σπ² log π) from ``generate``'s logits
  (no second forward), a reference model's forward if any, and ``compute_advantages``;
- update: ``ppo_epochs × mini_batches`` forward + ``policy_loss`` + backward + optimizer step;
- audit: the extra forward that measures the true entropy change, and the five correlations;
- eval: held-out validation (only on evaluation steps; reported separately).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time

from entflow.lab.config import build_config
from entflow.lab.setup import resolve_policy, train_lab
from entflow.trainer.rundir import read_jsonl

PHASES = ("rollout", "reward", "update", "audit")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as out:
        base = {"out_dir": out, "steps": args.steps, "threads": args.threads, "progress": False, "eval_every": 0}
        cfg = build_config(base, args.overrides)
        cfg.policy_path = str(resolve_policy(cfg))  # warm start outside the timing
        t0 = time.perf_counter()
        run_dir = train_lab(cfg)
        wall = time.perf_counter() - t0
        rows = read_jsonl(run_dir / "timing.jsonl")

    def med(key: str) -> float:
        vals = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(vals) if vals else float("nan")

    per_phase = {p: med(f"time/{p}_s") for p in PHASES}
    total = sum(per_phase.values())
    print(f"# lab step timing — {platform.processor() or platform.machine()}, threads={args.threads}")
    print(
        f"config: method={cfg.method} prompts_per_step={cfg.prompts_per_step} group_size={cfg.group_size} "
        f"mini_batches={cfg.mini_batches} ppo_epochs={cfg.ppo_epochs} task={cfg.task}; {len(rows)} steps"
    )
    print("\n| phase | median s/step | share |\n|---|---:|---:|")
    for p, v in per_phase.items():
        print(f"| {p} | {v:.3f} | {v / total:.0%} |")
    print(f"| **total (train step)** | **{total:.3f}** | 100% |")
    print(f"| eval (final step only) | {med('time/eval_s'):.3f} | — |")
    print(f"\nwhole run incl. step-0 and final validation: {wall:.1f} s")


if __name__ == "__main__":
    main()
