"""Shared prompts: a group's G responses share one prompt, so its keys and values are computed once
(docs/design.md §10, ``TrainConfig.share_prompts``).

A rollout's N = P·G rows hold P distinct prompts. A plain forward over ``[prompt | response]``
(and ``generate``'s prefill) runs every prompt token once per row. Here each distinct prompt runs
once, its first Lp − 1 tokens into a KV cache whose rows are then gathered for every row
(:func:`prompt_cache`); only the last prompt token and the response run per row
(:func:`shared_response_forward`). Attention masks and positions are those of the plain forward,
so the logits are the same up to float round-off (a matmul over fewer rows may sum in another
order); gradients flow through the gathered cache into the prompt's forward, which therefore
receives the summed gradient of every row that reads it. The saving is (G − 1)/G of the prompt
tokens' work, in generation, the update's forward + backward and every re-scoring pass.

Duck-typed on the ``transformers`` causal-LM API (a ``DynamicCache`` passed as ``cache``, or as
``past_key_values`` before transformers renamed it: :func:`cache_kwarg`; ``logits_to_keep``,
``base_model``); nothing here is needed without ``transformers``.
"""

from __future__ import annotations

from typing import Any

import torch

from entflow.trainer.tokens import position_ids_from_mask

__all__ = ["cache_kwarg", "distinct_prompts", "prompt_cache", "shared_response_forward", "worth_sharing"]


def distinct_prompts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(first, inverse)``: ``first`` ``[U]`` the first row holding each distinct (ids, mask) prompt,
    ``inverse`` ``[N]`` the distinct prompt of each row, so ``prompt_ids[first][inverse] == prompt_ids``."""
    key = torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], dim=1)
    _, inverse = torch.unique(key, dim=0, return_inverse=True)
    n = inverse.shape[0]
    rows = torch.arange(n, device=inverse.device)
    first = torch.full((int(inverse.max()) + 1,), n, dtype=torch.long, device=inverse.device)
    first = first.scatter_reduce(0, inverse, rows, reduce="amin")
    return first, inverse


def worth_sharing(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> bool:
    """Whether some rows repeat a prompt (and the prompts are ≥ 2 tokens, so a cache has something
    to hold): otherwise the plain forward is the same work."""
    if prompt_ids.shape[0] < 2 or prompt_ids.shape[1] < 2:
        return False
    first, _ = distinct_prompts(prompt_ids, prompt_mask)
    return first.shape[0] < prompt_ids.shape[0]


def cache_kwarg(model: Any) -> str:
    """The keyword ``model``'s forward (and ``generate``) takes a KV cache by: ``"cache"`` where its
    forward names it so (newer transformers, which deprecate the old name), else
    ``"past_key_values"``. A wrapper (a peft model) is asked about the model it wraps."""
    import inspect

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        params = inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def prompt_cache(model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, repeats: int = 1) -> Any:
    """The KV cache of the first ``Lp − 1`` tokens of every row's prompt, ``N·repeats`` rows
    (each row ``repeats`` times in a row, as ``generate(n=repeats)`` lays out its rows), computed
    once per distinct prompt. Grad flows through it when enabled. ``prompt_ids`` / ``prompt_mask``
    ``[N, Lp]`` left-padded, Lp ≥ 2."""
    first, inverse = distinct_prompts(prompt_ids, prompt_mask)
    if repeats > 1:
        inverse = inverse.repeat_interleave(repeats)
    lp = prompt_ids.shape[1]
    mask = prompt_mask[first, : lp - 1]
    cache = _new_cache(model)
    # logits_to_keep=1: the head runs on one position only (its output is not used)
    model(
        input_ids=prompt_ids[first, : lp - 1],
        attention_mask=mask,
        position_ids=position_ids_from_mask(mask),
        use_cache=True,
        logits_to_keep=1,
        **{cache_kwarg(model): cache},
    )
    cache.batch_select_indices(inverse)
    return cache


def shared_response_forward(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    hidden: bool = False,
) -> torch.Tensor:
    """What predicts each response token ``[N, T]``, with every distinct prompt run once: the
    untempered logits ``[N, T, V]`` or, with ``hidden``, the body's last hidden state ``[N, T, D]``
    (the LM head's input; the head never runs). Equal to a full forward over
    ``[prompt | response]`` up to float round-off."""
    lp = prompt_ids.shape[1]
    cache = prompt_cache(model, prompt_ids, prompt_mask)
    attention = torch.cat([prompt_mask, torch.ones_like(response_ids)], dim=1)
    inputs = {
        "input_ids": torch.cat([prompt_ids[:, -1:], response_ids], dim=1),
        "attention_mask": attention,
        "position_ids": position_ids_from_mask(attention)[:, lp - 1 :],
        cache_kwarg(model): cache,
        "use_cache": True,
    }
    if hidden:
        return model.base_model(**inputs).last_hidden_state[:, :-1]
    return model(**inputs).logits[:, :-1]
