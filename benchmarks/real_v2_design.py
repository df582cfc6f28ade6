"""The real-v2 setting's format measurement on design-eval only: the warm start's truncation rate,
pass@1 at T = 1 and greedy accuracy for a few candidate prompt formats / ``max_new_tokens``.

Reads the preset ``src/entflow/evidence/configs/real_v2_design.yaml`` (its design_eval set; the
judge set is never evaluated here) and writes one JSON per run with the per-problem correct
counts, so the between-problem variance of pass@1 (the judge set's sizing) can be recomputed.

    .venv/bin/python benchmarks/real_v2_design.py --problems 64 --samples 4 \\
        --out docs/results/real-v2-design/truncation.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import torch
import yaml

from entflow.hf.data import ChatTask, load_data
from entflow.hf.evaluate import SamplingConfig, evaluate_task
from entflow.hf.models import load_model

PRESET = Path(__file__).resolve().parents[1] / "src/entflow/evidence/configs/real_v2_design.yaml"
# (name, prompt_suffix, max_new_tokens): v1's format, v1's format with room, a short-answer instruction
CANDIDATES = [
    ("v1-format-32", "", 32),
    ("v1-format-96", "", 96),
    ("answer-only-32", " Answer with only the final number.", 32),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=64)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=None, help="candidate names to run (default: all)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = yaml.safe_load(PRESET.read_text())
    params = dict(cfg["task_params"])
    if params.get("eval_split") != "design_eval":
        raise SystemExit(f"{PRESET} must evaluate design_eval, not {params.get('eval_split')!r}")
    data = load_data(cfg["task"], val_size=args.problems, **params)
    model, tokenizer = load_model(cfg["model"])
    out = {
        "what": "warm start on design_eval: truncation, pass@1 (T=1), greedy, per candidate format",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}, torch threads {args.threads}",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "preset": str(PRESET.relative_to(PRESET.parents[4])),
        "model": cfg["model"],
        "task": cfg["task"],
        "task_params": params,
        "candidates": [],
    }
    for name, suffix, max_new in CANDIDATES:
        if args.only and name not in args.only:
            continue
        task = ChatTask(
            data, tokenizer, max_new, prompt_suffix=suffix, reward=cfg.get("reward"), val_size=args.problems
        )
        problems = task.validation_set()
        sampling = SamplingConfig(temperature=1.0, max_new_tokens=max_new, seed=0, batch_size=64)
        t0 = time.perf_counter()
        res = evaluate_task(model, tokenizer, task, problems, k=1, n_samples=args.samples, sampling=sampling)
        wall = time.perf_counter() - t0
        counts = [round(v * args.samples) for v in res.per_problem["avg@1"]]
        row = {
            "name": name,
            "prompt_suffix": suffix,
            "max_new_tokens": max_new,
            "n_problems": len(problems),
            "samples_per_problem": args.samples,
            "truncated_frac": res.extras["truncated_frac"],
            "pass@1": res.metrics["avg@1"][0],
            "pass@1_se": res.metrics["avg@1"][1],
            "greedy": res.metrics["greedy"][0],
            "greedy_se": res.metrics["greedy"][1],
            "response_len": res.extras["response_len"],
            "token_entropy": res.extras["token_entropy"],
            "unparseable_frac": res.extras["unparseable_frac"],
            "correct_counts": counts,
            "wall_s": wall,
            "samples": res.samples[:4],
        }
        out["candidates"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("correct_counts", "samples")}), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
