"""The online-softmax fold that every Triton kernel of entflow shares (imports Triton; load it lazily).

One fold, two callers: the from-logits kernel of :mod:`entflow.core._triton_kernels` folds ``[1, BLOCK]``
pieces of a row of logits, and the fused LM-head kernel of :mod:`entflow.core._triton_hidden_kernels`
folds ``[BM, BN]`` tiles that it has just multiplied on chip. Each row keeps, relative to its running
maximum ``m`` (docs/design.md §3; the recurrences of :mod:`entflow.core.hidden_stats`)::

    Z = Σ e_b,   A = Σ e_b d_b,   B = Σ e_b²,   C = Σ e_b² d_b,   e_b = exp(d_b), d_b = z_b − m

and a tile that raises ``m`` to ``m'`` rescales them with α = exp(m − m'), δ = m − m'::

    Z' = α Z + Σ e,  A' = α (A + δ Z) + Σ e·d,  B' = α² B + Σ e²,  C' = α² (C + δ B) + Σ e²·d

in float32. A −inf logit (a masked vocabulary entry, or a column past the end) gives e = 0 and stays
out of every product (no 0·(−inf)). After the last tile: entropy = log Z − A/Z, Σπ² = B/Z²,
Σπ² log π = C/Z² − log Z · Σπ², log-sum-exp = m + log Z.

Jitted when this module is imported. The kernel modules import it only on first use, so
``TRITON_INTERPRET=1`` set before that (the CPU tests, in a fresh process) takes effect.
"""

from __future__ import annotations

import triton
import triton.language as tl

NEG_INF = tl.constexpr(float("-inf"))


@triton.jit
def online_fold(
    x,
    m,
    z_sum,
    a_sum,
    b_sum,
    c_sum,
    WANT_H: tl.constexpr,
    WANT_P2: tl.constexpr,
    WANT_S2L: tl.constexpr,
):
    """Fold ``x`` ``[R, C]`` (scaled float32 logits, −inf where absent) into the rows' sums ``[R]``."""
    m_new = tl.maximum(m, tl.max(x, axis=1))
    m_ref = tl.where(m_new == NEG_INF, 0.0, m_new)  # all −inf so far: any finite reference
    alpha = tl.exp(m - m_ref)  # 0 while m = −inf
    delta = tl.where(m == NEG_INF, 0.0, m - m_ref)
    finite = x != NEG_INF
    d = tl.where(finite, x - m_ref[:, None], 0.0)
    e = tl.where(finite, tl.exp(d), 0.0)
    if WANT_H:  # before Z is updated: A uses the old Z
        a_sum = alpha * (a_sum + delta * z_sum) + tl.sum(e * d, axis=1)
    z_sum = alpha * z_sum + tl.sum(e, axis=1)
    if WANT_P2:
        ee = e * e
        if WANT_S2L:  # before B is updated: C uses the old B
            c_sum = alpha * alpha * (c_sum + delta * b_sum) + tl.sum(ee * d, axis=1)
        b_sum = alpha * alpha * b_sum + tl.sum(ee, axis=1)
    return m_new, z_sum, a_sum, b_sum, c_sum
