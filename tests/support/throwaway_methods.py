"""Test-only methods, registered for one test and unregistered after (``registered``): they show
that what a method declares reaches every trainer through ``MethodNeeds`` alone."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

import torch

from entflow.core.batch import TokenBatch
from entflow.methods.base import _REGISTRY, Method, register


@contextmanager
def registered(cls: type[Method]) -> Iterator[type[Method]]:
    """``cls`` in the method registry for the duration of the block."""
    register(cls)
    try:
        yield cls
    finally:
        _REGISTRY.pop(cls.name, None)


@dataclass(repr=False)
class RolloutEntropyShaper(Method):
    """A'_t = A_t + 0.1·H^old_t: an advantage shaper that declares it reads the rollout entropy;
    records every ``old_entropy`` [N, T] and mask it was given in ``seen``."""

    name = "test_rollout_entropy_shaper"
    advantage_needs = ("old_entropy",)
    seen: ClassVar[list[tuple[torch.Tensor, torch.Tensor]]] = []

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        h = batch.require("old_entropy", self.name)
        type(self).seen.append((h.detach().clone(), batch.mask.detach().clone()))
        return adv + 0.1 * h.to(adv.dtype) * batch.mask


@dataclass(repr=False)
class UndeclaredEntropyShaper(RolloutEntropyShaper):
    """The same shaper without the declaration: no trainer knows it reads the rollout entropy."""

    name = "test_undeclared_entropy_shaper"
    advantage_needs = ()


@dataclass(repr=False)
class StrictOnPolicyMethod(Method):
    """A method whose formula assumes r ≡ 1 (one gradient step per rollout batch)."""

    name = "test_strict_on_policy"
    strict_on_policy = True


@dataclass(repr=False)
class ReferenceReader(Method):
    """A method that declares it reads reference-model log-probs (``needs = ("ref_logp",)``)."""

    name = "test_reference_reader"
    needs = ("ref_logp",)
