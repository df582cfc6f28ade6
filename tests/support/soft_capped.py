"""A tiny Gemma2 whose head soft-caps its logits (``c·tanh(z/c)``): the model the hidden-state
statistics must refuse (they assume logits = hidden @ W.T + b)."""

from __future__ import annotations

from typing import Any

import torch


def tiny_gemma2(softcap: float | None, head_scale: float = 1.0) -> Any:
    """A 1-layer Gemma2 (vocabulary 40, seeded 0) in eval mode; ``head_scale`` multiplies the head's
    weight (larger logits, so that the cap acts)."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    cfg = Gemma2Config(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        final_logit_softcapping=softcap,
        pad_token_id=0,
    )
    model = Gemma2ForCausalLM(cfg).eval()
    if head_scale != 1.0:
        with torch.no_grad():
            model.lm_head.weight.mul_(head_scale)
    return model
