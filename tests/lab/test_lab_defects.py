"""Regression tests for lab defects: schedule step base, schedules anchored on
resume, strict on-policy forcing one step, `entflow eval` on the run's task and temperature, §9
diagnostics logged, whole groups in samples.jsonl. Each failed before its fix."""

from __future__ import annotations

import pytest
import yaml

from entflow.lab.config import build_config
from entflow.lab.setup import train_lab
from entflow.trainer.rundir import read_jsonl
from support.lab_micro import TASK_PARAMS  # the micro_policy fixture is in conftest


def micro(out_dir, policy: str, **overrides):
    base = {
        "out_dir": str(out_dir),
        "policy_path": policy,
        "task_params": TASK_PARAMS,
        "steps": 3,
        "prompts_per_step": 2,
        "group_size": 4,
        "mini_batches": 1,
        "eval_every": 0,
        "eval_k": 1,
        "audit": False,
        "progress": False,
    }
    return build_config(base | overrides)


def column(run_dir, key: str) -> list[float]:
    return [r[key] for r in read_jsonl(run_dir / "metrics.jsonl") if r["step"] > 0]


def test_schedules_see_zero_based_steps(tmp_path, micro_policy):
    # stage schedule over S = 3 steps, 0-based s: λ = clamp(2s/(S−1) − 1, 0, 1) = 0, 0, 1
    run = train_lab(
        micro(tmp_path, micro_policy, name="stage", method="pos_adv_reweight", method_params={"schedule": "stage"})
    )
    assert column(run, "pos_adv/weight") == [0.0, 0.0, 1.0]
    # epoch schedule, E = 3 epochs over S = 3 steps: λ = (e − 1)/(E − 1) = 0, 0.5, 1
    run = train_lab(
        micro(
            tmp_path,
            micro_policy,
            name="epoch",
            method="pos_adv_reweight",
            method_params={"schedule": "epoch", "epochs": 3},
        )
    )
    assert column(run, "pos_adv/weight") == [0.0, 0.5, 1.0]
    # position shaping on for exactly one step starting at 0-based step 1 = the second rollout step
    run = train_lab(
        micro(tmp_path, micro_policy, name="pos", method="position_shaping", method_params={"start": 1, "duration": 1})
    )
    assert column(run, "position_shaping/active") == [0.0, 1.0, 0.0]


def test_resume_with_more_steps_keeps_schedules_anchored(tmp_path, micro_policy):
    kw = {"name": "r", "method": "pos_adv_reweight", "method_params": {"schedule": "stage"}}
    train_lab(micro(tmp_path, micro_policy, steps=3, **kw))
    run = train_lab(micro(tmp_path, micro_policy, steps=6, **kw), resume=True)
    # anchored to the 3 planned steps: 0, 0, 1, then it stays at its final value (without the
    # anchor, steps 4–6 would read total_steps = 6 and give 0.2, 0.6, 1.0)
    assert column(run, "pos_adv/weight") == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert yaml.safe_load((run / "config.yaml").read_text())["schedule_steps"] == 3
    from entflow.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        train_lab(micro(tmp_path, micro_policy, steps=7, schedule_steps=7, **kw), resume=True)
    assert e.value.key == "schedule_steps"


def test_strict_on_policy_forces_one_gradient_step(tmp_path, micro_policy):
    run = train_lab(
        micro(tmp_path, micro_policy, name="s", strict_on_policy=True, ppo_epochs=3, mini_batches=4, steps=2)
    )
    assert column(run, "update/optimizer_steps") == [1.0, 1.0]
    # r ≡ 1 on the single step: nothing is clipped at either bound
    assert column(run, "clip/frac_high") == [0.0, 0.0] and column(run, "clip/frac_low") == [0.0, 0.0]
    loose = train_lab(micro(tmp_path, micro_policy, name="l", ppo_epochs=2, mini_batches=2, steps=1))
    assert column(loose, "update/optimizer_steps") == [4.0]


