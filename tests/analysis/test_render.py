"""The Table model and its three renderers: one Table shows the same title, notes, headers and cell
texts in rich (terminal), markdown and HTML; a report's summary.md and report.html hold the same
tables cell for cell. The formats are parsed back independently (a markdown splitter, Python's
HTML parser, rich's own column cells and its recorded console text)."""

from __future__ import annotations

import io
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from entflow.analysis.render import render_html, render_markdown, render_rich, split_columns
from entflow.analysis.report import print_summary, summarize_run, write_report
from entflow.analysis.tables import (
    SUMMARY_COLUMNS,
    TERMINAL_COLUMNS,
    Column,
    Interval,
    Ranked,
    Span,
    Table,
    audit_matrix_table,
    format_cell,
    headline_table,
)
from entflow.errors import ShapeError
from support.run_dirs import make_run

# --------------------------------------------------------------------------------------------
# independent parsers of the three formats
# --------------------------------------------------------------------------------------------


def parse_markdown(text: str) -> list[dict]:
    """Every table of a markdown text: {heading, notes, headers, aligns, rows} (cells unescaped)."""

    def split(line: str) -> list[str]:
        cells = re.split(r"(?<!\\)\|", line.strip()[1:-1])
        return [c.strip().replace("\\|", "|").replace("\\\\", "\\") for c in cells]

    tables, heading, notes = [], None, []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading, notes = line.lstrip("#").strip(), []
            tables.append({"heading": heading, "notes": notes, "headers": [], "aligns": [], "rows": []})
        elif line.startswith("|"):
            t = tables[-1]
            t["headers"] = split(line)
            t["aligns"] = ["right" if c.endswith(":") else "left" for c in split(lines[i + 1])]
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                t["rows"].append(split(lines[i]))
                i += 1
            continue
        elif line.strip():
            notes.append(line)
        i += 1
    return tables


