"""The report's tables as values: one :class:`Table` model with typed cells, and the functions that
build each table from :func:`~entflow.analysis.report.summarize_run` dicts.

A cell holds a value, never markup: a string, a number (formatted by its column's format spec),
``None`` / NaN (shown as "–"), an :class:`Interval` (mean ± half-width over seeds), a :class:`Span`
(first → last of a diagnostic) or a :class:`Ranked` value ("+0.650 (1)"). :meth:`Table.text`
turns every cell into its one text; the renderers of :mod:`entflow.analysis.render` (rich terminal,
markdown, HTML) only lay that text out, so the three formats show the same cells.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from entflow.analysis.stats import (
    aggregate_seeds,
    audit_ranking,
    audit_table,
    audited_estimators,
)
from entflow.analysis.surge import surge_lines
from entflow.errors import ShapeError

__all__ = [
    "SEED_COLUMNS",
    "SUMMARY_COLUMNS",
    "TERMINAL_COLUMNS",
    "Cell",
    "Column",
    "Interval",
    "Ranked",
    "Span",
    "Table",
    "audit_detail_table",
    "audit_matrix_table",
    "audit_ranking_table",
    "collapse_footer",
    "collapse_table",
    "format_cell",
    "format_number",
    "headline_table",
    "seeds_table",
    "summary_table",
]


@dataclass(frozen=True)
class Interval:
    """Mean ± half-width of a 95 % t-interval over ``n`` values (:func:`~entflow.analysis.stats.t_interval`)."""

    mean: float
    half: float
    n: int


@dataclass(frozen=True)
class Span:
    """The first and the last value of a diagnostic over a run, shown "first→last"."""

    first: float
    last: float


@dataclass(frozen=True)
class Ranked:
    """A value with its rank (1 = best; None = not ranked), shown "value (rank)"."""

    value: float
    rank: int | None


Cell = str | int | float | Interval | Span | Ranked | None


@dataclass(frozen=True)
class Column:
    """A column: its header, the format spec of its numbers (``format(value, spec)``; ``"s"`` for
    text) and its alignment in every format."""

    header: str
    spec: str = "s"
    align: Literal["left", "right"] = "right"


@dataclass
class Table:
    """A titled table: ``columns`` ``[C]``, ``rows`` ``[R][C]`` of typed cells, ``notes`` (sentences
    shown under the title) and ``name`` (a short id: the HTML class)."""

    title: str
    columns: tuple[Column, ...]
    rows: list[tuple[Cell, ...]] = field(default_factory=list)
    notes: tuple[str, ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ShapeError(f"table {self.title!r} row {i}", f"{len(self.columns)} cells", f"{len(row)} cells")

    def text(self) -> list[list[str]]:
        """Every cell as its text, ``[R][C]``: the one formatting all renderers share."""
        return [[format_cell(c, col.spec) for c, col in zip(row, self.columns, strict=True)] for row in self.rows]


DASH = "–"  # a value that is missing or not finite


def format_number(v: Any, spec: str) -> str:
    """``format(v, spec)``; None and non-finite floats → "–"; a value the spec does not fit → ``str(v)``."""
    if v is None:
        return DASH
    if isinstance(v, float) and not math.isfinite(v):
        return DASH
    try:
        return format(v, spec)
    except (TypeError, ValueError):
        return str(v)


def format_cell(cell: Cell, spec: str) -> str:
    """The text of one cell under its column's format ``spec``."""
    if isinstance(cell, Interval):
        if cell.n == 0:
            return DASH
        mean = format_number(cell.mean, spec)
        # a half-width is a size: no sign, even in a column of signed values
        return mean if cell.n == 1 else f"{mean} ± {format_number(cell.half, spec.removeprefix('+'))}"
    if isinstance(cell, Span):
        return f"{format_number(cell.first, spec)}→{format_number(cell.last, spec)}"
    if isinstance(cell, Ranked):
        value = format_number(cell.value, spec)
        return value if cell.rank is None else f"{value} ({cell.rank})"
    return format_number(cell, spec)


# --------------------------------------------------------------------------------------------
# Column sets: (header, summary key, format spec); "pair" = the key's _first → _last span
# --------------------------------------------------------------------------------------------

