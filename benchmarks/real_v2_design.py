"""The real-v2 setting's format measurement on design-eval only: the warm start's truncation rate,
pass@1 at T = 1 and greedy accuracy for a few candidate prompt formats / ``max_new_tokens``.

Reads the preset ``src/entflow/evidence/configs/real_v2_design.yaml`` (its design_eval set; the
judge set is never evaluated here) and writes one JSON per run with the per-problem correct
counts, so the between-problem variance of pass@1 (the judge set's sizing) can be recomputed.

    .venv/bin/python benchmarks/real_v2_design.py --problems 64 --samples 4 \\
        --out docs/results/real-v2-design/truncation.json
    .venv/bin/python benchmarks/real_v2_design.py --sizing docs/results/real-v2-design/truncation.json

``--sizing FILE`` adds to FILE, for each candidate, the judge set's size that gives pass@1 a
standard error <= 0.02 with m = 32 samples per problem (:func:`judge_size`), from the measured
between-problem variance.
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

PRESET = Path(__file__).resolve().parents[1] / "src/entflow/evidence/configs/real_v2_design.yaml"
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


def _format_name(row: dict) -> str:
    shots = row.get("few_shot") or []
    if shots:
        how = "equation" if "=" in shots[0][1] else "number"
        return f"{len(shots)} worked example{'s' * (len(shots) > 1)} ({how}), e.g. {shots[0][0]!r} → {shots[0][1]!r}"
    return f"suffix {row['prompt_suffix']!r}" if row["prompt_suffix"] else "no suffix (v1's format)"


def format_table(results: list[dict]) -> str:
    """The candidates of result files as one markdown table (the caption lines give each file's
    date, machine and command): truncation, pass@1 (T = 1) and greedy with their standard errors
    over problems, mean response length, token entropy, the judge size at the measured p."""
    lines = []
    for res in results:
        lines.append(f"- {res['date']}, {res['machine']}: `{res['command']}`")
    lines += [
        "",
        "| format | new tokens | problems × samples | truncated | pass@1 (T = 1) | greedy | mean length | "
        "token entropy | judge N at that p (s.e. ≤ 0.02, m = 32) | wall |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for res in results:
        for r in res["candidates"]:
            n_judge = (r.get("judge_sizing") or {}).get("n_at_p_hat")
            lines.append(
                f"| {_format_name(r)} | {r['max_new_tokens']} | {r['n_problems']} × {r['samples_per_problem']} "
                f"| {r['truncated_frac']:.3f} | {r['pass@1']:.3f} ± {r['pass@1_se']:.3f} "
                f"| {r['greedy']:.3f} ± {r['greedy_se']:.3f} | {r['response_len']:.1f} | {r['token_entropy']:.2f} "
                f"| {n_judge if n_judge is not None else '–'} | {r['wall_s']:,.0f} s |"
            )
    return "\n".join(lines) + "\n"


def _method_label(cfg: dict) -> str:
    params = cfg.get("method_params") or {}
    return cfg["method"] + (f" (ratio {params['ratio']:g})" if "ratio" in params else "")


def runs_table(run_dirs: list[Path]) -> str:
    """Design runs (their committed ``config.yaml``, ``metrics.jsonl``, ``timing.jsonl``) as one
    markdown table: held-out (design_eval) accuracy at T = 1 and greedy, the fixed-text probe's
    entropy and the sampled entropy from the first evaluation to the last, the probe's window
    retention (mean of the last 3 evaluations over the first 3's), truncation, the tokens a
    covariance method selected per step (its logged per-mini-batch mean × mini_batches), and the
    wall seconds per step, evaluations included."""
    from entflow.analysis.runs import load_config, load_metrics, series
    from entflow.analysis.stats import RETENTION_WINDOW, window_retention

    head = (
        "| run | method | lr | seed | steps | threads | acc T = 1 | greedy | probe entropy | retention (windows of 3) "
        "| sampled entropy | truncated | selected tokens / step | wall s / step |\n"
        "|---|---|---:|---:|---:|---:|---|---|---|---:|---|---|---:|---:|\n"
    )
    rows = []
    for d in run_dirs:
        cfg, recs = load_config(d), load_metrics(d)

        def ends(key: str, fmt: str = ".3f", recs: list = recs) -> str:
            _, v = series(recs, key)
            return f"{v[0]:{fmt}} → {v[-1]:{fmt}}" if v.size else "–"

        _, probe = series(recs, "val/probe_entropy")
        ret = window_retention(probe, RETENTION_WINDOW) if probe.size >= 2 * RETENTION_WINDOW else float("nan")
        sel = [r[k] for r in recs for k in ("clip_cov/n_selected", "kl_cov/n_selected") if k in r]
        timing = [json.loads(line) for line in (d / "timing.jsonl").read_text().splitlines() if line.strip()]
        steps = max(r["step"] for r in recs)
        per_step = timing[-1]["time/elapsed_s"] / max(1, len(timing)) if timing else float("nan")
        selected = f"{np.mean(sel) * cfg['mini_batches']:.2f}" if sel else "–"
        rows.append(
            f"| {d.name} | {_method_label(cfg)} | {cfg['lr']:g} | {cfg['seed']} | {steps} | {cfg['threads']} "
            f"| {ends('val/acc')} | {ends('val/acc_greedy')} | {ends('val/probe_entropy')} "
            f"| {ret:.3f} | {ends('val/entropy')} | {ends('val/truncated_frac')} "
            f"| {selected} | {per_step:.1f} |"
        )
    return head + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=64)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=None, help="candidate names to run (default: all)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--sizing", type=Path, default=None, help="add the judge sizing to this result file")
    ap.add_argument("--table", type=Path, nargs="+", default=None, help="print these result files as one table")
    ap.add_argument("--runs", type=Path, nargs="+", default=None, help="print these design run dirs as one table")
    args = ap.parse_args(argv)
    if args.table is not None:
        sys.stdout.write(format_table([json.loads(p.read_text()) for p in args.table]))
        return 0
    if args.runs is not None:
        sys.stdout.write(runs_table(args.runs))
        return 0
    if args.sizing is not None:
        res = json.loads(args.sizing.read_text())
        for row in res["candidates"]:
            row["judge_sizing"] = sizing(row)
            print(row["name"], json.dumps(row["judge_sizing"]))
        args.sizing.write_text(json.dumps(res, indent=1) + "\n")
        return 0
    if args.out is None:
        ap.error("--out is required")
    import torch  # the measurement's imports: the tables above need neither torch nor the models

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
