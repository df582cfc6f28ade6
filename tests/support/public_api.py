"""The public API as data: the names the docs show, the modules they live in, and the 0.2 snapshot.

``public_names_v0_2.json`` maps ``"entflow"`` to the top-level ``__all__`` and every documented
module (a module whose path or file the README, ``docs/*.md``, ``examples/`` or CHANGELOG.md's new
paths name) to its public names: its
``__all__`` when it has one, else every function, class and UPPER_CASE constant it defines at top
level (read with ``ast``, so an imported helper is not counted). A deliberate change of the public
API rewrites it (and says so in CHANGELOG.md)::

    PYTHONPATH=src python tests/support/public_api.py --write
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "entflow"
FILE_PATH = r"`((?:core|methods|analysis|trainer|lab|hf|settings|evidence|integrations|doctor)/[\w/]+)\.py`"
SNAPSHOT_PATH = Path(__file__).with_name("public_names_v0_2.json")
CHANGELOG = ROOT / "CHANGELOG.md"
# the tables of moves and renames, by release (0.2.0's; the next release's, under "Unreleased")
CHANGELOG_TABLES = (
    ("### Moved: 0.1 path → 0.2 path", "### Renamed: one name, one thing"),
    ("### Moved: 0.2 path → 0.3 path",),
)
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").rglob("*.py"))]
# `entflow.tasks` names an entry point group (pyproject.toml), not a module
NOT_PATHS = {"entflow.tasks"}
# verl's trainer module needs verl's optional ray / transfer-queue stack
NEEDS_VERL_STACK = ("entflow.integrations.verl.trainer", "entflow.integrations.verl.EntflowTrainer")


def load_snapshot() -> dict[str, list[str]]:
    return json.loads(SNAPSHOT_PATH.read_text())


def resolve(dotted: str) -> object:
    """Import the longest importable module prefix of ``dotted`` and read the rest as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as e:
            if e.name is not None and not ".".join(parts[:cut]).startswith(e.name):
                raise  # a real missing dependency, not a shorter path
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def module_of(dotted: str) -> str:
    """The longest prefix of ``dotted`` that is a module of entflow (``find_spec``; imports parents)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            if importlib.util.find_spec(name) is not None:
                return name
        except ModuleNotFoundError:
            continue
    raise ImportError(dotted)


def documented(files: list[Path] = DOC_FILES) -> list[str]:
    """Every ``from entflow.x import a, b`` and every backticked ``entflow.x.Name`` in ``files``."""
    found: set[str] = set()
    for path in files:
        text = path.read_text()
        for mod, names in re.findall(r"from (entflow[\w.]*) import (\([\w, \n]+\)|[\w, ]+)", text):
            for part in re.split(r"[(),]+", names):  # "a as b": the name imported is a
                name = part.split()[0] if part.split() else ""
                if name:
                    found.add(f"{mod}.{name}")
        for dotted in re.findall(r"`(entflow(?:\.\w+)+)", text):
            found.add(dotted)
    # `entflow.<method>` names a verl policy-loss mode (docs/integrations.md), not a Python path
    from entflow.methods import list_methods

    skip = {f"entflow.{m}" for m in list_methods()} | NOT_PATHS
    return sorted(d for d in found if d not in skip and not d.startswith(NEEDS_VERL_STACK))


def changelog_moves(changelog: Path = CHANGELOG) -> list[tuple[str, list[str]]]:
    """``(old path, [new paths])`` of each row of CHANGELOG.md's tables of moves and renames (0.2.0's
    and the next release's). A new path that a later table moves again is followed to where it is now
    (0.2's ``entflow.lab.claims.interval_verdict`` is ``entflow.evidence.claims.interval_verdict``)."""
    text = changelog.read_text()
    releases = []
    for titles in CHANGELOG_TABLES:
        rows = []
        for line in (line for t in titles for line in text.split(t, 1)[1].split("\n### ", 1)[0].splitlines()):
            cells = line.split("|")
            if len(cells) == 4 and cells[1].strip().startswith("`entflow"):
                old = re.findall(r"`(entflow[\w.]*)`", cells[1])[0]
                rows.append((old, re.findall(r"`(entflow[\w.]*)`", cells[2])))
        releases.append(rows)
    out = []
    for i, rows in enumerate(releases):
        # the later releases' one-to-one moves, longest old path first
        later = sorted(((o, n[0]) for r in releases[i + 1 :] for o, n in r if len(n) == 1), key=lambda m: -len(m[0]))
        out += [(old, [_follow(p, later) for p in new]) for old, new in rows]
    return out


def _follow(path: str, moves: list[tuple[str, str]]) -> str:
    """``path`` after the first of ``moves`` (old → new) whose old path is it or a prefix of it."""
    for old, new in moves:
        if path == old or path.startswith(old + "."):
            return new + path[len(old) :]
    return path


def documented_modules(files: list[Path] = DOC_FILES) -> list[str]:
    """The modules of the documented names and of the new paths CHANGELOG.md points to, and every
    public module the docs name by its file (`` `core/token_stats.py` ``, as docs/architecture.md's
    map does); the CLI's are not an API."""
    modules = {module_of(d) for d in documented(files)}
    modules |= {module_of(new) for _, paths in changelog_moves() for new in paths}
    for path in files:
        for rel in re.findall(FILE_PATH, path.read_text()):
            if (SRC / f"{rel}.py").exists() and not any(part.startswith("_") for part in rel.split("/")):
                modules.add("entflow." + rel.replace("/", "."))
    return sorted(modules)


def public_names(module: str) -> list[str]:
    """``module.__all__``, else the functions, classes and UPPER_CASE constants it defines."""
    mod = importlib.import_module(module)
    if hasattr(mod, "__all__"):
        return sorted(mod.__all__)
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name) and target.id.isupper():
                        names.add(target.id)
            elif isinstance(node, ast.If | ast.Try):  # definitions under a version or import guard
                visit(node.body)
                visit(node.orelse)

    visit(ast.parse(Path(mod.__file__).read_text()).body)
    return sorted(n for n in names if not n.startswith("_"))


def build_snapshot() -> dict[str, list[str]]:
    import entflow

    snapshot = {"entflow": sorted(entflow.__all__)}
    for module in documented_modules():
        if module != "entflow":
            snapshot[module] = public_names(module)
    return snapshot


def missing(snapshot: dict[str, list[str]]) -> list[str]:
    """The snapshot's ``module.name`` paths that no longer import."""
    out = []
    for module, names in snapshot.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError:
            out.append(module)
            continue
        out += [f"{module}.{n}" for n in names if f"{module}.{n}" not in NEEDS_VERL_STACK and not hasattr(mod, n)]
    return out


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    SNAPSHOT_PATH.write_text(json.dumps(build_snapshot(), indent=1) + "\n")
    print(f"wrote {SNAPSHOT_PATH}")
