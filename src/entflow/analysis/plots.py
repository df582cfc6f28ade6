"""Matplotlib figures of run directories: overlaid curves per run (:func:`write_plots`) and mean ±
95 % t-interval bands over seeds (:func:`write_band_plots`). Figure objects without pyplot: no
global backend switch, no figure registry (safe from a notebook or a GUI session); ``savefig``
renders PNG through Agg.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from entflow.analysis.curves import ema
from entflow.analysis.law import fit_entropy_law
from entflow.analysis.runs import audit_estimators, last_value, law_points, n_position_bins, series
from entflow.analysis.stats import band
from entflow.analysis.tables import format_number
from entflow.errors import AnalysisError

__all__ = [
    "METHOD_KEYS",
    "PLOT_NAMES",
    "SURGE_PLOT",
    "write_band_plots",
    "write_passk_plot",
    "write_plots",
    "write_surge_plot",
]

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
    "passk.png",
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
    "heldout_band.png",
    "positional_entropy.png",
)


def write_plots(runs: Sequence[tuple[str, Sequence[dict[str, Any]]]], plot_dir: str | os.PathLike) -> list[Path]:
    """Write the overlaid plots for ``runs`` = [(label, records), …] into ``plot_dir``.

    A plot whose keys no run carries is not written. Returns the files written, in report order:
    ``entropy.png``, ``val_acc.png``, ``reward.png``, ``response_len.png``, ``method.png``,
    ``clip.png``, ``flow.png``, ``audit_spearman.png``, ``positional_entropy.png``,
    ``entropy_vs_acc.png``.
    """
    plots = _RunPlots(runs, Path(plot_dir))
    ema_note = "(faint: raw; solid: EMA β=0.6)"
    plots.curves("entropy.png", [("entropy", "-")], "entropy (nats)", f"Rollout token entropy {ema_note}", True)
    plots.curves(
        "val_acc.png",
        [("val/acc", "-"), ("val/acc_greedy", "--")],
        "accuracy",
        "Validation accuracy (solid: T=1, mean over k samples; dashed: greedy)",
    )
    plots.curves("reward.png", [("reward/mean", "-")], "mean reward", f"Training reward {ema_note}", True)
    plots.curves("response_len.png", [("response/len_mean", "-")], "tokens", "Mean response length")
    plots.method_values("method.png")
    plots.curves(
        "clip.png",
        [("clip/frac_high", "-"), ("clip/frac_low", "--")],
        "fraction of tokens",
        "Clipped fraction (solid: high bound; dashed: low bound)",
    )
    plots.curves(
        "flow.png", [("flow/lambda_star", "-")], "λ*", "Entropy-flow balance λ* = (S− − S+)/(S− + S+), OPEFO estimator"
    )
    plots.audit_spearman("audit_spearman.png")
    plots.positional_entropy("positional_entropy.png")
    plots.entropy_vs_accuracy("entropy_vs_acc.png")
    return plots.written


class _RunPlots:
    """The figures of :func:`write_plots`: one colour per run, the files written so far.

    Figure objects without pyplot: no global backend switch, no figure registry (safe to call
    from a notebook or a GUI session); ``savefig`` renders PNG through Agg.
    """

    def __init__(self, runs: Sequence[tuple[str, Sequence[dict[str, Any]]]], plot_dir: Path):
        plot_dir.mkdir(parents=True, exist_ok=True)
        self.runs, self.plot_dir = runs, plot_dir
        colors = _color_cycle()
        self.color = {label: colors[i % len(colors)] for i, (label, _) in enumerate(runs)}
        self.written: list[Path] = []

    def has(self, key: str) -> bool:
        return any(series(recs, key)[0].size for _, recs in self.runs)

    def save(self, fig: Any, name: str) -> None:
        self.written.append(_save(fig, self.plot_dir / name))

    def line_panel(
        self, ax: Any, keys: Sequence[tuple[str, str]], ylabel: str, title: str, smooth: bool = False
    ) -> None:
        """Each run's curve of each (key, line style); ``smooth``: faint raw curve + EMA."""
        drawn = False
        for label, recs in self.runs:
            for key, style in keys:
                x, y = series(recs, key)
                if not x.size:
                    continue
                suffix = "" if len(keys) == 1 else f" {key}"
                color = self.color[label]
                if smooth and y.size > 2:
                    ax.plot(x, y, style, color=color, alpha=0.25, lw=1)
                    ax.plot(x, ema(y), style, color=color, lw=1.6, label=f"{label}{suffix}")
                else:
                    marker = "." if x.size < 30 else None
                    ax.plot(x, y, style, color=color, lw=1.6, marker=marker, label=f"{label}{suffix}")
                drawn = True
        _decorate(ax, "step", ylabel, title, legend=7 if drawn else None)

    def curves(self, name: str, keys: Sequence[tuple[str, str]], ylabel: str, title: str, smooth: bool = False) -> None:
        """One panel of :meth:`line_panel`, written when a run carries one of ``keys``."""
        if not any(self.has(k) for k, _ in keys):
            return
        fig = _figure((7, 4))
        self.line_panel(fig.subplots(), keys, ylabel, title, smooth)
        self.save(fig, name)

    def method_values(self, name: str) -> None:
        """One panel per :data:`METHOD_KEYS` value some run logs (controller state, weights …)."""
        present = [k for k in METHOD_KEYS if self.has(k)]
        if not present:
            return
        fig = _figure((7, 2.6 * len(present)))
        axes = fig.subplots(len(present), 1, squeeze=False)
        for ax, key in zip(axes[:, 0], present, strict=True):
            self.line_panel(ax, [(key, "-")], key, f"method value {key}")
        self.save(fig, name)

    def audit_spearman(self, name: str) -> None:
        """One panel per audited estimator: per-step Spearman vs the true entropy change."""
        ests: list[str] = []
        for _, recs in self.runs:
            ests += [e for e in audit_estimators(recs) if e not in ests]
        ests = [e for e in ests if self.has(f"audit/{e}/spearman")]
        if not ests:
            return
        fig = _figure((7, 2.4 * len(ests)))
        axes = fig.subplots(len(ests), 1, squeeze=False, sharex=True)
        for ax, est in zip(axes[:, 0], ests, strict=True):
            self.line_panel(ax, [(f"audit/{est}/spearman", "-")], "Spearman", f"estimator {est}: Spearman vs true ΔH")
            ax.axhline(0, color="k", lw=0.5)
        self.save(fig, name)

    def positional_entropy(self, name: str) -> None:
        """Paper 004 Fig. 6a: entropy by relative position, at the last evaluation."""
        n_bins = max((n_position_bins(recs) for _, recs in self.runs), default=0)
        if not n_bins:
            return
        fig = _figure((7, 4))
        ax = fig.subplots()
        centres = (np.arange(n_bins) + 0.5) / n_bins
        for label, recs in self.runs:
            for kind, style in (("correct", "-"), ("incorrect", "--")):
                y = [last_value(recs, f"diag/pos_entropy/{kind}/b{i}") for i in range(n_bins)]
                if any(math.isfinite(v) for v in y):
                    ax.plot(centres, y, style, marker=".", color=self.color[label], label=f"{label} {kind}")
        _decorate(
            ax,
            "relative position in the response",
            "mean token entropy (nats)",
            "Positional entropy at the last evaluation (solid: correct; dashed: incorrect)",
            legend=6,
        )
        self.save(fig, name)

    def entropy_vs_accuracy(self, name: str) -> None:
        """Paper 003: (entropy, accuracy) at each evaluation and, where it can be fitted, R = −a·exp(H) + b;
        the title names the fit only when one is drawn."""
        if not self.has("val/acc"):
            return
        fig = _figure((6, 4.5))
        ax = fig.subplots()
        drawn = fitted = False
        for label, recs in self.runs:
            _, h, r, src = law_points(recs)
            if not h.size:
                continue
            ax.scatter(h, r, s=14, color=self.color[label], label=f"{label} ({src})")
            drawn = True
            try:
                fit = fit_entropy_law(h, r)
            except AnalysisError:
                continue
            hh = np.linspace(0.0, max(float(h.max()), 1e-3) * 1.05, 100)
            law = f"R = {-fit.a:+.3g}·e^H {fit.b:+.3g}"
            quality = f"R²={format_number(fit.r2, '.2f')}, ceiling {fit.ceiling:.3f}"
            ax.plot(hh, fit.predict(hh), "--", color=self.color[label], lw=1.2, label=f"{label}: {law} ({quality})")
            fitted = True
        if drawn:
            title = "Entropy vs accuracy" + (
                ", fitted R = −a·exp(H) + b (paper 003)" if fitted else " (no fit: too few points)"
            )
            _decorate(ax, "policy entropy H (nats)", "validation accuracy R", title, legend=6)
            self.save(fig, name)


