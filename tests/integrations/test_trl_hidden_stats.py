"""The TRL adapter's tabular rollout pass from hidden states: in a real
``trl.GRPOTrainer`` step it equals the full-logits pass and the LM head never produces logits;
heads that are not plain linear layers fall back to full logits with a warning naming the reason.
"""

from __future__ import annotations

import contextlib
import os
import warnings

import pytest
import torch

pytest.importorskip("trl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from datasets import Dataset

import entflow as ef
from entflow.core.lm_head import hidden_head_reason
from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer
from entflow.integrations.trl.loss import (
    rollout_token_stats,
    rollout_token_stats_from_hidden,
    rollout_token_stats_from_logits,
)
from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer
from support.soft_capped import tiny_gemma2

TOKENS = "0123456789+-*() >:="
FIELDS = ("logp", "entropy", "sum_p2", "sum_p2_logp")


def _tiny(tmp_path, tie: bool):
    tok = build_tokenizer(TOKENS)
    cfg = PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, tie_embeddings=tie)
    model = build_policy(tok, cfg, seed=0)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    return str(tmp_path / "model"), tok


def _reward(completions, **kwargs):
    return [(c.count("1") + 0.5 * c.count("2") + 0.1 * len(c)) / (len(c) + 1) for c in completions]


class _Comparing(EntflowGRPOTrainer):
    """Records the lm_head calls of the adapter's rollout pass, and the full-logits pass on the
    same batch and weights (the path without hidden-state statistics) next to it."""

    def _ef_rollout_token_stats(self, out):
        head = self.model.get_output_embeddings()
        calls: list[tuple[int, ...]] = []
        hook = head.register_forward_hook(lambda mod, args, output: calls.append(tuple(output.shape)))
        try:
            self.hidden_stats = super()._ef_rollout_token_stats(out)
            self.head_calls_hidden = list(calls)
            calls.clear()
            with torch.no_grad():
                self.logits_stats = rollout_token_stats_from_logits(
                    self.model, out, self.temperature, self._ef_batch_size(), None, self.accelerator.autocast
                )
            self.head_calls_logits = list(calls)
        finally:
            hook.remove()
        return self.hidden_stats


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_grpo_step_tabular_from_hidden_equals_full_logits(tmp_path, tie):
    path, tok = _tiny(tmp_path, tie)
    data = Dataset.from_dict({"prompt": [f"{i} {i + 2}>{3 * i + 1}:" for i in range(4)]})
    args = EntflowGRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=1,
        learning_rate=0.1,
        seed=0,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        bf16=False,
        temperature=0.7,
        entflow_method="clip_higher+steer",
        entflow_method_params={"lambda_min": 0.5, "estimator": "tabular"},
        entflow_chunk_size=3,  # the full-logits path's softmax rows (the hidden path uses its own tiles)
    )
    trainer = _Comparing(model=path, reward_funcs=_reward, args=args, train_dataset=data, processing_class=tok)
    assert hidden_head_reason(trainer.model) is None
    assert (trainer.model.get_output_embeddings().weight is trainer.model.get_input_embeddings().weight) == tie
    trainer.train()
    assert trainer.head_calls_hidden == []  # the hidden-state pass never asked the head for logits
    assert trainer.head_calls_logits and all(s[-1] == len(tok) for s in trainer.head_calls_logits)  # the hook sees them
    for f in FIELDS:
        a, b = getattr(trainer.hidden_stats, f), getattr(trainer.logits_stats, f)
        assert a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-5), f
    assert float(trainer.hidden_stats.sum_p2.max()) < 1.0  # a real distribution, not one-hot


# --------------------------------------------------------------------------------------------
# heads that are not plain linear layers
# --------------------------------------------------------------------------------------------


def _gemma2(softcap: float | None):
    return tiny_gemma2(softcap, head_scale=40.0)  # logits of tens: the cap c·tanh(z/c) acts


def _batch(vocab: int, n: int = 3, p: int = 4, t: int = 5) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    prompt_mask = torch.ones(n, p, dtype=torch.long)
    prompt_mask[0, :2] = 0  # left padding
    return {
        "prompt_ids": torch.randint(1, vocab, (n, p), generator=g),
        "prompt_mask": prompt_mask,
        "completion_ids": torch.randint(1, vocab, (n, t), generator=g),
        "completion_mask": torch.ones(n, t, dtype=torch.long),
    }


def test_softcapped_head_falls_back_to_full_logits_with_a_warning():
    model = _gemma2(softcap=5.0)
    x = _batch(40)
    with pytest.warns(UserWarning, match="final_logit_softcapping = 5.0"):
        stats = rollout_token_stats(model, x, 0.7, 2, None, contextlib.nullcontext)
    ids = torch.cat([x["prompt_ids"], x["completion_ids"]], 1)
    attn = torch.cat([x["prompt_mask"], x["completion_mask"]], 1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn).logits[:, -6:-1]  # capped by the model
        ref = ef.token_stats(logits, x["completion_ids"], temperature=0.7)
        wrong = rollout_token_stats_from_hidden(model, x, 0.7, 2, contextlib.nullcontext)
    for f in FIELDS:
        assert torch.allclose(getattr(stats, f), getattr(ref, f), rtol=1e-5, atol=1e-6), f
    # the fallback is needed: the uncapped hidden-state law is another law here
    assert float((wrong.entropy - ref.entropy).abs().max()) > 1e-2


def test_plain_gemma2_head_uses_hidden_states_and_matches_logits():
    model = _gemma2(softcap=None)
    x = _batch(40)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning: the plain head takes the hidden path
        stats = rollout_token_stats(model, x, 1.3, 2, 4, contextlib.nullcontext)
        ref = rollout_token_stats_from_logits(model, x, 1.3, 2, None, contextlib.nullcontext)
    for f in FIELDS:
        assert torch.allclose(getattr(stats, f), getattr(ref, f), rtol=1e-5, atol=1e-5), f


@pytest.mark.parametrize(
    "field, value, ok",
    [("logit_scale", 0.5, False), ("logit_scale", 1.0, True), ("logits_scaling", 4.0, False)],
)
def test_hidden_head_reason_names_logit_scales(field, value, ok):
    model = _gemma2(softcap=None)
    setattr(model.config, field, value)
    reason = hidden_head_reason(model)
    assert (reason is None) == ok
    if not ok:
        assert f"config.{field} = {value}" in reason


def test_hidden_head_reason_names_a_non_linear_head():
    model = _gemma2(softcap=None)
    model.lm_head = torch.nn.Sequential(model.lm_head)
    assert "Sequential, not a plain nn.Linear" in hidden_head_reason(model)