SUMMARY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("run", "name", "s"),
    ("method", "method", "s"),
    ("steps", "steps", "d"),
    ("H initial", "entropy_initial", ".3f"),
    ("H final", "entropy_final", ".3f"),
    ("H retention", "entropy_retention", ".2f"),
    ("acc warm", "val_acc_warm", ".3f"),
    ("acc best", "val_acc_best", ".3f"),
    ("acc best (3-eval window)", "val_acc_best_window", ".3f"),
    ("acc final", "val_acc_final", ".3f"),
    ("greedy best", "val_acc_greedy_best", ".3f"),
    ("greedy final", "val_acc_greedy_final", ".3f"),
    ("pass@k final", "val_pass_at_k_final", ".3f"),
    ("reward final", "reward_final", ".3f"),
    ("law ceiling", "law_ceiling", ".3f"),
    ("law R²", "law_r2", ".2f"),
    ("law early-pred. RMSE", "law_predict_rmse", ".3f"),
    ("plateau step", "plateau_step", ".0f"),
    ("distinct-n first→last", "distinct_n", "pair"),
    ("Self-BLEU first→last", "self_bleu", "pair"),
    ("calib. AUROC last", "calib_auroc_last", ".2f"),
    ("calib. gap last", "calib_gap_last", "+.2f"),
    ("G top-20 % H share last", "gnorm_top20_share_last", ".2f"),
    ("wall s", "wall_time_s", ".0f"),
)
PAIR_SPEC = ".2f"  # the format of both ends of a "pair" column

# the terminal's headline columns, so that the table fits an 80-column terminal: short headers, the
# summary's formats
TERMINAL_COLUMNS: tuple[tuple[str, str, str], ...] = tuple(
    (header, key, next(spec for _, k, spec in SUMMARY_COLUMNS if k == key))
    for header, key in (
        ("steps", "steps"),
        ("H init", "entropy_initial"),
        ("H final", "entropy_final"),
        ("H retain", "entropy_retention"),
        ("acc warm", "val_acc_warm"),
        ("acc best³", "val_acc_best_window"),
        ("acc final", "val_acc_final"),
        ("greedy", "val_acc_greedy_final"),
    )
)
# the legend of every abbreviation and mark of TERMINAL_COLUMNS
TERMINAL_LEGEND = (
    "H: rollout entropy (nats), mean of the first 5 % (init) and last 20 % (final) of steps; retain = "
    "final / init; acc: validation accuracy, warm = the step-0 evaluation, best³ = the best mean of 3 "
    "consecutive evaluations after it; greedy: the last greedy accuracy."
)

# the coverage table: pass@k of the warm start → the final policy, per split (coverage.json), at these
# k where measured and at the largest k measured
COVERAGE_KS = (1, 16, 256)
COVERAGE_SPLITS = ("val", "hard")
_COVERAGE_KEY = re.compile(rf"(?:{'|'.join(COVERAGE_SPLITS)})_pass_at_(\d+)_last")
COVERAGE_NOTE = (
    "pass@k = the chance that at least one of k samples (temperature 1) solves a problem, by the unbiased "
    "estimator from n samples per problem (coverage_n), averaged over the split's problems; warm start → final "
    "policy. A value at the largest k below the warm start's means training narrowed what the policy can reach."
)

# the over-seeds table: (header, aggregate key, format spec)
SEED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("H retention", "entropy_retention", ".2f"),
    ("H initial", "entropy_initial", ".3f"),
    ("H final", "entropy_final", ".3f"),
    ("acc warm", "val_acc_warm", ".3f"),
    ("acc best (3-eval window)", "val_acc_best_window", ".3f"),
    ("gain (window − warm)", "val_acc_gain_window", "+.3f"),
    ("acc final", "val_acc_final", ".3f"),
    ("pass@k final", "val_pass_at_k_final", ".3f"),
    ("law R²", "law_r2", ".2f"),
    ("distinct-n last", "distinct_n_last", ".2f"),
    ("Self-BLEU last", "self_bleu_last", ".2f"),
)
TERMINAL_SEED_COLUMNS = SEED_COLUMNS[:7]

SUMMARY_NOTE = (
    "Entropy retention = mean entropy over the last 20 % of steps / mean over the first 5 %. Warm = the "
    "step-0 evaluation of the warm-started model; best over the evaluations after it. Law = R = −a·exp(H) + b "
    "fitted to (validation entropy, val acc) at each evaluation (the rollout entropy when fewer than 3 "
    "evaluations log it); ceiling = −a + b."
)
SEEDS_NOTE = (
    "Mean over the seeds of each method ± the half-width of a 95 % Student-t interval (n − 1 degrees of "
    "freedom). Best accuracy = best mean of 3 consecutive evaluations."
)
AUDIT_NOTE = (
    "Mean over steps of the per-step correlation between each entropy-change estimator (docs/design.md §5) "
    "and the measured ΔH (docs/design.md §9); rank 1 = best mean Spearman within the run (paper 000 Table 1 "
    "reports SRCC 0.61–0.72 for STEER's Ω, 0.04–0.08 for Cov)."
)
NO_AUDIT_NOTE = "No audit metrics in these runs."


