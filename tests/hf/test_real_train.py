"""The real-model training path (entflow.hf.setup on the lab trainer) on a tiny in-process
model: `entflow train --model DIR --data basic_arithmetic` writes the lab's run directory,
resumes to the same metrics, feeds the report, and refuses bad input before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from entflow.errors import ConfigError, UnknownMethodError
from entflow.hf.setup import RealTrainConfig, train_real
from entflow.trainer.config import build_config
from support.real_tiny import save_tiny_model, tiny_run_overrides


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _overrides(out: Path, **extra) -> list[str]:
    return tiny_run_overrides(out, **({"group_size": 4, "mini_batches": 2, "max_new_tokens": 6} | extra))


def _lines(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_cli_train_two_steps_writes_the_lab_run_directory(tiny_dir, tmp_path, parity, capsys):
    from entflow.analysis.report import summarize_run
    from entflow.cli.main import main

    rc = main(["train", "--model", str(tiny_dir), "--data", "basic_arithmetic", "--method", "steer", "--name", "r",
               *_overrides(tmp_path)])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    run = tmp_path / "r"
    for f in ("config.yaml", "metrics.jsonl", "samples.jsonl", "timing.jsonl", "checkpoints/last.pt"):
        assert (run / f).is_file(), f
    assert (run / "checkpoints" / "final" / "config.json").is_file()
    lines = _lines(run)
    assert [r["step"] for r in lines] == [0, 1, 2]
    for r in lines[1:]:
        assert 0.0 <= r["reward/mean"] <= 1.0 and r["entropy"] > 0 and r["reward/errors"] == 0.0
        assert "audit/steer/spearman" in r and "steer/weight_mean" in r and "loss" in r
    assert any(r["batch/degenerate_group_frac"] < 1 for r in lines[1:])  # the update had a signal
    for r in lines:
        assert {"val/acc", "val/pass@k", "val/maj@k", "val/acc_greedy", "val/entropy"} <= set(r)
    sample = json.loads((run / "samples.jsonl").read_text().splitlines()[0])
    assert sample["prompt"].startswith("<|im_start|>user\nCalculate")  # chat template applied
    t = json.loads((run / "timing.jsonl").read_text().splitlines()[0])
    assert {"time/rollout_s", "time/verify_s", "time/old_stats_s", "time/advantages_s", "time/update_s"} <= set(t)
    s = summarize_run(run)  # the lab's report reads it
    assert s["method"] == "steer" and s["task"] == "basic_arithmetic" and s["steps"] == 2
    assert s["entropy_initial"] > 0 and 0 <= s["reward_final"] <= 1


def test_resume_reproduces_the_uninterrupted_run(tiny_dir, tmp_path, parity):
    full = build_config({"model": str(tiny_dir), "name": "full"}, _overrides(tmp_path), cls=RealTrainConfig)
    train_real(full)
    part = build_config({"model": str(tiny_dir), "name": "part"}, _overrides(tmp_path, steps=1), cls=RealTrainConfig)
    train_real(part)  # stops after step 1, as a killed run would after its checkpoint
    more = build_config({"model": str(tiny_dir), "name": "part"}, _overrides(tmp_path), cls=RealTrainConfig)
    train_real(more, resume=True)
    a, b = _lines(tmp_path / "full"), _lines(tmp_path / "part")
    assert [r["step"] for r in b] == [0, 1, 2]  # step 2 continued from step 1's checkpoint
    assert a[0] == b[0] and a[-1] == b[-1]  # step 2 bit for bit (metrics, validation)


def test_bad_input_fails_before_loading(tiny_dir, tmp_path, monkeypatch):
    import entflow.hf.models

    monkeypatch.setattr(entflow.hf.models, "load_model", lambda *a, **k: pytest.fail("loaded before validating"))

    def cfg(**kw):
        return build_config({"model": str(tiny_dir)} | kw, [f"out_dir={tmp_path}"], cls=RealTrainConfig)

    with pytest.raises(ConfigError, match="'model'"):
        cfg(model=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=r"'task'.*gsm_symbolc.*known: .*gsm_symbolic"):
        cfg(task="gsm_symbolc")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "1+1", "answer": "2"}\n')
    with pytest.raises(ConfigError, match="'prompt'"):
        cfg(task=str(bad))
    with pytest.raises(ConfigError, match="max_new_tokens"):
        cfg(max_new_tokens=0)
    with pytest.raises(ConfigError, match="group_size"):  # the lab's own checks still apply
        cfg(group_size=1)
    for shots in ([["1+1?"]], [["1+1?", 2]], "1+1? 2", [("a", "b", "c")]):
        with pytest.raises(ConfigError, match="few_shot"):
            cfg(few_shot=shots)
    assert cfg(few_shot=[["1+1?", "2"]]).few_shot == [["1+1?", "2"]]
    with pytest.raises(ConfigError, match="pretrain"):
        cfg(pretrain={"steps": 3})
    with pytest.raises(UnknownMethodError, match="reward"):
        cfg(reward="bleu")
    from entflow.cli.main import main

    assert main(["train", "--data", "gsm_symbolic"]) == 2  # --data without --model


@pytest.mark.skipif(__import__("importlib").util.find_spec("peft") is None, reason="peft is in the [real] extra")
def test_lora_trains_only_the_adapter_checkpoints_it_alone_and_resumes_exactly(tiny_dir, tmp_path, parity):
    """lora_rank=4: the base weights never move, the checkpoint holds the adapter (and only it), a
    resumed run reproduces the uninterrupted one, and checkpoints/final is the merged plain model
    (base + B·A·alpha/r), loadable without peft."""
    import torch
    from safetensors.torch import load_file

    from entflow.trainer.rundir import load_checkpoint

    kw = {"lora_rank": 4, "lr": 5e-2}
    full = build_config({"model": str(tiny_dir), "name": "full"}, _overrides(tmp_path, **kw), cls=RealTrainConfig)
    run = train_real(full)
    ck = load_checkpoint(run / "checkpoints" / "last.pt")
    assert ck["model"] and all("lora_" in k for k in ck["model"])  # the adapter alone
    base = load_file(str(tiny_dir / "model.safetensors"))
    n_lora = sum(v.numel() for v in ck["model"].values())
    assert 0 < n_lora < sum(v.numel() for v in base.values())
    # B moved away from its zero start: the adapter trained
    assert any(k.endswith("lora_B.default.weight") and v.abs().max() > 0 for k, v in ck["model"].items())
    # the final model is the base plus the merged adapter: q_proj of layer 0 by hand
    final = load_file(str(run / "checkpoints" / "final" / "model.safetensors"))
    assert set(final) <= set(base) | {"lm_head.weight"}
    name = "model.layers.0.self_attn.q_proj.weight"
    a = ck["model"][f"base_model.model.{name[: -len('.weight')]}.lora_A.default.weight"]
    b = ck["model"][f"base_model.model.{name[: -len('.weight')]}.lora_B.default.weight"]
    merged = base[name] + (b @ a) * (8 / 4)  # alpha = 2r by default
    assert torch.allclose(final[name], merged, atol=1e-6, rtol=0)
    assert torch.equal(final["model.layers.0.input_layernorm.weight"], base["model.layers.0.input_layernorm.weight"])

    part = build_config(
        {"model": str(tiny_dir), "name": "part"}, _overrides(tmp_path, steps=1, **kw), cls=RealTrainConfig
    )
    train_real(part)
    more = build_config({"model": str(tiny_dir), "name": "part"}, _overrides(tmp_path, **kw), cls=RealTrainConfig)
    train_real(more, resume=True)
    assert (tmp_path / "full" / "metrics.jsonl").read_text() == (tmp_path / "part" / "metrics.jsonl").read_text()
    with pytest.raises(ConfigError, match="lora_rank"):
        build_config({"model": str(tiny_dir)}, _overrides(tmp_path, lora_rank=-1), cls=RealTrainConfig)


def test_fast_defaults_equal_the_plain_step_and_audit_on_validation_steps(tiny_dir, tmp_path, parity):
    """The real defaults (share_prompts, optimizer adamw_fused, audit_every=0) against the plain
    step (share_prompts=false, adamw, audit_every=1) on the same seed: the same samples and rewards,
    the same statistics to float32 round-off; the audit only on validation steps."""
    import math

    from entflow.trainer.loop import make_optimizer

    fast = build_config({"model": str(tiny_dir), "name": "fast"}, _overrides(tmp_path, steps=3, eval_every=2),
                        cls=RealTrainConfig)  # fmt: skip
    assert (fast.share_prompts, fast.optimizer, fast.audit_every) == (True, "adamw_fused", 0)
    plain_kw = {"steps": 3, "eval_every": 2, "share_prompts": "false", "optimizer": "adamw", "audit_every": 1}
    plain = build_config({"model": str(tiny_dir), "name": "plain"}, _overrides(tmp_path, **plain_kw),
                         cls=RealTrainConfig)  # fmt: skip
    a, b = _lines(train_real(fast)), _lines(train_real(plain))
    assert [r["step"] for r in a] == [r["step"] for r in b] == [0, 1, 2, 3]
    # validation steps (2, and 3 the last) are audited; step 1 only in the plain run
    assert "audit/steer/spearman" not in a[1] and "audit/steer/spearman" in b[1]
    for i in (2, 3):
        assert "audit/steer/spearman" in a[i] and "diag/calib/gap" in a[i]
    samples = [(tmp_path / r / "samples.jsonl").read_text() for r in ("fast", "plain")]
    assert samples[0] == samples[1]  # the same responses and rewards
    for ra, rb in zip(a, b, strict=True):
        assert ra.keys() <= rb.keys()
        # audit/*: the true ΔH = H_after − H_before is a difference of nearly equal numbers, so the
        # round-off of either (≈ 1e-7) moves the scores by ≈ 1e-4
        tol = {"audit/": {"rel": 1e-2, "abs": 1e-3}}
        bad = [
            (ra["step"], k, v, rb[k])
            for k, v in ra.items()
            if isinstance(v, float)
            and math.isfinite(v)
            and v != pytest.approx(rb[k], **tol.get(k[:6], {"rel": 1e-4, "abs": 1e-6}))
        ]
        assert not bad, bad
    model = __import__("torch").nn.Linear(2, 2)
    assert make_optimizer(model, fast).defaults["fused"] is True
    assert not make_optimizer(model, plain).defaults.get("fused")
    with pytest.raises(ConfigError, match="audit_every"):
        build_config({"model": str(tiny_dir)}, _overrides(tmp_path, audit_every=-1), cls=RealTrainConfig)
    with pytest.raises(ConfigError, match="optimizer"):
        build_config({"model": str(tiny_dir)}, _overrides(tmp_path, optimizer="adam"), cls=RealTrainConfig)
