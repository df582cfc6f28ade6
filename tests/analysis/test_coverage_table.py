"""The coverage table of the report and the terminal: pass@k warm start → final per split, read
from each run's coverage.json; absent when no run measured coverage."""

from __future__ import annotations

import json
import math

from entflow.analysis.report import report_tables, summarize_run, terminal_tables
from entflow.analysis.tables import Span, coverage_table
from support.run_dirs import make_run


def coverage(warm: dict[str, float], final: dict[str, float]) -> dict:
    def splits(values: dict[str, float]) -> dict:
        return {
            s: {"n_problems": 2, "correct": [1, 0], "pass_at_k": {"1": v, "16": v + 0.1, "256": v + 0.2}}
            for s, v in values.items()
        }

    return {"n": 256, "warm": {"step": 0, "splits": splits(warm)}, "final": {"step": 40, "splits": splits(final)}}


def test_rows_are_the_coverage_files(tmp_path):
    a = make_run(tmp_path, "grpo-s0", "grpo")
    b = make_run(tmp_path, "kl_cov-s0", "kl_cov")
    c = make_run(tmp_path, "steer-s0", "steer")  # measured no coverage: no row
    (a / "coverage.json").write_text(json.dumps(coverage({"val": 0.3, "hard": 0.0}, {"val": 0.5, "hard": 0.1})))
    (b / "coverage.json").write_text(json.dumps(coverage({"val": 0.3, "hard": 0.0}, {"val": 0.4, "hard": 0.25})))
    table = coverage_table([summarize_run(d) for d in (a, b, c)])
    assert [col.header for col in table.columns] == [
        "run (method)",
        *(f"{s} pass@{k}" for s in ("val", "hard") for k in (1, 16, 256)),
    ]
    assert [row[0] for row in table.rows] == ["grpo-s0 (grpo)", "kl_cov-s0 (kl_cov)"]
    grpo, kl_cov = table.rows
    assert grpo[3] == Span(0.5, 0.7)  # val pass@256: warm 0.3 + 0.2 → final 0.5 + 0.2
    assert kl_cov[4] == Span(0.0, 0.25)  # hard pass@1
    assert kl_cov[6].first == 0.2 and abs(kl_cov[6].last - 0.45) < 1e-12  # hard pass@256


def test_only_runs_with_coverage_get_the_table(tmp_path):
    a = make_run(tmp_path, "grpo-s0", "grpo")
    names = lambda tables: [t.name for t in tables]  # noqa: E731
    assert "coverage" not in names(terminal_tables([summarize_run(a)]))
    assert "coverage" not in names(t for t, _ in report_tables([summarize_run(a)]))
    (a / "coverage.json").write_text(json.dumps(coverage({"val": 0.3}, {"val": 0.5})))
    assert names(terminal_tables([summarize_run(a)]))[:2] == ["headline", "coverage"]
    assert names(t for t, _ in report_tables([summarize_run(a)]))[:2] == ["summary", "coverage"]
    # a split the file lacks gets no column
    assert [col.header for col in coverage_table([summarize_run(a)]).columns][1:] == [
        "val pass@1",
        "val pass@16",
        "val pass@256",
    ]


def test_columns_follow_the_k_each_run_measured(tmp_path):
    """A run with n samples per problem gets the k of COVERAGE_KS up to n and its largest k = n."""

    def curve(n: int, base: float) -> dict:
        ks = [2**i for i in range(n.bit_length()) if 2**i <= n]
        split = {"n_problems": 2, "correct": [1, 0], "pass_at_k": {str(k): base + k / 1024 for k in ks}}
        return {"n": n, "warm": {"step": 0, "splits": {"val": split}}, "final": {"step": 15, "splits": {"val": split}}}

    a = make_run(tmp_path, "grpo-s0", "grpo")
    b = make_run(tmp_path, "clip_cov-s0", "clip_cov")
    (a / "coverage.json").write_text(json.dumps(curve(32, 0.5)))
    (b / "coverage.json").write_text(json.dumps(curve(4, 0.25)))
    sa, sb = summarize_run(a), summarize_run(b)
    assert sorted(k for k in sa if k.startswith("val_pass_at_") and k.endswith("_last")) == [
        "val_pass_at_16_last",
        "val_pass_at_1_last",
        "val_pass_at_32_last",
    ]
    table = coverage_table([sa, sb])
    assert [col.header for col in table.columns][1:] == ["val pass@1", "val pass@4", "val pass@16", "val pass@32"]
    grpo, clip_cov = table.rows
    assert grpo[4] == Span(0.53125, 0.53125)  # pass@32 = its largest k
    assert clip_cov[2] == Span(0.25390625, 0.25390625)  # pass@4 = its largest k
    assert math.isnan(clip_cov[3].first) and math.isnan(clip_cov[3].last)  # pass@16: not measured
