"""The registry of settings: each setting of the claim registry reaches, through its ``kind``,
where its preset lives, the config class it builds and what trains its runs; an unknown kind is a
typed error naming the key; and a kind registered by a caller plugs into ``entflow reproduce``
without any runner passed in (the test kind records what it is asked to train)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml
from scipy import stats

from entflow.errors import ConfigError
from entflow.evidence import reproduce as rep
from entflow.evidence.claims import load_registry, registry_path
from entflow.evidence.facts import FACTS
from entflow.lab.config import LabConfig
from entflow.settings import registry as kinds
from entflow.settings.base import SettingKind
from entflow.settings.lab import COMMON_OVERRIDES
from entflow.trainer.collect import schedule_steps


def test_the_packaged_settings_resolve_to_their_kinds():
    settings = rep.registry().settings
    assert {n: s.runner.name for n, s in settings.items()} == {
        "demo": "lab",
        "regime": "lab",
        "real": "real",
        "real_v2": "real",
    }
    assert settings["demo"].runner.config_class() is LabConfig
    from entflow.hf.setup import RealTrainConfig

    assert settings["real"].runner.config_class() is RealTrainConfig
    # each setting's presets live with it: the lab's in entflow/lab, a real model's in entflow/hf
    assert (settings["demo"].runner.presets() / "demo.yaml").is_file()
    assert (settings["regime"].runner.presets() / "regime.yaml").is_file()
    assert (settings["real"].runner.presets() / "real.yaml").is_file()
    assert (settings["real_v2"].runner.presets() / "real_v2.yaml").is_file()
    assert not (settings["demo"].runner.presets() / "real.yaml").exists()
    assert settings["real"].runner.presets().parent.name == "hf"
    # reproduce trains the lab's runs --jobs at a time, a real model's one at a time
    assert (kinds.get_setting_kind("lab").parallel, kinds.get_setting_kind("real").parallel) == (True, False)


def test_an_unknown_kind_is_a_typed_error_listing_the_known_ones():
    with pytest.raises(ConfigError) as e:
        kinds.get_setting_kind("reel")
    assert e.value.key == "kind" and "'reel'" in str(e.value) and "lab, real" in str(e.value)
    with pytest.raises(ValueError, match="already registered"):
        kinds.register_setting_kind("lab")(type("Again", (SettingKind,), {}))


def test_a_preset_of_another_kind_is_refused(tmp_path):
    """A setting's ``config`` is looked up among its own kind's presets: the lab has no real.yaml."""
    text = registry_path().read_text()
    good = "real: {config: real.yaml, steps: 15, kind: real}"
    path = tmp_path / "claims.yaml"
    path.write_text(text.replace(good, "real: {config: real.yaml, steps: 15}"))
    with pytest.raises(ConfigError) as e:
        load_registry(path, known_facts=FACTS)
    assert e.value.key == "settings.real" and "demo.yaml" in str(e.value) and "(kind 'lab')" in str(e.value)


STOP_AT: dict[str, int | None] = {"run": None}  # recording_kind's train stops before this run


@pytest.fixture
def recording_kind(monkeypatch, tmp_path):
    """A kind ``recorded`` whose presets are a folder of the test and whose runs are recorded, not
    trained; registered for the test only."""
    presets = tmp_path / "presets"
    presets.mkdir()
    (presets / "tiny.yaml").write_text(yaml.safe_dump({"task": "countdown", "steps": 5, "methods": ["grpo"]}))
    calls: list[dict] = []

    class Recorded(SettingKind):
        common_overrides = ("audit=false",)
        parallel = False

        def presets(self) -> Path:
            return presets

        def config_class(self) -> type:
            return LabConfig

        def train(self, configs, jobs, resume, overwrite, on_done=None):
            calls.append({"runs": [(c.group, c.seed, c.checkpoint_every) for c in configs], "jobs": jobs})
            calls[-1] |= {"resume": resume, "overwrite": overwrite}
            dirs = [Path(c.out_dir) / c.run_name for c in configs]
            for i, (c, d) in enumerate(zip(configs, dirs, strict=True)):  # each reported as it finishes
                if i == STOP_AT["run"]:
                    raise RuntimeError("the machine stopped")
                d.mkdir(parents=True, exist_ok=True)  # the config.yaml a fresh run writes (its record's hash)
                run = dataclasses.replace(c, schedule_steps=schedule_steps(c), progress=False)
                (d / "config.yaml").write_text(yaml.safe_dump(run.to_dict(), sort_keys=False))
                on_done(i, d)
            return dirs

    monkeypatch.setattr(kinds, "_KINDS", dict(kinds._KINDS))
    kinds.register_setting_kind("recorded")(Recorded)
    return calls


def _recorded_registry(tmp_path, monkeypatch):
    """A registry with one claim in the setting ``rec`` of the kind ``recorded``, retention 0.2 / 0.3
    on seeds 0 / 1; reproduce reads it, and the report is not written."""
    from entflow.analysis import report

    claim = {
        "id": "rec-retention",
        "paper": "test",
        "statement": "retention",
        "measured": "retention",
        "metric": {"name": "fact", "fact": "entropy_retention", "run": "grpo"},
        "runs": ["grpo"],
        "criterion": {"kind": "threshold", "threshold": 0.5},
        "direction": "lower",
        "seeds": [0, 1],
        "status": "pre-registered 2026-01-01",
        "setting": "rec",
    }
    data = {
        "settings": {
            "demo": {"config": "demo.yaml", "steps": 80},
            "rec": {"config": "tiny.yaml", "steps": 7, "kind": "recorded"},
        },
        "claims": [claim],
    }
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    reg = load_registry(path, known_facts=FACTS)
    monkeypatch.setattr(rep, "registry", lambda: reg)
    retention = {0: 0.2, 1: 0.3}
    monkeypatch.setattr(rep, "run_facts", lambda d, summary: {"entropy_retention": retention[int(d.name[-1])]})
    monkeypatch.setattr(report, "summarize_run", lambda d: {})
    monkeypatch.setattr(report, "write_report", lambda dirs, out: None)

    return reg


def test_a_registered_kind_trains_its_setting_in_reproduce(tmp_path, monkeypatch, recording_kind):
    reg = _recorded_registry(tmp_path, monkeypatch)
    assert reg.settings["rec"].base() == {"task": "countdown", "steps": 7}  # its preset, methods dropped
    overrides = [*COMMON_OVERRIDES, "steps=2"]
    res = rep.reproduce({"rec": reg.settings["rec"].base()}, overrides, [0, 1], tmp_path / "out", jobs=2)

    # one call, one run at a time (parallel = False), the lab-only checkpoint_every=20 dropped
    # (the kind's common overrides do not hold it), resumed by default
    default_every = LabConfig().checkpoint_every
    assert recording_kind == [
        {
            "runs": [("grpo", 0, default_every), ("grpo", 1, default_every)],
            "jobs": 1,
            "resume": True,
            "overwrite": False,
        }
    ]
    assert res["settings"]["rec"]["kind"] == "recorded" and res["runs"] == ["rec/grpo"]
    row = res["claims"][0]
    # mean 0.25; half-width t(0.975, 1 df) · s/√n with s = 0.1/√2 (two values 0.1 apart), n = 2:
    # 12.706 · 0.05; two seeds are too few for a verdict (MIN_SEEDS = 3), so the row is "not judged"
    half = stats.t.ppf(0.975, 1) * (0.1 / math.sqrt(2)) / math.sqrt(2)
    assert row["values"] == [0.2, 0.3] and row["mean"] == pytest.approx(0.25)
    assert row["half"] == pytest.approx(half) and row["verdict"] == "not judged"


def test_a_run_s_record_is_written_when_it_finishes_and_survives_a_stop(tmp_path, monkeypatch, recording_kind):
    reg = _recorded_registry(tmp_path, monkeypatch)
    overrides = [*COMMON_OVERRIDES, "steps=2"]
    monkeypatch.setitem(STOP_AT, "run", 1)  # seed 0 finishes, then the machine stops
    with pytest.raises(RuntimeError, match="stopped"):
        rep.reproduce({"rec": reg.settings["rec"].base()}, overrides, [0, 1], tmp_path / "out", jobs=2)
    assert sorted(p.name for p in (tmp_path / "out/facts/rec").iterdir()) == ["grpo-s0.json"]
    monkeypatch.setitem(STOP_AT, "run", None)
    res = rep.reproduce({"rec": reg.settings["rec"].base()}, overrides, [0, 1], tmp_path / "out", jobs=2)
    # the second call trains seed 1 only: seed 0 is taken from its record
    assert recording_kind[1]["runs"] == [("grpo", 1, LabConfig().checkpoint_every)]
    assert res["claims"][0]["values"] == [0.2, 0.3]
