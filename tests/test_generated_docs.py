"""The docs' printed tables (``Printed by `…`:`` blocks, benchmarks/docs_tables.py) equal what their commands print
from the committed result files, and a number typed over by hand is caught."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import docs_tables  # noqa: E402  (benchmarks/docs_tables.py)


def test_every_generated_block_is_current():
    assert list((ROOT / "docs").glob("*.md"))
    blocks = sum(f.read_text().count("Printed by `python benchmarks/") for f in (ROOT / "docs").glob("*.md"))
    assert blocks >= 2
    assert docs_tables.stale_blocks(ROOT / "docs") == []


def test_a_hand_edited_number_is_caught(tmp_path):
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    block = page.index("Printed by `python benchmarks/gpu_stats.py --table")
    row = page.index("| trl |", block)
    ms_start = row + len("| trl | ")
    edited = page[:ms_start] + "1" + page[ms_start:]  # 3.26 -> 13.26, say
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "benchmarks.md").write_text(edited)
    shutil.copytree(ROOT / "docs" / "results", tmp_path / "docs" / "results")
    shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks")
    stale = docs_tables.stale_blocks(tmp_path / "docs", root=tmp_path)
    assert len(stale) == 1 and "gpu_stats.py --table" in stale[0]
