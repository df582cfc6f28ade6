"""Reading run directories (entflow.analysis.runs): metrics.jsonl conventions, config.yaml, the
wall time across a resume, the law's (entropy, accuracy) points, and the lenient read_jsonl the
trainer shares."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from entflow.analysis.report import summarize_run
from entflow.analysis.runs import law_points, load_config, load_metrics, read_jsonl, wall_time
from entflow.errors import RunDirError
from support.run_dirs import N_STEPS, make_run


def test_load_metrics_skips_truncated_last_line_and_dedupes_steps(tmp_path: Path):
    run = make_run(tmp_path, "r", "grpo")
    recs = load_metrics(run)
    assert len(recs) == N_STEPS + 1
    assert [r["step"] for r in recs] == list(range(N_STEPS + 1))
    assert recs[5]["audit/steer/spearman"] is None
    # a resumed run (the writer drops the half line, then appends) re-logs step 40: the later
    # line wins; blank trailing lines are fine
    path = run / "metrics.jsonl"
    text = path.read_text()
    path.write_text(text[: text.rfind("\n") + 1] + json.dumps({"step": 40, "entropy": 0.123}) + "\n\n")
    recs = load_metrics(run)
    assert len(recs) == N_STEPS + 1 and recs[-1] == {"step": 40, "entropy": 0.123}


def test_load_metrics_errors(tmp_path: Path):
    with pytest.raises(RunDirError, match=r"metrics\.jsonl"):
        load_metrics(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, broken\n{"step": 3}\n')
    with pytest.raises(RunDirError, match="line 2"):
        load_metrics(tmp_path)


def test_load_config(tmp_path: Path):
    assert load_config(tmp_path) == {}
    run = make_run(tmp_path, "r", "steer")
    assert load_config(run)["method"] == "steer"
    (run / "config.yaml").write_text("- a list\n")
    with pytest.raises(RunDirError, match="mapping"):
        load_config(run)


def test_wall_time_from_timing_jsonl_across_a_resume(tmp_path: Path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": k, "entropy": 1.0}) + "\n" for k in range(1, 6)))
    assert math.isnan(wall_time(run))
    # the lab writes time/elapsed_s to timing.jsonl; its clock restarts on --resume (after 3.0 s)
    times = [1.0, 2.0, 3.0, 0.5, 1.5]
    text = "".join(json.dumps({"step": k, "time/elapsed_s": t}) + "\n" for k, t in enumerate(times, 1))
    (run / "timing.jsonl").write_text(text + '{"step": 6, "time/ela')
    assert wall_time(run) == pytest.approx(4.5)
    assert summarize_run(run)["wall_time_s"] == pytest.approx(4.5)


def test_law_points_use_the_evaluated_checkpoints_entropy():
    """The law pairs val/acc with val/entropy of the same evaluation (step 0 included); the
    rollout entropy on that line (sampled before the step's update, absent at step 0) is the
    fallback only."""
    recs = [{"step": 0, "val/acc": 0.1, "val/entropy": 1.5}]
    recs += [{"step": k, "entropy": 9.0, "val/acc": 0.1 + k / 100, "val/entropy": 1.5 - k / 50} for k in (10, 20, 30)]
    steps, h, _, src = law_points(recs)
    assert src == "val/entropy" and list(steps) == [0, 10, 20, 30]
    assert h.tolist() == pytest.approx([1.5, 1.3, 1.1, 0.9])
    no_val_entropy = [{k: v for k, v in rec.items() if k != "val/entropy"} for rec in recs]
    steps, h, _, src = law_points(no_val_entropy)
    assert src == "entropy" and list(steps) == [10, 20, 30] and h.tolist() == [9.0] * 3


def test_read_jsonl_is_lenient_and_in_file_order(tmp_path: Path):
    """The trainer's reader (re-exported by entflow.trainer.rundir): every complete line in file
    order, duplicates kept, any unparseable line skipped, a missing file is empty."""
    from entflow.trainer import rundir

    assert rundir.read_jsonl is read_jsonl
    path = tmp_path / "samples.jsonl"
    assert read_jsonl(path) == []
    path.write_bytes(b'{"step": 2}\nnot json\n{"step": 1, "text": "\xff"}\n{"step": 2}\n[3]\n{"step": 4, "tr')
    rows = read_jsonl(path)
    # an undecodable byte is replaced (U+FFFD), not fatal; the truncated last line is skipped
    assert rows == [{"step": 2}, {"step": 1, "text": "\ufffd"}, {"step": 2}, [3]]
    path.write_bytes(b'{"step": 1, "text": "caf\xc3\xa9"}\n')
    assert read_jsonl(path) == [{"step": 1, "text": "café"}]


def test_load_coverage_reads_a_mapping_and_names_a_bad_file(tmp_path):
    from entflow.analysis.runs import load_coverage

    assert load_coverage(tmp_path) == {}  # no coverage evaluation
    (tmp_path / "coverage.json").write_text('{"n": 256, "final": {}}')
    assert load_coverage(tmp_path) == {"n": 256, "final": {}}
    for text, needle in (('{"n": 25', "not valid JSON"), ("[1, 2]", "expected a mapping, got list")):
        (tmp_path / "coverage.json").write_text(text)
        with pytest.raises(RunDirError, match=needle) as e:
            load_coverage(tmp_path)
        assert "coverage.json" in str(e.value)
