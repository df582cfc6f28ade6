"""The final coverage evaluation (``coverage_n`` → ``coverage.json``) and the hard split's
``val/hard_acc`` on micro runs; the pass@k values are checked against exact
combinatorics (``math.comb``) over the stored per-problem correct counts.

The micro policy solves no countdown problem, so every count would be 0 and every pass@k
trivially 0; the runs here score responses with a stand-in reward (response length divisible by
3), which gives mixed per-problem counts to check the curve on."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from entflow.errors import ConfigError
from entflow.lab.config import build_config
from entflow.lab.evaluate import coverage_splits
from entflow.lab.setup import train_lab
from entflow.trainer.rundir import read_jsonl
from support.coverage_calls import coverage_seeds

ROUTES_PARAMS = {"validation_size": 6, "hard_size": 5}


def micro_config(out_dir: Path, policy: str, **overrides):
    base = {
        "out_dir": str(out_dir),
        "policy_path": policy,
        "task": "countdown_routes",
        "task_params": ROUTES_PARAMS,
        "steps": 2,
        "prompts_per_step": 4,
        "group_size": 4,
        "eval_every": 1,
        "eval_k": 2,
        "lr": 3e-3,
        "progress": False,
    }
    return build_config(base | overrides)


def exact_pass_at_k(n: int, c: int, k: int) -> float:
    """1 − C(n − c, k) / C(n, k) with Python's exact integers (Chen et al. 2021 Eq. 1)."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def length_reward(self, problem, response: str) -> float:
    """Stand-in reward: 1 when the response's length is a multiple of 3."""
    return 1.0 if len(response) % 3 == 0 else 0.0


@pytest.fixture(scope="module")
def routes_runs(tmp_path_factory, micro_policy) -> tuple[Path, Path]:
    """The same micro countdown_routes run with coverage_n = 8 and with coverage off."""
    from entflow.lab.tasks import CountdownRoutesTask

    out = tmp_path_factory.mktemp("coverage")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CountdownRoutesTask, "reward", length_reward)
        on = train_lab(micro_config(out, micro_policy, name="on", coverage_n=8))
        off = train_lab(micro_config(out, micro_policy, name="off"))
    return on, off


@pytest.fixture
def length_rewarded(monkeypatch):
    from entflow.lab.tasks import CountdownRoutesTask

    monkeypatch.setattr(CountdownRoutesTask, "reward", length_reward)


def test_coverage_json_schema_and_exact_pass_at_k(routes_runs):
    on, _ = routes_runs
    data = json.loads((on / "coverage.json").read_text())
    assert data["n"] == 8 and data["temperature"] == 1.0
    assert data["warm"]["step"] == 0 and data["final"]["step"] == 2
    sizes = {"val": ROUTES_PARAMS["validation_size"], "hard": ROUTES_PARAMS["hard_size"]}
    for which in ("warm", "final"):
        splits = data[which]["splits"]
        assert set(splits) == {"val", "hard"}
        for name, split in splits.items():
            correct = split["correct"]
            assert split["n_problems"] == sizes[name] == len(correct)
            assert all(isinstance(c, int) and 0 <= c <= 8 for c in correct)
            assert list(split["pass_at_k"]) == ["1", "2", "4", "8"]
            for k, v in split["pass_at_k"].items():
                want = sum(exact_pass_at_k(8, c, int(k)) for c in correct) / len(correct)
                assert v == pytest.approx(want, rel=0, abs=1e-12), (which, name, k)
            # pass@1 is the mean accuracy, pass@n is the share of problems with any correct sample
            assert split["pass_at_k"]["1"] == pytest.approx(sum(correct) / (8 * len(correct)), abs=1e-12)
            assert split["pass_at_k"]["8"] == pytest.approx(sum(c > 0 for c in correct) / len(correct), abs=1e-12)
    # the check is not vacuous: some problem has neither 0 nor all 8 correct
    counts = [c for w in ("warm", "final") for s in data[w]["splits"].values() for c in s["correct"]]
    assert any(0 < c < 8 for c in counts)


def test_warm_curve_is_the_warm_start_under_the_same_seeds(routes_runs, micro_policy, length_rewarded):
    """The stored warm entry is reproduced by evaluating the warm start again (seeds per split, not
    per step), and the final entry by evaluating the final checkpoint."""
    from entflow.lab.policy import load_policy
    from entflow.lab.tasks import get_task

    on, _ = routes_runs
    data = json.loads((on / "coverage.json").read_text())
    cfg = micro_config(on.parent, micro_policy, name="on", coverage_n=8)
    task = get_task("countdown_routes", **ROUTES_PARAMS)
    for which, path in (("warm", micro_policy), ("final", on / "checkpoints" / "final")):
        model, tok = load_policy(path)
        again = coverage_splits(model, tok, task, cfg)
        assert {s: v["correct"] for s, v in again.items()} == {
            s: v["correct"] for s, v in data[which]["splits"].items()
        }


