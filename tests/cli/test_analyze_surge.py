"""``entflow analyze`` triages an entropy surge end to end: a verl log written by verl's own file
logger (``Tracking``) whose clip fraction rises before the entropy, through the CLI: the triage in
the terminal and report.html, ``plots/surge.png``, ``analysis.json``'s ``surge``; the key table finds
verl's and TRL's triage curves in the committed real logs; the committed example log of
docs/analyze.md is what ``support.surge_logs.DOCS_CASE`` writes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from entflow.analysis.collapse import analyze_log
from entflow.analysis.log_keys import resolve_keys
from entflow.analysis.log_readers import read_log
from entflow.cli.main import main
from support.surge_logs import CASES, DOCS_CASE, write_verl_jsonl

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "logs"
DOCS_LOG = ROOT / "docs" / "results" / "analyze-surge" / "verl_run.jsonl"


def test_a_verl_log_with_a_surge_through_the_cli(tmp_path, capsys):
    pytest.importorskip("verl")
    case = CASES[0]  # the high clip bound (entflow's loss inside verl) rises 10 steps before the entropy
    log = write_verl_jsonl(tmp_path / "verl" / "verl_run.jsonl", case)
    assert json.loads(log.read_text().splitlines()[0])["data"]["actor/entropy"] > 0  # verl's own lines
    out = tmp_path / "out"
    assert main(["analyze", str(log), "--out", str(out), "--json"]) == 0
    printed = capsys.readouterr().out
    assert "entropy surge from step 151 (confirmed by 151, up to the last step; " in printed
    assert (
        "moved first: clip fraction, high bound (actor/entflow/clip/frac_high), up at step 141, "
        "10 steps before the entropy" in printed
    )
    row = next(ln for ln in printed.splitlines() if ln.startswith("    response length"))
    assert row.split()[2:4] == ["155", "+4"] and row.endswith("response_length/mean")
    row = next(ln for ln in printed.splitlines() if ln.startswith("    dual-clip fraction"))
    assert "did not move" in row and row.endswith("actor/pg_clipfrac_lower")
    assert (out / "plots" / "surge.png").stat().st_size > 0
    page = (out / "report.html").read_text()
    assert "<h2>Entropy surge</h2>" in page and "plots/surge.png" in page
    d = json.loads((out / "analysis.json").read_text())["surge"]
    assert d["entropy_key"] == "actor/entropy" and d["settings"]["stable"] == 30
    (sg,) = d["surges"]
    assert sg["start_step"] == 151 and sg["first"] == ["clip_high"]
    moves = {m["role"]: m for m in sg["curves"]["moves"]}
    assert moves["clip_high"]["lead"] == -10 and moves["lr"]["status"] == "did not move"
    assert moves["clip_dual"]["status"] == "did not move" and moves["response_length"]["lead"] == 4
    # a collapse of the same writer (the law log of tests/analysis/test_logs.py): no surge, no plot
    from support.log_writers import write_verl

    (tmp_path / "collapse").mkdir()
    collapse = write_verl(tmp_path / "collapse", 300)["file"]
    assert main(["analyze", str(collapse), "--out", str(out), "--json"]) == 0
    assert "entropy surge: none" in capsys.readouterr().out
    assert json.loads((out / "analysis.json").read_text())["surge"]["surges"] == []
    assert not (out / "plots" / "surge.png").exists()  # the earlier one is removed


def test_the_docs_example_log(tmp_path, capsys):
    """docs/analyze.md's example: the committed log is DOCS_CASE's lines (written by verl's
    ``Tracking``), and the CLI names verl's clip fraction as the first mover."""
    committed = [json.loads(ln) for ln in DOCS_LOG.read_text().splitlines()]
    again = write_verl_jsonl(tmp_path / "again.jsonl", DOCS_CASE, tracking=False)
    assert committed == [json.loads(ln) for ln in again.read_text().splitlines()]
    assert main(["analyze", str(DOCS_LOG), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "entropy surge from step 171" in printed
    assert "moved first: clip fraction, either bound (actor/pg_clipfrac), up at step 159" in printed


def test_the_key_table_finds_the_triage_curves_in_real_logs():
    verl = resolve_keys(read_log(FIX / "verl" / "verl.jsonl"))  # a real verl 0.9.1 run, entflow's loss
    assert verl["grad_norm"] == "actor/grad_norm" and verl["lr"] == "actor/lr"
    assert verl["mismatch"] == "rollout_corr/k3_kl"
    assert verl["clip_high"] == "actor/entflow/clip/frac_high" and verl["clip_low"] == "actor/entflow/clip/frac_low"
    trl = resolve_keys(read_log(FIX / "trl" / "trainer_state.json"))  # a real TRL 1.16 GRPOTrainer run
    assert trl["clip_high"] == "clip_ratio/high_mean" and trl["clip_low"] == "clip_ratio/low_mean"
    assert trl["clip"] == "clip_ratio/region_mean"
    assert trl["grad_norm"] == "grad_norm" and trl["lr"] == "learning_rate"
    assert trl["mismatch"] is None  # no vLLM: TRL logs sampling/* only with importance sampling
    run = sorted((ROOT / "docs" / "results" / "real-v2").glob("*/metrics.jsonl"))[0]
    ours = resolve_keys(read_log(run))
    assert (ours["clip_high"], ours["clip_low"], ours["grad_norm"]) == ("clip/frac_high", "clip/frac_low", "grad_norm")


def test_a_trl_log_with_a_surge(tmp_path):
    """TRL's keys: a trainer_state.json whose grad norm rises before the entropy."""
    case = CASES[2]
    steps, H, curves = case.series()
    names = {"clip_high": "clip_ratio/high_mean", "response_length": "completions/mean_length"}
    names |= {"grad_norm": "grad_norm", "lr": "learning_rate", "clip": "clip_ratio/region_mean"}
    hist = [
        {"step": int(s), "entropy": float(H[i]), "reward": 0.6 - 0.1 * math.exp(H[i])}
        | {k: float(curves[r][i]) for r, k in names.items()}
        for i, s in enumerate(steps)
    ]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": hist}))
    _, an = analyze_log(tmp_path)
    (sg,) = an.surge.surges
    assert sg.first == ("grad_norm",) and abs(sg.start_step - case.t0) <= 0.05 * case.n
    assert {m.role: m.key for m in sg.moves if m.key} == {r: names[r] for r in names}
    assert np.isfinite(an.to_dict()["surge"]["surges"][0]["rise"])
