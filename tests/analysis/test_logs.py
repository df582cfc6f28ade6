"""Log readers (entflow.analysis.log_readers, log_keys, collapse.analyze_log) on logs written by the
real writers: the fit of a known law (R = −0.1·e^H + 0.6) from each format, key detection and
overrides, bad input, and the CLI."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from entflow.analysis.collapse import analyze_log, analyze_series
from entflow.analysis.log_keys import KEY_TABLE, add_key
from entflow.analysis.log_readers import read_log
from entflow.cli.main import main
from entflow.errors import LogError
from support.log_writers import (
    A,
    B,
    law_series,
    trl_history,
    write_entflow_run,
    write_mlflow_csv,
    write_tensorboard,
    write_trainer_state,
    write_verl,
    write_wandb_csv,
)

N = 120


def check_fit(analysis, target):
    fit = analysis.to_dict()["fit"]["law"]
    assert analysis.target == target
    assert fit["a"] == pytest.approx(A, rel=0.05)
    assert fit["b"] == pytest.approx(B, abs=0.005)
    assert fit["ceiling"] == pytest.approx(B - A, abs=0.005)
    assert fit["r2"] > 0.97


@pytest.fixture(scope="module")
def verl_logs(tmp_path_factory):
    pytest.importorskip("verl")
    return write_verl(tmp_path_factory.mktemp("verl"), N, backends=("file", "tensorboard"))


def test_tensorboard_trl_tags(tmp_path):
    write_tensorboard(tmp_path / "runs" / "Nov25_host", N, val_tag="eval/reward")
    log, an = analyze_log(tmp_path)  # the output folder: the one TensorBoard run under runs/
    assert log.format == "tensorboard"
    steps, H, _, _, _ = law_series(N)
    np.testing.assert_array_equal(log.series["train/entropy"][0], steps)
    np.testing.assert_allclose(log.series["train/entropy"][1], H, rtol=1e-6)  # float32 in the event file
    assert an.source["keys"] == {"entropy": "train/entropy", "reward": "train/reward", "val": "eval/reward"}
    check_fit(an, "val")


def test_verl_file_logger(verl_logs):
    log, an = analyze_log(verl_logs["file"])
    assert log.format == "verl-jsonl"
    assert an.source["keys"]["entropy"] == "actor/entropy"
    assert an.source["keys"]["reward"] == "critic/score/mean"
    assert an.source["keys"]["val"] == "val-core/openai/gsm8k/acc/mean@1"
    assert an.source["keys"]["response_length"] == "response_length/mean"  # shown, not fitted
    assert an.source["keys"]["clip"] == "actor/pg_clipfrac"
    R = law_series(N)[2]
    np.testing.assert_array_equal(log.series["critic/score/mean"][1], R)  # JSON keeps float64 exactly
    check_fit(an, "val")
    # the folder holding the file is detected as well
    assert read_log(verl_logs["file"].parent).format == "verl-jsonl"


def test_verl_tensorboard(verl_logs):
    log, an = analyze_log(verl_logs["tensorboard"])
    assert log.format == "tensorboard"
    check_fit(an, "val")
    _, an_file = analyze_log(verl_logs["file"])
    assert an.law.params["a"] == pytest.approx(an_file.law.params["a"], rel=1e-5)  # float32 vs float64


def test_trainer_state_latest_checkpoint(tmp_path):
    write_trainer_state(tmp_path / "checkpoint-40" / "trainer_state.json", 40)
    write_trainer_state(tmp_path / "checkpoint-120" / "trainer_state.json", N)
    log, an = analyze_log(tmp_path)
    assert log.format == "trl-state" and log.path.parent.name == "checkpoint-120"  # not checkpoint-40 (string order)
    assert an.source["keys"]["val"] == "eval_reward" and an.source["keys"]["val_entropy"] == "eval_entropy"
    check_fit(an, "val")
    hist = trl_history(N)
    assert log.series["entropy"][1].tolist() == [r["entropy"] for r in hist if "entropy" in r]


def test_entflow_run_dir(tmp_path):
    run = write_entflow_run(tmp_path / "run", N)
    log, an = analyze_log(run)
    assert log.format == "entflow-run"
    assert an.source["keys"] == {
        "entropy": "entropy",
        "reward": "reward/mean",
        "val": "val/acc",
        "val_entropy": "val/entropy",
    }
    check_fit(an, "val")


def test_wandb_and_mlflow_csv(tmp_path):
    log, an = analyze_log(write_wandb_csv(tmp_path / "wandb.csv", N))
    assert log.format == "csv" and "train/entropy" in log.series and not any("__M" in k for k in log.series)
    check_fit(an, "reward")
    log, an = analyze_log(write_mlflow_csv(tmp_path / "mlflow.csv", N))
    assert an.source["keys"] == {"entropy": "entropy", "reward": "reward"}
    check_fit(an, "reward")


def test_key_overrides_and_table_extension(tmp_path):
    write_tensorboard(tmp_path, N, tags=("policy/H", "policy/score"))
    with pytest.raises(LogError) as e:
        analyze_log(tmp_path)
    assert e.value.key == "entropy" and "--entropy-key" in str(e.value) and str(tmp_path) in str(e.value)
    _, an = analyze_log(tmp_path, entropy_key="policy/H", reward_key="policy/score")
    check_fit(an, "reward")
    with pytest.raises(LogError) as e:
        analyze_log(tmp_path, entropy_key="policy/H", reward_key="policy/nope")
    assert e.value.key == "policy/nope"
    saved = {k: list(v) for k, v in KEY_TABLE.items()}
    try:
        add_key("entropy", "policy/H")
        add_key("reward", "policy/sc*")
        _, an = analyze_log(tmp_path)
        assert an.source["keys"] == {"entropy": "policy/H", "reward": "policy/score"}
    finally:
        KEY_TABLE.clear()
        KEY_TABLE.update(saved)


def _verl_lines(path: Path, rows):
    path.write_text("".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in rows))
    return path


@pytest.mark.parametrize("case", ["empty", "no-entropy", "nan", "null", "few", "backwards"])
def test_bad_logs_name_file_and_key(tmp_path, case):
    p = tmp_path / "run.jsonl"
    good = [(s, {"actor/entropy": 1.0 - 0.01 * s, "critic/score/mean": 0.1 * s}) for s in range(1, 11)]
    if case == "empty":
        state = tmp_path / "trainer_state.json"
        state.write_text(json.dumps({"log_history": []}))
        p, key = state, "log_history"
    elif case == "no-entropy":
        _verl_lines(p, [(s, {"critic/score/mean": d["critic/score/mean"]}) for s, d in good])
        key = "entropy"
    elif case == "nan":
        good[4][1]["actor/entropy"] = float("nan")
        _verl_lines(p, good)
        key = "actor/entropy"
    elif case == "null":  # verl's orjson writes NaN as null
        p.write_bytes(b"".join(json.dumps({"step": s, "data": d}).encode() + b"\n" for s, d in good[:3]))
        with p.open("ab") as f:
            f.write(b'{"step": 4, "data": {"actor/entropy": null, "critic/score/mean": 0.4}}\n')
        key = "actor/entropy"
    elif case == "few":
        _verl_lines(p, good[:3])
        key = "actor/entropy"
    else:  # two runs appended into one file
        _verl_lines(p, good + good)
        key = "actor/entropy"
    with pytest.raises(LogError) as e:
        analyze_log(p, strict=case == "nan")  # without strict a NaN step is dropped (next test)
    assert e.value.key == key and e.value.path == str(p)
    assert str(p) in str(e.value) and key in str(e.value)
    if case == "nan":
        assert "first at step 5" in str(e.value)


def test_nan_steps_are_dropped_and_counted(tmp_path):
    """A NaN entropy at two steps and an inf reward at a third: those three steps are left out, the
    count is in source.warnings, and the analysis equals analyze_series on the remaining steps."""
    rows = [
        (s, {"actor/entropy": 1.5 * math.exp(-s / 8) + 0.1, "critic/score/mean": 0.5 - 0.3 * math.exp(-s / 8)})
        for s in range(1, 31)
    ]
    rows[3][1]["actor/entropy"] = rows[9][1]["actor/entropy"] = float("nan")
    rows[6][1]["critic/score/mean"] = float("inf")
    p = _verl_lines(tmp_path / "run.jsonl", rows)
    _, an = analyze_log(p)
    warnings = an.source["warnings"]
    assert len(warnings) == 2
    assert "dropped 2 step(s) where actor/entropy is NaN or inf (first at step 4)" in warnings[0]
    assert "dropped 1 step(s) where critic/score/mean is NaN or inf (first at step 7)" in warnings[1]
    kept = [(s, d) for s, d in rows if s not in (4, 7, 10)]
    ref = analyze_series(
        [s for s, _ in kept], [d["actor/entropy"] for _, d in kept], [d["critic/score/mean"] for _, d in kept]
    )
    assert an.n_points == 27 == ref.n_points
    assert an.law.params == pytest.approx(ref.law.params, rel=1e-12)
    assert an.entropy["retention"] == pytest.approx(ref.entropy["retention"], rel=1e-12)


def test_mixed_runs_in_one_folder(tmp_path):
    write_tensorboard(tmp_path / "runs" / "a", 10)
    write_tensorboard(tmp_path / "runs" / "b", 10)
    with pytest.raises(LogError, match="several runs"):
        read_log(tmp_path)
    c = tmp_path / "csv"
    c.mkdir()
    write_wandb_csv(c / "x.csv", 10, run="r1")
    with pytest.raises(LogError, match="several runs"):
        write_wandb_csv(c / "y.csv", 10, run="r2")
        read_log(c)
    two = tmp_path / "two.csv"
    one = write_wandb_csv(tmp_path / "one.csv", 10, run="r1").read_text().splitlines()
    other = write_wandb_csv(tmp_path / "o.csv", 10, run="r2").read_text().splitlines()
    two.write_text("\n".join(a + "," + ",".join(b.split(",")[1:]) for a, b in zip(one, other, strict=True)))
    with pytest.raises(LogError, match="2 runs in one export"):
        read_log(two)


def test_cli_on_verl_log_writes_report_and_json(verl_logs, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["analyze", str(verl_logs["file"]), "--out", str(out), "--json"]) == 0
    d = json.loads((out / "analysis.json").read_text())
    for key in ("a", "b", "r2", "ceiling"):
        assert isinstance(d["fit"]["law"][key], float)
    assert isinstance(d["fit"]["ceiling"], float) and d["fit"]["model"] in ("law", "mirror")
    assert d["source"]["format"] == "verl-jsonl" and d["source"]["keys"]["entropy"] == "actor/entropy"
    assert len(d["prediction"]["interval"]) == 2 and d["prediction"]["final"] is not None
    _, H, _, _, _ = law_series(N)  # retention by hand: mean of the last 20 % (24) / first 5 % (6)
    assert d["entropy"]["retention"] == pytest.approx(H[-24:].mean() / H[:6].mean(), rel=1e-12)
    assert d["collapse"]["verdict"] in ("collapsed", "collapsing", "healthy", "rising")
    assert {p.name for p in (out / "plots").glob("*.png")} == {"entropy_reward.png", "law_fit.png"}
    html = (out / "report.html").read_text()
    # 12 validation points hold out 3, too few to resolve the form: the law's ceiling, labelled
    # "form uncertain" when the mirror form's interval does not overlap it
    assert d["fit"]["heldout_n"] == 3 and d["fit"]["selection"]["resolved"] is None and d["fit"]["model"] == "law"
    label = f"ceiling, law ({'form uncertain' if d['fit']['form_uncertain'] else 'selected'})"
    assert label in html and "plots/law_fit.png" in html
    printed = capsys.readouterr().out  # captured: not wrapped, the label is whole on its row
    shown = "form uncertain" if d["fit"]["form_uncertain"] else "law"
    assert re.search(rf"selected form +{shown} ", printed) and "verl-jsonl" in printed
    assert label in printed
    # a verl log gets verl's Hydra overrides for the suggested method, in the terminal and the report
    if d["suggestion"]["method"] != "grpo":
        line = f"+actor_rollout_ref.actor.policy_loss.method={d['suggestion']['method']}"
        assert line in printed and line in html and d["suggestion"]["trainer"] == "verl"


def test_cli_default_out_and_bad_input(tmp_path, capsys):
    write_tensorboard(tmp_path / "tb", N)
    assert main(["analyze", str(tmp_path / "tb")]) == 0
    assert (tmp_path / "tb" / "entflow-analysis" / "report.html").is_file()
    assert main(["analyze", str(tmp_path / "tb")]) == 0  # our own output is not read as a second run
    shutil.rmtree(tmp_path / "tb" / "entflow-analysis")
    assert main(["analyze", str(tmp_path / "tb"), "--entropy-key", "nope"]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and str(tmp_path / "tb") in err and "Traceback" not in err


def test_tensorboard_data_server_matches_event_accumulator(tmp_path):
    """The fast reader (TensorBoard's data server) and EventAccumulator give the same series; a step
    written twice (a resumed run) keeps the later value in both."""
    from torch.utils.tensorboard import SummaryWriter

    from entflow.analysis.tensorboard import read_with_data_server, read_with_event_accumulator

    write_tensorboard(tmp_path, 50, val_tag="eval/reward", extra=3)
    w = SummaryWriter(str(tmp_path))
    w.add_scalar("train/entropy", 123.0, 50)  # step 50 again, written later
    w.close()
    fast, slow = read_with_data_server(tmp_path), read_with_event_accumulator(tmp_path)
    if fast is None:
        pytest.skip("tensorboard_data_server cannot run here")
    assert set(fast) == set(slow) and len(fast) == 6
    for k in fast:
        np.testing.assert_array_equal(fast[k][0], slow[k][0])
        np.testing.assert_array_equal(fast[k][1], slow[k][1])
    assert fast["train/entropy"][0][-1] == 50 and fast["train/entropy"][1][-1] == 123.0
    assert fast["train/entropy"][0].size == 50


def test_tensorboard_falls_back_when_the_data_server_hangs(tmp_path, monkeypatch):
    """A data server that never finishes loading (injected: a silent `sleep`) is killed after the
    timeout and the folder is read by EventAccumulator instead."""
    import time

    import tensorboard_data_server

    from entflow.analysis import tensorboard

    fake = tmp_path / "server"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(0o755)
    monkeypatch.setattr(tensorboard_data_server, "server_binary", lambda: str(fake))
    write_tensorboard(tmp_path / "tb", 30)
    t = time.monotonic()
    assert tensorboard.read_with_data_server(tmp_path / "tb", timeout_s=1.0) is None
    assert time.monotonic() - t < 10
    monkeypatch.setattr(tensorboard, "read_with_data_server", lambda target: None)
    log = read_log(tmp_path / "tb")
    assert log.format == "tensorboard" and log.series["train/entropy"][0].size == 30
