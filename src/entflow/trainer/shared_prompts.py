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

With gradients, what costs most on a CPU is not the tokens but the calls: each forward call's
backward writes a full gradient for every weight. So the update and re-scoring pack the batch into
one sequence instead (:func:`packed_response_forward`): the common prefix, each distinct prompt's
rest, each row's response, with an attention mask that lets every token see only its own prompt
and response (a tree) and the position it has in its row. Every linear layer then runs once, on
every token, and the logits are read at the positions that predict each response token.

Duck-typed on the ``transformers`` causal-LM API (a ``DynamicCache`` passed as ``cache``, or as
``past_key_values`` before transformers renamed it: :func:`cache_kwarg`; ``logits_to_keep``,
``base_model``); nothing here is needed without ``transformers``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from entflow.core.lm_head import hidden_head_reason, last_hidden_state
from entflow.trainer.tokens import position_ids_from_mask

__all__ = [
    "SharedPrompts",
    "cache_kwarg",
    "common_prefix_length",
    "distinct_prompts",
    "packed_length",
    "packed_response_forward",
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


def _distinct_and_prefix(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(first, inverse, c)``: :func:`distinct_prompts` and the distinct prompts' common prefix
    length :func:`common_prefix_length`, what every shared forward lays out first."""
    first, inverse = distinct_prompts(prompt_ids, prompt_mask)
    return first, inverse, common_prefix_length(prompt_ids[first], prompt_mask[first])


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
    first, inverse, c = _distinct_and_prefix(prompt_ids, prompt_mask)
    ids, mask = prefix_first_layout(prompt_ids, prompt_mask, c)
    distinct_ids, distinct_mask = ids[first], mask[first]  # [U, Lp]
    if repeats > 1:
        inverse = inverse.repeat_interleave(repeats)
        ids, mask = ids.repeat_interleave(repeats, 0), mask.repeat_interleave(repeats, 0)
    lp = prompt_ids.shape[1]
    cache = _new_cache(model)
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
    packed: bool | None = None,
) -> torch.Tensor:
    """What predicts each response token ``[N, T]``, with every distinct prompt run once: the
    untempered logits ``[N, T, V]`` or, with ``hidden``, the body's last hidden state ``[N, T, D]``
    (the LM head's input; the head never runs). Equal to a full forward over
    ``[prompt | response]`` up to float round-off.

    ``packed=None`` (the default) takes :func:`packed_response_forward` where the model's head is a
    plain linear one and the packed sequence is at most ``PACK_MAX_TOKENS`` long, else the KV cache
    of :func:`prompt_cache`; ``True`` / ``False`` choose."""
    if packed is None:
        fits = packed_length(prompt_ids, prompt_mask, response_ids) <= PACK_MAX_TOKENS
        packed = fits and hidden_head_reason(_unwrapped(model)) is None
    if packed:
        return packed_response_forward(model, prompt_ids, prompt_mask, response_ids, hidden=hidden)
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


def _unwrapped(model: Any) -> Any:
    """The causal LM inside a peft wrapper (its adapters are in its layers), else ``model``."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


PACK_MAX_TOKENS = 2048  # a packed forward's attention mask is [L, L]: beyond this, the cached forward


def _packed_tree(
    prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, response_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One sequence holding the batch as a tree: the distinct prompts' common prefix, then each
    distinct prompt's rest, then each row's response but its last token. Returns ``(ids [L],
    positions [L], attends [L, L], reads [N, T])``: token i sees token j when j is i's ancestor
    or earlier in its own segment; ``reads`` are the tokens whose outputs predict each response
    token (the row's last prompt token, then its response tokens 0 … T − 2)."""
    first, inverse, c = _distinct_and_prefix(prompt_ids, prompt_mask)
    real = prompt_mask[first].bool()
    n, t = response_ids.shape
    ids, pos, seg, last = [], [], [], []
    prefix = prompt_ids[first[0]][prompt_mask[first[0]].bool()][:c]
    ids.append(prefix), pos.append(torch.arange(c)), seg.append(torch.zeros(c, dtype=torch.long))
    length = c
    lengths = real.long().sum(dim=1)
    for u in range(first.shape[0]):  # segment 1 + u: distinct prompt u after the prefix
        rest = prompt_ids[first[u]][real[u]][c:]
        ids.append(rest), pos.append(torch.arange(c, int(lengths[u]))), seg.append(torch.full_like(rest, 1 + u))
        length += rest.shape[0]
        last.append(length - 1)
    starts = []
    for r in range(n):  # segment 1 + U + r: row r's response but its last token
        u = int(inverse[r])
        starts.append(length)
        ids.append(response_ids[r, : t - 1])
        pos.append(torch.arange(int(lengths[u]), int(lengths[u]) + t - 1))
        seg.append(torch.full((t - 1,), 1 + first.shape[0] + r, dtype=torch.long))
        length += t - 1
    device = prompt_ids.device
    ids_all, pos_all, seg_all = (torch.cat(x).to(device) for x in (ids, pos, seg))
    n_seg = 1 + first.shape[0] + n
    ancestor = torch.eye(n_seg, dtype=torch.bool, device=device)  # [S, S]: row s sees segment s'
    ancestor[:, 0] = True  # every segment sees the prefix
    ancestor[1 + first.shape[0] + torch.arange(n, device=device), 1 + inverse.to(device)] = True
    order = torch.arange(length, device=device)
    same = seg_all[:, None] == seg_all[None, :]
    attends = ancestor[seg_all[:, None], seg_all[None, :]] & (~same | (order[None, :] <= order[:, None]))
    step = torch.arange(t - 1, device=device)
    lasts = torch.tensor(last, device=device)[inverse.to(device)]
    reads = torch.cat([lasts[:, None], torch.tensor(starts, device=device)[:, None] + step], dim=1)
    return ids_all, pos_all, attends, reads


def packed_length(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, response_ids: torch.Tensor) -> int:
    """The length L of :func:`packed_response_forward`'s one sequence for these rows."""
    first, _, c = _distinct_and_prefix(prompt_ids, prompt_mask)
    rests = int(prompt_mask[first].long().sum()) - c * first.shape[0]
    return c + rests + prompt_ids.shape[0] * (response_ids.shape[1] - 1)


def packed_response_forward(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    hidden: bool = False,
) -> torch.Tensor:
    """What predicts each response token ``[N, T]`` from one forward over one packed sequence: the
    common prefix once, each distinct prompt's rest once, each row's response, with an attention
    mask that lets each token see only its own prompt and response (:func:`_packed_tree`) and the
    positions each token has in its row. Every linear layer then runs once, on all the tokens,
    so the backward writes each weight's gradient once. Needs a plain linear head
    (:func:`~entflow.core.lm_head.hidden_head_reason` is None); returns the untempered logits
    ``[N, T, V]`` or, with ``hidden``, the head's inputs ``[N, T, D]``. Equal to a full forward
    over ``[prompt | response]`` up to float round-off."""
    model = _unwrapped(model)
    ids, positions, attends, reads = _packed_tree(prompt_ids, prompt_mask, response_ids)
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(attends.shape, dtype=dtype, device=ids.device).masked_fill(~attends, torch.finfo(dtype).min)
    body = last_hidden_state(model, input_ids=ids[None], attention_mask=mask[None, None], position_ids=positions[None])
    states = body[0][reads]  # [N, T, D]
    return states if hidden else model.get_output_embeddings()(states)
