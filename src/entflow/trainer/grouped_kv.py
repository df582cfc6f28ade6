"""Masked attention over grouped key/value heads without copying K and V to every query head, while
no gradient is recorded on a CPU.

SmolLM2-135M has 9 query heads and 3 key/value heads (grouped-query attention). transformers' SDPA
attention hands the grouping to ``scaled_dot_product_attention(enable_gqa=True)`` only when there is
no attention mask (``transformers.integrations.sdpa_attention.use_gqa_in_sdpa``); with a mask, which
every batched decoding step of left-padded prompts has, it first copies each key/value head to its
query heads (``repeat_kv``: a ``[N, H, L, D]`` copy of K and of V per layer and step). On a CPU that
copy was about three quarters of a decoding step's attention time (docs/benchmarks.md,
"Grouped key/value heads"). Within :func:`grouped_kv_attention`, transformers' condition also admits
masked attention on a CPU while no gradient is recorded, so transformers' own ``enable_gqa`` branch
runs: each query head reads its group's K and V in place. The attention output is bit-identical
(each head computes the same dot products in the same order;
``tests/trainer/test_grouped_kv.py``). A forward that records a gradient (the update) keeps the copy,
whose backward sums the key/value gradients in its own order.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["grouped_kv_attention", "has_grouped_kv_heads"]


def has_grouped_kv_heads(model: Any) -> bool:
    """Whether ``model``'s config has fewer key/value heads than query heads."""
    config = getattr(model, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None)
    return isinstance(heads, int) and isinstance(kv_heads, int) and 0 < kv_heads < heads


def _sdpa_module() -> Any | None:
    """transformers' SDPA attention module where it decides the grouping in ``use_gqa_in_sdpa``
    (transformers ≥ 4.53) and torch has ``enable_gqa`` (≥ 2.5); else None."""
    if torch.__version__ < "2.5":  # TorchVersion compares with a version string
        return None
    try:
        from transformers.integrations import sdpa_attention
    except ImportError:
        return None
    return sdpa_attention if callable(getattr(sdpa_attention, "use_gqa_in_sdpa", None)) else None


@contextmanager
def grouped_kv_attention(model: Any) -> Iterator[None]:
    """Within the block, masked SDPA attention over grouped key/value heads on a CPU without grad
    runs with ``enable_gqa`` instead of copying K and V per query head; every other call (a gradient
    recorded, no mask, a GPU) is decided by transformers as before. Restored on exit, also on an
    error. A no-op for a model without grouped heads (the lab's policies) and where transformers or
    torch lacks the switch."""
    sdpa = _sdpa_module() if has_grouped_kv_heads(model) else None
    if sdpa is None:
        yield
        return
    decide = sdpa.use_gqa_in_sdpa

    def use_gqa(attention_mask: torch.Tensor | None, key: torch.Tensor) -> bool:
        if attention_mask is not None and not torch.is_grad_enabled() and isinstance(key, torch.Tensor):
            if key.device.type == "cpu":
                return True
        return decide(attention_mask, key)

    sdpa.use_gqa_in_sdpa = use_gqa
    try:
        yield
    finally:
        sdpa.use_gqa_in_sdpa = decide
