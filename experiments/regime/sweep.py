"""The knob sweep: three values of each control's main knob, chosen on the
validation split on design seeds, never on the hard (test) split nor on confirmation seeds.

    PYTHONPATH=src python experiments/regime/sweep.py train OUT_DIR     # 30 regime runs, 2 at a time
    PYTHONPATH=src python experiments/regime/sweep.py table OUT_DIR     # the selection table

Pre-registered in docs/reproduction.md ("The knob sweep") before any of its runs:

- setting: the claims' `regime` setting at its full 120 steps, with pass@256 (n = 256) of every final
  policy, exactly as `entflow reproduce` configures `regime/*` runs (``setting_compare_base``);
- seeds: the design seeds 100 and 101 (docs/regime.md), never used for a verdict;
- grid: the VARIANTS below; the middle value of each knob is the registered one (RUNS);
- selection: per method, the value with the highest mean over the two seeds of val pass@256 minus
  GRPO's on the same seed; the hard split's pass@256 is printed but never used to select.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from entflow.analysis.runs import load_coverage
from entflow.analysis.stats import t_interval

SEEDS = (100, 101)
# (method, knob, values): the registered value in the middle, one below and one above
KNOBS: tuple[tuple[str, str, tuple[Any, ...]], ...] = (
    ("steer", "lambda_min", (0.5, 0.7, 0.9)),
    ("clip_cov", "ratio", (0.01, 0.02, 0.05)),
    ("kl_cov", "ratio", (0.02, 0.05, 0.1)),
    ("clip_higher", "clip_high", (0.24, 0.28, 0.35)),
)
# paper 000 App. D's other two weight mappings, at its λ_min 0.7
MAPPINGS = ("linear", "binary")


def variants() -> list[dict[str, Any]]:
    """The compare `methods` list: GRPO, each knob value, STEER's other mappings."""
    out: list[dict[str, Any]] = [{"method": "grpo", "name": "grpo"}]
    for method, knob, values in KNOBS:
        base = {"lambda_min": 0.7} if method == "steer" else {}
        out += [{"method": method, "params": base | {knob: v}, "name": f"{method}_{knob}{v}"} for v in values]
    out += [{"method": "steer", "params": {"lambda_min": 0.7, "mapping": m}, "name": f"steer_{m}"} for m in MAPPINGS]
    return out


def train(out_dir: str) -> int:
    from entflow.evidence.reproduce import setting_compare_base
    from entflow.settings.compare import compare_and_report

    base = setting_compare_base("regime", ["grpo"], seed=SEEDS[0]) | {"methods": variants()}
    seeds = "seeds=" + ",".join(map(str, SEEDS))
    _, report = compare_and_report(
        base, None, "sweep", [f"out_dir={out_dir}", seeds], jobs=2, resume=True, overwrite=False
    )
    print(f"report: {report}")
    return 0


def table(out_dir: str) -> None:
    """Per variant: val and hard pass@256 minus GRPO's, mean over seeds with the per-seed values."""
    final: dict[tuple[str, int], dict[str, float]] = {}
    for run in sorted((Path(out_dir) / "sweep").iterdir()):
        if (m := re.fullmatch(r"(.+)-s(\d+)", run.name)) and (cov := load_coverage(run).get("final")):
            final[m.group(1), int(m.group(2))] = {s: d["pass_at_k"]["256"] for s, d in cov["splits"].items()}
    names = sorted({n for n, _ in final}, key=[v["name"] for v in variants()].index)
    print("| variant | val pass@256 − GRPO (mean; per seed) | hard pass@256 − GRPO (mean; per seed) |")
    print("|---|---|---|")
    for name in names:
        cells = []
        for split in ("val", "hard"):
            diffs = [final[name, s][split] - final["grpo", s][split] for s in SEEDS if (name, s) in final]
            mean = t_interval(diffs)[0] if diffs else float("nan")
            cells.append(f"{mean:+.3f}; " + " / ".join(f"{d:+.3f}" for d in diffs))
        print(f"| `{name}` | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("train", "table"))
    ap.add_argument("out_dir")
    args = ap.parse_args()
    if args.what == "train":
        raise SystemExit(train(args.out_dir))
    table(args.out_dir)


if __name__ == "__main__":
    main()
