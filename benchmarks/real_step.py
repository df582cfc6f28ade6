"""Time per training step of real-model runs, split by phase, from their ``timing.jsonl``.

    .venv/bin/python benchmarks/real_step.py RUN_DIR [RUN_DIR ...]

Produce the runs with ``entflow train --model smollm2 ...`` (docs/real-models.md gives the exact
commands). Phases (seconds, median over the run's steps; evaluation steps excluded from the total):

- rollout: ``generate`` (P × G responses, KV cache) + decoding, *including* verify;
- verify: the reward function alone (math-verify / exact match);
- reward: the rollout-time no-grad forward (old log-probs, entropy) + ``compute_advantages``;
- update: forward with grad + ``policy_loss`` + backward + optimizer step, all mini-batches;
- audit: the extra forward measuring the true entropy change.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from entflow.trainer.rundir import read_jsonl

PHASES = ("rollout", "verify", "reward", "update", "audit")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args()
    print("| run | steps | " + " | ".join(PHASES) + " | total | update share |")
    print("|---|---:|" + "---:|" * (len(PHASES) + 2))
    for run in args.runs:
        rows = [r for r in read_jsonl(Path(run) / "timing.jsonl") if "time/eval_s" not in r]
        med = {p: statistics.median(r.get(f"time/{p}_s", 0.0) for r in rows) for p in PHASES}
        total = statistics.median(sum(r.get(f"time/{p}_s", 0.0) for p in PHASES if p != "verify") for r in rows)
        cells = " | ".join(f"{med[p]:.2f}" for p in PHASES)
        print(f"| {Path(run).name} | {len(rows)} | {cells} | {total:.1f} | {med['update'] / total:.0%} |")


if __name__ == "__main__":
    main()
