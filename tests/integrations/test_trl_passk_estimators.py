"""verl's advantage estimators and the pass@k objectives inside ``EntflowGRPOTrainer`` (TRL 1.16).

One step with each method on the tiny Llama (tests/support/trl_tiny.py). The advantages TRL's
batch carries must equal ``ef.compute_advantages`` on independently rebuilt inputs (rewards by
completion text, groups = identical prompts, Σπ² and the entropy from a plain transformers
forward of the captured weights), and the loss TRL backpropagates must equal ``ef.policy_loss``
on those tensors (GA = 1, one process, ``dapo``: the token mean). Tolerances as the adapter's
other equality tests: 1e-5 relative on advantages, 1e-6 on the loss. The methods TRL cannot serve
(remax, aer, simko) are refused in tests/integrations/test_trl_method_needs.py.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("trl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoModelForCausalLM

import entflow as ef
from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer
from support.trl_tiny import continuous_reward, save_tiny_llama


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny_llama_passk"))


class _Capturing(EntflowGRPOTrainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        self.captured_inputs = {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in inputs.items()}
        self.captured_weights = {
            k: v.detach().clone() for k, v in self.accelerator.unwrap_model(model).state_dict().items()
        }
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self.captured_loss = loss.detach().clone()
        return loss


METHODS = [
    ("rloo", {}),
    ("grpo_passk", {}),
    ("optimal_token_baseline", {}),
    ("passk_training", {"k": 2}),
    ("pkpo", {"k": 3}),
    ("erc", {}),
]


@pytest.mark.parametrize(("method", "params"), METHODS, ids=[m for m, _ in METHODS])
def test_method_in_trl_equals_compute_advantages_and_policy_loss(tiny, tmp_path, method, params):
    path, tok, data = tiny
    args = EntflowGRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, max_completion_length=6,
        gradient_accumulation_steps=1, max_steps=1, optim="sgd", learning_rate=0.5, lr_scheduler_type="constant",
        max_grad_norm=0.0, seed=0, use_cpu=True, report_to="none", logging_steps=1, save_strategy="no",
        disable_tqdm=True, bf16=False, loss_type="dapo", temperature=0.7,
        entflow_method=method, entflow_method_params=params,
    )  # fmt: skip
    seen: dict[str, float] = {}

    def reward(completions, **kwargs):
        r = continuous_reward(completions)
        seen.update(zip(completions, r, strict=True))
        return r

    trainer = _Capturing(model=path, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok)
    trainer.train()
    x = trainer.captured_inputs
    ids = torch.cat([x["prompt_ids"], x["completion_ids"]], 1)
    attn = torch.cat([x["prompt_mask"], x["completion_mask"]], 1)
    T = x["completion_ids"].shape[1]
    model = AutoModelForCausalLM.from_pretrained(path)
    model.load_state_dict(trainer.captured_weights)  # one step, one micro-batch: the rollout policy
    logits = model(input_ids=ids, attention_mask=attn).logits[:, -T - 1 : -1]
    stats = ef.token_stats(logits, x["completion_ids"], temperature=0.7)
    mask = x["completion_mask"]
    texts = tok.batch_decode(x["completion_ids"], skip_special_tokens=True)
    rewards = torch.tensor([seen[t] for t in texts])
    _, group = torch.unique(x["prompt_ids"], dim=0, return_inverse=True)
    m = ef.get_method(method, **params)
    H = stats.entropy.detach()
    probe = ef.TokenBatch(
        stats.logp.detach(), stats.logp.detach(), None, mask, old_entropy=H, sum_p2=stats.sum_p2.detach(),
        rewards=rewards, group_index=group,
    )  # fmt: skip
    adv = ef.compute_advantages(probe, m, scale="group", eps=1e-4)
    assert float(adv.abs().max()) > 0  # the batch has signal
    assert torch.allclose(adv, x["advantages"], rtol=1e-5, atol=1e-6)
    batch = ef.TokenBatch(stats.logp, stats.logp.detach(), adv, mask, entropy=stats.entropy, old_entropy=H)
    out = ef.policy_loss(batch, m, ef.LossSpec(agg="token-mean"))
    assert float(trainer.captured_loss) == pytest.approx(float(out.loss.detach()), rel=1e-6, abs=1e-7)
