"""The training config documents itself: every key of TrainConfig, the lab's LabConfig and the
real-model RealTrainConfig carries its help (and its allowed range, where it has one) as dataclass
field metadata, which ``entflow train --help`` prints."""

from __future__ import annotations

import dataclasses

import pytest

from entflow.errors import ConfigError
from entflow.hf.setup import RealTrainConfig
from entflow.lab.config import LabConfig
from entflow.trainer.config import TrainConfig, build_config, describe_keys, key_info

CLASSES = [TrainConfig, LabConfig, RealTrainConfig]


def test_every_trainer_key_carries_its_help_as_field_metadata():
    for f in dataclasses.fields(TrainConfig):
        assert isinstance(f.metadata.get("help"), str) and len(f.metadata["help"]) > 10, f.name
        assert f.metadata.get("range") is None or f.metadata["range"].strip(), f.name


def test_every_real_model_key_carries_its_help_as_field_metadata():
    """The keys RealTrainConfig adds have their own help; a key whose default it only changes keeps
    TrainConfig's (key_info walks the classes)."""
    own = {f.name for f in dataclasses.fields(TrainConfig)}
    for f in dataclasses.fields(RealTrainConfig):
        if f.name not in own:
            assert len(f.metadata.get("help", "")) > 10, f.name
    assert {"lora_rank", "lora_alpha", "model", "val_size"} <= {f.name for f in dataclasses.fields(RealTrainConfig)}


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_every_key_has_help(cls):
    missing = [f.name for f in dataclasses.fields(cls) if not key_info(cls, f.name)[0]]
    assert missing == []


def test_a_subclass_that_changes_a_default_keeps_the_help():
    assert RealTrainConfig.__dataclass_fields__["steps"].metadata == {}  # redeclared: steps: int = 10
    assert key_info(RealTrainConfig, "steps") == key_info(TrainConfig, "steps")
    assert key_info(TrainConfig, "steps")[1] == ">= 1"
    assert key_info(TrainConfig, "no_such_key") == ("", None)


@pytest.mark.parametrize(
    ("key", "bad"),
    [("steps", 0), ("group_size", 1), ("temperature", 0.0), ("lr", 0.0), ("clip_low", 1.5), ("dual_clip", 1.0)],
)
def test_a_documented_range_is_the_one_validate_enforces(key, bad):
    """The range in the metadata is what validate() refuses outside of: one bad value per key."""
    assert key_info(TrainConfig, key)[1]
    with pytest.raises(ConfigError) as e:
        build_config({key: bad}, cls=LabConfig)
    assert e.value.key == key


def test_describe_keys_prints_the_default_the_help_and_the_range():
    lines = describe_keys(TrainConfig, ["grad_clip", "task_params", "audit"], width=200)
    assert lines == [
        "  grad_clip=1.0",
        "      clip the gradient norm to this value; null: no clipping (allowed: > 0 or null)",
        "  task_params={}",
        "      parameters of the task (or the data), e.g. {validation_size: 32}",
        "  audit=true",
        "      measure the true entropy change of a step against every estimator",
    ]


def test_a_method_that_needs_expert_rows_is_refused_by_name():
    """The generic trainer's rollout supplies no expert rows: CHORD is refused up front, naming the key."""
    with pytest.raises(ConfigError, match="expert rows") as e:
        LabConfig(method="chord").validate()
    assert "'method'" in str(e.value)
    LabConfig(method="positive_nll").validate()  # reads rewards, which the trainer has: accepted
