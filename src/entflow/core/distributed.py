"""Statistics over the whole optimisation batch: across micro-batches and data-parallel ranks.

A method's batch-level statistics (STEER's max |Ω|, OPEFO's S+/S−, the Cov means and
selections of Clip-Cov/KL-Cov, the forking-token quantile, …) are written once, against a
:class:`Reducer`. ``policy_loss`` without ``stats`` runs them with a reducer over its own
micro-batch (per call); :func:`entflow.prepare_statistics` runs the same code with a reducer over
all micro-batches of one optimizer step and, given a process group, over all ranks. Both paths
therefore share every formula and every tie rule.

The **global batch** is this order: rank 0's micro-batches in order, then rank 1's, …; within a
micro-batch, rows in order and tokens left to right. Random draws in global mode are made once
for the global batch, as one ``[N_global, T_max]`` tensor from a stream every rank shares, and
each micro-batch takes its rows — so they equal a single process's draws on the full batch
(padded to the longest micro-batch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from entflow.core.ppo import LossSpec


def _dist():
    import torch.distributed as dist

    return dist


def default_rank() -> int:
    """This process's rank in the default process group (0 without torch.distributed)."""
    dist = _dist()
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class Reducer:
    """Reduces per-micro-batch tensors over every micro-batch of this rank and, with a process
    group, over every rank (collectives: ``all_reduce`` / ``all_gather``).

    Args:
        shapes: ``[(N_i, T_i)]`` of this rank's micro-batches, in order.
        device: where results live.
        group: a ``torch.distributed`` process group, or None for this process only.
        shared: True in global-statistics mode (random draws from the stream all ranks share);
            False per call (each rank's own stream, seed + rank).
    """

    def __init__(self, shapes: list[tuple[int, int]], device: torch.device, group: Any = None, shared: bool = False):
        self.shapes = [(int(n), int(t)) for n, t in shapes]
        self.device = torch.device(device)
        self.group = group
        self.shared = shared
        if group is not None:
            dist = _dist()
            self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
            gathered: list[Any] = [None] * self.world
            dist.all_gather_object(gathered, self.shapes, group=group)  # host metadata, once per step
            self.all_shapes: list[list[tuple[int, int]]] = [list(s) for s in gathered]
        else:
            self.world, self.rank, self.all_shapes = 1, 0, [self.shapes]
        rows = [sum(n for n, _ in s) for s in self.all_shapes]
        self.n_rows = sum(rows)  # N of the global batch
        self.max_len = max((t for s in self.all_shapes for _, t in s), default=0)  # T_max
        self.n_tokens = sum(n * t for s in self.all_shapes for n, t in s)  # length of the global token vector
        offset = sum(rows[: self.rank])
        self.row_offsets = []
        for n, _ in self.shapes:
            self.row_offsets.append(offset)
            offset += n

    @property
    def is_local(self) -> bool:
        """One micro-batch, no group: everything stays a plain per-call computation."""
        return self.group is None and len(self.shapes) == 1

    # -- reductions ---------------------------------------------------------------------
    def _all_reduce(self, x: torch.Tensor, op: str) -> torch.Tensor:
        if self.group is None:
            return x
        dist = _dist()
        x = x.clone()
        dist.all_reduce(
            x, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op], group=self.group
        )
        return x

    def sum(self, xs: list[torch.Tensor]) -> torch.Tensor:
        """Σ over micro-batches (and ranks) of same-shaped tensors (e.g. 0-d partial sums)."""
        return self._all_reduce(torch.stack(list(xs)).sum(0), "sum")

    def amax(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return self._all_reduce(torch.stack(list(xs)).amax(0), "max")

    def amin(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return self._all_reduce(torch.stack(list(xs)).amin(0), "min")

    # -- the global token vector ----------------------------------------------------------
    def _sizes(self, per_row: bool) -> list[list[int]]:
        return [[n if per_row else n * t for n, t in s] for s in self.all_shapes]

    def _cat(self, xs: list[torch.Tensor], per_row: bool) -> torch.Tensor:
        local = torch.cat([x.reshape(-1) for x in xs]) if xs else torch.zeros(0, device=self.device)
        if self.group is None:
            return local
        dist = _dist()
        is_bool = local.dtype == torch.bool
        if is_bool:
            local = local.to(torch.uint8)
        totals = [sum(s) for s in self._sizes(per_row)]
        width = max(totals)
        padded = torch.zeros(width, dtype=local.dtype, device=local.device)
        padded[: local.numel()] = local
        parts = [torch.empty_like(padded) for _ in range(self.world)]
        dist.all_gather(parts, padded, group=self.group)
        out = torch.cat([p[:n] for p, n in zip(parts, totals, strict=True)])
        return out.bool() if is_bool else out

    def cat_tokens(self, xs: list[torch.Tensor]) -> torch.Tensor:
        """The global flat vector of per-token tensors ``[N_i, T_i]`` (padding included) → ``[M]``."""
        return self._cat(xs, per_row=False)

    def cat_rows(self, xs: list[torch.Tensor]) -> torch.Tensor:
        """The global vector of per-response tensors ``[N_i]`` → ``[N_global]``."""
        return self._cat(xs, per_row=True)

    def split_tokens(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """This rank's micro-batches' pieces ``[N_i, T_i]`` of a global token vector."""
        sizes = self._sizes(per_row=False)
        start = sum(sum(s) for s in sizes[: self.rank])
        out = []
        for (n, t), k in zip(self.shapes, sizes[self.rank], strict=True):
            out.append(flat[start : start + k].view(n, t))
            start += k
        return out

    def split_rows(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """This rank's micro-batches' pieces ``[N_i]`` of a global per-response vector."""
        out = []
        for (n, _), off in zip(self.shapes, self.row_offsets, strict=True):
            out.append(flat[off : off + n])
        return out

    def global_rows(self) -> list[torch.Tensor]:
        """Each micro-batch's row indices in the global batch, ``[N_i]`` long."""
        return [
            torch.arange(off, off + n, device=self.device)
            for (n, _), off in zip(self.shapes, self.row_offsets, strict=True)
        ]

    # -- randomness -----------------------------------------------------------------------
    def rand(self, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
        """U(0, 1) draws, one per token of each micro-batch → ``[[N_i, T_i]]``.

        One ``[N_global, T_max]`` draw (per call: ``[N, T]``), sliced by rows, so that the
        draws do not depend on how the batch is split.
        """
        full = torch.rand((self.n_rows, self.max_len), generator=generator, dtype=dtype, device=self.device)
        return [full[off : off + n, :t] for (n, t), off in zip(self.shapes, self.row_offsets, strict=True)]


@dataclass
class StepStatistics:
    """Batch-level statistics of one micro-batch, taken over the whole optimisation batch.

    Made by :func:`entflow.prepare_statistics`; pass to ``policy_loss(..., stats=...)`` with the
    micro-batch it was made for. ``denominator`` is the global aggregation denominator (token
    count, sequence count or N·max_len); ``methods`` maps each method part's name to its
    statistics (0-d tensors, or ``[N_i, T_i]`` selections/draws). ``spec`` is the
    :class:`~entflow.core.ppo.LossSpec` the loss runs under (``LossSpec.for_method``'s), whole;
    ``max_len`` the fixed T_max the aggregation uses (``spec.max_len``, or the longest micro-batch
    for ``seq-mean-token-sum-norm`` without one; None otherwise).
    """

    spec: LossSpec
    shape: tuple[int, int]
    denominator: torch.Tensor
    methods: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    max_len: int | None = None
    method: str = ""  # the name of the method the statistics were prepared for

    @property
    def agg(self) -> str:
        """The aggregation the statistics were prepared for (``spec.agg``)."""
        return self.spec.agg

    @property
    def clip(self) -> tuple[float, float, float | None]:
        """``(clip_low, clip_high, dual_clip)`` the statistics were prepared for (``spec.clip``)."""
        return self.spec.clip


# ------------------------------------------------------------------------------------------
# Metrics: read once, average over ranks
# ------------------------------------------------------------------------------------------

MetricValue = float | int | torch.Tensor


def _as_list(
    metrics: Mapping[str, MetricValue] | Iterable[Mapping[str, MetricValue]],
) -> list[Mapping[str, MetricValue]]:
    return [metrics] if isinstance(metrics, Mapping) else list(metrics)


def _mean_by_key(dicts: list[Mapping[str, MetricValue]]) -> tuple[list[str], list[torch.Tensor | float], list[int]]:
    keys: list[str] = []
    index: dict[str, int] = {}
    sums: list[Any] = []
    counts: list[int] = []
    for d in dicts:
        for k, v in d.items():
            if v is None:
                continue
            if k not in index:
                index[k] = len(keys)
                keys.append(k)
                sums.append(0.0)
                counts.append(0)
            i = index[k]
            v = v.detach().to(torch.float64) if isinstance(v, torch.Tensor) else float(v)
            sums[i] = sums[i] + v
            counts[i] += 1
    return keys, sums, counts


def read_metrics(metrics: Mapping[str, MetricValue] | Iterable[Mapping[str, MetricValue]]) -> dict[str, float]:
    """Metric dict(s) → floats with ONE device-to-host copy. A list (one dict per micro-batch)
    gives the mean per key over the dicts that have it."""
    keys, sums, counts = _mean_by_key(_as_list(metrics))
    tensors = [i for i, s in enumerate(sums) if isinstance(s, torch.Tensor)]
    values = [float(s) if not isinstance(s, torch.Tensor) else 0.0 for s in sums]
    if tensors:
        dev = sums[tensors[0]].device  # type: ignore[union-attr]
        host = torch.stack([sums[i].to(dev).reshape(()) for i in tensors]).cpu().tolist()  # type: ignore[union-attr]
        for i, v in zip(tensors, host, strict=True):
            values[i] = v
    return {k: v / c for k, v, c in zip(keys, values, counts, strict=True)}


def average_metrics(
    metrics: Mapping[str, MetricValue] | Iterable[Mapping[str, MetricValue]], group: Any = None
) -> dict[str, float]:
    """Metric dict(s) → floats averaged over the ranks of ``group`` (one ``all_reduce``, one
    host copy). An unweighted mean of the ranks' values: the global mean when every rank holds
    the same number of tokens. Every rank must call it with the same keys (sorted here). A list of dicts is first
    averaged per key locally, as :func:`read_metrics` does. With ``group`` None and
    ``torch.distributed`` not initialised this is :func:`read_metrics`; with ``group`` None and
    it initialised, the default group is used. Pass the result to ``method.update``."""
    dist = _dist()
    keys, sums, counts = _mean_by_key(_as_list(metrics))
    if group is None and not (dist.is_available() and dist.is_initialized()):
        return read_metrics(metrics)
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    dev = next((s.device for s in sums if isinstance(s, torch.Tensor)), None)
    if dev is None:
        backend = dist.get_backend(group)
        dev = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    vec = (
        torch.stack(
            [
                (
                    sums[i].to(dev)
                    if isinstance(sums[i], torch.Tensor)
                    else torch.tensor(sums[i], dtype=torch.float64, device=dev)
                )
                / counts[i]
                for i in order
            ]
        )
        if order
        else torch.zeros(0, dtype=torch.float64, device=dev)
    )
    dist.all_reduce(vec, op=dist.ReduceOp.SUM, group=group)
    world = dist.get_world_size(group)
    host = (vec / world).cpu().tolist()
    return {keys[i]: v for i, v in zip(order, host, strict=True)}
