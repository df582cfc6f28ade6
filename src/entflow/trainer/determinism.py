"""Bit-reproducible CPU kernels with several threads (docs/benchmarks.md, "Reproducibility with several threads").

With ``threads`` ≥ 2 a real-model run was not bit-reproducible on one machine: two runs of one
seed agreed for some steps and then parted in the update's gradient (same rollout, same loss,
another ``grad_norm``). The op is the backward of advanced indexing with repeated indices,
``aten::index_put_(…, accumulate=True)``: the packed update forward reads each group's last prompt
token once per response (:func:`entflow.trainer.shared_prompts.packed_response_forward`,
``body[0][reads]``), and the cached forward gathers a prompt's keys and values for every row
(transformers' ``DynamicCache.batch_select_indices``, ``keys[indices]``); their gradients sum into
one row per distinct index. On a CPU, torch's ``index_put_kernel``
(``aten/src/ATen/native/cpu/IndexKernel.cpp``) runs that sum in parallel — when the gradient has
at least ``at::internal::GRAIN_SIZE`` (32768) elements and more than one thread — as lock-free
``cpu_atomic_add_float`` (a compare-and-swap loop) from every thread, so the order of the float
additions into a shared row is the order the threads happen to reach it: with three or more rows
reading one token, split over two threads, the rounding of the sum depends on the scheduling.
``benchmarks/determinism.py`` finds it op by op.

The same kernel runs serially, in index order, when ``torch.use_deterministic_algorithms`` is on
(its ``is_deterministic`` branch; ``put_``'s accumulate kernel and ``index_copy_`` likewise).
:func:`deterministic_kernels` switches it on for a run on a CPU, with two settings that keep it to
that: ``warn_only`` (an op without a deterministic kernel warns instead of raising) and
``fill_uninitialized_memory = False`` (torch would otherwise write NaN into every new
``empty`` tensor, a memory pass per op that buys nothing here: the trainer reads no uninitialized
memory). The trainer enters it once per run (:func:`entflow.trainer.loop.train`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.utils.deterministic

__all__ = ["deterministic_kernels"]


@contextlib.contextmanager
def deterministic_kernels(enabled: bool = True) -> Iterator[None]:
    """While inside, torch's CPU kernels that would sum in a thread-scheduling-dependent order
    (``index_put_`` / ``put_`` with ``accumulate=True``: atomic float adds from every thread) sum
    serially instead, so a run with several threads repeats bit for bit. ``enabled=False``: nothing
    changes. The previous settings are restored on exit."""
    if not enabled:
        yield
        return
    was_on = torch.are_deterministic_algorithms_enabled()
    was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    was_fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = was_fill
