"""``entflow train --help`` lists every config key with its default and help, read from the config
dataclasses (lab and real model), and ``entflow --version`` prints the version."""

from __future__ import annotations

import dataclasses
import re

import pytest

import entflow
from entflow.cli.main import main
from entflow.hf.setup import RealTrainConfig
from entflow.lab.config import LabConfig
from entflow.trainer.config import default_text, key_info


def _help(capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(["train", "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


def _default(f: dataclasses.Field) -> str:
    return default_text(f.default_factory() if f.default is dataclasses.MISSING else f.default)


def test_train_help_lists_every_lab_key_with_its_default_and_help(capsys):
    text = _help(capsys)
    lab = text.split("With --model", 1)[0]
    flat = re.sub(r"\s+", " ", lab)
    for f in dataclasses.fields(LabConfig):
        assert f"\n  {f.name}={_default(f)}\n" in lab, f.name
        assert key_info(LabConfig, f.name)[0] in flat, f.name


def test_train_help_lists_every_real_model_key_and_changed_default(capsys):
    """The real-model part is derived from RealTrainConfig: every key it adds (lora_rank and
    lora_alpha included) and every default it changes, each with its help."""
    real = _help(capsys).split("With --model", 1)[1]
    flat = re.sub(r"\s+", " ", real)
    lab = {f.name: f for f in dataclasses.fields(LabConfig)}
    shown = 0
    for f in dataclasses.fields(RealTrainConfig):
        if f.name in lab and f.default == lab[f.name].default:
            continue
        assert f"\n  {f.name}={_default(f)}\n" in real, f.name
        assert key_info(RealTrainConfig, f.name)[0] in flat, f.name
        shown += 1
    assert "  lora_rank=0\n" in real and "  lora_alpha=null\n" in real and shown >= 20


def test_version_prints_the_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"entflow {entflow.__version__}"
