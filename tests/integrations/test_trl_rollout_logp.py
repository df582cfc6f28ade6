"""The TRL adapter gives the mismatch corrections the sampler's log-probs (``rollout_logp``).

TRL 1.16 keeps the log-probs its sampler reported for the drawn tokens as
``sampling_per_token_logps`` in the batch dict — vLLM's with ``use_vllm``, or a ``rollout_func``'s
``logprobs``. vLLM is not on a CPU, so the test engine is a ``rollout_func`` that samples from a
perturbed law (the lab's ``SamplingMismatch``: temperature × 1.5) and reports that law's log-probs;
the loss of ``grpo+icepop`` in one training step then equals ``entflow.policy_loss`` on an
independent forward of the captured micro-batch with those log-probs as ``rollout_logp`` (and not
grpo's). Without a source of sampler log-probs a correction is refused naming the field; with vLLM,
TRL's own importance-sampling ratio must be off (it would correct twice).
"""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import torch

import entflow as ef
from entflow.errors import ConfigError, MissingInputError
from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer
from entflow.integrations.trl.compat import sampling_logps
from entflow.trainer.rollout import SamplingMismatch, engine_logp, generate
from support.trl_capture import CapturingTrainer, captured_stats, trl_args
from support.trl_tiny import continuous_reward

ENGINE = SamplingMismatch("temperature", 1.5)
PARAMS = {"lower": 0.9, "upper": 1.1}


def perturbed_engine(tok, reported: list):
    """A ``rollout_func`` drawing each completion from the policy's perturbed law and reporting that
    law's log-probs of the drawn tokens (as vLLM reports its own); ``reported`` keeps them."""

    def rollout_func(prompts, trainer):
        model = trainer.accelerator.unwrap_model(trainer.model)
        training = model.training
        model.eval()
        g = generate(
            model, tok, prompts, trainer.max_completion_length, temperature=trainer.temperature, mismatch=ENGINE,
            output_logits=True,
        )  # fmt: skip
        model.train(training)
        lp = engine_logp(g.logits, g.response_ids, trainer.temperature, ENGINE)
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
        for i in range(len(prompts)):
            n = int(g.mask[i].sum())
            out["prompt_ids"].append(g.prompt_ids[i][g.prompt_mask[i].bool()].tolist())
            out["completion_ids"].append(g.response_ids[i, :n].tolist())
            out["logprobs"].append(lp[i, :n].tolist())
        reported.append(out["logprobs"])
        return out

    return rollout_func


def test_the_samplers_logprobs_reach_the_correction_as_rollout_logp(tiny, tmp_path):
    path, tok, data = tiny
    reported: list = []
    args = EntflowGRPOConfig(
        **trl_args(tmp_path, entflow_method="grpo+icepop", entflow_method_params=PARAMS, loss_type="grpo")
    )
    trainer = CapturingTrainer(
        model=path, reward_funcs=continuous_reward, args=args, train_dataset=data, processing_class=tok,
        rollout_func=perturbed_engine(tok, reported),
    )  # fmt: skip
    trainer.train()
    x = trainer.captured_inputs
    mask = x["completion_mask"].bool()
    sampled = x["sampling_per_token_logps"]
    flat = torch.tensor([v for row in reported[-1] for v in row])  # what the engine reported (TRL shuffles rows)
    assert torch.allclose(sampled[mask].sort().values, flat.sort().values, atol=1e-6)
    st = captured_stats(trainer, path, trainer.temperature)  # an independent forward of the captured weights
    batch = ef.TokenBatch(
        st.logp, st.logp.detach(), x["advantages"], mask, old_entropy=st.entropy, rollout_logp=sampled
    )  # TRL kept no old log-probs: no optimizer step since generation
    spec = ef.LossSpec(agg="seq-mean-token-mean")  # loss_type="grpo", one micro-batch per step
    want = ef.policy_loss(batch, ef.get_method("grpo+icepop", **PARAMS), spec)
    assert torch.allclose(trainer.captured_loss, want.loss.detach(), rtol=1e-5, atol=1e-7)
    assert want.metrics["icepop/oob_ratio"] > 0  # the band removed tokens
    grpo = ef.policy_loss(batch, "grpo", spec).loss.detach()
    assert not torch.allclose(trainer.captured_loss, grpo, rtol=1e-5, atol=1e-7)  # so the correction acted


def test_a_token_the_sampler_could_not_score_shows_no_mismatch():
    old = torch.tensor([[-1.0, -2.0, -3.0]])
    inputs = {"sampling_per_token_logps": torch.tensor([[-1.5, float("nan"), -2.0, 0.0]])}  # padded one wider
    assert torch.equal(sampling_logps(inputs, old), torch.tensor([[-1.5, -2.0, -2.0]]))
    assert sampling_logps({}, old) is None


def test_a_correction_without_sampler_logprobs_names_the_field(tiny, tmp_path):
    path, tok, data = tiny
    args = EntflowGRPOConfig(**trl_args(tmp_path, entflow_method="tis"))
    with pytest.raises(MissingInputError, match="rollout_logp") as e:
        EntflowGRPOTrainer(
            model=path, reward_funcs=continuous_reward, args=args, train_dataset=data, processing_class=tok
        )
    assert e.value.field == "rollout_logp"


def test_trls_own_vllm_ratio_is_refused_next_to_a_correction(tmp_path):
    with pytest.raises(ConfigError) as e:
        EntflowGRPOConfig(**trl_args(tmp_path, entflow_method="m2po", use_vllm=True))
    assert e.value.key == "vllm_importance_sampling_correction"
    args = EntflowGRPOConfig(
        **trl_args(tmp_path, entflow_method="m2po", use_vllm=True, vllm_importance_sampling_correction=False)
    )
    assert args.entflow_method == "m2po"