def _summary_columns(spec: Sequence[tuple[str, str, str]], first_align: int) -> tuple[Column, ...]:
    return tuple(
        Column(header, PAIR_SPEC if fmt == "pair" else fmt, "left" if i < first_align else "right")
        for i, (header, _, fmt) in enumerate(spec)
    )


def _summary_cell(summary: dict[str, Any], key: str, fmt: str) -> Cell:
    if fmt == "pair":
        return Span(summary.get(key + "_first", math.nan), summary.get(key + "_last", math.nan))
    return summary.get(key)


def summary_table(
    summaries: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]] = SUMMARY_COLUMNS
) -> Table:
    """One row per run; ``columns`` = (header, summary key, format spec), the first two (run and
    method) left-aligned."""
    return Table(
        title="Summary",
        columns=_summary_columns(columns, 2),
        rows=[tuple(_summary_cell(s, key, fmt) for _, key, fmt in columns) for s in summaries],
        notes=(SUMMARY_NOTE,),
        name="summary",
    )


def coverage_table(summaries: Sequence[dict[str, Any]]) -> Table:
    """One row per run that measured coverage: pass@k warm start → final for each split and each k
    the summaries hold (summary keys ``{split}_pass_at_{k}_first`` / ``_last``: the k of
    :data:`COVERAGE_KS` a run measured and its largest)."""
    ks = sorted({int(m[1]) for s in summaries for key in s if (m := _COVERAGE_KEY.fullmatch(key))})
    columns = [(f"{split} pass@{k}", f"{split}_pass_at_{k}", "pair") for split in COVERAGE_SPLITS for k in ks]
    present = [c for c in columns if any(f"{c[1]}_last" in s for s in summaries)]
    rows = [
        (run_label(s), *(_summary_cell(s, key, fmt) for _, key, fmt in present))
        for s in summaries
        if any(f"{key}_last" in s for _, key, _ in present)
    ]
    return Table(
        title="Coverage (pass@k, warm start → final)",
        columns=(Column("run (method)", align="left"), *_summary_columns(present, 0)),
        rows=rows,
        notes=(COVERAGE_NOTE,),
        name="coverage",
    )


def run_label(summary: dict[str, Any]) -> str:
    """ "name (method)", or the name alone when it already spells the method."""
    name, method = summary["name"], str(summary["method"])
    return name if name == method.replace("+", "_") else f"{name} ({method})"


def headline_table(summaries: Sequence[dict[str, Any]], title: str = "entflow runs") -> Table:
    """The terminal's summary: "run (method)" and the :data:`TERMINAL_COLUMNS`, with their legend."""
    return Table(
        title=title,
        columns=(Column("run (method)", align="left"), *_summary_columns(TERMINAL_COLUMNS, 0)),
        rows=[(run_label(s), *(s.get(key) for _, key, _ in TERMINAL_COLUMNS)) for s in summaries],
        notes=(TERMINAL_LEGEND,),
        name="headline",
    )


def seeds_table(summaries: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]] = SEED_COLUMNS) -> Table:
    """One row per method group (:func:`~entflow.analysis.stats.aggregate_seeds`): the seeds, then
    mean ± 95 % t half-width of each of ``columns``."""
    rows: list[tuple[Cell, ...]] = []
    for row in aggregate_seeds(summaries):
        seeds = ",".join(str(x) for x in row["seeds"])
        rows.append((row["group"], seeds, *(Interval(*row[key]) for _, key, _ in columns)))
    return Table(
        title="Over seeds",
        columns=(Column("method", align="left"), Column("seeds", align="left"), *_summary_columns(columns, 0)),
        rows=rows,
        notes=(SEEDS_NOTE,),
        name="seeds",
    )


