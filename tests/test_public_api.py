"""The public API of 0.2: every name the README and docs show imports from its documented path; the
top-level API and the documented modules' public names are those of the 0.2 snapshot
(``support/public_names_v0_2.json``, built by ``support/public_api.py``); the 0.1 paths that
CHANGELOG.md lists as moved no longer import, and their new paths do.
"""

from __future__ import annotations

import tomllib

import pytest

from support.public_api import (
    CHANGELOG,
    ROOT,
    changelog_moves,
    documented,
    documented_modules,
    load_snapshot,
    missing,
    public_names,
    resolve,
)

SNAPSHOT = load_snapshot()
DOCUMENTED = documented()
SNAPSHOT_NAMES = [(module, name) for module, names in SNAPSHOT.items() for name in names]
UPDATE = "the public API changed: say so in CHANGELOG.md, run `python tests/support/public_api.py --write`"


def test_the_docs_name_some_public_api():
    assert len(DOCUMENTED) >= 30, DOCUMENTED  # the regexes still find the docs' names


@pytest.mark.parametrize("dotted", DOCUMENTED)
def test_documented_name_imports(dotted):
    resolve(dotted)


def test_top_level_api_is_the_snapshot():
    import entflow as ef

    assert sorted(ef.__all__) == SNAPSHOT["entflow"], UPDATE


def test_every_documented_module_is_in_the_snapshot():
    assert set(documented_modules()) <= set(SNAPSHOT), UPDATE


@pytest.mark.parametrize(("module", "name"), SNAPSHOT_NAMES, ids=[f"{m}.{n}" for m, n in SNAPSHOT_NAMES])
def test_snapshot_name_imports(module, name):
    assert missing({module: [name]}) == [], UPDATE


def test_a_removed_or_renamed_name_is_reported():
    """The check itself: a renamed name, a deleted module and a dropped 0.1 path are reported."""
    planted = {
        "entflow.methods.objective": ["policy_loss", "policy_loss_v1"],
        "entflow.objective": ["policy_loss"],
        "entflow.lab.setup": ["lab_setup"],
    }
    assert missing(planted) == ["entflow.methods.objective.policy_loss_v1", "entflow.objective"]
    assert "policy_loss" in public_names("entflow.methods.objective")
    assert "annotations" not in public_names("entflow.methods.objective")  # imported, not defined


MOVES = changelog_moves()


def test_the_changelog_lists_the_moves():
    olds = {old for old, _ in MOVES}
    assert len(MOVES) >= 50, MOVES
    assert {"entflow.objective", "entflow.evaluation.pass_at_k", "entflow.lab.setup.train"} <= olds


@pytest.mark.parametrize(("old", "new"), MOVES, ids=[old for old, _ in MOVES])
def test_a_moved_path_is_gone_and_its_new_path_imports(old, new):
    with pytest.raises((ModuleNotFoundError, AttributeError)):
        resolve(old)
    for path in new:
        resolve(path)


def test_the_version_is_one_number_with_a_changelog_section():
    import entflow as ef

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == ef.__version__
    assert f"\n## {ef.__version__}\n" in CHANGELOG.read_text()
