"""EntflowGRPOTrainer as a drop-in for TRL's GRPOTrainer: what a TRL user's unchanged config does.

- evaluation before the first training step (``evaluate()``, ``eval_on_start=True``) gives TRL's
  evaluation loss;
- a plain ``trl.GRPOConfig`` is accepted and means ``entflow_method="grpo"``;
- ``reward_funcs`` may be omitted when the environment owns the reward (TRL >= 1.16);
- every TRL option that the entflow loss does not compute itself (its other loss types, KL to the
  reference, entropy bonus and mask, sequence-level ratios, per-reward normalisation, off-policy
  mask) gives TRL's own update with ``entflow_method="grpo"``: one training run of ours against
  TRL's own run per option, same tiny model, seed and generations, plain SGD (a wrong loss scale
  shows), two passes over each generation batch so ratios move off 1;
- global statistics accept generation batches that do not align with optimizer steps.

The tiny Llama is built in-process (tests/support/trl_tiny.py); nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import trl
from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer

from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer
from support.trl_capture import rel, trl_args, two_pass_run
from support.trl_tiny import continuous_reward

_FIELDS = {f.name for f in dataclasses.fields(GRPOConfig)}


def needs_fields(*names: str):
    """Skip where the installed TRL's GRPOConfig lacks one of ``names`` (older TRL)."""
    missing = [n for n in names if n not in _FIELDS]
    return pytest.mark.skipif(bool(missing), reason=f"trl {trl.__version__} has no {missing}")


def initial_weights(path: str) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in AutoModelForCausalLM.from_pretrained(path).state_dict().items()}


def assert_equal_update(w0: dict, w_trl: dict, w_ours: dict, tol: float = 1e-5) -> None:
    """The two runs' updates agree to ``tol`` relative, per tensor; a tensor TRL left alone stays alone."""
    moved = 0.0
    for k in w_trl:
        d_trl, d_ours = w_trl[k] - w0[k], w_ours[k] - w0[k]
        if d_trl.norm() == 0:
            assert d_ours.norm() == 0, k
            continue
        moved += float(d_trl.norm())
        assert rel(d_ours, d_trl) <= tol, k
    assert moved > 1e-4  # the step did something


# --------------------------------------------------------------------------------------------
# evaluation before training
# --------------------------------------------------------------------------------------------


def _eval_trainer(cls, tiny, out: Path, loss_type: str, **kw):
    path, tok, data = tiny
    cfg = EntflowGRPOConfig if cls is EntflowGRPOTrainer else GRPOConfig
    args = cfg(**trl_args(out, per_device_train_batch_size=4, per_device_eval_batch_size=4, loss_type=loss_type,
                                 **kw))  # fmt: skip
    return cls(model=path, reward_funcs=continuous_reward, args=args, train_dataset=data, eval_dataset=data,
               processing_class=tok)  # fmt: skip


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_evaluate_before_training_gives_trls_eval_loss(tiny, tmp_path, loss_type):
    """``evaluate()`` on a fresh trainer: transformers has not set ``current_gradient_accumulation_steps``
    yet; the evaluation accumulates nothing, and its loss is TRL's on the same generations."""
    ours = _eval_trainer(EntflowGRPOTrainer, tiny, tmp_path / "ef", loss_type).evaluate()
    theirs = _eval_trainer(GRPOTrainer, tiny, tmp_path / "trl", loss_type).evaluate()
    assert ours["eval_reward"] == pytest.approx(theirs["eval_reward"], rel=1e-6)  # same generations
    # grpo's sequence mean of -A·r at r = 1 is the group-mean advantage, 0 up to round-off; dapo weights
    # each completion by its length, so its loss is not 0
    assert ours["eval_loss"] == pytest.approx(theirs["eval_loss"], rel=1e-5, abs=1e-6)
    if loss_type == "dapo":
        assert abs(theirs["eval_loss"]) > 1e-3


