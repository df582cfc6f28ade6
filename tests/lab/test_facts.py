"""The claims pipeline flows one way: ``lab/claims.py`` (the registry, importing nothing else from
the lab) → ``lab/facts.py`` (a run directory → facts) → ``lab/reproduce.py``; the list of facts is
what the producers return, and no YAML is read when the modules are imported."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import entflow.lab
from entflow.analysis.report import summarize_run
from entflow.lab.facts import FACTS, run_facts
from entflow.lab.reproduce import registry
from support.run_dirs import make_run

LAB = Path(entflow.lab.__file__).parent
ROOT = Path(__file__).resolve().parents[2]


def _lab_imports(module: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse((LAB / f"{module}.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("entflow.lab"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("entflow.lab")}
    return found


def test_the_pipeline_imports_one_way():
    assert _lab_imports("claims") == set()
    assert _lab_imports("facts") == set()
    assert _lab_imports("reproduce") - {"entflow.lab.audit", "entflow.lab.setup", "entflow.lab.compare"} == {
        "entflow.lab.claims",
        "entflow.lab.facts",
    }


def test_run_facts_returns_exactly_the_facts_claims_may_read(tmp_path):
    run = make_run(tmp_path, "grpo-s0", "grpo")
    facts = run_facts(run, summarize_run(run))
    assert set(facts) == FACTS
    assert facts == run_facts(run)  # the summary is computed when not given
    # every claim of the registry reads facts that exist (the registry is checked against FACTS)
    assert all(set(c.facts_read()) <= FACTS for c in registry().claims if c.pending is None)


def test_importing_the_pipeline_reads_no_yaml():
    code = (
        "import yaml; calls = []; load = yaml.safe_load\n"
        "yaml.safe_load = lambda *a, **k: calls.append(1) or load(*a, **k)\n"
        "import entflow.lab.claims, entflow.lab.facts, entflow.lab.reproduce, entflow.cli.reproduce\n"
        "print(len(calls)); entflow.lab.reproduce.registry(); print(len(calls))"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1"]  # none at import; the registry once, on first use
