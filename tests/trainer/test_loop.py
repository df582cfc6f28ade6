"""The lab trainer end to end on a micro config: run directory, metric names, exact resume,
surviving a kill, bad configs rejected before any work, degenerate batches counted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from entflow.errors import ConfigError
from entflow.lab.config import build_config
from entflow.lab.setup import train_lab
from entflow.trainer.rundir import read_jsonl
from support.lab_micro import metric_column, micro_lab_config, micro_run_config, pretrain_micro_policy


@pytest.fixture(scope="module")
def micro_policy(tmp_path_factory) -> str:
    """This module's micro policy: two layers, warm-started longer than the session's."""
    policy = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64}
    return pretrain_micro_policy(tmp_path_factory.mktemp("cache"), policy=policy, steps=60, batch_size=32)


def micro_config(out_dir: Path, policy: str, **overrides):
    # lr large, so that every step visibly moves the weights
    keys = {"steps": 4, "prompts_per_step": 4, "group_size": 4, "eval_every": 2, "lr": 3e-3}
    return micro_lab_config(out_dir, policy, **(keys | overrides))


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)["model"]


def test_run_directory_contents_and_metric_names(tmp_path, micro_policy):
    names = ["grpo", "steer", "opefo", "clip_higher+steer", "adaptive_entropy"]
    for method in names:
        cfg = micro_config(tmp_path, micro_policy, method=method, steps=3)
        run_dir = train_lab(cfg)
        files = {p.name for p in run_dir.iterdir()}
        assert {"config.yaml", "metrics.jsonl", "samples.jsonl", "checkpoints"} <= files
        assert any(f.startswith("events.out.tfevents") for f in files)
        assert (run_dir / "checkpoints" / "last.pt").exists()
        assert (run_dir / "checkpoints" / "final" / "config.json").exists()
        import yaml

        resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert resolved["method"] == method and resolved["steps"] == 3 and "lr" in resolved
        rows = read_jsonl(run_dir / "metrics.jsonl")
        assert [r["step"] for r in rows] == [0, 1, 2, 3]
        assert "val/acc" in rows[0] and "val/acc" in rows[2] and "val/acc" in rows[3] and "val/acc" not in rows[1]
        step = rows[1]
        for key in (
            "reward/mean",
            "entropy",
            "loss",
            "clip/frac_high",
            "clip/frac_low",
            "flow/S_pos",
            "flow/S_neg",
            "flow/lambda_star",
            "quadrant/I/frac",
            "nll",
            "response/len_mean",
            "batch/degenerate_group_frac",
        ):
            assert key in step, (method, key)
        for est in ("steer", "sampled_logit", "opefo", "tabular", "cov"):
            assert f"audit/{est}/spearman" in step and f"audit/{est}/pearson" in step and f"audit/{est}/mse" in step
        if "steer" in method:
            assert "steer/weight_mean" in step
        if method == "opefo":
            assert "opefo/lambda" in step
        if method == "adaptive_entropy":
            assert "adaptive_entropy/coef" in step
        samples = read_jsonl(run_dir / "samples.jsonl")
        assert samples and {"step", "prompt", "response", "reward"} <= set(samples[0])


def test_a_run_builds_its_method_once_and_its_loss_spec_once(tmp_path, micro_policy, monkeypatch):
    """``cfg.validate()`` builds the run's method, and that object is the one every update trains;
    the run's ``LossSpec`` is made once and every ``policy_loss`` call gets that one object."""
    import entflow.methods as methods
    from entflow.trainer import step as step_mod
    from entflow.trainer.config import TrainConfig

    built, specs, seen = [], [], []
    real_get, real_spec, real_loss = methods.get_method, TrainConfig.loss_spec, step_mod.policy_loss

    def get_method(*args, **kwargs):
        built.append(real_get(*args, **kwargs))
        return built[-1]

    def loss_spec(self):
        specs.append(real_spec(self))
        return specs[-1]

    def policy_loss(batch, method, spec, **kwargs):
        seen.append((method, spec))
        return real_loss(batch, method, spec, **kwargs)

    monkeypatch.setattr(methods, "get_method", get_method)
    monkeypatch.setattr(TrainConfig, "loss_spec", loss_spec)
    monkeypatch.setattr(step_mod, "policy_loss", policy_loss)
    cfg = micro_config(tmp_path, micro_policy, method="clip_higher+steer", steps=3, mini_batches=2)
    built.clear()  # build_config validated the config before the run: the run starts here
    train_lab(cfg)
    assert len(built) == 1 and len(specs) == 1
    assert len(seen) == cfg.steps * cfg.mini_batches
    assert all(m is built[0] and s is specs[0] for m, s in seen)