def audit_detail_table(summaries: Sequence[dict[str, Any]]) -> Table:
    """One row per (run, estimator) of :func:`~entflow.analysis.stats.audit_table`; no rows and a
    note saying so when no run has audit metrics."""
    rows = audit_table(summaries)
    return Table(
        title="Estimator audit",
        columns=(
            Column("run", align="left"),
            Column("estimator", align="left"),
            Column("mean Spearman", "+.3f"),
            Column("mean Pearson", "+.3f"),
            Column("mean MSE (scale-fitted)", ".3g"),
            Column("rank", "d"),
        ),
        rows=[(r["run"], r["estimator"], r["spearman"], r["pearson"], r["mse"], r["rank"]) for r in rows],
        notes=(AUDIT_NOTE,) if rows else (NO_AUDIT_NOTE,),
        name="audit",
    )


def audit_ranking_table(summaries: Sequence[dict[str, Any]]) -> Table:
    """Estimators ranked across runs (:func:`~entflow.analysis.stats.audit_ranking`)."""
    return Table(
        title="Ranking across runs",
        columns=(
            Column("rank", "d", align="left"),
            Column("estimator", align="left"),
            Column("mean Spearman (over runs)", "+.3f"),
            Column("mean Pearson (over runs)", "+.3f"),
            Column("runs with data", "d"),
        ),
        rows=[(r["rank"], r["estimator"], r["spearman"], r["pearson"], r["n_runs"]) for r in audit_ranking(summaries)],
        name="ranking",
    )


def audit_matrix_table(summaries: Sequence[dict[str, Any]]) -> Table:
    """Mean audit Spearman, one row per estimator, one column per run, the rank within the run in
    brackets (the terminal's compact audit view); no rows when no run has audit metrics."""
    ranks = {(r["run"], r["estimator"]): r["rank"] for r in audit_table(summaries)}
    return Table(
        title="audit: mean Spearman (rank)",
        columns=(Column("estimator", align="left"), *(Column(s["name"], "+.3f") for s in summaries)),
        rows=[
            (e, *(Ranked(s.get("audit_spearman", {}).get(e, math.nan), ranks.get((s["name"], e))) for s in summaries))
            for e in audited_estimators(summaries)
        ],
        name="audit-matrix",
    )


# --------------------------------------------------------------------------------------------
# entflow analyze on any trainer's log (docs/analyze.md)


def _text(v: Any, spec: str = ".4g") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return format(v, spec) if isinstance(v, int | float) else str(v)


def _iv(iv: Any) -> str:
    return f"[{_text(iv[0])}, {_text(iv[1])}]" if iv else "—"


FORM_NAMES = {"law": "law −a·e^H+b", "mirror": "mirror q·e^(−βH)"}
TRAINER_NAMES = {"entflow": "entflow", "trl": "TRL", "verl": "verl (Hydra overrides)"}


def _ceiling_row(d: dict[str, Any], model: str, selected: bool) -> list[str]:
    """One form's ceiling, labelled "selected", "other" or "form uncertain": its value with its CI
    and R², or "not informative" with the reason (:func:`~entflow.analysis.collapse.uninformative`)
    and the estimate."""
    form = d["fit"][model]
    uncertain = d["fit"]["form_uncertain"]
    label = f"ceiling, {model} ({'form uncertain' if uncertain else 'selected' if selected else 'other'})"
    numbers = f"95 % CI {_iv(form['ci']['ceiling'])}; R² {_text(form['r2'], '.3f')}"
    if not form["informative"]:
        return [label, "not informative", f"{form['note']}; estimate {_text(form['ceiling'])}"]
    return [label, _text(form["ceiling"]), numbers if selected or uncertain else f"{numbers}; not selected"]


def _selection_row(fit: dict[str, Any]) -> list[str]:
    """The selected form (or "form uncertain"), why, and the held-out RMSEs it was judged on."""
    rmse = fit["heldout_rmse"]
    scores = f"held-out RMSE law {_text(rmse['law'])}, mirror {_text(rmse['mirror'])} (last {fit['heldout_n']} points)"
    reason = fit["selection"]["reason"]
    value = "form uncertain" if fit["form_uncertain"] else fit["model"]
    if fit["form_uncertain"]:
        reason = reason.removeprefix("form uncertain: ")
    return ["selected form", value, f"{reason}; {scores}" if reason else scores]


