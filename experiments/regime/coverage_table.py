"""Mean pass@k curves over seeds, per method, from the coverage.json files of a reproduce folder.

    PYTHONPATH=src python experiments/regime/coverage_table.py runs/confirm/regime [--k 1,4,16,64,256]

Prints a markdown table per split: the warm start and each method's final policy, mean ± the half
width of a 95 % t interval over the seeds (one coverage.json per run folder `<method>-s<seed>`).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from entflow.analysis.runs import load_coverage
from entflow.analysis.stats import t_interval


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--k", default="1,4,16,64,256")
    args = ap.parse_args()
    ks = args.k.split(",")
    curves: dict[str, dict[str, list[dict[str, float]]]] = {}  # split -> label -> per-seed curves
    for run in sorted(Path(args.folder).iterdir()):
        m = re.fullmatch(r"(.+)-s(\d+)", run.name)
        cov = load_coverage(run) if m and run.is_dir() else {}
        for which in ("warm", "final"):
            for split, data in ((cov.get(which) or {}).get("splits") or {}).items():
                label = "warm start" if which == "warm" else m.group(1)
                if which == "warm" and m.group(1) != "grpo":
                    continue  # every run of a seed shares the warm start's evaluation; count it once
                curves.setdefault(split, {}).setdefault(label, []).append(data["pass_at_k"])
    for split, by_label in curves.items():
        print(f"\n{split} split: pass@k, mean ± 95 % t half-width over seeds (n)\n")
        print("| policy | " + " | ".join(f"pass@{k}" for k in ks) + " |")
        print("|---|" + "---:|" * len(ks))
        for label, runs in by_label.items():
            cells = []
            for k in ks:
                mean, half, n = t_interval([float(c[k]) for c in runs if k in c])
                cells.append(f"{mean:.3f} ± {half:.3f} ({n})")
            print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
