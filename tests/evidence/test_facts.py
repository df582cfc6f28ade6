"""The claims pipeline flows one way: ``evidence/claims.py`` (the registry, importing of the evidence
package nothing, and the registry of settings) → ``evidence/facts.py`` (a run directory → facts) →
``evidence/reproduce.py`` (→ ``evidence/records.py``, per-run records) → ``evidence/verify.py``;
the list of facts is what the producers return, and no YAML is read when the modules are imported."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import entflow.evidence
from entflow.analysis.report import summarize_run
from entflow.evidence.facts import FACTS, run_facts
from entflow.evidence.reproduce import registry
from support.run_dirs import make_run

EVIDENCE = Path(entflow.evidence.__file__).parent
ROOT = Path(__file__).resolve().parents[2]


PREFIXES = ("entflow.evidence", "entflow.settings", "entflow.lab", "entflow.hf")


def _imports(module: str, prefixes: tuple[str, ...] = PREFIXES) -> set[str]:
    """The modules of ``prefixes`` that ``evidence/<module>.py`` imports (lazy imports included)."""
    found = set()
    for node in ast.walk(ast.parse((EVIDENCE / f"{module}.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(prefixes):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith(prefixes)}
    return found


def test_the_pipeline_imports_one_way():
    assert _imports("claims") == {"entflow.settings.base", "entflow.settings.registry"}
    assert _imports("facts") == set()
    assert _imports("reproduce") - {"entflow.evidence.audit", "entflow.lab.setup", "entflow.settings.compare"} == {
        "entflow.evidence.claims",
        "entflow.evidence.facts",
        "entflow.evidence.records",
        "entflow.settings.registry",
    }
    # the records read a run directory's facts; the verifier judges with the registry's functions
    assert _imports("records") == {"entflow.evidence.facts", "entflow.evidence.claims"}
    assert _imports("verify") == {"entflow.evidence.claims", "entflow.evidence.records", "entflow.evidence.reproduce"}
    # only the settings reach a real model (entflow.settings.real): no module of the evidence does
    modules = ("claims", "decision", "facts", "records", "reproduce", "verify", "audit")
    assert {m for m in modules if _imports(m, ("entflow.hf",))} == set()


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
        "import entflow.evidence.claims, entflow.evidence.facts, entflow.evidence.reproduce, entflow.cli.reproduce\n"
        "print(len(calls)); entflow.evidence.reproduce.registry(); print(len(calls))"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1"]  # none at import; the registry once, on first use
