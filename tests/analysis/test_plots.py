"""What the plots say they draw (analysis/plots.py): each figure is captured where it is saved and
its title and legend are read back. ``entropy_vs_acc.png`` names the law fit only when one is
drawn; ``law_fit.png`` marks the selected form and draws the ceiling of that form, or none when the
fit is not informative."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from entflow.analysis import plots
from entflow.analysis.collapse import analyze_log
from entflow.analysis.law import fit_law, fit_mirror
from entflow.analysis.log_readers import log_from_records
from entflow.analysis.runs import load_metrics
from support.run_dirs import make_run


@pytest.fixture
def saved(monkeypatch):
    """file name -> the figure saved under it (then written as usual)."""
    figures: dict[str, object] = {}
    save = plots._save

    def capture(fig, path: Path) -> Path:
        figures[path.name] = fig
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", capture)
    return figures


def labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_entropy_vs_acc_names_the_fit_only_when_drawn(tmp_path, saved):
    runs = [("a", load_metrics(make_run(tmp_path, "grpo-s3", "grpo")))]
    plots.write_plots(runs, tmp_path / "p1")
    ax = saved["entropy_vs_acc.png"].axes[0]
    assert "fitted R = −a·exp(H) + b" in ax.get_title()
    assert any("R²=" in t for t in labels(ax))  # the fitted curve is in the legend
    # one evaluation: a point, no fit, and a title that says so
    one = [{"step": 0, "val/acc": 0.3, "entropy": 1.0}, {"step": 1, "entropy": 0.9, "reward/mean": 0.1}]
    saved.clear()
    plots.write_plots([("b", one)], tmp_path / "p2")
    ax = saved["entropy_vs_acc.png"].axes[0]
    assert "fitted" not in ax.get_title() and "no fit" in ax.get_title()
    assert not any("R²" in t for t in labels(ax))


def _log(H, R):
    return log_from_records(
        [{"step": i + 1, "entropy": h, "reward": r} for i, (h, r) in enumerate(zip(H, R, strict=True))]
    )


def test_law_fit_draws_the_selected_forms_ceiling(tmp_path, saved):
    s = np.arange(1, 121, dtype=float)
    H = 0.1 + 1.5 * np.exp(-s / 25)
    R = 0.7 * np.exp(-1.2 * H) + np.random.default_rng(1).normal(0, 0.003, s.size)
    log, an = analyze_log(_log(H, R))
    assert an.model == "mirror" and an.informative
    plots.write_collapse_plots(log, an, tmp_path / "plots")
    ax = saved["law_fit.png"].axes[0]
    q = fit_mirror(H, R).params["q"]
    assert "mirror selected" in ax.get_title() and "law and mirror fitted" in ax.get_title()
    legend = labels(ax)
    assert f"ceiling (mirror) {q:.3g}" in legend
    assert any(t.startswith("mirror q·e^(−βH), selected") for t in legend)
    assert any(t.startswith("law −a·e^H+b, other") for t in legend)
    ceilings = [ln.get_ydata()[0] for ln in ax.get_lines() if ln.get_linestyle() == ":"]
    assert ceilings == [pytest.approx(q, rel=1e-9)] and abs(q - fit_law(H, R).ceiling) > 0.01


def test_law_fit_draws_no_ceiling_when_the_fit_is_not_informative(tmp_path, saved):
    rng = np.random.default_rng(4)
    H, R = 1.0 + 0.1 * rng.normal(size=30), 0.5 + 0.2 * rng.normal(size=30)
    log, an = analyze_log(_log(H, R))
    assert not an.informative
    plots.write_collapse_plots(log, an, tmp_path / "plots")
    ax = saved["law_fit.png"].axes[0]
    assert "not informative" in ax.get_title() and "no ceiling" in ax.get_title()
    assert not any(t.startswith("ceiling") for t in labels(ax))
    assert not [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]


def _heldout_run(probe: list[float], trunc: list[float], with_probe: bool = True) -> list[dict]:
    recs = []
    for i, (h, t) in enumerate(zip(probe, trunc, strict=True)):
        rec = {"step": 10 * i, "val/entropy": 2 * h, "val/response_len": 10.0 + i, "val/truncated_frac": t}
        if with_probe:
            rec["val/probe_entropy"] = h
        recs.append(rec)
    return recs


def test_heldout_band_draws_the_seed_mean_of_probe_entropy_length_and_truncation(tmp_path, saved):
    groups = {
        "grpo": [_heldout_run([0.4, 0.3, 0.2], [0.1, 0.0, 0.0]), _heldout_run([0.4, 0.2, 0.1], [0.1, 0.1, 0.0])],
        "kl_cov": [_heldout_run([0.4, 0.4, 0.3], [0.0, 0.0, 0.0])],
    }
    written = plots.write_band_plots(groups, tmp_path)
    assert tmp_path / "heldout_band.png" in written and (tmp_path / "heldout_band.png").stat().st_size > 0
    probe, sampled, length, trunc = saved["heldout_band.png"].axes
    assert probe.get_ylabel().startswith("probe entropy") and trunc.get_ylabel() == "truncated fraction"
    assert labels(probe) == ["grpo (n=2)", "kl_cov (n=1)"]
    x, y = probe.get_lines()[0].get_data()  # the mean over grpo's two seeds at each evaluation
    np.testing.assert_allclose(x, [0, 10, 20])
    np.testing.assert_allclose(y, [0.4, 0.25, 0.15])
    np.testing.assert_allclose(sampled.get_lines()[0].get_data()[1], [0.8, 0.5, 0.3])
    np.testing.assert_allclose(length.get_lines()[1].get_data()[1], [10, 11, 12])
    np.testing.assert_allclose(trunc.get_lines()[0].get_data()[1], [0.1, 0.05, 0.0])


def test_no_heldout_band_without_a_probe(tmp_path, saved):
    groups = {"grpo": [_heldout_run([0.4, 0.3], [0.1, 0.0], with_probe=False)]}
    plots.write_band_plots(groups, tmp_path)
    assert "heldout_band.png" not in saved and not (tmp_path / "heldout_band.png").exists()
