"""A comparison's config (``methods:``) as one run's config (``entflow train --config PRESET``):
:func:`entflow.settings.compare.one_run_of` on hand-made configs, and the CLI's wiring of it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from entflow.errors import ConfigError
from entflow.settings.compare import one_run_of


def test_a_config_without_methods_is_unchanged():
    base = {"steps": 3, "method": "steer"}
    assert one_run_of(base, method_chosen=False) == {"steps": 3, "method": "steer"}


def test_a_list_of_one_name_becomes_the_run_s_method():
    assert one_run_of({"steps": 3, "methods": ["grpo"]}, method_chosen=False) == {"steps": 3, "method": "grpo"}


def test_a_list_of_one_mapping_brings_its_parameters_and_name():
    base = {"methods": [{"method": "kl_cov", "params": {"ratio": 0.002}, "name": "kl_cov_paper"}]}
    run = one_run_of(base, method_chosen=False)
    assert run == {"method": "kl_cov", "method_params": {"ratio": 0.002}, "name": "kl_cov_paper"}


def test_a_chosen_method_drops_the_list():
    base = {"steps": 3, "methods": ["grpo", "kl_cov"]}
    assert one_run_of(base, method_chosen=True) == {"steps": 3}
    assert one_run_of({**base, "method": "steer"}, method_chosen=False) == {"steps": 3, "method": "steer"}
    assert base == {"steps": 3, "methods": ["grpo", "kl_cov"]}  # the caller's dict is left alone


def test_a_list_of_several_methods_is_refused_naming_them():
    with pytest.raises(ConfigError) as e:
        one_run_of({"methods": ["grpo", {"method": "kl_cov", "name": "kl_cov_paper"}]}, method_chosen=False)
    assert e.value.key == "methods"
    assert "2 methods (grpo, kl_cov_paper)" in str(e.value) and "--method NAME" in str(e.value)


@pytest.mark.parametrize(
    "argv,method",
    [([], "grpo"), (["--method", "kl_cov"], "kl_cov"), (["method=steer"], "steer")],
    ids=["the preset's one method", "--method", "method="],
)
def test_train_config_of_a_comparison_preset_trains_the_named_method(argv, method, tmp_path, monkeypatch):
    """``entflow train --config`` on a preset with ``methods: [grpo]`` (what the registered presets
    hold) builds the run's config with the method the command or the preset names; the training itself
    is replaced by a recorder (the setting's ``train_run``), so nothing trains."""
    from entflow.cli.main import main
    from entflow.settings.lab import LabKind

    seen = {}

    def record(self, cfg, resume=False, overwrite=False, on_step=None) -> Path:
        seen["cfg"] = cfg
        return tmp_path / "run"

    monkeypatch.setattr(LabKind, "train_run", record)
    preset = tmp_path / "preset.yaml"
    preset.write_text(yaml.safe_dump({"methods": ["grpo"], "steps": 2}))
    assert main(["train", "--config", str(preset), *argv]) == 0
    assert seen["cfg"].method == method
    assert seen["cfg"].steps == 2
