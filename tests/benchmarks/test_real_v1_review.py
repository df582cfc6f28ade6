"""benchmarks/real_v1_review.py: its figures for the v1 real-LM study, checked against plain
recomputations from the committed run folders (numpy, scipy's t distribution)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
V1 = ROOT / "docs/results/real-claims"
sys.path.insert(0, str(ROOT / "benchmarks"))

import real_v1_review as rv  # noqa: E402  (benchmarks/real_v1_review.py)


def _records(run: str) -> list[dict]:
    return [json.loads(line) for line in (V1 / run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _values(run: str, key: str) -> list[float]:
    return [r[key] for r in _records(run) if key in r]


def _t_ci(x: list[float]) -> tuple[float, float, float]:
    m, h = np.mean(x), stats.t.ppf(0.975, len(x) - 1) * np.std(x, ddof=1) / np.sqrt(len(x))
    return m, m - h, m + h


def _shown(m: float, lo: float, hi: float) -> str:
    return f"{rv._num(m)} [{rv._num(lo)}, {rv._num(hi)}]"


def test_greedy_change_is_the_t_interval_of_the_per_seed_changes():
    greedy = [_values(f"grpo-s{s}", "val/acc_greedy") for s in range(5)]
    change = [g[-1] - g[0] for g in greedy]
    assert _shown(*_t_ci(change)) in "\n".join(rv.stopping_rows(V1))
    assert rv.stopping_rows(V1)[2].startswith(f"| 0 | {_values('grpo-s0', 'response/truncated_frac')[0]:.2f} → ")


def test_heldout_entropy_retention_difference_and_truncation():
    rows = "\n".join(rv.entropy_rows(V1))
    diffs = []
    for s in range(5):
        k, g = _values(f"kl_cov-s{s}", "val/entropy"), _values(f"grpo-s{s}", "val/entropy")
        diffs.append(k[-1] / k[0] - g[-1] / g[0])
    assert _shown(*_t_ci(diffs)) in rows
    trunc = np.mean(_values("kl_cov-s0", "response/truncated_frac")[-3:])
    assert f"| 0 | +0.900 | {trunc:.2f} |" in rows


def test_holm_over_the_six_claims_by_hand():
    claims = json.loads((V1 / "claims.json").read_text())["claims"]
    kl = next(c for c in claims if c["id"] == "real-klcov-entropy")
    x = np.asarray(kl["values"])
    p = stats.t.sf(x.mean() / (x.std(ddof=1) / np.sqrt(5)), 4)  # greater than 0
    row = next(r for r in rv.holm_rows(V1) if "`real-klcov-entropy`" in r)
    assert f"| {p:.4f} |" in row
    cells = [c.strip() for c in row.split("|")[1:-1]]
    ps = sorted(float(r.split("|")[3]) for r in rv.holm_rows(V1)[2:])
    rank = ps.index(pytest.approx(p, abs=5e-5))
    holm = max(min(1.0, (6 - j) * ps[j]) for j in range(rank + 1))  # step-down: max over the ranks so far
    assert float(cells[3]) == pytest.approx(holm, abs=4e-4)  # from p-values printed to 4 decimals
    assert cells[4] == ("reproduced" if holm <= 0.025 else "inconclusive")
