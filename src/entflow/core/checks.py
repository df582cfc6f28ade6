"""Input validation shared by the tensor core (docs/design.md §13)."""

from __future__ import annotations

import torch

from entflow.errors import NonFiniteError, ShapeError


def check_finite(field: str, x: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    """Raise :class:`NonFiniteError` if ``x`` (where ``mask`` is set, if given) has NaN/inf."""
    if not torch.is_floating_point(x):
        return
    if mask is None:
        # allocation-free fast path (min/max propagate NaN): the full isfinite below would
        # allocate ~2× the tensor, e.g. GiBs for [tokens, vocab] logits
        if x.numel() == 0:
            return
        lo, hi = torch.aminmax(x.detach())
        if bool(torch.isfinite(lo) & torch.isfinite(hi)):
            return
    bad = ~torch.isfinite(x.detach())
    if mask is not None:
        bad = bad & mask.bool()
    if bool(bad.any()):
        xd = x.detach() if mask is None else x.detach()[mask.bool()]
        raise NonFiniteError(field, int(torch.isnan(xd).sum()), int(torch.isinf(xd).sum()))


def check_shape(field: str, x: torch.Tensor, shape: tuple[int, ...], expected: str) -> None:
    """Raise :class:`ShapeError` unless ``x.shape == shape``."""
    if tuple(x.shape) != tuple(shape):
        raise ShapeError(field, expected, tuple(x.shape))
