"""run_facts reads the coverage facts (``coverage.json``) and the hard split's best window
(``val/hard_acc``); the registry's coverage claims are measurable and reproduce trains their runs
with coverage_n = 256."""

from __future__ import annotations

import json
import math

import pytest

from entflow.analysis.report import summarize_run
from entflow.evidence import reproduce as rep
from entflow.evidence.claims import load_claims
from entflow.evidence.facts import COVERAGE_FACTS, FACTS, coverage_facts, run_facts
from entflow.evidence.reproduce import coverage_runs, evaluate_claims, registry
from support.run_dirs import make_run

HARD_ACC = (0.1, 0.2, 0.5, 0.4, 0.3)  # at the 5 evaluations (steps 0, 10, 20, 30, 40)


def run_with_hard_split(tmp_path, coverage: dict | None):
    run = make_run(tmp_path, "grpo-s0", "grpo")
    recs = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        try:
            recs.append(json.loads(line))
        except json.JSONDecodeError:  # make_run's truncated last line
            continue
    evals = iter(HARD_ACC)
    for r in recs:
        if "val/acc" in r:
            r["val/hard_acc"] = next(evals)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    if coverage is not None:
        (run / "coverage.json").write_text(json.dumps(coverage))
    return run


def curve(p256: float) -> dict:
    return {"pass_at_k": {"1": 0.1, "128": p256 - 0.01, "256": p256}, "n_problems": 2, "correct": [1, 0]}


def test_run_facts_reads_coverage_and_hard_window(tmp_path):
    cov = {
        "n": 256,
        "warm": {"step": 0, "splits": {"val": curve(0.75), "hard": curve(0.25)}},
        "final": {"step": 40, "splits": {"val": curve(0.625), "hard": curve(0.5)}},
    }
    run = run_with_hard_split(tmp_path, cov)
    f = run_facts(run, summarize_run(run))
    assert f["val_pass_at_256_final"] == 0.625
    assert f["val_pass_at_256_warm"] == 0.75
    assert f["hard_pass_at_256_final"] == 0.5
    # windows of 3: (0.1+0.2+0.5)/3, (0.2+0.5+0.4)/3, (0.5+0.4+0.3)/3 = 0.4 — not the single max 0.5
    assert f["hard_acc_best_window"] == pytest.approx(0.4, abs=1e-12)


def test_run_facts_without_coverage_or_hard_split_is_nan(tmp_path):
    run = make_run(tmp_path, "grpo-s0", "grpo")
    f = run_facts(run, summarize_run(run))
    for k in ("val_pass_at_256_final", "val_pass_at_256_warm", "hard_pass_at_256_final", "hard_acc_best_window"):
        assert math.isnan(f[k]), k
    # a coverage.json from a smaller n has no k = 256
    (run / "coverage.json").write_text(
        json.dumps({"n": 8, "final": {"splits": {"val": curve(0.5) | {"pass_at_k": {"8": 0.5}}}}})
    )
    assert math.isnan(coverage_facts(run)["val_pass_at_256_final"])


def test_coverage_and_random_reward_claims_are_measurable():
    claims = load_claims(known_facts=FACTS)  # the registry still validates
    assert COVERAGE_FACTS | {"hard_acc_best_window"} <= FACTS
    reading = [c for c in claims if set(c.facts_read()) & (COVERAGE_FACTS | {"hard_acc_best_window"})]
    assert {c.id for c in reading} >= {"yue-coverage", "exploration", "coverage-steer"}
    assert all(c.pending is None for c in reading)
    pending = {c.id for c in claims if c.pending is not None}
    assert pending == set()  # the random-reward claims became measurable with random_reward
    # coverage is measured in the regime setting (the registry's `settings`), never in the demo
    assert {"regime/grpo", "regime/grpo_strict", "regime/opefo_strict", "regime/steer"} <= coverage_runs()
    assert "regime/ppl_shaping" not in coverage_runs()  # no claim reads its coverage
    assert not {k for k in coverage_runs() if "/" not in k}  # no demo run pays for pass@256


def test_yue_coverage_gets_a_verdict_from_the_facts():
    yue = [c for c in registry().claims if c.id == "yue-coverage"]
    seeds = [0, 1, 2, 3, 4]
    drops = [-0.10, -0.12, -0.08, -0.11, -0.09]
    facts = {
        "regime/grpo": {
            s: {"val_pass_at_256_final": 0.5 + d, "val_pass_at_256_warm": 0.5}
            for s, d in zip(seeds, drops, strict=True)
        }
    }
    (row,) = evaluate_claims(facts, seeds, yue)
    assert row["verdict"] == "reproduced" and row["n"] == 5
    assert row["mean"] == pytest.approx(sum(drops) / 5, abs=1e-12)


def test_reproduce_trains_coverage_runs_with_n_256(tmp_path, micro_policy):
    """A run a claim reads pass@256 of gets coverage_n = 256 in that claim's setting only; an
    explicit coverage_n (an override, 0 included: reproduce --quick) wins."""
    base = {"policy_path": micro_policy}

    def coverage_n(setting, names, overrides):
        configs = rep._setting_configs(setting, base, names, ["steps=1", *overrides], [0], tmp_path / setting)
        return {c.group: c.coverage_n for c in configs}

    assert coverage_n("regime", ["grpo", "ppl_shaping"], []) == {"grpo": 256, "ppl_shaping": 0}
    assert coverage_n("demo", ["grpo"], []) == {"grpo": 0}  # no demo claim reads pass@256
    assert coverage_n("regime", ["grpo"], ["coverage_n=8"]) == {"grpo": 8}
    assert coverage_n("regime", ["grpo"], ["coverage_n=0"]) == {"grpo": 0}


def test_greedy_and_probe_retention_facts(tmp_path):
    """``val_greedy_*``: the mean of coverage.json's ``greedy_correct``; ``probe_entropy_retention``:
    the mean of the last 3 ``val/probe_entropy`` values over the first 3's (hand-worked); both NaN
    where the run has no such data."""
    greedy = {"warm": [1, 0, 0, 0], "final": [1, 1, 0, 1]}
    cov = {w: {"step": 0, "splits": {"val": curve(0.5) | {"greedy_correct": greedy[w]}}} for w in greedy}
    run = run_with_hard_split(tmp_path, cov)
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(recs) >= 6
    values = [0.5, 0.4, 0.3] + [0.25] * (len(recs) - 6) + [0.2, 0.1, 0.15]  # one per record, in step order
    for r, v in zip(recs, values, strict=True):
        r["val/probe_entropy"] = v
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    f = run_facts(run, summarize_run(run))
    assert (f["val_greedy_warm"], f["val_greedy_final"]) == (0.25, 0.75)
    assert f["probe_entropy_retention"] == pytest.approx((0.2 + 0.1 + 0.15) / (0.5 + 0.4 + 0.3), rel=1e-12)
    # fewer than two windows of probe evaluations, and no greedy answers: NaN
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs[:5]))
    (run / "coverage.json").write_text(json.dumps({"n": 8, "final": {"splits": {"val": curve(0.5)}}}))
    assert math.isnan(coverage_facts(run)["val_greedy_final"])
    assert math.isnan(run_facts(run)["probe_entropy_retention"])
