"""A scheduled entropy bonus inside ``EntflowGRPOTrainer``: the schedule travels in
``entflow_method_params`` as every method parameter does, and the loss TRL optimises at each
generation step is ``ef.policy_loss`` with a static bonus at that step's coefficient c(t), t the
0-based generation step, recomputed from an independent forward of the weights the step saw."""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("trl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoModelForCausalLM

import entflow as ef
from entflow.errors import ConfigError
from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer
from support.trl_capture import completion_logits, trl_args
from support.trl_tiny import continuous_reward

# linear from 0.3 to 0.1 over 2 generation steps: c(0) = 0.3, c(1) = 0.2 (then 0.1)
SCHEDULE = {"c": 0.3, "schedule": "linear", "c_end": 0.1, "steps": 2}
COEF = [0.3, 0.2]


class RecordingTrainer(EntflowGRPOTrainer):
    """Keeps every micro-batch: its inputs, the weights it saw, its loss and the generation step."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        weights = {k: v.detach().clone() for k, v in self.accelerator.unwrap_model(model).state_dict().items()}
        record = {
            "inputs": {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in inputs.items()},
            "weights": weights,
            "gen_step": self._ef_gen_step,
        }
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        record["loss"] = float(loss.detach())
        self.records = [*getattr(self, "records", []), record]
        return loss


def static_bonus_loss(path: str, record: dict, c: float) -> float:
    """``ef.policy_loss`` with ``entropy_bonus(c)`` on the recorded micro-batch, from an independent
    forward (a fresh model holding the recorded weights, entflow's ``token_stats``)."""
    x = record["inputs"]
    model = AutoModelForCausalLM.from_pretrained(path)
    model.load_state_dict(record["weights"])
    stats = ef.token_stats(completion_logits(model, x), x["completion_ids"])
    batch = ef.TokenBatch(stats.logp, stats.logp.detach(), x["advantages"], x["completion_mask"], entropy=stats.entropy)
    # GA = 1, one process, dapo: TRL's normaliser is the micro-batch's token count → the token mean
    return float(
        ef.policy_loss(batch, ef.get_method("entropy_bonus", c=c), ef.LossSpec(agg="token-mean")).loss.detach()
    )


def test_trl_loss_uses_the_scheduled_coefficient_at_each_step(tiny, tmp_path):
    path, tok, data = tiny
    args = EntflowGRPOConfig(
        **trl_args(tmp_path, max_steps=2, loss_type="dapo", learning_rate=0.05),
        entflow_method="entropy_bonus",
        entflow_method_params=SCHEDULE,
    )
    trainer = RecordingTrainer(
        model=path, reward_funcs=continuous_reward, args=args, train_dataset=data, processing_class=tok
    )
    trainer.train()
    assert [r["gen_step"] for r in trainer.records] == [0, 1]  # one generation per optimizer step
    logged = [h["entropy_bonus/coef"] for h in trainer.state.log_history if "entropy_bonus/coef" in h]
    assert logged == pytest.approx(COEF, rel=1e-12)
    for t, record in enumerate(trainer.records):
        expected = static_bonus_loss(path, record, COEF[t])
        assert record["loss"] == pytest.approx(expected, rel=1e-5, abs=1e-6), t
        other = static_bonus_loss(path, record, COEF[1 - t])  # the other step's coefficient: clearly not it
        assert abs(record["loss"] - other) > 1e-2, t
    assert trainer.entflow_state_dict()["method_state"] == {}  # c(t) is a function of the step: no state


def test_a_bad_schedule_is_refused_by_the_config_naming_the_parameter(tmp_path):
    with pytest.raises(ConfigError) as e:
        EntflowGRPOConfig(
            **trl_args(tmp_path),
            entflow_method="entropy_bonus",
            entflow_method_params='{"schedule": "cosine", "c_end": 0.0, "steps": 0}',  # JSON, as on a command line
        )
    assert e.value.key == "entflow_method_params" and "'steps'" in str(e.value) and "got 0" in str(e.value)
