"""The real-v2 setting's format measurement on design-eval only: the warm start's truncation rate,
pass@1 at T = 1 and greedy accuracy for a few candidate prompt formats / ``max_new_tokens``.

Reads the preset ``src/entflow/hf/configs/real_v2_design.yaml`` (its design_eval set; the
judge set is never evaluated here) and writes one JSON per run with the per-problem correct
counts, so the between-problem variance of pass@1 (the judge set's sizing) can be recomputed.

    .venv/bin/python benchmarks/real_v2_design.py --problems 64 --samples 4 \\
        --out docs/results/real-v2-design/truncation.json
    .venv/bin/python benchmarks/real_v2_design.py --sizing docs/results/real-v2-design/truncation.json

``--sizing FILE`` adds to FILE, for each candidate, the judge set's size that gives pass@1 a
standard error <= 0.02 with m = 32 samples per problem (:func:`judge_size`), from the measured
between-problem variance. The design runs that followed are printed by
``python benchmarks/docs_tables.py --print design-runs DIR...`` (docs/real-models.md); how the format was
chosen from these files is in docs/results/history.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from entflow.evidence.records import cpu_model

PRESET = Path(__file__).resolve().parents[1] / "src/entflow/hf/configs/real_v2_design.yaml"
# worked examples shown as earlier chat turns (problems of the generator's form that are in no
# held-out set: tests/hf/test_real_v2_preset.py), answered as a bare number or as the equation
WORKED = [
    ("Calculate 23 + 41.", "64"),
    ("Calculate 57 - 19.", "38"),
    ("Calculate 8 + 35.", "43"),
    ("Calculate 90 - 42.", "48"),
]
WORKED_EQ = [(q, f"{q.removeprefix('Calculate ').removesuffix('.')} = {a}") for q, a in WORKED]
# (name, prompt_suffix, max_new_tokens, few_shot): a short-answer instruction, v1's format, v1's
# format with room, an inline example, then worked examples as chat turns
CANDIDATES = [
    ("answer-only-32", " Answer with only the final number.", 32, None),
    ("v1-format-32", "", 32, None),
    ("v1-format-96", "", 96, None),
    ("example-32", " Reply with the number only. Example: Calculate 2 + 3. Reply: 5", 32, None),
    ("worked-number-4-32", "", 32, WORKED),
    ("worked-equation-2-32", "", 32, WORKED_EQ[:2]),
    ("worked-equation-4-32", "", 32, WORKED_EQ),
    ("worked-equation-4-16", "", 16, WORKED_EQ),
    ("worked-equation-2-16", "", 16, WORKED_EQ[:2]),
]


def between_problem_variance(counts: list[int], n: int) -> tuple[float, float]:
    """(p_hat, s_b^2): the mean success rate and the between-problem variance of the per-problem
    success probabilities p_i, from c_i correct of n samples per problem. The per-problem rates
    x_i = c_i / n have E[sample var of x] = s_b^2 (1 - 1/n) + p (1 - p) / n, so
    s_b^2 = (var(x) - p_hat (1 - p_hat) / n) / (1 - 1/n), floored at 0."""
    x = np.asarray(counts, dtype=np.float64) / n
    p = float(x.mean())
    sb2 = (float(x.var(ddof=1)) - p * (1 - p) / n) / (1 - 1 / n)
    return p, max(0.0, sb2)


def judge_size(p: float, sb2: float, m: int = 32, se: float = 0.02) -> int:
    """Problems N for s.e.(pass@1) <= se with m samples each:
    Var(p_hat) = [s_b^2 (1 - 1/m) + p (1 - p) / m] / N, since E_i p_i (1 - p_i) = p (1 - p) - s_b^2."""
    return math.ceil((sb2 * (1 - 1 / m) + p * (1 - p) / m) / se**2)


def sizing(row: dict, m: int = 32, p_ref: float = 0.4, boot: int = 2000) -> dict:
    """The judge size for one candidate: at its measured p, and at p_ref with the same share
    rho = s_b^2 / (p (1 - p)) of the variance between problems; the 95th percentile of a bootstrap
    over problems (seed 0) as the conservative value."""
    n, counts = row["samples_per_problem"], row["correct_counts"]
    p, sb2 = between_problem_variance(counts, n)
    rho = sb2 / (p * (1 - p)) if 0 < p < 1 else math.nan
    rng = np.random.default_rng(0)
    rhos = []
    for _ in range(boot):
        pb, sb = between_problem_variance(list(rng.choice(counts, size=len(counts))), n)
        rhos.append(sb / (pb * (1 - pb)) if 0 < pb < 1 else 1.0)
    rho95 = float(np.percentile(rhos, 95))
    at_ref = lambda r: judge_size(p_ref, min(r, 1.0) * p_ref * (1 - p_ref), m)  # noqa: E731
    return {
        "m": m,
        "p_hat": p,
        "between_problem_variance": sb2,
        "rho": rho,
        "rho_bootstrap_95": rho95,
        "n_at_p_hat": judge_size(p, sb2, m) if 0 < p < 1 else None,
        f"n_at_p_{p_ref}": at_ref(rho) if math.isfinite(rho) else None,
        f"n_at_p_{p_ref}_rho_95": at_ref(rho95),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=64)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=None, help="candidate names to run (default: all)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--sizing", type=Path, default=None, help="add the judge sizing to this result file")
    args = ap.parse_args(argv)
    if args.sizing is not None:
        res = json.loads(args.sizing.read_text())
        for row in res["candidates"]:
            row["judge_sizing"] = sizing(row)
            print(row["name"], json.dumps(row["judge_sizing"]))
        args.sizing.write_text(json.dumps(res, indent=1) + "\n")
        return 0
    if args.out is None:
        ap.error("--out is required")
    import torch  # the measurement's imports: --sizing needs neither torch nor the models

    from entflow.hf.data import ChatTask, load_data
    from entflow.hf.evaluate import SamplingConfig, evaluate_task
    from entflow.hf.models import load_model

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
        "machine": f"{cpu_model()}, {os.cpu_count()} cores, torch threads {args.threads}",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "preset": str(PRESET.relative_to(PRESET.parents[4])),
        "model": cfg["model"],
        "task": cfg["task"],
        "task_params": params,
        "candidates": [],
    }
    for name, suffix, max_new, few_shot in CANDIDATES:
        if args.only and name not in args.only:
            continue
        task = ChatTask(
            data,
            tokenizer,
            max_new,
            prompt_suffix=suffix,
            reward=cfg.get("reward"),
            val_size=args.problems,
            few_shot=few_shot,
        )
        problems = task.validation_set()
        sampling = SamplingConfig(temperature=1.0, max_new_tokens=max_new, seed=0, batch_size=64, share_prompts=True)
        t0 = time.perf_counter()
        res = evaluate_task(model, tokenizer, task, problems, k=1, n_samples=args.samples, sampling=sampling)
        wall = time.perf_counter() - t0
        counts = [round(v * args.samples) for v in res.per_problem["avg@1"]]
        row = {
            "name": name,
            "prompt_suffix": suffix,
            "max_new_tokens": max_new,
            "few_shot": few_shot,
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
