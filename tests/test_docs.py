"""The README and docs/ as a user reads them: no working notes, a method count that stays true, the
README's Python examples run, and every page is on the docs site (mkdocs.yml).

The docs site itself is built by ``mkdocs build --strict`` (``.ci/docs``), which fails on a broken
link or anchor; these tests need no mkdocs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
CLAIMS = ROOT / "src" / "entflow" / "evidence" / "claims.yaml"
CHANGELOG = ROOT / "CHANGELOG.md"
SOURCES = sorted((ROOT / "src" / "entflow").rglob("*.py"))

# A working note: a reference to the tracker, an unfinished mark, an HTML comment (a placeholder
# left in the rendered page), or who was on the machine and when ("this session"). "Open an issue" (no number) is fine.
WORKING_NOTE = re.compile(
    r"\bissues? ?#?\d+|\bissue's\b|\bthe issue\b|\bin progress\b|\bTODO\b|\bFIXME\b|\bXXX\b"
    r"|<!--"
    r"|\bengineers?\b|\b(?:this|previous|next|last) session\b",
    re.IGNORECASE,
)


def _notes(path: Path) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{n}: {m.group(0)!r} in {line.strip()[:100]!r}"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for m in [WORKING_NOTE.search(line)]
        if m
    ]


@pytest.mark.parametrize("path", [README, CHANGELOG, *DOCS, CLAIMS], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_working_notes_in_docs_and_claims(path):
    assert _notes(path) == []


RESULTS = sorted((ROOT / "docs" / "results").rglob("*.json"))


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_working_notes_in_committed_results(path):
    """The claims tables that the docs link (their ``paper`` and ``note`` fields are shown to users)
    cite papers and docs, never the tracker: every string value is checked, JSON escapes decoded."""

    def strings(obj):
        if isinstance(obj, dict):
            for v in obj.values():
                yield from strings(v)
        elif isinstance(obj, list):
            for v in obj:
                yield from strings(v)
        elif isinstance(obj, str):
            yield obj

    found = [s[:100] for s in strings(json.loads(path.read_text())) if WORKING_NOTE.search(s)]
    assert found == []


def test_no_tracker_references_in_the_code():
    """Comments and docstrings cite papers, equations and docs/ sections, never the tracker; the
    docstrings are the site's API reference. The same for the tests, benchmarks and experiments a user
    reads in a clone (this file's own examples of notes aside)."""
    tracker = re.compile(r"\bissues? ?#?\d+", re.IGNORECASE)
    code = [*SOURCES, *(p for d in ("tests", "benchmarks", "experiments") for p in sorted((ROOT / d).rglob("*.py")))]
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in code
        if p != Path(__file__).resolve()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if tracker.search(line)
    ]
    assert found == []


def test_the_working_note_pattern_catches_notes():
    for note in (
        "see issue 21 point 3",
        "(Issue #8)",
        "the issue's target",
        "in progress",
        "TODO: x",
        "<!-- The TRL section goes here. -->",
        "shared with four other engineers",
        "on this session's 2-core machine",
        "started in the previous session",
    ):
        assert WORKING_NOTE.search(note), note
    for fine in ("Open an issue with:", "plain progress lines", "issued", "todos"):
        assert not WORKING_NOTE.search(fine), fine


def test_readme_method_count_stays_true():
    """The README gives a lower bound ("N or more"), true as long as no method is removed."""
    from entflow.methods import list_methods

    m = re.search(r"\b(\d+) or more\b", README.read_text())
    assert m, "the README states how many methods entflow has"
    assert len(list_methods()) >= int(m.group(1))


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_tensor_example_runs(capsys):
    """The "your own loop" example, exactly as printed: it builds its own tensors."""
    block = next(b for b in _python_blocks() if "ef.policy_loss" in b)
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "flow/S_pos" in out and "steer/weight_mean" in out and "torch.Size([32, 16])" in out


def test_readme_trl_example_runs(tmp_path, monkeypatch):
    """The TRL example, with the hub model swapped for a tiny local Llama (no download here), one
    step, and CPU settings; every swapped text must be in the README, so the test follows it."""
    pytest.importorskip("trl")
    from support.trl_tiny import save_tiny_llama

    model_dir, _, _ = save_tiny_llama(tmp_path / "model")
    block = next(b for b in _python_blocks() if "EntflowGRPOTrainer" in b)
    swaps = {
        '"Qwen/Qwen2.5-0.5B-Instruct"': repr(model_dir),
        "max_steps=200": "max_steps=1, max_completion_length=8, bf16=False, report_to='none'",
    }
    for old, new in swaps.items():
        assert old in block, old
        block = block.replace(old, new)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    assert (tmp_path / "out").is_dir()
    assert scope["args"].entflow_method == "clip_higher+steer"


def test_every_doc_page_is_on_the_site():
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(node) -> set[str]:
        if isinstance(node, str):
            return {node}
        items = node.values() if isinstance(node, dict) else node
        return set().union(*(pages(n) for n in items))

    on_site = pages(config["nav"])
    top_level = {p.relative_to(ROOT / "docs").as_posix() for p in DOCS if "results" not in p.parts}
    assert top_level - on_site == set()
    assert all((ROOT / "docs" / p).is_file() for p in on_site)


def test_ci_builds_the_docs_strictly():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert any(ln.startswith("lane ") and " .ci/docs " in ln for ln in ci)  # one of .ci/run's lanes
    script = (ROOT / ".ci" / "docs").read_text()
    assert 'mkdocs" build --strict' in script or "mkdocs build --strict" in script
