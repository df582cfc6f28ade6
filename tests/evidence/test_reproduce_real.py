"""Settings of kind ``real`` in the claim registry and ``entflow reproduce`` on them: the registry
accepts ``kind: real`` and refuses an unknown kind naming the key; reproduce builds
``RealTrainConfig`` runs from the setting's preset (no lab warm start, the real checkpoint policy),
trains them with ``train_real`` into ``out/<setting>/<run>-s<seed>`` with the held-out pass@k of
the starting and the final policy (``coverage.json``), resumes without retraining, and judges a
claim of a test registry through the same facts. The model is a tiny in-process Llama."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from entflow.errors import ConfigError
from entflow.evidence import reproduce as rep
from entflow.evidence.claims import load_registry, load_settings, registry_path
from entflow.evidence.facts import FACTS
from entflow.hf.rewards import REWARDS
from entflow.hf.setup import RealTrainConfig
from entflow.settings import registry as kinds
from entflow.settings.lab import COMMON_OVERRIDES
from entflow.settings.real import REAL_COMMON_OVERRIDES
from support.real_tiny import parity_reward, save_tiny_model

SEEDS = [0, 1]
RUNS = ["grpo", "clip_cov_r05"]


def test_the_packaged_registry_has_a_real_setting():
    settings = load_settings()
    real = settings["real"]
    assert (real.kind, real.config, real.steps) == ("real", "real.yaml", 15)
    assert settings["demo"].kind == "lab" and settings["regime"].kind == "lab"
    base = real.base()
    assert base["model"] == "smollm2" and base["task"] == "basic_arithmetic" and base["steps"] == 15
    assert "methods" not in base and "seeds" not in base
    assert set(base) - {"steps"} <= {f for f in RealTrainConfig.__dataclass_fields__}


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ("real: {config: real.yaml, steps: 15, kind: reel}", "settings.real.kind"),
        ("real: {config: real.yaml, steps: 15, kind: real, extra: 1}", "settings.real"),
    ],
)
def test_an_unknown_setting_kind_is_refused_naming_the_key(tmp_path, spec, key):
    text = registry_path().read_text()
    good = "real: {config: real.yaml, steps: 15, kind: real}"
    assert good in text
    path = tmp_path / "claims.yaml"
    path.write_text(text.replace(good, spec))
    with pytest.raises(ConfigError) as e:
        load_registry(path, known_facts=FACTS)
    assert e.value.key == key
    if key.endswith("kind"):
        assert "reel" in str(e.value) and "'lab', 'real'" in str(e.value)


def _claim(cid: str, metric: dict, runs: list[str], kind: dict, direction: str = "higher") -> dict:
    return {
        "id": cid,
        "paper": "test",
        "statement": cid,
        "measured": cid,
        "metric": metric,
        "runs": runs,
        "criterion": kind,
        "direction": direction,
        "seeds": SEEDS,
        "status": "pre-registered 2026-11-26",
        "setting": "real",
    }


@pytest.fixture
def real_registry(tmp_path, monkeypatch):
    """A registry whose three claims are measured in the real setting (the packaged one has none)."""
    claims = [
        _claim("learns", {"name": "change_from_warm", "fact": "val_acc", "run": "grpo"}, ["grpo"], {"kind": "greater"}),
        _claim(
            "pass32",
            {"name": "paired_difference", "fact": "val_pass_at_32_final", "run": "clip_cov_r05", "baseline": "grpo"},
            ["clip_cov_r05", "grpo"],
            {"kind": "greater"},
        ),
        _claim(
            "retention",
            {"name": "fact", "fact": "entropy_retention", "run": "grpo"},
            ["grpo"],
            {"kind": "threshold", "threshold": 0.5},
            "lower",
        ),
    ]
    data = {
        "settings": {
            "demo": {"config": "demo.yaml", "steps": 80},
            "real": {"config": "real.yaml", "steps": 40, "kind": "real"},
        },
        "claims": claims,
    }
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    reg = load_registry(path, known_facts=FACTS)
    monkeypatch.setattr(rep, "registry", lambda: reg)
    return reg


def test_reproduce_trains_and_judges_a_real_setting(tmp_path, real_registry, monkeypatch):
    from entflow.analysis import report

    model = save_tiny_model(tmp_path / "model")
    monkeypatch.setitem(REWARDS, "parity", parity_reward)
    monkeypatch.setattr(rep, "COVERAGE_N", 32)  # the size reproduce gives a run a claim reads pass@k of
    monkeypatch.setattr(report, "_write_all_plots", lambda *a: [])  # the report's tables suffice here
    assert rep.coverage_runs() == {"real/grpo", "real/clip_cov_r05"}  # the pass@32 claim reads coverage
    base = real_registry.settings["real"].base() | {
        "model": str(model),
        "reward": "parity",
        "prompts_per_step": 2,
        "group_size": 4,
        "max_new_tokens": 4,
        "val_size": 3,
        "eval_k": 2,
        "eval_every": 10,  # validation at step 0 and the last
        "lr": 1e-2,
        "progress": False,
    }
    overrides = [*COMMON_OVERRIDES, "steps=2"]  # as `entflow reproduce` passes them
    out = tmp_path / "rep"
    res = rep.reproduce({"real": base}, overrides, SEEDS, out, jobs=2)  # the setting's kind trains it

    assert res["runs"] == ["real/grpo", "real/clip_cov_r05"]
    assert res["settings"]["real"] == {"config": "real.yaml", "steps": 2, "folder": str(out / "real"), "kind": "real"}
    for run in RUNS:
        for seed in SEEDS:
            d = out / "real" / f"{run}-s{seed}"
            cfg = yaml.safe_load((d / "config.yaml").read_text())
            assert cfg["model"] == str(model) and cfg["seed"] == seed and cfg["group"] == run
            assert cfg["policy_path"] == str(model)  # the model itself, no lab warm start
            assert cfg["audit"] is False and cfg["checkpoint_every"] == RealTrainConfig.checkpoint_every
            assert cfg["coverage_n"] == rep.COVERAGE_N and cfg["method"] == ("grpo" if run == "grpo" else "clip_cov")
            cov = json.loads((d / "coverage.json").read_text())
            assert (cov["warm"]["step"], cov["final"]["step"], cov["n"]) == (0, 2, rep.COVERAGE_N)
            for which in ("warm", "final"):
                val = cov[which]["splits"]["val"]
                assert set(cov[which]["splits"]) == {"val"} and val["n_problems"] == 3
                assert set(val["pass_at_k"]) == {str(2**i) for i in range(6)}  # 1, 2, …, 32
                p1 = sum(val["correct"]) / (3 * rep.COVERAGE_N)
                assert val["pass_at_k"]["1"] == pytest.approx(p1) and 0 < p1 < 1
                assert val["pass_at_k"]["1"] <= val["pass_at_k"]["8"] <= val["pass_at_k"]["32"]
    # the same starting policy and seed: both runs of a seed start from the same coverage
    warm = [json.loads((out / "real" / f"{r}-s0" / "coverage.json").read_text())["warm"] for r in RUNS]
    assert warm[0] == warm[1]

    rows = {r["id"]: r for r in res["claims"]}
    assert {r["verdict"] for r in rows.values()} == {"not judged"}  # two seeds: values, no verdict
    for cid in ("learns", "pass32", "retention"):
        assert rows[cid]["n"] == 2 and all(math.isfinite(v) for v in rows[cid]["values"]), cid
    # each claim's value is its facts' arithmetic, read back from the run directories
    from entflow.evidence.facts import run_facts

    f = {(r, s): run_facts(out / "real" / f"{r}-s{s}") for r in RUNS for s in SEEDS}
    assert rows["learns"]["values"] == pytest.approx(
        [f["grpo", s]["val_acc_final"] - f["grpo", s]["val_acc_warm"] for s in SEEDS]
    )
    assert rows["pass32"]["values"] == pytest.approx(
        [f["clip_cov_r05", s]["val_pass_at_32_final"] - f["grpo", s]["val_pass_at_32_final"] for s in SEEDS]
    )
    assert rows["retention"]["values"] == pytest.approx([f["grpo", s]["entropy_retention"] for s in SEEDS])
    cov0 = json.loads((out / "real" / "grpo-s0" / "coverage.json").read_text())
    assert f["grpo", 0]["val_pass_at_32_warm"] == cov0["warm"]["splits"]["val"]["pass_at_k"]["32"]
    assert f["grpo", 0]["val_pass_at_1_final"] == cov0["final"]["splits"]["val"]["pass_at_k"]["1"]
    assert (out / "claims.json").is_file() and (out / "real" / "summary.md").is_file()

    # resume: a finished run is not trained again (a part-finished one continues from its checkpoint:
    # the trainer's resume, tests/hf/test_real_train.py)
    metrics = {d: d.read_bytes() for d in (out / "real").glob("*/metrics.jsonl")}
    import entflow.trainer.loop as loop

    monkeypatch.setattr(loop, "train_step", lambda *a, **k: pytest.fail("a finished run was trained again"))
    again = rep.reproduce({"real": base}, overrides, SEEDS, out, jobs=2)
    assert {d: d.read_bytes() for d in metrics} == metrics
    assert [r["values"] for r in again["claims"]] == [r["values"] for r in res["claims"]]


def test_real_runs_do_not_take_the_lab_checkpoint_policy():
    lab_only = [o for o in COMMON_OVERRIDES if o not in REAL_COMMON_OVERRIDES]
    assert lab_only == ["checkpoint_every=20"]
    assert kinds.kind_overrides("real", [*COMMON_OVERRIDES, "steps=3"]) == ["audit=false", "steps=3"]
    # a user's own equal override after reproduce's common ones stays
    real = kinds.kind_overrides("real", [*COMMON_OVERRIDES, "checkpoint_every=20"])
    assert real == ["audit=false", "checkpoint_every=20"]
    assert kinds.kind_overrides("lab", [*COMMON_OVERRIDES, "steps=3"]) == [*COMMON_OVERRIDES, "steps=3"]
    assert list(kinds.get_setting_kind("real").common_overrides) == ["audit=false"]
    assert list(kinds.get_setting_kind("lab").common_overrides) == COMMON_OVERRIDES
