"""Group-relative advantages (docs/design.md §4)."""

from __future__ import annotations

import torch

from entflow.core.checks import check_finite, check_shape
from entflow.core.loss_names import SCALES as SCALES  # its 0.2 path, kept importable
from entflow.core.selection import dense_ids
from entflow.errors import ParameterError, ShapeError


def group_stats(values: torch.Tensor, group_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-response mean and unbiased std of ``values`` [N] over its group → (mean [N], std [N]).

    A group of one response has std 0 (no spread to measure). Computed in float64 on
    ``values``' device with fixed-size buffers (N slots), so it never synchronises.
    """
    inv = dense_ids(group_index.to(values.device))
    n = values.shape[0]
    v = values.to(torch.float64)
    zeros = torch.zeros(n, dtype=torch.float64, device=values.device)
    count = zeros.index_add(0, inv, torch.ones_like(v))
    mean = zeros.index_add(0, inv, v) / count.clamp(min=1)
    dev2 = zeros.index_add(0, inv, (v - mean[inv]) ** 2)
    var = dev2 / (count - 1).clamp(min=1)
    return mean[inv].to(values.dtype), var.sqrt()[inv].to(values.dtype)


def group_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    scale: str = "group",
    eps: float = 1e-6,
    validate: bool = True,
) -> torch.Tensor:
    """GRPO advantages ``A_i = (R_i − mean_g R) / (std_g R + eps)`` → ``[N]``.

    Args:
        rewards: ``[N]`` scalar reward per response.
        group_index: ``[N]`` integer id of each response's prompt (its group).
        scale: ``"group"`` divides by the group's unbiased std (GRPO); ``"batch"`` by the
            std of all rewards in the batch (group mean, batch std); ``"none"`` does not
            divide (Dr. GRPO).
        eps: added to the std.
        validate: check that the rewards are finite (a host sync); False on the fast path.

    A group whose rewards are all equal gets A = 0 exactly.
    """
    if rewards.dim() != 1:
        raise ShapeError("rewards", "[N]", tuple(rewards.shape))
    check_shape("group_index", group_index, tuple(rewards.shape), f"[N] = ({rewards.shape[0]},) (as rewards)")
    if validate:
        check_finite("rewards", rewards)
    if scale not in SCALES:
        raise ParameterError("group_advantages", "scale", f"must be one of {SCALES}, got {scale!r}")
    if not eps >= 0:
        raise ParameterError("group_advantages", "eps", f"must be >= 0, got {eps}")
    r = rewards.float() if not torch.is_floating_point(rewards) else rewards
    mean, std = group_stats(r, group_index)
    centred = r - mean
    if scale == "group":
        adv = centred / (std + eps)
    elif scale == "batch":
        adv = centred / (r.std() + eps if r.numel() > 1 else 1.0)
    else:
        adv = centred
    return torch.where(std > 0, adv, torch.zeros_like(adv))
