"""``entflow eval --model ... --data ...`` (cli/eval.py) end to end on a tiny in-process model: the
results file and the printed table; bad input exits 2 with one line naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from entflow.lab.setup import train_lab
from support.lab_micro import micro_run_config
from support.real_tiny import save_tiny_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_entflow_eval_model_end_to_end(tiny_dir, tmp_path, capsys):
    from entflow.cli.main import main

    data = _jsonl(tmp_path / "d.jsonl", [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(3)])
    out = tmp_path / "r.json"
    rc = main(
        [
            "eval",
            "--model",
            str(tiny_dir),
            "--data",
            str(data),
            "--n",
            "3",
            "--k",
            "2",
            "--samples",
            "3",
            "--max-new-tokens",
            "4",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    res = json.loads(out.read_text())
    assert set(res["metrics"]) == {"avg@2", "pass@2", "maj@2", "greedy"}
    for m in res["metrics"].values():
        assert 0.0 <= m["value"] <= 1.0 and m["se"] >= 0.0
    assert res["settings"]["n_samples"] == 3 and res["settings"]["n_problems"] == 3
    assert res["settings"]["temperature"] == 1.0 and res["settings"]["max_new_tokens"] == 4
    assert 0.0 <= res["unparseable_frac"] <= 1.0 and res["samples_per_s"] > 0
    assert 1.0 <= res["response_len"] <= 4.0 and res["token_entropy"] > 0
    printed = capsys.readouterr().out
    assert "pass@2" in printed and "maj@2" in printed and "greedy" in printed


def test_cli_eval_bad_input_exit_code(tmp_path, capsys):
    from entflow.cli.main import main

    assert main(["eval", "--model", str(tmp_path / "missing"), "--data", "gsm_symbolic", "--k", "2"]) == 2
    assert "model" in capsys.readouterr().err
    assert main(["eval", "--model", "smollm2", "--data", "gsm_symbolic", "--k", "4", "--samples", "2"]) == 2
    assert "k=4 exceeds n_samples=2" in capsys.readouterr().err


def test_eval_uses_the_runs_task_params_and_temperature(tmp_path, micro_policy, capsys):
    from entflow.cli.main import main
    from entflow.lab.evaluate import eval_settings as lab_eval_settings

    params = {"validation_size": 5, "max_target": 40}
    run = train_lab(micro_run_config(tmp_path, micro_policy, name="e", steps=1, task_params=params, temperature=0.7))
    _, task, temp = lab_eval_settings(run)
    assert task.validation_size == 5 and task.max_target == 40 and temp == 0.7
    assert all(p.answer.target <= 40 for p in task.validation_set())
    _, _, temp = lab_eval_settings(run, temperature=1.3)
    assert temp == 1.3
    assert main(["eval", str(run), "--k", "2"]) == 0
    out = capsys.readouterr().out
    assert "5 held-out prompts" in out and "temperature 0.7" in out


def test_a_long_line_is_printed_whole_when_captured(tmp_path, micro_policy, capsys, monkeypatch):
    """Captured (no terminal) and with COLUMNS unset, a line longer than 200 characters (the run's
    path, padded) is printed on one line: rich would wrap it at 80 columns (cli_console). The
    path's ``[seed-0]`` is printed as it is, not read as rich markup."""
    from entflow.cli.main import main

    monkeypatch.delenv("COLUMNS", raising=False)
    deep = tmp_path / ("long-" * 20) / ("path-" * 20) / "run[seed-0]"  # a run folder ~200 characters deep
    params = {"validation_size": 5, "max_target": 40}
    run = train_lab(micro_run_config(deep, micro_policy, name="e", steps=1, task_params=params, temperature=0.7))
    assert len(str(run)) > 200
    assert main(["eval", str(run), "--k", "2"]) == 0
    out = capsys.readouterr().out
    policy = run / "checkpoints" / "final"  # the policy it scores, named first on the line
    line = next((ln for ln in out.splitlines() if ln.startswith(f"{policy}: ")), None)
    assert line is not None, out
    assert len(line) > 200 and line.endswith(", 5 held-out prompts, k=2, temperature 0.7"), line
