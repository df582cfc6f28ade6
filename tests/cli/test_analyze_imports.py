"""``import entflow`` and ``entflow analyze LOG`` do not import torch (the command in ≤ 5 s,
of which importing torch alone took ~3 s); the lazily resolved public names are the same objects as
before.

The import checks run in a fresh interpreter (this test session has imported torch already) and
print which heavy modules ended up in ``sys.modules``; each one also shows that its probe sees torch
once a name that needs it is touched, so the probe itself can fail.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.public_api import load_snapshot

ROOT = Path(__file__).resolve().parents[2]

# the public names of ``entflow`` (the 0.2 snapshot of tests/test_public_api.py)
TOP_LEVEL_NAMES = load_snapshot()["entflow"]

# the modules the analyze path imports (docs/analyze.md)
ANALYZE_MODULES = [
    "entflow",
    "entflow.errors",
    "entflow.files",
    "entflow.cli.main",
    "entflow.cli.analyze",
    # every module of analysis/: it imports only core, and none of it imports torch at module level
    *(f"entflow.analysis.{p.stem}" for p in sorted((ROOT / "src" / "entflow" / "analysis").glob("[!_]*.py"))),
]

# printed by the child: which heavy modules are loaded
_PROBE = "import json, sys; print(json.dumps({m: m in sys.modules for m in ('torch', 'transformers')}))"


def _child(code: str) -> list[dict[str, bool]]:
    """Run ``code`` in a fresh interpreter on this checkout; return the JSON lines it printed."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT / 'tests'}", OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def test_importing_entflow_and_the_analyze_modules_does_not_import_torch():
    imports = "; ".join(f"import {m}" for m in ANALYZE_MODULES)
    code = (
        f"{imports}; from entflow.cli.main import build_parser; build_parser(only='analyze'); {_PROBE}\n"
        # the probe can fail: the first access of a tensor name imports torch
        f"import entflow; from entflow.core.token_stats import token_stats\n"
        f"assert entflow.token_stats is token_stats; {_PROBE}"
    )
    before, after = _child(code)
    assert before == {"torch": False, "transformers": False}
    assert after["torch"] is True


def test_entflow_analyze_on_logs_does_not_import_torch(tmp_path: Path):
    from support.log_writers import write_entflow_run, write_trainer_state, write_wandb_csv

    logs = [
        write_wandb_csv(tmp_path / "wandb.csv", 200, extra=3),
        write_trainer_state(tmp_path / "trl" / "trainer_state.json", 200, extra=3),
        write_entflow_run(tmp_path / "run", 200),
    ]
    outs = [tmp_path / f"out{i}" for i in range(len(logs))]
    calls = "; ".join(
        f"assert main(['analyze', {str(p)!r}, '--json', '--out', {str(o)!r}]) == 0"
        for p, o in zip(logs, outs, strict=True)
    )
    code = f"from entflow.cli.main import main; {calls}; {_PROBE}\nimport entflow; entflow.TokenBatch; {_PROBE}"
    during, after = _child(code)
    assert during == {"torch": False, "transformers": False}
    assert after["torch"] is True
    # the commands did their work: one analysis.json each (a run directory writes it into the run)
    for analysis in (outs[0] / "analysis.json", outs[1] / "analysis.json", logs[2] / "analysis.json"):
        d = json.loads(analysis.read_text())
        assert d["collapse"]["verdict"] in {"collapsed", "collapsing", "rising", "healthy"}, analysis
    assert json.loads((outs[0] / "analysis.json").read_text())["source"]["format"] == "csv"


def test_lazy_top_level_names_are_the_modules_objects():
    import entflow as ef

    assert sorted(ef.__all__) == TOP_LEVEL_NAMES
    homes = [
        importlib.import_module(m)
        for m in (
            "entflow.core.advantages",
            "entflow.core.batch",
            "entflow.core.distributed",
            "entflow.core.estimators",
            "entflow.core.token_stats",
            "entflow.errors",
            "entflow.methods",
            "entflow.methods.needs",
            "entflow.methods.objective",
        )
    ]
    for name in TOP_LEVEL_NAMES:
        value = getattr(ef, name)
        assert any(getattr(m, name, None) is value for m in homes), name
    from entflow import policy_loss, token_stats

    assert token_stats is homes[4].token_stats and policy_loss is homes[8].policy_loss
    # dir() lists what the eager module listed: the public names, the subpackages, __version__
    assert set(TOP_LEVEL_NAMES) | {"core", "methods", "errors", "__version__"} <= set(dir(ef))
    assert not {"importlib", "Any", "TYPE_CHECKING", "annotations"} & set(dir(ef))
    assert ef.core is importlib.import_module("entflow.core")
    assert not hasattr(ef, "no_such_name")
    with pytest.raises(AttributeError, match="no_such_name"):
        ef.no_such_name  # noqa: B018


def test_star_import_gives_every_public_name():
    namespace: dict[str, object] = {}
    exec("from entflow import *", namespace)
    assert set(TOP_LEVEL_NAMES) <= set(namespace)


def test_suggested_specs_are_the_methods_reprs():
    """analysis/collapse.py writes the suggested method's repr out (importing the methods imports
    torch); it must be what ``get_method`` builds from the same parameters."""
    from entflow.analysis.collapse import SUGGESTIONS
    from entflow.methods import get_method

    for verdict, (name, params, spec, _) in SUGGESTIONS.items():
        assert repr(get_method(name, **params)) == spec, verdict


def test_subcommand_parsers_are_complete(capsys):
    from entflow.cli.main import COMMANDS, main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    top = capsys.readouterr().out
    assert all(name in top for name in COMMANDS)
    with pytest.raises(SystemExit) as e:
        main(["train", "--help"])
    assert e.value.code == 0
    assert "--method" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["analyze", "--help"])
    assert e.value.code == 0
    assert "--entropy-key" in capsys.readouterr().out


def test_a_run_with_audit_metrics_orders_them_without_torch():
    """Reading a run's ``audit/<estimator>/*`` keys needs the estimator names only: they come from
    the torch-free ``core.estimator_names`` (the same tuple ``core.estimators`` uses)."""
    code = (
        "from entflow.analysis.runs import audit_estimators; "
        "rows = [{'step': 1, 'audit/cov/spearman': 0.1, 'audit/steer/spearman': 0.2, 'audit/mine/spearman': 0.3}]; "
        f"print(__import__('json').dumps({{'order': audit_estimators(rows)}})); {_PROBE}\n"
        "from entflow.core.estimators import ESTIMATORS; from entflow.core.estimator_names import ESTIMATORS as N; "
        f"assert ESTIMATORS is N; {_PROBE}"
    )
    order, during, after = _child(code)
    assert order["order"] == ["steer", "cov", "mine"]  # the design order first, then unknown names
    assert during == {"torch": False, "transformers": False}
    assert after["torch"] is True
