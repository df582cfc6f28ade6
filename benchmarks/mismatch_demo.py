"""A demonstration, not a claim: GRPO with and without IcePop when the lab's sampler disagrees with its
trainer (an injected rollout–training mismatch, ``TrainConfig.rollout_mismatch``).

Every run starts from the lab's cached warm start on the default task; the sampler draws each rollout
from a perturbed law (default: ``temperature`` × 1.3, the engine sampling hotter than the trainer
scores) and reports that law's log-probs as ``rollout_logp``, while ``old_logp`` is the trainer's.
``grpo`` trains on the samples as they come; ``grpo+icepop`` (verl's IcePop, band [0.5, 5] on
ρ = π_old/π_rollout) zeroes the tokens outside the band. Per step the trainer logs
``mismatch/k3_kl`` (verl's k3 KL of π_old against π_rollout over the valid tokens),
``mismatch/k3_kl_kept`` (the same over the tokens the update kept), ``mismatch/removed_frac`` and
``mismatch/removed_frac_q1..q4`` (the share of the valid tokens the update removed, overall and per
quartile of the rollout's token entropy, q1 the lowest) and ``mismatch/kl_ent_ratio`` (prime-rl's
k3 KL over the mean entropy).

The table gives, per run, the means of those over the training steps, the last step's rollout
entropy and the mean reward of the last five steps. It shows what IcePop does to the tokens an
update learns from in this setting, on this many seeds and steps; it makes no claim about training
outcomes.

    python benchmarks/mismatch_demo.py --out docs/results/mismatch/icepop-demo.json   # train, save, print
    python benchmarks/mismatch_demo.py --from-json docs/results/mismatch/icepop-demo.json  # the table again
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _result  # benchmarks/_result.py

METHODS = ("grpo", "grpo+icepop")
SERIES = (
    "mismatch/k3_kl",
    "mismatch/k3_kl_kept",
    "mismatch/removed_frac",
    *(f"mismatch/removed_frac_q{i}" for i in range(1, 5)),
    "mismatch/kl_ent_ratio",
    "entropy",
    "reward/mean",
)


def run_one(method: str, seed: int, args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    """Train one run; its per-step series of :data:`SERIES` and its wall time."""
    from entflow.lab.config import build_config
    from entflow.lab.setup import train_lab
    from entflow.trainer.rundir import read_jsonl

    kind, value = args.mismatch.split(":")
    cfg = build_config(
        {
            "out_dir": str(out_dir),
            "name": f"{method.replace('+', '_')}-s{seed}",
            "method": method,
            "seed": seed,
            "steps": args.steps,
            "prompts_per_step": args.prompts,
            "group_size": args.group,
            "mini_batches": 2,
            "eval_every": 0,
            "eval_k": 1,
            "audit": False,
            "progress": False,
            "rollout_mismatch": {"kind": kind, "value": float(value)},
        }
    )
    t0 = time.perf_counter()
    train_lab(cfg)
    rows = [r for r in read_jsonl(cfg.run_dir / "metrics.jsonl") if r["step"] > 0]
    return {
        "method": method,
        "seed": seed,
        "wall_s": time.perf_counter() - t0,
        "series": {k: [r[k] for r in rows] for k in SERIES},
    }


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs)


def report(results: dict[str, Any]) -> str:
    """One row per run: step means of the mismatch metrics, the last entropy, the last five rewards'
    mean; then the per-seed comparison of the k3 KL over the kept tokens."""
    s = results["settings"]
    head = (
        f"Lab, default task, warm start; sampler law softmax(z / ({s['mismatch'].split(':')[1]}·T)) against the "
        f"trainer's softmax(z / T); {s['steps']} steps of {s['prompts']} prompts × {s['group']} responses, "
        "2 mini-batches; means over the training steps."
    )
    header = [
        "run", "k3 KL, all tokens", "k3 KL, kept tokens", "removed", "removed q1", "q2", "q3", "q4 (highest H)",
        "k3 KL / H", "H, last step", "reward, last 5",
    ]  # fmt: skip
    rows = []
    for r in results["runs"]:
        se = r["series"]
        rows.append(
            [
                f"{r['method']} s{r['seed']}",
                f"{_mean(se['mismatch/k3_kl']):.4f}",
                f"{_mean(se['mismatch/k3_kl_kept']):.4f}",
                f"{100 * _mean(se['mismatch/removed_frac']):.1f} %",
                *(f"{100 * _mean(se[f'mismatch/removed_frac_q{i}']):.1f} %" for i in range(1, 5)),
                f"{_mean(se['mismatch/kl_ent_ratio']):.4f}",
                f"{se['entropy'][-1]:.3f}",
                f"{_mean(se['reward/mean'][-5:]):.3f}",
            ]
        )
    by = {(r["method"], r["seed"]): _mean(r["series"]["mismatch/k3_kl_kept"]) for r in results["runs"]}
    seeds = sorted({r["seed"] for r in results["runs"]})
    lower = sum(by[("grpo+icepop", sd)] < by[("grpo", sd)] for sd in seeds)
    pairs = ", ".join(f"{by['grpo+icepop', sd]:.4f} vs {by['grpo', sd]:.4f}" for sd in seeds)
    tail = (
        f"k3 KL over the kept tokens lower with IcePop than with GRPO on {lower} of {len(seeds)} seeds "
        f"(step means, IcePop vs GRPO: {pairs})."
    )
    return "\n".join([head, "", _result.markdown_table(header, rows), "", tail])


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds [0,1,2]")
    ap.add_argument("--steps", type=int, default=30, help="rollout steps per run [30]")
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step [16]")
    ap.add_argument("--group", type=int, default=8, help="responses per prompt [8]")
    ap.add_argument("--mismatch", default="temperature:1.3", help="KIND:VALUE of rollout_mismatch [temperature:1.3]")
    ap.add_argument("--runs-dir", default=None, help="keep the run folders here (default: a temporary folder)")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every method at every seed, in ``--runs-dir`` (else a temporary folder); the settings with them."""
    settings = {k: getattr(args, k) for k in ("seeds", "steps", "prompts", "group", "mismatch")}
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(args.runs_dir or tmp)
        runs = [run_one(m, int(sd), args, out_dir) for sd in args.seeds.split(",") for m in METHODS]
    return {"settings": settings, "runs": runs}


def main() -> None:
    _result.main(__doc__, options, measure, report)


if __name__ == "__main__":
    main()
