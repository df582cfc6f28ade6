"""docs/architecture.md's table of the library internals entflow patches ("Library internals entflow
patches"): every row names a guard test that exists (its file parsed with ``ast``, so nothing is
imported and no optional library is needed) and an entflow source file that exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
HEADING = "### Library internals entflow patches"
NODE_ID = re.compile(r"`(tests/[\w/]+\.py)::(\w+(?:::\w+)*)`")
SOURCE = re.compile(r"`((?:trainer|integrations|hf|core|lab|doctor)/[\w/]+\.py)`")


def table_rows(text: str) -> list[list[str]]:
    """The cells of each body row of the first table under :data:`HEADING`."""
    section = text.split(HEADING, 1)[1].split("\n#", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]


def test_ids(path: Path) -> set[str]:
    """``name`` and ``Class::name`` of every test function of ``path``."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            found.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found |= {
                f"{node.name}::{f.name}"
                for f in node.body
                if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name.startswith("test")
            }
    return found


test_ids.__test__ = False  # a helper, not a test


def problems(rows: list[list[str]], root: Path) -> list[str]:
    """What is wrong with ``rows``: a row without exactly one guard test, a test file or test that
    does not exist, a row naming no entflow source file or one that does not exist."""
    out = []
    for row in rows:
        what = row[0][:60]
        tests = NODE_ID.findall(row[-1])
        if len(tests) != 1:
            out.append(f"{what}: names {len(tests)} guard tests, not 1")
        for file, name in tests:
            path = root / file
            if not path.is_file():
                out.append(f"{what}: {file} does not exist")
            elif name not in test_ids(path):
                out.append(f"{what}: {file} has no test {name}")
        sources = SOURCE.findall(row[1])
        if not sources:
            out.append(f"{what}: names no entflow source file")
        out += [
            f"{what}: src/entflow/{s} does not exist" for s in sources if not (root / "src" / "entflow" / s).is_file()
        ]
    return out


ROWS = table_rows(ARCHITECTURE.read_text())


def test_the_table_has_its_rows_and_columns():
    assert len(ROWS) >= 10, ROWS
    assert all(len(r) == 6 for r in ROWS), [r[0] for r in ROWS if len(r) != 6]
    patched = " ".join(r[0] for r in ROWS)
    for library in ("transformers:", "torch:", "TRL:", "verl:"):
        assert library in patched


@pytest.mark.parametrize("row", ROWS, ids=[r[-1].split("::")[-1].strip("`") for r in ROWS])
def test_every_row_names_an_existing_guard_test_and_source(row):
    assert problems([row], ROOT) == []


def test_a_missing_test_or_source_is_reported(tmp_path):
    """The check itself: a renamed test, a missing test file, a second test in one row, a missing
    source file are each reported; a test inside a class is found."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "def test_a():\n    pass\n\nclass TestB:\n    def test_c(self):\n        pass\n"
    )
    (tmp_path / "src" / "entflow" / "trainer").mkdir(parents=True)
    (tmp_path / "src" / "entflow" / "trainer" / "m.py").write_text("")
    good = ["x", "`trainer/m.py`", "", "", "", "`tests/test_x.py::test_a`"]
    in_class = ["x", "`trainer/m.py`", "", "", "", "`tests/test_x.py::TestB::test_c`"]
    assert problems([good, in_class], tmp_path) == []
    renamed = [*good[:-1], "`tests/test_x.py::test_b`"]
    no_file = [*good[:-1], "`tests/test_y.py::test_a`"]
    two = [*good[:-1], "`tests/test_x.py::test_a`, `tests/test_x.py::TestB::test_c`"]
    no_source = ["x", "`trainer/n.py`", "", "", "", "`tests/test_x.py::test_a`"]
    assert problems([renamed, no_file, two, no_source], tmp_path) == [
        "x: tests/test_x.py has no test test_b",
        "x: tests/test_y.py does not exist",
        "x: names 2 guard tests, not 1",
        "x: src/entflow/trainer/n.py does not exist",
    ]
