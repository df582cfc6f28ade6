"""When a causal LM's logits are exactly ``hidden @ W.T + b`` (docs/design.md §3).

:func:`~entflow.core.hidden_stats.token_stats_from_hidden` computes the token statistics from the
last hidden state and the output projection without the ``[N, V]`` logits. That is only the
model's own law when the head is a plain linear layer: some families transform the projected
logits (Gemma 2's ``final_logit_softcapping``: ``c·tanh(z/c)``; Cohere's ``logit_scale``;
Granite's ``logits_scaling``; Falcon-H1's ``lm_head_multiplier``). :func:`hidden_head_reason`
says why a model's head is not plain (``None`` when it is), and :func:`last_hidden_state` runs
the model body only. Duck-typed on the ``transformers`` ``PreTrainedModel`` API
(``get_output_embeddings``, ``base_model``, ``config``); nothing here imports ``transformers``.
"""

from __future__ import annotations

from typing import Any

import torch

# config attributes (on the text config) that change the logits after the linear projection;
# each is harmless when absent, None, or 1.0 (the scales) / None (soft-capping)
_LOGIT_TRANSFORMS = (
    "final_logit_softcapping",
    "logit_scale",
    "output_multiplier",
    "lm_head_multiplier",
    "logits_scaling",
)


def _text_config(model: Any) -> Any:
    config = getattr(model, "config", None)
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def hidden_head_reason(model: Any) -> str | None:
    """Why ``model``'s logits are not ``last_hidden_state @ head.weight.T + head.bias``, or ``None``.

    Reasons: no ``get_output_embeddings()``, a head that is not an ``nn.Linear``, a model without a
    separate body (``base_model is model``), or a config field that transforms the logits
    (soft-capping or a logit scale other than 1). Tied embeddings are fine: the head's weight is
    the embedding matrix, read as it is.
    """
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if head is None:
        return f"{type(model).__name__} has no output embeddings (get_output_embeddings() is None)"
    if not isinstance(head, torch.nn.Linear):
        return f"its LM head is a {type(head).__name__}, not a plain nn.Linear"
    if getattr(model, "base_model", model) is model:
        return f"{type(model).__name__} exposes no separate model body (base_model)"
    config = _text_config(model)
    for name in _LOGIT_TRANSFORMS:
        value = getattr(config, name, None)
        if value is None or (name != "final_logit_softcapping" and float(value) == 1.0):
            continue
        return f"config.{name} = {value} transforms the logits after the linear head"
    return None


def last_hidden_state(model: Any, **inputs: Any) -> torch.Tensor:
    """The model body's output ``[B, L, D]`` (after the final norm: the LM head's input), from one
    call of ``model.base_model(**inputs, use_cache=False)``; the head never runs."""
    return model.base_model(**inputs, use_cache=False).last_hidden_state
