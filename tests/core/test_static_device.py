"""Static scan: every tensor constructor in core/ and methods/ names its device.

A CPU-only CI cannot see a tensor allocated on the wrong device (everything is on the CPU), so
this test reads the source: a call ``torch.zeros(...)``, ``torch.arange(...)``, ``torch.rand(...)``,
``torch.Generator(...)`` … without a ``device=`` keyword fails it. ``*_like`` constructors take
the device of their argument and are allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import entflow

CONSTRUCTORS = {
    "zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye", "tensor", "as_tensor",
    "rand", "randn", "randint", "randperm", "normal", "Generator", "scalar_tensor",
}  # fmt: skip
ROOT = Path(entflow.__file__).parent
SCANNED = sorted([*(ROOT / "core").glob("*.py"), *(ROOT / "methods").glob("*.py")])


def constructors_without_device(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of every ``torch.<constructor>(...)`` call without ``device=``."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        f = node.func
        if isinstance(f.value, ast.Name) and f.value.id == "torch" and f.attr in CONSTRUCTORS:
            # ``**kw`` is trusted to carry the device (e.g. kw = {"dtype": d, "device": x.device})
            if not any(k.arg == "device" or k.arg is None for k in node.keywords):
                bad.append((node.lineno, f.attr))
    return bad


def test_scan_finds_a_missing_device():
    # the scanner itself: it must flag a constructor without device= (a bug group_stats once had), and accept the fix
    assert constructors_without_device("import torch\nx = torch.zeros(k, dtype=torch.float64)\n") == [(2, "zeros")]
    assert constructors_without_device("x = torch.zeros(k, device=v.device)\ny = torch.zeros_like(v)\n") == []
    assert constructors_without_device("g = torch.Generator()\n") == [(1, "Generator")]
    assert constructors_without_device("kw = {'device': x.device}\nu = torch.empty(3, **kw)\n") == []


def test_core_methods_objective_name_the_device_of_every_tensor_they_create():
    assert len(SCANNED) > 10
    problems = []
    for path in SCANNED:
        for line, name in constructors_without_device(path.read_text()):
            problems.append(f"{path.relative_to(ROOT)}:{line}: torch.{name}(...) without device=")
    assert not problems, "\n".join(problems)