def test_eval_on_start(tiny, tmp_path):
    """``eval_on_start=True`` evaluates before step 1, then trains: both logs equal TRL's."""
    kw = dict(eval_strategy="steps", eval_steps=1, eval_on_start=True, gradient_accumulation_steps=2)
    logs = {}
    for name, cls in (("ef", EntflowGRPOTrainer), ("trl", GRPOTrainer)):
        trainer = _eval_trainer(cls, tiny, tmp_path / name, "grpo", **kw)
        trainer.train()
        logs[name] = trainer.state.log_history
    evals = {k: [h["eval_loss"] for h in v if "eval_loss" in h] for k, v in logs.items()}
    assert len(evals["trl"]) == 2  # on start and after step 1
    assert evals["ef"] == pytest.approx(evals["trl"], rel=1e-5, abs=1e-6)
    assert "eval_loss" in logs["ef"][0] and logs["ef"][0]["step"] == 0  # before the first training step


# --------------------------------------------------------------------------------------------
# a plain trl.GRPOConfig
# --------------------------------------------------------------------------------------------


def test_plain_grpo_config_means_entflow_grpo(tiny, tmp_path):
    w0 = initial_weights(tiny[0])
    w_trl, c_trl, _ = two_pass_run(GRPOTrainer, GRPOConfig, tiny, tmp_path / "trl", continuous_reward)
    w_ef, c_ef, trainer = two_pass_run(EntflowGRPOTrainer, GRPOConfig, tiny, tmp_path / "ef", continuous_reward)
    assert isinstance(trainer.args, EntflowGRPOConfig) and trainer.entflow_method.name == "grpo"
    assert trainer.args.entflow_global_stats is True and trainer.args.entflow_method_params == {}
    assert not trainer._ef_trl_update  # entflow's own loss, which equals TRL's
    assert c_ef == c_trl
    assert_equal_update(w0, w_trl, w_ef, tol=1e-4)  # float32 round-off of two implementations
    assert any("flow/lambda_star" in h for h in trainer.state.log_history)  # entflow's metrics are there


# --------------------------------------------------------------------------------------------
# an environment that owns the reward, no reward_funcs
# --------------------------------------------------------------------------------------------


class CountingEnvironment:
    """An environment that scores each rollout with a fixed sequence of rewards (its own state)."""

    calls = 0

    def reset(self, **kwargs):
        self._steps = 0

    def add(self, step: int) -> int:
        """
        Add to the counter.

        Args:
            step: Value to add to the counter.

        Returns:
            The counter.
        """
        self._steps += step
        return self._steps

    def get_reward(self) -> float:
        CountingEnvironment.calls += 1
        return (0.37 * CountingEnvironment.calls) % 1.0 + self._steps


def _tool_tokenizer():
    """The byte-level tokenizer of tests/support/real_tiny.py with TRL's own Qwen3 chat template, which
    renders tool calls (TRL refuses environments otherwise)."""
    from support.real_tiny import build_tokenizer

    tok = build_tokenizer()
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    return tok


@pytest.mark.skipif(
    "environment_factory" not in GRPOTrainer.__init__.__code__.co_varnames, reason="TRL without environments"
)
def test_environment_reward_without_reward_funcs(tmp_path, monkeypatch):
    import transformers
    from datasets import Dataset
    from packaging.version import Version
    from transformers import LlamaConfig, LlamaForCausalLM

    if Version(transformers.__version__) < Version("5.13"):
        pytest.importorskip("jmespath")  # TRL parses tool calls with it on older transformers
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    tok = _tool_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id)  # fmt: skip
    torch.manual_seed(0)
    path = tmp_path / "model"
    LlamaForCausalLM(config).save_pretrained(path)
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"count to {i}"}] for i in range(8)]})
    w0 = initial_weights(str(path))
    runs = {}
    for name, cls in (("trl", GRPOTrainer), ("ef", EntflowGRPOTrainer)):
        CountingEnvironment.calls = 0
        args = GRPOConfig(**trl_args(tmp_path / name, per_device_train_batch_size=4, max_steps=2))
        trainer = cls(model=str(path), args=args, train_dataset=data, processing_class=tok,
                      environment_factory=CountingEnvironment)  # fmt: skip
        assert trainer.reward_func_names == ["CountingEnvironment"]
        trainer.train()
        assert CountingEnvironment.calls == 8  # every rollout (2 steps × 4) was scored by its environment
        runs[name] = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    assert_equal_update(w0, runs["trl"], runs["ef"], tol=1e-4)


