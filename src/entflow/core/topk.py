"""Log-probabilities of each position's K most probable tokens (SimKO, arXiv 2510.14807 §4): a token
statistic with grad, computed from the logits like ``core.nucleus.topp_entropy``."""

from __future__ import annotations

import torch

from entflow.errors import ParameterError


def topk_logprobs(logits: torch.Tensor, k: int, temperature: float = 1.0) -> torch.Tensor:
    """``log π(b)`` of the K most probable tokens b at each position, most probable first, with grad.

    Args:
        logits: ``[..., V]`` raw logits (any float dtype; computed in float32 at least).
        k: how many candidates, 1 ≤ k ≤ V.
        temperature: logits are divided by it first (docs/design.md §1).

    Returns:
        ``[..., k]``: ``z_b/τ − logsumexp(z/τ)`` at the top-k entries of each row (among tied
        logits in ``torch.topk``'s order). The selection is held fixed in the backward.
    """
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= logits.shape[-1]:
        raise ParameterError("topk_logprobs", "k", f"must be an integer in [1, {logits.shape[-1]}], got {k!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not temperature > 0:
        raise ParameterError("topk_logprobs", "temperature", f"must be a number > 0, got {temperature!r}")
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    z = z / temperature
    top = torch.topk(z, k, dim=-1)
    return top.values - torch.logsumexp(z, dim=-1, keepdim=True)