def collapse_table(analysis: Any) -> Table:
    """The table of one :class:`~entflow.analysis.collapse.CollapseAnalysis` (``entflow analyze`` on
    any trainer's log): R and the selected form (the law unless the held-out points resolve the
    mirror form; "form uncertain" when neither is resolved and their ceilings disagree), each
    form's ceiling (the selected one first, "not informative" when
    :func:`~entflow.analysis.collapse.uninformative` says so), the forms' parameters, the early
    prediction next to its baselines, entropy and the reward's slope. The verdict is in the title;
    :func:`collapse_footer` has the reason and the suggestion."""
    d = analysis.to_dict()
    fit, pred, ent, rew, col = d["fit"], d["prediction"], d["entropy"], d["reward"], d["collapse"]
    src = d["source"] or {}
    title = f"entflow analyze: {src.get('path', '')} ({src.get('format', 'series')}): {col['verdict']}"
    model = fit["model"]
    other = "mirror" if model == "law" else "law"
    rows = [
        [
            "R (fitted target)",
            _text(src.get("keys", {}).get(d["target"], d["target"])),
            f"{'validation metric' if d['target'] == 'val' else 'training reward'}, {fit['n']} points",
        ],
        _selection_row(fit),
        _ceiling_row(d, model, True),
    ]
    if fit[other] is not None:
        rows.append(_ceiling_row(d, other, False))
    law = fit["law"]
    rows.append(
        [
            f"{FORM_NAMES['law']}: a, b",
            f"{_text(law['a'])}, {_text(law['b'])}",
            f"95 % CI a {_iv(law['ci']['a'])}, b {_iv(law['ci']['b'])}",
        ]
    )
    if (m := fit["mirror"]) is not None:
        rows.append(
            [
                f"{FORM_NAMES['mirror']}: q, β",
                f"{_text(m['q'])}, {_text(m['beta'])}",
                f"95 % CI q {_iv(m['ci']['q'])}, β {_iv(m['ci']['beta'])}",
            ]
        )
    if pred["final"] is None:
        rows.append(["predicted final", "—", pred["note"]])
    else:
        label = f"predicted final ({pred['model']})"
        basis = f"from the first {pred['n_fit']} points; observed {_text(pred['observed_final'])}"
        if pred["informative"]:
            rows.append(
                [
                    label,
                    _text(pred["final"]),
                    f"95 % PI {_iv(pred['interval'])} {basis}, error {_text(pred['error'], '+.3g')}",
                ]
            )
        else:
            estimate = f"estimate {_text(pred['final'])}, 95 % PI {_iv(pred['interval'])}"
            rows.append([label, "not informative", f"{pred['note']}; {estimate} {basis}"])
        for name, b in pred["baselines"].items():
            rows.append(
                [f"  baseline: {name.replace('_', ' ')}", _text(b["final"]), f"error {_text(b['error'], '+.3g')}"]
            )
    half = ent["half_life_step"]
    rows += [
        [
            "entropy first → last",
            f"{_text(ent['initial'])} → {_text(ent['final'])}",
            "mean of first 5 % / last 20 %",
        ],
        [
            "entropy retention",
            _text(ent["retention"], ".3g"),
            f"below half at step {_text(half, 'g')}" if half is not None else "never below half",
        ],
        [
            "reward slope",
            f"{_text(rew['late_rate'], '.3g')}/step",
            f"over the last {rew['window']} points, vs {_text(rew['early_rate'], '.3g')}/step over the first "
            f"{rew['window']}: " + ("stalled" if rew["stalled"] else "still rising"),
        ],
    ]
    columns = (Column("quantity", align="left"), Column("value", align="left"), Column("evidence", align="left"))
    return Table(title, columns, [tuple(r) for r in rows], name="collapse")


def collapse_footer(analysis: Any) -> list[str]:
    """The lines under the collapse table: the verdict and its reason, the suggested method and
    why, then the lines that apply it in the trainer that wrote the log (the suggestion's
    ``lines``, :func:`~entflow.analysis.collapse.suggestion_lines`), indented by four spaces; then,
    for a log's analysis (:func:`~entflow.analysis.collapse.analyze_log`), the entropy-surge
    triage (:func:`~entflow.analysis.surge.surge_lines`)."""
    d = analysis.to_dict()
    col, sug = d["collapse"], d["suggestion"]
    surge = getattr(analysis, "surge", None)
    triage = [] if surge is None else surge_lines(surge)
    out = [f"verdict: {col['verdict']} ({col['reason']})"]
    if not sug["lines"]:
        return [*out, f"suggestion: none, {sug['why']}", *triage]
    trainer = TRAINER_NAMES.get(sug.get("trainer", "entflow"), sug.get("trainer", ""))
    out += [f"suggestion: {sug['spec']}: {sug['why']}", f"in {trainer}:"]
    return out + [f"    {line}" for line in sug["lines"]] + triage