class HtmlTables(HTMLParser):
    """Headings, notes and tables of an HTML text, in order (character references decoded)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[dict] = []
        self._text: list[str] | None = None
        self._tag = ""
        self._cls: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("h2", "h3", "th", "td") or (tag == "p" and a.get("class") == "note"):
            self._text, self._tag, self._cls = [], tag, a.get("class")
        if tag in ("h2", "h3"):
            self.tables.append({"heading": None, "notes": [], "headers": [], "aligns": [], "rows": [], "name": None})
        elif tag == "table":
            self.tables[-1]["name"] = a.get("class")
        elif tag == "tr" and self.tables and self.tables[-1]["headers"]:
            self.tables[-1]["rows"].append([])

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if self._text is None or tag != self._tag:
            return
        text, t = "".join(self._text), self.tables[-1] if self.tables else None
        self._text = None
        if tag in ("h2", "h3"):
            t["heading"] = text
        elif tag == "p" and t is not None:
            t["notes"].append(text)
        elif tag == "th":
            t["headers"].append(text)
            t["aligns"].append("left" if self._cls == "l" else "right")
        elif tag == "td":
            t["rows"][-1].append(text)


def parse_html(text: str) -> list[dict]:
    p = HtmlTables()
    p.feed(text)
    return p.tables


# --------------------------------------------------------------------------------------------
# one Table, three formats
# --------------------------------------------------------------------------------------------

TRICKY = Table(
    title="Tricky <cells> | [b]",
    columns=(
        Column("run | name", align="left"),
        Column("n", "d"),
        Column("value", "+.3f"),
        Column("over seeds", "+.3f"),
        Column("first→last", ".2f"),
        Column("Spearman (rank)", "+.3f"),
    ),
    rows=[
        ("a|b [bold]x[/bold] <i>&amp;", 3, -0.25, Interval(-0.003, 0.294, 2), Span(0.823, 0.771), Ranked(0.65, 1)),
        ("back\\slash", None, math.nan, Interval(0.5, math.nan, 1), Span(math.nan, 0.1), Ranked(math.inf, None)),
        ("", 0, 1e-4, Interval(math.nan, math.nan, 0), Span(1.0, 2.0), Ranked(-0.1, 5)),
    ],
    notes=("Note one with <html> & [markup].", "Note two."),
    name="tricky",
)
# the texts worked out by hand from the cells and their column specs
TRICKY_TEXT = [
    ["a|b [bold]x[/bold] <i>&amp;", "3", "-0.250", "-0.003 ± 0.294", "0.82→0.77", "+0.650 (1)"],
    ["back\\slash", "–", "–", "+0.500", "–→0.10", "–"],
    ["", "0", "+0.000", "–", "1.00→2.00", "-0.100 (5)"],
]
HEADERS = ["run | name", "n", "value", "over seeds", "first→last", "Spearman (rank)"]
ALIGNS = ["left", "right", "right", "right", "right", "right"]
NOTES = "Note one with <html> & [markup]. Note two."


def test_table_text_is_the_hand_worked_formatting():
    assert TRICKY.text() == TRICKY_TEXT


def test_markdown_shows_the_tables_cells():
    (md,) = parse_markdown(render_markdown(TRICKY))
    assert md["heading"] == TRICKY.title and md["notes"] == [NOTES]
    assert md["headers"] == HEADERS and md["aligns"] == ALIGNS
    assert md["rows"] == TRICKY_TEXT
    assert render_markdown(TRICKY, level=3).startswith("### Tricky")


def test_html_shows_the_tables_cells():
    text = render_html(TRICKY)
    assert "<i>" not in text and "[bold]" in text  # escaped markup, literal brackets
    (h,) = parse_html(text)
    assert h["heading"] == TRICKY.title and h["notes"] == [NOTES] and h["name"] == "tricky"
    assert h["headers"] == HEADERS and h["aligns"] == ALIGNS
    assert h["rows"] == TRICKY_TEXT
    assert render_html(TRICKY, level=3).startswith("<h3>")


def test_rich_shows_the_tables_cells():
    rt = render_rich(TRICKY)
    assert str(rt.title) == TRICKY.title and str(rt.caption) == NOTES
    # a number column's header is set one word per line (80-column terminals); the words are the same
    assert [" ".join(str(c.header).split()) for c in rt.columns] == [" ".join(h.split()) for h in HEADERS]
    assert [c.justify for c in rt.columns] == ALIGNS
    columns = [[str(cell) for cell in c.cells] for c in rt.columns]
    assert [list(r) for r in zip(*columns, strict=True)] == TRICKY_TEXT
    # printed, the cells appear literally: rich markup in a cell is not interpreted
    console = Console(record=True, width=300, file=io.StringIO())
    console.print(rt)
    printed = console.export_text()
    for cell in [c for row in TRICKY_TEXT for c in row if c]:
        assert cell in printed, cell


def test_a_table_without_rows_renders_title_and_notes_only():
    empty = Table("Estimator audit", (Column("run", align="left"),), [], ("No audit metrics in these runs.",))
    assert render_markdown(empty) == "## Estimator audit\n\nNo audit metrics in these runs.\n"
    assert "<table" not in render_html(empty) and "No audit metrics" in render_html(empty)


def test_a_ragged_row_is_a_shape_error():
    with pytest.raises(ShapeError, match="row 1"):
        Table("t", (Column("a"), Column("b")), [(1, 2), (3,)])


@pytest.mark.parametrize(
    ("cell", "spec", "text"),
    [
        (Interval(0.3, 1.27, 2), "+.3f", "+0.300 ± 1.270"),  # the half-width is a size: never signed
        (Interval(0.3, 1.27, 1), ".2f", "0.30"),
        (Interval(0.3, math.nan, 0), ".2f", "–"),
        (Span(0.5, math.nan), ".2f", "0.50→–"),
        (Ranked(0.65, None), "+.3f", "+0.650"),
        (None, "d", "–"),
        (-math.inf, ".3f", "–"),
        ("text", ".3f", "text"),  # a value the spec does not fit: as it is
        (7, ".0f", "7"),
    ],
)
def test_format_cell(cell, spec, text):
    assert format_cell(cell, spec) == text


# --------------------------------------------------------------------------------------------
# the report: summary.md and report.html hold the same tables; the terminal the same numbers
# --------------------------------------------------------------------------------------------


@pytest.fixture
def report_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[Path]]:
    runs = [
        make_run(tmp_path / "runs", "grpo-s3", "grpo"),
        make_run(tmp_path / "runs", "steer-s3", "steer", offset=0.1, method_key="steer/weight_mean"),
    ]
    import entflow.analysis.report as report_mod

    monkeypatch.setattr(report_mod, "write_plots", lambda runs, plot_dir: [])  # tables only
    out = tmp_path / "out"
    write_report(runs, out)
    return out, runs


def test_summary_md_and_report_html_hold_the_same_tables(report_dir):
    out, _ = report_dir
    md = parse_markdown((out / "summary.md").read_text())
    html_tables = [t for t in parse_html((out / "report.html").read_text()) if t["name"]]
    assert [t["heading"] for t in md] == ["Summary", "Estimator audit", "Ranking across runs"]
    assert [t["heading"] for t in html_tables] == [t["heading"] for t in md]
    for m, h in zip(md, html_tables, strict=True):
        for part in ("notes", "headers", "aligns", "rows"):
            assert m[part] == h[part], (m["heading"], part)
    assert len(md[0]["rows"]) == 2 and len(md[1]["rows"]) == 2 * 3  # runs; runs × audited estimators


def test_terminal_numbers_are_the_reports(report_dir):
    """The terminal's headline columns show, per run, the same text as the summary table's
    column of the same summary key."""
    out, runs = report_dir
    (summary, *_) = parse_markdown((out / "summary.md").read_text())
    header_of = {key: header for header, key, _ in SUMMARY_COLUMNS}
    summaries = [summarize_run(r) for r in runs]
    headline = headline_table(summaries).text()
    for j, (_, key, _) in enumerate(TERMINAL_COLUMNS, start=1):
        col = summary["headers"].index(header_of[key])
        assert [row[j] for row in headline] == [row[col] for row in summary["rows"]], key
    console = Console(record=True, width=250, file=io.StringIO())
    print_summary(summaries, console)
    printed = console.export_text()
    assert all(cell in printed for row in headline for cell in row)


def test_terminal_tells_repeated_runs_apart_like_the_report(tmp_path: Path):
    s = summarize_run(make_run(tmp_path, "same", "grpo"))
    console = Console(record=True, width=250, file=io.StringIO())
    print_summary([s, s], console)
    printed = console.export_text()
    # two runs named alike are two runs (as in write_report), not two seeds of one method
    assert "same #2 (grpo)" in printed and "Over seeds" not in printed


def test_terminal_audit_matrix_matches_the_reports_audit_table(report_dir):
    """Each cell of the terminal's estimator × run matrix is the report's mean Spearman of that
    (run, estimator) with its rank in brackets."""
    out, runs = report_dir
    (detail,) = [t for t in parse_markdown((out / "summary.md").read_text()) if t["heading"] == "Estimator audit"]
    cols = {h: i for i, h in enumerate(detail["headers"])}
    expected = {
        (r[cols["run"]], r[cols["estimator"]]): r[cols["mean Spearman"]]
        + (f" ({r[cols['rank']]})" if r[cols["rank"]] != "–" else "")
        for r in detail["rows"]
    }
    matrix = audit_matrix_table([summarize_run(r) for r in runs])
    names = [c.header for c in matrix.columns[1:]]
    got = {(run, row[0]): cell for row in matrix.text() for run, cell in zip(names, row[1:], strict=True)}
    assert got == expected and len(got) == 6


def _seeded_runs_with_coverage(root: Path) -> list[Path]:
    """Two methods × two seeds, each with a coverage.json: the terminal's four tables."""
    import json

    import yaml

    runs = []
    for method in ("grpo", "clip_higher+steer"):
        for seed in (1, 2):
            run = make_run(root, f"{method.replace('+', '_')}-long-name-s{seed}", method)
            cfg = yaml.safe_load((run / "config.yaml").read_text())
            (run / "config.yaml").write_text(yaml.safe_dump({**cfg, "seed": seed, "group": method}))
            splits = {
                split: {"n_problems": 2, "pass_at_k": {"1": 0.3, "16": 0.45, "256": 0.61}} for split in ("val", "hard")
            }
            cov = {"n": 256, "warm": {"step": 0, "splits": splits}, "final": {"step": 40, "splits": splits}}
            (run / "coverage.json").write_text(json.dumps(cov))
            runs.append(run)
    return runs


