"""A log too short for the law fit gets a defined answer: ``entflow analyze`` on the committed verl
log of a real 3-step ``run_cpu.sh`` run (tests/fixtures/logs/verl/, see its README.md) reports the
entropy, the reward and the verdict "too short to fit the law: 3 points, needs 4", lists the
``entflow/*`` metrics the run logged, and exits 0; one point is reported the same way; a log with no
point is a ``LogError`` naming the file. Every number is checked against the values read straight
from the JSONL with ``json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from entflow.analysis.law import MIN_POINTS
from entflow.analysis.log_readers import read_log
from entflow.analysis.short_log import method_metrics, short_log
from entflow.cli.main import main
from entflow.errors import LogError

VERL = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "verl" / "verl.jsonl"


def records(path: Path = VERL) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def column(key: str, recs: list[dict] | None = None) -> list[float]:
    return [r["data"][key] for r in recs or records()]


def test_the_fixture_is_a_real_three_step_verl_log_with_method_metrics():
    recs = records()
    assert [r["step"] for r in recs] == [1, 2, 3] and MIN_POINTS == 4
    assert all("actor/entflow/kl_cov/n_selected" in r["data"] and "timing_s/step" in r["data"] for r in recs)


def test_a_three_step_log_reports_entropy_reward_and_why_there_is_no_fit():
    s = short_log(read_log(VERL))
    H, R = column("actor/entropy"), column("critic/score/mean")
    assert s is not None and s.n_points == 3
    assert s.keys == {"entropy": "actor/entropy", "reward": "critic/score/mean"}
    assert s.steps.tolist() == [1, 2, 3]
    assert s.entropy.tolist() == pytest.approx(H, rel=1e-12) and s.reward.tolist() == pytest.approx(R, rel=1e-12)
    assert s.retention == pytest.approx(H[-1] / H[0], rel=1e-12)
    assert s.reason == "too short to fit the law: 3 points, needs 4"
    d = s.to_dict()
    assert d["verdict"] == "too_short" and d["n_points"] == 3 and d["min_points"] == 4


def test_the_method_metrics_are_every_entflow_key_with_its_first_and_last_value():
    recs = records()
    got = {m.key: m for m in method_metrics(read_log(VERL))}
    want = sorted({k for r in recs for k in r["data"] if "entflow/" in k})
    assert sorted(got) == want and "actor/entflow/kl_cov/kl_mean" in got
    for key, m in got.items():
        vals = [r["data"][key] for r in recs if r["data"].get(key) is not None]
        assert (m.n_steps, m.first, m.last) == (len(vals), pytest.approx(vals[0]), pytest.approx(vals[-1])), key


def test_entflow_analyze_on_the_three_step_run_folder_exits_0(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "verl.jsonl").write_text(VERL.read_text())
    assert main(["analyze", str(run), "--json"]) == 0
    out = capsys.readouterr().out
    H = column("actor/entropy")
    assert "verdict: too short to fit the law: 3 points, needs 4" in out
    assert f"entropy (actor/entropy): {H[0]:.4g} -> {H[-1]:.4g}" in out
    assert "actor/entflow/kl_cov/n_selected: 3," in out
    data = json.loads((run / "entflow-analysis" / "analysis.json").read_text())
    assert data["verdict"] == "too_short" and data["entropy"] == pytest.approx(H)
    assert not (run / "entflow-analysis" / "report.html").exists()  # no fit, no report


def test_one_point_is_reported_without_a_retention(tmp_path, capsys):
    one = tmp_path / "one.jsonl"
    one.write_text(VERL.read_text().splitlines()[0] + "\n")
    s = short_log(read_log(one))
    assert s is not None and s.n_points == 1 and s.retention is None
    assert s.reason == "too short to fit the law: 1 point, needs 4"
    assert main(["analyze", str(one)]) == 0
    out = capsys.readouterr().out
    assert "verdict: too short to fit the law: 1 point, needs 4" in out and "retention" not in out


def test_no_point_is_a_typed_error_naming_the_file(tmp_path, capsys):
    recs = records()
    split = tmp_path / "split.jsonl"  # entropy at step 1, the reward only at step 2: no step has both
    a = {"step": 1, "data": {"actor/entropy": recs[0]["data"]["actor/entropy"]}}
    b = {"step": 2, "data": {"critic/score/mean": recs[1]["data"]["critic/score/mean"]}}
    split.write_text(json.dumps(a) + "\n" + json.dumps(b) + "\n")
    with pytest.raises(LogError, match="no logged step carries both actor/entropy and critic/score/mean") as e:
        short_log(read_log(split))
    assert e.value.path == str(split)
    assert main(["analyze", str(split)]) == 2
    assert str(split) in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["analyze", str(empty)]) == 2
    assert str(empty) in capsys.readouterr().err


def test_a_long_enough_log_is_not_short(capsys):
    trl = VERL.parents[1] / "trl" / "trainer_state.json"
    assert short_log(read_log(trl)) is None
    assert method_metrics(read_log(trl)) == []  # plain TRL: no entflow method
