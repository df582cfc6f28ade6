"""``entflow doctor``: JSON and table output, exit code 0 / 1 / 2, run_checks' arguments."""

from __future__ import annotations

import json

import pytest

from entflow.cli.main import main
from entflow.doctor import CHECKS, run_checks
from entflow.errors import ParameterError


def test_json_output_and_exit_code_zero(capsys):
    assert main(["doctor", "--quick", "--only", "token_stats,gradients", "--device", "cpu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["quick"] is True
    assert {"torch", "entflow", "trl", "verl", "triton"} <= set(report["environment"])
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["loss_gradient[cpu,steer]"] == "PASS"
    assert statuses["token_stats[cpu,bfloat16,triton]"] == "SKIP"
    skip = next(c for c in report["checks"] if c["status"] == "SKIP")
    assert skip["skipped_reason"] and skip["ok"] is True
    ran = [c for c in report["checks"] if c["status"] == "PASS"]
    assert all(c["error"] is not None and c["error"] <= c["tolerance"] for c in ran)


def test_a_failing_check_gives_exit_code_one_and_a_table(monkeypatch, capsys):
    monkeypatch.setitem(CHECKS, "token_stats", ("support.doctor_faults:check_token_stats_with_wrong_entropy", True))
    assert main(["doctor", "--quick", "--only", "token_stats", "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "token_stats[cpu,float32,chunked]" in out and "FAIL" in out and "--json" in out
    assert main(["doctor", "--quick", "--only", "token_stats", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False


def test_bad_arguments_are_typed_errors(capsys):
    assert main(["doctor", "--only", "token_stats,nonsense"]) == 2
    assert "only" in capsys.readouterr().err
    with pytest.raises(ParameterError, match="device"):
        run_checks(device="not-a-device")
    with pytest.raises(ParameterError, match="not visible"):
        run_checks(device="xla")


def test_json_of_a_non_finite_error_is_valid_json():
    from entflow.doctor.result import compared

    r = compared("x", float("nan"), 1e-5)
    assert r.status == "FAIL"  # a NaN error never passes
    text = json.dumps(r.to_dict(), allow_nan=False)
    assert json.loads(text)["error"] == "nan"


def test_each_check_is_printed_once(capsys):
    """The table is the one place a check's line appears (progress is a transient status line)."""
    assert main(["doctor", "--quick", "--only", "token_stats", "--device", "cpu"]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    names = [c.name for c in run_checks(device="cpu", quick=True, only=["token_stats"])]
    assert names
    for name in names:
        assert text.count(name) == 1, (name, text)
