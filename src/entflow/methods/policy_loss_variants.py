"""Per-token policy losses from the field since the five papers: CISPO, GSPO, SAPO, CE-GPPO, Archer.

All five replace PPO-clip's per-token loss ``ℓ_t`` (the ``token_loss`` hook, so at most one of
them per composition); everything else — advantages, token weights of other parts, the loss's
aggregation ``agg`` and its denominator, loss terms, metrics — is ``policy_loss``'s own. They
differ in what they do with the importance ratio ``r_t = exp(logp_t − old_logp_t)``:

=========  ==================================================================================
cispo      keeps every token's gradient, truncates the (detached) IS weight: −sg(clip(r))·A·log π
gspo       one ratio per response, the geometric mean s_i = exp(mean_t log r_t), clipped per response
sapo       a smooth gate σ(τ(r−1))·4/τ instead of the hard clip (τ by the sign of A)
ce_gppo    PPO-clip, but tokens outside the clip keep a bounded gradient β·(1±ε)·A·∇log π
archer     PPO-clip with a looser clip and a weaker KL on each response's high-entropy tokens
=========  ==================================================================================

They live in one module because they share the ratio with its gradient (:func:`log_ratio`),
the padding rule (fill before ``exp`` so garbage in padding never reaches the gradient) and the
reading of the clip bounds. Readings and differences from the peer libraries:
docs/methods.md, "Methods from the field since the five papers".
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch

from entflow.core.ppo import NO_CLIP, ppo_clip_loss
from entflow.methods._util import valid_mean
from entflow.methods.base import NONNEG, LossContext, Method, interval, param, register

# verl's numerical guard on the log-ratio (core_algos.py, cispo / sapo): exp stays finite in
# float32, and the gradient it removes (|log r| > 20) is that of weights clipped or saturated anyway
LOG_RATIO_BOUND = 20.0
# verl's guard on GSPO's log sequence ratio (s_i ≤ e^10); docs/methods.md says when it acts
GSPO_LOG_RATIO_MAX = 10.0
POSITIVE = interval(0, lo_open=True)


def log_ratio(ctx: LossContext) -> torch.Tensor:
    """``log r_t = logp_t − old_logp_t`` **with grad** through ``logp``, ``[N, T]``; 0 off-mask
    (padding filled before the difference, so inf or NaN there never reaches the gradient)."""
    b, valid = ctx.batch, ctx.valid
    return b.logp.masked_fill(~valid, 0) - b.old_logp.detach().masked_fill(~valid, 0)


def row_quantile(values: torch.Tensor, valid: torch.Tensor, q: float) -> torch.Tensor:
    """The ``q`` quantile of each row's valid entries of ``values`` ``[N, T]`` → ``[N]``, linear
    interpolation between order statistics (as ``torch.quantile``); 0 for a row without a valid
    entry. One batched sort along T, no host sync."""
    ordered = values.masked_fill(~valid, torch.inf).sort(dim=-1).values  # valid entries first, ascending
    last = (valid.sum(-1) - 1).clamp(min=0)
    pos = q * last.to(torch.float64)
    lo = torch.floor(pos).long()
    hi = torch.minimum(lo + 1, last)
    v_lo = ordered.gather(-1, lo.unsqueeze(-1)).squeeze(-1)
    v_hi = ordered.gather(-1, hi.unsqueeze(-1)).squeeze(-1)
    frac = (pos - lo.to(torch.float64)).to(values.dtype)
    out = torch.where(hi > lo, v_lo + frac * (v_hi - v_lo), v_lo)
    return torch.where(valid.any(-1), out, torch.zeros_like(out))


def _frac(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Fraction of the valid tokens where ``x`` holds, a 0-d float64 tensor (0 if none)."""
    return (x & valid).sum().to(torch.float64) / valid.sum().clamp(min=1)


