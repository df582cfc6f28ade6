"""The entropy of the top-p nucleus of each position's distribution (SIREN, arXiv 2509.25133 §3):
tensor math shared by the ``siren`` method and the trainer's update forward."""

from __future__ import annotations

import math

import torch

from entflow.core.checks import check_finite
from entflow.errors import ParameterError


def topp_entropy(logits: torch.Tensor, top_p: float, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of the renormalised nucleus ("top-p") distribution at each position, with grad.

    Args:
        logits: ``[..., V]`` raw logits (any float dtype; computed in float32 at least).
        top_p: nucleus mass in (0, 1]. The nucleus S is the smallest set of most probable tokens
            whose mass reaches ``top_p``: token b is in S when the mass of the tokens ranked
            before it is < ``top_p`` (so the most probable token always is).
        temperature: logits are divided by it first (docs/design.md §1).

    Returns:
        ``[...]``: ``H_S = −Σ_{b∈S} q_b log q_b`` with ``q = π|_S / π(S)`` (arXiv 2509.25133 §3,
        top-p mask). S is held fixed in the backward (it is piecewise constant in the logits),
        so the gradient is that of the entropy of softmax(z masked to S). ``top_p = 1`` gives
        the full-vocabulary entropy.

    Memory: a few ``[..., V]`` float32 temporaries (a sort of each row); call it on chunks of
    rows for very large batches.
    """
    if isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0 < top_p <= 1:
        raise ParameterError("topp_entropy", "top_p", f"must be a number in (0, 1], got {top_p!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not temperature > 0:
        raise ParameterError("topp_entropy", "temperature", f"must be a number > 0, got {temperature!r}")
    check_finite("logits", logits)
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    z = z / temperature
    with torch.no_grad():
        p = torch.softmax(z, dim=-1)
        p_sorted, order = torch.sort(p, dim=-1, descending=True)
        before = torch.cumsum(p_sorted, dim=-1) - p_sorted  # mass of the tokens ranked before b
        keep_sorted = before < top_p
        keep_sorted[..., 0] = True  # the most probable token, whatever rounding did
        keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
    zs = z.masked_fill(~keep, -math.inf)
    q = torch.softmax(zs, dim=-1)  # 0 outside S
    # H_S = log Σ_S e^z − Σ_S q z  (z, not zs, in the product: 0·(−inf) would be NaN)
    return torch.logsumexp(zs, dim=-1) - (q * z.masked_fill(~keep, 0.0)).sum(-1)
