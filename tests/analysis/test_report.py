"""Report layer on synthetic run directories with known values (docs/design.md §10 layout)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.image as mpimg
import numpy as np
import pytest

from entflow.analysis.law import fit_entropy_law
from entflow.analysis.plots import PLOT_NAMES
from entflow.analysis.report import print_summary, summarize_run, write_report
from entflow.errors import RunDirError
from support.run_dirs import N_STEPS, VAL_STEPS, entropy_at, make_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def steer_spearman_mean() -> float:
    odd = [0.6 for s in range(1, N_STEPS + 1, 2) if s != 5]
    even = [0.7 for s in range(2, N_STEPS + 1, 2) if s != 6]
    return float(np.mean(odd + even))


@pytest.fixture
def two_runs(tmp_path: Path) -> list[Path]:
    root = tmp_path / "COMPARE"
    a = make_run(root, "grpo-s3", "grpo")
    b = make_run(
        root,
        "steer-s3",
        "steer",
        offset=0.1,
        val_acc=(0.45, 0.5, 0.58, 0.6),
        greedy=(0.5, 0.55, 0.6, 0.66),
        method_key="steer/weight_mean",
    )
    return [a, b]


# ---------------------------------------------------------------- summary


def test_summarize_run_exact_values(tmp_path: Path):
    s = summarize_run(make_run(tmp_path, "grpo-s3", "grpo"))
    assert (s["name"], s["method"], s["task"], s["seed"]) == ("grpo-s3", "grpo", "countdown", 3)
    assert s["steps"] == N_STEPS
    assert s["wall_time_s"] == pytest.approx(100.0)
    assert s["entropy_initial"] == pytest.approx(0.9)  # mean(1.0, 0.8)
    assert s["entropy_final"] == pytest.approx(0.25)  # mean of 0.2/0.3 alternating over 8 steps
    assert s["entropy_retention"] == pytest.approx(0.25 / 0.9)
    assert s["reward_final"] == pytest.approx(np.mean([0.3 + 0.01 * k for k in range(33, 41)]))
    assert s["val_acc_warm"] == 0.3 and s["val_acc_greedy_warm"] == 0.35
    assert s["val_acc_best"] == 0.55 and s["val_acc_best_step"] == 20
    assert s["val_acc_final"] == 0.52
    assert s["val_acc_greedy_best"] == 0.62 and s["val_acc_greedy_final"] == 0.61
    assert s["val_pass_at_k_final"] == pytest.approx(0.73)
    assert s["audit_spearman"]["steer"] == pytest.approx(steer_spearman_mean())
    assert s["audit_spearman"]["cov"] == pytest.approx(0.05)
    assert math.isnan(s["audit_spearman"]["opefo"])
    assert list(s["audit_spearman"]) == ["steer", "opefo", "cov"]  # docs/design.md §5 order
    assert s["audit_pearson"]["steer"] == pytest.approx(0.5)
    # law fitted on (rollout entropy, val acc) at the validation steps
    fit = fit_entropy_law([entropy_at(k, 0.0) for k in VAL_STEPS], [0.4, 0.55, 0.5, 0.52])
    assert s["law_a"] == pytest.approx(fit.a) and s["law_b"] == pytest.approx(fit.b)
    assert s["law_ceiling"] == pytest.approx(fit.ceiling)
    # 4 evaluations: the early fit takes 3 (the minimum, entflow.analysis.law) and predicts the 4th
    early = fit_entropy_law([entropy_at(k, 0.0) for k in VAL_STEPS[:3]], [0.4, 0.55, 0.5])
    error = float(early.predict([entropy_at(VAL_STEPS[3], 0.0)])[0]) - 0.52
    assert s["law_predict_error"] == pytest.approx(error, abs=1e-12)
    assert s["law_predict_rmse"] == pytest.approx(abs(error), abs=1e-12)
    # rising → plateau: slope over (10, 20, 30) is 0.005/step, over (20, 30, 40) it is negative
    assert s["plateau_step"] == 20


def test_summarize_run_minimal_and_short(tmp_path: Path):
    run = tmp_path / "tiny"
    run.mkdir()
    # 3 entropy values: first 5 % and last 20 % are each one step; no config, no validation
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": k, "entropy": h}) + "\n" for k, h in enumerate([2, 1, 0.5], 1))
    )
    s = summarize_run(run)
    assert s["name"] == "tiny" and s["method"] == "?"
    assert s["steps"] == 3
    assert s["entropy_retention"] == pytest.approx(0.25)
    assert math.isnan(s["val_acc_best"]) and math.isnan(s["val_acc_warm"]) and s["val_acc_best_step"] is None
    assert s["audit_spearman"] == {} and math.isnan(s["law_a"]) and math.isnan(s["wall_time_s"])


def test_summary_law_early_prediction(tmp_path: Path):
    run = tmp_path / "law"
    run.mkdir()
    H = np.linspace(1.2, 0.2, 20)
    acc = -0.2 * np.exp(H) + 0.9
    acc[3:] += 0.01  # held-out points sit 0.01 above the law fitted on the first 3 (= ceil(15 % of 20))
    lines = [{"step": k + 1, "entropy": h, "val/acc": a} for k, (h, a) in enumerate(zip(H, acc, strict=True))]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    s = summarize_run(run)
    assert s["law_predict_rmse"] == pytest.approx(0.01, abs=1e-9)
    assert s["law_predict_error"] == pytest.approx(-0.01, abs=1e-9)
    assert s["law_r2"] > 0.9


def test_print_summary_rich(tmp_path: Path):
    from rich.console import Console

    run = make_run(tmp_path, "grpo-s3", "grpo")
    console = Console(record=True, width=250)
    print_summary([summarize_run(run)], console)
    text = console.export_text()
    console = Console(record=True, width=250)
    print_summary([run], console)  # run directories are summarized on the fly
    assert console.export_text() == text
    assert "retain" in text and "best³" in text and "grpo-s3" in text and "0.28" in text
    assert "+0.650 (1)" in text and "+0.050 (2)" in text  # audit table: mean Spearman (rank)


# ---------------------------------------------------------------- report


# every plot a report may write but the seed bands (one seed per method here), the pass@k curves (no
# coverage.json) and the positional entropy (not logged)
NOT_DRAWN = {"entropy_band.png", "val_acc_band.png", "heldout_band.png", "passk.png", "positional_entropy.png"}
EXPECTED_PLOTS = set(PLOT_NAMES) - NOT_DRAWN


def test_write_report(two_runs: list[Path], tmp_path: Path):
    out = tmp_path / "report"
    report = write_report(two_runs, out)
    assert report == out / "report.html"
    plots = {p.name for p in (out / "plots").glob("*.png")}
    assert plots == EXPECTED_PLOTS
    html = report.read_text()
    for name in EXPECTED_PLOTS:
        data = (out / "plots" / name).read_bytes()
        assert data[:8] == PNG_MAGIC
        img = mpimg.imread(out / "plots" / name)
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
        assert f"src='plots/{name}'" in html
    assert '<table class="summary">' in html and '<table class="audit">' in html
    assert '<table class="ranking">' in html  # across-run estimator ranking (2 runs)
    assert "grpo-s3" in html and "steer-s3" in html and "H retention" in html
    assert "0.28" in html  # grpo retention 0.25/0.9
    assert "task: countdown" in html  # configs embedded
    assert "http" not in html.replace("http-equiv", "")  # self-contained: no external resources

    summ = json.loads((out / "summary.json").read_text())
    assert [s["name"] for s in summ] == ["grpo-s3", "steer-s3"]
    assert summ[0]["entropy_retention"] == pytest.approx(0.25 / 0.9)
    assert summ[1]["val_acc_best"] == 0.6
    assert summ[0]["audit_spearman"]["opefo"] is None  # NaN → null
    md = (out / "summary.md").read_text()
    assert md.startswith("## Summary\n") and "\n| run | method |" in md and "| steer-s3 | steer |" in md
    assert "| grpo-s3 | steer | +0.650 |" in md and "### Ranking across runs" in md  # the same tables as the HTML


def test_write_report_without_optional_metrics(tmp_path: Path):
    run = tmp_path / "bare"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": k, "entropy": 1.0 / k}) + "\n" for k in range(1, 6)))
    (run / "plots").mkdir()
    (run / "plots" / "clip.png").write_bytes(b"stale")  # ours, from an earlier report: removed
    (run / "plots" / "mine.png").write_bytes(b"user")  # not ours: kept
    report = write_report([run], run)
    assert {p.name for p in (run / "plots").glob("*.png")} == {"entropy.png", "mine.png"}
    assert "No audit metrics" in report.read_text()
    with pytest.raises(RunDirError):
        write_report([], run)


def test_duplicate_run_names_get_unique_labels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import entflow.analysis.report as report_mod

    monkeypatch.setattr(report_mod, "write_plots", lambda runs, plot_dir: [])  # labels only; keep it fast
    a = make_run(tmp_path / "x", "same", "grpo")
    b = make_run(tmp_path / "y", "same", "steer")
    write_report([a, b], tmp_path / "out")
    names = [s["name"] for s in json.loads((tmp_path / "out" / "summary.json").read_text())]
    assert names == ["same", "same #2"]


# ---------------------------------------------------------------- CLI


def test_cli_analyze_end_to_end(two_runs: list[Path], capsys: pytest.CaptureFixture[str]):
    from entflow.cli.main import main

    assert main(["analyze", *map(str, two_runs)]) == 0
    root = two_runs[0].parent  # common parent: runs/COMPARE/
    assert (root / "report.html").is_file()
    assert {p.name for p in (root / "plots").glob("*.png")} == EXPECTED_PLOTS
    out = capsys.readouterr().out
    assert "grpo-s3" in out
    assert f"report: {root / 'report.html'}  (plots in {root / 'plots'}, summary.md, summary.json)" in out.splitlines()


def test_cli_default_out_dir(tmp_path: Path):
    from entflow.cli.analyze import default_out_dir

    a, b, c = tmp_path / "C" / "a", tmp_path / "C" / "b", tmp_path / "D" / "c"
    assert default_out_dir([a, b]) == tmp_path / "C"  # shared parent (runs/COMPARE/)
    assert default_out_dir([a, c]) == a  # no shared parent: the first run
    assert default_out_dir([a]) == a  # one run: its own directory (runs/NAME/report.html)


def test_cli_analyze_single_run_with_out(two_runs: list[Path], tmp_path: Path):
    from entflow.cli.main import main

    assert main(["analyze", str(two_runs[0]), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "report.html").is_file()
    assert not (tmp_path / "o" / "plots" / "method.png").exists()  # grpo logs no method values
    assert not (two_runs[0] / "report.html").exists()


def test_cli_analyze_bad_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from entflow.cli.main import main

    assert main(["analyze", str(tmp_path / "nope")]) == 2
    assert "metrics.jsonl" in capsys.readouterr().err
