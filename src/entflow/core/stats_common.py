"""What the two paths to the per-token statistics of docs/design.md §3 share.

:func:`entflow.core.token_stats.token_stats` reads them from logits ``[N, V]``;
:func:`entflow.core.hidden_stats.token_stats_from_hidden` from hidden states ``[N, D]`` and the
output projection ``[V, D]``, never building the logits. Both take the same ``stats=`` and
``backend=`` arguments, compute in the same dtype, choose Triton by the same rule, check token ids
the same way and differentiate through the same closed form; this module holds those parts once.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from entflow.errors import ParameterError, ShapeError

STAT_NAMES = ("logp", "entropy", "sum_p2", "sum_p2_logp")
BACKENDS = ("auto", "torch", "triton")

# a shifted, scaled logit below this has exp(·) = 0 in float32 and float64 alike; −inf logits
# are clamped to it so that 0 · (−inf) never appears (π log π → 0, as its limit)
LOG_FLOOR = -1.0e4


def parse_stats(stats: Iterable[str], owner: str) -> tuple[bool, bool, bool, bool]:
    """``stats=`` (a name or names of ``STAT_NAMES``) → which of the four to compute, in
    ``STAT_NAMES`` order; anything else is a :class:`~entflow.errors.ParameterError` of ``owner``."""
    if isinstance(stats, str):
        stats = (stats,)
    names = tuple(stats)
    unknown = [s for s in names if s not in STAT_NAMES]
    if unknown or not names:
        raise ParameterError(owner, "stats", f"must be a non-empty subset of {STAT_NAMES}, got {names!r}")
    return tuple(s in names for s in STAT_NAMES)  # type: ignore[return-value]


def compute_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """float64 when every input is float64, else float32 (half precision is computed in float32)."""
    return torch.float64 if all(d == torch.float64 for d in dtypes) else torch.float32


def check_backend(owner: str, backend: str) -> None:
    if backend not in BACKENDS:
        raise ParameterError(owner, "backend", f"must be one of {BACKENDS}, got {backend!r}")


def check_positive_int(owner: str, name: str, value: int | None) -> None:
    """``value`` is ``None`` or an ``int`` ≥ 1 (a chunk size)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ParameterError(owner, name, f"must be a positive int or None, got {value!r}")


def use_triton(backend: str, fits: bool, on_cuda: bool, owner: str, why_not: str) -> bool:
    """Whether to run the Triton kernels: ``"triton"`` forces them (a
    :class:`~entflow.errors.ParameterError` of ``owner`` saying ``why_not`` when the input does not
    ``fit`` them), ``"auto"`` takes them for CUDA tensors that fit when Triton is installed."""
    if not fits:
        if backend == "triton":
            raise ParameterError(owner, "backend", why_not)
        return False
    if backend != "auto":
        return backend == "triton"
    from entflow.core.triton_token_stats import available

    return on_cuda and available()


def check_token_ids(ids: torch.Tensor, vocab: int, vocab_field: str, vocab_shape: tuple[int, ...]) -> None:
    """docs/design.md §13: the flat token ids ``[N]`` lie in ``[0, vocab)`` (one host sync); a
    ``vocab`` of 0 with ids to look up is a :class:`~entflow.errors.ShapeError` of ``vocab_field``."""
    if not ids.numel():
        return
    if vocab == 0:
        raise ShapeError(vocab_field, "a non-empty vocabulary axis (V ≥ 1)", vocab_shape)
    lo, hi = torch.aminmax(ids)
    lo, hi = int(lo), int(hi)
    if lo < 0 or hi >= vocab:
        raise ShapeError("token_ids", f"values in [0, {vocab})", f"range [{lo}, {hi}]")


def gradient_coefficients(grads, saved):
    """Per-row coefficients ``(c0, c1, c2, c3)`` (each ``[R]`` or ``None``) of the gradient of
    ``Σ g·stats`` w.r.t. the scaled logits ``z`` (docs/design.md §3), with H = entropy, S2 = Σπ²,
    S2L = Σπ² log π::

        ∂logp/∂z_b = δ_bk − π_b ;  ∂H/∂z_b = −π_b (log π_b + H) ;
        ∂S2/∂z_b = 2π_b (π_b − S2) ;  ∂S2L/∂z_b = π_b (2π_b log π_b + π_b − 2·S2L − S2),

    collected as G_b = π_b (c0 + c1 log π_b + π_b (c2 + c3 log π_b)) + g_logp δ_bk. ``grads`` are
    the upstream gradients ``(g_logp, g_h, g_s2, g_s2l)`` ``[R]`` (``None`` where none flows; at
    least one is given), ``saved`` the forward's ``(H, S2, S2L)`` ``[R]`` (``None`` where not
    computed). Multiply by 1/τ for the gradient w.r.t. the raw logits."""
    g_logp, g_h, g_s2, g_s2l = grads
    h, s2, s2l = saved
    c0 = torch.zeros_like(next(g for g in grads if g is not None))
    c1 = c2 = c3 = None
    if g_logp is not None:
        c0 = c0 - g_logp
    if g_h is not None:
        c0 = c0 - g_h * h
        c1 = -g_h
    if g_s2 is not None:
        c0 = c0 - 2 * g_s2 * s2
        c2 = 2 * g_s2
    if g_s2l is not None:
        c0 = c0 - g_s2l * (2 * s2l + s2)
        c2 = g_s2l if c2 is None else c2 + g_s2l
        c3 = 2 * g_s2l
    return c0, c1, c2, c3
