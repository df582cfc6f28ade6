"""The three renderers of a :class:`~entflow.analysis.tables.Table`: rich (terminal), markdown and
HTML.

Each lays out the same texts, :meth:`Table.text` (title, notes, headers, cells), so the formats
cannot drift apart: a renderer decides markup and alignment, never a number's format. Cell text is
shown literally in every format (escaped for markdown and HTML, not read as rich markup).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from entflow.analysis.tables import Table

__all__ = ["render_html", "render_html_page", "render_markdown", "render_rich", "split_columns"]


# --------------------------------------------------------------------------------------------
# Terminal (rich)
# --------------------------------------------------------------------------------------------


def render_rich(table: Table) -> Any:
    """A ``rich.table.Table``: title, the notes as its caption, one column per :class:`Column`.

    Readable in an 80-column terminal: a number column's header is set one word per line and is as
    wide as its longest word or value (never cut: no "gree…"); a text column folds its cells but
    is at least as wide as its header's longest word (no "(metho d)") and 8 characters (or its
    longest cell).
    """
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    title = Text(table.title, style="table.title") if table.title else None  # literal, not markup
    caption = Text(" ".join(table.notes), style="table.caption", justify="left") if table.notes else None
    out = RichTable(title=title, caption=caption, box=box.SIMPLE_HEAD, pad_edge=False)
    cells = table.text()
    for j, col in enumerate(table.columns):
        width = _min_width(col, [row[j] for row in cells])
        if col.align == "left":
            out.add_column(Text(col.header), justify="left", overflow="fold", min_width=width)
        else:
            header = Text("\n".join(col.header.split()))
            out.add_column(header, justify="right", no_wrap=True, min_width=width)
    for row in cells:
        out.add_row(*(Text(cell) for cell in row))
    return out


LABEL_WORD_MAX = 12  # a text column is at least as wide as its cells' longest word, up to this


def _min_width(col: Any, cells: Sequence[str]) -> int:
    """The narrowest a column may be drawn: a number column as wide as its longest value (and 5),
    a text column as its cells' longest word (at most :data:`LABEL_WORD_MAX`); both at least
    their header's longest word."""
    word = max((len(w) for w in col.header.split()), default=0)
    if col.align == "left":
        longest_word = max((len(w) for c in cells for w in c.split()), default=0)
        return max(word, min(LABEL_WORD_MAX, longest_word))
    return max(word, max((len(c) for c in cells), default=0), 5)


def split_columns(table: Table, width: int) -> list[Table]:
    """``table`` as one or more tables that each fit ``width`` terminal columns when drawn by
    :func:`render_rich`: the leading text columns (the row labels) are repeated in every part and
    the other columns are dealt out in order; the title gets "(continued)" after the first part
    and the notes go under the last. A table that fits, or has no column to deal out, is returned
    as it is."""
    cells = table.text()
    # each column: its width, a space of padding on each side and one separator (box.SIMPLE_HEAD);
    # the table's outer paddings are off (pad_edge=False) and its right edge takes one character
    widths = [_min_width(c, [row[j] for row in cells]) + 3 for j, c in enumerate(table.columns)]
    n_label = next((j for j, c in enumerate(table.columns) if c.align != "left"), len(table.columns))
    budget = width + 1 - sum(widths[:n_label])
    if sum(widths) - 1 <= width or n_label == len(table.columns) or n_label == 0:
        return [table]
    groups: list[list[int]] = [[]]
    used = 0
    for j in range(n_label, len(table.columns)):
        if groups[-1] and used + widths[j] > budget:
            groups.append([])
            used = 0
        groups[-1].append(j)
        used += widths[j]
    parts = []
    for i, group in enumerate(groups):
        keep = list(range(n_label)) + group
        parts.append(
            Table(
                title=table.title + (" (continued)" if i else ""),
                columns=tuple(table.columns[j] for j in keep),
                rows=[tuple(row[j] for j in keep) for row in table.rows],
                notes=table.notes if i == len(groups) - 1 else (),
                name=table.name,
            )
        )
    return parts


# --------------------------------------------------------------------------------------------
# Markdown (GitHub-flavoured)
# --------------------------------------------------------------------------------------------


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|")


def render_markdown(table: Table, level: int = 2) -> str:
    """A heading of ``level`` with the title, the notes as a paragraph, then the table (no table
    when it has no rows). Ends with a newline."""
    parts = []
    if table.title:
        parts.append(f"{'#' * level} {table.title}")
    if table.notes:
        parts.append(" ".join(table.notes))
    if table.rows:
        lines = [
            "| " + " | ".join(_md_escape(c.header) for c in table.columns) + " |",
            "|" + "|".join("---" if c.align == "left" else "---:" for c in table.columns) + "|",
        ]
        lines += ["| " + " | ".join(_md_escape(cell) for cell in row) + " |" for row in table.text()]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3} td.l,th.l{text-align:left}
img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
pre{background:#f7f7f7;padding:0.8em;overflow-x:auto;font-size:0.85em}
.note{color:#666;font-size:0.9em}
"""


def render_html(table: Table, level: int = 2) -> str:
    """``<h{level}>`` title, the notes as ``<p class='note'>``, then ``<table class="{name}">``
    (no table when it has no rows); left-aligned columns carry ``class="l"``."""
    e = html.escape
    parts = []
    if table.title:
        parts.append(f"<h{level}>{e(table.title)}</h{level}>")
    if table.notes:
        parts.append(f"<p class='note'>{e(' '.join(table.notes), quote=False)}</p>")
    if table.rows:
        cls = [' class="l"' if c.align == "left" else "" for c in table.columns]
        th = "".join(f"<th{k}>{e(c.header)}</th>" for k, c in zip(cls, table.columns, strict=True))
        body = "".join(
            "<tr>" + "".join(f"<td{k}>{e(cell)}</td>" for k, cell in zip(cls, row, strict=True)) + "</tr>"
            for row in table.text()
        )
        parts.append(f'<table class="{e(table.name)}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>')
    return "\n".join(parts)


def render_html_page(title: str, sections: Sequence[str]) -> str:
    """A self-contained HTML document (inline CSS, no external resource): ``<h1>`` title, then the
    ``sections`` (HTML fragments) one per line."""
    e = html.escape
    head = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(title)}</title>\n<style>{CSS}</style></head><body>"
    )
    return "\n".join([head, f"<h1>{e(title)}</h1>", *sections, "</body></html>\n"])