@register
@dataclass(repr=False)
class CISPO(Method):
    """CISPO (MiniMax-M1): REINFORCE with a clipped, detached importance-sampling weight.

    ``ℓ_t = −sg(r̂_t)·A_t·log π_t``, ``r̂_t = clip(r_t, 1 − ε_low, 1 + ε_high)`` with the loss's
    ``clip_low`` / ``clip_high``. The gradient w.r.t. ``logp`` is ``−r̂_t·A_t``: no token loses
    its gradient (PPO-clip zeroes it outside the clip), large ratios only stop growing the weight.
    The paper sets no lower bound (``clip_low=1`` here: 1 − ε_low = 0) and tunes ε_high; TRL's
    ``epsilon_high=E`` (ε_max, recommended 5) is ``clip_low=1, clip_high=E−1``. Dual clip does not
    apply (nothing to cap: the loss is linear in log π). ``cispo/weight_clipped_frac``: share of
    valid tokens whose weight was truncated.
    """

    name = "cispo"
    formula = "ℓ_t = −sg(clip(r_t, 1−ε_low, 1+ε_high))·A_t·log π_t   (every token keeps its gradient)"
    paper = "MiniMax-M1, arXiv 2506.13585 §3.1 (CISPO objective, r̂ = clip(r, 1−ε_low^IS, 1+ε_high^IS))"

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        valid = ctx.valid
        r = torch.exp(log_ratio(ctx).detach().clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
        weight = r.clamp(1 - ctx.clip_low, 1 + ctx.clip_high)  # r̂ (arXiv 2506.13585 §3.1), detached
        ctx.metrics["cispo/weight_clipped_frac"] = _frac(weight != r, valid)
        ctx.metrics["cispo/weight_mean"] = valid_mean(weight, valid)
        logp = ctx.batch.logp.masked_fill(~valid, 0)
        return -weight * ctx.adv * logp  # J_CISPO = sg(r̂)·Â·log π (arXiv 2506.13585 §3.1)


@register
@dataclass(repr=False)
class GSPO(Method):
    """GSPO: one importance ratio per response, clipped per response.

    ``s_i = exp((1/|y_i|)·Σ_t log r_{i,t})`` (geometric mean over the response's valid tokens,
    |y_i| = their number). The token loss is the GSPO-token form
    ``ℓ_{i,t} = max(−A_{i,t}·s_{i,t}, −A_{i,t}·clip(s_{i,t}, 1 − ε_low, 1 + ε_high))`` with
    ``s_{i,t} = sg(s_i)·π_{i,t}/sg(π_{i,t})``: value s_i, gradient s_i·∇log π_{i,t}. With one
    advantage per response (GRPO) and any aggregation that weighs a response's tokens equally
    (all three), its gradient is exactly GSPO's sequence-level one. The clip bounds are the loss's
    ``clip_low`` / ``clip_high`` — the paper uses (3e-4, 4e-4), far tighter than PPO's 0.2.
    No dual clip (paper, verl). ``log s_i`` is capped at 10 as in verl (numerical guard).
    ``gspo/clip_frac``: share of valid tokens whose response ratio is clipped (no gradient).
    """

    name = "gspo"
    formula = (
        "s_i = exp(mean_t log r_i,t);  ℓ_i,t = max(−A·s_i,t, −A·clip(s_i,t, 1−ε_low, 1+ε_high)),  "
        "s_i,t = sg(s_i)·π/sg(π)"
    )
    paper = "GSPO, arXiv 2507.18071 §4.1 (s_i, J_GSPO) and §4.3 (GSPO-token)"

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        valid = ctx.valid
        m = valid.to(ctx.adv.dtype)
        lr = log_ratio(ctx)
        # log s_i = mean over the response's valid tokens (arXiv 2507.18071 §4.1), detached
        log_s = (lr.detach() * m).sum(-1) / m.sum(-1).clamp(min=1)
        logp = ctx.batch.logp.masked_fill(~valid, 0)
        # s_i,t = sg(s_i)·π_t/sg(π_t) (arXiv 2507.18071 §4.3); value s_i, gradient s_i·∇log π_t
        s = torch.exp((logp - logp.detach() + log_s.unsqueeze(-1)).clamp(max=GSPO_LOG_RATIO_MAX))
        A = ctx.adv
        clipped = s.clamp(1 - ctx.clip_low, 1 + ctx.clip_high)
        sd = s.detach()
        cut = ((A > 0) & (sd > 1 + ctx.clip_high)) | ((A < 0) & (sd < 1 - ctx.clip_low))
        ctx.metrics["gspo/clip_frac"] = _frac(cut, valid)
        ctx.metrics["gspo/log_seq_ratio_mean"] = valid_mean(log_s.unsqueeze(-1).expand_as(A), valid)
        return torch.maximum(-A * s, -A * clipped)  # J_GSPO-token (arXiv 2507.18071 §4.3)


@register
@dataclass(repr=False)
class SAPO(Method):
    """SAPO: a soft, temperature-controlled gate instead of PPO's hard clip.

    ``ℓ_t = −f(r_t)·A_t``, ``f(r) = σ(τ(r − 1))·4/τ``, ``τ = tau_pos`` where A > 0, else
    ``tau_neg``. The gradient w.r.t. ``logp`` is ``−4·σ(1 − σ)·r·A`` (σ at τ(r−1)): equal to
    GRPO's ``−r·A`` at r = 1 and decaying smoothly as r leaves 1, faster for larger τ
    (τ_neg > τ_pos damps negative tokens harder, the paper's choice). There is no hard clip, so
    the method fixes the clip bounds to none (§8 clip statistics read 0; a clip setter after it
    in a composition is refused). The paper aggregates ``seq-mean-token-mean``; entflow uses the
    loss's ``agg`` (pass ``agg="seq-mean-token-mean"`` to reproduce it).
    """

    name = "sapo"
    formula = "ℓ_t = −σ(τ(r_t − 1))·(4/τ)·A_t,  τ = τ_pos if A_t > 0 else τ_neg   (no hard clip)"
    paper = "SAPO, arXiv 2511.20347 §3 (soft gate f_i,t, asymmetric temperatures)"

    tau_pos: float = param(1.0, POSITIVE, "τ_pos: gate temperature on tokens with A > 0")
    tau_neg: float = param(1.05, POSITIVE, "τ_neg: gate temperature on tokens with A ≤ 0")

    def clip_bounds(self) -> tuple[float, float]:
        return (NO_CLIP, NO_CLIP)  # the gate replaces the clip

    def pins_clip(self) -> bool:
        return True

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        A = ctx.adv
        r = torch.exp(log_ratio(ctx).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
        tau = torch.full_like(A, self.tau_neg).masked_fill(A > 0, self.tau_pos)  # in A's dtype
        gate = torch.sigmoid(tau * (r - 1)) * (4 / tau)  # f(r) = σ(τ(r−1))·4/τ (arXiv 2511.20347 §3)
        ctx.metrics["sapo/gate_mean"] = valid_mean(gate, ctx.valid)
        return -gate * A


@register
@dataclass(repr=False)
class CEGPPO(Method):
    """CE-GPPO: PPO-clip whose clipped tokens keep a bounded gradient.

    Inside the clip (and on the sides PPO never clips) ``ℓ_t = −r_t·A_t``. Outside it, with
    ``δ_t = r_t/sg(r_t)`` (value 1, gradient ∇log π_t):

    - A < 0 and r < 1 − ε_low: ``ℓ_t = −β₁·(1 − ε_low)·δ_t·A_t``
    - A > 0 and r > 1 + ε_high: ``ℓ_t = −β₂·(1 + ε_high)·δ_t·A_t``

    so the gradient there is ``−β·(1 ± ε)·A_t`` (PPO-clip: 0), never larger than at the clip
    boundary when β ≤ 1. β₁ (negative tokens) ≤ 1 lets negative low-probability tokens fall
    slower; β₂ scales the positive side. The loss's dual clip, if given, caps A < 0 tokens as in
    PPO (official code). ``ce_gppo/frac_low`` / ``frac_high``: share of valid tokens on each
    preserved side.
    """

    name = "ce_gppo"
    formula = (
        "ℓ_t = −r·A inside the clip;  −β₁(1−ε_low)·(r/sg r)·A if A<0, r<1−ε_low;  "
        "−β₂(1+ε_high)·(r/sg r)·A if A>0, r>1+ε_high"
    )
    paper = "CE-GPPO, arXiv 2509.20712 §4 (gradient-preserving clipping with β₁, β₂); official code"

    beta1: float = param(0.75, NONNEG, "β₁: scale of the gradient kept on A < 0 tokens below 1 − ε_low")
    beta2: float = param(1.0, NONNEG, "β₂: scale of the gradient kept on A > 0 tokens above 1 + ε_high")

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        A, valid = ctx.adv, ctx.valid
        lr = log_ratio(ctx)
        r = torch.exp(lr)
        rd = r.detach()
        low = (A < 0) & (rd < 1 - ctx.clip_low)
        high = (A > 0) & (rd > 1 + ctx.clip_high)
        delta = torch.exp(lr - lr.detach())  # r/sg(r): value 1, gradient ∇log π (arXiv 2509.20712 §4)
        # an infinite bound never clips; a finite factor keeps 0·inf out of the unselected branch's gradient
        f_low = self.beta1 * (1 - ctx.clip_low) if math.isfinite(ctx.clip_low) else 0.0
        f_high = self.beta2 * (1 + ctx.clip_high) if math.isfinite(ctx.clip_high) else 0.0
        out = torch.where(low, -f_low * delta * A, torch.where(high, -f_high * delta * A, -r * A))
        if ctx.dual_clip is not None:  # dual clip on A < 0, as PPO (official code)
            out = torch.where(A < 0, torch.minimum(out, -A * ctx.dual_clip), out)
        ctx.metrics["ce_gppo/frac_low"] = _frac(low, valid)
        ctx.metrics["ce_gppo/frac_high"] = _frac(high, valid)
        return out


@register
@dataclass(repr=False)
class Archer(Method):
    """Archer: dual-token constraints by a per-response entropy quantile.

    In each response, tokens with ``H_t > Q_ρ`` (the ρ quantile of that response's valid-token
    entropies, linear interpolation as ``torch.quantile``) are high-entropy ("reasoning")
    tokens, the rest (``H_t ≤ Q_ρ``) low-entropy ("knowledge") tokens. Low-entropy tokens use
    the loss's PPO clip (``clip_low`` / ``clip_high``, dual clip if given) and KL coefficient
    ``kl_coef``; high-entropy tokens the looser ``high_clip_low`` / ``high_clip_high`` and the
    weaker ``high_kl_coef``. The KL is GRPO's k3 to the reference, ``k3 = exp(ref − logp) −
    (ref − logp) − 1`` with grad, added as ``agg(β_t·k3_t)``. H: old_entropy first, else entropy
    (detached). ``archer/high_frac``: share of valid tokens classified high-entropy.
    """

    name = "archer"
    formula = "H_t > Q_ρ(H of its response): clip (ε_h_low, ε_h_high), KL β_h;  else: the loss's clip, KL β"
    paper = "Archer, arXiv 2507.15778 §3 (dual-token constraints); official code (ArcherCodeR)"
    needs = ("ref_logp",)
    reads_entropy = True

    quantile: float = param(
        0.8, interval(0, 1, lo_open=True, hi_open=True), "ρ: tokens above their response's ρ entropy quantile are high"
    )
    high_clip_low: float = param(0.5, interval(0, 1), "ε_low on high-entropy tokens (the others: the loss's clip_low)")
    high_clip_high: float = param(0.5, NONNEG, "ε_high on high-entropy tokens (the others: the loss's clip_high)")
    kl_coef: float = param(0.001, NONNEG, "β: KL-to-reference coefficient on low-entropy tokens")
    high_kl_coef: float = param(0.0, NONNEG, "β_h: KL-to-reference coefficient on high-entropy tokens")

    def high_entropy(self, ctx: LossContext) -> torch.Tensor:
        """Boolean ``[N, T]``: valid tokens above their response's ρ entropy quantile."""
        valid = ctx.valid
        H = ctx.batch.entropy_for_reading(self.name)
        q = row_quantile(H, valid, self.quantile)
        return (H > q.unsqueeze(-1)) & valid  # arXiv 2507.15778 §3: response-level entropy quantile

    def _classes(self, ctx: LossContext) -> torch.Tensor:
        """:meth:`high_entropy` once per loss evaluation: token_loss and loss_terms see one ctx."""
        cached = self.__dict__.get("_high")
        if cached is not None and cached[0]() is ctx:
            return cached[1]
        high = self.high_entropy(ctx)
        self.__dict__["_high"] = (weakref.ref(ctx), high)  # a weak reference: no batch kept alive
        return high

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        high = self._classes(ctx)
        ratio = torch.exp(log_ratio(ctx))
        loose = ppo_clip_loss(ctx.adv, ratio, self.high_clip_low, self.high_clip_high, ctx.dual_clip)
        ctx.metrics["archer/high_frac"] = _frac(high, ctx.valid)
        return torch.where(high, loose, loss)  # looser clip on high-entropy tokens (arXiv 2507.15778 §3)

    def loss_terms(self, ctx: LossContext, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        b, valid = ctx.batch, ctx.valid
        high = self._classes(ctx)
        self.__dict__.pop("_high", None)  # loss_terms runs last in policy_loss: the method keeps nothing
        ref = b.require("ref_logp", self.name).detach()
        d = (ref - b.logp).masked_fill(~valid, 0)
        k3 = torch.exp(d) - d - 1  # GRPO's k3 estimator of KL(π‖π_ref)
        beta = torch.full_like(k3, self.kl_coef).masked_fill(high, self.high_kl_coef)
        ctx.metrics["archer/kl"] = valid_mean(k3, valid)
        return {"archer/kl_loss": agg(beta * k3)}  # weaker KL on high-entropy tokens (arXiv 2507.15778 §3)
