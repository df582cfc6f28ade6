"""entflow's metrics in TRL's logs: TRL's names where TRL reports the same quantity, process
means, and the per-generation-step averages a controller's ``update`` reads.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import torch

from entflow.core.batch import TokenBatch

# entflow metric → TRL's name for the same quantity (TRL's dashboards keep working)
TRL_METRIC_NAMES = {
    "entropy": "entropy",
    "clip/frac_high": "clip_ratio/high_mean",
    "clip/frac_low": "clip_ratio/low_mean",
    "kl_ref/kl": "kl",
    "pg_loss": "policy_loss",
}
# reported by TRL's Trainer itself (the scaled total loss), so not repeated from policy_loss
NOT_LOGGED = ("loss",)


def trl_named(metrics: dict[str, Any]) -> dict[str, float]:
    """``policy_loss`` metrics under TRL's names (others keep entflow's), plus TRL's
    ``clip_ratio/region_mean`` = low + high clip fraction."""
    named = {}
    for k, v in metrics.items():
        if k in NOT_LOGGED or v is None:
            continue
        named[TRL_METRIC_NAMES.get(k, k)] = float(v)
    if "clip_ratio/high_mean" in named:
        named["clip_ratio/region_mean"] = named["clip_ratio/high_mean"] + named["clip_ratio/low_mean"]
    return named


def sequence_clip_fractions(batch: TokenBatch, clip_low: float, clip_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per completion, the fraction of its valid tokens clipped below (r < 1 − ε_low, A < 0) and
    above (r > 1 + ε_high, A > 0), each ``[B]``: TRL's ``clip_ratio/low_min`` and
    ``clip_ratio/high_max`` are their minimum and maximum over the batch."""
    valid = batch.valid
    adv = batch.token_advantages()
    r = torch.exp(batch.logp.detach() - batch.old_logp.detach())
    n = valid.float().sum(-1).clamp(min=1)
    low = (((r < 1 - clip_low) & (adv < 0) & valid).float().sum(-1) / n).detach()
    high = (((r > 1 + clip_high) & (adv > 0) & valid).float().sum(-1) / n).detach()
    return low, high


def process_mean(values: dict[str, float], accelerator: Any) -> dict[str, float]:
    """Mean of each value over processes (keys missing on a process are left out of its mean)."""
    if accelerator.num_processes == 1:
        return values
    from accelerate.utils import gather_object

    keys = sorted(set(gather_object(list(values))))
    local = torch.tensor(
        [[values.get(k, 0.0), float(k in values)] for k in keys], dtype=torch.float64, device=accelerator.device
    )
    total = accelerator.reduce(local, reduction="sum")
    return {k: float(total[i, 0] / total[i, 1].clamp(min=1)) for i, k in enumerate(keys)}


class GenerationStepMetrics:
    """What ``method.update`` receives once per generation step: the mean of each loss metric
    over the step's micro-batches, and the rollout entropy over all tokens of the generation
    batch, both over all processes."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self.entropy_sum = 0.0
        self.entropy_count = 0.0

    def add(self, metrics: dict[str, Any], batch: TokenBatch, first_pass: bool) -> None:
        """One micro-batch's metrics; its entropy counts on the first pass over the generation
        batch only (later passes see the same tokens again)."""
        for k, v in metrics.items():
            if v is not None and not math.isnan(v):
                self.sums[k] += float(v)
                self.counts[k] += 1
        if first_pass:
            h = batch.entropy_for_reading("controller entropy")
            self.entropy_sum += float((h * batch.mask).sum())
            self.entropy_count += float(batch.mask.sum())

    def result(self, accelerator: Any, step: int) -> dict[str, float]:
        """The step's metrics (process means), ``entropy`` and ``step``; resets the sums."""
        out = process_mean({k: self.sums[k] / self.counts[k] for k in self.sums}, accelerator)
        h = torch.tensor([self.entropy_sum, self.entropy_count], dtype=torch.float64, device=accelerator.device)
        if accelerator.num_processes > 1:
            h = accelerator.reduce(h, reduction="sum")
        out["entropy"] = float(h[0] / h[1].clamp(min=1))  # rollout entropy, all tokens, all processes
        out["step"] = step
        self.reset()
        return out
