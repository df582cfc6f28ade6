"""The pages' one-off table printers, folded into benchmarks/docs_tables.py (``--print eval``, ``design-runs``,
``cost``, ``trl-crosscheck``, ``v1-review``, ``regime-*``, ``trl-suite``): each against hand-made result files
whose numbers are worked out by hand, or against plain recomputations from the committed files (numpy,
scipy's t distribution); bad arguments named; and the blocks the pages print against the committed values."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
V1 = ROOT / "docs/results/real-claims"
sys.path.insert(0, str(ROOT / "benchmarks"))

import docs_tables as dt  # noqa: E402  (benchmarks/docs_tables.py)
from support import trl_suite  # noqa: E402


def _write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/docs_tables.py"), *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


# --- one result format -------------------------------------------------------------------------------


def test_the_opening_line_names_each_recorded_measurement_and_every_file(tmp_path):
    a = _write(tmp_path / "a.json", {"date": "D", "machine": "M", "command": "C"})
    b = _write(tmp_path / "b.json", {"x": 1})
    assert dt.source_line([str(a), str(b)], tmp_path) == f"Measured D on M. Command: `C`. Data: `{a}`, `{b}`."
    assert dt.source_line(["x/"], tmp_path, metas=[]) == "Data: `x/`."


def test_every_printer_is_named_in_the_usage_and_a_wrong_call_is_refused():
    for name in dt.PRINTERS:
        assert f"--print {name}" in dt.__doc__, name
    with pytest.raises(dt.UsageError, match="eval FILE"):
        dt.print_table(["eval"], ROOT)
    with pytest.raises(dt.UsageError, match="got \\['nope'\\]"):
        dt.print_table(["nope"], ROOT)
    with pytest.raises(dt.UsageError):
        dt.print_table(["trl-crosscheck"], ROOT)  # one or more files


# --- docs/real-models.md: evaluation, design runs, cost, the TRL cross-check --------------------------


def test_eval_table_and_its_wall_time(tmp_path):
    d = {
        "settings": {"k": 4, "data": "basic_arithmetic", "data_params": {"max_terms": 2}, "prompt_suffix": "",
                     "max_new_tokens": 32},
        "metrics": {"avg@4": {"value": 0.25, "se": 0.0125}, "pass@4": {"value": 0.5, "se": 0.05}},
        "response_len": 12.34, "token_entropy": 1.5, "unparseable_frac": 0.1, "samples_per_s": 3.0,
        "reward_errors": 0.0, "reward_timeouts": 1.0, "wall_s": 1234.4, "load_s": 4.0, "sampling_s": 1000.0,
    }  # fmt: skip
    path = _write(tmp_path / "e.json", d)
    table = dt.print_eval(str(path), tmp_path)
    assert "| avg@4 | 0.250 | 0.013 |" in table and "| reward errors / timeouts | 0 / 1 | |" in table
    assert table.startswith(f"Data: `{path}`.")
    assert "Wall time 1,234 s (21 min): load 4.0 s, sampling 1,000.0 s." in table


def test_design_runs_table_reads_a_design_run(tmp_path):
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
    (row,) = [line for line in dt.design_runs_table([run]).splitlines() if line.startswith("| d-clipcov")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "clip_cov (ratio 0.0002)" and cells[4] == "51"  # the last step logged
    assert cells[6] == "0.000 → 0.500" and cells[8] == "0.400 → 0.150"
    assert cells[9] == "0.500"
    assert cells[10] == "– / –"  # it never reached step 60 or 70
    assert cells[13] == "1.50"  # the per-mini-batch mean 0.375 × 4 mini-batches
    assert cells[14] == "10.0"  # 20 s over 2 timed steps
    assert dt.print_design_runs([str(run)], tmp_path).startswith(f"Data: `{run}/`.\n\n| run | method |")


def test_the_committed_design_runs_retention_at_the_common_horizons():
    # GRPO on seed 100 over steps 0–60 (the window Clip-Cov at 2e-4 is compared on) and 0–70 (the bound's)
    runs = ROOT / "docs/results/real-v2-design/runs"
    rows = dt.design_runs_table([runs / "d-grpo-s100-lr3e-6", runs / "d-clipcov2e-4-s100-lr3e-6"]).splitlines()
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]
    assert cells[0][10] == "0.676 / 0.643" and cells[1][10] == "0.685 / –"


def test_the_printed_design_runs_load_neither_torch_nor_the_models():
    # the docs print these tables: they read JSON and run folders only
    from support.bench_cli import printed_and_imports

    runs = sorted(p for p in (ROOT / "docs/results/real-v2-design/runs").iterdir() if p.is_dir())
    table, imported = printed_and_imports("docs_tables", "--print", "design-runs", str(runs[0]))
    assert "|" in table
    assert {"torch", "transformers"}.isdisjoint(imported), sorted(imported)


def _timing(elapsed: list[float], evals: dict[int, float], parts: bool = False) -> list[dict]:
    """Steps 1…n; with ``parts``, step i's rollout takes i s and its update 2·i s."""
    return [
        {"step": i + 1, "time/elapsed_s": e}
        | ({"time/eval_s": evals[i + 1]} if i + 1 in evals else {})
        | ({"time/rollout_s": float(i + 1), "time/update_s": 2.0 * (i + 1)} if parts else {})
        for i, e in enumerate(elapsed)
    ]


