"""Tables for docs/regime.md from run directories of experiments/regime/compare.sh (and one long
GRPO run): per method and seed the final / best-window accuracies, hard-split pass@256, entropy;
GRPO's plateau by a windowed slope test (see ``plateau_step``).

    PYTHONPATH=src python experiments/regime/summarize.py RUNS_DIR [--long RUN_DIR] --out summary.json

Best-window accuracy: the largest mean over ``window`` consecutive evaluations (default 3, i.e. 40
steps at eval_every 20). Plateau: the first evaluation step from which no window of 5 consecutive
evaluations of ``val/acc`` has a least-squares slope more than 2 standard errors (from the
residuals) above zero.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path


def evals(run: Path) -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "val/acc" in r]


def best_window(xs: list[float], w: int) -> float:
    return max(statistics.mean(xs[i : i + w]) for i in range(len(xs) - w + 1)) if len(xs) >= w else max(xs)


def slope_test(steps: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and its standard error."""
    n = len(steps)
    mx, my = statistics.mean(steps), statistics.mean(ys)
    sxx = sum((x - mx) ** 2 for x in steps)
    b = sum((x - mx) * (y - my) for x, y in zip(steps, ys, strict=True)) / sxx
    resid = [y - my - b * (x - mx) for x, y in zip(steps, ys, strict=True)]
    se = math.sqrt(sum(r * r for r in resid) / max(n - 2, 1) / sxx)
    return b, se


def plateau_step(ev: list[dict], key: str = "val/acc", width: int = 5) -> dict:
    """First evaluation step s from which no window of ``width`` consecutive evaluations has a
    least-squares slope more than 2 standard errors above zero."""
    steps = [r["step"] for r in ev]
    ys = [r[key] for r in ev]
    tests = [slope_test(steps[i : i + width], ys[i : i + width]) for i in range(len(ev) - width + 1)]
    for i in range(len(tests)):
        if all(b <= 2 * se for b, se in tests[i:]):
            return {
                "plateau_step": steps[i],
                "window_evals": width,
                "window_slopes_per_100_steps": [(round(100 * b, 4), round(100 * se, 4)) for b, se in tests],
                "mean_acc_after": statistics.mean(ys[i:]),
                "entropy_at_plateau": ev[i]["val/entropy"],
                "entropy_final": ev[-1]["val/entropy"],
            }
    return {"plateau_step": None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("--long")
    ap.add_argument("--window", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    per: dict[str, dict[int, dict]] = defaultdict(dict)
    for run in sorted(Path(a.runs).iterdir()):
        if not (run / "passk.json").is_file():
            continue
        label, seed = run.name.rsplit("-s", 1)
        ev = evals(run)
        pk = json.loads((run / "passk.json").read_text())["hard"]
        per[label][int(seed)] = {
            "val_acc_final": ev[-1]["val/acc"],
            "val_acc_best_window": best_window([r["val/acc"] for r in ev], a.window),
            "hard_acc_final": ev[-1]["hard/acc"],
            "hard_acc_best_window": best_window([r["hard/acc"] for r in ev], a.window),
            "hard_pass@8_final": ev[-1]["hard/pass@k"],
            "hard_pass@1_n256": pk["pass@1"],
            "hard_pass@64_n256": pk["pass@64"],
            "hard_pass@256_n256": pk["pass@256"],
            "entropy_final": ev[-1]["val/entropy"],
            "steps": ev[-1]["step"],
        }
    keys = [
        "val_acc_best_window",
        "hard_acc_best_window",
        "hard_pass@256_n256",
        "hard_pass@64_n256",
        "hard_pass@1_n256",
        "val_acc_final",
        "hard_acc_final",
        "entropy_final",
    ]
    summary = {}
    base = per.get("grpo", {})
    for label, seeds in per.items():
        row = {"seeds": sorted(seeds)}
        for k in keys:
            vals = [seeds[s][k] for s in sorted(seeds)]
            row[k] = {"mean": statistics.mean(vals), "per_seed": vals}
            paired = [seeds[s][k] - base[s][k] for s in sorted(seeds) if s in base]
            if label != "grpo" and paired:
                row[k]["minus_grpo_mean"] = statistics.mean(paired)
                row[k]["minus_grpo_per_seed"] = paired
        summary[label] = row
    out = {"methods": summary, "per_run": per}
    if a.long:
        out["long_grpo"] = plateau_step(evals(Path(a.long)))
        out["long_grpo"]["evals"] = [
            {k: r[k] for k in ("step", "val/acc", "val/pass@k", "val/entropy", "hard/acc", "hard/pass@k")}
            for r in evals(Path(a.long))
        ]
    hdr = f"{'method':18s} {'n':>2s} " + " ".join(f"{k[:22]:>22s}" for k in keys[:5])
    print(hdr)
    for label, row in sorted(summary.items()):
        cells = []
        for k in keys[:5]:
            m = row[k]["mean"]
            d = row[k].get("minus_grpo_mean")
            cells.append(f"{m:7.3f}" + (f" ({d:+.3f})" if d is not None else " " * 9) + " " * 5)
        print(f"{label:18s} {len(row['seeds']):2d} " + " ".join(f"{c:>22s}" for c in cells))
    if a.long:
        print("long GRPO:", {k: v for k, v in out["long_grpo"].items() if k != "evals"})
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
