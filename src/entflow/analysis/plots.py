"""Matplotlib figures of run directories: overlaid curves per run and mean ± 95 % t-interval bands
over seeds. Figure objects without pyplot: no global backend switch, no figure registry (safe from
a notebook or a GUI session); ``savefig`` renders PNG through Agg.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from entflow.analysis.diagnostics import AnalysisError, ema, fit_entropy_law
from entflow.analysis.runs import audit_estimators, last_value, law_points, n_position_bins, series
from entflow.analysis.stats import band
from entflow.analysis.tables import format_number

__all__ = ["METHOD_KEYS", "PLOT_NAMES", "write_band_plots", "write_plots"]

METHOD_KEYS = (
    "steer/weight_mean",
    "steer/weight_min",
    "opefo/lambda",
    "opefo_target/lambda",
    "adaptive_entropy/coef",
    "pos_adv/weight",
    "kl_cov/n_selected",
    "clip_cov/n_selected",
)
# every file the two writers may produce (a report removes stale ones before writing)
PLOT_NAMES = (
    "entropy.png",
    "val_acc.png",
    "reward.png",
    "response_len.png",
    "method.png",
    "clip.png",
    "flow.png",
    "audit_spearman.png",
    "entropy_vs_acc.png",
    "entropy_band.png",
    "val_acc_band.png",
    "positional_entropy.png",
)


def write_plots(runs: Sequence[tuple[str, Sequence[dict[str, Any]]]], plot_dir: str | os.PathLike) -> list[Path]:
    """Write the overlaid plots for ``runs`` = [(label, records), …] into ``plot_dir``.

    A plot whose keys no run carries is not written. Returns the files written, in report order:
    ``entropy.png``, ``val_acc.png``, ``reward.png``, ``response_len.png``, ``method.png``,
    ``clip.png``, ``flow.png``, ``audit_spearman.png``, ``entropy_vs_acc.png``.
    """
    # Figure objects without pyplot: no global backend switch, no figure registry (safe to call
    # from a notebook or a GUI session); savefig renders PNG through Agg.
    import matplotlib
    from matplotlib.figure import Figure

    plot_dir = Path(plot_dir)
    plot_dir.mkdir(parents=True, exist_ok=True)
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {label: colors[i % len(colors)] for i, (label, _) in enumerate(runs)}
    written: list[Path] = []

    def has(key: str) -> bool:
        return any(series(recs, key)[0].size for _, recs in runs)

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        path = plot_dir / name
        fig.savefig(path, dpi=100)
        written.append(path)

    def line_panel(ax: Any, keys: Sequence[tuple[str, str]], ylabel: str, title: str, smooth: bool = False) -> bool:
        drawn = False
        for label, recs in runs:
            for key, style in keys:
                x, y = series(recs, key)
                if not x.size:
                    continue
                suffix = "" if len(keys) == 1 else f" {key}"
                if smooth and y.size > 2:
                    ax.plot(x, y, style, color=color[label], alpha=0.25, lw=1)
                    ax.plot(x, ema(y), style, color=color[label], lw=1.6, label=f"{label}{suffix}")
                else:
                    ax.plot(
                        x,
                        y,
                        style,
                        color=color[label],
                        lw=1.6,
                        marker="." if x.size < 30 else None,
                        label=f"{label}{suffix}",
                    )
                drawn = True
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=7)
        return drawn

    def simple_plot(name: str, keys: Sequence[tuple[str, str]], ylabel: str, title: str, smooth: bool) -> None:
        if not any(has(k) for k, _ in keys):
            return
        fig = Figure(figsize=(7, 4))
        ax = fig.subplots()
        line_panel(ax, keys, ylabel, title, smooth)
        save(fig, name)

    ema_note = "(faint: raw; solid: EMA β=0.6)"
    simple_plot("entropy.png", [("entropy", "-")], "entropy (nats)", f"Rollout token entropy {ema_note}", True)
    simple_plot(
        "val_acc.png",
        [("val/acc", "-"), ("val/acc_greedy", "--")],
        "accuracy",
        "Validation accuracy (solid: T=1, mean over k samples; dashed: greedy)",
        False,
    )
    simple_plot("reward.png", [("reward/mean", "-")], "mean reward", f"Training reward {ema_note}", True)
    simple_plot("response_len.png", [("response/len_mean", "-")], "tokens", "Mean response length", False)
    present = [k for k in METHOD_KEYS if has(k)]
    if present:
        fig = Figure(figsize=(7, 2.6 * len(present)))
        axes = fig.subplots(len(present), 1, squeeze=False)
        for ax, key in zip(axes[:, 0], present, strict=True):
            line_panel(ax, [(key, "-")], key, f"method value {key}")
        save(fig, "method.png")
    simple_plot(
        "clip.png",
        [("clip/frac_high", "-"), ("clip/frac_low", "--")],
        "fraction of tokens",
        "Clipped fraction (solid: high bound; dashed: low bound)",
        False,
    )
    simple_plot(
        "flow.png",
        [("flow/lambda_star", "-")],
        "λ*",
        "Entropy-flow balance λ* = (S− − S+)/(S− + S+), OPEFO estimator",
        False,
    )

    ests: list[str] = []
    for _, recs in runs:
        ests += [e for e in audit_estimators(recs) if e not in ests]
    ests = [e for e in ests if has(f"audit/{e}/spearman")]
    if ests:
        fig = Figure(figsize=(7, 2.4 * len(ests)))
        axes = fig.subplots(len(ests), 1, squeeze=False, sharex=True)
        for ax, est in zip(axes[:, 0], ests, strict=True):
            line_panel(ax, [(f"audit/{est}/spearman", "-")], "Spearman", f"estimator {est}: Spearman vs true ΔH")
            ax.axhline(0, color="k", lw=0.5)
        save(fig, "audit_spearman.png")

    n_bins = max((n_position_bins(recs) for _, recs in runs), default=0)
    if n_bins:  # paper 004 Fig. 6a: entropy by relative position, at the last evaluation
        fig = Figure(figsize=(7, 4))
        ax = fig.subplots()
        centres = (np.arange(n_bins) + 0.5) / n_bins
        for label, recs in runs:
            for kind, style in (("correct", "-"), ("incorrect", "--")):
                y = [last_value(recs, f"diag/pos_entropy/{kind}/b{i}") for i in range(n_bins)]
                if any(math.isfinite(v) for v in y):
                    ax.plot(centres, y, style, marker=".", color=color[label], label=f"{label} {kind}")
        ax.set_xlabel("relative position in the response")
        ax.set_ylabel("mean token entropy (nats)")
        ax.set_title("Positional entropy at the last evaluation (solid: correct; dashed: incorrect)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
        save(fig, "positional_entropy.png")

    if has("val/acc"):
        fig = Figure(figsize=(6, 4.5))
        ax = fig.subplots()
        drawn = False
        for label, recs in runs:
            _, h, r, src = law_points(recs)
            if not h.size:
                continue
            ax.scatter(h, r, s=14, color=color[label], label=f"{label} ({src})")
            drawn = True
            try:
                fit = fit_entropy_law(h, r)
            except AnalysisError:
                continue
            hh = np.linspace(0.0, max(float(h.max()), 1e-3) * 1.05, 100)
            ax.plot(
                hh,
                fit.predict(hh),
                "--",
                color=color[label],
                lw=1.2,
                label=f"{label}: R = {-fit.a:+.3g}·e^H {fit.b:+.3g} "
                f"(R²={format_number(fit.r2, '.2f')}, ceiling {fit.ceiling:.3f})",
            )
        if drawn:
            ax.set_xlabel("policy entropy H (nats)")
            ax.set_ylabel("validation accuracy R")
            ax.set_title("Entropy vs accuracy, fitted R = −a·exp(H) + b (paper 003)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
            save(fig, "entropy_vs_acc.png")
    return written


def write_band_plots(groups: dict[str, list[list[dict[str, Any]]]], plot_dir: str | os.PathLike) -> list[Path]:
    """``entropy_band.png`` and ``val_acc_band.png``: per method the mean over seeds with a shaded
    95 % t-interval band (the entropy curve is EMA-smoothed per seed first, β = 0.6)."""
    import matplotlib
    from matplotlib.figure import Figure

    plot_dir = Path(plot_dir)
    plot_dir.mkdir(parents=True, exist_ok=True)
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    written = []
    for key, name, ylabel in (
        ("entropy", "entropy_band.png", "entropy (nats)"),
        ("val/acc", "val_acc_band.png", "val avg@k"),
    ):
        fig = Figure(figsize=(7, 4))
        ax = fig.subplots()
        drawn = False
        for i, (label, runs) in enumerate(groups.items()):
            if key == "entropy":
                runs = [
                    [{"step": st, key: h} for st, h in zip(x, ema(y), strict=True)]
                    for x, y in (series(r, key) for r in runs)
                ]
            x, m, h = band(runs, key)
            if not x.size:
                continue
            c = colors[i % len(colors)]
            ax.plot(x, m, color=c, lw=1.6, label=f"{label} (n={len(runs)})")
            hh = np.nan_to_num(h)
            ax.fill_between(x, m - hh, m + hh, color=c, alpha=0.2)
            drawn = True
        if not drawn:
            continue
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{ylabel}: mean over seeds ± 95 % t-interval")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = plot_dir / name
        fig.savefig(path, dpi=100)
        written.append(path)
    return written
