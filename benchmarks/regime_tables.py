"""The tables of docs/regime.md, printed from the committed result files in docs/results/regime/ (what
experiments/regime/*.py wrote). Nothing is typed by hand; a test checks that each printed block is
current (benchmarks/docs_tables.py).

    .venv/bin/python benchmarks/regime_tables.py --warmstarts LABEL=FILE...  # candidate warm starts, pass@1 / pass@64
    .venv/bin/python benchmarks/regime_tables.py --passk FILE                # one policy's pass@k on each split
    .venv/bin/python benchmarks/regime_tables.py --long FILE                 # comparison.json's long GRPO run
    .venv/bin/python benchmarks/regime_tables.py --comparison FILE           # comparison.json's methods
    .venv/bin/python benchmarks/regime_tables.py --flow LABEL=FILE...        # flow_balance.py's λ* settings

LABEL is the row's name (the setting the file was measured at, as the page describes it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from docs_tables import num as _signed  # benchmarks/docs_tables.py: the docs' number formats
from docs_tables import plain as _n

SPLITS = ("val", "hard")
PASSK = (1, 4, 16, 64, 256)
LONG_ROWS = (
    ("val acc (avg@8)", "val/acc", 3),
    ("val pass@8", "val/pass@k", 3),
    ("hard acc (avg@8)", "hard/acc", 3),
    ("hard pass@8", "hard/pass@k", 3),
    ("entropy (nats)", "val/entropy", 2),
)
COMPARISON_COLUMNS = (
    ("hard pass@256", "hard_pass@256_n256"),
    ("hard pass@64", "hard_pass@64_n256"),
    ("hard pass@1", "hard_pass@1_n256"),
    ("hard acc, best window", "hard_acc_best_window"),
    ("val acc, best window", "val_acc_best_window"),
    ("entropy at the last step", "entropy_final"),
)
# (column, the per-setting key, digits): flow_balance.py's output
FLOW_COLUMNS = (
    ("acc", "acc", 3),
    ("H", "entropy", 2),
    ("S⁺", "S_pos", 1),
    ("S⁻", "S_neg", 1),
    ("λ\\*", "lambda_star", 3),
    ("λ\\* rewards shuffled in group", "lambda_star_shuffled", 3),
    ("λ\\* sequence-normalised", "lambda_star_seqnorm", 3),
)


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def _labelled(pairs: list[str]) -> list[tuple[str, Path]]:
    out = []
    for pair in pairs:
        label, sep, path = pair.rpartition("=")
        if not sep or not label:
            raise ValueError(f"expected LABEL=FILE, got {pair!r}")
        out.append((label, Path(path)))
    return out


def warmstarts_table(pairs: list[tuple[str, Path]]) -> str:
    """Candidate warm starts: pass@1 and pass@n (n samples per problem) on the validation and hard splits."""
    rows = []
    for label, path in pairs:
        d = _load(path)
        n = d["val"]["n"]
        cells = " | ".join(_n(d[s][f"pass@{k}"]) for s in SPLITS for k in (1, n))
        rows.append(f"| {label} | {n} | {cells} |")
    head = "| warm start | n | val pass@1 | val pass@n | hard pass@1 | hard pass@n |"
    return "\n".join([head, "|---|---:|---:|---:|---:|---:|", *rows]) + "\n"


def passk_table(path: Path) -> str:
    """One policy's pass@k (``PASSK``) on each split, the gap pass@64 − pass@1 and the share of correct
    samples that use the rare route."""
    d = _load(path)
    rows = [
        "| split | "
        + " | ".join(f"pass@{k}" for k in PASSK)
        + " | pass@64 − pass@1 | share of correct samples using the route |",
        "|---|" + "---:|" * (len(PASSK) + 2),
    ]
    for split in SPLITS:
        s = d[split]
        cells = " | ".join(_n(s[f"pass@{k}"]) for k in PASSK)
        rows.append(
            f"| {split} (n = {s['n']}) | {cells} | {_n(s['pass@64'] - s['pass@1'])} | "
            f"{_n(s['route_share_of_correct'], 2)} |"
        )
    return "\n".join(rows) + "\n"


def long_table(path: Path) -> str:
    """comparison.json's long GRPO run: each periodic evaluation, then the plateau test's result."""
    long = _load(path)["long_grpo"]
    evals = long["evals"]
    rows = [
        "| step | " + " | ".join(str(e["step"]) for e in evals) + " |",
        "|---|" + "---:|" * len(evals),
    ]
    for label, key, digits in LONG_ROWS:
        rows.append(f"| {label} | " + " | ".join(_n(e[key], digits) for e in evals) + " |")
    slopes = ", ".join(f"{_signed(m)} ± {_n(s)}" for m, s in long["window_slopes_per_100_steps"])
    rows += [
        "",
        f"Plateau at step {long['plateau_step']} (windows of {long['window_evals']} evaluations; slopes of "
        f"validation accuracy per 100 steps, ± standard error: {slopes}); mean validation accuracy after it "
        f"{_n(long['mean_acc_after'])}; entropy at the plateau {_n(long['entropy_at_plateau'], 2)} nats, at the "
        f"last step {_n(long['entropy_final'], 2)}.",
    ]
    return "\n".join(rows) + "\n"


def comparison_table(path: Path) -> str:
    """comparison.json's methods: each column's mean over the method's seeds (per-seed values), and Δ, the
    mean of the per-seed differences to ``grpo`` on the same seed."""
    methods = _load(path)["methods"]
    order = ["grpo", *sorted(m for m in methods if m != "grpo")]
    rows = [
        "| method | seeds | " + " | ".join(c for c, _ in COMPARISON_COLUMNS) + " |",
        "|---|---|" + "---|" * len(COMPARISON_COLUMNS),
    ]
    for name in order:
        m = methods[name]
        cells = []
        for _, key in COMPARISON_COLUMNS:
            v = m[key]
            text = _n(v["mean"])
            if len(v["per_seed"]) > 1:
                text += " (" + ", ".join(_n(x) for x in v["per_seed"]) + ")"
            if "minus_grpo_mean" in v:
                text += f"; Δ {_signed(v['minus_grpo_mean'])}"
            cells.append(text)
        rows.append(f"| {name} | {','.join(str(s) for s in m['seeds'])} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _neg_share_low_p(setting: dict[str, Any]) -> float:
    return float(setting["cells"]["A<0,p<0.2"]["S_neg_share"])


def flow_table(pairs: list[tuple[str, Path]]) -> str:
    """flow_balance.py's settings: accuracy, entropy, the flows S⁺ and S⁻ and their ratio, λ* (the mean of
    the per-batch values) with its two controls, and the share of S⁻ from negative-advantage tokens with
    p < 0.2."""
    head = [c for c, _, _ in FLOW_COLUMNS]
    rows = [
        "| policy | P × G, τ | "
        + " | ".join(head[:4])
        + " | S⁻/S⁺ | "
        + " | ".join(head[4:])
        + " | share of S⁻ from A<0, p<0.2 |",
        "|---|---|" + "---:|" * (len(FLOW_COLUMNS) + 2),
    ]
    for label, path in pairs:
        for i, s in enumerate(_load(path)["settings"]):
            cells = [_n(s[key], digits) for _, key, digits in FLOW_COLUMNS]
            ratio = _n(s["S_neg"] / s["S_pos"], 1)
            rows.append(
                f"| {label if i == 0 else ''} | {s['P']}×{s['G']}, {s['temperature']:.1f} | {' | '.join(cells[:4])} | "
                f"{ratio} | {' | '.join(cells[4:])} | {_n(_neg_share_low_p(s), 2)} |"
            )
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--warmstarts", nargs="+", metavar="LABEL=FILE")
    mode.add_argument("--passk", type=Path, metavar="FILE")
    mode.add_argument("--long", type=Path, metavar="FILE")
    mode.add_argument("--comparison", type=Path, metavar="FILE")
    mode.add_argument("--flow", nargs="+", metavar="LABEL=FILE")
    args = ap.parse_args(argv)
    try:
        pairs = _labelled(args.warmstarts or args.flow or [])
    except ValueError as e:
        ap.error(str(e))
    for p in [p for _, p in pairs] + [p for p in (args.passk, args.long, args.comparison) if p]:
        if not p.is_file():
            ap.error(f"no such file: {p}")
    if args.warmstarts:
        out = warmstarts_table(pairs)
    elif args.passk:
        out = passk_table(args.passk)
    elif args.long:
        out = long_table(args.long)
    elif args.comparison:
        out = comparison_table(args.comparison)
    else:
        out = flow_table(pairs)
    print(out, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
