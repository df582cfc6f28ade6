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

The distinct prompts of one batch often begin alike (a chat template's system turn, few-shot
examples): those tokens are run once too. Their longest common prefix (:func:`common_prefix_length`)
is cached for one row and gathered for every distinct prompt before the rest of each prompt runs;
to let one cache serve prompts of different lengths, each row is laid out prefix first, its padding
between the prefix and the rest (:func:`prefix_first_layout`). Attention only sees which keys are
real and the positions follow the mask, so this too changes nothing but float round-off.

Duck-typed on the ``transformers`` causal-LM API (a ``DynamicCache`` passed as ``cache``, or as
``past_key_values`` before transformers renamed it: :func:`cache_kwarg`; ``logits_to_keep``,
``base_model``); nothing here is needed without ``transformers``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from entflow.trainer.tokens import position_ids_from_mask

__all__ = [
    "SharedPrompts",
    "cache_kwarg",
    "common_prefix_length",
    "distinct_prompts",
    "prefix_first_layout",
    "prompt_cache",
    "shared_response_forward",
    "worth_sharing",
]


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


def _real_first(prompt_mask: torch.Tensor, c: int = 0) -> torch.Tensor:
    """``[N, Lp]`` column order per row: the first ``c`` real tokens, then the padding, then the
    other real tokens, each in their order (``c = 0``: padding first, as left padding has it)."""
    real = prompt_mask.bool()
    rank = real.long().cumsum(dim=1) - 1  # the index of each real token within its row
    group = torch.where(real, torch.where(rank < c, 0, 2), 1)
    return torch.sort(group, dim=1, stable=True).indices


def common_prefix_length(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> int:
    """The number of real tokens every row's prompt starts with, at most the shortest prompt's
    length − 1 (the last prompt token always runs per row). ``[N, Lp]``, padding anywhere."""
    lengths = prompt_mask.long().sum(dim=1)
    most = int(lengths.min()) - 1
    if most <= 0 or prompt_ids.shape[0] < 2:
        return max(most, 0)
    right = prompt_ids.gather(1, _real_first(prompt_mask))  # real tokens last, in order: [N, Lp]
    start = prompt_ids.shape[1] - lengths  # [N] the column each row's first real token is now in
    tokens = right.gather(1, start[:, None] + torch.arange(most, device=prompt_ids.device))  # [N, most]
    same = (tokens == tokens[:1]).all(dim=0)
    return int(same.long().cumprod(dim=0).sum())


def prefix_first_layout(
    prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, c: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[N, Lp]`` prompts re-laid out with each row's first ``c`` real tokens in columns 0 … c − 1,
    its padding next and its other real tokens last: the common prefix's keys sit in the same
    columns for every row. Positions follow the mask, so a forward sees the same prompt."""
    order = _real_first(prompt_mask, c)
    return prompt_ids.gather(1, order), prompt_mask.gather(1, order)


def worth_sharing(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> bool:
    """Whether some rows repeat a prompt or all rows' prompts begin alike (and the prompts are ≥ 2
    tokens, so a cache has something to hold): otherwise the plain forward is the same work."""
    if prompt_ids.shape[0] < 2 or prompt_ids.shape[1] < 2:
        return False
    first, _ = distinct_prompts(prompt_ids, prompt_mask)
    return first.shape[0] < prompt_ids.shape[0] or common_prefix_length(prompt_ids, prompt_mask) > 0


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


@dataclass
class SharedPrompts:
    """A KV cache of every row's prompt but its last token, and the prompts in the layout its
    columns follow (:func:`prefix_first_layout`): pass these ids and mask with the cache."""

    cache: Any
    prompt_ids: torch.Tensor  # [N, Lp]
    prompt_mask: torch.Tensor  # [N, Lp]


def _extend_cache(model: Any, cache: Any, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> None:
    # logits_to_keep=1: the head runs on one position only (its output is not used)
    model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
        **{cache_kwarg(model): cache},
    )


def prompt_cache(model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, repeats: int = 1) -> SharedPrompts:
    """The KV cache of the first ``Lp − 1`` columns of every row's prompt, ``N·repeats`` rows (each
    row ``repeats`` times in a row, as ``generate(n=repeats)`` lays out its rows), computed once
    per distinct prompt, and the distinct prompts' common prefix once in all. Grad flows through
    it when enabled. ``prompt_ids`` / ``prompt_mask`` ``[N, Lp]``, Lp ≥ 2, the last column real."""
    first, inverse = distinct_prompts(prompt_ids, prompt_mask)
    c = common_prefix_length(prompt_ids[first], prompt_mask[first])
    ids, mask = prefix_first_layout(prompt_ids, prompt_mask, c)
    if repeats > 1:
        inverse = inverse.repeat_interleave(repeats)
        ids, mask = ids.repeat_interleave(repeats, 0), mask.repeat_interleave(repeats, 0)
    lp = prompt_ids.shape[1]
    cache = _new_cache(model)
    distinct_ids, distinct_mask = prefix_first_layout(prompt_ids[first], prompt_mask[first], c)  # [U, Lp]
    if c > 0:  # the prefix, once: [1, c], then one copy per distinct prompt
        ones = distinct_mask[:1, :c]
        _extend_cache(model, cache, distinct_ids[:1, :c], ones, position_ids_from_mask(ones))
        cache.batch_select_indices(torch.zeros(first.shape[0], dtype=torch.long, device=first.device))
    if c < lp - 1:  # the rest of each distinct prompt but its last token: [U, Lp − 1 − c]
        m = distinct_mask[:, : lp - 1]
        _extend_cache(model, cache, distinct_ids[:, c : lp - 1], m, position_ids_from_mask(m)[:, c:])
    cache.batch_select_indices(inverse)
    return SharedPrompts(cache, ids, mask)


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
    shared = prompt_cache(model, prompt_ids, prompt_mask)
    attention = torch.cat([shared.prompt_mask, torch.ones_like(response_ids)], dim=1)
    inputs = {
        "input_ids": torch.cat([shared.prompt_ids[:, -1:], response_ids], dim=1),
        "attention_mask": attention,
        "position_ids": position_ids_from_mask(attention)[:, lp - 1 :],
        cache_kwarg(model): shared.cache,
        "use_cache": True,
    }
    if hidden:
        return model.base_model(**inputs).last_hidden_state[:, :-1]
    return model(**inputs).logits[:, :-1]