def test_no_reward_source_is_still_refused(tiny, tmp_path):
    path, tok, data = tiny
    with pytest.raises(ValueError, match=r"[Rr]eward"):
        EntflowGRPOTrainer(model=path, args=GRPOConfig(**trl_args(tmp_path)), train_dataset=data, processing_class=tok)


# --------------------------------------------------------------------------------------------
# every TRL option with entflow_method="grpo" gives TRL's update
# --------------------------------------------------------------------------------------------


def _second_reward(completions, **kwargs):
    """A reward on another scale than continuous_reward (normalize_then_sum differs from the sum)."""
    return [10.0 * c.count("3") - 0.5 * len(c) for c in completions]


# name → (options, the options of the run they must differ from: the option acted)
OPTIONS = {
    "beta": (dict(beta=0.04), {}),
    # one optimizer step per generation batch: the reference synced after step 1 scores generation 2
    "beta-sync_ref_model": (
        dict(beta=0.5, sync_ref_model=True, ref_model_sync_steps=1, ref_model_mixup_alpha=0.5, num_iterations=1),
        dict(beta=0.5, num_iterations=1),
    ),
    # TRL 1.16 multiplies the KL by the ratio by default; without it, the k3 estimate alone
    "beta-no_bias_correction": (dict(beta=0.5, use_bias_correction_kl=False), dict(beta=0.5)),
    "entropy_coef": (dict(entropy_coef=0.05), {}),
    "use_adaptive_entropy": (
        dict(use_adaptive_entropy=True, entropy_coef=0.05, entropy_target=10.0, entropy_coef_delta=0.05),
        dict(entropy_coef=0.05),
    ),
    "cispo": (dict(loss_type="cispo", epsilon_high=1.05), dict(loss_type="dapo")),
    "sapo": (dict(loss_type="sapo", sapo_temperature_pos=0.8, sapo_temperature_neg=1.6), dict(loss_type="grpo")),
    "luspo": (dict(loss_type="luspo", importance_sampling_level="sequence"), dict(loss_type="grpo")),
    "vespo": (dict(loss_type="vespo", vespo_k_pos=1.5, vespo_lambda_pos=2.5), dict(loss_type="dapo")),
    "gspo": (dict(importance_sampling_level="sequence", epsilon=0.02), dict(epsilon=0.02)),
    "normalize_then_sum": (dict(multi_objective_aggregation="normalize_then_sum"), {}),
    "top_entropy_quantile": (dict(top_entropy_quantile=0.3), {}),
    "off_policy_mask_threshold": (dict(off_policy_mask_threshold=1e-3), {}),
    "delta-not-dual-clip": (dict(delta=1.1, epsilon_high=0.28), dict(epsilon_high=0.28)),
}
_NEEDS = {
    "use_adaptive_entropy": ("use_adaptive_entropy",),
    "entropy_coef": ("entropy_coef",),
    "vespo": ("vespo_k_pos",),
    "normalize_then_sum": ("multi_objective_aggregation",),
    "off_policy_mask_threshold": ("off_policy_mask_threshold",),
    "beta-no_bias_correction": ("use_bias_correction_kl",),
}


def _run(cls, cfg_cls, tiny, out, reward, **kw):
    """Train 2 optimizer steps of 2 micro-batches, two passes over each generation batch (ratios move
    off 1 on the second pass), ``kw`` overriding; (final weights, logged completions, trainer)."""
    path, tok, data = tiny
    sched = dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=2, num_iterations=2,
                 learning_rate=2.0)  # fmt: skip
    args = cfg_cls(**trl_args(out, **{**sched, **kw}))
    trainer = cls(model=path, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok)
    trainer.train()
    w = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return w, list(trainer._logs["completion"]), trainer


