"""The methods whose needs go beyond TRL's defaults, in ``EntflowGRPOTrainer``:

- ``archer`` reads reference log-probs with its own KL: the adapter sets TRL's ``beta`` so that
  TRL loads the reference model, and the loss is entflow's ``policy_loss`` (TRL's KL is not added);
- ``siren`` with top_p < 1 differentiates the top-p entropy, which needs logits TRL's fused head
  does not give the loss: refused at config time, naming ``top_p`` (top_p = 1 runs);
- ``aepo`` needs extra samples at its own temperature, which TRL does not draw: refused.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("trl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoModelForCausalLM

import entflow as ef
from entflow.errors import ConfigError
from entflow.integrations.trl import EntflowGRPOConfig
from entflow.integrations.trl.config import REFERENCE_ONLY_BETA
from support.trl_capture import CapturingTrainer, completion_logits, trl_args
from support.trl_tiny import continuous_reward

reward = continuous_reward


def args_for(out, **kw) -> dict:
    return trl_args(out, **{"max_steps": 2, "loss_type": "dapo", **kw})


def test_archer_trains_in_trl_with_the_reference_and_entflows_loss(tiny, tmp_path):
    path, tok, data = tiny
    params = {"kl_coef": 0.05, "high_kl_coef": 0.01}  # large enough that the KL shows in the loss
    args = EntflowGRPOConfig(**args_for(tmp_path), entflow_method="archer", entflow_method_params=params)
    assert args.beta == REFERENCE_ONLY_BETA  # TRL loads the reference model and scores the completions
    trainer = CapturingTrainer(model=path, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok)
    assert trainer.ref_model is not None
    trainer.train()

    logged = [h for h in trainer.state.log_history if "archer/high_frac" in h]
    assert len(logged) == 2 and all("archer/kl" in h for h in logged)
    assert "kl" not in trainer._metrics["train"]  # TRL's own KL metric: TRL's KL term never ran

    # second step: the policy has moved away from the reference (the initial weights)
    x = trainer.captured_inputs
    model = AutoModelForCausalLM.from_pretrained(path)
    ref = AutoModelForCausalLM.from_pretrained(path)
    model.load_state_dict(trainer.captured_weights)
    with torch.no_grad():
        ref_logp = ef.token_stats(completion_logits(ref, x), x["completion_ids"], stats=("logp",)).logp
    mask = x["completion_mask"]
    m = mask.bool()
    err = float((x["ref_per_token_logps"] - ref_logp)[m].abs().max())
    assert err < 1e-5, err
    stats = ef.token_stats(completion_logits(model, x), x["completion_ids"], stats=("logp", "entropy"))
    assert float(((stats.logp.detach() - ref_logp).abs() * mask).max()) > 1e-3  # a KL to pay
    old = x.get("old_per_token_logps")
    batch = ef.TokenBatch(
        stats.logp,
        stats.logp.detach() if old is None else old,
        x["advantages"],
        mask,
        entropy=stats.entropy,
        old_entropy=stats.entropy.detach(),  # on-policy micro-batch: the rollout's entropy
        ref_logp=ref_logp,
    )
    out = ef.policy_loss(batch, ef.get_method("archer", **params), ef.LossSpec(agg="token-mean"))
    assert float(trainer.captured_loss) == pytest.approx(float(out.loss.detach()), rel=1e-5, abs=1e-7)
    assert float(out.metrics["archer/kl_loss"]) > 1e-6  # the KL is in the loss, once (entflow's)
    assert logged[-1]["archer/kl"] == pytest.approx(float(out.metrics["archer/kl"]), rel=1e-4)


@pytest.mark.parametrize("method", ["siren", "clip_higher+siren"])
def test_siren_with_a_top_p_nucleus_is_refused_naming_top_p(tmp_path, method):
    with pytest.raises(ConfigError, match=r"top_p = 0\.8.*fused head.*top_p = 1"):
        EntflowGRPOConfig(**args_for(tmp_path), entflow_method=method)
    args = EntflowGRPOConfig(**args_for(tmp_path), entflow_method=method, entflow_method_params={"top_p": 1.0})
    assert args.entflow_method == method


@pytest.mark.parametrize(
    ("method", "why"),
    [
        ("aepo", r"own temperature"),  # its temperature samples
        ("remax", r"remax.*greedy response"),  # its greedy rollout
        ("aer", r"aer reads group_index in the loss"),  # its per-group loss
        ("simko", r"simko reads the log-probs of the top-3 candidates"),  # its top-k candidates
    ],
)
def test_a_method_that_needs_what_trl_does_not_give_is_refused_naming_it(tmp_path, method, why):
    with pytest.raises(ConfigError, match=rf"entflow_method.*{why}"):
        EntflowGRPOConfig(**args_for(tmp_path), entflow_method=method)


def test_clipb_on_policy_reads_the_losss_own_entropy_without_an_extra_forward(tiny, tmp_path):
    """Clip_B reads the rollout's H only in its batch statistics, not in its shaping: trained fully
    on-policy in one process (TRL keeps no old log-probs), the adapter runs no extra rollout forward,
    and the loss equals ``policy_loss`` with the micro-batch's own (detached) entropy as the rollout's."""
    path, tok, data = tiny
    args = EntflowGRPOConfig(
        **args_for(tmp_path, max_steps=1), entflow_method="clipb", entflow_method_params={"mu": 0.5}
    )

    class Counting(CapturingTrainer):
        extra_forwards = 0

        def _ef_rollout_logps(self, out):
            type(self).extra_forwards += 1
            return super()._ef_rollout_logps(out)

    trainer = Counting(model=path, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok)
    trainer.train()
    assert Counting.extra_forwards == 0
    x = trainer.captured_inputs
    assert x.get("old_per_token_logps") is None  # on-policy: TRL computed no old log-probs
    model = AutoModelForCausalLM.from_pretrained(path)
    model.load_state_dict(trainer.captured_weights)
    stats = ef.token_stats(completion_logits(model, x), x["completion_ids"], stats=("logp", "entropy"))
    mask = x["completion_mask"]
    batch = ef.TokenBatch(
        stats.logp,
        stats.logp.detach(),
        x["advantages"],
        mask,
        entropy=stats.entropy,
        old_entropy=stats.entropy.detach(),
    )
    method = ef.get_method("clipb", mu=0.5)
    out = ef.policy_loss(batch, method, ef.LossSpec(agg="token-mean"))
    assert out.metrics["clipb/dropped_frac"] > 0  # μ = 0.5 drops tokens: the statistics mattered
    assert float(trainer.captured_loss) == pytest.approx(float(out.loss.detach()), rel=1e-5, abs=1e-7)
