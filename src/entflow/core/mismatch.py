"""Rollout–training mismatch: the statistics of π_old / π_rollout that the corrections read and report.

The inference engine that samples a rollout (vLLM, SGLang, the lab's perturbed sampler) and the
trainer that scores it disagree on the sampled tokens' probabilities. With ``old_logp`` the
trainer's log-probabilities at rollout time and ``rollout_logp`` the engine's, every function here
reads the log-ratio ``log ρ_t = old_logp − rollout_logp`` (verl's ``log_ratio`` of
``verl/trainer/ppo/rollout_corr_helper.py``: training over rollout policy) on the valid tokens.

Definitions follow verl 0.9.1's rollout correction (written from its documented formulas, tested
against its functions in ``tests/core/test_mismatch.py``):

- importance weights (:func:`is_weights`): per token ``ρ_t``, or per sequence ``Π_t ρ_t``, the log
  clamped to ±20 (verl's ``SAFETY_BOUND``) before exponentiating; TIS truncates them at an upper
  bound C, IcePop zeroes those outside ``[lower, upper]``;
- rejection statistics (:func:`rs_statistic`): per token ``k1 = −log ρ``, ``k2 = ½(log ρ)²``,
  ``k3 = ρ − 1 − log ρ`` (log ρ clamped to ±20), or their sum, mean or max over a response;
- their metrics (:func:`is_metrics`, :func:`rs_metrics`) and the off-policy diagnostics
  (:func:`offpolicy_metrics`: KL, k3 KL, perplexities, χ²), as verl defines them. verl's masked
  mean divides by the count plus ``MEAN_GUARD`` (1e-8), so an empty response's mean is 0 and counts
  in the means over responses; the same rule holds here.

Plus what the entropy flow reads of the mismatch (:func:`k3_mean`, :func:`entropy_quartiles`,
:func:`quartile_shares`): prime-rl's ``mismatch_kl`` (the k3 mean, = verl's ``k3_kl``) and its ratio to
the mean entropy (``kl_ent_ratio``, ``src/prime_rl/trainer/rl/train.py``), and the share of the
tokens a correction masked or truncated in each quartile of the batch's token entropy.

Everything returns tensors (0-d for scalars) on the input's device and makes no host
synchronisation, so the corrections stay on entflow's fast path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from entflow.core.selection import scoped_quantile

SAFETY_BOUND = 20.0  # |log ρ| bound before exp (verl's SAFETY_BOUND: e^20 ≈ 4.9e8)
MEAN_GUARD = 1e-8  # verl's masked mean: Σ x / (Σ mask + 1e-8)
IS_LEVELS = ("token", "sequence")
RS_LEVELS = ("token", "seq_sum", "seq_mean", "seq_max")
RS_STATISTICS = ("k1", "k2", "k3")


def log_ratio(old_logp: torch.Tensor, rollout_logp: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``log ρ = old_logp − rollout_logp`` ``[N, T]``, detached, 0 off ``valid`` (padding may hold anything)."""
    return torch.where(valid, old_logp.detach() - rollout_logp.detach(), torch.zeros_like(old_logp))


