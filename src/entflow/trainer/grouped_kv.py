"""Masked attention over grouped key/value heads without copying K and V to every query head, while
no gradient is recorded on a CPU.

SmolLM2-135M has 9 query heads and 3 key/value heads (grouped-query attention). transformers' SDPA
attention asks ``transformers.integrations.sdpa_attention.use_gqa_in_sdpa`` whether to hand the
grouping to ``scaled_dot_product_attention(enable_gqa=True)``. On a CPU it says yes only when there
is no attention mask; with a mask, which every batched call over left-padded prompts has, it copies
each key/value head to its query heads (``repeat_kv``: a ``[N, H, L, D]`` copy of K and of V per
layer and call). Releases that have ``pack_gqa`` (5.25 on) decode a single query token without that
copy, by folding the query heads onto the key/value heads; older ones copy at every decoding step.

Within :func:`grouped_kv_attention`, masked no-grad calls on a CPU that transformers would answer
with the copy take ``enable_gqa`` instead. ``enable_gqa`` and the copy give bit-identical outputs
(each head computes the same dot products in the same order; ``tests/trainer/test_grouped_kv.py``),
so decoding reports the same numbers as transformers' own path. ``pack_gqa``'s folded matmul is not
bit-identical to them (about 1e-6), so calls transformers decodes with it are left to transformers.
A forward that records a gradient (the update) keeps the copy, whose backward sums the key/value
gradients in its own order.

The replacement takes whatever transformers passes and hands every call it does not widen to
transformers' own function. It recognises the signatures of the releases it was written against
(:data:`KNOWN_SIGNATURES`); on any other it leaves transformers alone and warns once, naming the
transformers version (docs/architecture.md, "Library internals entflow patches").
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["KNOWN_SIGNATURES", "grouped_kv_attention", "has_grouped_kv_heads"]

#: the parameter names of ``use_gqa_in_sdpa`` this module knows: transformers 4.53–5.2x and 5.25 on
KNOWN_SIGNATURES = (("attention_mask", "key"), ("attention_mask", "key", "value"))

_warned: set[str] = set()  # transformers versions already warned about (once per version and process)


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


def _known_signature(decide: Callable[..., Any]) -> inspect.Signature | None:
    """``decide``'s signature when its parameters are one of :data:`KNOWN_SIGNATURES`, else None."""
    try:
        sig = inspect.signature(decide)
    except (TypeError, ValueError):
        return None
    return sig if tuple(sig.parameters) in KNOWN_SIGNATURES else None


def _warn_unknown(decide: Callable[..., Any]) -> None:
    import transformers

    version = getattr(transformers, "__version__", "unknown")
    if version in _warned:
        return
    _warned.add(version)
    try:
        seen = str(inspect.signature(decide))
    except (TypeError, ValueError):
        seen = "(unreadable)"
    warnings.warn(
        f"entflow: transformers {version}'s use_gqa_in_sdpa{seen} is not a signature entflow knows "
        f"({', '.join('(' + ', '.join(s) + ')' for s in KNOWN_SIGNATURES)}); decoding leaves it to "
        "transformers (same results, grouped key/value heads copied as transformers does)",
        RuntimeWarning,
        stacklevel=3,
    )


def _widened(decide: Callable[..., Any], sig: inspect.Signature, folds_decoding: bool) -> Callable[..., Any]:
    """``decide`` widened to masked no-grad CPU calls that transformers would answer with a copy
    (with ``folds_decoding``: multi-query calls only; transformers folds a single query itself)."""

    def use_gqa_in_sdpa(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError:
            return decide(*args, **kwargs)
        mask, key = bound.arguments.get("attention_mask"), bound.arguments.get("key")
        if (
            isinstance(mask, torch.Tensor)
            and isinstance(key, torch.Tensor)
            and key.device.type == "cpu"
            and not torch.is_grad_enabled()
            and not (folds_decoding and (mask.dim() != 4 or mask.shape[-2] == 1))
        ):
            return True
        return decide(*args, **kwargs)

    use_gqa_in_sdpa.__wrapped__ = decide  # type: ignore[attr-defined]
    use_gqa_in_sdpa._entflow_widened = True  # type: ignore[attr-defined]
    return use_gqa_in_sdpa


@contextmanager
def grouped_kv_attention(model: Any) -> Iterator[None]:
    """Within the block, masked SDPA attention over grouped key/value heads on a CPU without grad
    runs with ``enable_gqa`` where transformers would copy K and V per query head; every other call
    (a gradient recorded, no mask, a GPU, a single query that transformers folds itself) is decided
    by transformers as before. Restored on exit, also on an error. A no-op for a model without
    grouped heads (the lab's policies), where transformers or torch lacks the switch, and, with one
    warning per transformers version, where ``use_gqa_in_sdpa`` has a signature it does not know."""
    sdpa = _sdpa_module() if has_grouped_kv_heads(model) else None
    if sdpa is None:
        yield
        return
    decide = sdpa.use_gqa_in_sdpa
    if getattr(decide, "_entflow_widened", False):  # an enclosing block widened it already
        yield
        return
    sig = _known_signature(decide)
    if sig is None:
        _warn_unknown(decide)
        yield
        return
    sdpa.use_gqa_in_sdpa = _widened(decide, sig, folds_decoding=callable(getattr(sdpa, "pack_gqa", None)))
    try:
        yield
    finally:
        sdpa.use_gqa_in_sdpa = decide
