"""Speed and memory of ``token_stats`` (log-prob + entropy, forward + backward) on a device,
side by side with the naive whole-tensor ``log_softmax`` path and, when installed, TRL's own
``selective_log_softmax`` / ``entropy_from_logits``.

The paths run interleaved (order rotated every repetition); the medians and their ratios are
reported. The check fails when entflow's outputs disagree with the naive path's, when it is
more than :data:`SLOWDOWN_LIMIT` × slower than naive (a gross regression, not a benchmark; judged
only where the naive path takes ≥ :data:`MIN_JUDGED_SECONDS`), or,
on CUDA, when its peak extra memory exceeds the naive path's (its chunked design bounds it:
docs/design.md §3). CPU peak memory is not measured here (see ``benchmarks/peer_token_stats.py``).
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from collections.abc import Callable

import torch

from entflow.core.token_stats import token_stats
from entflow.doctor.result import CheckResult, max_scaled_error, timed

SLOWDOWN_LIMIT = 3.0
# below this naive time a call's fixed overhead (Python, launches) dominates: speed is not judged
MIN_JUDGED_SECONDS = 0.02
AGREE_TOL = 1e-4  # logp and entropy vs naive, |Δ| / max(1, |naive|) (both accumulate in float32)

Path = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def shape_for(device: torch.device, quick: bool) -> tuple[int, int, int]:
    """``(B, T, V)``: Qwen's vocabulary and 4 × 1,024 tokens on a GPU, smaller on the CPU."""
    if device.type == "cpu":
        return (1, 64, 65536) if quick else (1, 256, 151936)
    return (2, 1024, 151936) if quick else (4, 1024, 151936)


def naive_path(x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole-tensor ``log_softmax`` in float32: logp ``[B, T]`` and entropy ``[B, T]``."""
    log_pi = torch.log_softmax(x.float(), dim=-1)
    return log_pi.gather(-1, ids.unsqueeze(-1)).squeeze(-1), -(log_pi.exp() * log_pi).sum(-1)


def trl_path() -> Path | None:
    """TRL's functions (its fused kernel where TRL uses one), or None without TRL."""
    if importlib.util.find_spec("trl") is None:
        return None
    from trl.trainer import utils

    if hasattr(utils, "selective_log_softmax_and_entropy"):
        return lambda x, ids: tuple(utils.selective_log_softmax_and_entropy(x, ids))  # type: ignore[return-value]
    return lambda x, ids: (utils.selective_log_softmax(x, ids), utils.entropy_from_logits(x))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def measure(path: Path, x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> tuple[float, float | None, tuple]:
    """(seconds, peak extra bytes on CUDA or None, detached (logp, entropy)) of one forward +
    backward of ``Σ w0·logp + w1·H`` through ``path``."""
    device = x.device
    x.grad = None
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    t0 = time.perf_counter()
    logp, H = path(x, ids)
    ((logp.float() * w[0]).sum() + (H.float() * w[1]).sum()).backward()
    _sync(device)
    seconds = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated(device) - base if device.type == "cuda" else None
    x.grad = None
    return seconds, peak, (logp.detach(), H.detach())


def _path_name(fn: Callable, device: torch.device) -> str:
    """Which of token_stats' paths ran: its backend="auto" choice, or the subject's name."""
    if fn is not token_stats:
        return getattr(fn, "__name__", "custom")
    from entflow.core import triton_token_stats

    return "triton kernel" if device.type == "cuda" and triton_token_stats.available() else "torch"


def check_speed(
    device: str | torch.device,
    quick: bool = False,
    fn: Callable = token_stats,
    shape: tuple[int, int, int] | None = None,
    min_judged_seconds: float = MIN_JUDGED_SECONDS,
) -> list[CheckResult]:
    """Times (and CUDA peak memory) of entflow, naive and TRL at ``shape`` ``(B, T, V)`` (default
    :func:`shape_for`); ``fn`` is the subject. Speed is judged only where the naive path takes at
    least ``min_judged_seconds``."""
    device = torch.device(device)
    label = f"speed[{device.type},token_stats logp+entropy fwd+bwd]"

    def run() -> CheckResult:
        B, T, V = shape or shape_for(device, quick)
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        g = torch.Generator().manual_seed(0)
        x = (torch.randn(B, T, V, generator=g) * 2).to(device=device, dtype=dtype).requires_grad_()
        ids = torch.randint(0, V, (B, T), generator=g).to(device)
        w = torch.randn(2, B, T, generator=g).to(device)
        paths: dict[str, Path] = {
            "entflow": lambda x, ids: tuple(fn(x, ids, stats=("logp", "entropy"), validate=False))[:2],
            "naive": naive_path,
        }
        trl = trl_path()
        if trl is not None:
            paths["trl"] = trl
        outs = {name: measure(p, x, ids, w)[2] for name, p in paths.items()}  # warm-up (Triton compiles)
        times: dict[str, list[float]] = {k: [] for k in paths}
        peaks: dict[str, list[float]] = {k: [] for k in paths}
        names = list(paths)
        for rep in range(3 if quick else 5):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                s, peak, _ = measure(paths[name], x, ids, w)
                times[name].append(s)
                if peak is not None:
                    peaks[name].append(peak)
        med = {k: statistics.median(v) for k, v in times.items()}
        agree = max(max_scaled_error(a, b) for a, b in zip(outs["entflow"], outs["naive"], strict=True))
        m = {f"{k}_seconds": v for k, v in med.items()}
        m |= {f"{k}_peak_mib": statistics.median(v) / 2**20 for k, v in peaks.items() if v}
        m["agreement_error"] = agree
        ratios = [f"{k} takes {med[k] / med['entflow']:.2f}× its time" for k in names[1:]]
        if peaks["entflow"]:
            ratios += [
                f"{k} {m[f'{k}_peak_mib'] / max(m['entflow_peak_mib'], 1e-9):.1f}× its peak memory" for k in names[1:]
            ]
        shape_s = f"{B}×{T}×{V} {str(dtype).removeprefix('torch.')}"
        mem = f", {m['entflow_peak_mib']:.0f} MiB peak" if peaks["entflow"] else ""
        path = _path_name(fn, device)
        detail = f"{shape_s}: entflow ({path}) {med['entflow'] * 1e3:.1f} ms{mem}; " + ", ".join(ratios)
        problems = []
        if not agree <= AGREE_TOL:
            problems.append(f"outputs differ from naive by {agree:.1e} (tol {AGREE_TOL:.0e})")
        if med["naive"] < min_judged_seconds:
            detail += f" (too small to judge speed: naive < {min_judged_seconds * 1e3:.0f} ms)"
        elif not med["entflow"] <= SLOWDOWN_LIMIT * med["naive"]:
            problems.append(f"{med['entflow'] / med['naive']:.1f}× slower than naive (limit {SLOWDOWN_LIMIT:g}×)")
        if peaks["entflow"] and not m["entflow_peak_mib"] <= m["naive_peak_mib"]:
            problems.append(f"peak memory {m['entflow_peak_mib']:.0f} MiB > naive's {m['naive_peak_mib']:.0f} MiB")
        ok = not problems
        return CheckResult(label, ok, detail if ok else "; ".join(problems) + f" ({detail})", measurements=m)

    return timed(label, run)
