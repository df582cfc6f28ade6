"""Check the data-parallel statistics path (``core.distributed`` through ``prepare_statistics``).

Two processes (gloo on the CPU; NCCL with one GPU each when two are visible) each hold half of
a batch in two micro-batches, compute the batch-level statistics over both ranks
(``prepare_statistics(..., group=WORLD)``) and back-propagate their micro-batch losses. The
summed gradient must equal one process's gradient on the whole batch, computed per call in
float64 (docs/design.md §6: the statistics of the global batch).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from entflow.doctor.result import CheckResult, compared, skipped, timed

D = torch.float64
N, T, F = 16, 6, 3
WORLD = 2
TOL = 1e-6
# methods with a batch-level statistic: the normaliser (all), STEER's max|Ω|, OPEFO's S+/S−,
# the Cov mean and top-k of KL-Cov, Clip-Cov's shared random draw
CASES: list[tuple[str, dict]] = [
    ("grpo", {}),
    ("steer", {}),
    ("opefo", {}),
    ("kl_cov", {"ratio": 0.1}),
    ("clip_cov", {"ratio": 0.1, "cov_low": -10.0, "cov_high": 10.0, "seed": 5}),
]

Prepare = Callable[..., list]


def _default_prepare(micro_batches, method, group=None):
    from entflow.methods.objective import prepare_statistics

    return prepare_statistics(micro_batches, method, group=group)  # GRPO's LossSpec: token-mean


def _batch_data() -> dict[str, torch.Tensor]:
    """One deterministic float64 batch: ragged masks, 4 groups of 4, off-policy old log-probs."""
    from entflow.core.advantages import group_advantages

    g = torch.Generator().manual_seed(7)
    lengths = torch.randint(1, T + 1, (N,), generator=g)
    lengths[0] = T
    rewards = torch.randint(0, 2, (N,), generator=g).to(D)
    rewards[:2] = torch.tensor([0.0, 1.0], dtype=D)
    base = -torch.rand(N, T, generator=g, dtype=D) * 2.5 - 0.02
    return {
        "base": base,
        "feats": torch.randn(N, T, F, generator=g, dtype=D),
        "old_logp": base + 0.3 * torch.randn(N, T, generator=g, dtype=D),
        "old_entropy": torch.rand(N, T, generator=g, dtype=D) * 2,
        "mask": (torch.arange(T) < lengths[:, None]).to(D),
        "adv": group_advantages(rewards, torch.arange(N) // 4),
    }


def _theta_grad(data, rows_per_mb, method, device, prepare: Prepare | None, group=None) -> torch.Tensor:
    """Gradient w.r.t. θ ``[F]`` of the summed micro-batch losses, where ``logp = base + feats·θ``
    (a linear "model"). ``prepare`` None: per call, the rows as one batch."""
    from entflow.core.batch import TokenBatch
    from entflow.methods.objective import policy_loss

    theta = torch.zeros(F, dtype=D, device=device, requires_grad=True)

    def batch(s, with_grad):
        lp = data["base"][s].to(device) + data["feats"][s].to(device) @ theta
        return TokenBatch(
            lp if with_grad else lp.detach(), data["old_logp"][s].to(device), data["adv"][s].to(device),
            data["mask"][s].to(device), old_entropy=data["old_entropy"][s].to(device),
        )  # fmt: skip

    stats = [None] * len(rows_per_mb)
    if prepare is not None:
        stats = prepare([batch(s, False) for s in rows_per_mb], method, group=group)
    for s, st in zip(rows_per_mb, stats, strict=True):
        policy_loss(batch(s, True), method, stats=st, metrics="none").loss.backward()
    return theta.grad.detach().cpu()


def _worker(rank: int, backend: str, port: int, out_path: str, prepare: Prepare) -> None:
    import torch.distributed as dist

    from entflow.methods.base import get_method

    torch.set_num_threads(1)
    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        data = _batch_data()
        half = N // WORLD
        lo = rank * half
        mbs = [slice(lo, lo + half // 2), slice(lo + half // 2, lo + half)]
        report = {}
        for name, params in CASES:
            m = get_method(name, **params)
            m.set_rank(0)  # the single-process reference is rank 0 of a world of one
            ref = _theta_grad(data, [slice(None)], m, torch.device("cpu"), None)
            g = _theta_grad(data, mbs, get_method(name, **params), device, prepare, group=dist.group.WORLD)
            summed = g.to(device)
            dist.all_reduce(summed)
            err = float((summed.cpu() - ref).abs().max()) / max(float(ref.abs().max()), 1e-30)
            report[name] = {"error": err, "peak": float(ref.abs().max())}
        if rank == 0:
            Path(out_path).write_text(json.dumps(report))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(backend: str, prepare: Prepare) -> dict[str, dict[str, float]]:
    """Spawn the two ranks; return rank 0's report ``{method: {"error", "peak"}}``."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "report.json")
        mp.spawn(_worker, args=(backend, _free_port(), out, prepare), nprocs=WORLD, join=True)
        return json.loads(Path(out).read_text())


def check_distributed(
    device: str | torch.device = "cpu", quick: bool = False, prepare: Prepare = _default_prepare
) -> list[CheckResult]:
    """Global statistics over 2 ranks equal one process: gloo always, NCCL when ≥ 2 GPUs.

    ``prepare`` is the subject (``prepare_statistics``'s signature; tests pass a broken one). It
    must be a module-level function: the ranks are fresh processes."""
    import torch.distributed as dist

    kind = torch.device(device).type
    if kind not in ("cpu", "cuda"):
        return [skipped(f"distributed[{kind}]", "the data-parallel check runs on cpu (gloo) and cuda (NCCL)")]
    backends = ["nccl"] if kind == "cuda" else ["gloo"]
    results: list[CheckResult] = []
    for backend in backends:
        label = f"distributed[{backend},2 ranks]"
        if not dist.is_available() or not dist.is_backend_available(backend):
            results.append(skipped(label, f"torch.distributed {backend} is not available"))
            continue
        if backend == "nccl" and torch.cuda.device_count() < WORLD:
            results.append(skipped(label, f"NCCL needs {WORLD} GPUs, {torch.cuda.device_count()} visible"))
            continue

        def run(backend=backend, label=label) -> list[CheckResult]:
            report = run_ranks(backend, prepare)
            out = []
            for name, _ in CASES:
                r = report[name]
                c = compared(f"{label}:{name}", r["error"], TOL, "summed gradient vs one process, max error")
                if not r["peak"] > 0:
                    c.ok, c.detail = False, "the reference gradient is zero: nothing was checked"
                out.append(c)
            return out

        results += timed(label, run)
    return results