def write_band_plots(groups: dict[str, list[list[dict[str, Any]]]], plot_dir: str | os.PathLike) -> list[Path]:
    """``entropy_band.png`` and ``val_acc_band.png``: per method the mean over seeds with a shaded
    95 % t-interval band (the entropy curve is EMA-smoothed per seed first, β = 0.6); and, for runs
    that logged the fixed-text probe, ``heldout_band.png`` (:data:`HELDOUT_PANELS`)."""
    plot_dir = Path(plot_dir)
    plot_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for key, name, ylabel in (
        ("entropy", "entropy_band.png", "entropy (nats)"),
        ("val/acc", "val_acc_band.png", "val avg@k"),
    ):
        fig = _figure((7, 4))
        if _band_panel(fig.subplots(), groups, key, ylabel):
            written.append(_save(fig, plot_dir / name))
    if (heldout := _heldout_bands(groups, plot_dir)) is not None:
        written.append(heldout)
    return written


# the held-out evaluation's curves that tell entropy from length (a real run's periodic validation):
# the fixed-text probe's entropy, the sampled responses' entropy, their length and truncated share
HELDOUT_PANELS = (
    ("val/probe_entropy", "probe entropy (nats, fixed text)"),
    ("val/entropy", "sampled entropy (nats)"),
    ("val/response_len", "response length (tokens)"),
    ("val/truncated_frac", "truncated fraction"),
)


