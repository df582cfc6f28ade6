"""Random batches and independent reference computations for the method tests.

Nothing here imports entflow's helpers: the references are written from docs/design.md §4–6 directly,
with explicit loops where that is clearer.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

import entflow as ef

D = torch.float64


def make_batch(
    gen: torch.Generator,
    n: int = 8,
    t: int = 10,
    group: int = 4,
    vocab: int = 6,
    off_policy: float = 0.3,
    logit_scale: float = 1.5,
    adv: torch.Tensor | None = None,
    **extra,
) -> ef.TokenBatch:
    """A float64 batch with ragged masks, rewards/groups, entropies and ref_logp.

    ``logp`` is a leaf with grad; ``entropy`` too (its own leaf). ``advantages`` are the GRPO
    advantages of the rewards unless ``adv`` is given.
    """
    logits = torch.randn(n, t, vocab, generator=gen, dtype=D) * logit_scale
    ids = torch.randint(0, vocab, (n, t), generator=gen)
    logpi = torch.log_softmax(logits, -1)
    logp = logpi.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    H = -(logpi.exp() * logpi).sum(-1)
    lengths = torch.randint(2, t + 1, (n,), generator=gen)
    lengths[0] = t
    mask = (torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)).to(D)
    rewards = torch.randint(0, 2, (n,), generator=gen).to(D)
    gi = torch.arange(n) // group
    if adv is None:
        adv = ref_grpo(rewards, gi)
    fields = dict(
        logp=logp.detach().clone().requires_grad_(True),
        old_logp=(logp + off_policy * torch.randn(n, t, generator=gen, dtype=D)).detach(),
        advantages=adv,
        mask=mask,
        entropy=H.detach().clone().requires_grad_(True),
        old_entropy=(H + 0.05 * torch.rand(n, t, generator=gen, dtype=D)).detach(),
        ref_logp=(logp + 0.2 * torch.randn(n, t, generator=gen, dtype=D)).detach(),
        rewards=rewards,
        group_index=gi,
    )
    fields.update(extra)
    return ef.TokenBatch(**fields)


def rows(b: ef.TokenBatch, s: slice, **fields: Any) -> ef.TokenBatch:
    """The micro-batch of the rows ``s`` of ``b``: every tensor field (all ``[N, …]``) sliced, a field
    that is None stays None, ``step``, ``total_steps`` and ``validate`` are kept; ``fields`` replace."""
    sliced = {f.name: v[s] for f in dataclasses.fields(b) if isinstance(v := getattr(b, f.name), torch.Tensor)}
    return dataclasses.replace(b, **(sliced | fields))


def ref_grpo(R: torch.Tensor, gi: torch.Tensor) -> torch.Tensor:
    """GRPO advantages with explicit loops (unbiased std, + 1e-6; equal rewards → 0)."""
    A = torch.zeros_like(R, dtype=D)
    for g in gi.unique().tolist():
        idx = (gi == g).nonzero().squeeze(1)
        r = R[idx].to(D)
        mu = r.mean()
        sd = r.std() if len(idx) > 1 else torch.tensor(0.0, dtype=D)
        for i in idx.tolist():
            A[i] = 0.0 if sd == 0 else (R[i] - mu) / (sd + 1e-6)
    return A


def token_adv(b: ef.TokenBatch) -> torch.Tensor:
    a = b.advantages.detach()
    return a.unsqueeze(-1).expand_as(b.logp).clone() if a.dim() == 1 else a.clone()


def ref_indicator(A: torch.Tensor, r: torch.Tensor, lo: float = 0.2, hi: float = 0.2) -> torch.Tensor:
    cut = ((A > 0) & (r > 1 + hi)) | ((A < 0) & (r < 1 - lo))
    return (~cut).to(D)


def ref_estimate(b: ef.TokenBatch, kind: str, lo: float = 0.2, hi: float = 0.2) -> torch.Tensor:
    """ΔH_t of docs/design.md §5 by hand (old_entropy first), 0 off-mask."""
    A = token_adv(b)
    lp = b.logp.detach()
    r = torch.exp(lp - b.old_logp)
    w = ref_indicator(A, r, lo, hi) * A * r
    p = lp.exp()
    H = b.old_entropy if b.old_entropy is not None else b.entropy.detach()
    m = b.mask.bool()
    if kind == "steer":
        e = -w * (1 - p) * (lp + H)
    elif kind == "opefo":
        e = -w * (1 - p) ** 2 * (lp + H)
    elif kind == "sampled_logit":
        e = -w * p * (1 - p) * (lp + H)
    elif kind == "cov":
        e = -ref_cov(b)
    else:
        raise ValueError(kind)
    return torch.where(m, e, torch.zeros_like(e))


def ref_cov(b: ef.TokenBatch) -> torch.Tensor:
    """(logp − mean logp)(A − mean A), means over valid tokens, 0 elsewhere."""
    m = b.mask.bool()
    A = token_adv(b)
    lp = b.logp.detach()
    mlp = lp[m].mean()
    ma = A[m].mean()
    c = (lp - mlp) * (A - ma)
    return torch.where(m, c, torch.zeros_like(c))


def loss_grad(b: ef.TokenBatch, method) -> tuple[ef.LossOutput, torch.Tensor]:
    """policy_loss (GRPO's LossSpec) and d loss / d logp (logp's grad reset first)."""
    b.logp.grad = None
    out = ef.policy_loss(b, method)
    (g,) = torch.autograd.grad(out.loss, b.logp, retain_graph=False, allow_unused=True)
    return out, (torch.zeros_like(b.logp) if g is None else g)


def ppo_grad_weight(b: ef.TokenBatch, lo: float = 0.2, hi: float = 0.2) -> torch.Tensor:
    """d ℓ_t / d logp_t for PPO-clip: −I_t·A_t·r_t."""
    A = token_adv(b)
    r = torch.exp(b.logp.detach() - b.old_logp)
    return -ref_indicator(A, r, lo, hi) * A * r


def floor_count(ratio: float, n: int) -> int:
    return max(math.floor(ratio * n), 1)


def mask_of(lengths: list[int], t: int) -> torch.Tensor:
    """``[N, t]`` float64 mask: row i has its first ``lengths[i]`` tokens valid."""
    return (torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]).to(D)
