"""The suggestion's configuration lines (entflow.analysis.collapse.suggestion_lines) are accepted by
the trainer they are for, and build the suggested method: the TRL lines by TRL's own config class
(EntflowGRPOConfig, which builds and checks the method), the verl lines by verl's own Hydra config
and validate_config (entflow.integrations.verl.check), the entflow command by the CLI's parser
and config builder. ``trainer_of`` tells the trainers apart by format and entropy key."""

from __future__ import annotations

import shlex

import pytest

from entflow.analysis.collapse import SUGGESTIONS, suggestion_lines, trainer_of
from entflow.errors import AnalysisError
from entflow.methods import get_method

SUGGESTED = sorted({(m, tuple(p.items())) for m, p, _, _ in SUGGESTIONS.values() if m != "grpo"})


@pytest.mark.parametrize(
    ("fmt", "key", "trainer"),
    [
        ("entflow-run", "entropy", "entflow"),
        ("trl-state", "entropy", "trl"),
        ("tensorboard", "train/entropy", "trl"),
        ("csv", "train/entropy", "trl"),
        ("verl-jsonl", "actor/entropy", "verl"),
        ("tensorboard", "actor/entropy", "verl"),
        ("csv", "policy/H", "entflow"),
    ],
)
def test_trainer_of(fmt, key, trainer):
    assert trainer_of(fmt, key) == trainer


def test_grpo_needs_no_lines_and_an_unknown_trainer_is_refused():
    assert suggestion_lines("grpo", {}, "trl") == []
    with pytest.raises(AnalysisError, match="unknown trainer 'deepspeed'"):
        suggestion_lines("kl_cov", {}, "deepspeed")


@pytest.mark.parametrize(("method", "params"), SUGGESTED)
def test_entflow_lines_build_the_method(method, params):
    from entflow.cli.main import build_parser
    from entflow.lab.config import LabConfig
    from entflow.trainer.config import build_config

    (line,) = suggestion_lines(method, dict(params), "entflow")
    argv = shlex.split(line)
    assert argv[:2] == ["entflow", "train"]
    args = build_parser().parse_args(argv[1:])
    cfg = build_config({"method": args.method}, args.overrides, cls=LabConfig)
    assert cfg.method == method and cfg.method_params == dict(params)  # parsed back from the text


@pytest.mark.parametrize(("method", "params"), SUGGESTED)
def test_trl_lines_are_an_entflow_grpo_config(method, params, tmp_path):
    pytest.importorskip("trl")
    lines = suggestion_lines(method, dict(params), "trl")
    code = "\n".join(ln for ln in lines if not ln.startswith("trainer = "))
    code = code.replace(
        "...,  # your GRPOConfig arguments",
        f"output_dir={str(tmp_path)!r}, report_to='none', use_cpu=True, bf16=False,",
    )
    scope: dict = {}
    exec(compile(code, "suggestion", "exec"), scope)  # EntflowGRPOConfig builds and checks the method
    args = scope["args"]
    assert args.entflow_method == method and args.entflow_method_params == dict(params)
    from entflow.integrations.trl.config import build_method

    assert repr(build_method(args)) == repr(get_method(method, **dict(params)))
    assert any(ln.startswith("trainer = EntflowGRPOTrainer(") for ln in lines)


def test_verl_lines_pass_verls_own_config_check():
    pytest.importorskip("verl")
    from entflow.integrations.verl.check import validate

    base = [  # the rest of a launch command: what verl asks of any actor
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
        "critic.ppo_micro_batch_size_per_gpu=1",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=4",
    ]
    for method, params in SUGGESTED:
        method_obj = validate([*base, *suggestion_lines(method, dict(params), "verl")])
        assert repr(method_obj) == repr(get_method(method, **dict(params))), method
