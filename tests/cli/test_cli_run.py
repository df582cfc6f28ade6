"""``entflow run``: the default demo trains exactly the pre-registered regime runs GRPO and KL-Cov
(seed 0, pass@256), configured as ``entflow reproduce`` configures them; ``--preset collapse`` is
demo.yaml; output folders follow the preset and the seed. Training is replaced by a recorder."""

from __future__ import annotations

import dataclasses
from importlib.resources import files
from pathlib import Path

import pytest

from entflow.cli.compare import compare_run_configs
from entflow.cli.main import main
from entflow.cli.run import EXPLORATION_RUNS, demo_base
from entflow.errors import ConfigError
from entflow.lab.reproduce import COMMON_OVERRIDES, COVERAGE_N, _setting_configs, registry, setting_compare_base
from entflow.trainer.config import load_yaml

COLLAPSE_RUNS = ("grpo", "steer", "kl_cov", "adaptive_entropy")


def _fields(cfg) -> dict:
    """A config's fields without where it is written."""
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k != "out_dir"}


def test_exploration_demo_is_the_reproduce_runs():
    demo, out_dir = compare_run_configs(demo_base("exploration"), None, "demo", [])
    registered = _setting_configs(
        "regime", registry().settings["regime"].base(), list(EXPLORATION_RUNS), COMMON_OVERRIDES, [0], Path("r/regime")
    )
    assert out_dir == "runs"
    assert [c.group for c in demo] == ["grpo", "kl_cov"]
    assert [_fields(c) for c in demo] == [_fields(c) for c in registered]
    assert {(c.seed, c.steps, c.coverage_n, c.task) for c in demo} == {(0, 120, COVERAGE_N, "countdown_routes")}


def test_collapse_preset_is_demo_yaml():
    demo, _ = compare_run_configs(demo_base("collapse"), None, "collapse", [])
    yaml = load_yaml(str(files("entflow.lab") / "configs" / "demo.yaml"))
    assert [c.group for c in demo] == [m if isinstance(m, str) else m["method"] for m in yaml["methods"]]
    assert {(c.steps, c.task) for c in demo} == {(yaml["steps"], yaml["task"])}


@pytest.mark.parametrize(
    ("runs", "needle"),
    [
        (["grpo", "nope"], "unknown runs ['nope']"),
        (["grpo", "grpo_strict"], "['grpo_strict'] change config keys"),
        (["grpo", "ppl_shaping"], "only ['grpo'] of ['grpo', 'ppl_shaping']"),
    ],
)
def test_setting_compare_base_refuses_runs_it_cannot_reproduce(runs, needle):
    with pytest.raises(ConfigError, match="runs") as err:
        setting_compare_base("regime", runs, seed=0)
    assert needle in str(err.value)


@pytest.fixture
def recorder(monkeypatch):
    """Replace training and the report by a recorder of (folder, run, seed)."""
    from entflow.analysis import report
    from entflow.lab import compare

    trained: list[tuple[str, str, int]] = []

    def fake_run_compare(configs, jobs=2, resume=False, overwrite=False, progress=True):
        trained.extend((Path(c.out_dir).name, c.group, c.seed) for c in configs)
        return []

    monkeypatch.setattr(compare, "run_compare", fake_run_compare)
    monkeypatch.setattr(report, "write_report", lambda dirs, out: Path(out) / "report.html")
    monkeypatch.setattr(report, "print_summary", lambda dirs: None)
    return trained


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], [("demo", "grpo", 0), ("demo", "kl_cov", 0)]),
        (["seed=3"], [("demo-s3", "grpo", 3), ("demo-s3", "kl_cov", 3)]),
        (["--name", "mine", "seed=3"], [("mine", "grpo", 3), ("mine", "kl_cov", 3)]),
        (["--preset", "collapse", "seed=1"], [("collapse-s1", m, 1) for m in COLLAPSE_RUNS]),
    ],
)
def test_run_folders_and_runs(recorder, tmp_path, argv, expected):
    assert main(["run", *argv, f"out_dir={tmp_path}"]) == 0
    assert recorder == expected
