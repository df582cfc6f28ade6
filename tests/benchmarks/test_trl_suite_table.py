"""benchmarks/trl_suite_table.py and the record tests/support/trl_suite.py writes: pytest's own
``-rA`` report of a hand-made run parsed into counts and outcomes, and the table printed from it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import trl_suite_table as tt  # noqa: E402  (benchmarks/trl_suite_table.py)
from support import trl_suite  # noqa: E402

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
    path = tmp_path / "trl_suite.json"
    path.write_text(json.dumps(data))
    return path


def test_the_table_counts_errors_as_failures_and_names_what_differs(tmp_path):
    table = tt.suite_table(_record(tmp_path, LOG_B))
    assert "| A, `trl.GRPOTrainer` | 2 | 2 | 1 | 0.2 |" in table  # 12.34 s
    assert "| B, `EntflowGRPOTrainer` | 1 | 3 | 1 | 0.2 |" in table
    assert "1 tests differ, 1 of them passing only with `trl.GRPOTrainer`:" in table
    assert "- `TestGRPO::test_beta`: PASSED with trl.GRPOTrainer, FAILED with EntflowGRPOTrainer" in table
    assert "trl 9.9.9" in table and "commit 0123456789" in table


def test_the_same_outcomes_say_so(tmp_path):
    table = tt.suite_table(_record(tmp_path, LOG_A))
    assert "Every test has the same outcome on both sides." in table
    assert "(a note)" not in table
    noted = tmp_path / "noted.json"
    noted.write_text(json.dumps({**json.loads(_record(tmp_path, LOG_A).read_text()), "note": "a note"}))
    assert "Data: `" + str(noted) + "`. (a note)" in tt.suite_table(noted)
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
