"""The layout's dependency rules (docs/architecture.md §1), checked on the source with ``ast``.

Every ``import entflow.x`` and ``from entflow.x import …`` counts, including the lazy ones inside
functions and those under ``TYPE_CHECKING``: a lazy import is still a dependency. Two checks: no
package imports a layer it may not (none imports a higher one), and no two files import each other,
directly or through others (no circle between files).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import entflow

SRC = Path(entflow.__file__).parent

# package -> the entflow packages it may import (besides itself and the low-level top-level modules
# every layer may import: entflow.errors, entflow.files)
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "methods": {"core"},
    "analysis": {"core"},
    "trainer": {"core", "methods", "analysis"},
    "lab": {"core", "methods", "analysis", "trainer"},
    "hf": {"core", "methods", "analysis", "trainer"},
    # the settings (the registry of the lab and real models, runs side by side, compare) sit above
    # both: they choose and train either; neither imports them
    "settings": {"core", "methods", "analysis", "trainer", "lab", "hf"},
    # the evidence (claims registry, facts, records, reproduce, verify, audit) sits above the
    # settings: it trains a claim's runs through them; none of them imports it
    "evidence": {"core", "methods", "analysis", "trainer", "lab", "hf", "settings"},
    "integrations": {"core", "methods", "analysis"},
    "doctor": {"core", "methods", "analysis", "trainer", "integrations"},
    # the command line reaches the lab and real models through the registry of settings only
    "cli": {"core", "methods", "analysis", "trainer", "settings", "evidence", "integrations", "doctor", "__init__"},
}
PACKAGES = set(ALLOWED)
# top-level modules: the package root re-exports core and methods (0.2 deleted the 0.1 shims);
# errors and files are the low-level modules every layer may import; ``python -m entflow``
# (__main__) runs the command line and nothing else, and no module imports it
TOP_LEVEL = {"__init__": {"core", "methods"}, "errors": set(), "files": set(), "__main__": {"cli"}}
LOW_LEVEL = {"errors", "files"}


def _root_name(name: str) -> str:
    """``from entflow import name``: a package or module of the source imports it, any other name
    (``__version__``, the top-level API) the package root, ``__init__``."""
    return name if (SRC / name).is_dir() or (SRC / f"{name}.py").is_file() else "__init__"


def entflow_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, first component after entflow.)`` of every entflow import in ``path``. A bare
    ``import entflow`` (``as ef``) counts as the package root, ``__init__``: ``ef.<name>`` can reach
    any layer the root re-exports, which the ``ef.`` uses would hide from this check."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "entflow" else [f"entflow.{_root_name(a.name)}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "entflow":
                out.append((node.lineno, parts[1] if len(parts) > 1 else "__init__"))
    return out


def where(path: Path, src: Path) -> str:
    rel = path.relative_to(src)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def violations(src: Path) -> list[str]:
    found = []
    for path in sorted(src.rglob("*.py")):
        home = where(path, src)
        if home in PACKAGES:
            allowed = ALLOWED[home] | {home} | LOW_LEVEL
        elif home in TOP_LEVEL:
            allowed = TOP_LEVEL[home] | {home} | LOW_LEVEL
        else:
            found.append(f"{path.relative_to(src)} is a top-level module outside the layout")
            continue
        for line, target in entflow_imports(path):
            if target not in allowed:
                found.append(f"{path.relative_to(src)}:{line} imports entflow.{target}")
    return found


def test_every_package_imports_only_what_the_layout_allows():
    assert violations(SRC) == []


def test_every_package_is_in_the_rules():
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= PACKAGES, packages - PACKAGES


def test_the_allowed_graph_has_no_cycles():
    seen: dict[str, int] = {}  # 1 = on the stack, 2 = done
    graph = ALLOWED | TOP_LEVEL  # the package root re-exports core and methods

    def visit(node: str) -> None:
        seen[node] = 1
        for dep in graph[node]:
            assert seen.get(dep) != 1, f"cycle through {node} -> {dep}"
            if dep not in seen:
                visit(dep)
        seen[node] = 2

    for package in ALLOWED:
        if package not in seen:
            visit(package)


def module_of(path: Path, src: Path) -> str:
    """The dotted module of a file under ``src`` (a package's ``__init__.py`` is the package)."""
    parts = path.relative_to(src.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def file_graph(src: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``src`` it imports: ``from entflow.a import b`` is ``entflow.a.b``
    where that is a module, else ``entflow.a``; ``import entflow.a.b`` the longest module prefix."""
    files = {module_of(p, src): p for p in sorted(src.rglob("*.py"))}

    def known(name: str) -> str:
        while name not in files and "." in name:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {known(a.name) for a in node.names if a.name.split(".")[0] == src.name}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == src.name:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    targets.add(full if full in files else known(node.module))
        graph[module] = (targets & set(files)) - {module}
    return graph


def file_circles(src: Path) -> list[list[str]]:
    """Every circle of files (a strongly connected set of more than one module), each sorted."""
    graph = file_graph(src)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(part) > 1:
                circles.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_two_files_import_each_other():
    """No circle between files, lazy imports included: a file that needs another's name imports it,
    and nothing it imports (directly or through others) imports it back."""
    assert file_circles(SRC) == []


def test_a_circle_between_files_is_found(tmp_path):
    """The checker itself: a planted circle of three files (one import lazy) is found, a chain is not."""
    pkg = tmp_path / "entflow" / "pkg"
    pkg.mkdir(parents=True)
    (tmp_path / "entflow" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from entflow.pkg.b import f\n")
    (pkg / "b.py").write_text("from entflow.pkg import c\n")
    (pkg / "c.py").write_text("def g():\n    import entflow.pkg.d\n")
    (pkg / "d.py").write_text("")
    assert file_circles(tmp_path / "entflow") == []
    (pkg / "d.py").write_text("def h():\n    from entflow.pkg.a import f\n")
    assert file_circles(tmp_path / "entflow") == [["entflow.pkg.a", "entflow.pkg.b", "entflow.pkg.c", "entflow.pkg.d"]]


@pytest.mark.parametrize(
    ("package", "source", "bad"),
    [
        ("trainer", "from entflow.lab.tasks import get_task\n", "entflow.lab"),
        ("core", "def f():\n    import entflow.methods.base\n", "entflow.methods"),
        ("hf", "from entflow import lab\n", "entflow.lab"),
        ("lab", "def f():\n    from entflow.evidence.claims import RUNS\n", "entflow.evidence"),
        ("hf", "from entflow.settings import registry\n", "entflow.settings"),
        ("lab", "def f():\n    from entflow.settings.compare import compare_configs\n", "entflow.settings"),
        ("settings", "from entflow.evidence.claims import RUNS\n", "entflow.evidence"),
        ("evidence", "from entflow.cli.compare import print_report\n", "entflow.cli"),
        ("cli", "def run():\n    from entflow.lab.config import LabConfig\n", "entflow.lab"),
        ("cli", "from entflow.hf.setup import train_real\n", "entflow.hf"),
        ("analysis", "from entflow.methods.objective import policy_loss\n", "entflow.methods"),
        ("integrations", "import entflow as ef\n\nloss = ef.policy_loss\n", "entflow.__init__"),
        ("doctor", "def f():\n    import entflow\n", "entflow.__init__"),
    ],
)
def test_a_forbidden_import_is_reported(tmp_path, package, source, bad):
    """The checker itself: a planted import against the rules is found, lazy ones included."""
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "planted.py").write_text(source)
    found = violations(tmp_path)
    assert len(found) == 1 and found[0].endswith(bad.split(".")[0] + "." + bad.split(".")[1]), found


@pytest.mark.parametrize(
    ("module", "source", "found"),
    [
        ("__main__", "import sys\n\nfrom entflow.cli.main import main\n\nsys.exit(main())\n", []),
        ("__main__", "from entflow.lab.setup import train_lab\n", ["__main__.py:1 imports entflow.lab"]),
        ("__main__", "import entflow\n", ["__main__.py:1 imports entflow.__init__"]),
        ("errors", "from entflow.cli.main import main\n", ["errors.py:1 imports entflow.cli"]),
        ("core/x", "from entflow import __main__\n", ["core/x.py:1 imports entflow.__main__"]),
    ],
    ids=["main-runs-cli", "main-imports-lab", "main-imports-root", "errors-imports-cli", "core-imports-main"],
)
def test_the_top_level_modules_import_only_what_the_layout_allows(tmp_path, module, source, found):
    """``__main__`` (``python -m entflow``) may import the command line only; no layer imports it."""
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "__init__.py").write_text("")
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "__init__.py").write_text("")
    (tmp_path / f"{module}.py").write_text(source)
    assert violations(tmp_path) == found


def test_a_top_level_module_outside_the_layout_is_reported(tmp_path):
    """A new top-level module (as the 0.1 shims were) is not part of the layout."""
    (tmp_path / "errors.py").write_text("class EntflowError(Exception):\n    pass\n")
    (tmp_path / "evaluation.py").write_text("from entflow.hf.evaluate import run_eval\n")
    assert violations(tmp_path) == ["evaluation.py is a top-level module outside the layout"]


def only_forwards(path: Path) -> bool:
    """A module (not a package's ``__init__``) whose body, past its docstring, holds nothing but
    imports, ``__all__`` and a module ``__getattr__``: it defines nothing and only forwards names."""
    body = ast.parse(path.read_text()).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]

    def forwarding(node: ast.stmt) -> bool:
        if isinstance(node, ast.Import | ast.ImportFrom):
            return True
        if isinstance(node, ast.FunctionDef):
            return node.name == "__getattr__"
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            return all(isinstance(t, ast.Name) and t.id in {"__all__", "__getattr__"} for t in targets)
        return False

    return all(forwarding(node) for node in body)


def test_no_module_only_forwards_names():
    """0.2 deleted the 0.1 shims (CHANGELOG.md): every module defines what it holds."""
    found = [str(p.relative_to(SRC)) for p in sorted(SRC.rglob("*.py")) if p.name != "__init__.py" and only_forwards(p)]
    assert found == []


@pytest.mark.parametrize(
    ("source", "forwards"),
    [
        ('"""Moved."""\n\nfrom entflow._moved import forward\n\n__getattr__ = forward("a", "b")\n', True),
        ('"""Moved."""\n\nfrom entflow.hf.data import *  # noqa\n\n__all__ = ["load_data"]\n', True),
        ("def __getattr__(name):\n    return getattr(__import__('x'), name)\n", True),
        ('"""A module."""\n\nimport torch\n\nSCALE = 2.0\n', False),
        ("from entflow.core.ppo import aggregate\n\n\ndef f(x):\n    return aggregate(x)\n", False),
    ],
)
def test_a_forwarding_module_is_found(tmp_path, source, forwards):
    (tmp_path / "planted.py").write_text(source)
    assert only_forwards(tmp_path / "planted.py") is forwards


def private_imports(path: Path) -> list[str]:
    """``module.name`` of every ``from entflow.module import _name`` in ``path``."""
    return [
        f"{node.module}.{alias.name}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("entflow")
        for alias in node.names
        if alias.name.startswith("_")
    ]


def test_core_imports_no_private_name_across_files():
    """What two files of core share lives in a public module (core/stats_common.py), not behind a
    ``_private`` name of one of them."""
    found = {str(p.relative_to(SRC)): private_imports(p) for p in sorted((SRC / "core").rglob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {}


def test_a_private_import_is_found(tmp_path):
    (tmp_path / "planted.py").write_text("from entflow.core.token_stats import _LOG_FLOOR, STAT_NAMES\n")
    assert private_imports(tmp_path / "planted.py") == ["entflow.core.token_stats._LOG_FLOOR"]
