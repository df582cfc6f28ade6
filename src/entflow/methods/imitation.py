"""Methods that add a likelihood (supervised) term to the policy loss: VAPO's positive-example NLL
and CHORD's mix of GRPO on the policy's samples with supervised fine-tuning on expert rows.

==============  ================================================================================
positive_nll    L = L_PPO + μ·NLL over the valid tokens of responses with reward > 0 (one token
                mean, whatever the loss's aggregation; 0 when no response is correct)
chord           L = (1 − μ)·L_GRPO(policy rows) + μ·L_SFT(expert rows), μ on a warm-up/cosine
                schedule over ``TokenBatch.step``; the SFT token weight φ = p(1 − p) (optional)
==============  ================================================================================

CHORD's expert rows come in ``TokenBatch.expert_mask`` ``[N]`` (bool): reference solutions the
task supplies, appended to the batch by the host. They leave the GRPO loss and its denominator
(the ``token_mask`` hook), and the SFT term is aggregated over them alone, with the loss's
aggregation (docs/methods.md, "CHORD").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from entflow.core.distributed import Reducer
from entflow.core.ppo import aggregate, aggregation_count
from entflow.methods.base import NONNEG, UNIT, LossContext, Method, integer, one_of, param, register


def _reduce_dtype(x: torch.Tensor) -> torch.Tensor:
    """Half-precision values are summed in float32 (as the loss's own aggregation)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


@register
@dataclass(repr=False)
class PositiveNLL(Method):
    """VAPO's positive-example NLL: ``L = L_PPO + μ·NLL``, ``NLL = −mean log π_t`` over the valid
    tokens of the responses whose reward is > 0 (arXiv 2504.05118, Eq. 10 as NeMo-RL cites it).

    The NLL is one token mean over those tokens whatever the loss's aggregation, and 0 when no
    response is correct (NeMo-RL's ``positive_example_nll_weight``). Its denominator is the
    number of such tokens in the call's batch, or in the whole optimisation batch with
    ``prepare_statistics`` (NeMo-RL takes it per micro-batch). Reads ``rewards`` in the loss.
    """

    name = "positive_nll"
    formula = "L = L_PPO + μ·(−Σ_{t: R_i > 0} log π_t / #{t: R_i > 0});  0 when no R_i > 0"
    paper = "VAPO, arXiv 2504.05118 (positive-example LM loss, Eq. 10); NeMo-RL positive_example_nll_weight"
    needs = ("rewards",)

    positive_example_nll_weight: float = param(0.1, NONNEG, "μ, the weight of the NLL term (VAPO: 0.1)")

    def _positive(self, ctx: LossContext) -> torch.Tensor:
        rewards = ctx.batch.require("rewards", self.name)
        return ctx.valid & (rewards > 0).unsqueeze(-1)

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]]:
        count = reducer.sum([self._positive(c).sum().to(torch.float64) for c in ctxs])
        return [{"count": count} for _ in ctxs]

    def loss_terms(self, ctx: LossContext, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        pos = self._positive(ctx)
        logp = _reduce_dtype(ctx.batch.logp)
        total = torch.where(pos, logp, torch.zeros_like(logp)).sum()
        count = ctx.stat(self)["count"].to(logp.dtype)
        nll = -total / count.clamp(min=1)  # VAPO's positive-example LM loss: the correct responses' NLL
        ctx.metrics["positive_nll/nll"] = nll.detach()
        ctx.metrics["positive_nll/n_tokens"] = count.detach()
        return {"positive_nll/loss": self.positive_example_nll_weight * nll}


def mu_schedule(step: int, warmup_steps: int, decay_steps: int, peak: float, valley: float) -> float:
    """CHORD's μ at ``step``: linear warm-up 0 → peak over ``warmup_steps``, then a cosine decay
    peak → valley over ``decay_steps``, then ``valley`` (CHORD-μ, arXiv 2508.11408; Trinity-RFT's
    ``mu_schedule_function``, same integers in, same value out)."""
    if step < warmup_steps:
        return step / warmup_steps * peak
    if step >= warmup_steps + decay_steps:
        return valley
    cosine = 0.5 * (1 + math.cos(math.pi * (step - warmup_steps) / decay_steps))
    return (peak - valley) * cosine + valley


@register
@dataclass(repr=False)
class CHORD(Method):
    """CHORD: ``L = (1 − μ)·L_GRPO + μ·L_SFT`` (arXiv 2508.11408: the hybrid loss, and CHORD-φ's token weight).

    ``L_GRPO`` is the loss of the rest of the method (PPO-clip by default) over the rows that are
    not expert rows: the expert rows leave it and its denominator. ``L_SFT = agg(−φ_t·log π_t)``
    over the expert rows' valid tokens, with the loss's aggregation and its own denominator (their
    tokens or rows), ``φ_t = sg(p_t(1 − p_t))`` (``enable_phi_function``, CHORD-φ) or 1 (plain
    SFT). μ follows :func:`mu_schedule` of ``TokenBatch.step``. With ``seq-mean-token-sum-norm``
    both terms divide by the batch's N·T_max (Trinity-RFT divides each by its own rows).

    Needs ``expert_mask`` ``[N]`` (bool). A batch with no expert row (a micro-batch without one,
    say) gets an SFT term of 0 and still the (1 − μ) factor on the GRPO part, as Trinity-RFT's
    ``MIXCHORDPolicyLossFn``.
    """

    name = "chord"
    formula = "L = (1 − μ(step))·L_GRPO(rows ∉ expert) + μ(step)·agg_{expert rows}(−sg(φ_t)·log π_t),  φ = p(1 − p)"
    paper = "CHORD, arXiv 2508.11408 (L_Hybrid; CHORD-φ: φ = p(1 − p)); Trinity-RFT mix_chord, ms-swift"
    needs = ("expert_mask",)
    reads_step = True

    mu_peak: float = param(0.1, UNIT, "μ after the warm-up (Trinity-RFT: 0.1)")
    mu_valley: float = param(0.1, UNIT, "μ after the decay (Trinity-RFT: 0.1)")
    mu_warmup_steps: int = param(0, integer(0), "steps of linear warm-up of μ from 0 to mu_peak")
    mu_decay_steps: int = param(0, integer(0), "steps of cosine decay of μ from mu_peak to mu_valley")
    enable_phi_function: bool = param(True, one_of(True, False), "weight SFT tokens by φ = p(1 − p) (CHORD-φ)")

    def mu(self, step: int) -> float:
        return mu_schedule(step, self.mu_warmup_steps, self.mu_decay_steps, self.mu_peak, self.mu_valley)

    def _expert_tokens(self, ctx: LossContext) -> torch.Tensor:
        """The expert rows' valid tokens, bool ``[N, T]`` (before any part dropped them)."""
        expert = ctx.batch.require("expert_mask", self.name).to(torch.bool).unsqueeze(-1)
        valid = ctx.valid if ctx.dropped is None else ctx.valid | ctx.dropped
        return valid & expert

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]]:
        count = reducer.sum([aggregation_count(self._expert_tokens(c), c.agg) for c in ctxs])
        return [{"sft_denominator": count} for _ in ctxs]

    def token_mask(self, ctx: LossContext) -> torch.Tensor:
        expert = ctx.batch.require("expert_mask", self.name).to(torch.bool)
        return (~expert).unsqueeze(-1).expand_as(ctx.valid)  # expert rows leave the GRPO loss

    def token_weights(self, ctx: LossContext) -> torch.Tensor:
        return torch.full_like(ctx.adv, 1 - self.mu(ctx.batch.step))

    def loss_terms(self, ctx: LossContext, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        mu = self.mu(ctx.batch.step)
        tokens = self._expert_tokens(ctx)
        logp = ctx.batch.logp.masked_fill(~tokens, 0)
        if self.enable_phi_function:
            p = logp.detach().exp()
            phi = p * (1 - p)  # CHORD-φ (arXiv 2508.11408): φ(p) = p(1 − p), detached
            per_token = -phi * logp
        else:
            per_token = -logp
        sft = aggregate(per_token, tokens, ctx.agg, ctx.max_len, ctx.stat(self)["sft_denominator"])
        ctx.metrics["chord/mu"] = mu
        ctx.metrics["chord/sft_loss"] = sft.detach()
        ctx.metrics["chord/expert_tokens"] = tokens.sum().to(torch.float64)
        return {"chord/sft_term": mu * sft}
