"""The rollout batch every loss, estimator and method reads (docs/design.md §1–2)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entflow.core.checks import check_finite, check_shape
from entflow.errors import MissingInputError, ShapeError


@dataclass
class TokenBatch:
    """N responses (G per prompt) of up to T tokens, right-padded.

    Per-token tensors are ``[N, T]``; ``mask`` is 1 on response tokens that count.
    ``advantages`` is ``[N]`` (broadcast over tokens) or ``[N, T]``; ``rewards`` and
    ``group_index`` are ``[N]`` (needed by sequence-level advantage shaping);
    ``reward_baselines`` ``[N]`` is the reward of a greedy response to each row's prompt (ReMax's
    baseline, drawn by the host); ``expert_mask`` ``[N]`` bool marks the rows that are expert
    demonstrations (reference solutions the task supplies) rather than samples of the policy (CHORD
    trains them by supervised fine-tuning); ``topk_logp`` ``[N, T, K]`` holds the current policy's
    log-probabilities of each position's K most probable tokens, with grad (SimKO);
    ``rollout_logp`` ``[N, T]`` holds the sampled tokens' log-probabilities as the inference engine
    that drew them computed them (vLLM's, SGLang's), beside ``old_logp``, the trainer's own at
    rollout time: the rollout–training mismatch corrections read both (methods/corrections.py).
    ``logp`` carries the gradient during an update; every other field is read detached,
    except ``entropy``, which the entropy bonus differentiates.

    ``validate=True`` (default) checks shapes, finiteness and the mask's values on
    construction; the finiteness checks read values on the host (a device synchronisation per
    field). ``validate=False`` is the fast path: nothing is checked, nothing syncs, and
    ``compute_advantages`` skips its own checks too. Use it once the input pipeline is trusted.
    """

    logp: torch.Tensor
    old_logp: torch.Tensor
    advantages: torch.Tensor | None
    mask: torch.Tensor
    entropy: torch.Tensor | None = None
    old_entropy: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    rollout_logp: torch.Tensor | None = None
    sum_p2: torch.Tensor | None = None
    sum_p2_logp: torch.Tensor | None = None
    topk_logp: torch.Tensor | None = None
    rewards: torch.Tensor | None = None
    group_index: torch.Tensor | None = None
    reward_baselines: torch.Tensor | None = None
    expert_mask: torch.Tensor | None = None
    step: int = 0
    total_steps: int | None = None
    validate: bool = True

    _TOKEN_FIELDS = ("old_logp", "entropy", "old_entropy", "ref_logp", "rollout_logp", "sum_p2", "sum_p2_logp")

    def __post_init__(self) -> None:
        if not self.validate:
            return
        if self.logp.dim() != 2:
            raise ShapeError("logp", "[N, T]", tuple(self.logp.shape))
        shape = tuple(self.logp.shape)
        n = shape[0]
        check_shape("mask", self.mask, shape, f"[N, T] = {shape} (as logp)")
        if torch.is_floating_point(self.mask):
            check_finite("mask", self.mask)
        m = self.mask.bool()
        if torch.is_floating_point(self.mask) and bool(((self.mask != 0) & (self.mask != 1)).any()):
            raise ShapeError("mask", "values in {0, 1}", "other values")
        check_finite("logp", self.logp, m)
        for name in self._TOKEN_FIELDS:
            x = getattr(self, name)
            if x is not None:
                check_shape(name, x, shape, f"[N, T] = {shape} (as logp)")
                check_finite(name, x, m)
        if self.topk_logp is not None:
            if self.topk_logp.dim() != 3 or tuple(self.topk_logp.shape[:2]) != shape:
                raise ShapeError("topk_logp", f"[N, T, K] with [N, T] = {shape} (as logp)", tuple(self.topk_logp.shape))
            check_finite("topk_logp", self.topk_logp, m.unsqueeze(-1).expand_as(self.topk_logp))
        if self.advantages is not None:
            if tuple(self.advantages.shape) not in ((n,), shape):
                raise ShapeError("advantages", f"[N] = ({n},) or [N, T] = {shape}", tuple(self.advantages.shape))
            check_finite("advantages", self.advantages, None if self.advantages.dim() == 1 else m)
        for name in ("rewards", "group_index", "reward_baselines"):
            x = getattr(self, name)
            if x is not None:
                check_shape(name, x, (n,), f"[N] = ({n},)")
                check_finite(name, x)
        if self.expert_mask is not None:
            check_shape("expert_mask", self.expert_mask, (n,), f"[N] = ({n},) bool")
            if self.expert_mask.dtype != torch.bool:
                raise ShapeError("expert_mask", f"[N] = ({n},) bool", f"dtype {self.expert_mask.dtype}")

    # --- derived views -------------------------------------------------------------------
    @property
    def valid(self) -> torch.Tensor:
        """Boolean ``[N, T]`` of tokens that count."""
        return self.mask.bool()

    @property
    def n_valid(self) -> int:
        """Number of valid tokens (a host sync; hot paths use ``valid.sum()`` as a tensor)."""
        return int(self.mask.sum())

    def token_advantages(self) -> torch.Tensor:
        """Advantages as ``[N, T]`` (detached), broadcasting ``[N]``."""
        if self.advantages is None:
            raise MissingInputError("advantages", "the policy loss (call compute_advantages first)")
        a = self.advantages.detach()
        return a.unsqueeze(-1).expand_as(self.logp) if a.dim() == 1 else a

    def entropy_for_reading(self, needed_by: str) -> torch.Tensor:
        """H for methods/estimators that do not differentiate it: ``old_entropy`` first, else
        ``entropy`` detached (docs/design.md §1). ``[N, T]``."""
        h = self.old_entropy if self.old_entropy is not None else self.entropy
        if h is None:
            raise MissingInputError("old_entropy", needed_by)
        return h.detach()

    def require(self, field: str, needed_by: str) -> torch.Tensor:
        """Return a field that ``needed_by`` cannot do without, or raise :class:`MissingInputError`."""
        x = getattr(self, field)
        if x is None:
            raise MissingInputError(field, needed_by)
        return x

    def response_lengths(self) -> torch.Tensor:
        """Number of valid tokens per response, ``[N]`` (float)."""
        return self.mask.float().sum(-1)
