"""The clean audit's table is the shared Table model (docs/architecture.md §1): its cells are the
audit's numbers, and its markdown is the shared renderer's."""

from __future__ import annotations

from entflow.analysis.render import render_markdown
from entflow.core.estimators import ESTIMATORS
from entflow.evidence.audit import audit_markdown, audit_table


def synthetic_result() -> dict:
    rows = []
    for v, shift in (("batch", 0.0), ("tabular_head", 0.5)):
        for i, e in enumerate(ESTIMATORS):
            rows.append({"variant": v, "estimator": e, "mean": shift + 0.1 * i, "half": 0.02, "n": 3, "rank": i + 1})
    return {"summary": rows}


def test_audit_table_cells_are_the_audit_numbers():
    table = audit_table(synthetic_result())
    text = table.text()
    headers = [c.header for c in table.columns]
    assert headers[0] == "estimator" and headers[-1] == "paper 000 Table 1 SRCC"
    assert [r[0] for r in text] == list(ESTIMATORS)
    tabular = text[list(ESTIMATORS).index("tabular")]
    assert tabular[1] == "+0.300 ± 0.020" and tabular[2] == "4"  # batch variant
    assert tabular[3] == "+0.800 ± 0.020" and tabular[4] == "4"  # tabular-head variant
    assert "over 3 seeds" in table.notes[0]


def test_audit_markdown_is_the_shared_renderer():
    res = synthetic_result()
    assert audit_markdown(res) == render_markdown(audit_table(res))
