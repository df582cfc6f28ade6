"""What the v1 real-LM study (seeds 0–4, ``docs/results/real-claims/``) got wrong, recomputed from
its committed run directories and claims JSON: the figures behind "What v1 got wrong" in
docs/real-models.md, which the real-v2 study was built to fix.

    .venv/bin/python benchmarks/real_v1_review.py docs/results/real-claims

Prints, per seed and as mean [95 % t-interval] over the 5 seeds:

- learning to stop: GRPO's training responses truncated at the 32-token cap and their mean length,
  step 1 → step 15 (``response/truncated_frac``, ``response/len_mean``);
- greedy accuracy: GRPO's held-out greedy accuracy, step 0 → 15 (``val/acc_greedy``, 32 problems),
  beside the sampled pass@1 the claim used;
- entropy or length: KL-Cov − GRPO on training entropy retention (what the claim measured), with
  the share of KL-Cov's responses truncated over its last three steps, and the same retention of
  the held-out sampled entropy (``val/entropy``, step 15 over step 0);
- multiplicity: each claim's one-sided p-value and its Holm-adjusted p over the six
  (:func:`entflow.evidence.claims.holm`), with the verdict each would give; v1 registered no
  family, so this correction is computed after the fact and changes no published verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from docs_tables import interval_text  # benchmarks/docs_tables.py: the docs' number formats
from docs_tables import num as _num
from entflow.analysis.runs import load_metrics, series
from entflow.analysis.stats import t_interval
from entflow.evidence.claims import holm, holm_verdict, one_sided_p
from entflow.evidence.reproduce import registry

SEEDS = range(5)


def _ci(values: list[float]) -> str:
    mean, half, _ = t_interval(values)
    return interval_text({"mean": mean, "half": half})


def _at(recs: list[dict], key: str, step: int) -> float:
    steps, vals = series(recs, key)
    return float(vals[list(steps).index(step)])


def _first_last(recs: list[dict], key: str) -> tuple[float, float]:
    _, vals = series(recs, key)
    return float(vals[0]), float(vals[-1])


def stopping_rows(root: Path) -> list[str]:
    """GRPO per seed: training truncation and length at step 1 and the last step; greedy and
    sampled held-out accuracy, first evaluation → last."""
    rows = [
        "| seed | truncated, step 1 → 15 | mean length, step 1 → 15 | held-out greedy, step 0 → 15 "
        "| held-out pass@1 (T = 1), step 0 → 15 |",
        "|---:|---|---|---|---|",
    ]
    greedy, sampled = [], []
    for s in SEEDS:
        recs = load_metrics(root / f"grpo-s{s}")
        last = max(r["step"] for r in recs)
        t0, t1 = _at(recs, "response/truncated_frac", 1), _at(recs, "response/truncated_frac", last)
        l0, l1 = _at(recs, "response/len_mean", 1), _at(recs, "response/len_mean", last)
        g0, g1 = _first_last(recs, "val/acc_greedy")
        a0, a1 = _first_last(recs, "val/acc")
        greedy.append(g1 - g0)
        sampled.append(a1 - a0)
        rows.append(f"| {s} | {t0:.2f} → {t1:.2f} | {l0:.1f} → {l1:.1f} | {g0:.3f} → {g1:.3f} | {a0:.3f} → {a1:.3f} |")
    rows.append(f"| change, mean [95 % CI] | | | {_ci(greedy)} | {_ci(sampled)} |")
    return rows


def entropy_rows(root: Path) -> list[str]:
    """KL-Cov − GRPO per seed: training entropy retention (the claim's fact, from claims.json),
    KL-Cov's truncated share over its last three steps, and the same retention of the held-out
    sampled entropy (its evaluation at step 15 over step 0's)."""
    claim = next(c for c in json.loads((root / "claims.json").read_text())["claims"] if c["id"] == "real-klcov-entropy")
    rows = [
        "| seed | retention, KL-Cov − GRPO (the claim) | KL-Cov truncated, last 3 steps | GRPO truncated, last 3 steps "
        "| held-out sampled entropy retention (step 15 / 0), KL-Cov − GRPO |",
        "|---:|---|---|---|---|",
    ]
    held = []
    for s, diff in zip(SEEDS, claim["values"], strict=True):
        kl, grpo = load_metrics(root / f"kl_cov-s{s}"), load_metrics(root / f"grpo-s{s}")
        trunc = [float(np.mean(series(r, "response/truncated_frac")[1][-3:])) for r in (kl, grpo)]
        (k0, k1), (g0, g1) = _first_last(kl, "val/entropy"), _first_last(grpo, "val/entropy")
        h = k1 / k0 - g1 / g0
        held.append(h)
        rows.append(f"| {s} | {_num(diff)} | {trunc[0]:.2f} | {trunc[1]:.2f} | {_num(h)} |")
    rows.append(f"| mean [95 % CI] | {_ci(claim['values'])} | | | {_ci(held)} |")
    return rows


def holm_rows(root: Path) -> list[str]:
    """Each v1 claim's one-sided p and Holm-adjusted p over the six, computed after the fact."""
    by_id = {c.id: c for c in registry().claims}
    judged = [c for c in json.loads((root / "claims.json").read_text())["claims"] if c["id"] in by_id]
    ps = [one_sided_p(c["values"], by_id[c["id"]].rule, by_id[c["id"]].bound) for c in judged]
    rows = [
        "| claim | published verdict | one-sided p | Holm p (6 claims) | verdict after Holm |",
        "|---|---|---:|---:|---|",
    ]
    for c, p, adj in zip(judged, ps, holm(ps), strict=True):
        rows.append(f"| `{c['id']}` | {c['verdict']} | {p:.4f} | {adj:.4f} | {holm_verdict(c['verdict'], adj)} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="the v1 study's folder (docs/results/real-claims)")
    root = ap.parse_args(argv).root
    parts = [
        "**Learning to stop** (GRPO, training responses and held-out accuracy):",
        "",
        *stopping_rows(root),
        "",
        "**Entropy or length** (KL-Cov at ratio 0.05 against GRPO):",
        "",
        *entropy_rows(root),
        "",
        "**Multiplicity** (Holm over v1's six claims, computed after the fact):",
        "",
        *holm_rows(root),
    ]
    sys.stdout.write("\n".join(parts) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