def test_step_times_leave_out_evaluation_steps_and_the_step_after_a_resume():
    # steps 2, 3 take 10 and 12 s; step 4 evaluates (30 s of it); step 5 restarts the clock (resume); step 6 11 s
    steps, evals, resumed = dt.step_times(_timing([50, 60, 72, 115, 8, 19], {4: 30.0}))
    assert steps == [10, 12, 11] and evals == [30.0] and resumed
    assert dt.step_times(_timing([5, 15], {}))[2] is False


def _timed_runs(root: Path, runs: dict[str, tuple[float, list[float], str]]) -> None:
    meta = {"machine": "a test machine", "runs": {}}
    for name, (wall, elapsed, note) in runs.items():
        (root / name).mkdir(parents=True)
        timing = _timing(elapsed, {3: 20.0}, parts=name == "a-s0")
        (root / name / "timing.jsonl").write_text("".join(json.dumps(r) + "\n" for r in timing))
        meta["runs"][name] = {"start": "2026-11-28T06:00:00+00:00", "wall_s": wall} | ({"note": note} if note else {})
    (root / "run_times.json").write_text(json.dumps(meta))


def test_the_budget_verdict(tmp_path):
    _timed_runs(
        tmp_path,
        {
            "a-s0": (24 * 60, [30, 48, 90, 108], ""),
            "b-s0": (30 * 60, [30, 48, 90, 108], ""),
            "c-s0": (20 * 60, [30, 48, 5, 23], ""),
            "d-s0": (20 * 60, [30, 48, 90, 108], "shared the machine"),
        },
    )
    rows = {r.split(" | ")[0].lstrip("| "): r for r in dt.cost_table(tmp_path).splitlines() if r.startswith("| ")}
    # 108 s of 24 min since the start by the last step: 1.8 min, the rest (22.2) after it;
    # rollouts of 1, 2, 3, 4 s (median 2.5) and updates of 2, 4, 6, 8 s (median 5.0)
    assert rows["a-s0"] == "| a-s0 | 06:00:00 | 24.0 | 1.8 | 22.2 | 18.0 | 2.5, 5.0 | 20.0 | yes |"
    assert "| 18.0 | –, – | 20.0 |" in rows["b-s0"]
    assert rows["b-s0"].endswith("| no (1.20× the budget) |")
    assert rows["c-s0"].endswith("| – | – | 18.0 | –, – | – | not a measurement: resumed after an interruption |")
    # shared and within the budget: the other jobs can only have slowed it, so a run alone meets it too
    assert rows["d-s0"].endswith("| yes, though shared (shared the machine) |")
    assert f"Data: `{tmp_path}/run_times.json`, `{tmp_path}/<run>/timing.jsonl`." in dt.cost_table(tmp_path)