def test_resume_is_bit_identical(tmp_path, micro_policy):
    # the entropy bonus guarantees a gradient even when a micro policy's groups all tie
    kw = {"name": "r", "method": "adaptive_entropy", "method_params": {"target": 10.0, "delta": 0.01}}
    full = train_lab(micro_config(tmp_path / "a", micro_policy, **kw))

    class StopError(Exception):
        pass

    def stop_at_2(record):
        if record["step"] == 2:
            raise StopError  # after step 2's metrics are written, before its checkpoint

    cfg = micro_config(tmp_path / "b", micro_policy, **kw)
    with pytest.raises(StopError):
        train_lab(cfg, on_step=stop_at_2)
    assert [r["step"] for r in read_jsonl(cfg.run_dir / "metrics.jsonl")] == [0, 1, 2]
    resumed = train_lab(micro_config(tmp_path / "b", micro_policy, **kw), resume=True)
    assert (full / "metrics.jsonl").read_text() == (resumed / "metrics.jsonl").read_text()
    wa, wb = final_weights(full), final_weights(resumed)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    # the weights really moved, so the equality above is not vacuous
    from safetensors.torch import load_file

    start = load_file(str(Path(micro_policy) / "model.safetensors"))
    assert any(not torch.equal(start[k], wa[k]) for k in start)


def test_kill_mid_run_loses_nothing_and_resume_completes(tmp_path, micro_policy):
    cfg_args = [
        f"out_dir={tmp_path}",
        f"policy_path={micro_policy}",
        "task_params={validation_size: 8}",
        "steps=12",
        "prompts_per_step=4",
        "group_size=4",
        "eval_every=3",
        "eval_k=1",
        "progress=false",
    ]
    cmd = [sys.executable, "-m", "entflow.cli.main", "train", "--name", "k", *cfg_args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    metrics = tmp_path / "k" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and len(read_jsonl(metrics)) < 4 and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = metrics.read_text()
    lines_before = before.splitlines()
    assert len(lines_before) >= 4
    done = subprocess.run(
        [sys.executable, "-m", "entflow.cli.main", "train", "--resume", str(tmp_path / "k")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    after = metrics.read_text().splitlines()
    complete_before = [ln for ln in lines_before if ln.endswith("}")]
    assert after[: len(complete_before)] == complete_before  # nothing already written was lost or changed
    assert [json.loads(ln)["step"] for ln in after] == list(range(13))


def test_bad_config_fails_before_any_work(tmp_path):
    cases = {
        "unknown_key": ({"stepz": 3}, "stepz"),
        "wrong_type": ({"steps": "many"}, "steps"),
        "group_too_small": ({"group_size": 1}, "group_size"),
        "unknown_method": ({"method": "no_such_method"}, "method"),
        "bad_method_param": ({"method": "steer", "method_params": {"lambda_min": 2.0}}, "method_params"),
        "negative_lr": ({"lr": -1.0}, "lr"),
        "bad_schedule_steps": ({"schedule_steps": 0}, "schedule_steps"),
        "unknown_task": ({"task": "chess"}, "task"),
    }
    for label, (values, key) in cases.items():
        with pytest.raises(ConfigError) as e:
            build_config({"out_dir": str(tmp_path)} | values)
        assert e.value.key == key, label
        assert key in str(e.value), label
    assert not any(tmp_path.iterdir())  # nothing was created


def test_cli_bad_override_names_the_key(tmp_path, capsys):
    from entflow.cli.main import main

    assert main(["train", f"out_dir={tmp_path}", "group_size=1"]) == 2
    assert "group_size" in capsys.readouterr().err
    assert main(["train", "--method", "nope", f"out_dir={tmp_path}"]) == 2
    assert "nope" in capsys.readouterr().err


def test_degenerate_batches_are_counted_and_give_zero_gradient(tmp_path, micro_policy, monkeypatch):
    """All rewards equal → advantages 0 → no weight change; the fraction is reported."""
    from entflow.lab import tasks

    monkeypatch.setattr(tasks.CountdownTask, "reward", lambda self, problem, response: 1.0)
    cfg = micro_config(tmp_path, micro_policy, steps=2, optimizer="sgd", audit=False)
    run_dir = train_lab(cfg)
    rows = read_jsonl(run_dir / "metrics.jsonl")
    for r in rows[1:]:
        assert r["batch/degenerate_group_frac"] == 1.0
        assert r["reward/mean"] == 1.0 and r["loss"] == 0.0 and r["grad_norm"] == 0.0
    from safetensors.torch import load_file

    start = load_file(str(Path(micro_policy) / "model.safetensors"))
    end = final_weights(run_dir)
    assert all(torch.equal(start[k], end[k]) for k in start)


def test_resume_refuses_a_changed_config(tmp_path, micro_policy):
    cfg = micro_config(tmp_path, micro_policy, name="c", steps=2)
    train_lab(cfg)
    with pytest.raises(ConfigError) as e:
        train_lab(micro_config(tmp_path, micro_policy, name="c", steps=3, lr=1e-2), resume=True)
    assert e.value.key == "lr" and "lr" in str(e.value)
    # extending a finished run is allowed: steps may change on resume
    run_dir = train_lab(micro_config(tmp_path, micro_policy, name="c", steps=3), resume=True)
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1, 2, 3]
    # so may the thread count (it changes how the steps to come round, not the finished ones)
    run_dir = train_lab(micro_config(tmp_path, micro_policy, name="c", steps=4, threads=2), resume=True)
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1, 2, 3, 4]


def test_resume_a_run_written_before_a_config_key_existed(tmp_path, micro_policy):
    """A run directory whose config.yaml lacks a key added later (here ``hidden_stats``) resumes when
    the key has its default, and is refused when the key is set otherwise."""
    import yaml

    run_dir = train_lab(micro_config(tmp_path, micro_policy, name="old", steps=2))
    path = run_dir / "config.yaml"
    written = yaml.safe_load(path.read_text())
    del written["hidden_stats"]
    path.write_text(yaml.safe_dump(written))
    with pytest.raises(ConfigError) as e:
        train_lab(micro_config(tmp_path, micro_policy, name="old", steps=3, hidden_stats=True), resume=True)
    assert e.value.key == "hidden_stats"
    run_dir = train_lab(micro_config(tmp_path, micro_policy, name="old", steps=3), resume=True)
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1, 2, 3]


