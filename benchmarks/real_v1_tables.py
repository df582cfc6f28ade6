"""The tables of docs/real-models.md's v1-era sections, printed from their committed result files: the
`entflow eval` measurements, the v1 design's training runs and the TRL cross-check. Nothing is
typed by hand; a test checks that each printed block is current (benchmarks/docs_tables.py).

    .venv/bin/python benchmarks/real_v1_tables.py --eval FILE             # one evaluation, metric by metric
    .venv/bin/python benchmarks/real_v1_tables.py --candidates FILE...    # evaluations side by side
    .venv/bin/python benchmarks/real_v1_tables.py --runs [--passk K] DIR...  # training runs (entflow train --model)
    .venv/bin/python benchmarks/real_v1_tables.py --trl FILE...           # experiments/real_trl/crosscheck.py output

Entropy retention is the lab's definition (:func:`entflow.analysis.law.entropy_retention`): the mean
over the last 20 % of steps divided by the mean over the first 5 %.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from docs_tables import plain as _f  # benchmarks/docs_tables.py: the docs' number formats
from entflow.analysis.law import entropy_retention
from entflow.analysis.runs import load_metrics, series


def _settings_label(s: dict[str, Any]) -> str:
    """``data`` with its parameters, the prompt suffix and the token limit, as the evaluation ran."""
    params = ", ".join(f"{k}={v!r}" for k, v in (s.get("data_params") or {}).items())
    suffix = repr(s.get("prompt_suffix", ""))
    return f"`{s['data']}` ({params or 'its defaults'}), prompt suffix {suffix}, {s['max_new_tokens']} tokens"


def eval_table(path: Path) -> str:
    """One `entflow eval` JSON: each metric's value and standard error, then its extras."""
    d = json.loads(path.read_text())
    rows = ["| metric | value | ± s.e. |", "|---|---:|---:|"]
    for name, m in d["metrics"].items():
        rows.append(f"| {name} | {_f(m['value'])} | {_f(m['se'])} |")
    rows += [
        f"| mean response length (tokens) | {d['response_len']:.1f} | |",
        f"| token entropy (nats) | {_f(d['token_entropy'])} | |",
        f"| unparseable fraction | {_f(d['unparseable_frac'])} | |",
        f"| samples / s | {d['samples_per_s']:.2f} | |",
        f"| reward errors / timeouts | {d['reward_errors']:.0f} / {d['reward_timeouts']:.0f} | |",
    ]
    return "\n".join(rows) + "\n"