def test_eval_uses_the_runs_task_params_and_temperature(tmp_path, micro_policy, capsys):
    from entflow.cli.eval import lab_eval_settings
    from entflow.cli.main import main

    params = {"validation_size": 5, "max_target": 40}
    run = train_lab(micro(tmp_path, micro_policy, name="e", steps=1, task_params=params, temperature=0.7))
    _, task, temp = lab_eval_settings(run)
    assert task.validation_size == 5 and task.max_target == 40 and temp == 0.7
    assert all(p.answer.target <= 40 for p in task.validation_set())
    _, _, temp = lab_eval_settings(run, temperature=1.3)
    assert temp == 1.3
    assert main(["eval", str(run), "--k", "2"]) == 0
    out = capsys.readouterr().out
    assert "5 held-out prompts" in out and "temperature 0.7" in out


def test_validation_steps_log_diagnostics_and_whole_groups(tmp_path, micro_policy):
    run = train_lab(
        micro(tmp_path, micro_policy, name="d", steps=2, eval_every=2, samples_logged=2, prompts_per_step=3)
    )
    rows = {r["step"]: r for r in read_jsonl(run / "metrics.jsonl")}
    diag = [k for k in rows[2] if k.startswith("diag/")]
    assert not any(k.startswith("diag/") for k in rows[1])  # only on validation steps
    for key in (
        "diag/distinct_n",
        "diag/self_bleu",
        "diag/calib/gap",
        "diag/gnorm/mean",
        "diag/pos_entropy/correct/b0",
    ):
        assert key in diag, key
    assert 0 < rows[2]["diag/distinct_n"] <= 1
    samples = read_jsonl(run / "samples.jsonl")
    at = {s: [r for r in samples if r["step"] == s] for s in (1, 2)}
    assert len(at[1]) == 2  # one response per logged prompt off validation steps
    assert len(at[2]) == 2 * 4 and sorted({r["group"] for r in at[2]}) == [0, 1]  # whole groups of G = 4
    assert all(len({r["prompt"] for r in at[2] if r["group"] == g}) == 1 for g in (0, 1))


def test_warm_start_label_smoothing_loss_matches_hand_formula():
    import torch

    from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer
    from entflow.lab.pretrain import make_sft_batch, sft_loss
    from entflow.lab.tasks import LAB_ALPHABET

    tok = build_tokenizer(LAB_ALPHABET)
    model = build_policy(tok, PolicyConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32), seed=1)
    batch = make_sft_batch(tok, ["3 5 7>15:", "1 2>3:"], ["3*5", "1+2"])
    eps = 0.2
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1].double()
        logq = logits.log_softmax(-1)
        tgt = batch["input_ids"][:, 1:]
        nll = -logq.gather(-1, tgt[..., None])[..., 0]
        smooth = -logq.mean(-1)  # cross-entropy against the uniform distribution
        per_tok = (1 - eps) * nll + eps * smooth
        m = batch["loss_mask"][:, 1:].double()
        want = float((per_tok * m).sum() / m.sum())
        assert float(sft_loss(model, batch, eps)) == pytest.approx(want, rel=1e-5)
        assert float(sft_loss(model, batch)) == pytest.approx(float((nll * m).sum() / m.sum()), rel=1e-5)


def test_wrong_traces_are_well_formed_and_wrong():
    import random

    from entflow.lab.tasks import get_task, parse_expression

    rng = random.Random(0)
    task = get_task("countdown")
    for p in task.sample_problems(20, rng):
        for t in task.wrong_traces(p, rng, 5):
            value, used = parse_expression(t)
            assert value != p.answer.target and task.reward(p, t) == 0.0
            pool = list(p.answer.numbers)
            for u in used:
                pool.remove(u)  # only the prompt's numbers, each at most once
    arith = get_task("arithmetic")
    for p in arith.sample_problems(20, rng):
        assert all(arith.reward(p, t) == 0.0 and t.lstrip("-").isdigit() for t in arith.wrong_traces(p, rng, 5))