def test_a_shared_run_says_no_only_if_it_misses_by_more_than_the_other_jobs():
    assert dt.budget_verdict(30.0, False, "a copy", 20.0) == (
        "no (1.20× the budget; over it even without the other jobs' 20 s: a copy)"
    )
    # 25.2 min with 20 s of other jobs: 24.87 min alone is possible, so it says nothing
    assert dt.budget_verdict(25.2, False, "a copy", 20.0) == "not a measurement: a copy"
    assert dt.budget_verdict(30.0, False, "tests beside it", None) == "not a measurement: tests beside it"
    assert dt.budget_verdict(20.0, True, "", None) == "not a measurement: resumed after an interruption"
    assert dt.budget_verdict(25.0, False, "", None) == "yes"


def _reference(path: Path, steps: list[float]) -> str:
    """A ``real_step.py --out`` file: entflow's arm, one round, plain steps 2… of ``steps`` seconds."""
    phases = dict.fromkeys(("generation", "scoring", "old_logp", "update", "audit", "validation"), 0.0)
    rows = [{"step": i + 2, **phases, "total": s} for i, s in enumerate(steps)]
    path.write_text(json.dumps({"entflow": [{"rows": rows, "checkpoint_s": []}]}))
    return str(path)


def test_the_speed_reference_scales_each_run_to_the_reference_day(tmp_path):
    _timed_runs(tmp_path, {"a-s0": (30 * 60, [30, 48, 90, 108], "")})
    meta = json.loads((tmp_path / "run_times.json").read_text())
    # reference day: median 10 s; now: median of 19, 20, 21, 25 (both files) = 20.5 s, so 2.05× slower
    meta["speed_reference"] = {
        "then": [_reference(tmp_path / "then.json", [9.0, 10.0, 12.0])],
        "now": [_reference(tmp_path / "c.json", [19.0, 21.0]), _reference(tmp_path / "d.json", [20.0, 25.0])],
    }
    (tmp_path / "run_times.json").write_text(json.dumps(meta))
    text = dt.cost_table(tmp_path)
    assert "a step took 10.00 s on the reference day" in text and "20.50 s around these runs" in text
    assert "the machine ran 2.05× slower" in text
    assert text.rstrip().endswith("a-s0 14.6 min.")  # 30 / 2.05
    # the budget column still judges the measured wall time
    assert "| no (1.20× the budget) |" in text


def test_trl_crosscheck_rows_per_seed_and_method(tmp_path):
    files = []
    for seed, device in ((1, "GPU A"), (2, "GPU B")):
        run = {
            "entropy_first": 2.0,
            "entropy_last": 0.409,
            "entropy_retention": 0.2045,  # 0.20, not 0.21: rounded from the stored value
            "coverage": {"pass_at_k": {"1": 0.5, "8": 0.875}},
        }
        d = {
            "config": {"seed": seed},
            "device": device,
            "coverage_n": 8,
            "torch": "t",
            "transformers": "tf",
            "trl": "trl",
            "warm": {"pass_at_k": {"1": 0.125, "8": 0.75}},
            "runs": {"grpo": run, "kl_cov": run},
        }
        files.append(str(_write(tmp_path / f"s{seed}.json", d)))
    rows = [r for r in dt.print_trl_crosscheck(files, tmp_path).splitlines() if r.startswith("|")]
    assert len(rows) == 2 + 2 + 2 * 2
    assert rows[2] == "| starting policy | 1 | GPU A | | | 0.125 | 0.750 |"
    assert rows[7] == "| kl_cov | 2 | GPU B | 2.00 → 0.41 | 0.20 | 0.500 | 0.875 |"


def test_a_missing_file_is_named(tmp_path):
    res = _cli("--print", "trl-crosscheck", str(tmp_path / "nope.json"))
    assert res.returncode == 2 and "nope.json" in res.stderr


def test_the_docs_trl_table_carries_the_committed_values():
    page = (ROOT / "docs" / "integrations.md").read_text()
    for seed in (100, 101, 102):
        d = json.loads((ROOT / f"docs/results/real-trl/crosscheck-s{seed}.json").read_text())
        for name, r in d["runs"].items():
            cells = f"| {name} | {seed} | {d['device']} | {r['entropy_first']:.2f} → {r['entropy_last']:.2f} |"
            assert cells in page, cells


# --- the v1 real-LM study's review: against plain recomputations from its committed run folders ---------