def _heldout_bands(groups: dict[str, list[list[dict[str, Any]]]], plot_dir: Path) -> Path | None:
    """``heldout_band.png``: one panel per :data:`HELDOUT_PANELS` key that every run of some group
    logged (mean over seeds ± 95 % t band); None when the runs logged no probe entropy."""
    if not any(all(series(r, "val/probe_entropy")[0].size for r in runs) for runs in groups.values()):
        return None
    fig = _figure((11, 7))
    fig.suptitle("Held-out evaluation: mean over seeds ± 95 % t-interval")
    for ax, (key, ylabel) in zip(fig.subplots(2, 2).ravel(), HELDOUT_PANELS, strict=True):
        if not _band_panel(ax, groups, key, ylabel, title=ylabel):
            ax.set_axis_off()
    return _save(fig, plot_dir / "heldout_band.png")


def _band_panel(
    ax: Any, groups: dict[str, list[list[dict[str, Any]]]], key: str, ylabel: str, title: str | None = None
) -> bool:
    """Per group the mean of ``key`` over its runs and the shaded 95 % t band; False if none drawn.
    ``title`` defaults to "YLABEL: mean over seeds ± 95 % t-interval"."""
    colors = _color_cycle()
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
    if drawn:
        _decorate(ax, "step", ylabel, title or f"{ylabel}: mean over seeds ± 95 % t-interval", legend=7)
    return drawn


SPLIT_TITLES = {"val": "validation", "hard": "hard split"}


def passk_curves(
    runs: Sequence[tuple[str, dict[str, Any]]],
) -> tuple[dict[str, dict[int, float]], dict[str, dict[str, tuple[dict[int, float], int]]]]:
    """From the runs' ``coverage.json`` (``runs`` = [(label, coverage), …]): the warm start's pass@k
    curve per split (the first run's) and, per split and label, the final policies' curve averaged
    over the label's runs (seeds) at the k all of them have, with the number of runs averaged."""
    warm: dict[str, dict[int, float]] = {}
    finals: dict[str, dict[str, list[dict[int, float]]]] = {}
    for label, cov in runs:
        for which in ("warm", "final"):
            for split, data in ((cov.get(which) or {}).get("splits") or {}).items():
                curve = {int(k): float(v) for k, v in (data.get("pass_at_k") or {}).items()}
                if which == "warm":
                    warm.setdefault(split, curve)
                else:
                    finals.setdefault(split, {}).setdefault(label, []).append(curve)
    mean: dict[str, dict[str, tuple[dict[int, float], int]]] = {}
    for split, by_label in finals.items():
        for label, curves in by_label.items():
            ks = sorted(set.intersection(*(set(c) for c in curves)))
            mean.setdefault(split, {})[label] = ({k: float(np.mean([c[k] for c in curves])) for k in ks}, len(curves))
    return warm, mean


