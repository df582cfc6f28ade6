"""``entflow analyze`` on the committed logs (tests/fixtures/logs, made by make_fixtures.py): a real
TRL ``trainer_state.json`` and the same run as a W&B CSV export. Both give report.html,
analysis.json and the plots, and the same law fit, equal to an independent least-squares fit of
R = −a·e^H + b (paper 003 Eq. 1) on the values read straight from the file. ``.ci/wheel`` runs the
same command from the built wheel with no extras."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from entflow.cli.main import main

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def trl_series() -> tuple[np.ndarray, np.ndarray]:
    rows = [h for h in json.loads((FIX / "trl" / "trainer_state.json").read_text())["log_history"] if "entropy" in h]
    return np.array([h["entropy"] for h in rows], np.float64), np.array([h["reward"] for h in rows], np.float64)


@pytest.mark.parametrize("log", ["trl/trainer_state.json", "wandb_export.csv"])
def test_analyze_a_committed_log(log, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["analyze", str(FIX / log), "--out", str(out), "--json"]) == 0
    for f in ("report.html", "analysis.json", "plots/entropy_reward.png", "plots/law_fit.png"):
        assert (out / f).stat().st_size > 0, f
    data = json.loads((out / "analysis.json").read_text())
    H, R = trl_series()
    assert data["steps"]["n_points"] == len(H) == 60
    X = np.stack([-np.exp(H), np.ones_like(H)], axis=1)
    (a, b), *_ = np.linalg.lstsq(X, R, rcond=None)
    law = data["fit"]["law"]
    assert law["a"] == pytest.approx(a, rel=1e-6) and law["b"] == pytest.approx(b, rel=1e-6)
    assert data["entropy"]["last"] == pytest.approx(H[-1], rel=1e-6)
    assert data["collapse"]["verdict"] == "collapsed"  # 3.1 nats → 0.001: the run collapsed


def test_the_terminal_at_80_columns_agrees_with_the_report(tmp_path, capsys, monkeypatch):
    """The TRL fixture at 80 columns: the table's lines fit (only the copyable configuration lines
    may run past), its headers are whole, and the terminal shows the same EntflowGRPOConfig lines
    for the suggested method as report.html (both from collapse.suggestion_lines), the selected
    form's ceiling, and the page title once."""
    import html

    from entflow.analysis.collapse import suggestion_lines

    # a terminal 80 columns wide: captured output is otherwise printed unwrapped (cli_console)
    monkeypatch.setattr("entflow.cli._common._is_terminal", lambda stream: True)
    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "out"
    assert main(["analyze", str(FIX / "trl" / "trainer_state.json"), "--out", str(out), "--json"]) == 0
    printed = capsys.readouterr().out
    data = json.loads((out / "analysis.json").read_text())
    sug = data["suggestion"]
    lines = suggestion_lines(sug["method"], sug["params"], "trl")
    assert sug["trainer"] == "trl" and sug["lines"] == lines and lines
    assert "EntflowGRPOConfig(" in "".join(lines) and f"entflow_method={sug['method']!r}," in "".join(lines)
    for line in lines:
        assert f"    {line}\n" in printed, line
    assert "entflow train --method" not in printed  # a TRL user is not sent to entflow's own trainer
    table = [ln for ln in printed.splitlines() if not ln.startswith("    ") or ln.startswith("    entflow analyze")]
    assert max(len(ln) for ln in table) <= 80
    assert "quantity" in printed and "evidence" in printed and "…" not in printed
    model = data["fit"]["model"]
    assert f"ceiling, {model} (selected)" in printed and f"{data['fit']['ceiling']:.4g}" in printed
    page = (out / "report.html").read_text()
    assert html.escape("\n".join(lines)) in page
    title = html.escape(f"entflow analyze: {FIX / 'trl' / 'trainer_state.json'}")
    assert page.count(title) == 2  # <title> and <h1>, not again as the table's heading
    assert page.count("<h1>") == 1 and f"ceiling, {model} (selected)" in page


