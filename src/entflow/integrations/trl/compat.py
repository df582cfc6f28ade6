"""What the adapter knows about TRL's internals (written against TRL 1.16): the private methods it
overrides or calls and the attributes it reads (:data:`TRL_HOOKS`, :data:`TRL_ATTRIBUTES`, checked when
the trainer is built), the keys of the batch dict ``GRPOTrainer._generate_and_score_completions``
returns, TRL's rule for when it computes old log-probs at generation time, and its no-grad forward
helper. A TRL upgrade that changes these changes this file (and the overridden hooks in
``trainer.py``), nothing else.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from trl.models.utils import disable_gradient_checkpointing

from entflow.integrations.hooks import Hook, check_attributes, check_hooks

# GRPOTrainer's private methods (some from transformers' Trainer) that EntflowGRPOTrainer overrides,
# with the arguments it passes to TRL's own version, and the methods it only calls
TRL_HOOKS = (
    Hook("_calculate_rewards", ("inputs", "prompts", "completions", "completion_ids_list")),
    Hook(
        "_get_per_token_logps_and_entropies",
        ("model", "input_ids", "attention_mask", "logits_to_keep"),
        ("batch_size", "compute_entropy", "compute_aux_loss"),
    ),
    Hook("_generate_and_score_completions", ("inputs",)),
    Hook("_compute_loss", ("model", "inputs")),
    Hook("_save_checkpoint", ("model", "trial")),
    Hook("_load_optimizer_and_scheduler", ("checkpoint",)),
    Hook("_get_output_dir", (), ("trial",), overridden=False),
    Hook(
        "get_off_policy_mask",
        (),
        ("advantages", "per_token_logps", "sampling_per_token_logps", "mask", "off_policy_threshold"),
        overridden=False,
    ),
    Hook("get_high_entropy_mask", ("entropies", "mask", "threshold"), overridden=False),
)
# what a built GRPOTrainer holds that the adapter reads (and, for the adaptive entropy bonus, writes)
TRL_ATTRIBUTES = (
    "_metrics",
    "_logs",
    "_buffered_inputs",
    "_step",
    "aux_loss_enabled",
    "router_aux_loss_coef",
    "epsilon_low",
    "epsilon_high",
    "loss_type",
    "max_completion_length",
    "num_generations",
    "num_generations_eval",
    "num_iterations",
    "reward_weights",
    "scale_rewards",
    "temperature",
    "use_vllm",
    "rollout_func",
    "vllm_importance_sampling_correction",
    "use_adaptive_entropy",
    "entropy_coef",
    "_last_world_entropy",
    "_entropy_window_stats",
)


def check_trl_hooks(cls: type, adapter: type) -> None:
    """Every hook of :data:`TRL_HOOKS` exists on the ``GRPOTrainer`` that ``adapter`` (in ``cls``)
    extends, with the parameters the adapter passes and no parameter its override lacks; else
    :class:`~entflow.errors.UnsupportedVersionError` naming the hook and the TRL version."""
    check_hooks(cls, adapter, TRL_HOOKS, "trl", "GRPOTrainer")


def check_trl_attributes(trainer: Any) -> None:
    """The built trainer has every attribute of :data:`TRL_ATTRIBUTES`; else
    :class:`~entflow.errors.UnsupportedVersionError` naming it and the TRL version."""
    check_attributes(trainer, TRL_ATTRIBUTES, "trl", "GRPOTrainer")


# extra model inputs of multimodal batches, passed through to every forward as TRL does
MULTIMODAL_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


# the sampler's log-probs of the drawn tokens in TRL's batch dict: vLLM's (``use_vllm``) or a
# ``rollout_func``'s ``logprobs``; NaN where vLLM could not score a token (TRL's ``extract_logprobs``)
SAMPLING_LOGPS_KEY = "sampling_per_token_logps"


def sampling_logps(inputs: dict[str, Any], old_logp: torch.Tensor) -> torch.Tensor | None:
    """The sampler's log-probs ``[B, T]`` of TRL's batch (the ``rollout_logp`` of the mismatch
    corrections), or None when TRL has none (no vLLM, no ``rollout_func``). A token the sampler could
    not score (NaN) takes ``old_logp``: no evidence of a mismatch, as TRL's own ratio is 1 there."""
    sampled = inputs.get(SAMPLING_LOGPS_KEY)
    if sampled is None:
        return None
    sampled = sampled[:, : old_logp.shape[1]].to(old_logp.dtype)
    return torch.where(torch.isnan(sampled), old_logp.detach(), sampled)


def completion_mask(inputs: dict[str, Any]) -> torch.Tensor:
    """The tokens the loss sees ``[B, T]``: completion tokens, minus tool-call output when present."""
    mask = inputs["completion_mask"]
    return mask * inputs["tool_mask"] if "tool_mask" in inputs else mask


def forward_inputs(inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, int, dict[str, Any]]:
    """``(input_ids [B, P+T], attention_mask [B, P+T], logits_to_keep = T, extra model kwargs)``
    of a TRL batch, the arguments of ``GRPOTrainer._get_per_token_logps_and_entropies``."""
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    extra = {k: inputs[k] for k in MULTIMODAL_KEYS if inputs.get(k) is not None}
    return input_ids, attention_mask, inputs["completion_ids"].size(1), extra


def causal_lm(model: torch.nn.Module) -> torch.nn.Module:
    """The causal LM under a PEFT wrapper (the model TRL patches with its fused head), else ``model``."""
    from accelerate.utils import is_peft_model

    return model.get_base_model() if is_peft_model(model) else model


@contextlib.contextmanager
def lm_head_tensors(head: torch.nn.Module) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    """``(weight [V, D], bias [V] or None)`` of the LM head, whole, for a no-grad read: gathered
    under DeepSpeed ZeRO-3 with TRL's own ``maybe_gather_lm_head_ctx`` and from FSDP2 ``DTensor``
    shards with ``full_tensor()``, as TRL's fused head reads them."""
    try:
        from trl.trainer.utils import maybe_gather_lm_head_ctx
    except ImportError:  # older TRL: no ZeRO-3 gathering for fused heads

        def maybe_gather_lm_head_ctx(*params: Any) -> contextlib.AbstractContextManager:
            return contextlib.nullcontext()

    from torch.distributed.tensor import DTensor

    weight, bias = head.weight, head.bias
    with maybe_gather_lm_head_ctx(weight, bias):
        yield tuple(t.full_tensor() if isinstance(t, DTensor) else t for t in (weight, bias))


def trl_computes_old_logps(
    gradient_accumulation_steps: int, generate_every: int, use_vllm: bool, vllm_is_correction: bool
) -> bool:
    """GRPOTrainer's rule: it computes old log-probs at generation time exactly when the policy
    may change between generation and the last micro-batch that uses it (``generate_every`` =
    ``steps_per_generation × num_iterations`` micro-steps), or to correct vLLM's sampler."""
    return gradient_accumulation_steps % generate_every != 0 or (use_vllm and vllm_is_correction)


def no_grad_forward(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a trainer method's extra forward without grad and without gradient checkpointing (as
    TRL does for its own old-log-prob pass)."""

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            return fn(self, *args, **kwargs)

    return wrapper