def test_terminal_tables_fit_80_columns_with_whole_headers_and_a_legend(tmp_path: Path):
    """At 80 columns (rich Console(width=80)) no line is wider than 80; a table too wide is split
    by columns (its labels repeated), so every value appears whole; every header word appears
    whole (no "(metho d)", no "gree…"); the legend under the headline table explains every
    abbreviation and the mark ³."""
    from entflow.analysis.report import terminal_tables

    summaries = [summarize_run(r) for r in _seeded_runs_with_coverage(tmp_path)]
    console = Console(record=True, width=80, file=io.StringIO())
    print_summary(summaries, console)
    printed = console.export_text()
    lines = printed.splitlines()
    assert max(len(ln) for ln in lines) <= 80
    assert "…" not in printed
    words = {w for ln in lines for w in ln.split()}
    tables = terminal_tables(summaries)
    assert [t.name for t in tables] == ["headline", "coverage", "seeds", "audit-matrix"]
    for table in tables:
        for j, col in enumerate(table.columns):
            for word in col.header.split():
                assert word in words, (table.name, word)
            if col.align == "right":  # a number is never cut or folded
                for row in table.text():
                    assert row[j] in printed, (table.name, col.header, row[j])
    legend = " ".join(printed.split())
    for term in ("H:", "init", "final", "retain", "warm", "best³ = the best mean of 3", "greedy:"):
        assert term in legend, term


def test_split_columns_repeats_the_labels_and_keeps_every_column():
    wide = Table(
        "wide",
        (Column("run", align="left"), *(Column(f"metric {i}", ".3f") for i in range(12))),
        [("a", *[0.1 * i for i in range(12)]), ("b", *[0.2 * i for i in range(12)])],
        notes=("the note",),
        name="w",
    )
    parts = split_columns(wide, 80)
    assert len(parts) > 1 and split_columns(wide, 1000) == [wide]
    assert [p.title for p in parts] == ["wide"] + ["wide (continued)"] * (len(parts) - 1)
    assert [p.notes for p in parts] == [()] * (len(parts) - 1) + [("the note",)]
    assert all(p.columns[0].header == "run" and [r[0] for r in p.rows] == ["a", "b"] for p in parts)
    assert [c.header for p in parts for c in p.columns[1:]] == [f"metric {i}" for i in range(12)]
    for p in parts:
        console = Console(record=True, width=80, file=io.StringIO())
        console.print(render_rich(p))
        assert max(len(ln) for ln in console.export_text().splitlines()) <= 80