def candidates_table(paths: list[Path]) -> str:
    """`entflow eval` JSONs side by side: pass@1 (avg@k) and pass@k with their standard errors, the mean
    response length against the token limit, the token entropy and the wall time."""
    rows = [
        "| candidate | pass@1 (avg@k) | pass@k | mean length / limit | token entropy | wall (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for path in paths:
        d = json.loads(path.read_text())
        s, m, k = d["settings"], d["metrics"], d["settings"]["k"]
        avg, pk = m[f"avg@{k}"], m[f"pass@{k}"]
        rows.append(
            f"| `{path.name}`: {_settings_label(s)}, k = {k} | {_f(avg['value'])} ± {_f(avg['se'])} | "
            f"{pk['value']:.2f} ± {pk['se']:.2f} | {d['response_len']:.1f} / {s['max_new_tokens']} | "
            f"{d['token_entropy']:.2f} | {d['wall_s']:,.0f} |"
        )
    return "\n".join(rows) + "\n"


def _run_label(run_dir: Path) -> str:
    import yaml

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    return f"`{run_dir.name}` ({cfg.get('method', '?')}, seed {cfg.get('seed', '?')}, lr {cfg.get('lr', '?'):g})"


def _pass_at(coverage: dict, when: str, k: int) -> float:
    entry = coverage.get(when) or {}
    return float(entry.get("splits", {}).get("val", {}).get("pass_at_k", {}).get(str(k), math.nan))


def runs_table(run_dirs: list[Path], passk: int = 32) -> str:
    """Training runs: rollout entropy at the first and last step and its retention; the periodic held-out
    evaluation's avg@k and pass@k (``val/acc``, ``val/pass@k``) at the first and last evaluation; and, where
    the run measured it (``coverage.json``), held-out pass@1 and pass@``passk`` of the starting and the final
    policy."""
    rows = [
        "| run | entropy first → last step | retention | periodic avg@k: first → last evaluation | "
        f"periodic pass@k | pass@1 (avg@{passk}): start → final | pass@{passk}: start → final |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for d in run_dirs:
        recs = load_metrics(d)
        _, h = series(recs, "entropy")
        _, _, ret = entropy_retention(h)
        (sa, acc), (_, pkv) = series(recs, "val/acc"), series(recs, "val/pass@k")
        periodic = f"{_f(acc[0])} → {_f(acc[-1])} (steps {sa[0]:.0f} → {sa[-1]:.0f})" if len(acc) else "—"
        periodic_pk = f"{_f(pkv[0])} → {_f(pkv[-1])}" if len(pkv) else "—"
        p1 = pk = "not measured"
        if (d / "coverage.json").is_file():
            cov = json.loads((d / "coverage.json").read_text())
            p1 = f"{_f(_pass_at(cov, 'warm', 1))} → {_f(_pass_at(cov, 'final', 1))}"
            pk = f"{_f(_pass_at(cov, 'warm', passk))} → {_f(_pass_at(cov, 'final', passk))}"
        rows.append(
            f"| {_run_label(d)} | {h[0]:.2f} → {h[-1]:.2f} | {_f(ret)} | {periodic} | {periodic_pk} | {p1} | {pk} |"
        )
    return "\n".join(rows) + "\n"


def trl_table(paths: list[Path]) -> str:
    """experiments/real_trl/crosscheck.py's JSONs: per seed, the starting policy's held-out pass@1 and
    pass@n, then per method TRL's logged entropy at the first and last optimizer step, its retention and
    the final policy's held-out pass@1 and pass@n."""
    data = [json.loads(p.read_text()) for p in paths]
    n = data[0]["coverage_n"]
    rows = [
        f"| TRL adapter | seed | device | entropy first → last | retention | held-out pass@1 | held-out pass@{n} |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for d in data:
        w = d["warm"]["pass_at_k"]
        rows.append(f"| starting policy | {d['config']['seed']} | {d['device']} | | | {_f(w['1'])} | {_f(w[str(n)])} |")
    methods = list(data[0]["runs"])
    for name in methods:
        for d in data:
            r = d["runs"][name]
            c = r["coverage"]["pass_at_k"]
            rows.append(
                f"| {name} | {d['config']['seed']} | {d['device']} | {r['entropy_first']:.2f} → "
                f"{r['entropy_last']:.2f} | {r['entropy_retention']:.2f} | {_f(c['1'])} | {_f(c[str(n)])} |"
            )
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--eval", type=Path, help="one `entflow eval` JSON, metric by metric")
    mode.add_argument("--candidates", type=Path, nargs="+", help="`entflow eval` JSONs side by side")
    mode.add_argument("--runs", type=Path, nargs="+", help="training run directories")
    mode.add_argument("--trl", type=Path, nargs="+", help="experiments/real_trl/crosscheck.py JSONs")
    ap.add_argument("--passk", type=int, default=32, help="with --runs: the coverage pass@k column [32]")
    args = ap.parse_args(argv)
    for p in [args.eval] if args.eval else args.candidates or args.runs or args.trl:
        if not p.exists():
            ap.error(f"no such file or directory: {p}")
    if args.eval:
        print(eval_table(args.eval), end="")
    elif args.candidates:
        print(candidates_table(args.candidates), end="")
    elif args.runs:
        print(runs_table(args.runs, args.passk), end="")
    else:
        print(trl_table(args.trl), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