def _rewards(name: str) -> list:
    return [continuous_reward, _second_reward] if name == "normalize_then_sum" else continuous_reward


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=needs_fields(*_NEEDS.get(n, ()))) for n in OPTIONS], ids=list(OPTIONS)
)
@pytest.mark.parametrize("config", ["plain", "entflow"])
def test_trl_option_with_grpo_gives_trls_update(tiny, tmp_path, name, config):
    """Ours with the option (in a plain GRPOConfig, or an EntflowGRPOConfig with entflow_method="grpo")
    updates the weights as TRL's own GRPOTrainer does, to 1e-5 relative; TRL without the option ends
    elsewhere, so the comparison can fail."""
    kw, without = OPTIONS[name]
    reward = _rewards(name)
    w0 = initial_weights(tiny[0])
    w_trl, c_trl, _ = _run(GRPOTrainer, GRPOConfig, tiny, tmp_path / "trl", reward, **kw)
    cfg = GRPOConfig if config == "plain" else EntflowGRPOConfig
    w_ef, c_ef, trainer = _run(EntflowGRPOTrainer, cfg, tiny, tmp_path / "ef", reward, **kw)
    assert trainer._ef_trl_update and trainer.entflow_method.name == "grpo"
    assert c_ef == c_trl
    assert_equal_update(w0, w_trl, w_ef, tol=1e-5)
    if config == "plain":
        w_without, _, _ = _run(GRPOTrainer, GRPOConfig, tiny, tmp_path / "without", reward, **without)
        assert max(rel(w_without[k] - w0[k], w_trl[k] - w0[k]) for k in w_trl) > 1e-4


# --------------------------------------------------------------------------------------------
# with another method, TRL's masks and entropy bonus compose as TRL applies them to its own loss
# --------------------------------------------------------------------------------------------

# clip_higher at (0.2, 0.2) is PPO-clip with TRL's bounds under another name: entflow's own loss runs,
# so the run equals TRL's exactly when the adapter adds TRL's option as TRL adds it to its loss
PPO_CLIP = dict(entflow_method="clip_higher", entflow_method_params={"clip_low": 0.2, "clip_high": 0.2})
COMPOSED = ["entropy_coef", "use_adaptive_entropy", "top_entropy_quantile", "off_policy_mask_threshold"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=needs_fields(*_NEEDS.get(n, ()))) for n in [*COMPOSED, "all"]])
def test_trl_option_composes_with_another_method(tiny, tmp_path, name):
    kw = {k: v for n in COMPOSED for k, v in OPTIONS[n][0].items()} if name == "all" else OPTIONS[name][0]
    w0 = initial_weights(tiny[0])
    w_trl, c_trl, _ = _run(GRPOTrainer, GRPOConfig, tiny, tmp_path / "trl", continuous_reward, **kw)
    w_ef, c_ef, trainer = _run(
        EntflowGRPOTrainer, EntflowGRPOConfig, tiny, tmp_path / "ef", continuous_reward, **kw, **PPO_CLIP
    )
    assert not trainer._ef_trl_update  # entflow's loss, TRL's option added
    assert c_ef == c_trl
    assert_equal_update(w0, w_trl, w_ef, tol=1e-4)  # float32 round-off of two implementations
    if "entropy_coef" in kw:  # TRL's coefficient is logged, and moved when adaptive
        coefs = [h["entropy_coef"] for h in trainer.state.log_history if "entropy_coef" in h]
        assert coefs[0] == pytest.approx(0.1 if kw.get("use_adaptive_entropy") else 0.05)


