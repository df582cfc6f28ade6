"""benchmarks/method_overhead.py: the per-round ratios to grpo, their 95 % interval and verdict
against 1.05×, the median inside a round, and the table of a saved result.

The interval is checked against closed forms of Student's t quantile: with ν = 1 degree of freedom
t_p = tan(π(p − 1/2)) (Cauchy), with ν = 2 t_p = a·√(2/(1 − a²)), a = 2p − 1 (from
F(t) = 1/2 + t/(2√(t² + 2))); no scipy in the reference.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from entflow.errors import AnalysisError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import method_overhead as mo  # noqa: E402  (benchmarks/method_overhead.py)


def t_nu1(p: float) -> float:
    return math.tan(math.pi * (p - 0.5))


def t_nu2(p: float) -> float:
    a = 2 * p - 1
    return a * math.sqrt(2 / (1 - a * a))


def test_interval_of_three_rounds_by_hand():
    """log r = 0, 0.1, 0.2: mean 0.1, sample std 0.1, n = 3 → exp(0.1 ∓ t_{0.975,2}·0.1/√3)."""
    ratios = [1.0, math.exp(0.1), math.exp(0.2)]
    half = t_nu2(0.975) * 0.1 / math.sqrt(3)
    assert t_nu2(0.975) == pytest.approx(4.302653, abs=1e-6)  # the printed t-table value
    q = mo.ratio_summary(ratios)
    assert q["n"] == 3
    assert q["median"] == pytest.approx(math.exp(0.1), rel=1e-12)
    assert q["geo_mean"] == pytest.approx(math.exp(0.1), rel=1e-12)
    assert q["lo"] == pytest.approx(math.exp(0.1 - half), rel=1e-12)  # 0.8621
    assert q["hi"] == pytest.approx(math.exp(0.1 + half), rel=1e-12)  # 1.4168
    assert q["within"] == "open"  # the interval holds 1.05


def test_interval_of_two_rounds_by_hand():
    """r = 1.02, 1.04: x = log r, s = |x1 − x2|/√2, half = t_{0.975,1}·s/√2 = 12.706·|x1 − x2|/2."""
    x1, x2 = math.log(1.02), math.log(1.04)
    half = t_nu1(0.975) * abs(x1 - x2) / 2
    q = mo.ratio_summary([1.02, 1.04])
    assert q["median"] == pytest.approx(1.03, rel=1e-12)  # the median of two is their mean
    assert q["geo_mean"] == pytest.approx(math.sqrt(1.02 * 1.04), rel=1e-12)
    assert q["lo"] == pytest.approx(math.exp((x1 + x2) / 2 - half), rel=1e-12)
    assert q["hi"] == pytest.approx(math.exp((x1 + x2) / 2 + half), rel=1e-12)
    assert q["within"] == "open"
    # a 90 % interval is narrower: t_{0.95,1} = tan(0.45π)
    q90 = mo.ratio_summary([1.02, 1.04], level=0.90)
    assert q90["hi"] == pytest.approx(math.exp((x1 + x2) / 2 + t_nu1(0.95) * abs(x1 - x2) / 2), rel=1e-12)


@pytest.mark.parametrize(
    ("ratios", "within"),
    [
        ([1.01, 1.01, 1.01], "yes"),  # no spread: [1.01, 1.01], inside 1.05
        ([1.06, 1.06], "no"),  # no spread: [1.06, 1.06], above 1.05
        ([1.0, 1.02, 1.04, 0.99, 1.01], "yes"),
        ([1.10, 1.12, 1.09, 1.11], "no"),
        ([0.9, 1.2], "open"),
    ],
)
def test_verdict_against_the_limit(ratios, within):
    q = mo.ratio_summary(ratios)
    assert q["within"] == within
    assert q["lo"] <= q["geo_mean"] <= q["hi"]
    assert (q["hi"] <= mo.LIMIT) == (within == "yes")
    assert (q["lo"] > mo.LIMIT) == (within == "no")


def test_one_round_has_no_interval():
    q = mo.ratio_summary([1.01])
    assert math.isnan(q["lo"]) and math.isnan(q["hi"]) and q["within"] == "open" and q["median"] == 1.01


@pytest.mark.parametrize("ratios", [[], [1.0, 0.0], [1.0, -1.0], [1.0, math.nan], [math.inf]])
def test_bad_ratios_name_the_field(ratios):
    with pytest.raises(AnalysisError, match="ratios"):
        mo.ratio_summary(ratios)


def test_ratios_are_paired_per_round():
    """A machine that gets slower round by round slows grpo and the method alike: the paired
    ratios are all 1.1, so the interval is [1.1, 1.1] although the step times spread 4×."""
    per_round = {"grpo": [1.0, 2.0, 4.0], "x": [1.1, 2.2, 4.4]}
    medians, ratios = mo.summarize(per_round)
    assert medians == {"grpo": 2.0, "x": 2.2}
    q = ratios["x"]
    assert q["per_round"] == pytest.approx([1.1, 1.1, 1.1], rel=1e-12)
    assert q["lo"] == pytest.approx(1.1, rel=1e-12) and q["hi"] == pytest.approx(1.1, rel=1e-12)
    assert q["within"] == "no"
    assert "grpo" not in ratios


def test_interleave_keeps_the_median_inside_a_round_and_drops_warmup(monkeypatch):
    """A fake clock: each call of a step advances it by the next of that step's durations."""
    now = [0.0]
    monkeypatch.setattr(mo, "CLOCK", lambda: now[0])
    monkeypatch.setattr(mo.gc, "collect", lambda: 0)  # a fake clock: no heap to settle (slow in a full suite)
    durations = {
        "grpo": iter([9.0, 9.0, 9.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0]),  # round 0 is warm-up
        "x": iter([9.0, 9.0, 9.0, 1.0, 5.0, 2.0, 3.0, 3.0, 30.0]),
    }

    def step(name: str):
        def run() -> None:
            now[0] += next(durations[name])

        return run

    per_round = mo.interleave({n: step(n) for n in durations}, rounds=2, warmup=1, repeats=3)
    assert per_round == {"grpo": [1.0, 2.0], "x": [2.0, 3.0]}  # median of (1, 5, 2) and of (3, 3, 30)
    assert all(next(it, None) is None for it in durations.values())  # exactly (1 + 2) × 3 calls each