def masked_mean(x: torch.Tensor, valid: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """verl's masked mean: Σ over ``valid`` of ``x`` / (count + 1e-8); per row with ``dim=-1``."""
    m = valid.to(x.dtype)
    s = torch.where(valid, x, torch.zeros_like(x))
    if dim is None:
        return s.sum() / (m.sum() + MEAN_GUARD)
    return s.sum(dim) / (m.sum(dim) + MEAN_GUARD)


def _row_sum(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return torch.where(valid, x, torch.zeros_like(x)).sum(-1)


def _masked_extreme(x: torch.Tensor, valid: torch.Tensor, largest: bool) -> torch.Tensor:
    """Max (min) of ``x`` over ``valid``; 0 when nothing is valid (verl raises there instead)."""
    v = x.masked_fill(~valid, -torch.inf if largest else torch.inf)
    out = v.amax() if largest else v.amin()
    return torch.where(valid.any(), out, torch.zeros_like(out))


def _std_unbiased(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Unbiased std of the valid entries of ``x`` [M] (``Tensor.std`` of the selection); 0 for fewer than 2."""
    n = valid.sum().to(x.dtype)
    mean = torch.where(valid, x, torch.zeros_like(x)).sum() / n.clamp(min=1)
    ss = torch.where(valid, (x - mean).square(), torch.zeros_like(x)).sum()
    return torch.where(n > 1, (ss / (n - 1).clamp(min=1)).sqrt(), torch.zeros_like(ss))


def _frac(flag: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Share of the valid entries where ``flag`` holds (plain mean over the selection; 0 if none)."""
    n = valid.sum()
    return (flag & valid).sum().to(torch.float64) / n.clamp(min=1).to(torch.float64)


# --------------------------------------------------------------------------------------------
# Importance weights (TIS, IcePop)
# --------------------------------------------------------------------------------------------


@dataclass
class ISWeights:
    """``weights`` ``[N, T]`` (0 off-mask), the ``raw`` ratios before truncation or masking, and
    the log-ratio the metrics read: ``[N, T]`` per token, ``[N, 1]`` (the response sums) per sequence."""

    weights: torch.Tensor
    raw: torch.Tensor
    metric_log_ratio: torch.Tensor


def is_weights(
    log_rho: torch.Tensor, valid: torch.Tensor, level: str, upper: float, lower: float | None = None
) -> ISWeights:
    """Rollout importance weights (verl's ``compute_rollout_correction_weights``).

    ``level="token"``: ``ρ_t = exp(clip(log ρ_t, ±20))``; ``"sequence"``: ``exp(clip(Σ_t log ρ_t, ±20))``
    on every token of the response. ``lower`` None (TIS): ``w = min(ρ, upper)``; else (IcePop):
    ``w = ρ`` inside ``[lower, upper]``, 0 outside. 0 off ``valid``.
    """
    m = valid.to(log_rho.dtype)
    if level == "token":
        metric = log_rho
        raw = torch.exp(log_rho.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    else:
        metric = _row_sum(log_rho, valid).unsqueeze(-1)
        raw = torch.exp(metric.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_rho)
    raw = raw * m
    if lower is None:
        w = raw.clamp(max=upper)
    else:
        w = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    return ISWeights(w, raw, metric)


def is_metrics(
    w: ISWeights, valid: torch.Tensor, level: str, upper: float, lower: float | None = None
) -> dict[str, torch.Tensor]:
    """verl's ``compute_is_metrics`` (keys without its ``rollout_is_`` prefix) and, for IcePop, its
    ``oob_ratio``: the weights' mean, max, min, std and effective sample size, the shares of ratios
    above ``upper`` and below ``lower`` (1/upper for TIS), and the per-response weight statistics."""
    weights, raw, lr = w.weights, w.raw, w.metric_log_ratio
    lo = 1.0 / upper if lower is None else lower
    out: dict[str, torch.Tensor] = {}
    if level == "sequence":  # over every response (an empty one has log-ratio sum 0)
        out["max"] = torch.exp(lr.amax().clamp(max=SAFETY_BOUND))
        out["min"] = torch.exp(lr.amin())
        out["mean"] = masked_mean(weights, valid)
        out["ratio_fraction_high"] = (lr > math.log(upper)).to(weights.dtype).mean()
        out["ratio_fraction_low"] = (lr < math.log(lo)).to(weights.dtype).mean()
    else:
        out["mean"] = masked_mean(weights, valid)
        out["ratio_fraction_high"] = masked_mean((raw > upper).to(weights.dtype), valid)
        out["ratio_fraction_low"] = masked_mean((raw < lo).to(weights.dtype), valid)
        out["max"] = _masked_extreme(weights, valid, largest=True)
        out["min"] = _masked_extreme(weights, valid, largest=False)
    capped = weights.clamp(min=0.0, max=upper)
    mean_c = masked_mean(capped, valid)
    var = masked_mean(capped.square(), valid) - mean_c.square()
    out["std"] = torch.where(valid.sum() > 1, var.clamp(min=0.0).sqrt(), torch.zeros_like(var))
    normalised = capped / (mean_c + MEAN_GUARD)
    second = masked_mean(normalised.square(), valid)
    # every weight 0 (IcePop's band excluding all): no effective sample (verl divides by zero there)
    out["eff_sample_size"] = torch.where(second > 0, 1.0 / second.clamp(min=1e-300), torch.zeros_like(second))
    seq = masked_mean(weights, valid, dim=-1)  # every response, an empty one 0
    every = torch.ones_like(seq, dtype=torch.bool)
    out["seq_mean"] = seq.mean()
    out["seq_std"] = _std_unbiased(seq, every)
    out["seq_max"] = seq.amax()
    out["seq_min"] = seq.amin()
    out["seq_max_deviation"] = (seq - 1.0).abs().amax()
    raw_seq = masked_mean(raw, valid, dim=-1)  # before truncation: a truncated mean never exceeds upper
    out["seq_fraction_high"] = (raw_seq > upper).to(weights.dtype).mean()
    out["seq_fraction_low"] = (raw_seq < lo).to(weights.dtype).mean()
    if lower is not None:
        out["oob_ratio"] = masked_mean(((raw < lower) | (raw > upper)).to(weights.dtype), valid)
    return out


def batch_normaliser(weights: torch.Tensor, valid: torch.Tensor, level: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sum, count)`` whose ratio is verl's batch mean of the weights: over valid tokens
    (``"token"``), or over non-empty responses of each response's mean weight (``"sequence"``).
    Sums, so that micro-batches and ranks add them up (``Reducer.sum``)."""
    if level == "token":
        return torch.where(valid, weights, torch.zeros_like(weights)).sum(), valid.sum().to(weights.dtype)
    nonempty = valid.any(-1)
    seq = masked_mean(weights, valid, dim=-1)
    return torch.where(nonempty, seq, torch.zeros_like(seq)).sum(), nonempty.sum().to(weights.dtype)


def normalise(weights: torch.Tensor, total: torch.Tensor, count: torch.Tensor, level: str) -> tuple:
    """``(weights / mean, mean as reported)``: verl divides by the batch mean when it exceeds 1e-8
    (token level: Σw / (n + 1e-8); sequence level: Σ seq / max(n, 1e-8)) and reports it as
    ``batch_norm_factor`` (1 when it does not divide)."""
    mean = total / (count + MEAN_GUARD) if level == "token" else total / count.clamp(min=1e-8)
    ok = mean > 1e-8
    return torch.where(ok, weights / mean.clamp(min=1e-8), weights), torch.where(ok, mean, torch.ones_like(mean))


# --------------------------------------------------------------------------------------------
# Rejection statistics
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RSBounds:
    """Bounds of one rejection criterion as the statistic is compared: ``(log lower, log upper)``
    for k1 (a band on −log ρ), ``(None, upper)`` for k2 / k3."""

    lower: float | None
    upper: float

    @staticmethod
    def of(statistic: str, upper: float, lower: float | None) -> RSBounds:
        """verl's reading of ``rollout_rs_threshold``: for k1 the ratio bounds ``lower_upper``
        (``lower`` None: 1/upper), compared in log space; for k2 / k3 an upper bound."""
        if statistic == "k1":
            return RSBounds(math.log(1.0 / upper if lower is None else lower), math.log(upper))
        return RSBounds(None, upper)


def token_divergence(log_rho: torch.Tensor, statistic: str) -> torch.Tensor:
    """Per token, log ρ clamped to ±20: ``k1 = −log ρ``, ``k2 = ½(log ρ)²``, ``k3 = e^{log ρ} − 1 − log ρ``."""
    lr = log_rho.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    if statistic == "k1":
        return -lr
    if statistic == "k2":
        return 0.5 * lr.square()
    return torch.exp(lr) - 1.0 - lr


def rs_statistic(
    log_rho: torch.Tensor, valid: torch.Tensor, level: str, statistic: str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(per-token statistic [N, T], per-response statistic [N] or None)``: the token divergence,
    or its sum / verl's masked mean / max over each response (an empty response: 0), broadcast."""
    d = token_divergence(log_rho, statistic)
    if level == "token":
        return d, None
    if level == "seq_sum":
        seq = _row_sum(d, valid)
    elif level == "seq_mean":
        seq = masked_mean(d, valid, dim=-1)
    else:
        top = d.masked_fill(~valid, -torch.inf).amax(-1)
        seq = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    return seq.unsqueeze(-1).expand_as(d), seq


def rs_keep(stat: torch.Tensor, bounds: RSBounds) -> torch.Tensor:
    """Bool ``[N, T]``: the statistic inside its bounds (``lower ≤ s ≤ upper`` for k1, ``s ≤ upper`` else)."""
    keep = stat <= bounds.upper
    return keep & (stat >= bounds.lower) if bounds.lower is not None else keep


def rs_metrics(
    stat: torch.Tensor, seq: torch.Tensor | None, keep: torch.Tensor, valid: torch.Tensor, bounds: RSBounds
) -> dict[str, torch.Tensor]:
    """verl's ``compute_rs_metrics`` for one criterion (keys without ``rollout_rs_<option>_``), its
    ``masked_fraction`` / ``seq_masked_fraction``, and the batch's ``batch_seq_masked_fraction``
    (verl's ``rollout_rs_seq_masked_fraction``: over every response, an empty one included)."""
    dtype = stat.dtype
    k1 = bounds.lower is not None
    lower = bounds.lower if k1 else 0.0
    rows = valid.any(-1)  # responses with a valid token
    seq_vals = masked_mean(stat, valid, dim=-1) if seq is None else seq
    out: dict[str, torch.Tensor] = {"mean": masked_mean(stat, valid)}
    if seq is not None:  # sequence level: over the non-empty responses' statistics
        out["max"] = _masked_extreme(seq_vals, rows, largest=True)
        out["min"] = _masked_extreme(seq_vals, rows, largest=False)
        out["fraction_high"] = _frac(seq_vals > bounds.upper, rows).to(dtype)
        out["fraction_low"] = _frac(seq_vals < lower, rows).to(dtype) if k1 else torch.zeros_like(out["mean"])
    else:
        out["max"] = _masked_extreme(stat, valid, largest=True)
        out["min"] = _masked_extreme(stat, valid, largest=False)
        out["fraction_high"] = masked_mean((stat > bounds.upper).to(dtype), valid)
        out["fraction_low"] = masked_mean((stat < lower).to(dtype), valid) if k1 else torch.zeros_like(out["mean"])
    clamped = stat.clamp(min=lower, max=bounds.upper)
    mean_c = masked_mean(clamped, valid)
    var = masked_mean(clamped.square(), valid) - mean_c.square()
    out["std"] = torch.where(valid.sum() > 1, var.clamp(min=0.0).sqrt(), torch.zeros_like(var))
    any_row = rows.any()
    zero = torch.zeros_like(out["mean"])
    out["seq_mean"] = torch.where(any_row, _frac_mean(seq_vals, rows), zero)
    out["seq_std"] = _std_unbiased(seq_vals, rows)
    out["seq_max"] = _masked_extreme(seq_vals, rows, largest=True)
    out["seq_min"] = _masked_extreme(seq_vals, rows, largest=False)
    out["seq_max_deviation"] = _masked_extreme(seq_vals.abs(), rows, largest=True)
    out["seq_fraction_high"] = _frac(seq_vals > bounds.upper, rows).to(dtype)
    if k1:
        out["seq_fraction_low"] = _frac(seq_vals < lower, rows).to(dtype)
    out["masked_fraction"] = masked_mean((~keep).to(dtype), valid)
    rejected_row = (~keep & valid).any(-1)
    out["seq_masked_fraction"] = _frac(rejected_row, rows).to(dtype)
    out["batch_seq_masked_fraction"] = rejected_row.to(dtype).mean()
    return out


def _frac_mean(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Plain mean of the valid entries of ``x`` [M] (0 if none)."""
    return torch.where(valid, x, torch.zeros_like(x)).sum() / valid.sum().clamp(min=1).to(x.dtype)


# --------------------------------------------------------------------------------------------
# Off-policy diagnostics and the entropy flow
# --------------------------------------------------------------------------------------------


def offpolicy_metrics(old_logp: torch.Tensor, rollout_logp: torch.Tensor, valid: torch.Tensor) -> dict:
    """verl's ``compute_offpolicy_metrics``: ``kl`` = mean(rollout − old) (KL(π_rollout‖π_old), k1),
    ``k3_kl`` = mean(ρ − log ρ − 1), the per-response perplexities (``training_ppl``,
    ``rollout_ppl``, their logs), ``log_ppl_diff`` (mean, |mean|, max, min over responses),
    ``ppl_ratio``, ``chi2_token`` = mean ρ² − 1 and ``chi2_seq`` = mean over responses of (Π ρ)² − 1.
    Means over tokens are verl's masked means; means over responses include empty ones."""
    old = torch.where(valid, old_logp.detach(), torch.zeros_like(old_logp))
    roll = torch.where(valid, rollout_logp.detach(), torch.zeros_like(old_logp))
    lr = old - roll
    mean_old = masked_mean(old, valid, dim=-1)
    mean_roll = masked_mean(roll, valid, dim=-1)
    diff = mean_roll - mean_old
    safe = lr.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    seq = _row_sum(lr, valid).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return {
        "training_ppl": torch.exp(-mean_old).mean(),
        "training_log_ppl": (-mean_old).mean(),
        "kl": masked_mean(roll - old, valid),
        "k3_kl": masked_mean(torch.exp(lr) - lr - 1, valid),
        "rollout_ppl": torch.exp(-mean_roll).mean(),
        "rollout_log_ppl": (-mean_roll).mean(),
        "log_ppl_diff": diff.mean(),
        "log_ppl_abs_diff": diff.abs().mean(),
        "log_ppl_diff_max": diff.amax(),
        "log_ppl_diff_min": diff.amin(),
        "ppl_ratio": torch.exp(diff).mean(),
        "chi2_token": masked_mean(torch.exp(safe).square(), valid) - 1.0,
        "chi2_seq": torch.exp(2.0 * seq).mean() - 1.0,
    }


def k3_mean(log_rho: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean over ``keep`` of ``k3 = ρ − log ρ − 1`` (prime-rl's ``mismatch_kl``, verl's ``k3_kl``); 0 if empty."""
    k3 = torch.exp(log_rho) - log_rho - 1
    return torch.where(keep, k3, torch.zeros_like(k3)).sum() / keep.sum().clamp(min=1).to(k3.dtype)


QUARTILES = ("q1", "q2", "q3", "q4")


def entropy_quartiles(entropy: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Each token's entropy quartile ``[N, T]`` long in 0..3: the quartiles (linear interpolation, as
    ``torch.quantile``) of the valid tokens' entropies; q1 = H ≤ Q25 … q4 = H > Q75."""
    h = entropy.detach().reshape(-1)
    v = valid.reshape(-1)
    cuts = [scoped_quantile(h, v, q)[:1].reshape(()) for q in (0.25, 0.5, 0.75)] if h.numel() else []
    bins = torch.zeros_like(h, dtype=torch.long)
    for c in cuts:
        bins = bins + (h > c).long()
    return bins.reshape(entropy.shape)


def quartile_shares(affected: torch.Tensor, entropy: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[4]``: in each entropy quartile of the valid tokens (:func:`entropy_quartiles`), the share
    of its tokens where ``affected`` holds (0 for an empty quartile)."""
    bins = entropy_quartiles(entropy, valid)
    members = torch.stack([(bins == k) & valid for k in range(4)])  # [4, N, T]
    hits = (members & affected.unsqueeze(0)).sum((1, 2)).to(torch.float64)
    return hits / members.sum((1, 2)).clamp(min=1).to(torch.float64)


BINARY_KL_EPS = 1e-8  # AReaL's clamp of both probabilities to [eps, 1 − eps]


def binary_kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(Bern(p) ‖ Bern(q)) = p·log(p/q) + (1 − p)·log((1 − p)/(1 − q)) per token, the two
    probabilities clamped to [1e-8, 1 − 1e-8] (the KL between "this token or another" under each law).
    Computed in float64 (in float32 1 − 1e-8 rounds to 1 and the second log would be 0/0), returned
    in the input's dtype."""
    p = torch.exp(log_p.double()).clamp(BINARY_KL_EPS, 1.0 - BINARY_KL_EPS)
    q = torch.exp(log_q.double()).clamp(BINARY_KL_EPS, 1.0 - BINARY_KL_EPS)
    return (p * torch.log(p / q) + (1 - p) * torch.log((1 - p) / (1 - q))).to(log_p.dtype)
