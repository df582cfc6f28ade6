"""SIREN: selective entropy regularisation (arXiv 2509.25133, *Rethinking Entropy
Regularization in Large Reasoning Models*; docs/methods.md "Entropy controls from the field").

A plain entropy bonus over the whole vocabulary and every position explodes the entropy of a
reasoning model. SIREN confines it with two masks and replaces the bonus by a self-anchored
penalty:

1. **top-p mask** (over the vocabulary): the entropy is that of the nucleus — the smallest set
   of tokens whose probability mass reaches ``top_p`` — renormalised (:func:`topp_entropy`);
2. **peak-entropy mask** (over positions): only the tokens of a response whose top-p entropy
   exceeds that response's ``quantile`` (0.8: its top 20 %) take part;
3. **self-anchored form**: ``loss += c · (H̄ − H_anchor)²`` where H̄ aggregates the selected
   entropies and ``H_anchor`` is the policy's own initial value of H̄.

The top-p entropy needs the full distribution at each position; the method reads it from
``batch.entropy`` (with grad), which for SIREN must be ``topp_entropy(logits, top_p)`` (with
``top_p = 1`` it is the ordinary entropy): see :attr:`Siren.entropy_top_p`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from entflow.core.nucleus import topp_entropy  # noqa: F401  (part of this module's interface)
from entflow.methods.base import NONNEG, LossContext, Method, interval, one_of, optional, param, register


def response_quantile(x: torch.Tensor, valid: torch.Tensor, q: float) -> torch.Tensor:
    """Per-response ``q``-quantile (linear interpolation, as ``torch.quantile``) of ``x`` over
    each row's valid tokens → ``[N, 1]`` (NaN for a row without a valid token). Detached, float64."""
    xd = x.detach().to(torch.float64).masked_fill(~valid, math.nan)
    return torch.nanquantile(xd, q, dim=-1, keepdim=True)


AGGS = one_of("seq-mean-token-mean", "token-mean")


@register
@dataclass(repr=False)
class Siren(Method):
    """SIREN: self-anchored entropy penalty on the top-p entropy of each response's peak tokens.

    With ``H_t`` = ``batch.entropy`` (with grad; for SIREN the top-p entropy, see
    :func:`topp_entropy`): a token is *selected* when it is valid and ``H_t`` exceeds the
    ``quantile`` of its response's valid-token entropies (detached, linear interpolation).
    ``H̄`` = mean over responses with a selected token of their selected tokens' mean
    (``agg="seq-mean-token-mean"``, the official default) or the mean over all selected tokens
    (``"token-mean"``). The term is ``c · (H̄ − a)²``, 0 when no token is selected.

    The anchor ``a`` is ``anchor`` when given; otherwise (*self-anchored*) the value of H̄ at the
    first call that selects a token, stored as state (``anchor_value``) — on that first,
    on-policy call the term and its gradient are 0, as in the official code where the anchor is
    the first rollout's own H̄. The square is taken per call (per micro-batch), as the official
    code does; it is not split over micro-batches by ``prepare_statistics``.
    """

    name = "siren"
    formula = "loss += c·(H̄_sel − H_anchor)²,  sel = valid ∧ H_t > q-quantile of its response,  H = top-p entropy"
    paper = "arXiv 2509.25133 (SIREN) §3: top-p mask, peak-entropy mask, self-anchored regularisation"
    needs = ("entropy",)
    state_fields = ("anchor_value",)

    c: float = param(0.005, NONNEG, "coefficient c of the self-anchored term")
    top_p: float = param(0.8, interval(0, 1, lo_open=True), "top-p mask mass (entropy = topp_entropy(logits, top_p))")
    quantile: float = param(0.8, interval(0, 1, hi_open=True), "peak-entropy mask: per-response quantile to exceed")
    anchor: float | None = param(None, optional(NONNEG), "fixed anchor H_anchor; None = self-anchored (first H̄)")
    agg: str = param("seq-mean-token-mean", AGGS, "how H̄ averages the selected entropies")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.anchor_value: torch.Tensor | None = None  # self-anchored H_anchor (0-d; NaN until set)

    @property
    def entropy_top_p(self) -> float:
        """The nucleus mass the batch's ``entropy`` must be computed with:
        ``entropy = topp_entropy(logits, method.entropy_top_p, temperature)`` (1.0 = full entropy)."""
        return self.top_p

    def selection(self, H: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Boolean ``[N, T]``: valid tokens above their response's ``quantile`` (peak-entropy mask)."""
        thr = response_quantile(H, valid, self.quantile)
        return valid & (H.detach().to(torch.float64) > thr)  # NaN threshold (empty row): nothing

    def loss_terms(self, ctx: LossContext, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        H = ctx.batch.require("entropy", "siren")
        sel = self.selection(H, ctx.valid)
        half = H.dtype in (torch.float16, torch.bfloat16)
        Hf = torch.where(sel, H, torch.zeros_like(H)).to(torch.float32 if half else H.dtype)
        s = sel.to(Hf.dtype)
        if self.agg == "seq-mean-token-mean":  # arXiv 2509.25133 official code: entropy_agg_mode
            k = s.sum(-1)
            row = Hf.sum(-1) / k.clamp(min=1)
            has = (k > 0).to(Hf.dtype)
            n = has.sum()
            H_bar = (row * has).sum() / n.clamp(min=1)
        else:
            n = s.sum()
            H_bar = Hf.sum() / n.clamp(min=1)
        any_sel = n > 0
        if self.anchor is not None:
            a = torch.full_like(H_bar.detach(), self.anchor)
        else:
            cand = torch.where(any_sel, H_bar.detach(), torch.full_like(H_bar.detach(), math.nan))
            prev = self.anchor_value
            a = cand if prev is None else torch.where(torch.isnan(prev.to(cand)), cand, prev.to(cand))
            self.anchor_value = a
        on = any_sel & ~torch.isnan(a)
        a0 = torch.nan_to_num(a, nan=0.0)
        term = torch.where(on, self.c * (H_bar - a0) ** 2, torch.zeros_like(H_bar))  # 2509.25133: c·(H − H_anc)²
        ctx.metrics["siren/entropy"] = H_bar.detach()
        ctx.metrics["siren/anchor"] = a0
        ctx.metrics["siren/selected_frac"] = s.sum() / ctx.valid.sum().clamp(min=1)
        ctx.metrics["siren/top_p"] = self.top_p
        return {"siren/loss": term}
