"""Benchmark on a GPU: the per-token statistics, entflow's torch and Triton paths against TRL's own kernels.

Two inputs, each forward + backward of ``logp + entropy`` with random coefficients (what a policy
loss with an entropy term differentiates), bf16 inputs, float32 accumulation everywhere:

- **logits** ``[N, V]``: ``ef.token_stats(..., backend="torch" | "triton")`` with
  ``stats=("logp", "entropy")`` (``*2``) and with all four statistics (``ts4_triton``), TRL 1.16's
  ``trl.trainer.utils.selective_log_softmax_and_entropy`` (its fused Triton kernel on CUDA), and the naive
  ``log_softmax`` of the whole tensor in float32;
- **hidden** ``[N, D]`` with an LM head ``[V, D]``: ``entflow.core.token_stats_from_hidden``
  (``backend="torch" | "triton"``, logp + entropy), TRL 1.16's ``trl.kernels.ChunkedLogProbFunction``
  (its Triton kernel on CUDA, the vocabulary chunk its GRPO trainer passes) and the naive
  ``hidden @ W.T`` then ``log_softmax``.

Variants run interleaved (``benchmarks/_schedule.py``), the order rotated every repetition; time is
measured between ``torch.cuda.synchronize`` calls, peak extra memory with
``torch.cuda.max_memory_allocated`` above the inputs. Medians over ``--runs``; each variant's sums
are printed next to naive's, so a fast wrong path shows. Without CUDA, ``--device cpu`` runs the
torch variants at a small shape (a smoke run, not a measurement).

    python benchmarks/gpu_stats.py --out gpu_stats.json               # N = 8,192, V = 151,936, D = 896 and 3,584
    python benchmarks/gpu_stats.py --device cpu --tokens 64 --vocab 4096 --dims 64 --runs 2
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import platform
import statistics
import time
from collections.abc import Callable

import torch

import entflow as ef
from _schedule import interleaved  # benchmarks/_schedule.py
from entflow.core.hidden_stats import token_stats_from_hidden
from entflow.doctor.speed import naive_path

MIB = 1024 * 1024
TRL_CHUNK = 32768  # the vocabulary chunk TRL 1.16's GRPO trainer passes to ChunkedLogProbFunction
TWO = ("logp", "entropy")
FOUR = ("logp", "entropy", "sum_p2", "sum_p2_logp")

Fn = Callable[..., tuple[torch.Tensor, ...]]


def logits_variants(triton: bool, trl: bool) -> dict[str, Fn]:
    """``f(logits [N, V], ids [N]) -> (logp, entropy, ...)`` per variant."""

    out: dict[str, Fn] = {
        "ts2_torch": lambda x, ids: tuple(ef.token_stats(x, ids, stats=TWO, backend="torch"))[:2],
        "naive": naive_path,  # the doctor's speed check's naive path
    }
    if triton:
        out["ts2_triton"] = lambda x, ids: tuple(ef.token_stats(x, ids, stats=TWO, backend="triton"))[:2]
        out["ts4_triton"] = lambda x, ids: tuple(ef.token_stats(x, ids, stats=FOUR, backend="triton"))
    if trl:
        from trl.trainer.utils import selective_log_softmax_and_entropy

        out["trl"] = lambda x, ids: tuple(selective_log_softmax_and_entropy(x, ids))
    return out


def hidden_variants(triton: bool, trl: bool, tiles: list[tuple[int, int]]) -> dict[str, Fn]:
    """``f(hidden [N, D], weight [V, D], ids [N]) -> (logp, entropy)`` per variant; ``tiles`` adds
    ``hidden2_<backend>@RxC``, entflow at ``chunk_rows=R, chunk_vocab=C`` (a tile sweep)."""

    def naive(h, w, ids):
        return naive_path(h @ w.T, ids)

    def entflow(backend, rows=None, cols=None):
        def f(h, w, ids):
            ts = token_stats_from_hidden(h, w, ids, stats=TWO, chunk_rows=rows, chunk_vocab=cols, backend=backend)
            return tuple(ts)[:2]

        return f

    out: dict[str, Fn] = {"hidden2_torch": entflow("torch"), "naive": naive}
    if triton:
        out["hidden2_triton"] = entflow("triton")
    backend = "triton" if triton else "torch"
    for rows, cols in tiles:
        out[f"hidden2_{backend}@{rows}x{cols}"] = entflow(backend, rows, cols)
    if trl:
        from trl.kernels import ChunkedLogProbFunction

        def trl_fn(h, w, ids):
            res = ChunkedLogProbFunction.apply(h, w, None, ids, 1.0, TRL_CHUNK, None, 1.0, ("entropy",))
            return res[0], res[1]

        out["trl"] = trl_fn
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(f: Fn, inputs: tuple[torch.Tensor, ...], ids: torch.Tensor, device: torch.device) -> dict:
    """One forward + backward: seconds, peak extra MiB (CUDA), the outputs' sums and the gradients' norm."""
    leaves = [t.detach().requires_grad_(True) for t in inputs]
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    t0 = time.perf_counter()
    logp, entropy = f(*leaves, ids)[:2]
    (0.7 * logp.float().sum() - 1.3 * entropy.float().sum()).backward()
    _sync(device)
    seconds = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated(device) - base) / MIB if device.type == "cuda" else float("nan")
    grad_norm = sum(float(t.grad.float().norm()) ** 2 for t in leaves) ** 0.5
    return {
        "seconds": seconds,
        "peak_extra_mib": peak,
        "logp_sum": float(logp.detach().double().sum()),
        "entropy_sum": float(entropy.detach().double().sum()),
        "grad_norm": grad_norm,
    }


def bench(name: str, variants: dict[str, Fn], inputs: tuple, ids: torch.Tensor, device, runs: int) -> dict:
    for f in variants.values():  # warm-up: kernels compiled, allocator primed
        measure(f, inputs, ids, device)
    rows: dict[str, list[dict]] = {v: [] for v in variants}
    for _, order in interleaved(list(variants), runs):
        for v in order:
            rows[v].append(measure(variants[v], inputs, ids, device))
    med = {v: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for v, rs in rows.items()}
    base = med["naive"]
    print(f"\n{name}: medians of {runs} (ratio = time / naive's; sums and |grad| against naive's)")
    print(f"{'variant':<24}{'ms':>10}{'ratio':>8}{'peak MiB':>11}{'Δlogp rel':>12}{'ΔH rel':>10}{'|g|/naive':>11}")
    for v, m in med.items():
        m["ratio_to_naive"] = m["seconds"] / base["seconds"]
        m["logp_rel_diff"] = abs(m["logp_sum"] - base["logp_sum"]) / max(1.0, abs(base["logp_sum"]))
        m["entropy_rel_diff"] = abs(m["entropy_sum"] - base["entropy_sum"]) / max(1.0, abs(base["entropy_sum"]))
        m["grad_ratio"] = m["grad_norm"] / base["grad_norm"]
        print(
            f"{v:<24}{m['seconds'] * 1e3:>10.2f}{m['ratio_to_naive']:>8.2f}{m['peak_extra_mib']:>11.0f}"
            f"{m['logp_rel_diff']:>12.1e}{m['entropy_rel_diff']:>10.1e}{m['grad_ratio']:>11.4f}"
        )
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokens", type=int, default=8192, help="rows N (e.g. 8 sequences × 1,024 tokens)")
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--dims", default="896,3584", help="hidden sizes D for the hidden-state input")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--tiles", default="", help="extra hidden-state tiles ROWSxVOCAB,... (a sweep)")
    ap.add_argument("--only", default="logits,hidden", help="which inputs: logits, hidden or both")
    ap.add_argument("--out", default=None, help="write the medians as JSON here")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_stats: --device cuda but torch sees no CUDA device (use --device cpu for a smoke run)")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    triton = device.type == "cuda" and importlib.util.find_spec("triton") is not None
    trl = importlib.util.find_spec("trl") is not None
    g = torch.Generator(device="cpu").manual_seed(0)
    N, V = args.tokens, args.vocab
    ids = torch.randint(0, V, (N,), generator=g).to(device)
    env = {
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "dtype": str(dtype),
        "trl": importlib.metadata.version("trl") if trl else None,
        "triton": importlib.metadata.version("triton") if triton else None,
    }
    print(json.dumps(env))
    results: dict = {"env": env, "shape": {"N": N, "V": V}}
    only = args.only.split(",")
    tiles = [tuple(int(x) for x in t.split("x")) for t in args.tiles.split(",") if t]
    if "logits" in only:
        logits = (torch.randn(N, V, generator=g) * 2.0).to(device, dtype)  # std 2, as the CPU benchmarks
        variants = logits_variants(triton, trl)
        results["logits"] = bench(f"logits [{N}, {V}] {dtype}", variants, (logits,), ids, device, args.runs)
        del logits
    for D in (int(d) for d in args.dims.split(",") if "hidden" in only):
        h = torch.randn(N, D, generator=g).to(device, dtype)
        w = (torch.randn(V, D, generator=g) * (2.0 / D**0.5)).to(device, dtype)
        name = f"hidden [{N}, {D}] · W [{V}, {D}] {dtype}"
        results[f"hidden_D{D}"] = bench(name, hidden_variants(triton, trl, tiles), (h, w), ids, device, args.runs)
        del h, w
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