def write_passk_plot(runs: Sequence[tuple[str, dict[str, Any]]], plot_dir: str | os.PathLike) -> list[Path]:
    """``passk.png``: unbiased pass@k against k (log₂ axis), one panel per split, from
    :func:`passk_curves`: the warm start (black, dashed) and each label's final policy (mean over
    its seeds). Nothing is written when no run has a coverage evaluation."""
    warm, finals = passk_curves(runs)
    if not finals:
        return []
    plot_dir = Path(plot_dir)
    plot_dir.mkdir(parents=True, exist_ok=True)
    fig = _figure((5.5 * len(finals), 4))
    colors = _color_cycle()
    for ax, (split, by_label) in zip(np.atleast_1d(fig.subplots(1, len(finals))), finals.items(), strict=True):
        if split in warm:
            ax.plot(list(warm[split]), list(warm[split].values()), "k--", lw=1.4, label="warm start")
        for i, (label, (curve, n)) in enumerate(by_label.items()):
            name = label + (f" (mean of {n})" if n > 1 else "")
            ax.plot(list(curve), list(curve.values()), color=colors[i % len(colors)], lw=1.6, marker=".", label=name)
        ax.set_xscale("log", base=2)
        _decorate(ax, "k (samples per problem)", "pass@k", f"pass@k, {SPLIT_TITLES.get(split, split)}", legend=7)
    return [_save(fig, plot_dir / "passk.png")]


def _color_cycle() -> list[str]:
    import matplotlib

    return matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]


def _figure(size: tuple[float, float]) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=size)


def _decorate(ax: Any, xlabel: str, ylabel: str, title: str, legend: int | None) -> None:
    """Axis labels, title, a light grid and (``legend`` = font size) the legend."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if legend is not None:
        ax.legend(fontsize=legend)


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def write_collapse_plots(log: Any, analysis: Any, plot_dir: Path) -> list[Path]:
    """``entropy_reward.png`` (entropy, reward and, when logged, response length and clip fraction against
    the step; the half-entropy step marked), ``law_fit.png`` (R against H, both fitted forms, the
    selected one solid, and its ceiling with its 95 % CI when the fit is informative, or both
    ceilings when the form is uncertain; the title says which is drawn) and, when the entropy
    surges, ``surge.png`` (:func:`write_surge_plot`)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    plot_dir.mkdir(parents=True, exist_ok=True)
    keys = analysis.source["keys"]
    out = []
    roles = ["entropy", "reward"] + [r for r in ("response_length", "clip") if keys.get(r)]
    fig = Figure(figsize=(4.5 * len(roles), 3.5))
    axes = fig.subplots(1, len(roles))
    ax1 = axes[0]
    for ax, role in zip(axes, roles, strict=True):
        s, v = log.series[keys[role]]
        ax.plot(s, v, lw=1)
        ax.set_xlabel("step")
        ax.set_title(keys[role])
    half = analysis.entropy["half_life_step"]
    if half is not None:
        ax1.axvline(half, color="C3", ls="--", lw=1, label=f"below half at {half:g}")
        ax1.legend(fontsize=8)
    out.append(_save(fig, plot_dir / "entropy_reward.png"))

    fig = Figure(figsize=(6, 4.5))
    ax = fig.subplots()
    target_key = keys.get(analysis.target) or keys["reward"]
    _, H, R = analysis.points
    ax.scatter(H, R, s=8, alpha=0.6, color="C0", label="logged")
    grid = np.linspace(0, max(float(np.max(H)), 1e-3), 100)
    forms = [(analysis.law, "law −a·e^H+b")]
    if analysis.mirror is not None:
        forms.append((analysis.mirror, "mirror q·e^(−βH)"))
    for form, name in forms:
        chosen = form.model == analysis.model
        style = "-" if chosen else "--"
        color = "C1" if chosen else "C2"
        which = "form uncertain" if analysis.form_uncertain else "selected" if chosen else "other"
        ax.plot(grid, form.predict(grid), style, color=color, label=f"{name}, {which} (R² {form.r2:.3f})")
    if analysis.form_uncertain:
        for form, _ in forms:
            chosen = form.model == analysis.model
            ax.axhline(
                form.ceiling,
                color="C1" if chosen else "C2",
                ls=":",
                lw=1,
                label=f"ceiling ({form.model}) {form.ceiling:.3g}",
            )
        title = "R against H: form uncertain (the ceilings disagree), both ceilings"
    elif analysis.informative:
        lo, hi = analysis.ceiling_ci
        ax.axhline(
            analysis.ceiling, color="C1", ls=":", lw=1, label=f"ceiling ({analysis.model}) {analysis.ceiling:.3g}"
        )
        ax.axhspan(lo, hi, color="C1", alpha=0.1, label=f"95 % CI [{lo:.3g}, {hi:.3g}]")
        fitted = " and ".join(name.split()[0] for _, name in forms)
        title = f"R against H: {fitted} fitted, {analysis.model} selected, its ceiling"
    else:
        title = f"R against H: fit not informative (R² {analysis.selected.r2:.3f}), no ceiling"
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(keys.get("val_entropy") or keys["entropy"])
    ax.set_ylabel(target_key)
    ax.legend(fontsize=7)
    out.append(_save(fig, plot_dir / "law_fit.png"))
    surge = write_surge_plot(log, getattr(analysis, "surge", None), plot_dir)
    return out + ([surge] if surge is not None else [])


