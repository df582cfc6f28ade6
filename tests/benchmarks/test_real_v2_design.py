"""benchmarks/real_v2_design.py: the judge set's size formula (hand-worked), the between-problem
variance estimator (Monte Carlo against a known mixture) and the printed format table."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import real_v2_design as rd  # noqa: E402  (benchmarks/real_v2_design.py)


def test_judge_size_at_the_two_extremes():
    # p = 0.4, m = 32, s.e. 0.02: every problem alike -> 0.24 / 32 / 0.0004 = 18.75 -> 19;
    # each problem always or never solved (s_b^2 = p(1 - p) = 0.24) -> (0.2325 + 0.0075) / 0.0004 = 600
    assert rd.judge_size(0.4, 0.0) == 19
    assert rd.judge_size(0.4, 0.24) == 600
    assert rd.judge_size(0.4, 0.24, m=1) == 600  # then m no longer matters


def test_between_problem_variance_recovers_a_known_mixture():
    # half the problems solved with probability 0.1, half with 0.7: p = 0.4, s_b^2 = 0.09
    rng = np.random.default_rng(0)
    p_i = np.where(rng.random(40_000) < 0.5, 0.1, 0.7)
    counts = rng.binomial(4, p_i).tolist()
    p, sb2 = rd.between_problem_variance(counts, 4)
    assert p == pytest.approx(0.4, abs=0.01)
    assert sb2 == pytest.approx(0.09, abs=0.005)
    # all problems alike: the estimate is floored at 0, not negative
    assert rd.between_problem_variance(rng.binomial(4, 0.4, 2000).tolist(), 4)[1] >= 0.0


def test_format_table_prints_each_candidate_with_its_file_caption():
    row = {
        "name": "x",
        "prompt_suffix": "",
        "few_shot": [["Calculate 1 + 2.", "1 + 2 = 3"]],
        "max_new_tokens": 16,
        "n_problems": 8,
        "samples_per_problem": 4,
        "truncated_frac": 0.125,
        "pass@1": 0.25,
        "pass@1_se": 0.05,
        "greedy": 0.5,
        "greedy_se": 0.1,
        "response_len": 9.0,
        "token_entropy": 0.4,
        "wall_s": 1234.0,
    }
    res = {"date": "D", "machine": "M", "command": "C", "candidates": [row, {**row, "few_shot": None}]}
    out = rd.format_table([res])
    assert out.startswith("- D, M: `C`\n")
    rows = [line for line in out.splitlines() if line.startswith("| 1 worked") or line.startswith("| no suffix")]
    assert len(rows) == 2
    assert "| 16 | 8 × 4 | 0.125 | 0.250 ± 0.050 | 0.500 ± 0.100 | 9.0 | 0.40 | – | 1,234 s |" in rows[0]


def test_runs_table_reads_a_design_run(tmp_path):
    import json

    import yaml

    run = tmp_path / "d-clipcov"
    run.mkdir()
    cfg = {"method": "clip_cov", "method_params": {"ratio": 2e-4}, "lr": 3e-6, "seed": 100, "threads": 1}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg | {"mini_batches": 4}))
    probe = [0.4, 0.3, 0.2, 0.2, 0.1, 0.15]  # windows of 3: (0.2 + 0.1 + 0.15) / (0.4 + 0.3 + 0.2) = 0.5
    recs = []
    for i, h in enumerate(probe):
        recs.append({"step": 10 * i, "val/acc": 0.1 * i, "val/acc_greedy": 0.2, "val/probe_entropy": h})
        recs.append({"step": 10 * i + 1, "clip_cov/n_selected": 0.25 if i % 2 else 0.5})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (run / "timing.jsonl").write_text(
        "".join(json.dumps({"step": s, "time/elapsed_s": 10.0 * s}) + "\n" for s in (1, 2))
    )
    (row,) = [line for line in rd.runs_table([run]).splitlines() if line.startswith("| d-clipcov")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "clip_cov (ratio 0.0002)" and cells[4] == "51"  # the last step logged
    assert cells[6] == "0.000 → 0.500" and cells[8] == "0.400 → 0.150"
    assert cells[9] == "0.500"
    assert cells[12] == "1.50"  # the per-mini-batch mean 0.375 × 4 mini-batches
    assert cells[13] == "10.0"  # 20 s over 2 timed steps


def test_the_printed_tables_load_neither_torch_nor_the_models():
    # the docs print these tables (benchmarks/docs_tables.py): they read JSON and run folders only
    from support.bench_cli import printed_and_imports

    table, imported = printed_and_imports(
        "real_v2_design", "--table", str(ROOT / "docs/results/real-v2-design/truncation.json")
    )
    assert "|" in table
    assert {"torch", "transformers"}.isdisjoint(imported), sorted(imported)