def test_entropy_bonus_composes_with_clip_cov(tiny, tmp_path):
    """TRL's entropy bonus with entflow's clip_cov: both act (the bonus changes the run, clip_cov selects)."""
    method = dict(entflow_method="clip_cov", entflow_method_params={"ratio": 0.2, "cov_low": -1e6, "cov_high": 1e6})
    runs = {}
    for name, kw in (("bonus", dict(entropy_coef=0.5)), ("plain", {})):
        w, _, trainer = _run(EntflowGRPOTrainer, EntflowGRPOConfig, tiny, tmp_path / name, continuous_reward,
                             **kw, **method)  # fmt: skip
        assert any(h.get("clip_cov/n_selected", 0) > 0 for h in trainer.state.log_history)
        runs[name] = w
    assert max(rel(runs["bonus"][k], runs["plain"][k]) for k in runs["plain"]) > 1e-5


# --------------------------------------------------------------------------------------------
# global statistics over what the optimizer step sees
# --------------------------------------------------------------------------------------------


SCHEDULES = {  # gradient accumulation 3 against generation batches of 2, 4 and 2 × 2 micro-batches
    "ga3-spg2": dict(gradient_accumulation_steps=3, steps_per_generation=2, num_iterations=1),
    "ga3-spg4": dict(gradient_accumulation_steps=3, steps_per_generation=4, num_iterations=1),
    "ga3-spg2-iter2": dict(gradient_accumulation_steps=3, steps_per_generation=2, num_iterations=2),
}


@pytest.mark.parametrize("sched", list(SCHEDULES))
def test_unaligned_generation_batches_are_accepted(tiny, tmp_path, sched):
    """Optimizer steps whose micro-batches span two generation batches: a method with batch statistics
    is accepted and trains with them (per segment); grpo, which has none, makes TRL's update."""
    kw = SCHEDULES[sched]
    w0 = initial_weights(tiny[0])
    w_trl, c_trl, _ = _run(GRPOTrainer, GRPOConfig, tiny, tmp_path / "trl", continuous_reward, **kw)
    w_ef, c_ef, trainer = _run(EntflowGRPOTrainer, GRPOConfig, tiny, tmp_path / "ef", continuous_reward, **kw)
    assert c_ef == c_trl
    assert_equal_update(w0, w_trl, w_ef, tol=1e-4)  # float32 round-off of two implementations

    method = dict(
        entflow_method="steer+clip_cov", entflow_method_params={"ratio": 0.2, "cov_low": -1e6, "cov_high": 1e6}
    )
    w_m, _, trainer = _run(EntflowGRPOTrainer, EntflowGRPOConfig, tiny, tmp_path / "m", continuous_reward,
                           **kw, **method)  # fmt: skip
    assert trainer._ef_global  # global statistics on, not refused
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 2 and all(h["clip_cov/n_selected"] > 0 for h in logged)
    assert max(rel(w_m[k] - w0[k], w_trl[k] - w0[k]) for k in w0 if (w_trl[k] - w0[k]).norm() > 0) > 1e-4


@pytest.mark.parametrize(
    ("ga", "every", "expected"),
    [
        # aligned: every segment is the whole optimizer step
        (2, 4, [range(0, 2), range(0, 2), range(2, 4), range(2, 4)]),
        # ga 3, a generation every 2 micro-steps: step 0 = {0, 1 | 2}, step 1 = {3 | 4, 5}
        (3, 2, [range(0, 2), range(0, 2), range(2, 3), range(3, 4), range(4, 6), range(4, 6)]),
        # ga 3, a generation every 4: step 0 = {0, 1, 2}, step 1 = {3 | 4, 5}, step 2 = {6, 7 | 8}
        (3, 4, [range(0, 3)] * 3 + [range(3, 4), range(4, 6), range(4, 6), range(6, 8), range(6, 8), range(8, 9)]),
        # ga 4, a generation every 2: two generation batches per step
        (4, 2, [range(0, 2), range(0, 2), range(2, 4), range(2, 4)]),
    ],
)
def test_step_segment(ga, every, expected):
    from entflow.integrations.trl.loss import step_segment

    got = [step_segment(s, ga, every) for s in range(len(expected))]
    assert got == expected
    for s, seg in enumerate(got):  # each segment holds its micro-step, inside one optimizer step and one generation
        assert s in seg and len({x // ga for x in seg}) == 1 and len({x // every for x in seg}) == 1