def _records(run: str) -> list[dict]:
    return [json.loads(line) for line in (V1 / run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _values(run: str, key: str) -> list[float]:
    return [r[key] for r in _records(run) if key in r]


def _t_ci(x: list[float]) -> tuple[float, float, float]:
    m, h = np.mean(x), stats.t.ppf(0.975, len(x) - 1) * np.std(x, ddof=1) / np.sqrt(len(x))
    return m, m - h, m + h


def _shown(m: float, lo: float, hi: float) -> str:
    return f"{dt.num(m)} [{dt.num(lo)}, {dt.num(hi)}]"


def test_greedy_change_is_the_t_interval_of_the_per_seed_changes():
    greedy = [_values(f"grpo-s{s}", "val/acc_greedy") for s in range(5)]
    change = [g[-1] - g[0] for g in greedy]
    assert _shown(*_t_ci(change)) in "\n".join(dt.v1_stopping_rows(V1))
    assert dt.v1_stopping_rows(V1)[2].startswith(f"| 0 | {_values('grpo-s0', 'response/truncated_frac')[0]:.2f} → ")


def test_heldout_entropy_retention_difference_and_truncation():
    rows = "\n".join(dt.v1_entropy_rows(V1))
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
    row = next(r for r in dt.v1_holm_rows(V1) if "`real-klcov-entropy`" in r)
    assert f"| {p:.4f} |" in row
    cells = [c.strip() for c in row.split("|")[1:-1]]
    ps = sorted(float(r.split("|")[3]) for r in dt.v1_holm_rows(V1)[2:])
    rank = ps.index(pytest.approx(p, abs=5e-5))
    holm = max(min(1.0, (6 - j) * ps[j]) for j in range(rank + 1))  # step-down: max over the ranks so far
    assert float(cells[3]) == pytest.approx(holm, abs=4e-4)  # from p-values printed to 4 decimals
    assert cells[4] == ("reproduced" if holm <= 0.025 else "inconclusive")


# --- docs/regime.md -------------------------------------------------------------------------------------


def _split(p: dict[int, float], n: int, share: float = 0.5) -> dict:
    return {**{f"pass@{k}": v for k, v in p.items()}, "n": n, "route_share_of_correct": share}


def _rows(text: str) -> list[str]:
    """The printed table's lines, from its header on (the opening source line left out)."""
    lines = text.splitlines()
    return lines[2:] if lines[0].startswith(("Data:", "Measured")) else lines


def test_passk_table_gap_and_route_share(tmp_path):
    p = {1: 0.1, 4: 0.2, 16: 0.3, 64: 0.45, 256: 0.6}
    f = _write(tmp_path / "w.json", {"val": _split(p, 256, 0.04), "hard": _split(p, 256, 1.0)})
    rows = _rows(dt.print_regime_passk(str(f), tmp_path))
    assert rows[2] == "| val (n = 256) | 0.100 | 0.200 | 0.300 | 0.450 | 0.600 | 0.350 | 0.04 |"
    assert rows[3].endswith("| 0.350 | 1.00 |")


def test_warmstarts_table_reads_pass_at_n(tmp_path):
    p = {1: 0.0834, 64: 0.5}
    f = _write(tmp_path / "w.json", {"val": _split(p, 64), "hard": _split({1: 0.0, 64: 0.25}, 64)})
    assert (
        _rows(dt.print_regime_warmstarts([f"LS 0.2, 0.95={f}"], tmp_path))[2]
        == "| LS 0.2, 0.95 | 64 | 0.083 | 0.500 | 0.000 | 0.250 |"
    )


def test_comparison_table_grpo_first_with_signed_deltas(tmp_path):
    col = {"mean": 0.5, "per_seed": [0.4, 0.6]}
    grpo = {"seeds": [1, 2], **{key: col for _, key in dt.COMPARISON_COLUMNS}}
    other = {
        "seeds": [1],
        **{key: {"mean": 2.5, "per_seed": [2.5], "minus_grpo_mean": 2.0} for _, key in dt.COMPARISON_COLUMNS},
    }
    f = _write(tmp_path / "c.json", {"methods": {"zeta": other, "grpo": grpo}})
    rows = _rows(dt.print_regime_comparison(str(f), tmp_path))
    assert rows[2].startswith("| grpo | 1,2 | 0.500 (0.400, 0.600) |")
    assert rows[3].startswith("| zeta | 1 | 2.500; Δ +2.000 |")


def test_long_table_and_plateau(tmp_path):
    evals = [
        {"step": s, "val/acc": a, "val/pass@k": 0.5, "hard/acc": 0.1, "hard/pass@k": 0.2, "val/entropy": h}
        for s, a, h in ((0, 0.1, 0.5), (20, 0.2, 0.25))
    ]
    long = {
        "evals": evals, "plateau_step": 20, "window_evals": 5, "window_slopes_per_100_steps": [[-0.05, 0.01]],
        "mean_acc_after": 0.2, "entropy_at_plateau": 0.25, "entropy_final": 0.25,
    }  # fmt: skip
    out = dt.print_regime_long(str(_write(tmp_path / "c.json", {"long_grpo": long})), tmp_path)
    assert "| step | 0 | 20 |" in out and "| entropy (nats) | 0.50 | 0.25 |" in out
    assert "Plateau at step 20" in out and "−0.050 ± 0.010" in out


def test_flow_table_ratio_and_low_p_share(tmp_path):
    setting = {
        "P": 16, "G": 16, "temperature": 1.0, "acc": 0.1, "entropy": 1.5, "S_pos": 10.0, "S_neg": 35.0,
        "lambda_star": 0.7, "lambda_star_shuffled": -0.05, "lambda_star_seqnorm": 0.69,
        "cells": {"A<0,p<0.2": {"S_neg_share": 0.83}},
    }  # fmt: skip
    f = _write(tmp_path / "f.json", {"settings": [setting, {**setting, "P": 4, "G": 64}]})
    rows = _rows(dt.print_regime_flow([f"warm={f}"], tmp_path))
    assert rows[2] == "| warm | 16×16, 1.0 | 0.100 | 1.50 | 10.0 | 35.0 | 3.5 | 0.700 | −0.050 | 0.690 | 0.83 |"
    assert rows[3].startswith("|  | 4×64, 1.0 |")


@pytest.mark.parametrize("argv", [["regime-flow", "no-label.json"], ["regime-passk", "missing.json"]])
def test_bad_arguments_are_named(argv):
    res = _cli("--print", *argv)
    assert res.returncode == 2 and argv[1] in res.stderr


def test_the_docs_comparison_carries_the_committed_values():
    page = (ROOT / "docs" / "regime.md").read_text()
    methods = json.loads((ROOT / "docs/results/regime/comparison.json").read_text())["methods"]
    for name, m in methods.items():
        mean = m["hard_pass@256_n256"]["mean"]
        assert f"| {name} | {','.join(map(str, m['seeds']))} | {mean:.3f}" in page, name


# --- docs/integrations.md: TRL's own GRPO tests against the adapter (tests/support/trl_suite.py's record) --

# The tail of `pytest -q -rA` on a file of four tests: two pass, one fails, one errors, one is skipped.
LOG_A = """\
..FE s
=========================== short test summary info ============================
PASSED tests/test_grpo_trainer.py::TestGRPO::test_training
PASSED tests/test_grpo_trainer.py::TestGRPO::test_beta
SKIPPED [1] tests/test_grpo_trainer.py:88: requires vllm
FAILED tests/test_grpo_trainer.py::TestGRPO::test_vision - OSError: no hub
ERROR tests/test_grpo_trainer.py::TestGRPO::test_tools - KeyError
2 passed, 1 failed, 1 skipped, 1 error in 12.34s
"""
LOG_B = LOG_A.replace(
    "PASSED tests/test_grpo_trainer.py::TestGRPO::test_beta",
    "FAILED tests/test_grpo_trainer.py::TestGRPO::test_beta - ValueError",
).replace("2 passed, 1 failed", "1 passed, 2 failed")


def test_pytest_report_becomes_counts_and_outcomes():
    assert trl_suite.counts(LOG_A) == {"passed": 2, "failed": 1, "skipped": 1, "errors": 1}
    assert trl_suite.outcomes(LOG_A) == {
        "TestGRPO::test_training": "PASSED",
        "TestGRPO::test_beta": "PASSED",
        "TestGRPO::test_vision": "FAILED",
        "TestGRPO::test_tools": "ERROR",
    }
    assert trl_suite.counts("") == {}
    assert trl_suite.wall_seconds(LOG_A) == 12.34
    assert trl_suite.wall_seconds("1 passed in 1423.20s (0:23:43)") == 1423.2
    assert trl_suite.wall_seconds("") is None and trl_suite.wall_seconds("interrupted") is None


def _record(tmp_path: Path, log_b: str) -> Path:
    data = {
        "date": "2099-01-01T00:00:00+00:00",
        "machine": "a test CPU, 2 CPUs",
        "command": "python tests/support/trl_suite.py TRL_CHECKOUT WORKDIR",
        "versions": {"trl": "9.9.9", "transformers": "9.9.9", "python": "3.11"},
        "trl_commit": "0123456789abcdef",
        "entflow_commit": "abc1234",
        "sides": {
            side: {
                "trainer": trainer,
                "counts": trl_suite.counts(log),
                "seconds": trl_suite.wall_seconds(log),
                "outcomes": trl_suite.outcomes(log),
            }
            for side, trainer, log in (("A", "trl.GRPOTrainer", LOG_A), ("B", "EntflowGRPOTrainer", log_b))
        },
    }
    return _write(tmp_path / "trl_suite.json", data)


def test_the_table_counts_errors_as_failures_and_names_what_differs(tmp_path):
    table = dt.print_trl_suite(str(_record(tmp_path, LOG_B)), tmp_path)
    assert "| A, `trl.GRPOTrainer` | 2 | 2 | 1 | 0.2 |" in table  # 12.34 s
    assert "| B, `EntflowGRPOTrainer` | 1 | 3 | 1 | 0.2 |" in table
    assert "1 tests differ, 1 of them passing only with `trl.GRPOTrainer`:" in table
    assert "- `TestGRPO::test_beta`: PASSED with trl.GRPOTrainer, FAILED with EntflowGRPOTrainer" in table
    assert "trl 9.9.9" in table and "commit 0123456789" in table


def test_the_same_outcomes_say_so(tmp_path):
    table = dt.print_trl_suite(str(_record(tmp_path, LOG_A)), tmp_path)
    assert "Every test has the same outcome on both sides." in table
    assert "(a note)" not in table
    noted = tmp_path / "noted.json"
    noted.write_text(json.dumps({**json.loads(_record(tmp_path, LOG_A).read_text()), "note": "a note"}))
    assert "Data: `" + str(noted) + "`. (a note)" in dt.print_trl_suite(str(noted), tmp_path)
    assert "| B, `EntflowGRPOTrainer` | 2 | 2 | 1 | 0.2 |" in table


def test_the_record_holds_both_sides_and_where_they_ran(tmp_path):
    pytest.importorskip("trl")
    rec = trl_suite.record(tmp_path, [str(tmp_path), "work", "-k", "beta"], {"A": LOG_A, "B": LOG_B})
    assert rec["command"] == "python tests/support/trl_suite.py TRL_CHECKOUT WORKDIR -k beta"
    assert rec["trl_commit"] == "unknown"  # tmp_path is no git checkout
    assert rec["sides"]["B"]["counts"] == {"passed": 1, "failed": 2, "skipped": 1, "errors": 1}
    assert rec["sides"]["B"]["outcomes"]["TestGRPO::test_beta"] == "FAILED"
    assert rec["sides"]["A"]["seconds"] == 12.34
    assert {"date", "machine", "versions", "entflow_commit"} <= rec.keys()


def test_the_plan_and_series_printers_say_what_is_missing(tmp_path):
    """Before a part's plan is committed, and before its series is judged, the printers say so (and
    name the command that judges) instead of printing an empty table."""
    assert dt.print_plan("real", tmp_path) == "No plan for `real` is committed yet.\n"
    series = dt.print_series("real", tmp_path)
    assert series.startswith("The `real` series is not judged yet") and "series.py judge real" in series
    assert dt.print_series("lab", ROOT).startswith("| claim | δ |")  # the committed lab series is judged
