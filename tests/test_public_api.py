"""The public API: every name the README and docs show imports from its documented path, and every
public name of release 0.1.0 still imports from its old module path (docs/architecture.md §6).

``support/public_names_v0_1.json`` is the snapshot of 0.1.0's public names, module by module, taken
before the package was reorganised: a function, class or UPPER_CASE constant defined in the module
(or its ``__all__``).
"""

from __future__ import annotations

import importlib
import json
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = json.loads((Path(__file__).parent / "support" / "public_names_v0_1.json").read_text())
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").rglob("*.py"))]


def _resolve(dotted: str) -> object:
    """Import the longest importable module prefix of ``dotted`` and read the rest as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as e:
            if e.name is not None and not ".".join(parts[:cut]).startswith(e.name):
                raise  # a real missing dependency, not a shorter path
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _documented() -> list[str]:
    """Every ``from entflow.x import a, b`` and every backticked ``entflow.x.Name`` in the docs."""
    found: set[str] = set()
    for path in DOC_FILES:
        text = path.read_text()
        for mod, names in re.findall(r"from (entflow[\w.]*) import (\([\w, \n]+\)|[\w, ]+)", text):
            for name in re.split(r"[(),\s]+", names):
                if name and name != "as":
                    found.add(f"{mod}.{name}")
        for dotted in re.findall(r"`(entflow(?:\.\w+)+)", text):
            found.add(dotted)
    # `entflow.<method>` names a verl policy-loss mode (docs/integrations.md), not a Python path;
    # verl's trainer module needs verl's optional ray/transfer-queue stack.
    from entflow.methods import list_methods

    # `entflow.tasks` names an entry point group (pyproject.toml), not a module
    modes = {f"entflow.{m}" for m in list_methods()} | {"entflow.tasks"}
    return sorted(d for d in found if d not in modes and not d.startswith("entflow.integrations.verl.trainer"))


DOCUMENTED = _documented()
OLD_NAMES = [
    (mod, name)
    for mod, names in SNAPSHOT.items()
    for name in names
    if (mod, name) != ("entflow.integrations.verl", "EntflowTrainer")  # needs verl's ray stack
]


def test_the_docs_name_some_public_api():
    assert len(DOCUMENTED) >= 30, DOCUMENTED  # the regexes above still find the docs' names


@pytest.mark.parametrize("dotted", DOCUMENTED)
def test_documented_name_imports(dotted):
    _resolve(dotted)


@pytest.mark.parametrize(("module", "name"), OLD_NAMES, ids=[f"{m}.{n}" for m, n in OLD_NAMES])
def test_old_path_still_imports(module, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        mod = importlib.import_module(module)
        assert getattr(mod, name) is not None


def test_top_level_all_is_complete():
    import entflow as ef

    for name in ef.__all__:
        assert hasattr(ef, name), name


# a name that moved, its old module, and its new home: the old path warns and gives the same object
MOVED = [
    ("entflow.objective", "policy_loss", "entflow.methods.objective"),
    ("entflow.requirements", "required_token_stats", "entflow.methods.needs"),
    ("entflow.models", "load_model", "entflow.hf.models"),
    ("entflow.data", "load_data", "entflow.hf.data"),
    ("entflow.rewards", "math_verify_reward", "entflow.hf.rewards"),
    ("entflow.realtrain", "train_real", "entflow.hf.setup"),
    ("entflow.evaluation", "pass_at_k", "entflow.hf.evaluate"),
    ("entflow.methods.rewards", "WReinforce", "entflow.methods.reward_advantages"),
    ("entflow.lab.trainer", "train", "entflow.lab.setup"),
    ("entflow.lab.rundir", "JsonlWriter", "entflow.trainer.rundir"),
    ("entflow.lab.policy", "encode_prompts", "entflow.trainer.tokens"),
    ("entflow.lab.config", "TrainConfig", "entflow.lab.config.LabConfig"),
]


@pytest.mark.parametrize(("old", "name", "new"), MOVED, ids=[f"{o}.{n}" for o, n, _ in MOVED])
def test_moved_name_warns_and_is_the_same_object(old, name, new):
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=name):
        obj = getattr(module, name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert obj is _resolve(new if new.endswith("LabConfig") else f"{new}.{name}")
