"""Time per lab training step, split into rollout, reward, update and audit (default config).

    .venv/bin/python benchmarks/lab_step.py [--steps 12] [--threads 1] [key=value ...]

Trains ``--steps`` steps of GRPO with the default lab config from the cached warm start
(pretraining first if needed; not timed), then reports per-phase medians over the steps from
``timing.jsonl``:

- rollout: ``generate`` of prompts_per_step × group_size responses (KV cache, keeping its
  per-step logits) + decoding + scoring;
- verify: the verifier's rewards;
- old_stats: the old statistics (log-probs, entropy, Σπ², Σπ² log π) from ``generate``'s logits
  (no second forward), and a reference model's forward if any;
- advantages: ``compute_advantages``;
- update: ``ppo_epochs × mini_batches`` forward + ``policy_loss`` + backward + optimizer step;
- audit: the extra forward that measures the true entropy change, and the five correlations;
- diag: the trainer's diagnostics of the step (where logged);
- eval: held-out validation (only on evaluation steps; reported separately).

``--out r.json`` writes every step's phase seconds (``benchmarks/_result.py``);
``python benchmarks/lab_step.py --from-json r.json`` prints the table from it and runs nothing.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time

import _result  # benchmarks/_result.py

PHASES = ("rollout", "verify", "old_stats", "advantages", "update", "audit", "diag")


def measure(steps: int, threads: int, overrides: list[str]) -> dict:
    """Every step's ``time/<phase>_s`` from ``timing.jsonl``, the config's shape and the run's wall time."""
    from entflow.lab.config import build_config
    from entflow.lab.setup import resolve_policy, train_lab
    from entflow.trainer.rundir import read_jsonl

    with tempfile.TemporaryDirectory() as out:
        base = {"out_dir": out, "steps": steps, "threads": threads, "progress": False, "eval_every": 0}
        cfg = build_config(base, overrides)
        cfg.policy_path = str(resolve_policy(cfg))  # warm start outside the timing
        t0 = time.perf_counter()
        run_dir = train_lab(cfg)
        wall = time.perf_counter() - t0
        rows = read_jsonl(run_dir / "timing.jsonl")
    config = {k: getattr(cfg, k) for k in ("method", "prompts_per_step", "group_size", "mini_batches", "ppo_epochs")}
    return {
        "processor": platform.processor() or platform.machine(),
        "threads": threads,
        "overrides": overrides,
        "config": {**config, "task": cfg.task},
        "steps": [{k: v for k, v in r.items() if k.startswith("time/") and k != "time/elapsed_s"} for r in rows],
        "wall_s": wall,
    }


def report(results: dict) -> str:
    """The settings lines and the table: median seconds per step of each phase and its share."""
    rows = results["steps"]

    def med(key: str) -> float:
        vals = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(vals) if vals else float("nan")

    per_phase = {p: med(f"time/{p}_s") for p in PHASES if any(f"time/{p}_s" in r for r in rows)}
    total = sum(per_phase.values())
    c = results["config"]
    head = (
        f"lab step timing, {results['processor']}, threads={results['threads']}; config: method={c['method']} "
        f"prompts_per_step={c['prompts_per_step']} group_size={c['group_size']} mini_batches={c['mini_batches']} "
        f"ppo_epochs={c['ppo_epochs']} task={c['task']}; {len(rows)} steps"
    )
    table = [[p, f"{v:.3f}", f"{v / total:.0%}"] for p, v in per_phase.items()]
    table += [
        ["**total (train step)**", f"**{total:.3f}**", "100%"],
        ["eval (final step only)", f"{med('time/eval_s'):.3f}", "—"],
    ]
    body = _result.markdown_table(["phase", "median s/step", "share"], table)
    return f"{head}\n\n{body}\n\nwhole run incl. step-0 and final validation: {results['wall_s']:.1f} s"


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("overrides", nargs="*")


def main() -> None:
    _result.main(__doc__, options, lambda a: measure(a.steps, a.threads, a.overrides), report)


if __name__ == "__main__":
    main()