def test_from_json_prints_the_ratio_table_and_the_old_files(tmp_path):
    per_round = {"grpo": [1.0, 1.0, 1.0], "clipb": [1.0, 1.02, 1.04], "stare": [1.2, 1.2, 1.2]}
    medians, ratios = mo.summarize(per_round)
    case = "(b) model [4,8]"
    new = {"info": ["a line"], "repeats": 2, "interval": mo.INTERVAL, "results": {case: medians}}
    new |= {"rounds": {case: per_round}, "ratios": {case: ratios}}
    old = {"info": ["old"], "results": {case: medians}}  # written before the per-round ratios
    (tmp_path / "new.json").write_text(json.dumps(new))
    (tmp_path / "old.json").write_text(json.dumps(old))
    script = ROOT / "benchmarks" / "method_overhead.py"
    out = subprocess.run(
        [sys.executable, str(script), "--from-json", str(tmp_path / "new.json"), str(tmp_path / "old.json")],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    new_out, old_out = out.split("\nold\n")  # the old file's table follows its info line
    q = mo.ratio_summary([1.0, 1.02, 1.04])
    (clipb,) = [line for line in new_out.splitlines() if line.startswith("| clipb |")]
    (stare,) = [line for line in new_out.splitlines() if line.startswith("| stare |")]
    assert clipb.endswith(f"| 1020.0 | 1.020 | {q['lo']:.3f}–{q['hi']:.3f} | open |")
    assert stare.endswith("| 1200.0 | 1.200 | 1.200–1.200 | no |")
    assert "× grpo (median)" in new_out and "95 % interval" in new_out
    # the old file: medians and their ratio only, as before
    (old_stare,) = [line for line in old_out.splitlines() if line.startswith("| stare |")]
    assert old_stare.endswith("| 1200.0 | 1.200 |") and "interval" not in old_out


def test_loss_share_by_hand():
    """grpo's loss part 4 ms, the method's 5 ms, grpo's model step 2 s: share 0.001/2 = 0.0005;
    with (a)'s interval upper end 1.3: (1.3 − 1)·0.004/2 = 0.0006."""
    a_medians = {"grpo": 0.004, "clipb": 0.005, "entropy_bonus": 0.006}
    a_ratios = {"clipb": {"hi": 1.3}, "entropy_bonus": {"hi": 1.6}}
    shares = mo.loss_share(a_medians, a_ratios, {"grpo": 2.0, "clipb": 2.1, "entropy_bonus": 2.2})
    assert list(shares) == ["clipb"]  # entropy_bonus differentiates the entropy: more model work
    assert shares["clipb"]["extra_ms"] == pytest.approx(1.0, rel=1e-12)
    assert shares["clipb"]["share"] == pytest.approx(0.0005, rel=1e-12)
    assert shares["clipb"]["share_hi"] == pytest.approx(0.0006, rel=1e-12)
    (row,) = [line for line in mo.share_table(shares).splitlines() if line.startswith("| clipb |")]
    assert row == "| clipb | +1.00 | 1.0005 | 1.0006 |"


@pytest.mark.parametrize(
    ("name", "same"),
    [("clipb", True), ("stare", True), ("chord", True), ("entropy_bonus", False), ("simko", False)],
)
def test_same_model_work(name, same):
    """Only methods without an entropy gradient or top-K log-probs run grpo's model work."""
    assert mo.same_model_work(name) is same
    assert mo.same_model_work("kl_ref+ref_fwd") is False  # a reference forward inside the step


def test_interleave_spreads_the_reference_over_the_round(monkeypatch):
    """With reference_every = 2, grpo steps first and after every 2 others in each pass, and its
    round value is the median of those steps: one slow grpo step no longer moves every ratio."""
    now, calls = [0.0], []
    monkeypatch.setattr(mo, "CLOCK", lambda: now[0])
    monkeypatch.setattr(mo.gc, "collect", lambda: 0)  # a fake clock: no heap to settle (slow in a full suite)
    durations = {"grpo": iter([1.0, 1.0, 50.0, 2.0, 2.0, 2.0])}  # one round's 3 grpo steps, then the next's

    def step(name: str):
        def run() -> None:
            calls.append(name)
            now[0] += next(durations[name]) if name == "grpo" else 1.5

        return run

    names = ["grpo", "a", "b", "c", "d", "e"]
    per_round = mo.interleave({n: step(n) for n in names}, rounds=2, warmup=0, reference="grpo", reference_every=2)
    assert per_round["grpo"] == [1.0, 2.0]  # median of (1, 1, 50): the slow step does not count
    for r in range(2):
        order = calls[8 * r : 8 * r + 8]  # a round: 5 methods + 3 grpo steps
        assert order[0] == "grpo" and order[3] == "grpo" and order[6] == "grpo"
        assert sorted(order) == sorted(["grpo"] * 3 + ["a", "b", "c", "d", "e"])
    assert len(calls) == 16
    # without the spread: one grpo step a pass, as before
    calls.clear()
    durations["grpo"] = iter([3.0, 4.0])
    assert mo.interleave({n: step(n) for n in names}, rounds=2, warmup=0)["grpo"] == [3.0, 4.0]
    assert calls.count("grpo") == 2