def test_overrides_parse_numbers_and_method_params(tmp_path):
    cfg = build_config(
        {"out_dir": str(tmp_path), "method": "adaptive_entropy"},
        ["lr=3e-4", "method_params={target: 0.5}", "method.c_max=0.05", "eval_k=8", "grad_clip=null"],
    )
    assert cfg.lr == 3e-4 and isinstance(cfg.lr, float)
    assert cfg.method_params == {"target": 0.5, "c_max": 0.05}
    assert cfg.eval_k == 8 and cfg.grad_clip is None
    with pytest.raises(ConfigError) as e:
        build_config({"out_dir": str(tmp_path)}, ["method_params=3"])
    assert e.value.key == "method_params"


def test_eval_command_reports_avg_and_pass_at_k(tmp_path, micro_policy, capsys):
    from entflow.cli.main import main

    run_dir = train_lab(micro_config(tmp_path, micro_policy, name="e", steps=1))
    assert main(["eval", str(run_dir), "--k", "4"]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 2 and cells[1].replace(".", "").isdigit():
            rows[cells[0]] = float(cells[1])
    assert 0 <= rows["avg@4"] <= rows["pass@4 (unbiased)"] <= 1  # pass@k can never be below avg@k


def test_compare_runs_methods_in_parallel_and_writes_one_report(tmp_path, micro_policy):
    from entflow.cli.main import main

    args = [
        "compare",
        "--methods",
        "grpo,clip_higher+steer",
        "--name",
        "cmp",
        "--jobs",
        "2",
        f"out_dir={tmp_path}",
        f"policy_path={micro_policy}",
        "task_params={validation_size: 8}",
        "steps=2",
        "prompts_per_step=4",
        "group_size=4",
        "eval_k=1",
    ]
    assert main(args) == 0
    out = tmp_path / "cmp"
    for run in ("grpo", "clip_higher_steer"):
        rows = read_jsonl(out / run / "metrics.jsonl")
        assert [r["step"] for r in rows] == [0, 1, 2]
    # same seed and step → same prompts for every method
    prompts = [[s["prompt"] for s in read_jsonl(out / run / "samples.jsonl")] for run in ("grpo", "clip_higher_steer")]
    assert prompts[0] == prompts[1] and prompts[0]
    assert (out / "report.html").exists() and (out / "plots" / "entropy.png").exists()
    html = (out / "report.html").read_text()
    assert "grpo" in html and "clip_higher_steer" in html


def test_schedules_see_zero_based_steps(tmp_path, micro_policy):
    # stage schedule over S = 3 steps, 0-based s: λ = clamp(2s/(S−1) − 1, 0, 1) = 0, 0, 1
    run = train_lab(
        micro_run_config(
            tmp_path, micro_policy, name="stage", method="pos_adv_reweight", method_params={"schedule": "stage"}
        )
    )
    assert metric_column(run, "pos_adv/weight") == [0.0, 0.0, 1.0]
    # epoch schedule, E = 3 epochs over S = 3 steps: λ = (e − 1)/(E − 1) = 0, 0.5, 1
    run = train_lab(
        micro_run_config(
            tmp_path,
            micro_policy,
            name="epoch",
            method="pos_adv_reweight",
            method_params={"schedule": "epoch", "epochs": 3},
        )
    )
    assert metric_column(run, "pos_adv/weight") == [0.0, 0.5, 1.0]
    # position shaping on for exactly one step starting at 0-based step 1 = the second rollout step
    run = train_lab(
        micro_run_config(
            tmp_path, micro_policy, name="pos", method="position_shaping", method_params={"start": 1, "duration": 1}
        )
    )
    assert metric_column(run, "position_shaping/active") == [0.0, 1.0, 0.0]


def test_resume_with_more_steps_keeps_schedules_anchored(tmp_path, micro_policy):
    kw = {"name": "r", "method": "pos_adv_reweight", "method_params": {"schedule": "stage"}}
    train_lab(micro_run_config(tmp_path, micro_policy, steps=3, **kw))
    run = train_lab(micro_run_config(tmp_path, micro_policy, steps=6, **kw), resume=True)
    # anchored to the 3 planned steps: 0, 0, 1, then it stays at its final value (without the
    # anchor, steps 4–6 would read total_steps = 6 and give 0.2, 0.6, 1.0)
    assert metric_column(run, "pos_adv/weight") == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert yaml.safe_load((run / "config.yaml").read_text())["schedule_steps"] == 3

    with pytest.raises(ConfigError) as e:
        train_lab(micro_run_config(tmp_path, micro_policy, steps=7, schedule_steps=7, **kw), resume=True)
    assert e.value.key == "schedule_steps"


def test_validation_steps_log_diagnostics_and_whole_groups(tmp_path, micro_policy):
    run = train_lab(
        micro_run_config(tmp_path, micro_policy, name="d", steps=2, eval_every=2, samples_logged=2, prompts_per_step=3)
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


def test_a_finished_run_without_checkpoints_resumes_as_it_is(tmp_path, micro_policy):
    """A finished run's committed files (logs and config, no checkpoints) are judged as they are:
    a resume trains nothing and leaves them byte for byte; a changed config is still refused; and
    without its last step the run is not finished, so the resume trains (the fault the check guards)."""
    import shutil

    run_dir = train_lab(micro_config(tmp_path, micro_policy, name="f", steps=3))
    shutil.rmtree(run_dir / "checkpoints")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    seen: list[int] = []
    again = train_lab(micro_config(tmp_path, micro_policy, name="f", steps=3), resume=True, on_step=seen.append)
    assert again == run_dir and seen == []
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before
    assert not (run_dir / "checkpoints").exists()
    with pytest.raises(ConfigError) as e:
        train_lab(micro_config(tmp_path, micro_policy, name="f", steps=3, lr=1e-2), resume=True)
    assert e.value.key == "lr"
    # the last step's record missing: not finished, so the resume trains it again (from step 0)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "metrics.jsonl").write_text("".join(lines[:-1]))
    train_lab(
        micro_config(tmp_path, micro_policy, name="f", steps=3), resume=True, on_step=lambda r: seen.append(r["step"])
    )
    assert seen == [3] and (run_dir / "checkpoints" / "last.pt").exists()
    assert (run_dir / "metrics.jsonl").read_text() == before["metrics.jsonl"].decode()
