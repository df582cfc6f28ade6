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

import entflow as ef
from entflow.integrations.trl import EntflowGRPOConfig
from support.trl_capture import CapturingTrainer, captured_stats, recording, rewards_and_groups, trl_args
from support.trl_tiny import continuous_reward

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
        **trl_args(tmp_path, loss_type="dapo", temperature=0.7), entflow_method=method, entflow_method_params=params
    )
    seen: dict[str, float] = {}
    reward = recording(continuous_reward, seen)
    trainer = CapturingTrainer(model=path, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok)
    trainer.train()
    x = trainer.captured_inputs
    stats = captured_stats(trainer, path, temperature=0.7)  # one step, one micro-batch: the rollout policy
    mask = x["completion_mask"]
    rewards, group = rewards_and_groups(trainer, tok, seen)
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