def _with_nan(tmp_path: Path) -> tuple[Path, int]:
    """The TRL fixture with the entropy of its 10th logged step set to NaN; returns (file, step)."""
    state = json.loads((FIX / "trl" / "trainer_state.json").read_text())
    rows = [h for h in state["log_history"] if "entropy" in h]
    rows[9]["entropy"] = float("nan")
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps(state))  # json writes NaN, as transformers' save_to_json does
    return path, rows[9]["step"]


def test_a_nan_step_is_dropped_with_a_warning(tmp_path, capsys):
    path, step = _with_nan(tmp_path)
    assert main(["analyze", str(path), "--out", str(tmp_path / "out"), "--json"]) == 0
    printed = capsys.readouterr().out
    warning = f"warning: dropped 1 step(s) where entropy is NaN or inf (first at step {step})"
    assert warning in " ".join(printed.split())
    data = json.loads((tmp_path / "out" / "analysis.json").read_text())
    assert data["steps"]["n_points"] == 59 and len(data["source"]["warnings"]) == 1


def test_strict_refuses_a_nan_step_in_one_line(tmp_path, capsys):
    path, step = _with_nan(tmp_path)
    assert main(["analyze", str(path), "--out", str(tmp_path / "out"), "--strict"]) == 2
    out = capsys.readouterr()
    lines = [ln for ln in (out.out + out.err).splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in lines[0]
    assert str(path) in lines[0] and "[entropy]" in lines[0] and f"first at step {step}" in lines[0]
    assert not (tmp_path / "out" / "report.html").exists()


def test_strict_refuses_a_nan_in_a_run_directory_before_writing(tmp_path, capsys):
    """An entflow run directory whose metrics.jsonl holds a NaN entropy (JSON's NaN token): dropped
    with a warning by default; with --strict one line and exit 2, and no report written."""
    from support.run_dirs import make_run

    run = make_run(tmp_path, "grpo-s3", "grpo")
    lines = (run / "metrics.jsonl").read_text().splitlines()
    rec = json.loads(lines[3])
    rec["entropy"] = float("nan")
    lines[3] = json.dumps(rec)
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["analyze", str(run), "--strict"]) == 2
    out = capsys.readouterr()
    printed = [ln for ln in (out.out + out.err).splitlines() if ln.strip()]
    assert len(printed) == 1 and "[entropy]" in printed[0] and f"first at step {rec['step']}" in printed[0]
    assert not (run / "report.html").exists()
    assert main(["analyze", str(run)]) == 0
    assert f"dropped 1 step(s) where entropy is NaN or inf (first at step {rec['step']})" in " ".join(
        capsys.readouterr().out.split()
    )


def test_a_mirror_selected_log_shows_the_mirror_ceiling_everywhere(tmp_path, capsys):
    """A TRL log whose R follows the mirror form: the terminal, analysis.json, the verdict and
    report.html all give q (fitted independently here) as the ceiling, the law's as the other."""
    from entflow.analysis.law import fit_law, fit_mirror

    s = np.arange(1, 121, dtype=float)
    H = 0.1 + 1.5 * np.exp(-s / 25)
    R = 0.7 * np.exp(-1.2 * H) + np.random.default_rng(1).normal(0, 0.003, s.size)
    log = [{"step": int(i), "entropy": float(h), "reward": float(r)} for i, h, r in zip(s, H, R, strict=True)]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trainer_state.json").write_text(json.dumps({"log_history": log}))
    out = tmp_path / "out"
    assert main(["analyze", str(tmp_path / "run"), "--out", str(out), "--json"]) == 0
    printed = capsys.readouterr().out
    q, law = fit_mirror(H, R).params["q"], fit_law(H, R).ceiling
    data = json.loads((out / "analysis.json").read_text())
    assert data["fit"]["model"] == "mirror" and data["fit"]["ceiling"] == pytest.approx(q, rel=1e-6)
    assert any(e.startswith(f"mirror ceiling q = {q:.4g}") for e in data["collapse"]["evidence"])
    page = (out / "report.html").read_text()
    for text in (printed, page):
        assert "ceiling, mirror (selected)" in text and f"{q:.4g}" in text
        assert "ceiling, law (other)" in text and f"{law:.4g}" in text
    assert f"mirror ceiling q = {q:.4g}" in page  # the verdict's evidence