def test_coverage_leaves_training_bit_identical_and_hard_acc_is_logged(routes_runs):
    on, off = routes_runs
    assert not (off / "coverage.json").exists()  # off by default
    assert (on / "metrics.jsonl").read_text() == (off / "metrics.jsonl").read_text()
    recs = read_jsonl(on / "metrics.jsonl")
    evals = [r for r in recs if "val/acc" in r]
    assert [r["step"] for r in evals] == [0, 1, 2]
    for r in evals:  # avg@k over eval_k = 2 samples of 5 problems: a multiple of 1/10
        assert 0.0 <= r["val/hard_acc"] <= 1.0
        assert r["val/hard_acc"] * 10 == pytest.approx(round(r["val/hard_acc"] * 10), abs=1e-9)
    assert any(r["val/hard_acc"] > 0 for r in evals)


def test_no_hard_split_no_hard_metric(tmp_path, micro_policy):
    """countdown has no hard_set(): no val/hard_acc, and coverage covers the validation split only."""
    cfg = micro_config(tmp_path, micro_policy, task="countdown", task_params={"validation_size": 8}, coverage_n=4)
    cfg.steps = 1
    run = train_lab(cfg)
    assert not any("val/hard_acc" in r for r in read_jsonl(run / "metrics.jsonl"))
    data = json.loads((run / "coverage.json").read_text())
    assert set(data["warm"]["splits"]) == set(data["final"]["splits"]) == {"val"}
    assert list(data["final"]["splits"]["val"]["pass_at_k"]) == ["1", "2", "4"]


@pytest.mark.parametrize(
    ("override", "key"), [({"coverage_n": -1}, "coverage_n"), ({"coverage_n": 4, "coverage_k": [1, 8]}, "coverage_k")]
)
def test_bad_coverage_keys_name_the_key(tmp_path, micro_policy, override, key):
    with pytest.raises(ConfigError, match=key):
        micro_config(tmp_path, micro_policy, **override)


def test_coverage_k_selects_the_curve_points(tmp_path, micro_policy, length_rewarded):
    from entflow.lab.policy import load_policy
    from entflow.lab.tasks import get_task

    cfg = micro_config(tmp_path, micro_policy, coverage_n=6, coverage_k=[1, 3, 6])
    model, tok = load_policy(micro_policy)
    out = coverage_splits(model, tok, get_task("countdown_routes", **ROUTES_PARAMS), cfg)
    for split in out.values():
        assert list(split["pass_at_k"]) == ["1", "3", "6"]
        for k, v in split["pass_at_k"].items():
            want = sum(exact_pass_at_k(6, c, int(k)) for c in split["correct"]) / len(split["correct"])
            assert v == pytest.approx(want, abs=1e-12)


def test_warm_coverage_is_cached_per_warm_start_and_seed(tmp_path, micro_policy, length_rewarded, monkeypatch):
    """Runs that share a cached warm start, a seed and the coverage settings evaluate the warm
    start's coverage once: the second run reads it from the warm start's folder, and its
    coverage.json and metrics are byte-identical to the first's (the evaluation runs in a forked
    RNG, so skipping it changes nothing). Another seed misses; a policy outside the cache is
    never written to."""
    import shutil

    import entflow.lab.evaluate as lab_evaluate

    calls = coverage_seeds(monkeypatch, lab_evaluate, "coverage_splits")
    cache = tmp_path / "cache"
    policy = shutil.copytree(micro_policy, cache / "countdown-micro")
    monkeypatch.setenv("ENTFLOW_CACHE", str(cache))
    a = train_lab(micro_config(tmp_path / "runs", str(policy), name="a", coverage_n=8))
    assert calls == [0, 0] and len(list(Path(policy).glob("coverage-*.json"))) == 1
    b = train_lab(micro_config(tmp_path / "runs", str(policy), name="b", coverage_n=8))
    assert calls == [0, 0, 0]  # only b's final policy was evaluated
    train_lab(micro_config(tmp_path / "runs", str(policy), name="b", coverage_n=8), resume=True)
    assert calls == [0, 0, 0]  # resuming a finished run evaluates nothing again
    assert (a / "coverage.json").read_bytes() == (b / "coverage.json").read_bytes()
    assert (a / "metrics.jsonl").read_bytes() == (b / "metrics.jsonl").read_bytes()
    train_lab(micro_config(tmp_path / "runs", str(policy), name="c", coverage_n=8, seed=1))
    assert calls == [0, 0, 0, 1, 1] and len(list(Path(policy).glob("coverage-*.json"))) == 2
    monkeypatch.setenv("ENTFLOW_CACHE", str(tmp_path / "elsewhere"))  # the policy is now a user's folder
    train_lab(micro_config(tmp_path / "runs", str(policy), name="d", coverage_n=8, seed=2))
    assert calls[-2:] == [2, 2] and len(list(Path(policy).glob("coverage-*.json"))) == 2