SURGE_PLOT = "surge.png"


def write_surge_plot(log: Any, triage: Any, plot_dir: Path) -> Path | None:
    """``surge.png``: the entropy and every triage curve the log has
    (:class:`~entflow.analysis.surge.SurgeTriage`), one panel each on a shared step axis around the
    surges: each surge's stable window (the curves' baseline: its first half) shaded, its start a red
    dashed line, each curve's departure a dot with a dotted line in its panel, the curve(s) that
    moved first named in the title. Nothing is written (and a stale ``surge.png`` is removed) when
    there is no surge."""
    path = Path(plot_dir) / SURGE_PLOT
    if triage is None or not triage.surges:
        path.unlink(missing_ok=True)
        return None
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    from entflow.analysis.surge import CURVES

    Path(plot_dir).mkdir(parents=True, exist_ok=True)
    surges = triage.surges
    keys = [m.key for m in surges[0].moves if m.status != "not in the log" and m.key in log.series]
    labels = {m.key: m.label for m in surges[0].moves}
    panels = [(triage.entropy_key, "entropy"), *((k, labels[k]) for k in keys)]
    s0, s1 = log.series[triage.entropy_key][0][[0, -1]]
    first, last = surges[0], surges[-1]
    span = first.start_step - first.baseline_from_step
    lo = max(float(s0), first.baseline_from_step - span)
    hi = min(float(s1), (last.end_step if last.end_step is not None else last.confirm_step) + 2 * span)
    fig = Figure(figsize=(8, 1.6 * len(panels) + 0.8))
    axes = np.atleast_1d(fig.subplots(len(panels), 1, sharex=True))
    for ax, (key, label) in zip(axes, panels, strict=True):
        st, v = log.series[key]
        keep = (st >= lo) & (st <= hi)
        ax.plot(st[keep], v[keep], lw=1, color="C0")
        ax.set_ylabel(label, fontsize=8)
        ax.set_title(key, fontsize=8, loc="right")
        ax.grid(alpha=0.3)
        for sg in surges:
            base_to = sg.baseline_to_step if key == triage.entropy_key else sg.search_from_step
            ax.axvspan(sg.baseline_from_step, base_to, color="0.5", alpha=0.12, lw=0)
            ax.axvline(sg.start_step, color="C3", ls="--", lw=1)
            move = next((m for m in sg.moves if m.key == key and m.status == "moved"), None)
            at = sg.start_step if key == triage.entropy_key else move.step if move is not None else None
            if at is not None:
                ax.axvline(at, color="C1", ls=":", lw=1)
                y = np.interp(at, st, v)
                ax.plot([at], [y], "o", color="C1", ms=5)
    names = {"entropy": "entropy", **CURVES}
    firsts = "; ".join(
        f"step {sg.start_step:g}: first {' = '.join(names.get(r, r) for r in sg.first)}" for sg in surges
    )
    fig.suptitle(f"Entropy surge (red: start; shaded: baselines; dots: departures) — {firsts}", fontsize=9)
    axes[-1].set_xlabel("step")
    return _save(fig, path)
